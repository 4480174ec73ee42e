"""WaitingSends: the trio side of an OffsetWaiters, shared by both wait edges.

Group commit (fsync, SYNC_FLUSH) and the HA service (slave acks, SYNC_MASTER)
each hold one: ``add`` registers a waiter due ``timeout`` seconds from now,
``run_expiry`` ends the late ones with the set's timeout status, and whatever
releases waiters (a finished fsync, a slave's report) calls ``waiters.advance``.
"""

from __future__ import annotations

import trio

from broker.store.offset_waiters import OffsetWaiters, Waiter
from broker.store.status import PutMessageStatus
from protocol.trio.service import Guard


class WaitingSends:
    def __init__(self, timeout_status: PutMessageStatus, timeout_s: float, guard: Guard,
                 late_event: str) -> None:
        self.waiters = OffsetWaiters(timeout_status)
        self.timeout = timeout_s
        self.guard = guard
        self.late_event = late_event  # logged (rate-limited) when waiters end late
        self._wake: trio.Event | None = None

    def add(self, next_offset: int) -> Waiter:
        w = self.waiters.add(next_offset, trio.current_time() + self.timeout)
        ev, self._wake = self._wake, None
        if ev is not None:
            ev.set()
        return w

    async def run_expiry(self) -> None:
        """End waiters past their deadline, until cancelled."""
        while True:
            deadline = self.waiters.next_deadline()
            if deadline is None:
                ev = self._wake = trio.Event()
                await ev.wait()
                continue
            await trio.sleep_until(deadline)
            try:
                late = self.waiters.expire(trio.current_time())
            except Exception as exc:  # a waiter's callback failed: logged, the rest go on
                self.guard.failed(exc, f"{self.late_event}: ending late waiters failed")
                continue
            if late:
                self.guard.note(self.late_event, "timeout", waiters=len(late),
                                next_offset=late[0].next_offset)
