"""Real disk blocks for store files: no mapped file is ever sparse.

A write through a mapping into a hole of a sparse file kills the process with
SIGBUS when the file system has no block left for it. So every commit-log,
consume-queue and index file gets its blocks when it is created:
``posix_fallocate`` over the whole file, or zeros written where the file
system cannot fallocate. Free space is checked first (the file plus
``ALLOCATION_MARGIN``). A file is built under a temporary name and renamed
into place once complete, so a crash never leaves a short file under a log
name; on failure the temporary file is removed and ``DiskFullError`` (no
space) or ``AllocationError`` (any other reason) is raised.

Files of older brokers may be sparse: ``allocate_existing`` fills their holes
before the first write.

``warm`` (``warmMapedFileEnable``) also writes zeros into every block of a new
file, through the page cache, fdatasyncing every ``WARM_SYNC_BYTES`` (1 MiB),
before the file is used.
``posix_fallocate`` leaves its blocks unwritten: the first data written into
each must be recorded as written in the file system's journal, so an
``fdatasync`` after an append into such blocks commits the journal as well
(ext4, XFS); into blocks already written it only writes the data. The zeros
stay in the page cache, so an append finds its page there; were it written
with ``O_DIRECT`` (less CPU), each append into a new page would first read the
page from the disk (batched SYNC_FLUSH produce fell from 161-185k to
110-122k msg/s here that way).
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from pathlib import Path
from typing import Any

from broker.store.status import StoreError

ALLOCATION_MARGIN = 1 << 20  # free bytes kept beyond a new file (configs, checkpoint)
TMP_SUFFIX = ".alloc"
BUILD_SUFFIX = ".build"  # a file built ahead of need, off the queue's lock (MappedFileQueue)
STALE_SUFFIXES = (TMP_SUFFIX, BUILD_SUFFIX)
_ZERO_CHUNK = 1 << 20
# a warm file is fdatasynced every this many bytes while its zeros are written:
# a build never leaves more dirty, and a send's fdatasync that meets one of
# these writes waits for 1 MiB, not more (with 16 MiB, as RocketMQ's
# flushLeastPagesWhenWarmMapedFile, batched SYNC_FLUSH p99 was 10-15 ms
# against 5-6 while files of 128 MiB were built)
WARM_SYNC_BYTES = 1 << 20
_NO_FALLOCATE = {errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS}
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


class AllocationError(StoreError):
    """A store file could not get its disk blocks; nothing was left behind."""

    def __init__(self, message: str, path: Path, size: int, free: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.size = size
        self.free = free


class DiskFullError(AllocationError):
    """Not enough free space for a store file."""


def free_bytes(directory: Path) -> int | None:
    """Free bytes (for unprivileged users) on the file system of ``directory``
    or of its nearest existing parent; None when that cannot be read."""
    p = directory
    while not p.exists() and p.parent != p:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def _error(exc: OSError, path: Path, size: int, what: str, new: bool) -> AllocationError:
    free = free_bytes(path.parent)
    shown_free = "unknown" if free is None else str(free)
    if exc.errno in _NO_SPACE:
        verb = "allocate a new" if new else "allocate the blocks of the"
        return DiskFullError(
            f"disk full: cannot {verb} {what} ({size} bytes, {shown_free} bytes free)",
            path, size, free,
        )
    verb = "create a new" if new else "allocate the blocks of the"
    return AllocationError(f"cannot {verb} {what} {path.name}: {exc.strerror or exc}",
                           path, size, free)


def create_allocated(path: Path, size: int, what: str = "store file", warm: bool = False) -> int:
    """Create ``path`` with ``size`` bytes on disk (zeros written into every
    block with ``warm``); returns a read-write fd.

    Raises DiskFullError when less than ``size + ALLOCATION_MARGIN`` bytes are
    free (nothing is created) or the file system runs out meanwhile, and
    AllocationError for any other failure; no file is left behind either way.
    """
    return build_allocated(path.with_name(path.name + TMP_SUFFIX), size, what, warm, path,
                           rename=True)


def build_allocated(tmp: Path, size: int, what: str = "store file", warm: bool = False,
                    path: Path | None = None, rename: bool = False) -> int:
    """Create ``tmp`` (a temporary name) with ``size`` bytes on disk, zeros
    written into every block with ``warm`` and fdatasynced; with ``rename``
    it then becomes ``path``, else the caller renames it. Returns a read-write
    fd. ``path`` is the name errors give. Raises as ``create_allocated``;
    ``tmp`` is removed on failure."""
    named = path if path is not None else tmp
    free = free_bytes(tmp.parent)
    if free is not None and free < size + ALLOCATION_MARGIN:
        raise DiskFullError(
            f"disk full: cannot allocate a new {what} ({size} bytes, {free} bytes free)",
            named, size, free,
        )
    try:
        tmp.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise _error(exc, named, size, what, new=True) from exc
    try:
        _reserve_new(fd, size)
        if warm:  # written back as it goes: no append's fdatasync pays for it
            for start in range(0, size, WARM_SYNC_BYTES):
                _write_zeros(fd, start, min(size, start + WARM_SYNC_BYTES))
                os.fdatasync(fd)
        if rename:
            os.rename(tmp, named)
    except BaseException as exc:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _error(exc, named, size, what, new=True) from exc
        raise
    return fd


def is_allocated(fd: int, size: int) -> bool:
    """Whether the file has at least ``size`` bytes of blocks (no holes)."""
    try:
        return os.fstat(fd).st_blocks * 512 >= size
    except OSError:
        return False


def allocate_existing(fd: int, size: int, path: Path, what: str = "store file") -> None:
    """Give an existing (possibly sparse) file its blocks; its data is kept.

    Raises DiskFullError or AllocationError; the file stays as it was.
    """
    try:
        try:
            os.posix_fallocate(fd, 0, size)
            return
        except OSError as exc:
            if exc.errno not in _NO_FALLOCATE:
                raise
        _fill_holes(fd, size)
    except OSError as exc:
        raise _error(exc, path, size, what, new=False) from exc


def _reserve_new(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as exc:
        if exc.errno not in _NO_FALLOCATE:
            raise
    _write_zeros(fd, 0, size)


def _write_zeros(fd: int, start: int, end: int) -> None:
    zeros = bytes(min(_ZERO_CHUNK, max(0, end - start)))
    pos = start
    while pos < end:
        n = os.pwrite(fd, memoryview(zeros)[: min(len(zeros), end - pos)], pos)
        if n <= 0:
            raise OSError(errno.EIO, "short write while allocating")
        pos += n


def _fill_holes(fd: int, size: int) -> None:
    """Write zeros into the holes of the first ``size`` bytes (holes read as
    zeros, so the content does not change). Without SEEK_HOLE support there
    is nothing known to fill."""
    pos = 0
    while pos < size:
        try:
            hole = os.lseek(fd, pos, os.SEEK_HOLE)
        except OSError:
            return
        if hole >= size:
            return
        try:
            data = os.lseek(fd, hole, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: only a hole up to the end
                return
            data = size
        _write_zeros(fd, hole, min(data, size))
        pos = data


def remove_stale_allocations(directory: Path) -> None:
    """Delete temporary files a crash left in the middle of an allocation."""
    try:
        stale = [p for p in directory.iterdir() if p.name.endswith(STALE_SUFFIXES)]
    except OSError:
        return
    for p in stale:
        p.unlink(missing_ok=True)


class LogThrottle:
    """At most one log line per ``interval`` seconds, counting what it held back.

    Allocation failures repeat on every put while the disk is full.
    """

    def __init__(self, interval: float = 10.0, clock: Any = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._next = 0.0
        self.suppressed = 0

    def __call__(self, log: Any, event: str, level: str = "error", **fields: Any) -> bool:
        """Log ``event`` unless one was logged less than ``interval`` ago."""
        now = self.clock()
        if now < self._next:
            self.suppressed += 1
            return False
        self._next = now + self.interval
        if self.suppressed:
            fields["suppressed"] = self.suppressed
            self.suppressed = 0
        getattr(log, level)(event, **fields)
        return True

