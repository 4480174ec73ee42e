"""Writeback in steps (broker/store/writeback.py): an index flush hands its slot
pages to the disk a window at a time before its fdatasync, so a commit-log
fsync never queues behind all of them; with ASYNC_FLUSH the commit log's new
bytes are handed to the disk every few ms (write-behind), ahead of the fsync."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.store import index_file, writeback
from broker.store.index_file import INDEX_HEADER_SIZE, IndexFile, key_hash
from broker.store.writeback import push, windows, write_behind_range
from tests.broker.store.helpers import inner, make_config, open_store


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


def test_write_behind_range_starts_past_the_fsync_and_the_last_start() -> None:
    assert write_behind_range(wrote=100, flushed=0, started=0, least=64) == (0, 100)
    assert write_behind_range(wrote=100, flushed=40, started=0, least=32) == (40, 100)
    assert write_behind_range(wrote=100, flushed=40, started=70, least=16) == (70, 100)
    assert write_behind_range(wrote=100, flushed=40, started=70, least=31) is None  # 30 new
    assert write_behind_range(wrote=100, flushed=100, started=70, least=0) is None  # all fsynced
    assert write_behind_range(wrote=101, flushed=100, started=0, least=0) == (100, 101)


def test_start_leaves_a_refused_range_to_the_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int, int]] = []

    def started(fd: int, offset: int, nbytes: int) -> None:
        calls.append((fd, offset, nbytes))

    def refused(fd: int, offset: int, nbytes: int) -> None:
        raise OSError(22, "Invalid argument")

    assert writeback.start(7, 4096, 8192, started)
    assert calls == [(7, 4096, 8192)]
    assert not writeback.start(7, 0, 4096, refused)
    monkeypatch.setattr(writeback, "START_RANGE", None)
    assert not writeback.start(7, 0, 4096)


@pytest.mark.skipif(writeback.START_RANGE is None, reason="no sync_file_range in this libc")
def test_start_on_a_real_file(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, 1 << 20)
        os.pwrite(fd, b"x" * 300_000, 0)
        assert writeback.start(fd, 0, 300_000)
        assert not writeback.start(-1, 0, 4096)  # a bad descriptor: refused, not raised
        os.fdatasync(fd)
        assert os.pread(fd, 10, 299_990) == b"x" * 10
    finally:
        os.close(fd)


def test_the_store_starts_the_commit_logs_new_bytes_once(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16))
    calls: list[tuple[int, int, int]] = []

    def started(fd: int, offset: int, nbytes: int) -> None:
        calls.append((fd, offset, nbytes))

    try:
        assert store.write_behind(1, started) == 0  # no file yet
        for _ in range(3):
            store.put_message(inner("T", 0, b"x" * 500))
        mf = store.commit_log.mapped_file_queue.last()
        assert mf is not None
        end = mf.wrote_position
        assert store.write_behind(end + 1, started) == 0 and calls == []  # fewer bytes
        assert store.write_behind(end, started) == end
        assert calls == [(mf.fd, 0, end)] and mf.written_behind == end
        assert store.write_behind(1, started) == 0  # started already: not again
        store.put_message(inner("T", 0, b"y" * 500))
        store.flush_commit_log()  # fsynced: nothing left to start
        assert store.write_behind(1, started) == 0
        store.put_message(inner("T", 0, b"z" * 500))
        flushed, wrote = mf.flushed_position, mf.wrote_position
        assert store.write_behind(1, started) == wrote - flushed
        assert calls[-1] == (mf.fd, flushed, wrote - flushed)

        def refused(fd: int, offset: int, nbytes: int) -> None:
            raise OSError(22, "Invalid argument")

        store.put_message(inner("T", 0, b"w" * 500))
        assert store.write_behind(1, refused) == 0  # left to the fsync
        assert mf.written_behind == wrote  # as it was: the fsync writes them
        assert store.write_behind(1, started) == mf.wrote_position - wrote
    finally:
        store.shutdown()
