"""MappedFileQueue: a directory of equal-size MappedFiles forming one log."""

from __future__ import annotations

import threading
from pathlib import Path

import structlog

from broker.store.mapped_file import MappedFile, offset_to_file_name
from broker.store.status import StoreError

log = structlog.get_logger("store.files")


class MappedFileQueue:
    def __init__(self, store_dir: Path, file_size: int) -> None:
        if file_size <= 0:
            raise StoreError("mapped file size must be positive")
        self.store_dir = store_dir
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self._next: MappedFile | None = None  # created ahead by preallocate_next
        self._create_lock = threading.Lock()

    def load(self) -> None:
        """Open every file (sorted by name); positions are set by recovery."""
        if not self.store_dir.exists():
            return
        names = sorted(p for p in self.store_dir.iterdir() if p.name.isdigit())
        for path in names:
            if path.stat().st_size != self.file_size:
                raise StoreError(
                    f"{path} is {path.stat().st_size} bytes but the configured file size is "
                    f"{self.file_size}; the size cannot change once files exist"
                )
            mf = MappedFile(path, self.file_size)
            mf.wrote_position = mf.flushed_position = self.file_size
            self.files.append(mf)
        for prev, nxt in zip(self.files, self.files[1:], strict=False):
            if nxt.file_from_offset != prev.file_from_offset + self.file_size:
                raise StoreError(f"gap in log files between {prev.path.name} and {nxt.path.name}")

    # ---- lookup ----------------------------------------------------------------

    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def last_for_append(self, start_offset: int = 0) -> MappedFile:
        """The file to append to, creating the next one when the last is full."""
        last = self.last()
        if last is not None and not last.is_full():
            return last
        with self._create_lock:
            return self._create_next(last, start_offset)

    def _create_next(self, last: MappedFile | None, start_offset: int) -> MappedFile:
        if last is None:
            start = start_offset - start_offset % self.file_size
        else:
            start = last.file_from_offset + self.file_size
        ready, self._next = self._next, None
        if ready is not None and ready.file_from_offset == start:
            mf = ready
        else:
            if ready is not None:
                ready.destroy()
            mf = MappedFile(self.store_dir / offset_to_file_name(start), self.file_size)
        self.files.append(mf)
        return mf

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

    def preallocate_next(self) -> None:
        """Create the file after the last one ahead of need (run in a worker thread)."""
        with self._create_lock:
            last = self.last()
            if last is None or self._next is not None:
                return
            start = last.file_from_offset + self.file_size
            mf = MappedFile(self.store_dir / offset_to_file_name(start), self.file_size)
            mf.allocate()
            self._next = mf

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
        for mf in self.files:
            mf.close()
        if self._next is not None:
            self._next.close()
            self._next = None
