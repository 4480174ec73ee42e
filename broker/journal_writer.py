"""JournalWriter: the trio edge that puts a journaled table on disk.

One per ``JournaledTable`` (broker/persist.py: the topics, the subscription
groups). ``run`` waits for a change, takes every record waiting
(``next_write``) and writes them with one append and one fsync in a worker
thread (group commit), or a compaction when one is due; then the table's
``durable_seq`` moves and the callers waiting for those changes
(``when_durable``) hear they are on disk. A failed write is logged, backed
off and retried as a whole-table snapshot. A change not on disk within
``timeout_s`` seconds is reported as not durable (it is still written as soon
as the disk allows); when the writer stops, every caller still waiting hears
the same.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from broker.persist import JournaledTable
from broker.store.offset_waiters import Waiter
from broker.store.status import PutMessageStatus
from broker.waiting_sends import WaitingSends
from protocol.trio.service import Guard


class JournalWriter:
    def __init__(self, table: JournaledTable, guard: Guard, timeout_s: float,
                 late_event: str) -> None:
        self.table = table
        self.guard = guard
        self.waits = WaitingSends(PutMessageStatus.FLUSH_DISK_TIMEOUT, timeout_s, guard,
                                  late_event)

    def when_durable(self, seq: int, done: Callable[[bool], None]) -> bool:
        """True when change ``seq`` is on disk already (``done`` is not called);
        else False, and ``done(True)`` once it is, ``done(False)`` when it is not
        within the timeout or the writer stops first. Outside a trio run (tools,
        tests) the whole table is written now, in the caller's thread."""
        table = self.table
        if seq <= table.durable_seq:
            return True
        try:
            waiter = self.waits.add(seq)
        except RuntimeError:  # no trio run: no writer either
            table.persist()
            return True

        def answer(w: Waiter) -> None:
            done(w.status is PutMessageStatus.PUT_OK)

        waiter.on_done(answer)
        return False

    async def run(self) -> None:
        """Write the table's changes until cancelled."""
        table, guard, waits = self.table, self.guard, self.waits
        wake = trio.Event()

        def dirty() -> None:
            wake.set()

        table.on_dirty = dirty
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waits.run_expiry)
                while True:
                    wake = trio.Event()
                    work = table.next_write()
                    if work is None:
                        await wake.wait()
                        continue
                    if await guard.run(trio.to_thread.run_sync, work.write,
                                       path=str(table.path)):
                        table.written(work)
                        guard.call(waits.waiters.advance, table.durable_seq)
                    else:
                        table.write_failed(work)
        finally:
            table.on_dirty = lambda: None
            guard.call(waits.waiters.fail_all, PutMessageStatus.SERVICE_NOT_AVAILABLE)
