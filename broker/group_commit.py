"""GroupCommitService: SYNC_FLUSH acknowledgements (the fsync edge over OffsetWaiters).

A send in SYNC_FLUSH mode is answered only once its bytes are fsynced: it
registers a ``Waiter`` (broker/store/offset_waiters.py) for the offset its
bytes end at, and the send processor answers it once every waiter it joined is
done (a SYNC_MASTER's slave acknowledgement uses the same waiters). One fsync
(in a worker thread) releases every waiter it covers; a waiter still unflushed
``syncFlushTimeout`` ms after it was registered ends FLUSH_DISK_TIMEOUT.

A failing fsync (an I/O error) is logged, rate-limited, and tried again after
a back-off; the waiters it leaves end FLUSH_DISK_TIMEOUT at their deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
import trio

from broker.store.offset_waiters import OffsetWaiters, Waiter
from broker.store.status import PutMessageStatus
from protocol.trio.service import Guard


class GroupCommitService:
    def __init__(self, flush: Callable[[], int], timeout_ms: int, broker_name: str) -> None:
        self.flush = flush
        self.timeout = timeout_ms / 1000
        self.waiters = OffsetWaiters(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        self._wake_flusher: trio.Event | None = None
        self._wake_watcher: trio.Event | None = None
        self.log = structlog.get_logger("broker.flush").bind(broker=broker_name)
        self.guard = Guard(self.log, "group commit")
        self.flush_count = 0

    def wait(self, next_offset: int) -> Waiter:
        """A waiter done once the commit log is flushed up to ``next_offset``."""
        w = self.waiters.add(next_offset, trio.current_time() + self.timeout)
        for name in ("_wake_flusher", "_wake_watcher"):
            ev = getattr(self, name)
            if ev is not None:
                setattr(self, name, None)
                ev.set()
        return w

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._flusher)
                nursery.start_soon(self._watcher)
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
        flushed = await trio.to_thread.run_sync(self.flush)
        self.flush_count += 1
        self.waiters.advance(flushed)
        if lowest is not None and flushed < lowest:  # logged by the guard, retried after a back-off
            raise RuntimeError(f"flush reached offset {flushed}, short of {lowest}")

    async def _watcher(self) -> None:
        """End waiters past their deadline FLUSH_DISK_TIMEOUT."""
        while True:
            deadline = self.waiters.next_deadline()
            if deadline is None:
                ev = self._wake_watcher = trio.Event()
                await ev.wait()
                continue
            await trio.sleep_until(deadline)
            late = self.waiters.expire(trio.current_time())
            if late:
                self.guard.note("flush disk timeout", "timeout", waiters=len(late),
                                next_offset=late[0].next_offset)
