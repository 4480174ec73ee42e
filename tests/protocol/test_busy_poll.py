"""BusyPoll: the loop polls for a window after each touch, parks after it, and
stays parked while paused; connections, servers, clients and worker threads use it."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.trio import HandlerTable, RemotingClient, RemotingConnection, RemotingServer
from protocol.trio.busy_poll import (
    ENV_BUSY_POLL_US,
    MAX_BUSY_POLL_US,
    BusyPoll,
    busy_poll_us_from_env,
    check_window_us,
)
from protocol.trio.worker_thread import WorkerThread

ECHO = 100


def test_window_checks() -> None:
    for ok in (0, 1, 1000, MAX_BUSY_POLL_US):
        assert check_window_us(ok, "w") == ok
    for bad in (-1, MAX_BUSY_POLL_US + 1, True, 1.5, "5"):
        with pytest.raises(ValueError, match="w must be a whole number of µs"):
            check_window_us(bad, "w")  # type: ignore[arg-type]


def test_window_from_the_environment() -> None:
    assert busy_poll_us_from_env({}) == 0
    assert busy_poll_us_from_env({ENV_BUSY_POLL_US: ""}) == 0
    assert busy_poll_us_from_env({ENV_BUSY_POLL_US: " 250 "}) == 250
    for bad in ("-5", "abc", "1e3", "\u00b2", "\u0663", str(MAX_BUSY_POLL_US + 1)):
        with pytest.raises(ValueError, match=ENV_BUSY_POLL_US):
            busy_poll_us_from_env({ENV_BUSY_POLL_US: bad})


async def test_off_by_default() -> None:
    bp = BusyPoll(0)
    assert not bp.enabled
    bp.touch()
    with trio.fail_after(5):
        await bp.run()  # returns at once
    assert bp.spins == 0


async def _rounds(n: int) -> None:
    for _ in range(n):
        await trio.lowlevel.checkpoint()


async def test_polls_for_the_window_after_a_touch_then_parks(
        mock_clock: trio.testing.MockClock) -> None:
    # the mock clock moves only when the test says
    bp = BusyPoll(1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(bp.run)
        await trio.testing.wait_all_tasks_blocked()  # parked: nothing touched it yet
        assert bp.spins == 0
        bp.touch()
        await _rounds(20)
        spun = bp.spins
        assert spun >= 10  # a round each time the test yields
        mock_clock.jump(0.0009)  # still inside the window
        await _rounds(5)
        assert bp.spins > spun
        mock_clock.jump(0.0002)  # past it: the next round parks
        await _rounds(3)
        assert bp._parked is not None
        parked_at = bp.spins
        await _rounds(5)
        assert bp.spins == parked_at  # no more rounds
        bp.touch()  # wakes it again
        await _rounds(5)
        assert bp.spins > parked_at
        nursery.cancel_scope.cancel()


async def test_paused_means_parked_until_resumed(mock_clock: trio.testing.MockClock) -> None:
    bp = BusyPoll(1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(bp.run)
        with bp.paused():
            bp.touch()
            await _rounds(5)  # a touch does not wake it
            assert bp.spins == 0
            bp.pause()  # pauses nest
            bp.resume()
            await _rounds(5)
            assert bp.spins == 0
        await _rounds(10)  # resumed inside the window: polling again
        assert bp.spins >= 5
        nursery.cancel_scope.cancel()
    with pytest.raises(RuntimeError, match="without a pause"):
        bp.resume()


async def test_a_worker_thread_call_pauses_the_poll() -> None:
    bp = BusyPoll(1000)
    seen: list[int] = []
    def note() -> int:
        seen.append(bp._paused)
        return 5

    async with WorkerThread("t-busy", bp) as w:
        assert await w.run_sync(note) == 5
        assert bp._paused == 0  # resumed when the result came back
        done = trio.Event()
        w.submit(note, lambda result: done.set())
        await done.wait()
    assert seen == [1, 1]
    assert bp._paused == 0


async def test_server_and_client_connections_touch_their_poll() -> None:
    server_bp, client_bp = BusyPoll(1000), BusyPoll(1000)
    table = HandlerTable()

    def echo(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=cmd.body)

    table.register(ECHO, echo)
    server = RemotingServer(table, busy_poll=server_bp)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        async with RemotingClient(busy_poll=client_bp) as client:
            for i in range(20):
                resp = await client.invoke(f"127.0.0.1:{port}",
                                           RemotingCommand.request(ECHO, body=b"%d" % i), 5)
                assert resp.body == b"%d" % i
        nursery.cancel_scope.cancel()
    # each side's loop polled after requests (a round at least per request)
    assert server_bp.spins >= 20 and client_bp.spins >= 20


async def test_a_disabled_poll_is_not_run_or_touched() -> None:
    bp = BusyPoll(0)
    async with RemotingClient(busy_poll=bp) as client:
        assert client.busy_poll is None
    assert RemotingServer(HandlerTable(), busy_poll=bp).busy_poll is None
