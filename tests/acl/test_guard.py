"""acl.guard: the ACL check around served handlers."""

from __future__ import annotations

from types import SimpleNamespace

import trio

from acl.guard import NOT_LOADED, HeaderGate, guard_table, remote_host
from acl.plain import BAD_SIGNATURE, NO_ACCESS_KEY, UNKNOWN_ACCOUNT, parse_plain_acl
from namesrv.acl import header_gate as namesrv_header_gate
from protocol.acl import sign_fields
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.connection import HandlerTable
from protocol.trio.preauth import Verdict

CONFIG = parse_plain_acl(
    "accounts:\n  - accessKey: pubonly1\n    secretKey: pubsecret1\n"
    "    defaultTopicPerm: DENY\n    topicPerms:\n      - T1=PUB\n")
CONN = SimpleNamespace(remote_addr="10.1.2.3:5555")


def _table() -> HandlerTable:
    t = HandlerTable()
    t.register(RequestCode.SEND_MESSAGE_V2, lambda c, cmd: cmd.response(ResponseCode.SUCCESS))

    async def pull(c: object, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS)
    t.register(RequestCode.PULL_MESSAGE, pull)
    return t


def test_remote_host() -> None:
    assert remote_host("10.1.2.3:5555") == "10.1.2.3"
    assert remote_host("[::1]:5555") == "::1"


def test_sync_handler_allowed_and_refused() -> None:
    sync, _ = guard_table(_table(), lambda: CONFIG).lookup(RequestCode.SEND_MESSAGE_V2)
    assert sync is not None
    ok = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, sign_fields(
        {"b": "T1"}, b"x", "pubonly1", "pubsecret1"), b"x")
    assert sync(CONN, ok).code == ResponseCode.SUCCESS  # type: ignore[arg-type,union-attr]
    bad = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, sign_fields(
        {"b": "T2"}, b"x", "pubonly1", "pubsecret1"), b"x")
    resp = sync(CONN, bad)  # type: ignore[arg-type]
    assert resp is not None and resp.code == ResponseCode.NO_PERMISSION
    assert "T2" in (resp.remark or "")
    oneway = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T1"}, b"x", oneway=True)
    assert sync(CONN, oneway) is None  # type: ignore[arg-type]


def test_async_handler_and_not_loaded() -> None:
    _, async_ = guard_table(_table(), lambda: None).lookup(RequestCode.PULL_MESSAGE)
    assert async_ is not None
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T1"})
    resp = trio.run(async_, CONN, cmd)  # type: ignore[arg-type]
    assert resp is not None and resp.code == ResponseCode.NO_PERMISSION
    assert resp.remark == NOT_LOADED


# ---- before authentication: the header gate (protocol/trio/preauth.py) ----------------------

GATED = parse_plain_acl(
    "globalWhiteRemoteAddresses:\n  - 10.9.9.9\n"
    "accounts:\n  - accessKey: pubonly1\n    secretKey: pubsecret1\n"
    "    whiteRemoteAddress: 10.7.7.7\n"
    "    defaultTopicPerm: DENY\n    topicPerms:\n      - T1=PUB\n"
    "  - accessKey: reader01\n    secretKey: readsecret1\n    whiteRemoteAddress: 10.7.7.7\n")


class Conn:
    def __init__(self, remote_addr: str = "10.1.2.3:5555") -> None:
        self.remote_addr = remote_addr
        self.authenticated = False

    def authenticate(self) -> None:
        self.authenticated = True


def _send(fields: dict[str, str], oneway: bool = False) -> RemotingCommand:
    """A SEND_MESSAGE_V2 header as the gate sees it: no body yet."""
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, None, oneway=oneway)


def test_an_unsigned_header_is_refused_as_the_whole_request_would_be() -> None:
    refusals: list[tuple[int, str]] = []
    gate = HeaderGate(lambda: GATED, lambda code, reason: refusals.append((code, reason)))
    sync, _ = guard_table(_table(), lambda: GATED).lookup(RequestCode.SEND_MESSAGE_V2)
    assert sync is not None
    for fields, reason in (({"b": "T1"}, NO_ACCESS_KEY),
                           ({"b": "T1", "AccessKey": "nobody99"}, UNKNOWN_ACCOUNT),
                           ({"b": "T1", "AccessKey": "pubonly1"}, BAD_SIGNATURE)):
        judged = gate.judge(Conn(), _send(fields))
        assert judged.verdict is Verdict.REFUSE and judged.answer is not None
        whole = sync(Conn(), RemotingCommand.request(  # type: ignore[arg-type]
            RequestCode.SEND_MESSAGE_V2, fields, b"body"))
        assert whole is not None
        # the same answer as once the body is in: nothing tells which keys exist
        assert (judged.answer.code, judged.answer.remark) == (whole.code, whole.remark)
        assert refusals[-1] == (RequestCode.SEND_MESSAGE_V2, reason)
    assert gate.judge(Conn(), _send({"b": "T1"}, oneway=True)).answer is None  # not answered


def test_a_signed_header_is_read_on_and_white_addresses_pass() -> None:
    refusals: list[tuple[int, str]] = []
    gate = HeaderGate(lambda: GATED, lambda code, reason: refusals.append((code, reason)))
    signed = sign_fields({"b": "T2"}, b"x", "nobody99", "whatever1")  # any signature at all
    assert gate.judge(Conn(), _send(signed)).verdict is Verdict.READ
    assert refusals == []  # not decided yet: its body is needed
    assert gate.trusts("10.9.9.9:1") and not gate.trusts("10.1.2.3:1")
    assert HeaderGate(lambda: None).trusts("10.9.9.9:1") is False  # no accounts loaded
    # an account's white address lets its unsigned requests in, on the header
    white = gate.judge(Conn("10.7.7.7:1"), _send({"b": "T1", "AccessKey": "pubonly1"}))
    assert white.verdict is Verdict.TRUST


def test_a_request_let_in_authenticates_its_connection() -> None:
    sync, _ = guard_table(_table(), lambda: CONFIG).lookup(RequestCode.SEND_MESSAGE_V2)
    assert sync is not None
    conn = Conn()
    bad = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, sign_fields(
        {"b": "T2"}, b"x", "pubonly1", "pubsecret1"), b"x")
    sync(conn, bad)  # type: ignore[arg-type]
    assert not conn.authenticated  # refused (no permission on T2)
    ok = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, sign_fields(
        {"b": "T1"}, b"x", "pubonly1", "pubsecret1"), b"x")
    sync(conn, ok)  # type: ignore[arg-type]
    assert conn.authenticated


def test_the_name_servers_gate_asks_for_admin_on_the_header() -> None:
    gate = namesrv_header_gate(lambda: GATED)
    unregister = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, {"AccessKey": "reader01"})
    judged = gate.judge(Conn("10.7.7.7:1"), unregister)
    assert judged.verdict is Verdict.REFUSE and judged.answer is not None
    assert "Need admin permission" in (judged.answer.remark or "")
    route = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"AccessKey": "reader01"})
    assert gate.judge(Conn("10.7.7.7:1"), route).verdict is Verdict.TRUST
