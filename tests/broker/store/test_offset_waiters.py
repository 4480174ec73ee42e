"""OffsetWaiters: sends waiting for an offset (fsync or slave ack), pure."""

from __future__ import annotations

import random

import pytest

from broker.store.offset_waiters import (
    STATUS_ORDER,
    AllDone,
    OffsetWaiters,
    Waiter,
    worst_status,
)
from broker.store.status import PutMessageStatus as S


def test_advance_releases_everything_at_or_below_in_offset_order() -> None:
    ws = OffsetWaiters(S.FLUSH_DISK_TIMEOUT)
    a, b, c = ws.add(300, 10.0), ws.add(100, 10.0), ws.add(200, 10.0)
    assert len(ws) == 3 and not a.done and a.status is None
    assert ws.advance(99) == []
    assert ws.advance(200) == [b, c]
    assert b.status is c.status is S.PUT_OK and a.status is None
    assert ws.lowest_offset() == 300 and len(ws) == 1
    assert ws.advance(150) == []  # the offset never goes back
    assert ws.reached == 200
    assert ws.advance(300) == [a] and len(ws) == 0
    assert ws.lowest_offset() is None and ws.next_deadline() is None


def test_add_below_the_reached_offset_is_done_at_once() -> None:
    ws = OffsetWaiters(S.FLUSH_SLAVE_TIMEOUT)
    ws.advance(1000)
    w = ws.add(1000, 5.0)
    assert w.status is S.PUT_OK and len(ws) == 0
    heard: list[Waiter] = []
    w.on_done(heard.append)  # a callback on a done waiter runs at once
    assert heard == [w]


def test_expire_gives_the_timeout_status_by_deadline() -> None:
    ws = OffsetWaiters(S.FLUSH_SLAVE_TIMEOUT)
    late = ws.add(100, 5.0)
    later = ws.add(50, 7.0)
    ok = ws.add(10, 6.0)
    assert ws.next_deadline() == 5.0
    assert ws.expire(4.999) == []
    assert ws.expire(5.0) == [late] and late.status is S.FLUSH_SLAVE_TIMEOUT
    assert ws.advance(10) == [ok]
    assert ws.next_deadline() == 7.0  # done waiters are skipped
    assert ws.expire(100.0) == [later]
    # a late waiter is not released again by a later advance
    assert ws.advance(10**9) == [] and late.status is S.FLUSH_SLAVE_TIMEOUT
    assert len(ws) == 0


def test_fail_all() -> None:
    ws = OffsetWaiters(S.FLUSH_DISK_TIMEOUT)
    ws_list = [ws.add(o, 1.0) for o in (30, 10, 20)]
    ws.advance(10)
    failed = ws.fail_all(S.SERVICE_NOT_AVAILABLE)
    assert [w.next_offset for w in failed] == [20, 30]
    assert [w.status for w in ws_list] == [S.SERVICE_NOT_AVAILABLE, S.PUT_OK, S.SERVICE_NOT_AVAILABLE]
    assert len(ws) == 0 and ws.expire(2.0) == [] and ws.advance(100) == []


def test_callbacks_run_once_and_in_order() -> None:
    ws = OffsetWaiters(S.FLUSH_DISK_TIMEOUT)
    heard: list[tuple[int, S | None]] = []
    for off in (3, 1, 2):
        ws.add(off, 9.0).on_done(lambda w: heard.append((w.next_offset, w.status)))
    ws.advance(2)
    ws.expire(9.0)
    ws.advance(3)
    assert heard == [(1, S.PUT_OK), (2, S.PUT_OK), (3, S.FLUSH_DISK_TIMEOUT)]


def test_a_failing_callback_does_not_strand_the_others() -> None:
    ws = OffsetWaiters(S.FLUSH_DISK_TIMEOUT)
    heard: list[int] = []

    def boom(w: Waiter) -> None:
        raise RuntimeError("edge broke")

    ws.add(1, 9.0).on_done(boom)
    ws.add(2, 9.0).on_done(lambda w: heard.append(w.next_offset))
    with pytest.raises(ExceptionGroup) as info:
        ws.advance(5)
    assert heard == [2] and len(ws) == 0
    assert info.group_contains(RuntimeError, match="edge broke")


def test_thousands_of_waiters_against_a_model() -> None:
    rng = random.Random(12)
    ws = OffsetWaiters(S.FLUSH_SLAVE_TIMEOUT)
    model: dict[int, tuple[int, float, Waiter]] = {}
    now, reached, offset = 0.0, 0, 0
    for step in range(20_000):
        op = rng.random()
        if op < 0.6:
            offset += rng.randint(1, 500)
            w = ws.add(offset, now + rng.uniform(0.5, 5.0))
            model[id(w)] = (offset, w.deadline, w)
        elif op < 0.8:
            reached = max(reached, rng.randint(reached, offset + 1))
            done = ws.advance(reached)
            expect = sorted((o, id(w)) for o, d, w in model.values() if o <= reached)
            assert sorted((w.next_offset, id(w)) for w in done) == expect
            assert [w.next_offset for w in done] == sorted(w.next_offset for w in done)
            for w in done:
                del model[id(w)]
        else:
            now += rng.uniform(0, 1.0)
            late = ws.expire(now)
            assert {id(w) for w in late} == {k for k, (_o, d, _w) in model.items() if d <= now}
            assert all(w.status is S.FLUSH_SLAVE_TIMEOUT for w in late)
            for w in late:
                del model[id(w)]
        if step % 1000 == 0:
            assert len(ws) == len(model)
    assert len(ws) == len(model)
    # memory follows the live waiters, not everything ever added
    assert len(ws._by_offset) <= 2 * len(model) + 64
    assert len(ws._by_deadline) <= 2 * len(model) + 64


def test_a_slave_that_never_acks_does_not_grow_memory() -> None:
    ws = OffsetWaiters(S.FLUSH_SLAVE_TIMEOUT)
    for i in range(10_000):
        ws.add(i + 1, i + 5.0)
        ws.expire(float(i))
    assert len(ws) == 5
    assert len(ws._by_offset) < 100 and len(ws._by_deadline) < 100


def test_status_order_is_total_and_explicit() -> None:
    assert set(STATUS_ORDER) == set(S) and len(STATUS_ORDER) == len(S)
    assert STATUS_ORDER[0] is S.PUT_OK
    assert worst_status([]) is S.PUT_OK
    assert worst_status([S.PUT_OK, S.FLUSH_DISK_TIMEOUT]) is S.FLUSH_DISK_TIMEOUT
    # the slave's verdict outranks the disk's, as RocketMQ applies it last
    assert worst_status([S.FLUSH_SLAVE_TIMEOUT, S.FLUSH_DISK_TIMEOUT]) is S.FLUSH_SLAVE_TIMEOUT
    assert worst_status([S.FLUSH_DISK_TIMEOUT, S.SLAVE_NOT_AVAILABLE]) is S.SLAVE_NOT_AVAILABLE
    assert worst_status([S.SERVICE_NOT_AVAILABLE, S.FLUSH_SLAVE_TIMEOUT]) is S.SERVICE_NOT_AVAILABLE


def test_all_done_waits_for_every_waiter_and_the_worst_wins() -> None:
    flush = OffsetWaiters(S.FLUSH_DISK_TIMEOUT)
    slave = OffsetWaiters(S.FLUSH_SLAVE_TIMEOUT)
    joined = AllDone([flush.add(100, 5.0), slave.add(100, 5.0)])
    heard: list[S | None] = []
    joined.on_done(lambda j: heard.append(j.status))
    flush.expire(5.0)  # the disk is late ...
    assert not joined.done and heard == []
    slave.advance(100)  # ... the slave acks: answered, with the worse status
    assert joined.status is S.FLUSH_DISK_TIMEOUT and heard == [S.FLUSH_DISK_TIMEOUT]
    slave.advance(200)
    assert heard == [S.FLUSH_DISK_TIMEOUT]  # once


def test_all_done_with_decided_and_no_waiters() -> None:
    flush = OffsetWaiters(S.FLUSH_DISK_TIMEOUT)
    joined = AllDone([flush.add(10, 5.0), Waiter.finished(S.SLAVE_NOT_AVAILABLE)])
    assert not joined.done
    flush.advance(10)
    assert joined.status is S.SLAVE_NOT_AVAILABLE
    empty = AllDone([])
    assert empty.done and empty.status is S.PUT_OK
    heard: list[S | None] = []
    empty.on_done(lambda j: heard.append(j.status))
    assert heard == [S.PUT_OK]
    both_ok = AllDone([Waiter.finished(S.PUT_OK), Waiter.finished(S.PUT_OK)])
    assert both_ok.status is S.PUT_OK
