"""Allocation strategies: every queue exactly once; consistent hash moves little."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from client.rebalance import (
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_by_consistent_hash,
)
from protocol.message import MessageQueue

STRATEGIES = [allocate_averagely, allocate_averagely_by_circle, allocate_by_consistent_hash]

queues = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 15)),
                  min_size=0, max_size=40, unique=True).map(
    lambda xs: [MessageQueue("T", b, q) for b, q in xs])
consumers = st.lists(st.text("abcdef0123456789@.", min_size=1, max_size=12), min_size=1,
                     max_size=8, unique=True)


@given(queues, consumers)
def test_every_queue_exactly_once(mqs: list[MessageQueue], cids: list[str]) -> None:
    for strategy in STRATEGIES:
        owned = [mq for cid in cids for mq in strategy(cid, mqs, cids)]
        assert sorted(owned) == sorted(mqs), strategy


@given(queues, consumers)
def test_averagely_is_balanced(mqs: list[MessageQueue], cids: list[str]) -> None:
    for strategy in (allocate_averagely, allocate_averagely_by_circle):
        sizes = [len(strategy(cid, mqs, cids)) for cid in cids]
        assert max(sizes) - min(sizes) <= 1


@given(queues, consumers.filter(lambda c: len(c) >= 2), st.data())
def test_consistent_hash_moves_only_the_leavers_queues(mqs: list[MessageQueue], cids: list[str],
                                                       data: st.DataObject) -> None:
    leaver = data.draw(st.sampled_from(cids))
    stay = [c for c in cids if c != leaver]
    for cid in stay:
        before = set(allocate_by_consistent_hash(cid, mqs, cids))
        after = set(allocate_by_consistent_hash(cid, mqs, stay))
        assert before <= after  # nobody loses a queue; only the leaver's move


def test_averagely_matches_rocketmq_layout() -> None:
    mqs = [MessageQueue("T", "b", i) for i in range(8)]
    cids = ["c1", "c2", "c3"]
    assert [[q.queue_id for q in allocate_averagely(c, mqs, cids)] for c in cids] == [
        [0, 1, 2], [3, 4, 5], [6, 7]]
    assert [[q.queue_id for q in allocate_averagely_by_circle(c, mqs, cids)] for c in cids] == [
        [0, 3, 6], [1, 4, 7], [2, 5]]
    assert allocate_averagely("not-a-member", mqs, cids) == []
