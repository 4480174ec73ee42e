"""A heart beat answered SYSTEM_BUSY is tried again soon, not a period later."""

from __future__ import annotations

import trio
import trio.testing

from client.instance import HEARTBEAT_BUSY_RETRIES, MQClientInstance
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio import HandlerTable, RemotingConnection, RemotingServer


async def busy_broker(nursery: trio.Nursery, busy_times: int) -> tuple[str, list[int]]:
    answers: list[int] = []

    def heart_beat(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        code = ResponseCode.SYSTEM_BUSY if len(answers) < busy_times else ResponseCode.SUCCESS
        answers.append(code)
        return cmd.response(code, "busy" if code else None)

    table = HandlerTable()
    table.register(RequestCode.HEART_BEAT, heart_beat)
    server = RemotingServer(table)
    port = await nursery.start(server.serve)
    return f"127.0.0.1:{port}", answers


async def test_busy_heartbeat_is_retried_until_taken(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        addr, answers = await busy_broker(nursery, busy_times=2)
        inst = MQClientInstance("127.0.0.1:1")
        await inst.start()
        try:
            inst.register_producer("g")
            t0 = trio.current_time()
            assert await inst._heartbeat_one(addr, b"\x80")
            assert answers == [ResponseCode.SYSTEM_BUSY] * 2 + [ResponseCode.SUCCESS]
            assert trio.current_time() - t0 < inst.heartbeat_broker_interval
        finally:
            await inst.shutdown()
        nursery.cancel_scope.cancel()


async def test_retries_are_bounded(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        addr, answers = await busy_broker(nursery, busy_times=1000)
        inst = MQClientInstance("127.0.0.1:1")
        await inst.start()
        try:
            assert not await inst._heartbeat_one(addr, b"\x80")
            assert len(answers) == HEARTBEAT_BUSY_RETRIES + 1
        finally:
            await inst.shutdown()
        nursery.cancel_scope.cancel()
