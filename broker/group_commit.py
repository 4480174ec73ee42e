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

A failing fsync (an I/O error) is logged, rate-limited, and tried again after
a back-off (the one task of the service); the waiters it leaves end
FLUSH_DISK_TIMEOUT at their deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import outcome
import structlog
import trio

from broker.store.offset_waiters import Waiter
from broker.store.status import PutMessageStatus
from broker.waiting_sends import WaitingSends
from protocol.trio.busy_poll import BusyPoll
from protocol.trio.service import Guard
from protocol.trio.worker_thread import WorkerThread


class GroupCommitService:
    def __init__(self, flush: Callable[[], int], timeout_ms: int, broker_name: str,
                 busy_poll: BusyPoll | None = None) -> None:
        self.flush = flush
        self.busy_poll = busy_poll  # paused while an fsync runs (protocol/trio/busy_poll.py)
        self.log = structlog.get_logger("broker.flush").bind(broker=broker_name)
        self.guard = Guard(self.log, "group commit")
        self.sends = WaitingSends(PutMessageStatus.FLUSH_DISK_TIMEOUT, timeout_ms / 1000,
                                  self.guard, "flush disk timeout")
        self.waiters = self.sends.waiters
        self._thread: WorkerThread | None = None
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
        try:
            async with WorkerThread("group-commit", self.busy_poll) as thread, trio.open_nursery() as nursery:
                self._thread = thread
                nursery.start_soon(self._retry_after_failures)
                nursery.start_soon(self.sends.run_expiry)
                task_status.started()
                self._start_flush()  # sends that came before the thread
        finally:
            self._thread = None
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
        try:
            thread.submit(self.flush, partial(self._flushed, lowest))
        except trio.ClosedResourceError:  # shutting down: the waiters fail in run()
            self._in_flight = False

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
