"""broker/grpc/renewals.py: the pure tracker of a push consumer's receipt handles, with
times as plain integers (ms)."""

from __future__ import annotations

import pytest

from broker.grpc.renewals import RenewTracker


def tracker(**kw: int) -> RenewTracker:
    args = {"ahead_ms": 1_000, "slice_ms": 5_000, "max_total_ms": 60_000,
            "max_per_client": 100, "max_total": 1_000, **kw}
    return RenewTracker(**args)


def test_due_names_handles_within_ahead_of_their_end_and_renewed_moves_them() -> None:
    t = tracker()
    t.track("c1", "g", "T", "h1", visible_at_ms=10_000, now_ms=0)
    t.track("c1", "g", "T", "h2", visible_at_ms=12_000, now_ms=0)
    assert t.due(8_999) == []
    (first,) = t.due(9_000)
    assert first.original == "h1" and first.handle == "h1"
    t.renewed(first, "h1b", 14_000)
    assert t.due(10_999) == []
    assert [x.original for x in t.due(11_000)] == ["h2"]
    (again,) = t.due(13_000)
    assert again.handle == "h1b" and again.renewals == 1
    t.renewed(again, "h1c", 18_000)
    # the client acks with the handle it was given: the newest is acted on, once
    assert t.take("g", "h1") == "h1c"
    assert t.take("g", "h1") == "h1"  # no longer tracked: its own handle
    assert t.take("other-group", "h2") == "h2"
    assert t.due(100_000) == []  # h2 was due and never answered: out of the heap


def test_a_taken_handle_is_not_renewed_and_a_late_renewal_is_ignored() -> None:
    t = tracker()
    t.track("c1", "g", "T", "h1", 10_000, 0)
    (x,) = t.due(9_500)
    assert t.take("g", "h1") == "h1"
    t.renewed(x, "h1b", 20_000)  # the ack came first: nothing kept
    assert len(t) == 0 and t.due(30_000) == []


def test_renewal_stops_after_max_total_time() -> None:
    t = tracker(max_total_ms=20_000)
    t.track("c1", "g", "T", "h1", 10_000, 0)
    (x,) = t.due(9_000)
    t.renewed(x, "h1b", 15_000)
    (x,) = t.due(14_000)
    t.renewed(x, "h1c", 20_999)
    (x,) = t.due(19_999)  # 19.999 s since delivery: 1 ms short of the most
    t.renewed(x, "h1d", 20_500)
    assert t.due(20_000) == [] and t.expired == 1 and len(t) == 0
    assert t.take("g", "h1") == "h1"  # forgotten: the client's handle is the stale one


def test_forget_client_stops_only_that_clients_handles() -> None:
    t = tracker()
    t.track("c1", "g", "T", "a", 10_000, 0)
    t.track("c2", "g", "T", "b", 10_000, 0)
    t.track("c1", "g2", "T", "c", 10_000, 0)
    assert sorted(t.clients()) == ["c1", "c2"]
    assert t.forget_client("c1") == 2 and t.forget_client("c1") == 0
    assert [x.original for x in t.due(9_000)] == ["b"] and t.clients() == ["c2"]


def test_bounds_drop_the_oldest_of_the_client_then_of_all() -> None:
    t = tracker(max_per_client=2, max_total=3)
    assert t.track("c1", "g", "T", "a", 10_000, 0) == 0
    assert t.track("c1", "g", "T", "b", 10_000, 1) == 0
    assert t.track("c1", "g", "T", "c", 10_000, 2) == 1  # a: the client's oldest
    assert [x.original for x in t.entries.values()] == ["b", "c"]
    assert t.track("c2", "g", "T", "d", 10_000, 3) == 0
    assert t.track("c3", "g", "T", "e", 10_000, 4) == 1  # b: the oldest of all
    assert [x.original for x in t.entries.values()] == ["c", "d", "e"]
    assert t.evicted == 2 and len(t) == 3
    assert sorted(x.original for x in t.due(9_000)) == ["c", "d", "e"]


def test_retry_later_and_drop() -> None:
    t = tracker()
    t.track("c1", "g", "T", "a", 10_000, 0)
    (x,) = t.due(9_000)
    t.retry_later(x, 9_000, 500)
    assert t.due(9_499) == []
    (x,) = t.due(9_500)
    assert t.drop(x.key) is x and t.drop(x.key) is None and t.due(99_000) == []


def test_due_is_bounded_per_call_and_the_heap_stays_small_under_churn() -> None:
    t = tracker()
    for i in range(10):
        t.track("c", "g", "T", f"h{i}", 10_000 + i, 0)
    assert len(t.due(20_000, limit=4)) == 4
    assert len(t.due(20_000, limit=100)) == 6
    for i in range(5_000):  # tracked and acked at once: stale heap items compacted away
        t.track("c", "g", "T", f"x{i}", 50_000, 0)
        t.take("g", f"x{i}")
    assert len(t._heap) <= 2 * len(t) + 1025


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        tracker(slice_ms=1_000)  # not longer than ahead
    with pytest.raises(ValueError):
        tracker(max_total=0)
