"""GroupCommitService: SYNC_FLUSH acknowledgements (the fsync edge over OffsetWaiters).

A send in SYNC_FLUSH mode is answered only once its bytes are fsynced: it
registers a ``Waiter`` (broker/store/offset_waiters.py) for the offset its
bytes end at, and the send processor answers it once every waiter it joined is
done (a SYNC_MASTER's slave acknowledgement uses the same waiters). One fsync
(in a worker thread) releases every waiter it covers; a waiter still unflushed
``syncFlushTimeout`` ms after it was registered ends FLUSH_DISK_TIMEOUT. The
fsyncs run in a thread of their own (protocol/trio/worker_thread.py): a
hand-off through ``trio.to_thread`` cost as much as the fsync itself.

No task stands between a send and its fsync: the send that finds no fsync
running hands one to the thread at once, and the loop's wake-up that hears an
fsync ended answers the sends it covered and hands over the next one if sends
are waiting (about 60 µs, a scheduling round, less per SYNC_FLUSH send on the
2-core target than waking a flusher task).

Where Linux AIO is available and the service is given the store's direct
flush steps (``DirectFlush``), the fsync is not handed to the thread at all:
the loop dups the fds of the files to sync, submits an fdatasync of each to the
kernel (broker/aio_fsync.py) and hears of their end on an eventfd, with no
thread woken and no GIL handed over (a SYNC_FLUSH single send's p50 in
alternating runs is in the README). The thread then only takes a flush
whenever the store's file lock is busy or the kernel refuses a submission.

After each flush, a second thread creates the next commit-log file ahead of
need once the current one is half full (``NextFile``): with
warmMapedFileEnable that writes the whole file, and no fsync waits behind it.

A failing fsync (an I/O error) is logged, rate-limited, and tried again after
a back-off (the one task of the service); the waiters it leaves end
FLUSH_DISK_TIMEOUT at their deadline.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import outcome
import structlog
import trio

from broker.aio_fsync import AioFsync
from broker.store.offset_waiters import Waiter
from broker.store.status import PutMessageStatus
from broker.waiting_sends import WaitingSends
from protocol.trio.busy_poll import BusyPoll, active
from protocol.trio.service import Guard
from protocol.trio.worker_thread import WorkerThread


class FlushPlan(Protocol):
    """The fds ``DirectFlush.begin`` dup'ed, one per file to fsync."""

    files: list[tuple[Any, int, int]]  # (file, write position, fd)

    def close(self) -> None: ...


class DirectFlush(Protocol):
    """The store's steps of a commit-log flush that no thread runs
    (DefaultMessageStore's ``*_commit_log_*`` methods)."""

    def begin_commit_log_flush(self) -> FlushPlan | None: ...

    def end_commit_log_flush(self, plan: Any) -> int: ...


class NextFile(Protocol):
    """The store's creation of the next commit-log file (DefaultMessageStore)."""

    def commit_log_wants_next_file(self) -> bool: ...

    def prepare_next_commit_log_file(self) -> None: ...


@dataclass(slots=True)
class _InFlight:
    """A direct flush the kernel is running: its plan, the tokens not yet
    reaped, the first errno reported, the lowest waiter it was started for."""

    plan: FlushPlan
    tokens: set[int]
    errno: int
    lowest: int
    started: float  # perf_counter before the first submission


class GroupCommitService:
    def __init__(self, flush: Callable[[], int], timeout_ms: int, broker_name: str,
                 busy_poll: BusyPoll | None = None, direct: DirectFlush | None = None,
                 observe: Callable[[float], None] | None = None,
                 next_file: NextFile | None = None) -> None:
        self.flush = flush  # must not create files: next_file does, in its own thread
        # the kernel's fsyncs (broker/aio_fsync.py) when given and available
        self.direct = direct
        self.next_file = next_file
        self.observe = observe  # seconds of each direct flush, submission to end
        self._aio: AioFsync | None = None
        self._direct: _InFlight | None = None  # the direct flush in flight
        self._preparing = False  # the next commit-log file is being created
        self._paused: BusyPoll | None = None  # paused by the direct flush in flight
        self.busy_poll = busy_poll  # paused while an fsync runs (protocol/trio/busy_poll.py)
        self.log = structlog.get_logger("broker.flush").bind(broker=broker_name)
        self.guard = Guard(self.log, "group commit")
        self.sends = WaitingSends(PutMessageStatus.FLUSH_DISK_TIMEOUT, timeout_ms / 1000,
                                  self.guard, "flush disk timeout")
        self.waiters = self.sends.waiters
        self._thread: WorkerThread | None = None
        self._files: WorkerThread | None = None  # creates the next file (next_file)
        self._in_flight = False  # an fsync is running in the thread
        self._failure: Exception | None = None  # the last fsync's: the retry task backs off
        self._wake_retry: trio.Event | None = None
        self.flush_count = 0

    def wait(self, next_offset: int) -> Waiter:
        """A waiter done once the commit log is flushed up to ``next_offset``."""
        w = self.sends.add(next_offset)
        self._start_flush()
        return w

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        aio = AioFsync.open() if self.direct is not None else None
        try:
            # the files thread waits on the disk, not the CPU: a spinning loop goes on
            async with WorkerThread("group-commit", self.busy_poll) as thread, \
                    WorkerThread("commit-log-files") as files, trio.open_nursery() as nursery:
                self._thread = thread
                self._files = files
                nursery.start_soon(self._retry_after_failures)
                nursery.start_soon(self.sends.run_expiry)
                if aio is not None:
                    self._aio = aio
                    nursery.start_soon(self._reap, aio)
                self.log.info("group commit started",
                              fsync="kernel (aio)" if aio is not None else "thread")
                task_status.started()
                self._start_flush()  # sends that came before the thread
        finally:
            self._thread = None
            self._files = None
            self._aio = None
            if self._direct is not None:
                self._direct.plan.close()
                self._direct = None
                self._resume()
            if aio is not None:  # io_destroy waits for fsyncs still running
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(aio.close)
            self.waiters.fail_all(PutMessageStatus.FLUSH_DISK_TIMEOUT)

    def _start_flush(self) -> None:
        """Hand the thread an fsync now, unless one is running, the service
        is backing off after a failure, or nothing waits."""
        thread = self._thread
        if self._in_flight or self._failure is not None or thread is None:
            return
        lowest = self.waiters.lowest_offset()
        if lowest is None:
            return
        self._in_flight = True
        if self._aio is not None and self._start_direct(self._aio, lowest):
            return
        try:
            thread.submit(self.flush, partial(self._flushed, lowest))
        except trio.ClosedResourceError:  # shutting down: the waiters fail in run()
            self._in_flight = False

    # ---- the kernel's fsyncs -------------------------------------------------------

    def _start_direct(self, aio: AioFsync, lowest: int) -> bool:
        """Submit the fsyncs of a direct flush; False to use the thread instead
        (the file lock is busy, or the kernel refused the first submission)."""
        assert self.direct is not None
        try:
            plan = self.direct.begin_commit_log_flush()
        except OSError as exc:  # no fd to dup: as a failed fsync
            self._flushed(lowest, outcome.Error(exc))
            return True
        if plan is None:
            return False
        started = time.perf_counter()
        tokens: set[int] = set()
        error = 0
        for _, _, fd in plan.files:
            try:
                tokens.add(aio.submit(fd))
            except OSError as exc:
                if not tokens:  # nothing in flight: the thread takes this flush
                    plan.close()
                    self.log.warning("kernel fsync refused, using the thread",
                                     error=str(exc))
                    if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                        self._aio = None  # this file system cannot: never again
                    return False
                error = exc.errno or errno.EIO
                break
        self._direct = _InFlight(plan, tokens, error, lowest, started)
        if not tokens:  # nothing to sync: every byte was already flushed
            self._direct_done()
            return True
        # as for the thread's fsyncs: a spinning loop would keep a CPU from the kernel's worker
        self._paused = active(self.busy_poll)
        if self._paused is not None:
            self._paused.pause()
        return True

    async def _reap(self, aio: AioFsync) -> None:
        """Hear the kernel's fsyncs end and finish the flush they belong to."""
        while True:
            await trio.lowlevel.wait_readable(aio.eventfd)
            done = aio.reap()
            flight = self._direct
            if flight is None:
                continue
            for token, err in done:
                flight.tokens.discard(token)
                flight.errno = flight.errno or err
            if not flight.tokens:
                self._direct_done()

    def _direct_done(self) -> None:
        flight, self._direct = self._direct, None
        assert flight is not None and self.direct is not None
        flight.plan.close()
        self._resume()
        if self.observe is not None:
            self.observe(time.perf_counter() - flight.started)
        if flight.errno:
            result: outcome.Outcome[int] = outcome.Error(OSError(
                flight.errno, f"fdatasync of the commit log failed: {os.strerror(flight.errno)}"))
        else:
            result = outcome.Value(self.direct.end_commit_log_flush(flight.plan))
        self._flushed(flight.lowest, result)

    def _resume(self) -> None:
        paused, self._paused = self._paused, None
        if paused is not None:
            paused.resume()

    def _prepare_next_file(self) -> None:
        """Have the files thread create the next commit-log file once the
        current one is half full."""
        thread, next_file = self._files, self.next_file
        if self._preparing or thread is None or next_file is None \
                or not next_file.commit_log_wants_next_file():
            return
        self._preparing = True

        def prepared(result: outcome.Outcome[None]) -> None:
            self._preparing = False
            if isinstance(result, outcome.Error):
                self.log.warning("creating the next commit-log file failed",
                                 error=str(result.error))

        try:
            thread.submit(next_file.prepare_next_commit_log_file, prepared)
        except trio.ClosedResourceError:
            self._preparing = False

    def _flushed(self, lowest: int, result: outcome.Outcome[int]) -> None:
        """On the loop, as soon as it hears an fsync ended: answer the sends it
        covered and start the next one. Never raises (a run_sync_soon callback)."""
        self._in_flight = False
        self.flush_count += 1
        try:
            flushed = result.unwrap()
            self.waiters.advance(flushed)
            if flushed < lowest:
                raise RuntimeError(f"flush reached offset {flushed}, short of {lowest}")
        except Exception as exc:
            self._failure = exc
            ev, self._wake_retry = self._wake_retry, None
            if ev is not None:
                ev.set()
            return
        self.guard.ok()
        self._start_flush()
        self._prepare_next_file()

    async def _retry_after_failures(self) -> None:
        """A failed fsync is logged (rate-limited) and, after the guard's back-off,
        tried again."""
        while True:
            if self._failure is None:
                ev = self._wake_retry = trio.Event()
                await ev.wait()
                continue
            self.guard.failed(self._failure)
            await self.guard.pause()
            self._failure = None
            self._start_flush()
