"""IndexFile's writes: the slot table in memory, the file by pwrite only.

The file must hold RocketMQ's layout after a flush, the header only what is
on disk before it, and a flush from a thread must never lose a store the event
loop makes meanwhile."""

from __future__ import annotations

import os
import struct
import sys
import threading
from pathlib import Path

import pytest

import broker.store.index_file as index_file
from broker.store.index_file import (
    HASH_SLOT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    IndexFile,
    key_hash,
)


def _model(keys: list[tuple[str, int, int]], slots: int, index_num: int) -> bytes:
    """The file RocketMQ's layout gives for ``keys`` added in order, built the
    plain way: header, slots (newest entry of each), entries (linked)."""
    table = [0] * slots
    entries = bytearray(index_num * INDEX_ENTRY_SIZE)
    begin_ts, begin_phy = keys[0][2], keys[0][1]
    used = 0
    for n, (key, phy, ts) in enumerate(keys, start=1):
        h = key_hash(key)
        prev = table[h % slots]
        if prev == 0:
            used += 1
        diff = max(0, (ts - begin_ts) // 1000)
        struct.pack_into(">iqii", entries, n * INDEX_ENTRY_SIZE, h, phy, diff, prev)
        table[h % slots] = n
    header = struct.pack(">qqqqii", begin_ts, keys[-1][2], begin_phy, keys[-1][1], used,
                         len(keys) + 1)
    return header + struct.pack(f">{slots}i", *table) + bytes(entries)


def _keys(n: int, start: int = 0, distinct: int = 0) -> list[tuple[str, int, int]]:
    """n keys; with ``distinct`` they repeat (collisions and chains)."""
    return [(f"T#k{(i % distinct) if distinct else i}", 1000 + i * 100, 1_700_000_000_000 + i * 300)
            for i in range(start, start + n)]


def _slot_region(path: Path, slots: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(INDEX_HEADER_SIZE)
        return f.read(slots * HASH_SLOT_SIZE)


def test_flush_writes_rocketmq_layout(tmp_path: Path) -> None:
    keys = _keys(60, distinct=23)
    f = IndexFile(tmp_path / "idx", 7, 100)
    for at in range(0, 60, 16):
        f.put_keys(keys[at : at + 16])
    f.flush()
    assert (tmp_path / "idx").read_bytes() == _model(keys, 7, 100)
    f.close()


def test_nothing_reaches_the_file_before_a_flush(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    f = IndexFile(path, 1000, 100)
    before = path.read_bytes()
    f.put_keys(_keys(10))
    f.put_keys(_keys(5, start=10))
    assert path.read_bytes() == before  # the event loop never writes the file
    # found all the same: the table and the entries in memory
    assert f.select_phy_offsets("T#k3", 10, 0, 2**62) == [1300]
    assert f.select_phy_offsets("T#k14", 10, 0, 2**62) == [2400]
    f.flush()
    assert path.read_bytes() == _model(_keys(15), 1000, 100)
    assert f.select_phy_offsets("T#k3", 10, 0, 2**62) == [1300]  # now from the file
    f.close()


def test_entries_half_written_and_half_pending_are_found(tmp_path: Path) -> None:
    keys = _keys(40, distinct=6)
    f = IndexFile(tmp_path / "idx", 3, 100)
    f.put_keys(keys[:25])
    f.flush()
    f.put_keys(keys[25:])  # chains run from the list into the file
    for k in ("T#k0", "T#k5"):
        assert f.select_phy_offsets(k, 100, 0, 2**62) == \
            [phy for key, phy, _ in reversed(keys) if key == k]
    f.close()


def test_the_loop_writes_entries_itself_past_the_pending_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No flush for long (a failing disk, say): past PENDING_MAX entries the
    loop writes them, so memory stays bounded; the header still waits."""
    monkeypatch.setattr(index_file, "PENDING_MAX", 10)
    path = tmp_path / "idx"
    keys = _keys(25, distinct=9)
    f = IndexFile(path, 5, 100)
    for at in range(0, 25, 4):
        f.put_keys(keys[at : at + 4])
    assert f.index_count - f._pending_first <= 10  # entries still waiting
    entries_at = INDEX_HEADER_SIZE + 5 * HASH_SLOT_SIZE
    written = f._pending_first - 1
    assert written >= 12
    model = _model(keys, 5, 100)
    span = slice(entries_at + INDEX_ENTRY_SIZE, entries_at + (written + 1) * INDEX_ENTRY_SIZE)
    assert path.read_bytes()[span] == model[span]
    assert path.read_bytes()[:INDEX_HEADER_SIZE] == bytes(INDEX_HEADER_SIZE)
    assert f.select_phy_offsets("T#k2", 100, 0, 2**62) == \
        [phy for key, phy, _ in reversed(keys) if key == "T#k2"]
    f.flush()
    assert path.read_bytes() == model
    f.close()


def test_flush_with_nothing_new_writes_nothing(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    syncs: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(index_file.os, "fdatasync", lambda fd: (syncs.append(fd), real(fd)))
    f = IndexFile(tmp_path / "idx", 50, 100)
    f.flush()  # a new file: its header, once
    f.flush()
    assert len(syncs) == 1
    f.put_keys(_keys(5))
    f.flush()
    f.flush()
    assert len(syncs) == 2
    f.put_keys(_keys(1, start=5))
    f.flush()
    assert len(syncs) == 3
    f.close()
    reopened = IndexFile(tmp_path / "idx", 50, 100)
    reopened.flush()  # as it was read
    assert len(syncs) == 3
    reopened.close()


def test_file_killed_before_its_first_flush(tmp_path: Path) -> None:
    """A new file whose header never reached the disk (all zeros) starts
    at entry 1 like a new one; entry 0 stays unused."""
    f = IndexFile(tmp_path / "idx", 7, 100)
    f.put_keys(_keys(3))
    again = IndexFile(tmp_path / "idx", 7, 100)
    assert again.index_count == 1
    again.put_keys(_keys(3))
    again.flush()
    assert (tmp_path / "idx").read_bytes() == _model(_keys(3), 7, 100)
    again.close()
    f.close()


def test_reopened_file_continues_its_chains(tmp_path: Path) -> None:
    keys = _keys(80, distinct=9)
    f = IndexFile(tmp_path / "idx", 5, 200)
    f.put_keys(keys[:50])
    f.close()  # writes slots and header
    again = IndexFile(tmp_path / "idx", 5, 200)
    again.put_keys(keys[50:])
    again.flush()
    assert (tmp_path / "idx").read_bytes() == _model(keys, 5, 200)
    expect = [phy for k, phy, _ in reversed(keys) if k == "T#k4"]
    assert again.select_phy_offsets("T#k4", 100, 0, 2**62) == expect
    again.close()


def test_killed_process_leaves_the_last_flush(tmp_path: Path) -> None:
    """A process killed after a flush: the file says what that flush wrote;
    re-adding what came after (as recovery does) gives full chains."""
    keys = _keys(70, distinct=11)
    path = tmp_path / "idx"
    f = IndexFile(path, 6, 200)
    f.put_keys(keys[:40])
    f.flush()
    f.put_keys(keys[40:])  # never flushed: the "process" dies here
    after_kill = IndexFile(path, 6, 200)
    assert after_kill.index_count == 41
    assert after_kill.end_phy_offset == keys[39][1]
    assert after_kill.select_phy_offsets("T#k2", 100, 0, 2**62) == \
        [phy for k, phy, _ in reversed(keys[:40]) if k == "T#k2"]
    after_kill.put_keys(keys[40:])
    after_kill.flush()
    assert path.read_bytes() == _model(keys, 6, 200)
    after_kill.close()
    f.close()


def test_full_file_frees_its_table_and_still_answers(tmp_path: Path) -> None:
    keys = _keys(30, distinct=13)
    f = IndexFile(tmp_path / "idx", 8, 31)  # entry 0 unused: 30 keys fill it
    assert f.put_keys(keys + _keys(5, start=30)) == 30
    assert f.is_full()
    f.flush()
    assert f._slots is None
    assert f.select_phy_offsets("T#k5", 10, 0, 2**62) == \
        [phy for k, phy, _ in reversed(keys) if k == "T#k5"]
    assert (tmp_path / "idx").read_bytes() == _model(keys, 8, 31)
    f.close()
    reopened = IndexFile(tmp_path / "idx", 8, 31)
    assert reopened._slots is None and reopened.is_full()
    assert reopened.select_phy_offsets("T#k5", 10, 0, 2**62) == \
        [phy for k, phy, _ in reversed(keys) if k == "T#k5"]
    reopened.close()


def test_scattered_dirty_pages_are_all_written(tmp_path: Path) -> None:
    """Slots over many pages, a few dirty ones far apart and some runs close
    together: after the flush the file's slots equal the table in memory."""
    slots = 200_000  # 800 KB of slots, about 196 pages
    f = IndexFile(tmp_path / "idx", slots, 5_000)
    f.put_keys(_keys(40))
    f.flush()
    f.put_keys(_keys(3_000, start=40))
    f.flush()
    assert f._slots is not None
    assert _slot_region(tmp_path / "idx", slots) == bytes(f._slots[: slots * HASH_SLOT_SIZE])
    assert f._dirty.find(1) < 0
    f.close()


@pytest.mark.parametrize("pending_max", [index_file.PENDING_MAX, 64])
def test_flush_in_a_thread_while_keys_are_added(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                pending_max: int) -> None:
    """A thread flushes over and over while this one adds keys and queries, as
    the flush thread and the event loop do (with a small PENDING_MAX this one
    also writes entries itself meanwhile): every query sees every key added so
    far, and after a last flush the file is the model's."""
    monkeypatch.setattr(index_file, "PENDING_MAX", pending_max)
    # 1 MB of slots: each flush writes long runs, during which (the GIL is
    # released in pwrite) stores land in pages being written; few stores a
    # page, so a lost one is seldom repaired by a later store to its page
    slots, n = 262_144, 20_000
    keys = _keys(n, distinct=15_000)
    path = tmp_path / "idx"
    f = IndexFile(path, slots, n + 1)
    stop = threading.Event()
    flushes = [0]
    progress = threading.Condition()

    def flusher() -> None:
        while not stop.is_set():
            f.flush()
            with progress:
                flushes[0] += 1
                progress.notify_all()

    thread = threading.Thread(target=flusher)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the GIL changes hands often, not every 5 ms
    thread.start()
    try:
        for at in range(0, n, 32):
            f.put_keys(keys[at : at + 32])
            if at % 1600 == 0:
                probe = keys[at][0]
                assert f.select_phy_offsets(probe, 100, 0, 2**62) == \
                    [phy for k, phy, _ in reversed(keys[: at + 32]) if k == probe]
                with progress:  # one more whole flush by now, however slow the machine
                    seen = flushes[0]
                    progress.wait_for(lambda seen=seen: flushes[0] > seen, timeout=10)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert flushes[0] > 10
    f.flush()
    assert path.read_bytes() == _model(keys, slots, n + 1)
    f.close()


def test_keys_added_while_slots_are_written_are_covered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys arrive while a flush writes the slot pages (the loop runs while
    the flush thread is in pwrite): the header that flush writes covers every
    slot and entry it wrote, so a process killed right after reads whole
    chains."""
    keys = _keys(60, distinct=10)
    path = tmp_path / "idx"
    f = IndexFile(path, 7, 200)
    f.put_keys(keys[:30])
    real = f.file.write_at
    slots_end = INDEX_HEADER_SIZE + 7 * HASH_SLOT_SIZE

    def write_at(pos: int, data: bytes | bytearray | memoryview) -> None:
        if INDEX_HEADER_SIZE <= pos < slots_end and len(f._pending) == 0 and \
                f.index_count == 31:
            f.put_keys(keys[30:])  # "the loop", between the entries and the slots
        real(pos, data)

    monkeypatch.setattr(f.file, "write_at", write_at)
    f.flush()
    monkeypatch.setattr(f.file, "write_at", real)
    killed = IndexFile(path, 7, 200)  # as read after a kill -9 right here
    assert killed.index_count == 61
    assert path.read_bytes() == _model(keys, 7, 200)
    for k in ("T#k1", "T#k9"):
        assert killed.select_phy_offsets(k, 100, 0, 2**62) == \
            [phy for key, phy, _ in reversed(keys) if key == k]
    killed.close()
    f.close()
