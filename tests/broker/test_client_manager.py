from __future__ import annotations

from broker.client_manager import ClientGroups, RebalanceLockManager


def test_groups_membership_and_expiry() -> None:
    groups = ClientGroups("consumer")
    a, b = object(), object()
    assert groups.register("g", "c1", a, 0.0, {"subscriptionDataSet": [{"topic": "T", "subString": "*"}]})
    assert not groups.register("g", "c1", a, 10.0)  # a renewal changes nothing
    assert groups.register("g", "c2", b, 10.0)
    assert groups.client_ids("g") == ["c1", "c2"]
    assert groups.groups["g"].subscriptions["T"]["subString"] == "*"
    assert groups.scan_not_active(131.0, 120.0) == {"g"}  # both last seen at 10 s
    assert groups.client_ids("g") == []
    groups.register("g", "c1", a, 200.0)
    groups.register("g", "c2", b, 300.0)
    assert groups.scan_not_active(330.0, 120.0) == {"g"} and groups.client_ids("g") == ["c2"]
    assert groups.connection_closed(b) == {"g"} and groups.client_ids("g") == []
    assert not groups.unregister("g", "c9")


def test_queue_locks_expire_after_60s() -> None:
    locks = RebalanceLockManager()
    q0, q1 = ("T", "b", 0), ("T", "b", 1)
    assert locks.try_lock_batch("g", [q0, q1], "A", 0.0) == [q0, q1]
    assert locks.try_lock_batch("g", [q0, q1], "B", 30.0) == []
    assert locks.try_lock_batch("g", [q0], "A", 50.0) == [q0]  # renewed
    assert locks.try_lock_batch("g", [q0, q1], "B", 70.0) == [q1]  # q1 expired, q0 renewed at 50
    locks.unlock_batch("g", [q0], "B")  # not B's: no effect
    assert locks.try_lock_batch("g", [q0], "B", 80.0) == []
    locks.unlock_batch("g", [q0], "A")
    assert locks.try_lock_batch("g", [q0], "B", 81.0) == [q0]
