"""A connection is a firewall: no handler outcome can end the connection's runner.

Pure tests over ``trio.testing.memory_stream_pair``: a handler that raises any
exception type, returns something that is not a command, or returns a response
that cannot be framed costs one error response, and the connection keeps
serving the next request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from protocol.codes import ResponseCode
from protocol.command import MAX_REMARK, RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.frame import FrameDecoder, encode_frame
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    PullMessageRequestHeader,
    RegisterBrokerRequestHeader,
    SendMessageRequestHeader,
)
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.errors import RemotingSendRequestError

OK, FAIL = 1, 2
MAX_FRAME = 64 * 1024


class Weird(Exception):
    """An exception type nobody expects."""


def _raise(exc: Exception) -> Callable[[RemotingConnection, RemotingCommand], Any]:
    def handler(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        raise exc
    return handler


def _return(value: Any) -> Callable[[RemotingConnection, RemotingCommand], Any]:
    def handler(conn: RemotingConnection, cmd: RemotingCommand) -> Any:
        return value(cmd) if callable(value) else value
    return handler


BAD_OUTCOMES: list[tuple[str, Callable[[RemotingConnection, RemotingCommand], Any]]] = [
    ("ValueError", _raise(ValueError("x" * 10_000_000))),
    ("KeyError", _raise(KeyError("k"))),
    ("RuntimeError", _raise(RuntimeError("dictionary changed size during iteration"))),
    ("OSError", _raise(OSError(36, "File name too long"))),
    ("RecursionError", _raise(RecursionError())),
    ("MemoryError", _raise(MemoryError())),
    ("custom", _raise(Weird("surprise"))),
    ("protocol", _raise(RemoteProtocolError("field 'x' must be an integer"))),
    ("not a command", _return("a string")),
    ("oversize body", _return(lambda c: c.response(ResponseCode.SUCCESS, body=b"x" * MAX_FRAME))),
    ("oversize remark", _return(lambda c: RemotingCommand(0, c.opaque, 1, "\x01" * MAX_FRAME))),
    ("unpackable", _return(lambda c: c.response(ResponseCode.SUCCESS, ext_fields={"x": object()}))),
    ("int too big", _return(lambda c: c.response(ResponseCode.SUCCESS, ext_fields={"x": 2**70}))),
]


async def _exchange(handler: Callable[..., Any], is_async: bool) -> list[RemotingCommand]:
    """Serve one connection with FAIL -> handler, OK -> success; send FAIL then OK."""
    table = HandlerTable()
    if is_async:
        async def async_handler(conn: RemotingConnection, cmd: RemotingCommand) -> Any:
            await trio.lowlevel.checkpoint()
            return handler(conn, cmd)
        table.register(FAIL, async_handler)
    else:
        table.register(FAIL, handler)
    table.register(OK, lambda conn, cmd: cmd.response(ResponseCode.SUCCESS, "fine"))
    server_side, client_side = trio.testing.memory_stream_pair()
    conn = RemotingConnection(server_side, table, remote_addr="test", max_frame_size=MAX_FRAME)
    decoder = FrameDecoder(MAX_FRAME)
    got: list[RemotingCommand] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        for code, opaque in ((FAIL, 7), (OK, 8)):
            await client_side.send_all(encode_frame(RemotingCommand(code, opaque).encode()))
        with trio.fail_after(5):
            while len(got) < 2:
                for payload in decoder.feed(await client_side.receive_some(65536)):
                    got.append(RemotingCommand.decode(payload))
        assert not conn.closed
        conn.close()
    return got


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name,handler", BAD_OUTCOMES, ids=[n for n, _ in BAD_OUTCOMES])
async def test_bad_handler_costs_one_error_response(
    name: str, handler: Callable[..., Any], is_async: bool
) -> None:
    failed, fine = await _exchange(handler, is_async)
    assert failed.opaque == 7 and failed.code == ResponseCode.SYSTEM_ERROR
    assert failed.remark and len(failed.remark) <= MAX_REMARK
    assert fine.opaque == 8 and fine.code == ResponseCode.SUCCESS and fine.remark == "fine"


async def test_remark_never_echoes_unbounded() -> None:
    cmd = RemotingCommand(5, 1)
    resp = cmd.response(ResponseCode.QUERY_NOT_FOUND, "key " + "\x01" * 5_000_000)
    assert resp.remark is not None and len(resp.remark) <= MAX_REMARK
    assert resp.remark.endswith("(5000004 characters)")


async def test_request_that_cannot_be_framed_raises_to_the_caller() -> None:
    server_side, _client_side = trio.testing.memory_stream_pair()
    conn = RemotingConnection(server_side, HandlerTable(), max_frame_size=MAX_FRAME)
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        with pytest.raises(RemotingSendRequestError, match="cannot be framed"):
            await conn.invoke(RemotingCommand.request(OK, body=b"x" * MAX_FRAME), 1)
        # send_response (used for oneway notifications) logs and drops instead of raising
        conn.send_response(RemotingCommand.request(OK, body=b"x" * MAX_FRAME, oneway=True))
        assert not conn.closed
        conn.close()


async def test_a_failing_connection_task_ends_only_that_connection() -> None:
    """An exception escaping a connection's own tasks closes it, logged; run() returns."""
    server_side, client_side = trio.testing.memory_stream_pair()
    table = HandlerTable()

    def spawn_bomb(conn: RemotingConnection, cmd: RemotingCommand) -> None:
        async def bomb() -> None:
            raise RuntimeError("a bug in a connection task")
        conn.spawn(bomb)

    table.register(OK, spawn_bomb)
    conn = RemotingConnection(server_side, table)
    closed = trio.Event()
    conn.on_close(lambda _c: closed.set())
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        await client_side.send_all(encode_frame(RemotingCommand(OK, 1).encode()))
        with trio.fail_after(5):
            await closed.wait()
    assert conn.closed  # the nursery above exited normally: nothing propagated


HEADER_CASES: list[tuple[type, dict[str, Any], str]] = [
    (SendMessageRequestHeader, {"producerGroup": "g", "topic": "T", "queueId": 0,
                                "sysFlag": 2**31}, "sysFlag"),
    (SendMessageRequestHeader, {"producerGroup": "g", "topic": "T", "queueId": 0,
                                "flag": -(2**31) - 1}, "flag"),
    (SendMessageRequestHeader, {"producerGroup": "g", "topic": "T", "queueId": 0,
                                "bornTimestamp": 2**63}, "bornTimestamp"),
    (SendMessageRequestHeader, {"producerGroup": "g", "topic": "T", "queueId": 0,
                                "reconsumeTimes": -1}, "reconsumeTimes"),
    (SendMessageRequestHeader, {"producerGroup": "g", "topic": "T", "queueId": 2**40},
     "queueId"),
    (SendMessageRequestHeader, {"producerGroup": "a/b", "topic": "T", "queueId": 0},
     "producerGroup"),
    (SendMessageRequestHeader, {"producerGroup": "g", "topic": "T", "queueId": 0,
                                "properties": "x" * 40000}, "properties"),
    (PullMessageRequestHeader, {"consumerGroup": "g", "topic": "T" * 128, "queueId": 0,
                                "queueOffset": 0, "maxMsgNums": 1}, "topic"),
    (PullMessageRequestHeader, {"consumerGroup": "g" * 256, "topic": "T", "queueId": 0,
                                "queueOffset": 0, "maxMsgNums": 1}, "consumerGroup"),
    (ConsumerSendMsgBackRequestHeader, {"offset": 0, "group": "nul\x00byte", "delayLevel": 1},
     "group"),
    (RegisterBrokerRequestHeader, {"brokerName": "b" * 200, "brokerAddr": "1.2.3.4:5",
                                   "clusterName": "c", "haServerAddr": "1.2.3.4:6",
                                   "brokerId": 0}, "brokerName"),
    (RegisterBrokerRequestHeader, {"brokerName": "b", "brokerAddr": "nohost",
                                   "clusterName": "c", "haServerAddr": "1.2.3.4:6",
                                   "brokerId": 0}, "brokerAddr"),
]


@pytest.mark.parametrize("cls,fields,bad", HEADER_CASES)
def test_header_fields_checked_at_the_edge(cls: type, fields: dict[str, Any], bad: str) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        cls.from_fields(fields)  # type: ignore[attr-defined]
    message = str(info.value)
    assert repr(bad) in message and len(message) < 400
