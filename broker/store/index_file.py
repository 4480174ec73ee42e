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

Writing. A file taking keys keeps its slot table in anonymous memory, and
the entries added since the last flush in a list; only the flush (a worker
thread) writes the file, with ``pwrite``: the new entries, the slot pages
changed since the last flush, then the header, then it fdatasyncs. So the
event loop never writes the file:
- stores through a shared mapping of the file are write-protected again by
  every flush (a fault per page on the next store, waiting for the page's
  writeback when it is under way): with 150k keys/s spread over the 20 MB of
  slots that stalled the loop for tens of ms after each flush;
- a ``pwrite`` of the loop's to the file waits for the flush's (a buffered
  write holds the file's inode lock): 2-8 ms behind 20 MB of slot pages.
If flushes fail for long (a failing disk), the loop writes the entries itself
once more than ``PENDING_MAX`` wait, so memory stays bounded.

Order on disk: entries before the slots and the header that point at them,
so every slot on disk points at an entry the header's count covers. Reads
(queries, old files) go through the mapping, and to the list for entries not
yet written.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.store.mapped_file import MappedFile
from broker.store.writeback import push
from protocol.crc import crc32
from protocol.speedups import compiled

INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY = struct.Struct(">iqii")
INDEX_ENTRY_SIZE = 20
_SLOT = struct.Struct(">i")
_PAGE_SHIFT = 12  # dirty slot pages are tracked 4 KiB at a time
_SLOTS_PER_PAGE_SHIFT = _PAGE_SHIFT - 2  # 1,024 slots of 4 bytes a page
_MERGE_GAP = 8  # clean pages between two dirty runs written with them: fewer pwrites
# slot bytes a flush hands to the disk at a time before its fdatasync
WRITEBACK_STEP = 256 << 10
_IOV_MAX = 1024  # pieces one pwritev takes (Linux's UIO_MAXIOV)
PENDING_MAX = 1 << 20  # entries kept for the flush (20 MiB) before the loop writes them


def compiled_kernel() -> Callable[..., Any] | None:
    """``index_kernel.put_hashes`` compiled (deploy/speedups.py), when built
    from the source beside this file and not turned off; else None."""
    return compiled("broker.store._index_kernel_c",
                    Path(__file__).with_name("index_kernel.py"), "put_hashes")


_KERNEL = compiled_kernel()


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
            if self.index_count < 1:  # its header never written: as new (entry 0 is unused)
                self.index_count = 1
        else:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count = 0
            self.index_count = 1
        self._entries_at = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        table = hash_slot_num * HASH_SLOT_SIZE
        # the slot table of a file taking keys (None once full and written)
        self._slots: mmap.mmap | None = None
        self._dirty = bytearray(((table - 1) >> _PAGE_SHIFT) + 1 if table else 0)
        self._written_header: tuple[int, ...] | None = self._header() if existed else None
        # entries [1, _pending_first) are in the file, [_pending_first, index_count)
        # in _pending, in order; both change together, under _pending_lock
        self._pending: list[bytearray] = []
        self._pending_first = self.index_count
        self._pending_lock = threading.Lock()
        # the compiled per-key loop where there is one (tests turn it off to compare)
        self.use_kernel = True
        if not self.is_full():
            self._slots = _anonymous(table)
            if existed:
                self._slots[:table] = self.file.pread(INDEX_HEADER_SIZE, table)

    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_keys(self, keys: list[tuple[str, int, int]]) -> int:
        """Add (key, commit-log offset, store time ms) entries in order; returns
        how many fit (the rest go to the next file)."""
        return self.put_hashes([(key_hash(k), phy, ms) for k, phy, ms in keys])

    def put_hashes(self, keys: list[tuple[int, int, int]]) -> int:
        """``put_keys`` of (``key_hash(key)``, commit-log offset, store time ms)
        entries. A slot holds its newest entry; an entry links to the slot's
        previous one (0 ends a chain)."""
        room = self.index_num - self.index_count
        if room <= 0 or not keys:
            return 0
        if len(keys) > room:
            keys = keys[:room]
        table = self._slots
        if table is None:  # not full, so never dropped: a table always exists here
            raise RuntimeError(f"{self.path.name} has no slot table")
        count = self.index_count
        if count == 1:
            self.begin_timestamp = keys[0][2]
            self.begin_phy_offset = keys[0][1]
        kernel = _KERNEL if self.use_kernel else None
        if kernel is not None:
            entries, count, new_slots = kernel(keys, table, self._dirty, self.hash_slot_num,
                                               count, self.begin_timestamp)
        else:
            entries, count, new_slots = put_hashes_loop(
                keys, table, self._dirty, self.hash_slot_num, count, self.begin_timestamp)
        with self._pending_lock:  # the entries and the header's fields move together
            self._pending.append(entries)
            self.hash_slot_count += new_slots
            self.index_count = count
            _, self.end_phy_offset, self.end_timestamp = keys[-1]
            first = self._pending_first
            if count - first > PENDING_MAX:  # no flush for long: write them here
                chunks = self._pending
                self._write_entries(chunks, first)
                self._drop_written(chunks, first, count)
        return len(keys)

    def _header(self) -> tuple[int, ...]:
        return (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                self.end_phy_offset, self.hash_slot_count, self.index_count)

    def _write_entries(self, chunks: list[bytearray], first: int) -> None:
        """Write ``chunks`` of entries, the first being entry ``first``."""
        pos = self._entries_at + first * INDEX_ENTRY_SIZE
        for at in range(0, len(chunks), _IOV_MAX):
            part = chunks[at : at + _IOV_MAX]
            size = sum(map(len, part))
            if os.pwritev(self.file.fd, part, pos) != size:  # a regular file takes it all
                self.file.write_at(pos, b"".join(part))
            pos += size

    def _drop_written(self, chunks: list[bytearray], first: int, end: int) -> None:
        """Take ``chunks``, entries ``first`` to ``end`` (excluded), written,
        off the pending list (hold ``_pending_lock``), unless the loop wrote
        them meanwhile."""
        if self._pending_first == first:
            del self._pending[: len(chunks)]
            self._pending_first = end

    def _write_pending(self) -> tuple[bool, tuple[int, ...]]:
        """Write the entries pending now; returns whether there were any, and
        the header as of them (its count covers exactly what is written)."""
        with self._pending_lock:
            chunks, first = list(self._pending), self._pending_first
            header = self._header()
        if chunks:  # written outside the lock: the loop goes on adding
            self._write_entries(chunks, first)
            with self._pending_lock:
                self._drop_written(chunks, first, header[5])  # the header's index_count
        return bool(chunks), header

    def _write_out(self, runs: list[tuple[int, int]] | None = None) -> bool:
        """Write the entries added and the slot pages changed since the last
        call, then the header (written at flush and close only: after a crash,
        recovery re-indexes everything past the header's endPhyOffset, in the
        same order). Safe in a worker thread while the event loop adds keys:
        the entries leave the list only once written, and the lock is never
        held across a write (but by the loop itself, once PENDING_MAX wait); a page's flag
        is cleared before the page is written and set after each store into
        it, so a store the write may miss leaves its page dirty for the next
        call. Returns whether anything was written; ``runs`` gets the file
        ranges of the slot pages written."""
        table = self._slots
        wrote, _ = self._write_pending()
        if table is not None:
            dirty = self._dirty
            view = memoryview(table)  # slices of it go to pwrite: no copies
            size = self.hash_slot_num * HASH_SLOT_SIZE
            start = dirty.find(1)
            while start >= 0:
                end = dirty.find(0, start)
                if end < 0:
                    end = len(dirty)
                more = dirty.find(1, end)  # a short clean gap is written with its runs
                while 0 <= more <= end + _MERGE_GAP:
                    end = dirty.find(0, more)
                    if end < 0:
                        end = len(dirty)
                    more = dirty.find(1, end)
                dirty[start:end] = bytes(end - start)
                lo, hi = start << _PAGE_SHIFT, min(end << _PAGE_SHIFT, size)
                self.file.write_at(INDEX_HEADER_SIZE + lo, view[lo:hi])
                if runs is not None:
                    runs.append((INDEX_HEADER_SIZE + lo, INDEX_HEADER_SIZE + hi))
                wrote = True
                start = more
            if self.is_full() and dirty.find(1) < 0:
                self._slots = None  # all on disk: reads go through the mapping
        # the entries added while the slots were written, and a header covering
        # them: every slot and entry on disk is within its count
        more, header = self._write_pending()
        wrote = wrote or more
        if header != self._written_header:
            self.file.write_at(0, INDEX_HEADER.pack(*header))
            self._written_header = header
            wrote = True
        return wrote

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        return self.begin_timestamp <= end_ms and self.end_timestamp >= begin_ms

    def select_phy_offsets(self, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Offsets of ``key`` stored within [begin, end], newest first."""
        mm = self.file.mm
        h = key_hash(key)
        slot_pos = (h % self.hash_slot_num) * HASH_SLOT_SIZE
        table = self._slots
        if table is not None:
            (idx,) = _SLOT.unpack_from(table, slot_pos)
        else:
            (idx,) = _SLOT.unpack_from(mm, INDEX_HEADER_SIZE + slot_pos)
        with self._pending_lock:  # the entries not written yet (joined if a chain gets there)
            first, chunks = self._pending_first, list(self._pending)
        pending: bytes | None = None
        out: list[int] = []
        while 0 < idx < self.index_count and len(out) < max_num:
            if idx >= first:
                if pending is None:
                    pending = b"".join(chunks)
                eh, phy, diff, prev = INDEX_ENTRY.unpack_from(pending,
                                                              (idx - first) * INDEX_ENTRY_SIZE)
            else:
                eh, phy, diff, prev = INDEX_ENTRY.unpack_from(
                    mm, self._entries_at + idx * INDEX_ENTRY_SIZE)
            stored = self.begin_timestamp + diff * 1000
            # timeDiff has second granularity: widen the window by a second
            if eh == h and begin_ms - 1000 < stored <= end_ms + 1000:
                out.append(phy)
            if prev >= idx:
                break
            idx = prev
        return out

    def flush(self) -> None:
        """Write what changed (``_write_out``) and fdatasync it; nothing when
        nothing changed since the last flush (a full file's last one)."""
        if self.file.fd < 0:
            return
        runs: list[tuple[int, int]] = []
        if self._write_out(runs):
            # the slot pages a few at a time, so a commit-log fsync never
            # queues behind all of them (broker/store/writeback.py)
            push(self.file.fd, runs, WRITEBACK_STEP)
            os.fdatasync(self.file.fd)

    def close(self, write: bool = True) -> None:
        if write and self.file.fd >= 0:
            self._write_out()
        self.file.close()
        table, self._slots = self._slots, None
        if table is not None:
            try:
                table.close()
            except BufferError:  # a view still held (a traceback's): freed with it
                pass

    def destroy(self) -> None:
        self.close(write=False)  # nothing of it is kept
        self.file.destroy()


def put_hashes_loop(keys: list[tuple[int, int, int]], table: Any, dirty: bytearray,
                    slots: int, count: int, begin: int) -> tuple[bytearray, int, int]:
    """The per-key loop of ``IndexFile.put_hashes`` in Python (the reference
    ``index_kernel.put_hashes`` is compared with): (the entries' bytes, the
    next count, how many slots were empty)."""
    unpack_slot = _SLOT.unpack_from
    pack_slot = _SLOT.pack_into
    pack_entry = INDEX_ENTRY.pack_into
    entries = bytearray(len(keys) * INDEX_ENTRY_SIZE)
    at = 0
    new_slots = 0
    last_ms: int | None = None  # a batch's keys share a store time: its diff made once
    diff = 0
    for h, phy_offset, store_ms in keys:
        slot = h % slots
        slot_pos = slot << 2
        (prev,) = unpack_slot(table, slot_pos)
        if prev <= 0 or prev >= count:
            prev = 0
            new_slots += 1
        if store_ms != last_ms:
            last_ms = store_ms
            diff = (store_ms - begin) // 1000
            diff = 0 if diff < 0 else min(diff, 2**31 - 1)
        pack_entry(entries, at, h, phy_offset, diff, prev)
        at += INDEX_ENTRY_SIZE
        pack_slot(table, slot_pos, count)
        dirty[slot >> _SLOTS_PER_PAGE_SHIFT] = 1
        count += 1
    return entries, count, new_slots


def _anonymous(size: int) -> mmap.mmap:
    """Private anonymous memory of ``size`` zero bytes, in 2 MiB pages where
    the kernel gives them: keys land on random slots, and with 4 KiB pages
    most would also miss the TLB (20 MB of slots is about 5,000 pages).
    Each 2 MiB is written once, so that no read maps the zero page first
    (a write to it would split it into 4 KiB pages)."""
    table = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            table.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # no transparent huge pages here: 4 KiB pages then
            pass
    _touch(table, size)
    return table


def _touch(table: mmap.mmap, size: int) -> None:
    """Write a zero byte into each 2 MiB of ``table``, by ``readv`` from
    /dev/zero where it can be opened: the kernel faults the pages in with the
    GIL released. (A store through the mapping holds the GIL while it faults:
    a fresh process's first 20 MB of slots took 37 ms here, and a thread doing
    it kept the event loop off the GIL for up to 10 ms at a time.)"""
    try:
        fd = os.open("/dev/zero", os.O_RDONLY)
    except OSError:
        fd = -1
    view = memoryview(table)
    try:
        for pos in range(0, size, 1 << 21):
            if fd < 0 or os.readv(fd, [view[pos:pos + 1]]) != 1:
                table[pos] = 0
    finally:
        view.release()
        if fd >= 0:
            os.close(fd)
