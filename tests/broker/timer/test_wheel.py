"""The timer wheel, the timer-log codec and the send rules: pure, no files or sockets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.timer.rules import TimerRefusal, due_ms, has_timer
from broker.timer.wheel import (
    RECORD_SIZE,
    Kind,
    TimerRecord,
    TimerWheel,
    decode_records,
    iter_records,
    key_hash,
)

NOW = 1_700_000_000_000
MAX = 3 * 86_400_000


def rec(wheel: TimerWheel, due: int, phys: int, key: str | None = None) -> TimerRecord:
    return TimerRecord(wheel.slot_of(due), due, phys, key_hash(key or f"k{phys}"), 100)


def test_record_codec_round_trip_and_torn_tail() -> None:
    records = [TimerRecord(1000, 999, 5, 7, 100), TimerRecord(2000, 1500, 2**40, 2**62, 1,
                                                              Kind.RECALL)]
    data = b"".join(r.encode() for r in records)
    assert len(data) == 2 * RECORD_SIZE == 80
    assert decode_records(data) == records
    assert decode_records(data + b"\x00" * 17) == records  # a torn tail is left out
    with pytest.raises(ValueError):
        decode_records(TimerRecord(1, 1, 1, 1, 1).encode()[:-1] + b"\x09")  # unknown kind


@given(st.lists(st.tuples(st.integers(0, 10**13), st.integers(0, 2**62), st.integers(0, 2**31 - 1)),
                max_size=20))
def test_codec_round_trips_any_record(fields: list[tuple[int, int, int]]) -> None:
    records = [TimerRecord(d, d, p, p >> 1, s) for d, p, s in fields]
    assert decode_records(b"".join(r.encode() for r in records)) == records


def test_slots_round_up_never_early() -> None:
    w = TimerWheel(1000)
    assert w.slot_of(NOW + 1) == NOW + 1000
    assert w.slot_of(NOW) == NOW
    assert w.slot_of(NOW + 999) == NOW + 1000
    w10 = TimerWheel(10)
    assert w10.slot_of(NOW + 1) == NOW + 10


def test_take_due_in_time_order_and_bounded() -> None:
    w = TimerWheel(1000)
    for i, due in enumerate([NOW + 3000, NOW + 1000, NOW + 2500, NOW + 1000]):
        w.add(rec(w, due, i))
    assert w.pending == 4 and w.next_due_ms() == NOW + 1000
    assert w.take_due(NOW + 999, 10) == []  # nothing early
    got = w.take_due(NOW + 1000, 1)  # bounded batch, in arrival order within a slot
    assert [e.phys for e in got] == [1] and w.cursor() == (NOW + 1000, 1)
    got = w.take_due(NOW + 2999, 10)  # NOW + 2500 waits in the NOW + 3000 slot
    assert [e.phys for e in got] == [3]
    assert w.cursor() == (NOW + 2000, 0) and w.pending == 2
    assert [e.phys for e in w.take_due(NOW + 10_000, 10)] == [0, 2]
    assert w.pending == 0 and w.next_due_ms() is None


def test_past_due_goes_to_the_cursor_slot_never_behind() -> None:
    w = TimerWheel(1000)
    w.add(rec(w, NOW + 1000, 1))
    w.take_due(NOW + 1000, 10)
    assert w.cursor() == (NOW + 2000, 0)
    late = rec(w, NOW - 50_000, 2)  # due long ago: the cursor's slot
    assert late.slot_ms == NOW + 2000
    w.add(late)
    assert [e.phys for e in w.take_due(NOW + 2000, 10)] == [2]


def test_replay_skips_exactly_what_the_cursor_passed() -> None:
    """A partly delivered slot: the checkpointed cursor counts its entries as the
    log orders them, and a second restart from a later cursor still does."""
    w = TimerWheel(1000)
    log: list[TimerRecord] = []
    for i in range(5):
        r = rec(w, NOW + 1000, i)
        log.append(r)
        w.add(r)
    log.append(rec(w, NOW + 2000, 9))
    w.add(log[-1])
    assert [e.phys for e in w.take_due(NOW + 1000, 2)] == [0, 1]
    cursor = w.cursor()
    again = TimerWheel(1000, *cursor)
    again.replay(tuple((r.slot_ms, r.due_ms, r.phys, r.key_hash, r.size, int(r.kind)))
                 for r in log)
    assert again.pending == 4
    assert [e.phys for e in again.take_due(NOW + 1000, 1)] == [2]
    third = TimerWheel(1000, *again.cursor())
    third.replay(iter_records(b"".join(r.encode() for r in log)))
    assert [e.phys for e in third.take_due(NOW + 5000, 10)] == [3, 4, 9]


def test_replay_of_a_finished_cursor_slot_moves_on() -> None:
    w = TimerWheel(1000, NOW + 1000, 2)
    w.replay(iter_records(b"".join(r.encode() for r in [
        TimerRecord(NOW, NOW, 0, 1, 1),  # behind the cursor
        TimerRecord(NOW + 1000, NOW + 1000, 1, 2, 1),
        TimerRecord(NOW + 1000, NOW + 1000, 2, 3, 1)])))
    assert w.pending == 0 and w.cursor() == (NOW + 2000, 0) and w.next_due_ms() is None


def test_recall_skips_the_entry_and_survives_replay() -> None:
    w = TimerWheel(1000)
    log = [rec(w, NOW + 1000, 1, "a"), rec(w, NOW + 1000, 2, "b")]
    for r in log:
        w.add(r)
    slot = w.find(key_hash("b"), NOW + 1000)
    assert slot == NOW + 1000 and w.find(key_hash("zz")) is None
    marker = TimerRecord(slot, slot, 77, key_hash("b"), 0, Kind.RECALL)
    log.append(marker)
    w.add(marker)
    assert w.find(key_hash("b")) is None  # recalled already
    replayed = TimerWheel(1000)
    replayed.replay(iter_records(b"".join(r.encode() for r in log)))
    for wheel in (w, replayed):
        assert [e.phys for e in wheel.take_due(NOW + 1000, 10)] == [1]
        assert wheel.recalled_skipped == 1 and wheel.pending == 0


def test_find_ignores_delivered_entries() -> None:
    w = TimerWheel(1000)
    w.add(rec(w, NOW + 1000, 1, "a"))
    w.add(rec(w, NOW + 1000, 2, "b"))
    w.take_due(NOW + 1000, 1)
    assert w.find(key_hash("a")) is None and w.find(key_hash("b")) == NOW + 1000


def test_rules_inputs() -> None:
    assert due_ms({}, NOW, MAX) is None and not has_timer({"DELAY": "3"})
    assert due_ms({"TIMER_DELIVER_MS": str(NOW + 5)}, NOW, MAX) == NOW + 5
    assert due_ms({"TIMER_DELAY_SEC": "7"}, NOW, MAX) == NOW + 7000
    assert due_ms({"TIMER_DELAY_MS": "7"}, NOW, MAX) == NOW + 7
    assert due_ms({"TIMER_DELIVER_MS": "5"}, NOW, MAX) == 5  # past: due at once
    assert due_ms({"TIMER_DELAY_MS": "0", "DELAY": "0"}, NOW, MAX) == NOW


@pytest.mark.parametrize("props, match", [
    ({"TIMER_DELIVER_MS": "abc"}, "not a non-negative integer"),
    ({"TIMER_DELIVER_MS": "-5"}, "not a non-negative integer"),
    ({"TIMER_DELIVER_MS": ""}, "not a non-negative integer"),
    ({"TIMER_DELIVER_MS": "１２"}, "not a non-negative integer"),  # non-ASCII digits
    ({"TIMER_DELIVER_MS": "9" * 19}, "64 bits"),
    ({"TIMER_DELIVER_MS": "9" * 400}, "not a non-negative integer"),
    ({"TIMER_DELAY_SEC": str(2**62)}, "timerMaxDelaySec"),
    ({"TIMER_DELAY_MS": str(MAX + 1)}, "timerMaxDelaySec"),
    ({"TIMER_DELIVER_MS": str(NOW + MAX + 1)}, "timerMaxDelaySec"),
    ({"TIMER_DELAY_SEC": "1", "TIMER_DELAY_MS": "1"}, "not TIMER_DELAY_SEC and TIMER_DELAY_MS"),
    ({"TIMER_DELAY_SEC": "1", "DELAY": "3"}, "not both"),
])
def test_rules_refuse_hostile_values(props: dict[str, str], match: str) -> None:
    with pytest.raises(TimerRefusal, match=match):
        due_ms(props, NOW, MAX)
