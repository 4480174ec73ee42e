"""invoke() timeouts: one expiry task per connection wakes each request at its
own deadline, earliest first, whatever order they were made in (MockClock)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.errors import RemotingTimeoutError

SLEEPY = 300


def sleepy_server() -> HandlerTable:
    table = HandlerTable()

    async def sleepy(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        await trio.sleep(int(cmd.ext_fields["sleep"]))
        return cmd.response(ResponseCode.SUCCESS, remark=str(cmd.ext_fields["sleep"]))

    table.register(SLEEPY, sleepy)
    return table


async def test_each_request_times_out_at_its_own_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a, b = trio.testing.memory_stream_pair()
    client = RemotingConnection(a, remote_addr="server")
    server = RemotingConnection(b, sleepy_server(), remote_addr="client")
    ended: dict[str, tuple[str, float]] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        await nursery.start(server.run)
        start = trio.current_time()

        async def call(name: str, sleep: int, timeout: float) -> None:
            cmd = RemotingCommand.request(SLEEPY, {"sleep": sleep})
            try:
                r = await client.invoke(cmd, timeout)
                ended[name] = (f"answer {r.remark}", trio.current_time() - start)
            except RemotingTimeoutError:
                ended[name] = ("timeout", trio.current_time() - start)

        async with trio.open_nursery() as calls:
            # made latest-deadline first: each earlier one must wake the expiry task
            calls.start_soon(call, "t50", 100, 50.0)
            await trio.sleep(0)
            calls.start_soon(call, "t30", 100, 30.0)
            await trio.sleep(0)
            calls.start_soon(call, "t10", 100, 10.0)
            await trio.sleep(0)
            calls.start_soon(call, "ok", 5, 20.0)
        assert ended == {
            "t10": ("timeout", pytest.approx(10.0)),
            "ok": ("answer 5", pytest.approx(5.0)),
            "t30": ("timeout", pytest.approx(30.0)),
            "t50": ("timeout", pytest.approx(50.0)),
        }
        assert client._deadlines == []  # nothing left behind
        # the connection still answers, and a late answer to a timed-out request is dropped
        r = await client.invoke(RemotingCommand.request(SLEEPY, {"sleep": 1}), 5)
        assert r.remark == "1"
        nursery.cancel_scope.cancel()


async def test_a_cancelled_caller_leaves_no_deadline_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a, b = trio.testing.memory_stream_pair()
    client = RemotingConnection(a, remote_addr="server")
    server = RemotingConnection(b, sleepy_server(), remote_addr="client")
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        await nursery.start(server.run)
        with trio.move_on_after(1):
            await client.invoke(RemotingCommand.request(SLEEPY, {"sleep": 100}), 60)
        assert client._pending == {} and client._deadlines == []
        nursery.cancel_scope.cancel()
