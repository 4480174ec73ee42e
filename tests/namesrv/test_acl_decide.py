"""namesrv/acl.py: the name server's ACL decision (pure, no sockets)."""

from __future__ import annotations

from acl.plain import SIGNATURE_REFUSED, Decision, parse_plain_acl
from namesrv.acl import NAMESRV_ADMIN_CODES, decide
from protocol.acl import sign_fields, verify
from protocol.codes import RequestCode

CONFIG = parse_plain_acl(
    "globalWhiteRemoteAddresses: ['10.1.1.1']\n"
    "accounts:\n"
    "  - {accessKey: nsadmin1, secretKey: adminsecret, admin: true}\n"
    "  - {accessKey: reader01, secretKey: readersecret}\n"
    "  - {accessKey: trusted1, secretKey: trustedsecret, whiteRemoteAddress: 10.2.2.2}\n")


def _decide(code: int, key: str | None, secret: str = "", host: str = "10.9.9.9",
            body: bytes | None = None) -> Decision:
    fields: dict[str, object] = {"topic": "T"}
    if key is not None:
        fields = sign_fields(fields, body, key, secret)
    return decide(CONFIG, code, fields, host, lambda s: verify(fields, body, s))


def test_reads_need_a_known_signed_account() -> None:
    route = RequestCode.GET_ROUTEINFO_BY_TOPIC
    assert _decide(route, "reader01", "readersecret").allowed
    assert _decide(route, "nsadmin1", "adminsecret").allowed
    refused = _decide(route, None)
    assert not refused.allowed and "No accessKey" in refused.remark
    # one remark for both: the answer does not tell which access keys exist
    assert _decide(route, "nobody99", "whatever").remark == SIGNATURE_REFUSED
    assert _decide(route, "reader01", "wrongsecret").remark == SIGNATURE_REFUSED
    assert _decide(route, None, host="10.1.1.1").allowed  # global white address


def test_route_and_kv_writes_need_admin() -> None:
    for code in NAMESRV_ADMIN_CODES:
        assert _decide(code, "nsadmin1", "adminsecret").allowed, code
        refused = _decide(code, "reader01", "readersecret")
        assert not refused.allowed and "Need admin permission" in refused.remark, code
        # an account's white address skips the signature, not the admin check
        assert not _decide(code, "trusted1", "", host="10.2.2.2").allowed, code
        assert not _decide(code, None).allowed, code
        assert _decide(code, None, host="10.1.1.1").allowed, code
    for code in (RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER,
                 RequestCode.DELETE_TOPIC_IN_NAMESRV, RequestCode.PUT_KV_CONFIG,
                 RequestCode.DELETE_KV_CONFIG, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                 RequestCode.ADD_WRITE_PERM_OF_BROKER):
        assert code in NAMESRV_ADMIN_CODES


def test_not_loaded_refuses() -> None:
    d = decide(None, RequestCode.GET_ROUTEINFO_BY_TOPIC, {}, "127.0.0.1", lambda s: True)
    assert not d.allowed and "no accounts are loaded" in d.remark
