"""Cutting a replica's log back to the point it shares with a new master,
crash-safe (controller mode; RocketMQ's changeToSlave truncation).

A replica whose log diverged from its new master's (an old master with
bytes no slave received, a slave that followed a master since replaced)
keeps its log up to ``epochs.common_point`` and drops the rest: the commit
log past it, the consume-queue and index entries pointing past it, and the
epoch entries starting past it. Then it follows the master from there.

The steps touch several files, so the target is written first, to
``truncating`` under the store's root (8 bytes big-endian and their CRC32,
temp + fsync + rename), and removed only once every step is on disk. A store
that loads with the file present (a crash in between) does the steps again
before its recovery: each step is idempotent (cutting a log at the offset it
already ends at changes nothing), so the store always comes back with one
consistent log ending at the target.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from broker.persist import atomic_write_bytes, fsync_dir
from broker.store.status import StoreError

MARKER_FILE = "truncating"
_HEAD = struct.Struct(">q")
_CRC = struct.Struct(">I")


class TruncationMarker:
    def __init__(self, root: Path) -> None:
        self.path = root / MARKER_FILE

    def pending(self) -> int | None:
        """The offset a truncation that did not finish cuts to (None: none).
        StoreError for a damaged file: the store cannot tell where its log ends."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) == _HEAD.size + _CRC.size:
            (offset,) = _HEAD.unpack_from(data)
            (crc,) = _CRC.unpack_from(data, _HEAD.size)
            if crc == zlib.crc32(data[:_HEAD.size]) and offset >= 0:
                return offset
        raise StoreError(f"{self.path} is damaged: a truncation of the log was cut short "
                         "and its target is unreadable; restore the store or empty it "
                         "(the replica then copies its master's log afresh)")

    def begin(self, offset: int) -> None:
        head = _HEAD.pack(offset)
        atomic_write_bytes(self.path, head + _CRC.pack(zlib.crc32(head)))

    def end(self) -> None:
        self.path.unlink(missing_ok=True)
        self.path.with_name(self.path.name + ".bak").unlink(missing_ok=True)
        fsync_dir(self.path.parent)
