"""broker.acl.guard: the ACL check around served handlers."""

from __future__ import annotations

from types import SimpleNamespace

import trio

from broker.acl.guard import NOT_LOADED, guard_table, remote_host
from broker.acl.plain import parse_plain_acl
from protocol.acl import sign_fields
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.connection import HandlerTable

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
    resp = trio.run(async_, CONN, cmd)
    assert resp is not None and resp.code == ResponseCode.NO_PERMISSION
    assert resp.remark == NOT_LOADED
