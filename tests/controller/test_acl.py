"""controller/acl.py: who may make each controller request (pure, no sockets), and the
name server hosting the controller asking the same table."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from acl.binding import BOUND_CODES
from acl.plain import SIGNATURE_REFUSED, AclConfig, Decision, parse_plain_acl
from controller.acl import CONTROLLER_PERMISSIONS, Need, decide, need_of
from controller.config import ControllerConfig
from controller.processor import ControllerProcessor
from controller.service import ControllerService
from controller.state_store import AlwaysLeader
from namesrv import acl as namesrv_acl
from protocol.acl import sign_fields, verify
from protocol.codes import RequestCode
from tests.controller.fakes import MemoryStore

DecideFn = Callable[[AclConfig | None, int, Mapping[str, object], str, Callable[[str], bool]],
                    Decision]

CONFIG = parse_plain_acl(
    "globalWhiteRemoteAddresses: ['10.1.1.1']\n"
    "accounts:\n"
    "  - {accessKey: broker01, secretKey: brokersecret, admin: true}\n"
    "  - {accessKey: reader01, secretKey: readersecret, defaultTopicPerm: PUB|SUB}\n"
    "  - {accessKey: trusted1, secretKey: trustedsecret, whiteRemoteAddress: 10.2.2.2}\n")

BROKER = ("broker01", "brokersecret")
READER = ("reader01", "readersecret")


def _decide(code: int, key: tuple[str, str] | None, host: str = "10.9.9.9",
            fn: DecideFn = decide) -> Decision:
    fields: dict[str, object] = {"brokerName": "b"}
    if key is not None:
        fields = sign_fields(fields, None, *key)
    return fn(CONFIG, code, fields, host, lambda s: verify(fields, None, s))


def test_every_handler_has_a_row() -> None:
    svc = ControllerService(ControllerConfig(), MemoryStore(), AlwaysLeader(), serve=False)
    table = ControllerProcessor(svc).handler_table()
    served = set(table._sync) | set(table._async)
    assert served == set(CONTROLLER_PERMISSIONS), served ^ set(CONTROLLER_PERMISSIONS)


def test_per_code_permissions() -> None:
    assert need_of(RequestCode.CONTROLLER_ELECT_MASTER) is Need.ADMIN
    assert need_of(RequestCode.CLEAN_BROKER_DATA) is Need.ADMIN
    assert need_of(RequestCode.UPDATE_CONTROLLER_CONFIG) is Need.ADMIN
    for code in (RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_REGISTER_BROKER,
                 RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET):
        assert need_of(code) is Need.BROKER
    assert need_of(RequestCode.SEND_MESSAGE) is Need.ADMIN  # no row: the strictest
    for code, need in CONTROLLER_PERMISSIONS.items():
        assert _decide(code, BROKER).allowed, code
        refused = _decide(code, None)
        assert not refused.allowed and "No accessKey" in refused.remark, code
        assert _decide(code, ("broker01", "wrongsecret")).remark == SIGNATURE_REFUSED
        assert _decide(code, None, host="10.1.1.1").allowed, code  # a global white address
        reader = _decide(code, READER)
        assert reader.allowed is (need is Need.LOOKUP), code
        if not reader.allowed:
            assert "Need admin permission" in reader.remark and need.value in reader.remark
        # an account's white address skips the signature, not the table
        assert _decide(code, ("trusted1", ""), host="10.2.2.2").allowed is (
            need is Need.LOOKUP), code


def test_state_changes_need_a_bound_signature_heartbeats_do_not() -> None:
    # a bound signature (code, time, nonce) cannot be replayed nor reused for another
    # code; heart-beats come every second from every replica: RocketMQ's plain one
    for code, need in CONTROLLER_PERMISSIONS.items():
        if code == RequestCode.BROKER_HEARTBEAT:
            assert code not in BOUND_CODES
        elif need.admin:
            assert code in BOUND_CODES, code


def test_the_name_server_checks_controller_codes_with_the_same_table() -> None:
    for code in CONTROLLER_PERMISSIONS:
        for key in (BROKER, READER, None):
            mine = _decide(code, key)
            theirs = _decide(code, key, fn=namesrv_acl.decide)
            assert (theirs.allowed, theirs.remark) == (mine.allowed, mine.remark), (code, key)
    # heart-beats inside the name server needed any known account before
    assert not _decide(RequestCode.BROKER_HEARTBEAT, READER, fn=namesrv_acl.decide).allowed
