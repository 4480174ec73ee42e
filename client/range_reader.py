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
