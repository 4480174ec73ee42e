"""HoldIndex, the pure part of long polling: holds by queue and tags code,
which holds new consume-queue entries wake, bounds and deadlines. No trio, no
sockets: time and offsets are passed in."""

from __future__ import annotations

from broker.long_polling import REFUSED_BROKER, REFUSED_CONNECTION, HeldPull, HoldIndex
from broker.service.pull import PullRequest
from protocol.hashing import java_string_hash
from tests.broker.fakes import FakeOwner

KEY = ("T", 0)
A, B, C = (java_string_hash(t) for t in ("TagA", "TagB", "TagC"))


class Conn(FakeOwner):
    """The index never answers: nothing may reach ``sent``."""


def hold(conn: Conn, offset: int, codes: set[int] | None, deadline: float = 10.0,
         queue_id: int = 0) -> HeldPull:
    return HeldPull(conn.waiter(), PullRequest("g", "T", queue_id, offset, 32), offset, deadline,
                    "T", queue_id, None if codes is None else frozenset(codes))


def test_new_entries_wake_only_the_holds_their_tags_match() -> None:
    idx, conn = HoldIndex(), Conn()
    a, b, ab, star = hold(conn, 5, {A}), hold(conn, 5, {B}), hold(conn, 5, {A, B}), hold(conn, 5, None)
    others = [hold(conn, 5, {C}) for _ in range(100)]
    for h in [a, b, ab, star, *others]:
        assert idx.add(h, max_offset=5) is None
    assert idx.arrived(KEY, 7)
    assert idx.to_read(KEY, 1024) == (5, 7)
    woken = idx.matched(KEY, 5, 7, [A, A])
    assert woken == [a, ab, star]  # oldest first; TagB and TagC holds are not looked at
    assert not idx.behind(KEY)
    # looked-at entries are not looked at again
    assert idx.to_read(KEY, 1024) is None
    assert idx.arrived(KEY, 8) and idx.matched(KEY, 7, 8, [B]) == [b, ab, star]


def test_a_hold_ignores_entries_before_its_offset() -> None:
    idx, conn = HoldIndex(), Conn()
    tagged, star = hold(conn, 10, {A}), hold(conn, 10, None)
    idx.add(tagged, max_offset=5)  # e.g. a slave behind the offset asked for
    idx.add(star, max_offset=5)
    assert idx.arrived(KEY, 10)
    assert idx.matched(KEY, 5, 10, [A] * 5) == []  # entries 5..9 are before offset 10
    assert idx.arrived(KEY, 12)
    assert idx.matched(KEY, 10, 12, [B, A]) == [tagged, star]


def test_entries_whose_tags_are_unknown_wake_every_hold_below_them() -> None:
    idx, conn = HoldIndex(), Conn()
    a, c, later = hold(conn, 3, {A}), hold(conn, 3, {C}), hold(conn, 9, {C})
    for h in (a, c, later):
        idx.add(h, max_offset=3)
    idx.arrived(KEY, 6)
    # one code read of three entries (a gap, a read failure, no reader): the rest may be anything
    assert idx.matched(KEY, 3, 6, [B]) == [a, c]
    assert idx.matched(KEY, 6, 10, []) == [a, c, later]


def test_reads_are_capped_and_go_on_where_they_stopped() -> None:
    idx, conn = HoldIndex(), Conn()
    idx.add(hold(conn, 0, {C}), max_offset=0)
    idx.arrived(KEY, 2500)
    ranges = []
    for _ in range(10):  # bounded
        rng = idx.to_read(KEY, 1024)
        if rng is None:
            break
        ranges.append(rng)
        idx.matched(KEY, *rng, [A] * (rng[1] - rng[0]))
    assert ranges == [(0, 1024), (1024, 2048), (2048, 2500)]
    assert idx.to_read(KEY, None) is None and not idx.behind(KEY)
    idx.arrived(KEY, 2400)  # an older report changes nothing
    assert idx.to_read(KEY, None) is None


def test_a_queue_starts_at_the_max_offset_its_first_pull_saw() -> None:
    idx, conn = HoldIndex(), Conn()
    idx.add(hold(conn, 0, {A}), max_offset=40)  # entries 0..39 were scanned by the pull
    assert not idx.behind(KEY)
    idx.arrived(KEY, 41)
    assert idx.to_read(KEY, 1024) == (40, 41)
    # without a max offset: the offset waited for
    idx.add(hold(conn, 7, {A}, queue_id=1))
    idx.arrived(("T", 1), 8)
    assert idx.to_read(("T", 1), None) == (7, 8)
    # a later pull that saw more than was reported: those entries are looked at too
    idx.add(hold(conn, 0, {B}), max_offset=45)
    assert idx.to_read(KEY, 1024) == (40, 45)


def test_a_queue_without_holds_is_forgotten() -> None:
    idx, conn = HoldIndex(), Conn()
    h = hold(conn, 0, {A})
    idx.add(h, max_offset=0)
    idx.remove(h)
    idx.remove(h)  # idempotent
    assert idx.queues == {} and idx.by_owner == {} and idx.total == 0 and h.done
    assert not idx.arrived(KEY, 5)  # nobody waits: nothing to read


def test_bounds_per_connection_and_in_all() -> None:
    idx = HoldIndex(max_held=5, max_held_per_connection=3)
    one, two = Conn(), Conn()
    held = [hold(one, 0, {A}) for _ in range(3)]
    assert [idx.add(h) for h in held] == [None, None, None]
    assert idx.add(hold(one, 0, {A})) == REFUSED_CONNECTION
    assert [idx.add(hold(two, 0, None)) for _ in range(2)] == [None, None]
    assert idx.add(hold(two, 0, None)) == REFUSED_BROKER
    assert idx.total == 5
    idx.remove(held[0])  # an answer frees a place on that connection and in all
    assert idx.refusal(one) is None and idx.add(hold(one, 0, {A})) is None
    assert idx.refusal(one) == REFUSED_CONNECTION


def test_a_closed_connections_holds_are_dropped_with_its_count() -> None:
    idx = HoldIndex(max_held=10, max_held_per_connection=4)
    gone, stays = Conn(), Conn()
    dropped = [hold(gone, 0, {A}), hold(gone, 0, None, queue_id=1), hold(gone, 3, {B})]
    kept = hold(stays, 0, {A})
    for h in (*dropped, kept):
        idx.add(h)
    assert idx.drop_owner(gone) == 3 and idx.drop_owner(gone) == 0
    assert all(h.done for h in dropped) and not kept.done
    assert gone not in idx.by_owner and idx.total == 1
    assert list(idx.queues) == [KEY]  # queue 1 had only the dropped hold
    idx.arrived(KEY, 5)
    assert idx.matched(KEY, 0, 5, [A, B, B, B, B]) == [kept]
    assert idx.expire(100.0) == [kept]  # the dropped holds' deadlines are gone too


def test_deadlines_earliest_first() -> None:
    idx, conn = HoldIndex(), Conn()
    late, early, answered = hold(conn, 0, None, 9.0), hold(conn, 0, None, 2.0), hold(conn, 0, None, 1.0)
    for h in (late, early, answered):
        idx.add(h)
    idx.remove(answered)
    assert idx.next_deadline() == 2.0  # an answered hold's deadline does not count
    assert idx.expire(1.9) == []
    assert idx.expire(2.0) == [early] and early.done
    assert idx.next_deadline() == 9.0
    assert idx.expire(50.0) == [late] and idx.next_deadline() is None and idx.total == 0


def test_answered_holds_do_not_pile_up_in_the_deadline_heap() -> None:
    idx, conn = HoldIndex(), Conn()
    for i in range(20_000):
        h = hold(conn, 0, {A}, deadline=float(i))
        idx.add(h)
        idx.remove(h)
    assert len(idx._deadlines) <= 1024 + 1
