"""MappedFileQueue: a directory of equal-size MappedFiles forming one log.

A new file is created with its disk blocks allocated (allocation.py); when it
cannot be, AllocationError (DiskFullError) reaches the caller and the queue
is unchanged, so the next append simply tries again.

``preallocate_next`` builds the next file ahead of need in a worker thread,
under a temporary name and without the queue's lock (with ``warm`` it writes
every block, which takes a while: 0.7-1.8 s for 1 GiB here); only the rename into
place and the opening are done under the lock. A writer that needs the file
before it is ready creates it at once (its blocks allocated, not written) and
the build is thrown away.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import structlog

from broker.store.allocation import (
    BUILD_SUFFIX,
    LogThrottle,
    build_allocated,
    remove_stale_allocations,
)
from broker.store.mapped_file import MappedFile, offset_to_file_name
from broker.store.status import StoreError

log = structlog.get_logger("store.files")


class MappedFileQueue:
    def __init__(self, store_dir: Path, file_size: int, what: str = "log file",
                 warm: bool = False) -> None:
        if file_size <= 0:
            raise StoreError("mapped file size must be positive")
        self.store_dir = store_dir
        self.file_size = file_size
        self.what = what  # names the files in errors: "commit-log file", ...
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self._next: MappedFile | None = None  # created ahead by preallocate_next
        self._create_lock = threading.Lock()
        self._preallocate_failed = LogThrottle()
        self.warm = warm  # preallocate_next writes zeros into every block (warmMapedFileEnable)
        self._building = False  # preallocate_next is building a file (under _create_lock)
        self._closed = False  # close() was called: a build finishing later is thrown away

    def load(self) -> None:
        """Open every file (sorted by name); positions are set by recovery."""
        self._closed = False
        if not self.store_dir.exists():
            return
        remove_stale_allocations(self.store_dir)
        names = sorted(p for p in self.store_dir.iterdir() if p.name.isascii() and p.name.isdigit())
        for path in names:
            if path.stat().st_size != self.file_size:
                raise StoreError(
                    f"{path} is {path.stat().st_size} bytes but the configured file size is "
                    f"{self.file_size}; the size cannot change once files exist"
                )
            mf = MappedFile(path, self.file_size, what=self.what)
            mf.wrote_position = mf.flushed_position = self.file_size
            self.files.append(mf)
        for prev, nxt in zip(self.files, self.files[1:], strict=False):
            if nxt.file_from_offset != prev.file_from_offset + self.file_size:
                raise StoreError(f"gap in log files between {prev.path.name} and {nxt.path.name}")

    # ---- lookup ----------------------------------------------------------------

    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def last_for_append(self, start_offset: int = 0) -> MappedFile:
        """The file to append to, creating the next one when the last is full.

        Raises AllocationError (DiskFullError) when it cannot be created.
        """
        last = self.last()
        if last is not None and not last.is_full():
            return last
        with self._create_lock:
            mf = self._next_file(self._next_start(last, start_offset))
            self._next = None
            self.files.append(mf)
            return mf

    def prepare_next(self) -> MappedFile:
        """Create the file after the last one (blocks allocated) without
        starting it: the next ``last_for_append`` after the last file fills up
        takes it. Raises AllocationError; lets a writer make sure the next
        file exists before it pads the current one."""
        with self._create_lock:
            mf = self._next_file(self._next_start(self.last(), 0))
            self._next = mf
            return mf

    def _next_start(self, last: MappedFile | None, start_offset: int) -> int:
        if last is None:
            return start_offset - start_offset % self.file_size
        return last.file_from_offset + self.file_size

    def _next_file(self, start: int) -> MappedFile:
        """The ready file for ``start`` or a new one (under ``_create_lock``)."""
        ready = self._next
        if ready is not None and ready.file_from_offset == start:
            return ready
        if ready is not None:
            self._next = None
            ready.destroy()
        return MappedFile(self.store_dir / offset_to_file_name(start), self.file_size,
                          what=self.what)

    def find_by_offset(self, offset: int) -> MappedFile | None:
        if not self.files:
            return None
        first = self.files[0].file_from_offset
        idx = (offset - first) // self.file_size
        if 0 <= idx < len(self.files):
            return self.files[idx]
        return None

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        last = self.last()
        return last.file_from_offset + last.wrote_position if last else 0

    # ---- flush and repair ------------------------------------------------------

    def flush(self) -> bool:
        """fsync every file with unflushed data. True if anything was flushed.

        ``flushed_where`` becomes the log end seen *before* the fsyncs: bytes
        appended meanwhile are not promised to be on disk.
        """
        target = self.max_offset
        flushed = False
        for mf in list(self.files):
            if mf.wrote_position > mf.flushed_position:
                mf.flush()
                flushed = True
        self.flushed_where = max(self.flushed_where, target)
        return flushed

    @property
    def next_ready(self) -> bool:
        """Whether the file after the last one was created ahead (preallocate_next)."""
        return self._next is not None

    def preallocate_next(self, first: bool = False) -> None:
        """Create the file after the last one ahead of need (run in a worker
        thread); with ``first`` and no file yet, the file at offset 0. A
        failure (disk full) is logged, at most every 10 s, and left for the
        writer to meet, which answers it with a status."""
        with self._create_lock:
            last = self.last()
            if self._closed or self._building or self._next is not None \
                    or (last is None and not first):
                return
            start = 0 if last is None else last.file_from_offset + self.file_size
            self._building = True
        path = self.store_dir / offset_to_file_name(start)
        tmp = path.with_name(path.name + BUILD_SUFFIX)
        try:
            try:
                os.close(build_allocated(tmp, self.file_size, self.what, self.warm, path))
            except (StoreError, OSError) as exc:  # AllocationError is a StoreError
                self._preallocate_failed(log, "cannot preallocate the next file", level="warning",
                                         dir=str(self.store_dir), error=str(exc))
                return
            with self._create_lock:
                last = self.last()
                wanted = 0 if last is None else last.file_from_offset + self.file_size
                # the writer made it meanwhile, moved past it, or the queue closed
                if self._closed or self._next is not None or wanted != start or path.exists():
                    tmp.unlink(missing_ok=True)
                    return
                try:
                    os.rename(tmp, path)
                    self._next = MappedFile(path, self.file_size, what=self.what)
                except (StoreError, OSError) as exc:
                    tmp.unlink(missing_ok=True)
                    self._preallocate_failed(log, "cannot preallocate the next file",
                                             level="warning", dir=str(self.store_dir),
                                             error=str(exc))
        finally:
            with self._create_lock:
                self._building = False

    def truncate_dirty_files(self, offset: int) -> None:
        """Make ``offset`` the end of the log: later files go, the last is cut."""
        keep: list[MappedFile] = []
        for mf in self.files:
            if mf.file_from_offset + self.file_size <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                mf.truncate(offset - mf.file_from_offset)
                keep.append(mf)
            else:
                log.warning("deleting log file past the end of valid data", file=mf.path.name)
                mf.destroy()
        self.files = keep
        self.flushed_where = min(self.flushed_where, offset)

    def delete_all(self) -> None:
        for mf in self.files:
            mf.destroy()
        self.files = []

    def close(self) -> None:
        with self._create_lock:
            self._closed = True
            for mf in self.files:
                mf.close()
            if self._next is not None:
                self._next.close()
                self._next = None
