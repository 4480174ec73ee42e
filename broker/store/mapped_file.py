"""MappedFile: one fixed-size file of a log, mapped into memory.

The file is named by the log offset of its first byte, in 20 digits. Bytes
past ``wrote_position`` are zero (a new file) or stale (cut off by recovery,
then zeroed by ``truncate``).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from broker.store.status import StoreError

FILE_NAME_DIGITS = 20
_ZERO_CHUNK = 1024 * 1024


def offset_to_file_name(offset: int) -> str:
    return str(offset).zfill(FILE_NAME_DIGITS)


class MappedFile:
    def __init__(self, path: Path, file_size: int, file_from_offset: int | None = None) -> None:
        """Open or create ``path``; its name is its start offset unless given."""
        self.path = path
        self.file_size = file_size
        try:
            self.file_from_offset = int(path.name) if file_from_offset is None else file_from_offset
        except ValueError as exc:
            raise StoreError(f"not a log file name: {path}") from exc
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self.fd).st_size
        if size == 0:
            os.ftruncate(self.fd, file_size)
        elif size != file_size:
            os.close(self.fd)
            raise StoreError(f"{path} has {size} bytes, expected {file_size}")
        self.mm = mmap.mmap(self.fd, file_size)
        self.wrote_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0

    def allocate(self) -> None:
        """Reserve the file's disk blocks now, so appends never wait for them."""
        try:
            os.posix_fallocate(self.fd, 0, self.file_size)
        except OSError:
            pass  # not supported by every file system; appends still work

    def last_modified_ms(self) -> int:
        try:
            return int(os.stat(self.path).st_mtime * 1000)
        except OSError:
            return 0

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def append(self, data: bytes) -> int:
        """Write at the end; returns the file position written at."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise StoreError(f"append of {len(data)} bytes overflows {self.path.name}")
        self.mm[pos:end] = data
        self.wrote_position = end
        return pos

    def read(self, pos: int, size: int) -> bytes:
        return self.mm[pos : pos + size]

    def flush(self) -> int:
        """fsync what was written so far (safe to call from a worker thread)."""
        wrote = self.wrote_position
        if wrote > self.flushed_position and self.fd >= 0:
            # data only: the file's size never changes, mtime need not be durable
            os.fdatasync(self.fd)
            self.flushed_position = wrote
        return self.flushed_position

    def truncate(self, pos: int) -> None:
        """Cut the data at ``pos`` and zero the stale bytes after it.

        The log is append-only, so stale bytes form one run from ``pos``: zero
        chunk by chunk until a chunk that is already all zeros.
        """
        p = pos
        while p < self.file_size:
            end = min(p + _ZERO_CHUNK, self.file_size)
            chunk = self.mm[p:end]
            if chunk.count(0) == len(chunk):
                break
            self.mm[p:end] = bytes(end - p)
            p = end
        self.wrote_position = pos
        self.flushed_position = min(self.flushed_position, pos)

    def close(self) -> None:
        if not self.mm.closed:
            self.mm.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
