"""read_range / read_chunk against a fake puller (no sockets), in virtual time."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import trio
import trio.testing

from client.pull_result import PullStatus, RawPullResult
from client.range_reader import RangeChunk, read_chunk, read_range
from client.subscription import SubscriptionData, build_subscription
from protocol.message import MessageQueue, properties_to_string
from protocol.record import decode_columns, encode_record, pack_host
from tests.client.conftest import delivered as delivered_from

TOPIC = "RangeTopic"
MQ = MessageQueue(TOPIC, "broker-a", 2)
ALL = build_subscription(TOPIC, "*")
TIMEOUT = 3.0


def make_record(offset: int, tag: str | None) -> bytes:
    props = {"TAGS": tag} if tag is not None else {}
    return encode_record(
        topic=TOPIC.encode(), queue_id=MQ.queue_id, flag=0, body=b"m%d" % offset,
        properties=properties_to_string(props).encode(), sys_flag=0,
        born_timestamp=1000 + offset, born_host=pack_host("127.0.0.1:1"),
        store_timestamp=2000 + offset, store_host=pack_host("127.0.0.1:10911"),
        reconsume_times=0, prepared_transaction_offset=0, queue_offset=offset,
        physical_offset=offset * 200,
    )


class PullBoom(Exception):
    """A pull failed (like MQClientError, but only ours)."""


class FakePuller:
    """One queue of ``count`` records (offsets 0..count-1; those below the
    min offset are gone) answering pulls as the broker does: at most
    min(max_nums, 32) matching records, at most ``byte_limit`` bytes (but at
    least one record), scanning at most ``scan_limit`` entries for a tag
    filter (past the requested count)."""

    def __init__(
        self,
        count: int,
        *,
        tags: Callable[[int], str | None] = lambda i: "A",
        min_offset: int | Callable[[float], int] = 0,
        byte_limit: int | None = None,
        scan_limit: int = 400,
        delay: Callable[[int], float] = lambda offset: 0.0,
        fail_at: set[int] | None = None,
    ) -> None:
        self.tags = [tags(i) for i in range(count)]
        self.records = [make_record(i, t) for i, t in enumerate(self.tags)]
        self.count = count
        self._min = min_offset
        self.byte_limit = byte_limit
        self.scan_limit = scan_limit
        self.delay = delay
        self.fail_at = fail_at or set()
        self.calls: list[tuple[int, int]] = []
        self.answered: list[int] = []  # pull offsets, in completion order
        self.cancelled: list[int] = []
        self.active = 0
        self.max_active = 0

    def min_offset(self) -> int:
        return self._min(trio.current_time()) if callable(self._min) else self._min

    async def pull_raw(self, mq: MessageQueue, sub: SubscriptionData, offset: int,
                       max_nums: int, *, timeout: float) -> RawPullResult:
        assert mq == MQ and timeout == TIMEOUT and max_nums > 0
        self.calls.append((offset, max_nums))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await trio.sleep(self.delay(offset))  # a checkpoint even when 0
            if offset in self.fail_at:
                raise PullBoom(offset)
            result = self._answer(sub, offset, max_nums)
            self.answered.append(offset)
            return result
        except trio.Cancelled:
            self.cancelled.append(offset)
            raise
        finally:
            self.active -= 1

    def _answer(self, sub: SubscriptionData, offset: int, max_nums: int) -> RawPullResult:
        lo, hi = self.min_offset(), self.count

        def result(status: PullStatus, nxt: int, body: bytes = b"") -> RawPullResult:
            return RawPullResult(status, nxt, lo, hi, body, "fake")

        if offset < lo:
            return result(PullStatus.OFFSET_ILLEGAL, lo)
        if offset > hi:
            return result(PullStatus.OFFSET_ILLEGAL, hi)
        if offset == hi:
            return result(PullStatus.NO_NEW_MSG, offset)
        limit = min(max_nums, 32)
        found: list[bytes] = []
        size = 0
        pos = offset
        while pos < hi and len(found) < limit and pos - offset < self.scan_limit:
            rec = self.records[pos]
            if sub.tags_set is None or self.tags[pos] in sub.tags_set:
                if found and self.byte_limit is not None and size + len(rec) > self.byte_limit:
                    break
                found.append(rec)
                size += len(rec)
            pos += 1
        if not found:
            return result(PullStatus.NO_MATCHED_MSG, pos)
        return result(PullStatus.FOUND, pos, b"".join(found))


async def run_range(
    puller: FakePuller, start: int, end: int, sub: SubscriptionData = ALL, **kw: object
) -> tuple[int, list[RangeChunk]]:
    """read_range into an unbounded channel: (its result, the chunks sent)."""
    send, receive = trio.open_memory_channel[RangeChunk](math.inf)
    reached = await read_range(puller, MQ, sub, start, end, send, timeout=TIMEOUT, **kw)  # type: ignore[arg-type]
    return reached, drain(receive)


def drain(receive: trio.MemoryReceiveChannel[RangeChunk]) -> list[RangeChunk]:
    chunks = []
    while True:
        try:
            chunks.append(receive.receive_nowait())
        except trio.WouldBlock:
            return chunks


def delivered(chunks: list[RangeChunk], tags: frozenset[str] | None = None) -> list[int]:
    return delivered_from(chunks, MQ, tags)


def assert_contiguous(chunks: list[RangeChunk], start: int, batch_size: int) -> None:
    lo = start
    for chunk in chunks:
        assert chunk.start == lo
        assert chunk.end - chunk.start <= batch_size
        lo = chunk.end


# ---- whole ranges ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "batch_size", "in_flight"),
    [(0, 100, 32, 8), (3, 97, 10, 3), (0, 100, 100, 1), (50, 51, 7, 2), (0, 100, 1, 4)],
)
async def test_every_offset_once_in_order(start: int, end: int, batch_size: int,
                                          in_flight: int) -> None:
    puller = FakePuller(120)
    reached, chunks = await run_range(puller, start, end, batch_size=batch_size,
                                      in_flight=in_flight)
    assert reached == end
    assert delivered(chunks) == list(range(start, end))
    assert_contiguous(chunks, start, batch_size)
    assert chunks[-1].end == end
    assert len(chunks) == math.ceil((end - start) / batch_size)
    for chunk in chunks:
        assert chunk.next_offset == chunk.end and not chunk.exhausted and not chunk.skipped
        assert (chunk.min_offset, chunk.max_offset) == (0, 120)
    # no pull asks for more than its chunk still needs
    assert all(offset + n <= end for offset, n in puller.calls)


async def test_empty_range_pulls_nothing() -> None:
    puller = FakePuller(10)
    assert await run_range(puller, 4, 4) == (4, [])
    assert puller.calls == []


async def test_in_flight_bound_and_out_of_order_completions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # pulls of later chunks often finish first; delivery stays in order
    puller = FakePuller(200, delay=lambda offset: [3.0, 0.5, 2.0, 1.0, 0.1][offset // 8 % 5])
    send, receive = trio.open_memory_channel[RangeChunk](0)  # a slow reader too
    got: list[RangeChunk] = []
    result: list[int] = []

    async def read() -> None:
        async with send:
            result.append(await read_range(puller, MQ, ALL, 0, 160, send, timeout=TIMEOUT,
                                           batch_size=8, in_flight=3))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        async for chunk in receive:
            got.append(chunk)
            await trio.sleep(0.3)
    assert result == [160]
    assert delivered(got) == list(range(160))
    assert [c.start for c in got] == list(range(0, 160, 8))
    assert puller.max_active == 3  # the bound is reached, never passed
    assert puller.answered != sorted(puller.answered)
    assert sorted(puller.answered) == list(range(0, 160, 8))


@pytest.mark.parametrize("in_flight", [1, 2, 5])
async def test_never_more_pulls_than_in_flight(autojump_clock: trio.testing.MockClock,
                                               in_flight: int) -> None:
    puller = FakePuller(100, byte_limit=300, delay=lambda offset: (offset * 37 % 11) / 10)
    reached, chunks = await run_range(puller, 0, 100, batch_size=9, in_flight=in_flight)
    assert reached == 100
    assert delivered(chunks) == list(range(100))
    assert puller.max_active == in_flight


async def test_short_pulls_still_cover_the_chunk() -> None:
    record_size = len(make_record(0, "A"))
    puller = FakePuller(100, byte_limit=2 * record_size + 10)  # two records a pull
    reached, chunks = await run_range(puller, 0, 95, batch_size=20, in_flight=3)
    assert reached == 95
    assert delivered(chunks) == list(range(95))
    assert len(puller.calls) == 48  # (95 + 1) // 2
    assert [len(c.bodies) for c in chunks] == [10, 10, 10, 10, 8]


async def test_pulls_capped_at_32_by_the_broker() -> None:
    puller = FakePuller(300)
    reached, chunks = await run_range(puller, 0, 250, batch_size=100, in_flight=2)
    assert reached == 250
    assert delivered(chunks) == list(range(250))
    assert sorted(puller.calls) == [
        (0, 100), (32, 68), (64, 36), (96, 4),
        (100, 100), (132, 68), (164, 36), (196, 4),
        (200, 50), (232, 18),
    ]
    assert [len(c.bodies) for c in chunks] == [4, 4, 2]


# ---- the queue ends before the range --------------------------------------------------


async def test_range_past_the_queue_max_stops_at_the_max(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # the chunk reaching the max is slow; the chunks after it (past the max)
    # answer at once, yet are never sent
    puller = FakePuller(50, delay=lambda offset: 0.0 if offset >= 64 else 1.0)
    reached, chunks = await run_range(puller, 0, 200, batch_size=16, in_flight=6)
    assert reached == 50
    assert delivered(chunks) == list(range(50))
    assert [(c.start, c.end) for c in chunks] == [(0, 16), (16, 32), (32, 48), (48, 64)]
    assert [c.exhausted for c in chunks] == [False, False, False, True]
    assert chunks[-1].next_offset == 50
    assert (chunks[-1].min_offset, chunks[-1].max_offset) == (0, 50)
    assert any(offset >= 64 for offset, _ in puller.calls)  # they were in flight


async def test_range_starting_at_the_max() -> None:
    puller = FakePuller(50)
    reached, chunks = await run_range(puller, 50, 80, batch_size=10, in_flight=1)
    assert reached == 50
    assert len(chunks) == 1
    chunk = chunks[0]
    assert (chunk.start, chunk.end, chunk.next_offset, chunk.exhausted) == (50, 60, 50, True)
    assert chunk.bodies == []


async def test_range_past_the_max_exactly_at_a_chunk_boundary() -> None:
    puller = FakePuller(48)
    reached, chunks = await run_range(puller, 0, 100, batch_size=16, in_flight=1)
    assert reached == 48
    assert delivered(chunks) == list(range(48))
    assert [c.exhausted for c in chunks] == [False, False, False, True]
    assert chunks[-1].bodies == [] and chunks[-1].start == 48


# ---- the min offset moved ----------------------------------------------------------------


async def test_min_offset_moved_skips_ahead_by_default() -> None:
    puller = FakePuller(50, min_offset=20)
    reached, chunks = await run_range(puller, 0, 50, batch_size=8, in_flight=8)
    assert reached == 50
    assert delivered(chunks) == list(range(20, 50))
    assert [c.skipped for c in chunks[:3]] == [[(0, 20)], [(8, 20)], [(16, 20)]]
    assert all(c.skipped == [] for c in chunks[3:])
    assert [c.next_offset for c in chunks[:3]] == [8, 16, 24]  # never past a chunk's end
    assert chunks[0].min_offset == 20


async def test_on_offset_moved_decides_where_to_go_on() -> None:
    seen: list[tuple[int, int]] = []

    def moved(offset: int, min_offset: int) -> int:
        seen.append((offset, min_offset))
        return min_offset + 2

    puller = FakePuller(40, min_offset=10)
    reached, chunks = await run_range(puller, 5, 40, batch_size=10, in_flight=1,
                                      on_offset_moved=moved)
    assert reached == 40
    assert seen == [(5, 10)]
    assert chunks[0].skipped == [(5, 12)]
    assert delivered(chunks) == list(range(12, 40))


class DataLost(Exception):
    pass


async def test_raising_on_offset_moved_fails_the_read_after_earlier_chunks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # retention deletes up to offset 40 at t = 2.5 s, while the read is under way
    puller = FakePuller(100, min_offset=lambda now: 40 if now >= 2.5 else 0,
                        delay=lambda offset: 1.0)
    calls: list[tuple[int, int]] = []

    def moved(offset: int, min_offset: int) -> int:
        calls.append((offset, min_offset))
        raise DataLost(f"{offset} < {min_offset}")

    send, receive = trio.open_memory_channel[RangeChunk](math.inf)
    with pytest.raises(DataLost) as info:
        await read_range(puller, MQ, ALL, 0, 96, send, timeout=TIMEOUT, batch_size=8,
                         in_flight=2, on_offset_moved=moved)
    assert type(info.value) is DataLost  # itself, not an ExceptionGroup
    chunks = drain(receive)
    assert [(c.start, c.end) for c in chunks] == [(0, 8), (8, 16), (16, 24), (24, 32)]
    assert delivered(chunks) == list(range(32))
    assert calls[0] == (32, 40)
    send.send_nowait(RangeChunk(0, 0))  # the channel is left open


async def test_raising_on_offset_moved_on_the_first_chunk() -> None:
    def moved(offset: int, min_offset: int) -> int:
        raise DataLost(offset)

    puller = FakePuller(30, min_offset=10)
    send, receive = trio.open_memory_channel[RangeChunk](math.inf)
    with pytest.raises(DataLost):
        await read_range(puller, MQ, ALL, 0, 30, send, timeout=TIMEOUT, batch_size=5,
                         in_flight=3, on_offset_moved=moved)
    assert drain(receive) == []


# ---- pull errors ---------------------------------------------------------------------


async def test_pull_error_propagates_and_cancels_the_other_pulls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # chunk 0 is slow, chunk 1 fails early, chunks 2-3 would take long
    delays = {0: 5.0, 8: 1.0, 16: 100.0, 24: 100.0}
    puller = FakePuller(100, delay=lambda offset: delays.get(offset, 0.0), fail_at={8})
    send, receive = trio.open_memory_channel[RangeChunk](math.inf)
    t0 = trio.current_time()
    with pytest.raises(PullBoom) as info:
        await read_range(puller, MQ, ALL, 0, 64, send, timeout=TIMEOUT, batch_size=8,
                         in_flight=4)
    assert type(info.value) is PullBoom and info.value.args == (8,)
    assert trio.current_time() - t0 == pytest.approx(5.0)  # waited for chunk 0 only
    chunks = drain(receive)
    assert [(c.start, c.end) for c in chunks] == [(0, 8)]  # the chunk before it
    assert delivered(chunks) == list(range(8))
    # chunk 0's slot was refilled ([32, 40)) before chunk 1's error was seen
    assert sorted(puller.cancelled) == [16, 24, 32]
    assert puller.active == 0
    assert all(offset < 40 for offset, _ in puller.calls)  # nothing started after


async def test_pull_error_on_the_first_chunk() -> None:
    puller = FakePuller(100, fail_at={0})
    with pytest.raises(PullBoom):
        await run_range(puller, 0, 64, batch_size=8, in_flight=4)
    assert puller.active == 0


async def test_pull_error_mid_chunk() -> None:
    # the chunk's second pull fails
    record_size = len(make_record(10, "A"))
    puller = FakePuller(100, byte_limit=3 * record_size, fail_at={19})
    send, receive = trio.open_memory_channel[RangeChunk](math.inf)
    with pytest.raises(PullBoom):
        await read_range(puller, MQ, ALL, 0, 64, send, timeout=TIMEOUT, batch_size=16,
                         in_flight=2)
    assert delivered(drain(receive)) == list(range(16))
    assert (16, 16) in puller.calls and (19, 13) in puller.calls


@pytest.mark.parametrize(("batch_size", "in_flight"), [(0, 1), (-1, 1), (1, 0), (8, -3)])
async def test_bad_arguments(batch_size: int, in_flight: int) -> None:
    puller = FakePuller(10)
    with pytest.raises(ValueError):
        await run_range(puller, 0, 10, batch_size=batch_size, in_flight=in_flight)
    assert puller.calls == []


# ---- tag filtering ---------------------------------------------------------------------


def alternate(i: int) -> str:
    return "A" if i % 2 == 0 else "B"


async def test_tag_filter_scans_past_the_chunk_end() -> None:
    sub = build_subscription(TOPIC, "A")
    puller = FakePuller(100, tags=alternate)
    reached, chunks = await run_range(puller, 0, 80, sub, batch_size=8, in_flight=3)
    assert delivered(chunks, sub.tags_set) == list(range(0, 80, 2))
    # a pull of 8 matching records covers 16 offsets: records past the chunk
    # end came back, and the reader's stop_offset dropped them
    assert chunks[0].next_offset == 8  # the pull reached offset 15; reported up to the end
    assert max(decode_columns(chunks[0].bodies[0]).queue_offsets) > chunks[0].end
    assert reached == 80


async def test_tag_filter_no_matched_msg_moves_on() -> None:
    # offsets 10..49 hold only tag B; the broker scans at most 16 entries
    sub = build_subscription(TOPIC, "A")
    puller = FakePuller(80, tags=lambda i: "B" if 10 <= i < 50 else "A", scan_limit=16)
    reached, chunks = await run_range(puller, 0, 70, sub, batch_size=10, in_flight=2)
    assert reached == 70
    assert delivered(chunks, sub.tags_set) == list(range(10)) + list(range(50, 70))
    assert [c.bodies == [] for c in chunks] == [False, True, True, True, False, False, False]
    # [10, 20) .. [30, 40): one NO_MATCHED_MSG pull each, scanning 16 entries
    assert [c.next_offset for c in chunks[1:4]] == [20, 30, 40]
    # [40, 50): matches only past its end (50..55), which the reader drops
    assert decode_columns(chunks[4].bodies[0]).queue_offsets == list(range(50, 56))
    assert not any(c.exhausted for c in chunks)


async def test_untagged_messages_and_client_side_tag_check() -> None:
    # the fake matches by tag, so untagged messages are never sent for "A"
    sub = build_subscription(TOPIC, "A || C")
    puller = FakePuller(30, tags=lambda i: [None, "A", "B", "C"][i % 4])
    reached, chunks = await run_range(puller, 0, 30, sub, batch_size=7, in_flight=2)
    assert reached == 30
    assert delivered(chunks, sub.tags_set) == [i for i in range(30) if i % 4 in (1, 3)]


async def test_tag_filter_last_chunk_returns_end() -> None:
    """read_range returns ``end`` (or less when the queue ended first): a
    caller resuming from it must not lose matching records the last pull
    returned past ``end`` (they were dropped as not this chunk's)."""
    sub = build_subscription(TOPIC, "A")
    puller = FakePuller(100, tags=alternate)
    reached, chunks = await run_range(puller, 0, 8, sub, batch_size=8, in_flight=1)
    assert delivered(chunks, sub.tags_set) == [0, 2, 4, 6]
    # offsets 8, 10, 12, 14 match and were pulled, but are not delivered
    assert reached == 8


# ---- read_chunk alone --------------------------------------------------------------------


async def test_read_chunk() -> None:
    puller = FakePuller(20)
    chunk = await read_chunk(puller, MQ, ALL, 5, 15, timeout=TIMEOUT)
    assert (chunk.start, chunk.end, chunk.next_offset, chunk.exhausted) == (5, 15, 15, False)
    assert delivered([chunk]) == list(range(5, 15))
    assert puller.calls == [(5, 10)]

    chunk = await read_chunk(puller, MQ, ALL, 15, 40, timeout=TIMEOUT)
    assert (chunk.next_offset, chunk.exhausted) == (20, True)
    assert delivered([chunk]) == list(range(15, 20))
    assert (chunk.min_offset, chunk.max_offset) == (0, 20)


async def test_read_chunk_offset_past_the_max_is_exhausted() -> None:
    puller = FakePuller(20)
    chunk = await read_chunk(puller, MQ, ALL, 25, 30, timeout=TIMEOUT)
    assert (chunk.next_offset, chunk.exhausted, chunk.bodies) == (25, True, [])
    assert puller.calls == [(25, 5)]


async def test_read_chunk_no_progress_ends_the_chunk() -> None:
    def stay(offset: int, min_offset: int) -> int:
        return offset  # "go on from here": the broker would answer the same again

    puller = FakePuller(20, min_offset=10)
    chunk = await read_chunk(puller, MQ, ALL, 0, 10, timeout=TIMEOUT, on_offset_moved=stay)
    assert (chunk.next_offset, chunk.exhausted, chunk.skipped) == (0, True, [])
    assert len(puller.calls) == 1
