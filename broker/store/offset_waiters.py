"""Sends waiting for an offset: flushed to disk, or acknowledged by a slave.

One request type serves both, as RocketMQ's GroupCommitRequest serves its
GroupCommitService (SYNC_FLUSH) and GroupTransferService (SYNC_MASTER): a
``Waiter`` is done once the watched offset reaches its ``next_offset``
(PUT_OK), or late at its ``deadline`` (the timeout status the set was built
with: FLUSH_DISK_TIMEOUT for fsync, FLUSH_SLAVE_TIMEOUT for a slave).

Pure and trio-free: time is passed in, and an edge hears of a finished
waiter through ``Waiter.on_done`` callbacks (e.g. setting a trio.Event).
``OffsetWaiters`` keeps two heaps, by offset and by deadline, so advancing
and expiring cost O(log n) per finished waiter however many wait.

A send may wait on several waiters (SYNC_FLUSH and SYNC_MASTER together):
``AllDone`` is finished once every one is, with the worst status
(``STATUS_ORDER``), so no edge nests inside another.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from typing import TypeVar

from broker.store.status import PutMessageStatus

S = PutMessageStatus
K = TypeVar("K", int, float)

# Best first. A status later in the list wins when a send waited on several.
# PUT_OK < the "stored, but not as durable as asked" timeouts (a slave's
# verdict outranks the disk's, as RocketMQ applies the replica status last)
# < the refusals that mean the send was not served as asked.
STATUS_ORDER: tuple[PutMessageStatus, ...] = (
    S.PUT_OK,
    S.FLUSH_DISK_TIMEOUT,
    S.FLUSH_SLAVE_TIMEOUT,
    S.SLAVE_NOT_AVAILABLE,
    S.IN_SYNC_REPLICAS_NOT_ENOUGH,
    S.OS_PAGECACHE_BUSY,
    S.DISPATCH_BEHIND,
    S.DISK_FULL,
    S.CREATE_MAPEDFILE_FAILED,
    S.PROPERTIES_SIZE_EXCEEDED,
    S.MESSAGE_ILLEGAL,
    S.SERVICE_NOT_AVAILABLE,
    S.UNKNOWN_ERROR,
)
_RANK = {status: rank for rank, status in enumerate(STATUS_ORDER)}


def worst_status(statuses: Iterable[PutMessageStatus]) -> PutMessageStatus:
    """The worst of ``statuses`` by STATUS_ORDER (PUT_OK for none)."""
    return max(statuses, key=_RANK.__getitem__, default=S.PUT_OK)


DoneCallback = Callable[["Waiter"], None]


def _run_callbacks(finished: Iterable[Waiter]) -> None:
    """Every callback of every finished waiter runs; failures are raised
    together afterwards, so one broken edge cannot strand the others."""
    errors: list[Exception] = []
    for w in finished:
        callbacks, w._callbacks = w._callbacks, []
        for cb in callbacks:
            try:
                cb(w)
            except Exception as exc:
                errors.append(exc)
    if errors:
        raise ExceptionGroup("offset waiter callbacks failed", errors)


class Waiter:
    """One send waiting until ``next_offset`` is reached, at most until
    ``deadline``. ``status`` is None while waiting, then final."""

    __slots__ = ("next_offset", "deadline", "status", "_callbacks")

    def __init__(self, next_offset: int, deadline: float,
                 status: PutMessageStatus | None = None) -> None:
        self.next_offset = next_offset
        self.deadline = deadline
        self.status = status
        self._callbacks: list[DoneCallback] = []

    @classmethod
    def finished(cls, status: PutMessageStatus, next_offset: int = 0) -> Waiter:
        """A waiter decided at once (e.g. SLAVE_NOT_AVAILABLE), to join with others."""
        return cls(next_offset, float("-inf"), status)

    @property
    def done(self) -> bool:
        return self.status is not None

    def on_done(self, callback: DoneCallback) -> None:
        """Call ``callback(waiter)`` once it is done (now, if it already is)."""
        if self.status is not None:
            callback(self)
        else:
            self._callbacks.append(callback)

    def __repr__(self) -> str:
        return f"Waiter(next_offset={self.next_offset}, deadline={self.deadline}, status={self.status})"


def _compact(heap: list[tuple[K, int, Waiter]], live: int) -> None:
    if len(heap) > 2 * live + 64:
        heap[:] = [e for e in heap if e[2].status is None]
        heapq.heapify(heap)


class OffsetWaiters:
    """Waiters released by a rising offset (``advance``) or their deadline
    (``expire``)."""

    def __init__(self, timeout_status: PutMessageStatus) -> None:
        self.timeout_status = timeout_status
        self.reached = 0  # highest offset advanced to
        self._by_offset: list[tuple[int, int, Waiter]] = []
        self._by_deadline: list[tuple[float, int, Waiter]] = []
        self._seq = itertools.count()  # FIFO among equal keys; never compares Waiters
        self._live = 0

    def __len__(self) -> int:
        """Waiters not done yet."""
        return self._live

    def add(self, next_offset: int, deadline: float) -> Waiter:
        """A waiter for ``next_offset``; done at once (PUT_OK) when the
        offset was already reached."""
        w = Waiter(next_offset, deadline)
        if next_offset <= self.reached:
            w.status = S.PUT_OK
            return w
        seq = next(self._seq)
        heapq.heappush(self._by_offset, (next_offset, seq, w))
        heapq.heappush(self._by_deadline, (deadline, seq, w))
        self._live += 1
        return w

    def advance(self, reached: int) -> list[Waiter]:
        """The watched offset is now ``reached``: every waiter at or below it
        is done (PUT_OK). Returns them, lowest offset first."""
        if reached > self.reached:
            self.reached = reached
        heap = self._by_offset
        out = []
        while heap and heap[0][0] <= reached:
            w = heapq.heappop(heap)[2]
            if w.status is None:
                w.status = S.PUT_OK
                out.append(w)
        self._finished(out)
        return out

    def expire(self, now: float) -> list[Waiter]:
        """Every waiter whose deadline is at or before ``now`` is late (the
        timeout status). Returns them, earliest deadline first."""
        heap = self._by_deadline
        out = []
        while heap and heap[0][0] <= now:
            w = heapq.heappop(heap)[2]
            if w.status is None:
                w.status = self.timeout_status
                out.append(w)
        self._finished(out)
        return out

    def fail_all(self, status: PutMessageStatus) -> list[Waiter]:
        """Finish every waiting waiter with ``status`` (e.g. SERVICE_NOT_AVAILABLE
        at shutdown). Returns them, lowest offset first."""
        out = []
        for _off, _seq, w in sorted(self._by_offset):
            if w.status is None:
                w.status = status
                out.append(w)
        self._by_offset.clear()
        self._by_deadline.clear()
        self._finished(out)
        return out

    def next_deadline(self) -> float | None:
        """The earliest deadline of a waiting waiter (when to call ``expire``)."""
        heap = self._by_deadline
        while heap and heap[0][2].status is not None:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def lowest_offset(self) -> int | None:
        """The lowest offset a waiter waits for (None when none waits)."""
        heap = self._by_offset
        while heap and heap[0][2].status is not None:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _finished(self, out: list[Waiter]) -> None:
        self._live -= len(out)
        live = self._live
        # A waiter finished through one heap stays in the other until popped:
        # rebuild a heap mostly made of those (e.g. a slave that never acks
        # while sends keep coming), so memory follows the live waiters.
        _compact(self._by_offset, live)
        _compact(self._by_deadline, live)
        _run_callbacks(out)


class AllDone:
    """Done once every waiter in ``waiters`` is; ``status`` is the worst of
    theirs (PUT_OK for none). Shaped like a Waiter for the edges."""

    __slots__ = ("waiters", "status", "_pending", "_callbacks")

    def __init__(self, waiters: Iterable[Waiter]) -> None:
        self.waiters = list(waiters)
        self.status: PutMessageStatus | None = None
        self._callbacks: list[Callable[[AllDone], None]] = []
        self._pending = len(self.waiters)
        if not self._pending:
            self.status = S.PUT_OK
        for w in self.waiters:
            w.on_done(self._one_done)

    @property
    def done(self) -> bool:
        return self.status is not None

    def _one_done(self, _w: Waiter) -> None:
        self._pending -= 1
        if self._pending == 0:
            self.status = worst_status(w.status for w in self.waiters if w.status is not None)
            callbacks, self._callbacks = self._callbacks, []
            for cb in callbacks:
                cb(self)

    def on_done(self, callback: Callable[[AllDone], None]) -> None:
        """Call ``callback(self)`` once all are done (now, if they are)."""
        if self.status is not None:
            callback(self)
        else:
            self._callbacks.append(callback)
