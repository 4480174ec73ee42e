"""RangePlan, read_range as a state machine (no sockets, no tasks): driven
against the fake puller of test_range_reader, its pulls answered in a random
order, it reads what read_range reads."""

from __future__ import annotations

import random

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from client.pull_result import PullStatus
from client.range_reader import GROW_AFTER, PlannedPull, RangeChunk, RangePlan
from client.subscription import SubscriptionData, build_subscription
from tests.client.test_range_reader import (
    ALL,
    TOPIC,
    FakePuller,
    PullBoom,
    delivered,
    run_range,
)


def drive(plan: RangePlan, puller: FakePuller, sub: SubscriptionData = ALL, *,
          seed: int = 0) -> tuple[list[RangeChunk], Exception | None, list[PlannedPull]]:
    """Answer the plan's pulls from ``puller``, a random one of those out at a
    time: (the chunks taken, the error raised, every pull sent)."""
    rng = random.Random(seed)
    out: list[PlannedPull] = []
    sent: list[PlannedPull] = []
    chunks: list[RangeChunk] = []
    while True:
        try:
            chunks += plan.chunks()
        except Exception as exc:  # the read's error
            return chunks, exc, sent
        new = plan.pulls()
        sent += new
        out += new
        assert len(plan._slots) <= plan.in_flight  # never more chunks open
        if plan.done:
            return chunks, None, sent
        assert out, "the plan waits on no pull"
        pull = out.pop(rng.randrange(len(out)))
        if pull.offset in puller.fail_at:
            plan.fail(pull.pull_id, PullBoom(pull.offset))
            continue
        r = puller._answer(sub, pull.offset, pull.max_nums)
        plan.answer(pull.pull_id, r.pull_status, r.next_begin_offset, r.min_offset,
                    r.max_offset, r.body)


def contiguous(chunks: list[RangeChunk], start: int) -> bool:
    lo = start
    for chunk in chunks:
        if chunk.start != lo:
            return False
        lo = chunk.end
    return True


def skipped_offsets(chunks: list[RangeChunk]) -> set[int]:
    return {o for c in chunks for lo, hi in c.skipped for o in range(lo, hi)}


@settings(max_examples=150, deadline=None)
@given(
    count=st.integers(0, 120),
    start=st.integers(0, 130),
    length=st.integers(0, 140),
    batch_size=st.integers(1, 70),
    in_flight=st.integers(1, 6),
    min_offset=st.integers(0, 40),
    byte_limit=st.one_of(st.none(), st.integers(100, 2000)),
    filtered=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_reads_what_read_range_reads(count: int, start: int, length: int, batch_size: int,
                                     in_flight: int, min_offset: int, byte_limit: int | None,
                                     filtered: bool, seed: int) -> None:
    end = start + length
    sub = build_subscription(TOPIC, "A") if filtered else ALL
    tags = frozenset({"A"}) if filtered else None

    def puller() -> FakePuller:
        return FakePuller(count, tags=lambda i: "A" if i % 3 else "B",
                          min_offset=min(min_offset, count), byte_limit=byte_limit)

    reached, expected = trio.run(lambda: run_range(puller(), start, end, sub,
                                                   batch_size=batch_size,
                                                   in_flight=in_flight))
    plan = RangePlan(start, end, batch_size=batch_size, in_flight=in_flight)
    fake = puller()
    chunks, error, sent = drive(plan, fake, sub, seed=seed)
    assert error is None and plan.done
    assert plan.reached == reached
    assert delivered(chunks, tags) == delivered(expected, tags)
    assert skipped_offsets(chunks) == skipped_offsets(expected)
    assert contiguous(chunks, start)
    assert all(c.end - c.start <= batch_size for c in chunks)
    assert all(p.max_nums > 0 and p.offset + p.max_nums <= end for p in sent)
    if byte_limit is None and batch_size <= 32 and not filtered:
        # no pull comes back short: the same chunks, one pull each
        assert [(c.start, c.end) for c in chunks] == [(c.start, c.end) for c in expected]


def test_a_short_first_pull_makes_the_next_chunks_that_size() -> None:
    # the fake broker answers at most 32 a pull: chunks of 64 would take two
    end = 64 + 32 * (GROW_AFTER - 1)
    plan = RangePlan(0, end, batch_size=64, in_flight=1)
    chunks, error, sent = drive(plan, FakePuller(400))
    assert error is None and plan.reached == end
    assert delivered(chunks) == list(range(end))
    assert [c.end - c.start for c in chunks] == [64] + [32] * (GROW_AFTER - 1)
    assert len(sent) == 2 + GROW_AFTER - 1  # the first chunk two pulls, the others one
    assert plan.chunk_size == 32


def test_chunks_grow_back_after_whole_pulls() -> None:
    plan = RangePlan(0, 10_000, batch_size=64, in_flight=1)
    (first,) = plan.pulls()
    assert (first.offset, first.max_nums) == (0, 64)
    plan.answer(first.pull_id, PullStatus.FOUND, 16, 0, 10_000, b"r")  # short: 16
    assert plan.chunk_size == 16
    (rest,) = plan.pulls()  # the chunk's second pull
    assert (rest.offset, rest.max_nums) == (16, 48)
    plan.answer(rest.pull_id, PullStatus.FOUND, 64, 0, 10_000, b"r")
    sizes = []
    for _ in range(GROW_AFTER * 3):
        assert [c.end for c in plan.chunks()]
        (pull,) = plan.pulls()
        sizes.append(pull.max_nums)
        plan.answer(pull.pull_id, PullStatus.FOUND, pull.offset + pull.max_nums, 0, 10_000,
                    b"r")
    assert sizes == [16] * GROW_AFTER + [32] * GROW_AFTER + [64] * GROW_AFTER
    assert plan.chunk_size == 64  # never past batch_size


def test_a_failed_chunk_raises_after_the_chunks_before_it() -> None:
    fake = FakePuller(100, fail_at={20})
    plan = RangePlan(0, 100, batch_size=10, in_flight=4)
    chunks, error, _ = drive(plan, fake, seed=3)
    assert isinstance(error, PullBoom) and error.args == (20,)
    assert [c.start for c in chunks] == [0, 10]
    assert delivered(chunks) == list(range(20))
    assert plan.done and plan.reached == 20
    assert plan.pulls() == [] and plan.chunks() == []  # raised once; the read is over


def test_fail_all_fails_the_read_at_the_first_open_chunk() -> None:
    plan = RangePlan(0, 100, batch_size=10, in_flight=3)
    pulls = plan.pulls()
    assert [p.offset for p in pulls] == [0, 10, 20]
    plan.answer(pulls[0].pull_id, PullStatus.FOUND, 10, 0, 100, b"r")
    plan.fail_all(PullBoom("gone"))
    assert [c.start for c in plan.chunks()] == [0]
    with pytest.raises(PullBoom):
        plan.chunks()
    assert plan.done


def test_the_queue_ending_ends_the_read_and_forgets_later_pulls() -> None:
    plan = RangePlan(0, 100, batch_size=10, in_flight=4)
    pulls = plan.pulls()
    # a later chunk answers first; then the first one finds the queue's end
    plan.answer(pulls[2].pull_id, PullStatus.FOUND, 30, 0, 25, b"r")
    plan.answer(pulls[0].pull_id, PullStatus.FOUND, 5, 0, 5, b"r")
    (again,) = plan.pulls()
    assert (again.offset, again.max_nums) == (5, 5)
    plan.answer(again.pull_id, PullStatus.NO_NEW_MSG, 5, 0, 5)
    (chunk,) = plan.chunks()
    assert chunk.exhausted and chunk.next_offset == 5
    assert plan.done and plan.reached == 5 and plan.outstanding == 0
    plan.answer(pulls[1].pull_id, PullStatus.FOUND, 20, 0, 25, b"r")  # forgotten: ignored
    plan.fail(pulls[3].pull_id, PullBoom("late"))
    assert plan.chunks() == [] and plan.pulls() == []


def test_on_offset_moved_runs_in_answer_and_its_error_fails_the_chunk() -> None:
    seen: list[tuple[int, int]] = []

    def moved(offset: int, min_offset: int) -> int:
        seen.append((offset, min_offset))
        raise PullBoom("lost")

    plan = RangePlan(0, 50, batch_size=10, in_flight=2, on_offset_moved=moved)
    chunks, error, _ = drive(plan, FakePuller(50, min_offset=15))
    assert isinstance(error, PullBoom) and chunks == []
    assert seen and all(m == 15 for _, m in seen)


def test_empty_range_sends_nothing() -> None:
    plan = RangePlan(7, 7)
    assert plan.done and plan.pulls() == [] and plan.chunks() == [] and plan.reached == 7


@pytest.mark.parametrize(("start", "end", "batch_size", "in_flight"),
                         [(5, 4, 1, 1), (-1, 4, 1, 1), (0, 4, 0, 1), (0, 4, 1, 0)])
def test_bad_arguments(start: int, end: int, batch_size: int, in_flight: int) -> None:
    with pytest.raises(ValueError):
        RangePlan(start, end, batch_size=batch_size, in_flight=in_flight)
