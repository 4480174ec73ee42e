"""IndexFile: a hash index from message keys to commit-log offsets.

    header (40 bytes)
    +----------------+--------------+-----------------+---------------+-----------+------------+
    | beginTimestamp | endTimestamp | beginPhyOffset  | endPhyOffset  | hashSlots | indexCount |
    | 8              | 8            | 8               | 8             | 4         | 4          |
    +----------------+--------------+-----------------+---------------+-----------+------------+
    slots: hashSlotNum x 4 bytes, the newest entry index of the slot (0 = empty)
    entries: indexNum x 20 bytes
    +--------------+---------------+--------------------------+----------------+
    | keyHash (4)  | phyOffset (8) | timeDiff s since begin (4)| prevIndex (4)  |
    +--------------+---------------+--------------------------+----------------+

keyHash = crc32(key) & 0x7fffffff. Entry 0 is never used, so a slot or ``prevIndex`` of 0 ends a chain. The file
is named after its creation time (yyyyMMddHHmmssSSS), as RocketMQ's.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

from broker.store.mapped_file import MappedFile
from protocol.crc import crc32

INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY = struct.Struct(">iqii")
INDEX_ENTRY_SIZE = 20
_SLOT = struct.Struct(">i")


def key_hash(key: str) -> int:
    """crc32 of the UTF-8 key, 31 bits. (RocketMQ uses abs(String.hashCode);
    that costs ~10x more in Python and only these files ever read the hash.)"""
    return crc32(key.encode()) & 0x7FFFFFFF


def index_file_name(now_ms: int) -> str:
    t = time.localtime(now_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{now_ms % 1000:03d}"


class IndexFile:
    def __init__(self, path: Path, hash_slot_num: int, index_num: int) -> None:
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        size = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE
        existed = path.exists() and path.stat().st_size == size
        # named by time, not offset; a new file gets its blocks (or raises AllocationError)
        self.file = MappedFile(path, size, file_from_offset=0, what="index file")
        self.path = path
        if existed:
            (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
             self.end_phy_offset, self.hash_slot_count, self.index_count) = INDEX_HEADER.unpack_from(
                self.file.mm, 0)
        else:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count = 0
            self.index_count = 1
        self._entries_at = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE

    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_keys(self, keys: list[tuple[str, int, int]]) -> int:
        """Add (key, commit-log offset, store time ms) entries in order; returns
        how many fit (the rest go to the next file). A slot holds its newest
        entry; an entry links to the slot's previous one (0 ends a chain)."""
        room = self.index_num - self.index_count
        if room <= 0 or not keys:
            return 0
        if len(keys) > room:
            keys = keys[:room]
        mm = self.file.mm
        slots = self.hash_slot_num
        entries_at = self._entries_at
        unpack_slot = _SLOT.unpack_from
        pack_slot = _SLOT.pack_into
        pack_entry = INDEX_ENTRY.pack_into
        count = self.index_count
        if count == 1:
            self.begin_timestamp = keys[0][2]
            self.begin_phy_offset = keys[0][1]
        begin = self.begin_timestamp
        new_slots = 0
        last_ms: int | None = None  # a batch's keys share a store time: its diff made once
        diff = 0
        for key, phy_offset, store_ms in keys:
            h = crc32(key.encode()) & 0x7FFFFFFF
            slot_pos = INDEX_HEADER_SIZE + (h % slots) * HASH_SLOT_SIZE
            (prev,) = unpack_slot(mm, slot_pos)
            if prev <= 0 or prev >= count:
                prev = 0
                new_slots += 1
            if store_ms != last_ms:
                last_ms = store_ms
                diff = (store_ms - begin) // 1000
                diff = 0 if diff < 0 else min(diff, 2**31 - 1)
            pack_entry(mm, entries_at + count * INDEX_ENTRY_SIZE, h, phy_offset, diff, prev)
            pack_slot(mm, slot_pos, count)
            count += 1
        self.hash_slot_count += new_slots
        self.index_count = count
        _, self.end_phy_offset, self.end_timestamp = keys[-1]
        return len(keys)

    def _write_header(self) -> None:
        # Written at flush and close only: after a crash, recovery re-indexes
        # everything past the header's endPhyOffset, in the same order.
        INDEX_HEADER.pack_into(self.file.mm, 0, self.begin_timestamp, self.end_timestamp,
                               self.begin_phy_offset, self.end_phy_offset,
                               self.hash_slot_count, self.index_count)

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        return self.begin_timestamp <= end_ms and self.end_timestamp >= begin_ms

    def select_phy_offsets(self, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Offsets of ``key`` stored within [begin, end], newest first."""
        mm = self.file.mm
        h = key_hash(key)
        (idx,) = _SLOT.unpack_from(mm, INDEX_HEADER_SIZE + (h % self.hash_slot_num) * HASH_SLOT_SIZE)
        out: list[int] = []
        while 0 < idx < self.index_count and len(out) < max_num:
            eh, phy, diff, prev = INDEX_ENTRY.unpack_from(mm, self._entries_at + idx * INDEX_ENTRY_SIZE)
            stored = self.begin_timestamp + diff * 1000
            # timeDiff has second granularity: widen the window by a second
            if eh == h and begin_ms - 1000 < stored <= end_ms + 1000:
                out.append(phy)
            if prev >= idx:
                break
            idx = prev
        return out

    def flush(self) -> None:
        if self.file.fd < 0:
            return
        self._write_header()
        self.file.wrote_position = self.file.file_size
        self.file.flushed_position = 0
        self.file.flush()

    def close(self) -> None:
        if self.file.fd >= 0:
            self._write_header()
        self.file.close()

    def destroy(self) -> None:
        self.file.destroy()
