"""POP's pure core: receipt handles, the in-flight table's state machine,
its snapshot, and the log's frames (torn tails, checkpoints). No trio, no
sockets: time is a number passed in."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from broker.pop.core import (
    MAX_HANDLE_LEN,
    EntryError,
    HandleCodec,
    HandleRef,
    Inflight,
    PopTable,
    ack_entry,
    change_entry,
    pop_entry,
    revive_entry,
)
from broker.store.pop_log import PopLog, decode_frames, encode_frame

SECRET = b"s" * 32


def rec(offset: int, visible: int, group: str = "g", topic: str = "T", queue: int = 0,
        gen: int = 0) -> Inflight:
    return Inflight(group, topic, queue, offset, 1000 + offset, visible, 1, 0, gen)


def test_handle_round_trip_names_the_record() -> None:
    codec = HandleCodec(SECRET, "broker-a")
    handle = codec.encode(rec(7, 100, gen=3))
    assert len(handle) < MAX_HANDLE_LEN
    assert codec.decode(handle, "g") == HandleRef("broker-a", "T", 0, 7, 3)


@pytest.mark.parametrize("handle, problem", [
    ("", "empty"),
    ("x" * (MAX_HANDLE_LEN + 1), "longer than"),
    ("2.abc.def", "malformed"),
    ("1.abc", "malformed"),
    ("1.!!!.???", "malformed"),
])
def test_hostile_handles_are_refused_with_a_reason(handle: str, problem: str) -> None:
    result = HandleCodec(SECRET, "b").decode(handle, "g")
    assert isinstance(result, str) and problem in result


def test_a_handle_is_bound_to_its_group_and_secret() -> None:
    handle = HandleCodec(SECRET, "b").encode(rec(1, 1))
    assert "not issued" in str(HandleCodec(SECRET, "b").decode(handle, "other"))
    assert "not issued" in str(HandleCodec(b"t" * 32, "b").decode(handle, "g"))
    # a forged payload under the old mac
    _, payload, mac = handle.split(".")
    forged_payload = base64.urlsafe_b64encode(
        base64.urlsafe_b64decode(payload + "==").replace(b"\x1f1\x1f", b"\x1f2\x1f")
    ).rstrip(b"=").decode()
    assert forged_payload != payload
    assert "not issued" in str(HandleCodec(SECRET, "b").decode(f"1.{forged_payload}.{mac}", "g"))


def test_pop_ack_change_and_due_in_visible_order() -> None:
    t = PopTable(max_per_group=10, max_total=100)
    t.apply(pop_entry("g", "T", 0, 3, [rec(0, 500), rec(1, 300), rec(2, 400)]))
    assert t.offset("g", "T", 0) == 3 and len(t) == 3 and t.room("g") == 7
    assert [r.queue_offset for r in t.due(350, 10)] == [1]
    assert [r.queue_offset for r in t.due(1000, 10)] == [1, 2, 0]
    t.apply(ack_entry(("g", "T", 0, 1)))
    t.apply(change_entry(("g", "T", 0, 2), 2000, 1))
    assert [r.queue_offset for r in t.due(1000, 10)] == [0]  # 2 moved, its old item stale
    assert t.next_visible_ms() == 500
    t.apply(revive_entry(("g", "T", 0, 0)))
    assert t.next_visible_ms() == 2000 and t.get(("g", "T", 0, 2)).gen == 1  # type: ignore[union-attr]
    assert t.due(1999, 10) == [] and len(t.due(2000, 10)) == 1


def test_offsets_never_move_back_and_acks_of_unknown_records_change_nothing() -> None:
    t = PopTable(10, 100)
    t.apply(pop_entry("g", "T", 0, 5, []))
    t.apply(pop_entry("g", "T", 0, 3, []))
    t.apply(ack_entry(("g", "T", 0, 4)))
    assert t.offset("g", "T", 0) == 5 and len(t) == 0


def test_bounds_per_group_and_in_total() -> None:
    t = PopTable(max_per_group=2, max_total=3)
    t.apply(pop_entry("a", "T", 0, 2, [rec(0, 1, "a"), rec(1, 1, "a")]))
    assert t.room("a") == 0 and t.room("b") == 1
    t.apply(pop_entry("b", "T", 0, 1, [rec(0, 1, "b")]))
    assert t.room("b") == 0
    t.apply(ack_entry(("a", "T", 0, 0)))
    assert t.room("a") == 1 and t.room("b") == 1


def test_snapshot_rebuilds_the_table() -> None:
    t = PopTable(10, 100)
    t.apply(pop_entry("g", "T", 0, 3, [rec(0, 5), rec(1, 6), rec(2, 7)]))
    t.apply(pop_entry("g", "T", 1, 9, []))
    t.apply(ack_entry(("g", "T", 0, 0)))
    t.apply(change_entry(("g", "T", 0, 2), 70, 4))
    copy = PopTable(10, 100)
    for entry in t.snapshot():
        copy.apply(entry)
    assert copy.records == t.records and copy.offsets == t.offsets
    assert copy.per_group == t.per_group


@pytest.mark.parametrize("entry", [
    {"k": "what", "g": "g", "t": "T", "q": 0},
    {"k": "ack", "g": "g", "t": "T", "q": "0", "o": 1},
    {"k": "pop", "g": "g", "t": "T", "q": 0, "n": 1, "r": [[1, 2, 3]]},
    {"k": "pop", "g": 1, "t": "T", "q": 0, "n": 1, "r": []},
])
def test_entries_it_never_wrote_raise(entry: dict[str, object]) -> None:
    with pytest.raises(EntryError):
        PopTable(10, 10).apply(entry)


def test_heap_is_rebuilt_when_stale_items_pile_up() -> None:
    t = PopTable(10, 100)
    t.apply(pop_entry("g", "T", 0, 1, [rec(0, 1)]))
    for gen in range(1, 500):
        t.apply(change_entry(("g", "T", 0, 0), 1 + gen, gen))
    assert len(t._heap) <= 64 + 1
    assert [r.gen for r in t.due(10_000, 10)] == [499]


# ---- the log -------------------------------------------------------------------------


def test_frames_stop_at_a_torn_or_corrupt_frame() -> None:
    a, b = encode_frame({"k": 1}), encode_frame({"k": 2})
    assert decode_frames(a + b) == ([{"k": 1}, {"k": 2}], len(a + b))
    for cut in range(len(a), len(a + b)):
        assert decode_frames((a + b)[:cut]) == ([{"k": 1}], len(a))
    bad = bytearray(a + b)
    bad[-1] ^= 0xFF
    assert decode_frames(bytes(bad)) == ([{"k": 1}], len(a))


def test_log_truncates_a_torn_tail_and_appends_after_it(tmp_path: Path) -> None:
    log = PopLog(tmp_path)
    assert log.load() == []
    log.write(encode_frame({"k": 1}))
    log.close()
    with open(tmp_path / "inflight.log", "ab") as f:
        f.write(encode_frame({"k": 2})[:-3])  # a crash mid-append
    log = PopLog(tmp_path)
    assert log.load() == [{"k": 1}]
    log.write(encode_frame({"k": 3}))
    log.close()
    assert PopLog(tmp_path).load() == [{"k": 1}, {"k": 3}]


def test_checkpoint_replaces_the_log(tmp_path: Path) -> None:
    log = PopLog(tmp_path)
    log.load()
    for i in range(10):
        log.write(encode_frame({"k": i}))
    log.write(b"", checkpoint=[{"k": "snap"}])
    log.write(encode_frame({"k": "after"}))
    log.close()
    assert PopLog(tmp_path).load() == [{"k": "snap"}, {"k": "after"}]
    assert not (tmp_path / "inflight.log.tmp").exists()


def test_secret_is_made_once_and_kept(tmp_path: Path) -> None:
    first = PopLog(tmp_path).secret()
    assert len(first) == 32 and PopLog(tmp_path).secret() == first


def test_ack_offset_is_the_lowest_in_flight_else_the_pop_offset() -> None:
    t = PopTable(10, 100)
    assert t.ack_offset("g", "T", 0) is None
    t.apply(pop_entry("g", "T", 0, 3, [rec(0, 9), rec(1, 9), rec(2, 9)]))
    assert t.ack_offset("g", "T", 0) == 0
    t.apply(ack_entry(("g", "T", 0, 1)))
    assert t.ack_offset("g", "T", 0) == 0
    t.apply(revive_entry(("g", "T", 0, 0)))
    assert t.ack_offset("g", "T", 0) == 2
    t.apply(ack_entry(("g", "T", 0, 2)))
    assert t.ack_offset("g", "T", 0) == 3
