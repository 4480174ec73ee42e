"""The symmetric RPC over real loopback sockets."""

from __future__ import annotations

import pytest
import trio

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.trio import (
    HandlerTable,
    RemotingClient,
    RemotingConnectError,
    RemotingConnection,
    RemotingServer,
    RemotingTimeoutError,
)
from tests.waits import wait_until

ECHO, LATER, ASYNC, BOOM, BAD, CALLBACK, SLOW, NOTE = range(100, 108)


def server_handlers(seen: list[RemotingCommand], slow_calls: list[RemotingCommand] | None = None
                    ) -> HandlerTable:
    t = HandlerTable()

    def echo(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=cmd.body)

    def later(conn: RemotingConnection, cmd: RemotingCommand) -> None:
        async def answer() -> None:
            await trio.sleep(0.01)
            conn.send_response(cmd.response(ResponseCode.SUCCESS, remark="later"))
        conn.spawn(answer)

    async def async_handler(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        await trio.sleep(0)
        return cmd.response(ResponseCode.SUCCESS, remark="async")

    def boom(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        raise ValueError("kaput")

    def bad(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        raise RemoteProtocolError("field 'x' must be an integer")

    async def callback(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        # the server asks the client something over the same connection
        reply = await conn.invoke(RemotingCommand.request(ECHO, body=b"from-server"), 2)
        return cmd.response(ResponseCode.SUCCESS, body=reply.body)

    async def slow(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        if slow_calls is not None:
            slow_calls.append(cmd)
        await trio.sleep(5)
        return cmd.response(ResponseCode.SUCCESS)

    def note(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(cmd)
        return cmd.response(ResponseCode.SUCCESS)

    for code, h in ((ECHO, echo), (LATER, later), (ASYNC, async_handler), (BOOM, boom),
                    (BAD, bad), (CALLBACK, callback), (SLOW, slow), (NOTE, note)):
        t.register(code, h)  # type: ignore[arg-type]
    return t


async def test_rpc_behaviour() -> None:
    seen: list[RemotingCommand] = []
    closed: list[str] = []
    slow_calls: list[RemotingCommand] = []
    server = RemotingServer(server_handlers(seen, slow_calls))
    server.on_connection_closed(lambda c: closed.append(c.remote_addr))
    client_table = HandlerTable()
    client_table.register(
        ECHO, lambda conn, cmd: cmd.response(ResponseCode.SUCCESS, body=b"client-says-" + (cmd.body or b""))
    )
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        addr = f"127.0.0.1:{port}"
        async with RemotingClient(client_table) as client:
            conn = await client.get_connection(addr)
            results: dict[int, bytes | None] = {}

            async def one(i: int) -> None:
                r = await conn.invoke(RemotingCommand.request(ECHO, body=b"%d" % i), 5)
                results[i] = r.body

            with trio.fail_after(10):
                async with trio.open_nursery() as inner:
                    for i in range(500):
                        inner.start_soon(one, i)
            assert results == {i: b"%d" % i for i in range(500)}

            assert (await conn.invoke(RemotingCommand.request(LATER), 2)).remark == "later"
            assert (await conn.invoke(RemotingCommand.request(ASYNC), 2)).remark == "async"
            r = await conn.invoke(RemotingCommand.request(BOOM), 2)
            assert r.code == ResponseCode.SYSTEM_ERROR and "kaput" in (r.remark or "")
            r = await conn.invoke(RemotingCommand.request(BAD), 2)
            assert r.code == ResponseCode.SYSTEM_ERROR and "'x'" in (r.remark or "")
            r = await conn.invoke(RemotingCommand.request(999), 2)
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            r = await conn.invoke(RemotingCommand.request(CALLBACK), 3)
            assert r.body == b"client-says-from-server"

            await conn.invoke_oneway(RemotingCommand.request(NOTE, body=b"oneway"))
            await wait_until(lambda: seen, 2, "the oneway request handled", interval=0.01)
            assert seen[0].is_oneway and seen[0].body == b"oneway"

            with trio.fail_after(2):
                with pytest.raises(RemotingTimeoutError):
                    await conn.invoke(RemotingCommand.request(SLOW), 0.2)
            # the connection still works after a timeout
            assert (await conn.invoke(RemotingCommand.request(ECHO, body=b"ok"), 2)).body == b"ok"

            # a pending invoke fails at once when the connection closes
            async def close_soon() -> None:  # once the server handles the second SLOW
                await wait_until(lambda: len(slow_calls) == 2, 5, "the SLOW request pending",
                                 interval=0.01)
                for c in list(server.connections):
                    c.close()

            nursery.start_soon(close_soon)
            with trio.fail_after(3):
                with pytest.raises(RemotingConnectError):
                    await conn.invoke(RemotingCommand.request(SLOW), 5)
        await wait_until(lambda: closed, 2, "the close callback", interval=0.01)
        nursery.cancel_scope.cancel()


async def test_connect_refused() -> None:
    async with RemotingClient(connect_timeout=1) as client:
        with pytest.raises(RemotingConnectError):
            await client.get_connection("127.0.0.1:1")
