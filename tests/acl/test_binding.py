"""Signatures bound to the request code and time (protocol/acl.py sign_request,
acl/binding.py, the guards of acl/guard.py and namesrv/acl.py): pure,
the wall clock replaced."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

import pytest

from acl.binding import (
    ADMIN_REPLAY_ENTRIES,
    BOUND_CODES,
    FRESH,
    FULL,
    REPLAYED,
    ReplayCache,
    SignatureBinding,
)
from acl.guard import guard_table
from acl.plain import ADMIN_CODES, BAD_SIGNATURE, parse_plain_acl
from broker.config import BrokerConfig
from namesrv.acl import NAMESRV_ADMIN_CODES
from namesrv.acl import guard_table as namesrv_guard_table
from namesrv.config import NamesrvConfig
from protocol.acl import (
    SIGNED_CODE,
    SIGNED_NONCE,
    SIGNED_TIME,
    read_binding,
    sign_fields,
    sign_request,
    verify,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError
from protocol.trio.connection import HandlerTable

ADMIN, ADMIN_SECRET = "rocketmq2", "12345678"
CONFIG = parse_plain_acl(
    "accounts:\n"
    f"  - {{accessKey: {ADMIN}, secretKey: '{ADMIN_SECRET}', admin: true}}\n"
    "  - {accessKey: trusted1, secretKey: trustedsecret, admin: true,"
    " whiteRemoteAddress: 10.2.2.2}\n")
CONN = SimpleNamespace(remote_addr="10.1.2.3:5555")
T0 = 1_800_000_000.0  # the server's wall clock at the start, s
STATS = RequestCode.GET_TOPIC_STATS_INFO
DELETE = RequestCode.DELETE_TOPIC_IN_BROKER
SEND = RequestCode.SEND_MESSAGE_V2


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _ok(conn: object, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS)


class Guarded:
    """The broker's guard around handlers answering SUCCESS, with a fake clock."""

    def __init__(self, strict: bool = False, replay_entries: int = 1000) -> None:
        self.clock = Clock()
        self.refusals: list[tuple[int, str]] = []
        table = HandlerTable()
        for code in (STATS, DELETE, SEND, RequestCode.UPDATE_AND_CREATE_TOPIC):
            table.register(code, _ok)
        self.binding = SignatureBinding(strict=strict, replay_entries=replay_entries,
                                        clock=self.clock)
        self.table = guard_table(table, lambda: CONFIG,
                                 lambda code, why: self.refusals.append((code, why)),
                                 binding=self.binding)

    def call(self, code: int, fields: Mapping[str, object], body: bytes | None = None,
             conn: object = CONN) -> RemotingCommand:
        sync, _ = self.table.lookup(code)
        assert sync is not None
        resp = sync(conn, RemotingCommand.request(code, dict(fields), body))  # type: ignore[arg-type]
        assert resp is not None
        return resp


def bound(code: int, fields: Mapping[str, object], body: bytes | None = None,
          at: float = T0, nonce: str | None = None) -> dict[str, str]:
    """What this project's SDK sends: signed and bound to ``code`` and the time ``at``."""
    return sign_request(fields, body, code, ADMIN, ADMIN_SECRET, now_ms=int(at * 1000),
                        nonce=nonce)


def plain(fields: Mapping[str, object], body: bytes | None = None) -> dict[str, str]:
    """What RocketMQ's AclClientRPCHook sends: signed, no binding."""
    return sign_fields(fields, body, ADMIN, ADMIN_SECRET)


def refused(resp: RemotingCommand, *words: str) -> None:
    assert resp.code == ResponseCode.NO_PERMISSION, (resp.code, resp.remark)
    for word in words:
        assert word in (resp.remark or ""), (word, resp.remark)


# ---- signing


def test_sign_request_binds_code_time_and_nonce() -> None:
    fields = bound(STATS, {"topic": "T", "queueId": 3}, b"body", nonce="abc")
    assert fields[SIGNED_CODE] == str(int(STATS))
    assert fields[SIGNED_TIME] == str(int(T0 * 1000))
    assert fields[SIGNED_NONCE] == "abc"
    assert verify(fields, b"body", ADMIN_SECRET)  # signed as any other ext field
    for name in (SIGNED_CODE, SIGNED_TIME, SIGNED_NONCE):
        changed = {**fields, name: "1"}
        assert not verify(changed, b"body", ADMIN_SECRET), name
    # a random nonce each time: two equal requests in one ms sign differently
    assert bound(STATS, {"topic": "T"})["Signature"] != bound(STATS, {"topic": "T"})["Signature"]


def test_read_binding() -> None:
    assert read_binding({"topic": "T"}) is None
    b = read_binding(bound(STATS, {"topic": "T"}, nonce="n1"))
    assert b is not None and not isinstance(b, str)
    assert (b.code, b.time_ms, b.nonce) == (STATS, int(T0 * 1000), "n1")
    assert read_binding({SIGNED_CODE: 202, SIGNED_TIME: 5, SIGNED_NONCE: "x"}) is not None
    assert "lacks SignedTimestamp, SignedNonce" in str(read_binding({SIGNED_CODE: "202"}))
    for name, value in ((SIGNED_CODE, "-1"), (SIGNED_CODE, "²"), (SIGNED_TIME, "1e9"),
                        (SIGNED_TIME, "9" * 16), (SIGNED_NONCE, ""),
                        (SIGNED_NONCE, "n" * 65), (SIGNED_CODE, 1.5)):
        fields = {SIGNED_CODE: "202", SIGNED_TIME: "5", SIGNED_NONCE: "x", name: value}
        assert isinstance(read_binding(fields), str), (name, value)


# ---- the broker's guard


def test_captured_read_replayed_as_delete_is_refused() -> None:
    g = Guarded()
    captured = bound(STATS, {"topic": "T"})
    assert g.call(STATS, captured).code == ResponseCode.SUCCESS
    resp = g.call(DELETE, captured)  # the same signed fields, another code
    refused(resp, "Signature bound to request code=202 (GET_TOPIC_STATS_INFO) refused for "
                  "request code=215 (DELETE_TOPIC_IN_BROKER)")
    # RocketMQ's plain signature, as an official client's mqadmin signs a read: the read
    # is served, the same fields as a delete are not
    official = plain({"topic": "T"})
    assert g.call(STATS, official).code == ResponseCode.SUCCESS
    refused(g.call(DELETE, official), "Unbound signature refused for request code=215",
            "SignedRequestCode, SignedTimestamp, SignedNonce")
    assert g.refusals == [(DELETE, BAD_SIGNATURE), (DELETE, BAD_SIGNATURE)]


def test_admin_request_bound_is_served_once() -> None:
    g = Guarded()
    delete = bound(DELETE, {"topic": "T"})
    assert g.call(DELETE, delete).code == ResponseCode.SUCCESS
    refused(g.call(DELETE, delete), "Replayed signature refused for request code=215",
            f"SignedTimestamp={int(T0 * 1000)}")
    g.clock.now += 30
    refused(g.call(DELETE, delete), "Replayed")
    # later still, it has expired
    g.clock.now += 31
    refused(g.call(DELETE, delete), "Expired signature refused for request code=215",
            "61.0 s before the server's clock", "aclSignatureWindow=60000 ms")
    # a new request of the same content is another signature: served
    assert g.call(DELETE, bound(DELETE, {"topic": "T"}, at=g.clock.now)).code == \
        ResponseCode.SUCCESS
    assert len(g.binding.admin_seen) == 1  # the expired one was dropped on the way


def test_timestamp_window_both_ways() -> None:
    g = Guarded()
    assert g.call(DELETE, bound(DELETE, {"topic": "A"}, at=T0 - 60)).code == ResponseCode.SUCCESS
    assert g.call(DELETE, bound(DELETE, {"topic": "B"}, at=T0 + 60)).code == ResponseCode.SUCCESS
    refused(g.call(DELETE, bound(DELETE, {"topic": "C"}, at=T0 - 60.001)), "Expired",
            "60.0 s before")
    refused(g.call(DELETE, bound(DELETE, {"topic": "D"}, at=T0 + 61)), "Expired",
            "61.0 s after")


def test_data_path_keeps_rocketmq_plain_signature() -> None:
    g = Guarded()
    official = plain({"b": "T"}, b"x")
    assert g.call(SEND, official, b"x").code == ResponseCode.SUCCESS
    assert g.call(SEND, official, b"x").code == ResponseCode.SUCCESS  # no binding, no cache
    # bound data-path requests are checked and remembered as well
    ours = bound(SEND, {"b": "T"}, b"x")
    assert g.call(SEND, ours, b"x").code == ResponseCode.SUCCESS
    refused(g.call(SEND, ours, b"x"), "Replayed signature refused for request code=310")
    refused(g.call(STATS, bound(SEND, {"topic": "T"})), "bound to request code=310")
    g.clock.now += 120
    refused(g.call(SEND, bound(SEND, {"b": "T"}, b"x"), b"x"), "Expired")
    # a wrong secret is still a signature failure, whatever the binding
    wrong = sign_request({"b": "T"}, b"x", SEND, ADMIN, "not-the-secret")
    refused(g.call(SEND, wrong, b"x"), "Check signature failed")


def test_strict_mode_needs_the_binding_everywhere() -> None:
    g = Guarded(strict=True)
    refused(g.call(SEND, plain({"b": "T"}, b"x"), b"x"),
            "Unbound signature refused for request code=310",
            "aclStrictSignature=true: every request needs it")
    refused(g.call(STATS, plain({"topic": "T"})), "Unbound")
    assert g.call(SEND, bound(SEND, {"b": "T"}, b"x"), b"x").code == ResponseCode.SUCCESS
    assert g.call(STATS, bound(STATS, {"topic": "T"})).code == ResponseCode.SUCCESS


def test_white_address_and_malformed_binding() -> None:
    g = Guarded()
    # an account's white address skips the signature, and so its binding (as before)
    white = SimpleNamespace(remote_addr="10.2.2.2:1")
    assert g.call(DELETE, {"AccessKey": "trusted1", "topic": "T"}, conn=white).code == \
        ResponseCode.SUCCESS
    fields = sign_fields({"topic": "T", SIGNED_CODE: str(int(DELETE)), SIGNED_TIME: "soon",
                          SIGNED_NONCE: "n"}, None, ADMIN, ADMIN_SECRET)
    refused(g.call(DELETE, fields), "Malformed signature binding", "SignedTimestamp")


def test_default_guard_binds() -> None:
    """guard_table without a binding given checks with the defaults'."""
    table = HandlerTable()
    table.register(DELETE, _ok)
    sync, _ = guard_table(table, lambda: CONFIG).lookup(DELETE)
    assert sync is not None
    resp = sync(CONN, RemotingCommand.request(DELETE, plain({"topic": "T"})))  # type: ignore[arg-type]
    assert resp is not None and resp.code == ResponseCode.NO_PERMISSION


# ---- the name server's guard


def test_namesrv_route_lookup_replayed_as_delete_is_refused() -> None:
    clock = Clock()
    table = HandlerTable()
    route, delete = RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.DELETE_TOPIC_IN_NAMESRV
    for code in (route, delete):
        table.register(code, _ok)
    guarded = namesrv_guard_table(table, lambda: CONFIG,
                                  binding=SignatureBinding(clock=clock))

    def call(code: int, fields: Mapping[str, object]) -> RemotingCommand:
        sync, _ = guarded.lookup(code)
        assert sync is not None
        resp = sync(CONN, RemotingCommand.request(code, dict(fields)))  # type: ignore[arg-type]
        assert resp is not None
        return resp

    captured = bound(route, {"topic": "T"})
    assert call(route, captured).code == ResponseCode.SUCCESS
    refused(call(delete, captured), "bound to request code=105", "code=216")
    refused(call(delete, plain({"topic": "T"})), "Unbound signature refused for request code=216")
    ours = bound(delete, {"topic": "T"})
    assert call(delete, ours).code == ResponseCode.SUCCESS
    refused(call(delete, ours), "Replayed")


# ---- the codes, the caches, the keys


def test_bound_codes_cover_every_admin_list() -> None:
    assert ADMIN_CODES <= BOUND_CODES
    assert NAMESRV_ADMIN_CODES <= BOUND_CODES
    # what RocketMQ 4.x clients send on the data path stays out
    for code in (RequestCode.SEND_MESSAGE, SEND, RequestCode.SEND_BATCH_MESSAGE,
                 RequestCode.PULL_MESSAGE, RequestCode.HEART_BEAT,
                 RequestCode.UNREGISTER_CLIENT, RequestCode.QUERY_CONSUMER_OFFSET,
                 RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.END_TRANSACTION,
                 RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                 RequestCode.GET_CONSUMER_LIST_BY_GROUP, RequestCode.LOCK_BATCH_MQ,
                 RequestCode.UNLOCK_BATCH_MQ, RequestCode.GET_MAX_OFFSET):
        assert code not in BOUND_CODES, code


def test_replay_cache_bounds() -> None:
    evicting = ReplayCache(2)
    assert evicting.add("a", 300, 0, evict=True) == FRESH
    assert evicting.add("b", 100, 0, evict=True) == FRESH
    assert evicting.add("a", 300, 0, evict=True) == REPLAYED
    assert evicting.add("c", 200, 0, evict=True) == FRESH  # forgets b, nearest its expiry
    assert len(evicting) == 2 and evicting.evicted == 1
    assert evicting.add("b", 100, 0, evict=True) == FRESH
    refusing = ReplayCache(2)
    assert refusing.add("a", 100, 0, evict=False) == FRESH
    assert refusing.add("b", 200, 0, evict=False) == FRESH
    assert refusing.add("c", 300, 50, evict=False) == FULL
    assert refusing.add("c", 300, 100, evict=False) == FRESH  # a expired at 100
    assert len(refusing) == 2


def test_full_admin_cache_refuses_data_cache_forgets() -> None:
    g = Guarded(replay_entries=2)
    for i in range(3):  # the data path: the oldest is forgotten, nothing refused
        assert g.call(SEND, bound(SEND, {"b": "T"}, b"x", nonce=str(i)), b"x").code == \
            ResponseCode.SUCCESS
    assert len(g.binding.data_seen) == 2 and g.binding.data_seen.evicted == 1
    cache = g.binding.admin_seen
    for i in range(ADMIN_REPLAY_ENTRIES):
        cache.add(f"k{i}", int(T0 * 1000) + 60_000, int(T0 * 1000), evict=False)
    refused(g.call(DELETE, bound(DELETE, {"topic": "T"})),
            "Too many signed admin requests within aclSignatureWindow", "retry later")


@pytest.mark.parametrize("cls", [BrokerConfig, NamesrvConfig])
def test_config_keys(cls: type[BrokerConfig] | type[NamesrvConfig]) -> None:
    config = cls()
    assert (config.acl_signature_window, config.acl_strict_signature,
            config.acl_replay_cache_size) == (60_000, False, 100_000)
    for key in ("acl_signature_window", "acl_replay_cache_size"):
        bad = cls()
        setattr(bad, key, 0)
        with pytest.raises(ConfigError, match="must be positive"):
            bad.validate()
