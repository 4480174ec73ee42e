"""SYNC_FLUSH group commit, in virtual time."""

from __future__ import annotations

import threading

import trio
import trio.testing

from broker.group_commit import GroupCommitService
from broker.send_processor import answer_when_done
from broker.store.offset_waiters import Waiter
from broker.store.status import PutMessageStatus
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.busy_poll import BusyPoll
from tests.broker.fakes import FakeConn


def submit(svc: GroupCommitService, conn: object, response: RemotingCommand, offset: int) -> None:
    """A SYNC_FLUSH send: answered once its fsync waiter is done."""
    answer_when_done(conn, response, [svc.wait(offset)])  # type: ignore[arg-type]



class FakeLog:
    """A log whose flush reaches whatever was written when it started."""

    def __init__(self) -> None:
        self.written = 0
        self.flushes = 0
        self.gate: threading.Event | None = None

    def flush(self) -> int:
        target = self.written
        if self.gate is not None:
            self.gate.wait(10)
        self.flushes += 1
        return target


def ok_response(i: int) -> RemotingCommand:
    return RemotingCommand.request(10).response(ResponseCode.SUCCESS, ext_fields={"i": i})


async def test_one_fsync_covers_every_waiting_put() -> None:
    log = FakeLog()
    svc = GroupCommitService(log.flush, 5000, "b")
    conn = FakeConn()
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        for i in range(200):
            log.written += 100
            submit(svc, conn, ok_response(i), log.written)
        with trio.fail_after(10):
            await conn.wait_sent(200)
        assert [c.ext_fields["i"] for c in conn.sent] == list(range(200))
        assert all(c.code == ResponseCode.SUCCESS for c in conn.sent)
        assert log.flushes <= 2
        nursery.cancel_scope.cancel()


async def test_the_busy_poll_pauses_while_an_fsync_runs() -> None:
    """A spinning loop would keep the CPU and the GIL from the fsync thread:
    the poll is paused from hand-over to answer, and never left paused."""
    log = FakeLog()
    bp = BusyPoll(1000)
    paused_in_flush: list[int] = []
    flush = log.flush

    def watched_flush() -> int:
        paused_in_flush.append(bp._paused)
        return flush()

    svc = GroupCommitService(watched_flush, 5000, "b", busy_poll=bp)
    conn = FakeConn()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bp.run)
        await nursery.start(svc.run)
        for i in range(50):
            log.written += 100
            bp.touch()
            submit(svc, conn, ok_response(i), log.written)
            with trio.fail_after(10):
                await conn.wait_sent(i + 1)
        nursery.cancel_scope.cancel()
    assert [c.ext_fields["i"] for c in conn.sent] == list(range(50))
    assert paused_in_flush and set(paused_in_flush) == {1}
    assert bp._paused == 0


async def test_unflushed_put_times_out(autojump_clock: trio.testing.MockClock) -> None:
    log = FakeLog()
    log.gate = threading.Event()
    svc = GroupCommitService(log.flush, 5000, "b")
    conn = FakeConn()
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        log.written = 100
        submit(svc, conn, ok_response(0), 100)
        start = trio.current_time()
        await trio.sleep(4.9)
        assert conn.sent == []
        await trio.sleep(0.2)
        assert len(conn.sent) == 1 and conn.sent[0].code == ResponseCode.FLUSH_DISK_TIMEOUT
        assert conn.sent[0].ext_fields == {"i": 0}  # the send result still travels
        assert trio.current_time() - start < 5.2
        log.gate.set()
        await trio.sleep(1)
        assert len(conn.sent) == 1  # never answered twice
        nursery.cancel_scope.cancel()


async def test_a_send_joining_several_waiters_gets_the_worst_status() -> None:
    """SYNC_FLUSH and SYNC_MASTER share one wait: answered once both are done."""
    log = FakeLog()
    svc = GroupCommitService(log.flush, 5000, "b")
    conn = FakeConn()
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        log.written = 100
        slave = Waiter.finished(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        answer_when_done(conn, ok_response(7), [svc.wait(100), slave])  # type: ignore[arg-type]
        with trio.fail_after(10):
            await conn.wait_sent(1)
        assert conn.sent[0].code == ResponseCode.SLAVE_NOT_AVAILABLE
        assert conn.sent[0].ext_fields == {"i": 7}  # the send result still travels
        nursery.cancel_scope.cancel()
