"""The confirm offset of controller mode, kept across restarts.

In controller mode a store dispatches (consume queues, index, long polls)
only the records its confirm offset covers: on a master, what every
SyncStateSet member holds; on a slave, what its master said so. Records past
it are in the commit log only, so no consumer sees what a failover may drop.

``confirmOffset`` under the store's root holds the latest value the store
dispatched up to (8 bytes, big-endian, then their CRC32), written temp +
fsync + rename with the consume-queue flush and at shutdown. A value on disk
that lags only holds back more records after a restart (they are dispatched
once the confirm offset passes them again); a missing or damaged file counts
as 0 (nothing past the consume queues' own end is dispatched until the
controller's master says so).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from broker.persist import atomic_write_bytes

CONFIRM_FILE = "confirmOffset"
_VALUE = struct.Struct(">qI")


class ConfirmFile:
    def __init__(self, root: Path) -> None:
        self.path = root / CONFIRM_FILE
        self.written: int | None = None  # the value on disk (None: not read or written)

    def load(self) -> tuple[int, str | None]:
        """The value on disk, and why it was not usable (then 0)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0, None
        if len(data) != _VALUE.size:
            return 0, f"{self.path}: {len(data)} bytes, not {_VALUE.size}"
        value, crc = _VALUE.unpack(data)
        if crc != zlib.crc32(data[:8]) or value < 0:
            return 0, f"{self.path}: checksum mismatch"
        self.written = value
        return value, None

    def write(self, value: int) -> bool:
        """Write ``value`` unless it is on disk already (True when written)."""
        if value == self.written:
            return False
        head = struct.pack(">q", value)
        atomic_write_bytes(self.path, head + struct.pack(">I", zlib.crc32(head)))
        self.written = value
        return True
