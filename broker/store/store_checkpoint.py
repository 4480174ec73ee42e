"""StoreCheckpoint: when the commit log, consume queues and index were last flushed.

    +---------------------------+------------------------------+-----------------------+
    | physic msg timestamp (8)  | logics msg timestamp (8)     | index msg timestamp (8)|
    +---------------------------+------------------------------+-----------------------+

As in RocketMQ, a commit-log flush only moves the physic timestamp in memory;
the file is written by the consume-queue flush (every second) and at shutdown.
A timestamp on disk that lags only makes a recovery start scanning earlier, so
no SYNC_FLUSH send waits for a second fsync.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

CHECKPOINT = struct.Struct(">qqq")


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        if path.exists() and path.stat().st_size >= CHECKPOINT.size:
            (
                self.physic_msg_timestamp,
                self.logics_msg_timestamp,
                self.index_msg_timestamp,
            ) = CHECKPOINT.unpack(path.read_bytes()[: CHECKPOINT.size])
        self._written: tuple[int, int, int] | None = (
            self._values() if path.exists() else None)

    @property
    def min_timestamp(self) -> int:
        """Everything stored before this was flushed (commit log and queues)."""
        return min(self.physic_msg_timestamp, self.logics_msg_timestamp)

    def _values(self) -> tuple[int, int, int]:
        return self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp

    def flush_if_changed(self) -> bool:
        """Write and fsync the file if a timestamp moved since the last write."""
        if self._values() == self._written:
            return False
        self.flush()
        return True

    def flush(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        values = self._values()
        data = CHECKPOINT.pack(*values)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._written = values
