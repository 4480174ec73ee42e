"""The POP in-flight log: an append-only file of framed entries, checkpointed
by rewriting (synchronous, no trio; the broker calls ``write`` in a worker
thread).

Layout under ``<storePathRootDir>/pop/``: ``inflight.log`` holds frames of
``[length u32][crc32 u32][JSON entry]``; ``secret`` holds the 32 random bytes
receipt handles are signed with. ``load`` replays frames until the first torn
or corrupt one and truncates the file there (what a crash mid-append leaves).
``append`` writes frames into the page cache (they outlive a killed process,
not a power loss) and ``sync`` fsyncs them (``synced_size``: how much of the
file an fsync covered); ``write`` appends frames and fsyncs; given a checkpoint (the table's
``snapshot()`` entries, taken with the frames' changes applied) it writes it
to ``inflight.log.tmp``, fsyncs, renames it over the log and fsyncs the
directory, so the log is always either the old one plus whole frames or the
new checkpoint.

Every entry is self-contained (a pop's offset move and its records are one
frame), so any prefix of the log is a state the broker went through: a crash
at worst forgets the last changes, which means a message is delivered again
(never that one stays invisible: its record or the offset before it is kept).
"""

from __future__ import annotations

import json
import os
import secrets
import struct
import zlib
from pathlib import Path
from typing import Any

_HEAD = struct.Struct(">II")
MAX_FRAME = 16 * 1024 * 1024  # a pop entry of 32 records is a few KB


def encode_frame(entry: dict[str, Any]) -> bytes:
    data = json.dumps(entry, separators=(",", ":")).encode("utf-8")
    return _HEAD.pack(len(data), zlib.crc32(data)) + data


def decode_frames(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The entries of whole good frames from the start, and where they end."""
    out: list[dict[str, Any]] = []
    at = 0
    while at + _HEAD.size <= len(data):
        size, crc = _HEAD.unpack_from(data, at)
        end = at + _HEAD.size + size
        if size > MAX_FRAME or end > len(data):
            break
        body = data[at + _HEAD.size:end]
        if zlib.crc32(body) != crc:
            break
        try:
            entry = json.loads(body)
        except ValueError:
            break
        if not isinstance(entry, dict):
            break
        out.append(entry)
        at = end
    return out, at


class PopLog:
    """The log's file; one writer (the broker's pop syncer)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "inflight.log"
        self.size = 0
        self.synced_size = 0  # the file's length at the last fsync's start
        self._unsynced = False
        self._fd: int | None = None

    def secret(self) -> bytes:
        """The handles' secret, made (and made durable) on first use."""
        path = self.directory / "secret"
        try:
            data = path.read_bytes()
            if len(data) == 32:
                return data
        except FileNotFoundError:
            pass
        self.directory.mkdir(parents=True, exist_ok=True)
        data = secrets.token_bytes(32)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._sync_dir()
        return data

    def load(self) -> list[dict[str, Any]]:
        """The log's entries; a torn or corrupt tail is cut off."""
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        entries, good = decode_frames(data)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        if good < len(data):
            os.ftruncate(self._fd, good)
            os.fsync(self._fd)
        os.lseek(self._fd, good, os.SEEK_SET)
        self.size = self.synced_size = good
        self._unsynced = False
        return entries

    def append(self, frames: bytes) -> None:
        """Write frames (no fsync: they are in the page cache, which outlives
        the process)."""
        fd = self._require()
        view = memoryview(frames)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        self.size += len(frames)
        self._unsynced = True

    def sync(self) -> None:
        """fsync what was appended (safe in a worker thread while the owner
        appends: what it appends meanwhile stays marked unsynced)."""
        fd = self._require()
        size = self.size
        self._unsynced = False
        os.fsync(fd)
        self.synced_size = max(self.synced_size, size)

    def write(self, frames: bytes, checkpoint: list[dict[str, Any]] | None = None) -> None:
        """Make ``frames`` durable, or replace the log by ``checkpoint`` (which
        includes them)."""
        if checkpoint is None:
            self.append(frames)
            self.sync()
            return
        tmp = self.path.with_suffix(".log.tmp")
        data = b"".join(encode_frame(e) for e in checkpoint)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._sync_dir()
        old = self._require()
        self._fd = os.open(self.path, os.O_WRONLY, 0o644)
        os.lseek(self._fd, len(data), os.SEEK_SET)
        os.close(old)
        self.size = self.synced_size = len(data)
        self._unsynced = False

    def close(self) -> None:
        """Close the file, fsyncing first what was appended since the last
        ``sync`` (a clean stop loses nothing even to a later power loss)."""
        if self._fd is not None:
            if self._unsynced:
                os.fsync(self._fd)
                self._unsynced = False
                self.synced_size = self.size
            os.close(self._fd)
            self._fd = None

    def _require(self) -> int:
        if self._fd is None:
            raise RuntimeError("the pop log is not loaded")
        return self._fd

    def _sync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
