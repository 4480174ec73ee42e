"""The HA listener's connection bound (broker/store/ha/slots.py): haMaxConnections,
connections still in their hello dropped for newer ones (the flooding host's
first), never an accepted slave's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.store.ha.slots import Slot, Slots

SLAVE, ATTACKER = "10.0.0.1", "10.0.0.66"


def recorder() -> tuple[list[str], Callable[[str], Callable[[], None]]]:
    dropped: list[str] = []

    def drop(name: str) -> Callable[[], None]:
        return lambda: dropped.append(name)
    return dropped, drop


def test_bound_refuses_once_every_slot_passed_its_hello() -> None:
    slots = Slots(limit=3, max_pending=3)
    dropped, drop = recorder()
    taken = [slots.take(SLAVE, drop(f"s{i}")) for i in range(3)]
    assert slots.open == 3 and slots.pending == 3
    for s in taken:
        assert s is not None
        s.established()
    assert slots.pending == 0
    assert slots.take(ATTACKER, drop("late")) is None  # all are slaves: refused
    assert slots.refused == 1 and slots.open == 3 and not dropped
    first = taken[0]
    assert first is not None
    first.close()
    first.close()  # idempotent
    assert slots.open == 2
    assert slots.take(ATTACKER, drop("next")) is not None and slots.open == 3


def test_a_flooding_host_drops_only_its_own_connections() -> None:
    """Rows 9/10: a host opening connection after connection that never finish
    their hello fills the slots; each new one then drops that host's oldest, so a
    slave's connection, even while in its own hello, is never dropped for them,
    and once past its hello is never dropped at all."""
    slots = Slots(limit=6, max_pending=4)
    dropped, drop = recorder()
    slave = slots.take(SLAVE, drop("slave1"))
    assert slave is not None
    slave.established()
    flood: list[Slot] = []
    for i in range(1000):
        s = slots.take(ATTACKER, drop(f"flood{i}"))
        assert s is not None  # never refused: one of its own is dropped
        flood.append(s)
        assert slots.open <= 6 and slots.pending <= 4
    assert len(dropped) == 996 and dropped[0] == "flood0" and slots.refused == 0
    assert all(s.closed for s in flood[:-4]) and not any(s.closed for s in flood[-4:])
    # a second slave connects amid the flood: an attacker's connection makes room,
    # and the flood going on while it is in its hello never drops it
    second = slots.take(SLAVE, drop("slave2"))
    assert second is not None and dropped[-1] == "flood996"
    for i in range(100):
        assert slots.take(ATTACKER, drop(f"more{i}")) is not None
    assert not second.closed and "slave2" not in dropped
    second.established()
    for i in range(100):
        assert slots.take(ATTACKER, drop(f"again{i}")) is not None
    assert not slave.closed and not second.closed
    assert slots.open <= 6 and slots.dropped == len(dropped)
    # a dropped connection's own close afterwards does not free a slot twice
    opened = slots.open
    flood[0].close()
    assert slots.open == opened


def test_among_hosts_holding_as_many_the_oldest_goes() -> None:
    slots = Slots(limit=10, max_pending=3)
    dropped, drop = recorder()
    for host in ("a", "b", "c"):
        assert slots.take(host, drop(host)) is not None
    assert slots.take("d", drop("d")) is not None and dropped == ["a"]
    assert slots.take("b", drop("b2")) is not None and dropped == ["a", "b"]  # b: 2 with it
    assert slots.pending == 3 and slots.open == 3


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Slots(0, 1)
