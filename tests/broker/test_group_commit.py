"""SYNC_FLUSH group commit, in virtual time."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
import trio
import trio.testing

from broker import group_commit
from broker.aio_fsync import AioFsync
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


async def test_then_runs_after_the_answer_and_for_a_oneway_send_too() -> None:
    """The send's deferred indexing (``then``) follows its answer, timed out
    or not, and runs for a oneway send, which is never answered."""
    log = FakeLog()
    svc = GroupCommitService(log.flush, 5000, "b")
    conn = FakeConn()
    ran: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        log.written = 100
        answer_when_done(conn, ok_response(1), [svc.wait(100)],  # type: ignore[arg-type]
                         then=lambda: ran.append(len(conn.sent)))
        answer_when_done(conn, ok_response(2), [svc.wait(100)], send=False,  # type: ignore[arg-type]
                         then=lambda: ran.append(-len(conn.sent)))
        late = Waiter.finished(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        answer_when_done(conn, ok_response(3), [late],  # type: ignore[arg-type]
                         then=lambda: ran.append(10 * len(conn.sent)))
        with trio.fail_after(10):
            await conn.wait_sent(2)
        # the timed-out one first (done at once), answered before its ``then``;
        # the fsync'd pair in one round, each ``then`` after its own answer
        assert [c.code for c in conn.sent] == [ResponseCode.FLUSH_DISK_TIMEOUT,
                                               ResponseCode.SUCCESS]
        assert ran == [10, 2, -2]
        nursery.cancel_scope.cancel()


# ---- fsyncs through the kernel (broker/aio_fsync.py) ------------------------------------


class FakePlan:
    def __init__(self, files: list[tuple[object, int, int]], target: int) -> None:
        self.files = files
        self.target = target
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for _, _, fd in self.files:
            if fd != 10_000:  # not ours to close
                os.close(fd)


class DirectLog(FakeLog):
    """A log in a real file: the direct steps dup its fd, as the store does."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.flushed = 0
        self.begins = 0
        self.ends = 0
        self.busy = False  # the store's file lock is held
        self.bad_fd = False  # hand the kernel an fd it refuses
        self.plans: list[FakePlan] = []
        self.wants_next = False
        self.prepared: list[str] = []
        self.prepared_event = threading.Event()

    def write(self, n: int) -> int:
        os.pwrite(self.fd, b"m" * n, self.written)
        self.written += n
        return self.written

    def flush(self) -> int:  # the thread's way
        os.fdatasync(self.fd)
        return super().flush()

    def begin_commit_log_flush(self) -> FakePlan | None:
        if self.busy:
            return None
        self.begins += 1
        files: list[tuple[object, int, int]] = []
        if self.written > self.flushed:
            if self.bad_fd:  # a number no open file has here: EBADF at submission
                files.append(("file", self.written, 10_000))
            else:
                files.append(("file", self.written, os.dup(self.fd)))
        plan = FakePlan(files, self.written)
        self.plans.append(plan)
        return plan

    def end_commit_log_flush(self, plan: FakePlan) -> int:
        self.ends += 1
        self.flushed = max(self.flushed, plan.target)
        return self.flushed

    def commit_log_wants_next_file(self) -> bool:
        return self.wants_next

    def prepare_next_commit_log_file(self) -> None:
        self.prepared.append(threading.current_thread().name)
        self.wants_next = False
        self.prepared_event.set()

    def close(self) -> None:
        os.close(self.fd)


def aio_available() -> bool:
    a = AioFsync.open()
    if a is None:
        return False
    a.close()
    return True


needs_aio = pytest.mark.skipif(not aio_available(), reason="Linux AIO is not available here")


@pytest.fixture
def direct_log(tmp_path: Path) -> Iterator[DirectLog]:
    log = DirectLog(tmp_path / "log")
    yield log
    log.close()


class Direct(NamedTuple):
    log: DirectLog
    svc: GroupCommitService
    conn: FakeConn


@pytest.fixture
def direct(direct_log: DirectLog) -> Direct:
    """A group commit with the direct path over ``direct_log``, and a connection."""
    return Direct(direct_log, GroupCommitService(direct_log.flush, 5000, "b", direct=direct_log,
                                                 next_file=direct_log),
                  FakeConn())


@asynccontextmanager
async def serving(svc: GroupCommitService, *tasks: Callable[[], Awaitable[object]]
                  ) -> AsyncIterator[None]:
    """``svc`` (and ``tasks``) running until the block ends."""
    async with trio.open_nursery() as nursery:
        for task in tasks:
            nursery.start_soon(task)
        await nursery.start(svc.run)
        yield
        nursery.cancel_scope.cancel()


async def send_one(svc: GroupCommitService, conn: FakeConn, log: DirectLog, i: int) -> None:
    """A SYNC_FLUSH send of 100 bytes, waited for until answered."""
    answered = len(conn.sent) + 1
    submit(svc, conn, ok_response(i), log.write(100))
    with trio.fail_after(10):
        await conn.wait_sent(answered)


@needs_aio
async def test_direct_fsyncs_answer_every_put_without_the_thread(direct: Direct) -> None:
    log, svc, conn = direct
    async with serving(svc):
        for i in range(200):
            submit(svc, conn, ok_response(i), log.write(100))
        with trio.fail_after(10):
            await conn.wait_sent(200)
        for i in range(200, 220):  # one at a time too
            await send_one(svc, conn, log, i)
    assert [c.ext_fields["i"] for c in conn.sent] == list(range(220))
    assert all(c.code == ResponseCode.SUCCESS for c in conn.sent)
    assert log.flushes == 0 and log.begins >= 21 and log.ends == log.begins
    assert log.flushed == log.written
    assert all(p.closed for p in log.plans)  # every dup'ed fd closed


@needs_aio
async def test_a_busy_file_lock_or_a_refused_fd_falls_back_to_the_thread(
        direct: Direct) -> None:
    log, svc, conn = direct
    async with serving(svc):
        log.busy = True
        await send_one(svc, conn, log, 0)
        assert (log.flushes, log.begins) == (1, 0)
        log.busy, log.bad_fd = False, True
        await send_one(svc, conn, log, 1)
        assert log.flushes == 2 and log.plans[-1].closed
        log.bad_fd = False  # EBADF is not the file system's fault: direct again
        await send_one(svc, conn, log, 2)
        assert log.flushes == 2 and log.ends == 1
    assert [c.code for c in conn.sent] == [ResponseCode.SUCCESS] * 3


@needs_aio
async def test_the_files_thread_creates_the_next_file_after_a_direct_flush(direct: Direct) -> None:
    log, svc, conn = direct
    async with serving(svc):
        log.wants_next = True
        await send_one(svc, conn, log, 0)
        assert await trio.to_thread.run_sync(log.prepared_event.wait, 10)
    assert log.prepared == ["commit-log-files"]


async def test_the_files_thread_creates_the_next_file_after_a_thread_flush(
        direct_log: DirectLog) -> None:
    log = direct_log
    svc = GroupCommitService(log.flush, 5000, "b", next_file=log)  # no direct flush
    conn = FakeConn()
    async with serving(svc):
        await send_one(svc, conn, log, 0)
        assert log.prepared == []  # not wanted yet
        log.wants_next = True
        await send_one(svc, conn, log, 1)
        assert await trio.to_thread.run_sync(log.prepared_event.wait, 10)
    assert log.prepared == ["commit-log-files"] and log.flushes == 2


@pytest.mark.parametrize("aio", [False, pytest.param(True, marks=needs_aio)])
async def test_fsyncs_go_on_while_the_next_file_is_made(direct_log: DirectLog, aio: bool) -> None:
    """A file that takes long to make (warmMapedFileEnable writes all of it)
    holds up no send: it has a thread of its own."""
    log = direct_log
    release = threading.Event()
    prepare = log.prepare_next_commit_log_file

    def slow_prepare() -> None:
        assert release.wait(10)
        prepare()

    log.prepare_next_commit_log_file = slow_prepare  # type: ignore[method-assign]
    svc = GroupCommitService(log.flush, 5000, "b", direct=log if aio else None, next_file=log)
    conn = FakeConn()
    async with serving(svc):
        log.wants_next = True
        for i in range(5):  # the first starts the slow file; all are answered meanwhile
            await send_one(svc, conn, log, i)
        assert log.prepared == []
        release.set()
        assert await trio.to_thread.run_sync(log.prepared_event.wait, 10)
    assert [c.code for c in conn.sent] == [ResponseCode.SUCCESS] * 5
    assert log.prepared == ["commit-log-files"]


class FailingAio:
    """An AioFsync whose fsyncs end with EIO."""

    def __init__(self) -> None:
        self.eventfd = os.eventfd(0, os.EFD_NONBLOCK)
        self.pending: list[int] = []
        self.closed = False

    def submit(self, fd: int) -> int:
        self.pending.append(len(self.pending))
        os.eventfd_write(self.eventfd, 1)
        return self.pending[-1]

    def reap(self) -> list[tuple[int, int]]:
        try:
            os.eventfd_read(self.eventfd)
        except BlockingIOError:
            pass
        done, self.pending = [(t, errno.EIO) for t in self.pending], []
        return done

    def close(self) -> None:
        self.closed = True
        os.close(self.eventfd)


async def test_a_failed_direct_fsync_is_retried_and_its_sends_time_out(
        direct: Direct, monkeypatch: pytest.MonkeyPatch,
        autojump_clock: trio.testing.MockClock) -> None:
    failing = FailingAio()
    monkeypatch.setattr(group_commit.AioFsync, "open", classmethod(lambda cls: failing))
    log, svc, conn = direct
    async with serving(svc):
        submit(svc, conn, ok_response(0), log.write(100))
        await trio.sleep(6)  # virtual time (MockClock): past the 5 s flush timeout
        assert [c.code for c in conn.sent] == [ResponseCode.FLUSH_DISK_TIMEOUT]
        assert log.begins >= 2 and log.ends == 0  # tried again after the back-off
        assert all(p.closed for p in log.plans)
    assert failing.closed


@needs_aio
async def test_the_busy_poll_pauses_while_a_direct_fsync_runs(direct_log: DirectLog) -> None:
    log = direct_log
    bp = BusyPoll(1000)
    paused_at_submit: list[int] = []
    begin = log.begin_commit_log_flush

    def watched() -> FakePlan | None:
        paused_at_submit.append(bp._paused)
        return begin()

    log.begin_commit_log_flush = watched  # type: ignore[method-assign]
    svc = GroupCommitService(log.flush, 5000, "b", busy_poll=bp, direct=log)
    conn = FakeConn()
    async with serving(svc, bp.run):
        for i in range(30):
            bp.touch()
            submit(svc, conn, ok_response(i), log.write(100))
            assert bp._paused == 1  # from submission ...
            with trio.fail_after(10):
                await conn.wait_sent(i + 1)
            assert bp._paused == 0  # ... to the answer
    assert log.flushes == 0 and set(paused_at_submit) == {0}
