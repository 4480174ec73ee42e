"""warmMapedFileEnable: commit-log files made ahead of need have every block
written, are built off the queue's lock, and never replace a file a writer made."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.store import allocation, mapped_file_queue
from broker.store.allocation import build_allocated, create_allocated
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.status import PutMessageStatus
from tests.broker.store.helpers import inner, make_config, open_store

SIZE = 256 * 1024
_FS_IOC_FIEMAP = 0xC020660B
_FIEMAP_EXTENT_LAST = 0x1
_FIEMAP_EXTENT_UNWRITTEN = 0x800
_HEAD = struct.Struct("=QQIIII")  # fm_start, fm_length, fm_flags, mapped, count, reserved
_EXTENT = struct.Struct("=QQQ16xI12x")  # logical, physical, length, flags


def unwritten_bytes(path: Path) -> int | None:
    """Bytes of ``path`` in extents the file system holds as allocated but
    unwritten (FIEMAP), or None where FIEMAP is not supported."""
    total, start, count = 0, 0, 64
    with open(path, "rb") as f:
        while True:
            buf = bytearray(_HEAD.pack(start, 2**64 - 1 - start, 0, 0, count, 0)
                            + bytes(_EXTENT.size * count))
            try:
                fcntl.ioctl(f.fileno(), _FS_IOC_FIEMAP, buf)
            except OSError as exc:
                if exc.errno in (errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL):
                    return None
                raise
            mapped = _HEAD.unpack_from(buf)[3]
            if mapped == 0:
                return total
            for i in range(mapped):
                logical, _, length, flags = _EXTENT.unpack_from(buf, _HEAD.size + i * _EXTENT.size)
                if flags & _FIEMAP_EXTENT_UNWRITTEN:
                    total += length
                start = logical + length
                if flags & _FIEMAP_EXTENT_LAST:
                    return total


def fallocate_leaves_unwritten(directory: Path) -> bool:
    """Whether this file system reports fallocated blocks as unwritten (ext4,
    XFS): where it does not, warm and plain files cannot be told apart."""
    probe = directory / "probe"
    os.close(create_allocated(probe, SIZE))
    try:
        return bool(unwritten_bytes(probe))
    finally:
        probe.unlink()


@pytest.fixture
def extents(tmp_path: Path) -> Callable[[Path], int]:
    if not fallocate_leaves_unwritten(tmp_path):
        pytest.skip("this file system does not report unwritten extents (FIEMAP)")
    return lambda path: unwritten_bytes(path) or 0


def test_a_plain_file_is_unwritten_a_warm_one_written(tmp_path: Path,
                                                     extents: Callable[[Path], int]) -> None:
    os.close(create_allocated(tmp_path / "plain", SIZE))
    os.close(create_allocated(tmp_path / "warm", SIZE, warm=True))
    assert extents(tmp_path / "plain") >= SIZE
    assert extents(tmp_path / "warm") == 0
    assert (tmp_path / "warm").read_bytes() == bytes(SIZE)
    assert sorted(os.listdir(tmp_path)) == ["plain", "warm"]


def test_a_warm_build_syncs_as_it_goes(tmp_path: Path, extents: Callable[[Path], int],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Never more than WARM_SYNC_BYTES dirty; an odd size is written whole."""
    monkeypatch.setattr(allocation, "WARM_SYNC_BYTES", 64 * 1024)
    real_sync, real_write = os.fdatasync, os.pwrite
    events: list[str] = []

    def sync(fd: int) -> None:
        events.append("sync")
        real_sync(fd)

    def write(fd: int, data: Any, pos: int) -> int:
        events.append(f"{pos}+{len(data)}")
        return real_write(fd, data, pos)

    monkeypatch.setattr(os, "fdatasync", sync)
    monkeypatch.setattr(os, "pwrite", write)
    odd = SIZE + 1000
    os.close(build_allocated(tmp_path / "f.build", odd, warm=True))
    chunk = 64 * 1024  # 64 KiB at a time, each synced; the last 1000 bytes too
    assert events == [e for p in range(0, SIZE, chunk) for e in (f"{p}+{chunk}", "sync")] \
        + [f"{SIZE}+1000", "sync"]
    assert (tmp_path / "f.build").stat().st_size == odd
    assert extents(tmp_path / "f.build") == 0
    assert (tmp_path / "f.build").read_bytes() == bytes(odd)


def test_a_failed_warm_build_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken)
    with pytest.raises(allocation.AllocationError, match="Input/output error"):
        create_allocated(tmp_path / "cl" / "00000000000000000000", SIZE, "commit-log file",
                         warm=True)
    assert os.listdir(tmp_path / "cl") == []


# ---- the queue's files made ahead -------------------------------------------------------


def fill(mfq: MappedFileQueue, fraction: float) -> None:
    mf = mfq.last_for_append()
    mf.append(b"d" * int(mf.remaining * fraction))


def test_the_next_file_is_built_warm_and_taken_by_the_writer(
        tmp_path: Path, extents: Callable[[Path], int]) -> None:
    mfq = MappedFileQueue(tmp_path, SIZE, "commit-log file", warm=True)
    fill(mfq, 0.5)
    mfq.preallocate_next()
    assert mfq.next_ready
    nxt = tmp_path / "00000000000000262144"
    assert extents(nxt) == 0 and extents(tmp_path / "00000000000000000000") > 0
    fill(mfq, 1.0)
    mf = mfq.last_for_append()
    assert mf.path == nxt and len(mfq.files) == 2 and not mfq.next_ready
    mf.append(b"next")
    assert mf.read(0, 4) == b"next"
    mfq.close()
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000000", "00000000000000262144"]


def test_a_warm_first_file_only_when_asked(tmp_path: Path, extents: Callable[[Path], int]) -> None:
    mfq = MappedFileQueue(tmp_path, SIZE, warm=True)
    mfq.preallocate_next()  # no file yet: nothing to follow
    assert os.listdir(tmp_path) == []
    mfq.preallocate_next(first=True)
    assert mfq.next_ready and extents(tmp_path / "00000000000000000000") == 0
    mf = mfq.last_for_append()
    assert mf.file_from_offset == 0 and mfq.files == [mf]
    mfq.close()


def hook_build(monkeypatch: pytest.MonkeyPatch, during: Callable[[], None]) -> list[Path]:
    """Run ``during`` while preallocate_next builds (off the queue's lock, as
    another thread would); returns the paths built."""
    real = mapped_file_queue.build_allocated
    built: list[Path] = []

    def build(tmp: Path, *args: Any) -> int:
        built.append(tmp)
        fd = real(tmp, *args)
        during()
        return fd

    monkeypatch.setattr(mapped_file_queue, "build_allocated", build)
    return built


def test_a_file_the_writer_made_meanwhile_is_kept(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    mfq = MappedFileQueue(tmp_path, SIZE, warm=True)
    fill(mfq, 0.5)

    def writer_moves_on() -> None:  # the writer fills the file and needs the next now
        fill(mfq, 1.0)
        mfq.last_for_append().append(b"written by the writer")

    built = hook_build(monkeypatch, writer_moves_on)
    mfq.preallocate_next()
    assert built == [tmp_path / "00000000000000262144.build"]
    assert not mfq.next_ready and len(mfq.files) == 2
    assert mfq.files[1].read(0, 21) == b"written by the writer"
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000000", "00000000000000262144"]
    mfq.close()


def test_a_build_done_after_close_is_thrown_away(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    mfq = MappedFileQueue(tmp_path, SIZE, warm=True)
    fill(mfq, 0.5)
    hook_build(monkeypatch, mfq.close)
    mfq.preallocate_next()
    assert not mfq.next_ready
    assert os.listdir(tmp_path) == ["00000000000000000000"]


def test_one_build_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mfq = MappedFileQueue(tmp_path, SIZE, warm=True)
    fill(mfq, 0.5)
    built = hook_build(monkeypatch, lambda: mfq.preallocate_next())  # a second thread's call
    mfq.preallocate_next()
    assert len(built) == 1 and mfq.next_ready
    mfq.close()


# ---- the store ----------------------------------------------------------------------


def test_a_warm_store_writes_its_files_ahead_and_keeps_every_message(
        tmp_path: Path, extents: Callable[[Path], int]) -> None:
    config = make_config(tmp_path, cl_size=8192)
    config.warm_maped_file_enable = True
    store = open_store(config)
    cl_dir = tmp_path / "commitlog"
    offsets = []
    try:
        assert extents(cl_dir / "00000000000000000000") == 0  # a new store's first file
        for i in range(60):  # over several files, each made ahead by a flush
            result = store.put_message(inner("T", 0, b"m" * 300 + bytes([i])))
            offsets.append(result.append_result.wrote_offset)  # type: ignore[union-attr]
            store.flush_commit_log()
        names = sorted(os.listdir(cl_dir))
        assert len(names) >= 3
        assert all(extents(cl_dir / n) == 0 for n in names)
    finally:
        store.shutdown()
    again = open_store(config)
    try:
        for i, off in enumerate(offsets):
            msg = again.look_message_by_offset(off)
            assert msg is not None and msg.body == b"m" * 300 + bytes([i])
    finally:
        again.shutdown()


def test_a_new_store_makes_its_first_file_at_load_and_the_put_takes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(make_config(tmp_path, cl_size=8192))
    try:
        mfq = store.commit_log.mapped_file_queue
        assert mfq.next_ready and mfq.files == []
        assert os.listdir(tmp_path / "commitlog") == ["00000000000000000000"]
        made: list[Path] = []
        real = mapped_file_queue.MappedFile

        def counted(path: Path, *args: Any, **kw: Any) -> Any:
            if path.parent == tmp_path / "commitlog":  # a queue's first file is small
                made.append(path)
            return real(path, *args, **kw)

        monkeypatch.setattr(mapped_file_queue, "MappedFile", counted)
        assert store.put_message(inner("T", 0, b"x")).put_message_status is PutMessageStatus.PUT_OK
        assert made == [] and len(mfq.files) == 1  # the put made no file itself
    finally:
        store.shutdown()
