"""Writeback in steps (broker/store/writeback.py): an index flush hands its slot
pages to the disk a window at a time before its fdatasync, so a commit-log
fsync never queues behind all of them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.store import index_file, writeback
from broker.store.index_file import INDEX_HEADER_SIZE, IndexFile, key_hash
from broker.store.writeback import push, windows


@st.composite
def sorted_ranges(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Ascending, non-overlapping, non-empty ranges (touching allowed)."""
    out: list[tuple[int, int]] = []
    pos = draw(st.integers(0, 50))
    for _ in range(draw(st.integers(0, 12))):
        start = pos + draw(st.integers(0, 40))
        end = start + draw(st.integers(1, 70))
        out.append((start, end))
        pos = end
    return out


@given(sorted_ranges(), st.integers(1, 64))
def test_windows_cover_every_range_with_at_most_a_step_each(
        ranges: list[tuple[int, int]], step: int) -> None:
    spans = windows(ranges, step)
    covered = {b for s, e in ranges for b in range(s, e)}
    seen: set[int] = set()
    last_end = -1
    for start, end in spans:
        assert start < end and start >= last_end  # ascending, disjoint
        last_end = end
        held = {b for b in range(start, end) if b in covered}
        assert 0 < len(held) <= step
        assert start in covered and end - 1 in covered  # no span starts or ends in a gap
        seen |= held
    assert seen == covered
    # as few spans as a step allows
    assert len(spans) == -(-len(covered) // step)


def test_windows_refuse_a_step_of_nothing() -> None:
    with pytest.raises(ValueError):
        windows([(0, 10)], 0)


def test_push_syncs_each_window_and_stops_at_a_refusal() -> None:
    calls: list[tuple[int, int, int]] = []

    def sync(fd: int, offset: int, nbytes: int) -> None:
        calls.append((fd, offset, nbytes))

    assert push(7, [(0, 4096), (8192, 12288), (40960, 45056)], 8192, sync) == 2
    assert calls == [(7, 0, 12288), (7, 40960, 4096)]

    def refused(fd: int, offset: int, nbytes: int) -> None:
        calls.append((fd, offset, nbytes))
        raise OSError(22, "Invalid argument")

    calls.clear()
    assert push(7, [(0, 4096), (8192, 12288)], 4096, refused) == 0
    assert calls == [(7, 0, 4096)]  # the fsync after it writes the rest


def test_push_without_sync_file_range_leaves_it_to_the_fsync(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writeback, "SYNC_RANGE", None)
    assert push(7, [(0, 4096)], 4096) == 0


@pytest.mark.skipif(writeback.SYNC_RANGE is None, reason="no sync_file_range in this libc")
def test_push_writes_a_real_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, 1 << 20)
        runs = [(i * 16384, i * 16384 + 4096) for i in range(40)]
        for start, end in runs:
            os.pwrite(fd, bytes([start // 16384 + 1]) * (end - start), start)
        assert push(fd, runs, 64 << 10) == 3  # 40 pages of 4 KiB, 16 a window
        with pytest.raises(OSError):  # a refusal is an OSError (a bad descriptor here)
            writeback.SYNC_RANGE(-1, 0, 4096)
        os.fdatasync(fd)
        assert os.pread(fd, 4096, 16384 * 39) == bytes([40]) * 4096
    finally:
        os.close(fd)


def test_an_index_flush_pushes_the_slot_pages_it_wrote(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pushed: list[tuple[list[tuple[int, int]], int]] = []
    monkeypatch.setattr(index_file, "push",
                        lambda fd, runs, step: pushed.append((list(runs), step)) or 0)
    slots = 100_000
    f = IndexFile(tmp_path / "idx", slots, 1000)
    try:
        keys = [f"key-{i}" for i in range(0, 3000, 97)]
        f.put_keys([(k, 100 + i, 1_700_000_000_000) for i, k in enumerate(keys)])
        f.flush()
        ((runs, step),) = pushed
        assert step == index_file.WRITEBACK_STEP
        for k in keys:  # every slot written lies in a pushed run
            pos = INDEX_HEADER_SIZE + (key_hash(k) % slots) * 4
            assert any(s <= pos < e for s, e in runs), k
        assert all(s >= INDEX_HEADER_SIZE and e <= INDEX_HEADER_SIZE + slots * 4 for s, e in runs)
        f.flush()  # nothing changed: nothing written, nothing pushed
        assert len(pushed) == 1
        f.put_keys([("one-more", 5000, 1_700_000_000_001)])
        f.flush()
        pos = INDEX_HEADER_SIZE + (key_hash("one-more") % slots) * 4
        assert [(s <= pos < e) for s, e in pushed[1][0]] == [True]
    finally:
        f.close()
    # what was flushed reads back
    g = IndexFile(tmp_path / "idx", slots, 1000)
    try:
        assert g.select_phy_offsets("one-more", 10, 0, 2**62) == [5000]
    finally:
        g.close()
