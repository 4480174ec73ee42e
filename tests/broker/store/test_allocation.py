"""Store files get real disk blocks; a failed allocation leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import structlog

from broker.store.allocation import (
    ALLOCATION_MARGIN,
    AllocationError,
    DiskFullError,
    LogThrottle,
    allocate_existing,
    create_allocated,
    is_allocated,
)
from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import MappedFileQueue
from tests.broker.store.faults import Disk

SIZE = 256 * 1024


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


def blocks(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_new_file_is_allocated_not_sparse(tmp_path: Path, disk: Disk) -> None:
    mf = MappedFile(tmp_path / "cl" / "00000000000000000000", SIZE)
    assert mf.allocated and blocks(mf.path) >= SIZE
    assert disk.allocations == [str(tmp_path / "cl" / "00000000000000000000.alloc")]
    assert os.listdir(tmp_path / "cl") == ["00000000000000000000"]
    mf.destroy()


def test_without_fallocate_zeros_are_written(tmp_path: Path, disk: Disk) -> None:
    disk.no_fallocate = True
    mf = MappedFile(tmp_path / "00000000000000000000", SIZE)
    assert mf.allocated and blocks(mf.path) >= SIZE
    assert mf.path.read_bytes() == bytes(SIZE)
    mf.destroy()


def test_no_space_during_allocation_removes_the_file(tmp_path: Path, disk: Disk) -> None:
    disk.full_for = lambda path: True
    with pytest.raises(DiskFullError) as info:
        MappedFile(tmp_path / "cl" / "00000000000000000000", SIZE, what="commit-log file")
    assert "disk full: cannot allocate a new commit-log file" in str(info.value)
    assert info.value.size == SIZE
    assert os.listdir(tmp_path / "cl") == []  # neither the file nor its temporary name


def test_free_space_checked_before_anything_is_created(tmp_path: Path, disk: Disk) -> None:
    disk.free = SIZE + ALLOCATION_MARGIN - 1
    with pytest.raises(DiskFullError) as info:
        create_allocated(tmp_path / "new" / "f", SIZE, "index file")
    assert f"({SIZE} bytes, {SIZE + ALLOCATION_MARGIN - 1} bytes free)" in str(info.value)
    assert not (tmp_path / "new").exists()
    assert disk.allocations == []
    disk.free = SIZE + ALLOCATION_MARGIN
    os.close(create_allocated(tmp_path / "new" / "f", SIZE, "index file"))
    assert (tmp_path / "new" / "f").stat().st_size == SIZE


def test_other_errors_are_allocation_errors(tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "f").mkdir()  # a directory where the file should go
    with pytest.raises(AllocationError) as info:
        create_allocated(tmp_path / "ro" / "f", SIZE, "consume-queue file")
    assert not isinstance(info.value, DiskFullError)
    assert sorted(os.listdir(tmp_path / "ro")) == ["f"]


def sparse_file(path: Path, data_at: int, data: bytes) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, SIZE)
    os.pwrite(fd, data, data_at)
    os.close(fd)


@pytest.mark.parametrize("no_fallocate", [False, True])
def test_existing_sparse_file_gets_blocks_and_keeps_data(tmp_path: Path, disk: Disk,
                                                         no_fallocate: bool) -> None:
    path = tmp_path / "00000000000000000000"
    sparse_file(path, 70_000, b"old data")
    before = path.read_bytes()
    fd = os.open(path, os.O_RDWR)
    assert not is_allocated(fd, SIZE)
    disk.no_fallocate = no_fallocate
    allocate_existing(fd, SIZE, path)
    assert is_allocated(fd, SIZE)
    os.close(fd)
    assert path.read_bytes() == before


def test_sparse_log_file_is_allocated_before_its_first_append(tmp_path: Path, disk: Disk) -> None:
    path = tmp_path / "00000000000000000000"
    sparse_file(path, 0, b"abc")
    mf = MappedFile(path, SIZE)
    assert not mf.allocated
    mf.wrote_position = 3
    disk.full_for = lambda p: True
    with pytest.raises(DiskFullError):
        mf.append(b"def")
    assert mf.wrote_position == 3 and mf.read(0, 6) == b"abc\0\0\0"
    disk.space_returns()
    mf.append(b"def")
    assert mf.allocated and blocks(path) >= SIZE and mf.read(0, 6) == b"abcdef"
    mf.close()
    assert path.exists()


def test_truncate_writes_only_up_to_stale_data(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000"
    sparse_file(path, 10, b"stale")
    mf = MappedFile(path, SIZE)
    mf.truncate(0)
    assert mf.read(0, 20) == bytes(20)
    mf.close()
    assert blocks(path) < SIZE  # the holes after the data were never written


@pytest.mark.parametrize("suffix", [".alloc", ".build"])  # made by the writer, or ahead of it
def test_queue_load_removes_interrupted_allocations(tmp_path: Path, suffix: str) -> None:
    mfq = MappedFileQueue(tmp_path, SIZE)
    mfq.last_for_append().append(b"x")
    mfq.close()
    (tmp_path / f"00000000000000262144{suffix}").write_bytes(b"partial")
    again = MappedFileQueue(tmp_path, SIZE)
    again.load()
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000000"]
    again.close()


def test_preallocate_failure_is_logged_and_leaves_nothing(tmp_path: Path, disk: Disk) -> None:
    mfq = MappedFileQueue(tmp_path, SIZE, "commit-log file")
    mfq.last_for_append().append(b"x" * (SIZE // 2))
    disk.full_for = lambda p: True
    with structlog.testing.capture_logs() as logs:
        mfq.preallocate_next()
        mfq.preallocate_next()  # rate-limited: one line
    assert [e["event"] for e in logs] == ["cannot preallocate the next file"]
    assert "disk full" in logs[0]["error"]
    assert os.listdir(tmp_path) == ["00000000000000000000"]
    disk.space_returns()
    mfq.preallocate_next()
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000000", "00000000000000262144"]
    mfq.last_for_append().append(b"y" * (SIZE // 2))
    nxt = mfq.last_for_append()
    assert nxt.file_from_offset == SIZE and len(mfq.files) == 2
    mfq.close()


def test_log_throttle_counts_what_it_held_back() -> None:
    now = [100.0]
    throttle = LogThrottle(10, clock=lambda: now[0])
    log = structlog.get_logger("t")
    with structlog.testing.capture_logs() as logs:
        assert throttle(log, "full", n=1)
        assert not throttle(log, "full", n=2)
        assert not throttle(log, "full", n=3)
        now[0] += 10
        assert throttle(log, "full", level="warning", n=4)
    assert [(e["n"], e.get("suppressed"), e["log_level"]) for e in logs] == [
        (1, None, "error"), (4, 2, "warning")]
