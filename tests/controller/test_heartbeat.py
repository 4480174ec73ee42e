"""controller/heartbeat.py: the liveness table, with explicit times and MockClock."""

from __future__ import annotations

import trio
import trio.testing

from controller.heartbeat import MIN_TIMEOUT_S, HeartbeatTable
from controller.replicas import LiveInfo

A = "127.0.0.1:10911"


def test_alive_until_the_timeout() -> None:
    table = HeartbeatTable(timeout_s=10)
    assert table.beat(100.0, "c", "b", 1, A, epoch=3, max_offset=50, election_priority=2)
    assert table.is_alive(110.0, "b", 1)
    assert not table.is_alive(110.01, "b", 1)
    assert not table.is_alive(100.0, "b", 2)
    assert table.at(105).live_info("b", 1) == LiveInfo(3, 50, 2)
    assert table.at(111).live_info("b", 1) is None


def test_a_beat_keeps_what_it_does_not_say() -> None:
    table = HeartbeatTable(timeout_s=10)
    table.beat(0.0, "c", "b", 1, A, epoch=3, max_offset=50, confirm_offset=40)
    table.beat(5.0, "c", "b", 1, "127.0.0.1:1")
    entry = table.get("b", 1)
    assert entry is not None
    assert (entry.epoch, entry.max_offset, entry.confirm_offset, entry.address, entry.last_seen) == (
        3, 50, 40, "127.0.0.1:1", 5.0)


def test_expire_takes_out_only_the_silent() -> None:
    table = HeartbeatTable(timeout_s=3)
    table.beat(0.0, "c", "b", 1, A)
    table.beat(2.0, "c", "b", 2, A)
    assert table.expire(3.0) == []
    gone = table.expire(3.5)
    assert [(e.broker_name, e.broker_id) for e in gone] == [("b", 1)]
    assert len(table) == 1 and table.get("b", 1) is None
    assert table.expire(3.5) == []


def test_broker_timeout_may_shorten_never_lengthen() -> None:
    table = HeartbeatTable(timeout_s=10)
    table.beat(0.0, "c", "b", 1, A, timeout_ms=2000)
    assert not table.is_alive(2.5, "b", 1)
    table.beat(0.0, "c", "b", 2, A, timeout_ms=3_600_000)  # an hour asked: 10 s given
    assert table.is_alive(10.0, "b", 2) and not table.is_alive(10.5, "b", 2)
    table.beat(0.0, "c", "b", 3, A, timeout_ms=1)  # not below the floor
    entry = table.get("b", 3)
    assert entry is not None and entry.timeout == MIN_TIMEOUT_S


def test_table_is_bounded() -> None:
    table = HeartbeatTable(timeout_s=10, max_entries=2)
    assert table.beat(0.0, "c", "b", 1, A) and table.beat(0.0, "c", "b", 2, A)
    assert not table.beat(0.0, "c", "b", 3, A)
    assert table.refused == 1 and len(table) == 2
    assert table.beat(1.0, "c", "b", 1, A)  # a known replica still beats


def test_forget() -> None:
    table = HeartbeatTable(timeout_s=10)
    for i in (1, 2, 3):
        table.beat(0.0, "c", "b", i, A)
    table.beat(0.0, "c", "other", 1, A)
    table.forget("b", {2})
    assert sorted((e.broker_name, e.broker_id) for e in table) == [
        ("b", 1), ("b", 3), ("other", 1)]
    table.forget("b")
    assert [(e.broker_name, e.broker_id) for e in table] == [("other", 1)]


async def test_silent_master_expires_on_the_mock_clock(
        autojump_clock: trio.testing.MockClock) -> None:
    """Heart-beats every second keep a replica alive; once they stop it is gone
    after the timeout, and not before."""
    table = HeartbeatTable(timeout_s=1.0)
    stop = trio.Event()

    async def beating() -> None:
        while not stop.is_set():
            table.beat(trio.current_time(), "c", "b", 1, A)
            await trio.sleep(0.5)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(beating)
        await trio.sleep(5)
        assert table.expire(trio.current_time()) == []
        stop.set()
    entry = table.get("b", 1)
    assert entry is not None
    last = entry.last_seen
    while not table.expire(trio.current_time()):
        assert trio.current_time() - last <= 1.0
        await trio.sleep(0.1)
    assert 1.0 < trio.current_time() - last <= 1.1 + 1e-9


def test_a_closed_connection_takes_out_the_replicas_last_heard_over_it() -> None:
    t = HeartbeatTable(10.0)
    old, new, other = object(), object(), object()
    t.beat(0.0, "c", "b", 1, "a1", channel=old)
    t.beat(0.0, "c", "b", 2, "a2", channel=other)
    t.beat(0.0, "c", "x", 1, "x1", channel=old)
    t.beat(0.5, "c", "x", 1, "x1", channel=new)  # reconnected: heard over ``new`` since
    t.beat(0.6, "c", "b", 3, "a3")  # no channel known: never taken out by a close
    gone = t.drop_channel(old)
    assert [(e.broker_name, e.broker_id) for e in gone] == [("b", 1)]
    assert t.get("b", 1) is None
    assert t.get("x", 1) is not None and t.get("b", 2) is not None and t.get("b", 3) is not None
    assert t.drop_channel(old) == []
    assert [(e.broker_name, e.broker_id) for e in t.drop_channel(new)] == [("x", 1)]
