"""StoreCheckpoint: when the commit log, consume queues and index were last flushed.

    +---------------------------+------------------------------+-----------------------+
    | physic msg timestamp (8)  | logics msg timestamp (8)     | index msg timestamp (8)|
    +---------------------------+------------------------------+-----------------------+
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

    @property
    def min_timestamp(self) -> int:
        """Everything stored before this was flushed (commit log and queues)."""
        return min(self.physic_msg_timestamp, self.logics_msg_timestamp)

    def flush(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = CHECKPOINT.pack(
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp
        )
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
