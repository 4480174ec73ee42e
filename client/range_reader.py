"""Read a bounded range of one queue with several pulls in flight.

A sequential reader waits one round trip per pull (at most 32 messages by
the broker's default); bulk readers (the Spark source, exports) know the
whole range up front, so ``read_range`` cuts it into chunks of
``batch_size`` offsets, keeps ``in_flight`` chunk pulls running at once and
hands the chunks on in offset order through a trio memory channel, records
still undecoded (``protocol.record.decode_columns`` or ``decode_records``
read them; records at or past a chunk's ``end`` belong to the next chunk
and must be skipped, see ``RangeChunk``).

Per chunk: pull from its start; FOUND and NO_MATCHED_MSG move on to
``next_begin_offset`` until the chunk is covered (a pull may stop short at
the broker's byte limit); NO_NEW_MSG ends the chunk and the range (nothing
is stored past that offset); OFFSET_ILLEGAL below the queue's min offset
asks ``on_offset_moved(offset, min_offset)`` where to go on (it may raise
to fail the read), past the max offset ends the range.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import trio

from client.pull_result import PullStatus, RawPullResult
from client.subscription import SubscriptionData
from protocol.message import MessageQueue

DEFAULT_IN_FLIGHT = 8
# RangePlan: whole first pulls in a row before its chunks grow back
GROW_AFTER = 8


class RawPuller(Protocol):
    async def pull_raw(self, mq: MessageQueue, sub: SubscriptionData, offset: int,
                       max_nums: int, *, timeout: float) -> RawPullResult: ...


OffsetMoved = Callable[[int, int], int]


def skip_to_min(offset: int, min_offset: int) -> int:
    """Default ``on_offset_moved``: go on from the queue's min offset."""
    return min_offset


@dataclass(slots=True)
class RangeChunk:
    """Offsets ``[start, end)`` of the range, read. ``bodies`` are the raw pull
    bodies in offset order; their records below ``end`` are this chunk's
    (with a tag filter the broker may return later ones too). ``next_offset``
    is where reading should go on: ``end``, or less when the queue ended
    first (``exhausted``).
    ``skipped`` holds (from, to) offsets jumped over because they were gone."""

    start: int
    end: int
    bodies: list[bytes] = field(default_factory=list)
    next_offset: int = 0
    exhausted: bool = False
    skipped: list[tuple[int, int]] = field(default_factory=list)
    min_offset: int = -1
    max_offset: int = -1


async def read_chunk(puller: RawPuller, mq: MessageQueue, sub: SubscriptionData,
                     start: int, end: int, *, timeout: float,
                     on_offset_moved: OffsetMoved = skip_to_min) -> RangeChunk:
    """Pull ``[start, end)`` of ``mq`` (at most ``end - start`` per pull)."""
    chunk = RangeChunk(start, end, next_offset=start)
    offset = start
    while offset < end:
        r = await puller.pull_raw(mq, sub, offset, end - offset, timeout=timeout)
        chunk.min_offset, chunk.max_offset = r.min_offset, r.max_offset
        status = r.pull_status
        if status is PullStatus.FOUND:
            if r.body:
                chunk.bodies.append(r.body)
            nxt = r.next_begin_offset
        elif status is PullStatus.NO_MATCHED_MSG:
            nxt = r.next_begin_offset
        elif status is PullStatus.OFFSET_ILLEGAL and offset < r.min_offset:
            nxt = on_offset_moved(offset, r.min_offset)
            if nxt > offset:
                chunk.skipped.append((offset, nxt))
        else:  # NO_NEW_MSG, or OFFSET_ILLEGAL at/after the max offset
            chunk.exhausted = True
            break
        if nxt <= offset:  # no progress: the broker has nothing more here
            chunk.exhausted = True
            break
        offset = nxt
    # a filtered pull may have scanned past ``end``: its matches there belong
    # to the next chunk (or the next read), so never report more than ``end``
    chunk.next_offset = min(offset, end)
    return chunk


@dataclass(slots=True)
class _Slot:
    start: int
    end: int
    done: trio.Event = field(default_factory=trio.Event)
    chunk: RangeChunk | None = None
    error: Exception | None = None


async def read_range(
    puller: RawPuller,
    mq: MessageQueue,
    sub: SubscriptionData,
    start: int,
    end: int,
    send: trio.MemorySendChannel[RangeChunk],
    *,
    timeout: float,
    batch_size: int = 32,
    in_flight: int = DEFAULT_IN_FLIGHT,
    on_offset_moved: OffsetMoved = skip_to_min,
) -> int:
    """Send the chunks of ``[start, end)`` to ``send`` in offset order and
    return the offset reading stopped at (``end``, or less when the queue
    ended first). The first failing pull's error is raised (as itself) after
    the other pulls are cancelled; chunks before it have been sent. The
    channel is left open."""
    if batch_size <= 0 or in_flight <= 0:
        raise ValueError("batch_size and in_flight must be positive")
    pending: deque[_Slot] = deque()
    failure: Exception | None = None
    reached = start

    async def fetch(slot: _Slot) -> None:
        try:
            slot.chunk = await read_chunk(puller, mq, sub, slot.start, slot.end,
                                          timeout=timeout, on_offset_moved=on_offset_moved)
        except Exception as exc:
            slot.error = exc
        finally:
            slot.done.set()

    async with trio.open_nursery() as nursery:
        lo = start
        while True:
            while lo < end and len(pending) < in_flight:
                slot = _Slot(lo, min(end, lo + batch_size))
                pending.append(slot)
                nursery.start_soon(fetch, slot)
                lo = slot.end
            if not pending:
                break
            slot = pending.popleft()
            await slot.done.wait()
            if slot.error is not None:
                failure = slot.error
                break
            assert slot.chunk is not None
            await send.send(slot.chunk)
            reached = slot.chunk.next_offset
            if slot.chunk.exhausted:
                break  # later chunks (maybe already in flight) would leave a gap
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return reached


# ---- the same read, sans-IO: for a caller that does its own I/O -------------------


class _PlanSlot:
    """One chunk of a RangePlan: where its next pull starts, and its pull out."""

    __slots__ = ("chunk", "offset", "pull", "done", "error")

    def __init__(self, start: int, end: int) -> None:
        self.chunk = RangeChunk(start, end, next_offset=start)
        self.offset = start  # where this chunk's next pull starts
        self.pull = -1  # the id of its pull out, -1 when none
        self.done = False
        self.error: Exception | None = None


@dataclass(frozen=True, slots=True)
class PlannedPull:
    """A pull to send: PULL_MESSAGE of up to ``max_nums`` from ``offset``;
    answer it with ``RangePlan.answer(pull_id, ...)`` or ``fail(pull_id, ...)``."""

    pull_id: int
    offset: int
    max_nums: int


class RangePlan:
    """``read_range`` as a state machine, without I/O or tasks: the caller
    sends the pulls ``pulls()`` gives (in any order, several at once), feeds
    each answer to ``answer`` (or an error to ``fail``) in whatever order they
    come, and takes the finished chunks from ``chunks()``, in offset order.

    Chunks, statuses, short pulls, ``on_offset_moved`` and errors go as in
    ``read_range``/``read_chunk``: at most ``in_flight`` chunks are open at
    once (pulled or waiting to be taken); a chunk that ends the queue
    (``exhausted``) ends the read, and pulls still out for later chunks are
    forgotten (``answer`` and ``fail`` ignore ids they do not know); the first
    chunk in order that failed raises its error from ``chunks()``, after the
    chunks before it, and ends the read. ``reached`` is where reading stopped
    once ``done``."""

    def __init__(self, start: int, end: int, *, batch_size: int = 32,
                 in_flight: int = DEFAULT_IN_FLIGHT,
                 on_offset_moved: OffsetMoved = skip_to_min) -> None:
        if batch_size <= 0 or in_flight <= 0:
            raise ValueError("batch_size and in_flight must be positive")
        if start < 0 or end < start:
            raise ValueError(f"bad range [{start}, {end})")
        self.batch_size = batch_size
        self.in_flight = in_flight
        self.on_offset_moved = on_offset_moved
        self.end = end
        self.reached = start
        self._lo = start  # the next chunk's start
        self._slots: deque[_PlanSlot] = deque()
        self._out: dict[int, _PlanSlot] = {}  # pull id -> its chunk
        self._to_send: list[PlannedPull] = []  # a chunk's next pulls, after a short one
        self._next_id = 0
        self._stopped = False
        # The size of new chunks: ``batch_size``, or what one pull brought
        # when a chunk's first pull came back short (the broker's byte limit:
        # 224 records of 1 KiB in 256 KiB), so a chunk takes one pull, not
        # two; back up (doubling) after GROW_AFTER first pulls in a row came
        # back whole.
        self.chunk_size = batch_size
        self._whole = 0

    @property
    def done(self) -> bool:
        """Nothing more to pull or to take: the range is read, a chunk ended
        the queue, or an error was raised."""
        return self._stopped or (not self._slots and self._lo >= self.end)

    @property
    def outstanding(self) -> int:
        """Pulls given out and not answered yet."""
        return len(self._out)

    def _pull(self, slot: _PlanSlot) -> PlannedPull:
        pull = PlannedPull(self._next_id, slot.offset, slot.chunk.end - slot.offset)
        self._next_id += 1
        slot.pull = pull.pull_id
        self._out[pull.pull_id] = slot
        return pull

    def pulls(self) -> list[PlannedPull]:
        """The pulls to send now: the next pulls of chunks whose last pull
        came back short, then the first pulls of new chunks while fewer than
        ``in_flight`` are open."""
        out, self._to_send = self._to_send, []
        if self._stopped:
            return []
        while self._lo < self.end and len(self._slots) < self.in_flight:
            slot = _PlanSlot(self._lo, min(self.end, self._lo + self.chunk_size))
            self._slots.append(slot)
            self._lo = slot.chunk.end
            out.append(self._pull(slot))
        return out

    def answer(self, pull_id: int, status: PullStatus, next_begin_offset: int,
               min_offset: int, max_offset: int, body: bytes = b"") -> None:
        """A pull's answer (``RawPullResult``'s fields). ``on_offset_moved``
        runs here; what it raises fails the chunk."""
        slot = self._out.pop(pull_id, None)
        if slot is None or slot.done:
            return
        slot.pull = -1
        chunk = slot.chunk
        offset = slot.offset
        chunk.min_offset, chunk.max_offset = min_offset, max_offset
        if status is PullStatus.FOUND:
            if body:
                chunk.bodies.append(body)
            nxt = next_begin_offset
            if offset == chunk.start:
                self._learn(chunk.end - offset, nxt - offset)
        elif status is PullStatus.NO_MATCHED_MSG:
            nxt = next_begin_offset
        elif status is PullStatus.OFFSET_ILLEGAL and offset < min_offset:
            try:
                nxt = self.on_offset_moved(offset, min_offset)
            except Exception as exc:
                self._finish(slot, error=exc)
                return
            if nxt > offset:
                chunk.skipped.append((offset, nxt))
        else:  # NO_NEW_MSG, or OFFSET_ILLEGAL at/after the max offset
            chunk.exhausted = True
            self._finish(slot)
            return
        if nxt <= offset:  # no progress: the broker has nothing more here
            chunk.exhausted = True
            self._finish(slot)
            return
        slot.offset = nxt
        if nxt < chunk.end:
            self._to_send.append(self._pull(slot))
        else:
            self._finish(slot)

    def _learn(self, asked: int, got: int) -> None:
        """A chunk's first pull asked for ``asked`` offsets and moved ``got``."""
        if 0 < got < asked:
            self.chunk_size = min(self.chunk_size, got)
            self._whole = 0
        elif got >= asked and asked == self.chunk_size < self.batch_size:
            self._whole += 1
            if self._whole >= GROW_AFTER:
                self.chunk_size = min(self.batch_size, self.chunk_size * 2)
                self._whole = 0

    def fail(self, pull_id: int, error: Exception) -> None:
        """A pull failed (connection, timeout, the broker refused)."""
        slot = self._out.pop(pull_id, None)
        if slot is not None and not slot.done:
            slot.pull = -1
            self._finish(slot, error=error)

    def fail_all(self, error: Exception) -> None:
        """Every pull out failed (the connection is gone)."""
        for pull_id in list(self._out):
            self.fail(pull_id, error)

    def _finish(self, slot: _PlanSlot, error: Exception | None = None) -> None:
        slot.done = True
        slot.error = error
        # a filtered pull may have scanned past ``end``: never report more
        slot.chunk.next_offset = min(slot.offset, slot.chunk.end)

    def chunks(self) -> list[RangeChunk]:
        """The chunks finished in order since the last call (maybe none).
        Raises the error of the first failed chunk in order, once; the read
        is over then."""
        ready: list[RangeChunk] = []
        while self._slots and self._slots[0].done and not self._stopped:
            slot = self._slots[0]
            if slot.error is not None:
                if ready:  # the chunks before it first; the error on the next call
                    return ready
                self._stop()
                raise slot.error
            self._slots.popleft()
            ready.append(slot.chunk)
            self.reached = slot.chunk.next_offset
            if slot.chunk.exhausted:
                self._stop()  # later chunks (maybe pulled already) would leave a gap
        return ready

    def _stop(self) -> None:
        self._stopped = True
        self._slots.clear()
        self._out.clear()
        self._to_send = []
