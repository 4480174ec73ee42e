"""The HA listener's connection bound (broker/store/ha/slots.py): haMaxConnections,
connections still in their hello dropped for newer ones, never an accepted slave's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.store.ha.slots import Slot, Slots


def test_bound_refuses_once_every_slot_passed_its_hello() -> None:
    slots = Slots(limit=3, max_pending=3)
    dropped: list[int] = []

    def drop(i: int) -> Callable[[], None]:
        return lambda: dropped.append(i)
    taken = [slots.take(drop(i)) for i in range(3)]
    assert all(taken) and slots.open == 3 and slots.pending == 3
    for s in taken:
        assert s is not None
        s.established()
    assert slots.pending == 0
    assert slots.take(lambda: dropped.append(99)) is None  # all are slaves: refused
    assert slots.refused == 1 and slots.open == 3 and not dropped
    taken[0].close()  # type: ignore[union-attr]
    taken[0].close()  # type: ignore[union-attr]  # idempotent
    assert slots.open == 2
    assert slots.take(lambda: None) is not None and slots.open == 3


def test_a_flood_in_hellos_cannot_keep_a_slave_out() -> None:
    """Row 9/10: connections that never finish their hello take the slots; each
    new one drops the oldest still in its hello, so a slave's connection (the
    newest, its hello one round trip) always gets in and, once past its hello,
    is never dropped."""
    slots = Slots(limit=4, max_pending=2)
    dropped: list[str] = []

    def drop(name: str) -> Callable[[], None]:
        return lambda: dropped.append(name)
    slave = slots.take(lambda: dropped.append("slave1"))
    assert slave is not None
    slave.established()
    flood: list[Slot] = []
    for i in range(1000):
        s = slots.take(drop(f"flood{i}"))
        assert s is not None  # never refused: there is always one in its hello to drop
        flood.append(s)
        assert slots.open <= 4 and slots.pending <= 2
    assert len(dropped) == 998 and "slave1" not in dropped and slots.refused == 0
    assert all(s.closed for s in flood[:-2]) and not any(s.closed for s in flood[-2:])
    real = slots.take(lambda: dropped.append("slave2"))
    assert real is not None and dropped[-1] == "flood998"
    real.established()
    for i in range(10):  # the flood goes on: the slaves stay
        assert slots.take(drop(f"more{i}")) is not None
    assert "slave2" not in dropped and not slave.closed and not real.closed
    assert slots.open == 4 and slots.dropped == 998 + 1 + 9  # the first fills a free slot
    # a dropped connection's own close afterwards does not free a slot twice
    opened = slots.open
    flood[0].close()
    assert slots.open == opened


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Slots(0, 1)
