"""The SyncStateSet of controller mode: the value, the live holder, the ack
rule (minInSyncReplicas, allAckInSyncStateSet), and the master's shrink and
expand proposals on explicit clocks."""

from __future__ import annotations

import pytest

from broker.store.ha.sync_state import (
    MAX_SAMPLES,
    CatchUp,
    Proposal,
    SyncStateDecider,
    SyncStateError,
    SyncStateHolder,
    SyncStateSet,
    members_acked,
    needed_acks,
    offset_held_by,
    replicas_short,
    sync_state_problem,
)


def sss(master: int, *slaves: int, epoch: int = 1) -> SyncStateSet:
    return SyncStateSet(master, frozenset({master, *slaves}), epoch)


# ---- the value and the holder -------------------------------------------------------------


@pytest.mark.parametrize(("master", "members", "epoch", "problem"), [
    (0, {1, 2}, 1, "not in the SyncStateSet"),
    (-1, {-1}, 1, "bad master id"),
    (True, {True}, 1, "bad master id"),
    (0, set(), 1, "1..64 members"),
    (0, set(range(65)), 1, "1..64 members"),
    (0, {0, "1"}, 1, "bad member id"),
    (0, {0}, -1, "bad SyncStateSet epoch"),
    (0, {0}, 1.5, "bad SyncStateSet epoch"),
    (0, [0], 1, "must be a set"),
])
def test_a_sync_state_set_from_the_network_is_checked(master: object, members: object,
                                                        epoch: object, problem: str) -> None:
    found = sync_state_problem(master, members, epoch)
    assert found is not None and problem in found
    with pytest.raises(SyncStateError, match=problem):
        SyncStateSet(master, members, epoch)  # type: ignore[arg-type]


def test_the_holder_tells_observers_of_each_change_and_refuses_stale_ones() -> None:
    holder = SyncStateHolder()
    seen: list[tuple[SyncStateSet | None, SyncStateSet]] = []
    holder.observe(lambda old, new: seen.append((old, new)))
    first, shrunk = sss(0, 1, 2, epoch=3), sss(0, 1, epoch=4)
    assert holder.set(first) and holder.set(shrunk)
    assert not holder.set(sss(0, 1, epoch=4))  # the same answer twice: nothing moves
    assert seen == [(None, first), (first, shrunk)]
    with pytest.raises(SyncStateError, match="older than the epoch in force 4"):
        holder.set(sss(0, 1, 2, epoch=3))
    with pytest.raises(SyncStateError, match="already holds"):
        holder.set(sss(0, 2, epoch=4))
    assert holder.current == shrunk and len(seen) == 2
    with pytest.raises(SyncStateError, match="master 0"):
        holder.set(sss(2, 1, epoch=4))
    failover = sss(2, 1, epoch=5)  # an election moves the group's epoch too
    assert holder.set(failover) and holder.current == failover
    holder.clear()  # a new term (the broker's role changed) takes any epoch
    assert holder.set(sss(0, epoch=1))
    assert sss(0, 1, 2).slaves == {1, 2}
    assert first.describe() == {"masterId": 0, "syncStateSet": [0, 1, 2],
                                "syncStateSetEpoch": 3}


# ---- the ack rule and the confirm offset ------------------------------------------------


@pytest.mark.parametrize(("members", "min_in_sync", "all_ack", "need"), [
    ((1, 2), 1, False, 1),
    ((1, 2), 2, False, 2),
    ((1, 2), 0, False, 1),  # the master always counts
    ((1, 2), 1, True, 3),
    ((), 2, True, 1),
])
def test_needed_acks(members: tuple[int, ...], min_in_sync: int, all_ack: bool,
                     need: int) -> None:
    assert needed_acks(sss(0, *members), min_in_sync, all_ack) == need


def test_replicas_short_when_the_set_is_smaller_than_min_in_sync_replicas() -> None:
    assert replicas_short(sss(0, 1), 2) is None
    short = replicas_short(sss(0), 2)
    assert short is not None and "1 of minInSyncReplicas=2" in short
    no_set = replicas_short(None, 1)
    assert no_set is not None and "no SyncStateSet" in no_set


@pytest.mark.parametrize(("need", "held"), [(1, 1000), (2, 700), (3, 300), (4, 0), (0, 1000)])
def test_offset_held_by_counts_the_master_and_its_members_only(need: int, held: int) -> None:
    # slave 3 is outside the set: its acknowledgement counts for nothing
    acked = {1: 300, 2: 700, 3: 1000}
    assert offset_held_by(sss(0, 1, 2), 1000, acked, need) == held


def test_offset_held_by_a_member_not_connected_is_zero() -> None:
    assert offset_held_by(sss(0, 1, 2), 500, {2: 400}, 3) == 0
    assert offset_held_by(sss(0, 1, 2), 500, {2: 400}, 2) == 400
    # a report past the master's end (it cannot be) counts as the end
    assert offset_held_by(sss(0, 1), 500, {1: 900}, 2) == 500


def test_members_acked_takes_the_best_connection_of_each_broker() -> None:
    assert members_acked([(1, 10), (1, 30), (2, 5), (None, 99)]) == {1: 30, 2: 5}


# ---- catching up, shrink and expand -----------------------------------------------------


def test_catch_up_is_dated_by_the_transfer_whose_end_the_slave_acknowledged() -> None:
    c = CatchUp(now=0.0)
    c.on_sent(100, 1.0)
    c.on_sent(200, 2.0)
    c.on_sent(200, 2.5)  # same end: the earlier point stays
    c.on_sent(300, 3.0)
    c.on_report(50, 400, 9.0)  # holds nothing the master had at a transfer
    assert c.last_caught_up == 0.0
    c.on_report(150, 400, 9.2)
    assert c.last_caught_up == 1.0
    c.on_report(250, 400, 9.5)  # it held the master's end of t=2 by now
    assert c.last_caught_up == 2.0 and c.acked == 250
    c.on_report(400, 400, 10.0)  # the master's present end: caught up now
    assert c.last_caught_up == 10.0 and not c.samples


def test_catch_up_keeps_a_bounded_number_of_points() -> None:
    c = CatchUp(now=0.0)
    for i in range(MAX_SAMPLES + 10):
        c.on_sent(i + 1, float(i))
    assert len(c.samples) == MAX_SAMPLES
    c.on_report(5, 10**9, 99.0)  # the oldest points went: no date from them
    assert c.last_caught_up == 0.0


def caught(acked: int, at: float) -> CatchUp:
    c = CatchUp(now=at)
    c.acked = acked
    return c


def test_a_member_not_caught_up_for_ha_max_time_slave_not_catchup_is_proposed_out() -> None:
    proposals: list[Proposal] = []
    d = SyncStateDecider(proposals.append, max_not_catchup_s=15.0, retry_s=5.0)
    current = sss(0, 1, 2, epoch=7)
    slaves = {1: caught(1000, 0.0), 2: caught(1000, 10.0)}
    assert d.tick(15.0, current, slaves, 1000, 0) is None  # exactly 15 s: not yet
    p = d.tick(15.5, current, slaves, 1000, 0)
    assert p == Proposal(0, frozenset({0, 2}), 7, removed=frozenset({1}))
    assert proposals == [p]
    # in flight: not proposed again until the answer moves the epoch or retry_s passes
    assert d.tick(16.0, current, slaves, 1000, 0) is None
    assert d.tick(20.6, current, slaves, 1000, 0) == p and len(proposals) == 2
    # the controller's answer is in force: nothing more to change
    assert d.tick(21.0, sss(0, 2, epoch=8), slaves, 1000, 0) is None


def test_a_member_with_no_connection_is_proposed_out_and_the_master_never() -> None:
    d = SyncStateDecider(lambda _p: None)
    p = d.decide(1.0, sss(0, 1, 2, epoch=2), {2: caught(50, 1.0)}, 50, 0)
    assert p is not None and p.members == {0, 2} and p.removed == {1}
    assert d.decide(100.0, sss(0, epoch=2), {}, 0, 0) is None


def test_a_slave_caught_up_to_the_confirm_offset_in_this_epoch_is_proposed_back() -> None:
    d = SyncStateDecider(lambda _p: None, max_not_catchup_s=15.0)
    current = sss(0, 1, epoch=3)
    # behind the confirm offset, or before this epoch's start: stays out
    assert d.decide(5.0, current, {1: caught(900, 5.0), 2: caught(899, 5.0)}, 900, 0) is None
    assert d.decide(5.0, current, {1: caught(900, 5.0), 2: caught(950, 5.0)}, 900, 960) is None
    p = d.decide(5.0, current, {1: caught(900, 5.0), 2: caught(960, 5.0)}, 900, 960)
    assert p == Proposal(0, frozenset({0, 1, 2}), 3, added=frozenset({2}))
    # both at once: one leaves, one joins, in one proposal
    p = d.decide(30.0, current, {1: caught(900, 5.0), 2: caught(960, 29.0)}, 900, 0)
    assert p is not None and p.members == {0, 2} and p.removed == {1} and p.added == {2}


def test_a_member_whose_connection_closed_is_proposed_out_at_once() -> None:
    """RocketMQ's AutoSwitchHAService.removeConnection: a member gone is proposed out
    when its connection closes, not haMaxTimeSlaveNotCatchup later; one never heard
    since this master began keeps its grace."""
    d = SyncStateDecider(lambda _p: None, max_not_catchup_s=15.0)
    current = sss(0, 1, 2, epoch=4)
    gone, never = caught(1000, 10.0), CatchUp(now=10.0, connected=False)
    gone.connected, gone.dropped = False, True
    p = d.decide(10.1, current, {1: gone, 2: never}, 1000, 0)
    assert p == Proposal(0, frozenset({0, 2}), 4, removed=frozenset({1}))
    # back (reconnected): not out for that, and in again once caught up
    gone.connected, gone.dropped = True, False
    assert d.decide(10.2, current, {1: gone, 2: never}, 1000, 0) is None
