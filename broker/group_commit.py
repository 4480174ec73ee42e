"""GroupCommitService: SYNC_FLUSH acknowledgements (the fsync edge over OffsetWaiters).

A send in SYNC_FLUSH mode is answered only once its bytes are fsynced: it
registers a ``Waiter`` (broker/store/offset_waiters.py) for the offset its
bytes end at, and the send processor answers it once every waiter it joined is
done (a SYNC_MASTER's slave acknowledgement uses the same waiters). One fsync
(in a worker thread) releases every waiter it covers; a waiter still unflushed
``syncFlushTimeout`` ms after it was registered ends FLUSH_DISK_TIMEOUT. The
fsyncs run in a thread of their own (protocol/trio/worker_thread.py): a
hand-off through ``trio.to_thread`` cost as much as the fsync itself.

A failing fsync (an I/O error) is logged, rate-limited, and tried again after
a back-off; the waiters it leaves end FLUSH_DISK_TIMEOUT at their deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
import trio

from broker.store.offset_waiters import Waiter
from broker.store.status import PutMessageStatus
from broker.waiting_sends import WaitingSends
from protocol.trio.service import Guard
from protocol.trio.worker_thread import WorkerThread


class GroupCommitService:
    def __init__(self, flush: Callable[[], int], timeout_ms: int, broker_name: str) -> None:
        self.flush = flush
        self.log = structlog.get_logger("broker.flush").bind(broker=broker_name)
        self.guard = Guard(self.log, "group commit")
        self.sends = WaitingSends(PutMessageStatus.FLUSH_DISK_TIMEOUT, timeout_ms / 1000,
                                  self.guard, "flush disk timeout")
        self.waiters = self.sends.waiters
        self._wake_flusher: trio.Event | None = None
        self._thread: WorkerThread | None = None
        self.flush_count = 0

    def wait(self, next_offset: int) -> Waiter:
        """A waiter done once the commit log is flushed up to ``next_offset``."""
        w = self.sends.add(next_offset)
        ev, self._wake_flusher = self._wake_flusher, None
        if ev is not None:
            ev.set()
        return w

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with WorkerThread("group-commit") as thread, trio.open_nursery() as nursery:
                self._thread = thread
                nursery.start_soon(self._flusher)
                nursery.start_soon(self.sends.run_expiry)
                task_status.started()
        finally:
            self.waiters.fail_all(PutMessageStatus.FLUSH_DISK_TIMEOUT)

    async def _flusher(self) -> None:
        while True:
            if self.waiters.lowest_offset() is None:
                ev = self._wake_flusher = trio.Event()
                await ev.wait()
                continue
            await self.guard.run(self._flush_once)

    async def _flush_once(self) -> None:
        lowest = self.waiters.lowest_offset()
        assert self._thread is not None
        # the flushed sends are answered from the loop's wake-up itself
        flushed = await self._thread.run_sync(self.flush, on_result=self.waiters.advance)
        self.flush_count += 1
        if lowest is not None and flushed < lowest:  # logged by the guard, retried after a back-off
            raise RuntimeError(f"flush reached offset {flushed}, short of {lowest}")
