"""The timer wheel: pending timer messages in slots by due time (pure, no I/O).

A slot is keyed by its time: the due time rounded *up* to ``precision_ms``,
so a message is never delivered early and at most one precision late (plus
the service's tick). Each slot keeps its entries in arrival order in flat
arrays (commit-log offset, size, due time, key hash: 32 bytes a message).

Delivery walks slots in time order; the cursor ``(done_slot, done_index)``
says how far it has gone: every slot before ``done_slot`` is delivered, and
the first ``done_index`` entries of slot ``done_slot``. A message that
arrives due already goes into the slot the cursor is in (``place``), never
behind it, so the cursor alone says which entries of the timer log are
delivered: replaying the log in order (``TimerWheel.replay``) rebuilds the
same slots with the same order, and the checkpointed cursor skips exactly
what was delivered before it was written.

Work per message: one append when it comes in, one pop when it is due; a
tick that finds nothing due costs one heap peek.

Recall: ``find`` looks a key hash up among pending entries; ``recall``
marks it, and delivery skips (and counts) a marked entry instead of
delivering it.
"""

from __future__ import annotations

import heapq
import struct
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from hashlib import blake2b

# A timer-log record: slot ms, due ms, commit-log offset, key hash, size, kind.
RECORD = struct.Struct(">qqqqii")
RECORD_SIZE = RECORD.size  # 40


class Kind(IntEnum):
    MESSAGE = 0
    RECALL = 1  # a recall marker: the entry of this key hash in this slot is not delivered


@dataclass(frozen=True, slots=True)
class TimerRecord:
    slot_ms: int
    due_ms: int
    phys: int
    key_hash: int
    size: int
    kind: Kind = Kind.MESSAGE

    def encode(self) -> bytes:
        return RECORD.pack(self.slot_ms, self.due_ms, self.phys, self.key_hash, self.size,
                           int(self.kind))


def decode_records(data: bytes | memoryview) -> list[TimerRecord]:
    """Whole records of ``data`` (a torn tail is left out). Raises ValueError
    for a record of an unknown kind."""
    return [TimerRecord(slot, due, phys, key, size, Kind(kind))
            for slot, due, phys, key, size, kind in iter_records(data)]


def iter_records(data: bytes | memoryview) -> Iterable[tuple[int, int, int, int, int, int]]:
    """The fields of each whole record of ``data``, as tuples."""
    whole = len(data) - len(data) % RECORD_SIZE
    return RECORD.iter_unpack(data[:whole])


def key_hash(uniq_key: str | None) -> int:
    """A 63-bit hash of a message's unique key (0: none)."""
    if not uniq_key:
        return 0
    return int.from_bytes(blake2b(uniq_key.encode(), digest_size=8).digest(), "big") >> 1


class _Slot:
    __slots__ = ("phys", "size", "due", "keys")

    def __init__(self) -> None:
        self.phys = array("q")
        self.size = array("q")
        self.due = array("q")
        self.keys = array("q")

    def __len__(self) -> int:
        return len(self.phys)


@dataclass(frozen=True, slots=True)
class DueEntry:
    slot_ms: int
    due_ms: int
    phys: int
    size: int
    key_hash: int


class TimerWheel:
    def __init__(self, precision_ms: int, done_slot: int = 0, done_index: int = 0) -> None:
        if precision_ms <= 0:
            raise ValueError("timerPrecisionMs must be positive")
        self.precision_ms = precision_ms
        self.done_slot = done_slot
        self.done_index = done_index
        self.slots: dict[int, _Slot] = {}
        self._heap: list[int] = []
        self.pending = 0
        self.recalled: dict[int, int] = {}  # key hash -> slot ms: pending entries not to deliver
        self.recalled_skipped = 0

    # ---- in ----------------------------------------------------------------------------

    def slot_of(self, due_ms: int) -> int:
        """The slot a message due at ``due_ms`` waits in: its due time rounded
        up to the precision, never behind the delivery cursor."""
        p = self.precision_ms
        return max(-(-due_ms // p) * p, self.done_slot)

    def add(self, record: TimerRecord) -> None:
        """Take a record (placed already: ``record.slot_ms`` from ``slot_of``)."""
        self.add_raw(record.slot_ms, record.due_ms, record.phys, record.key_hash, record.size,
                     int(record.kind))

    def add_raw(self, slot_ms: int, due_ms: int, phys: int, key: int, size: int,
                kind: int) -> None:
        """``add`` of a record's fields (a replay feeds tuples, no objects)."""
        if kind == Kind.RECALL:
            if slot_ms >= self.done_slot:
                self.recalled[key] = slot_ms
            return
        slot = self.slots.get(slot_ms)
        if slot is None:
            slot = self.slots[slot_ms] = _Slot()
            heapq.heappush(self._heap, slot_ms)
        slot.phys.append(phys)
        slot.size.append(size)
        slot.due.append(due_ms)
        slot.keys.append(key)
        self.pending += 1

    def replay(self, records: Iterable[tuple[int, int, int, int, int, int]]) -> None:
        """Rebuild from the timer log (in its order): what the cursor passed is
        left out. Call on a fresh wheel built with the checkpointed cursor.
        The cursor's own slot is rebuilt whole (its first ``done_index``
        entries stay behind the cursor), so a later cursor still counts
        entries of that slot as the log orders them."""
        done_slot = self.done_slot
        add = self.add_raw
        for slot_ms, due, phys, key, size, kind in records:
            if slot_ms >= done_slot:
                add(slot_ms, due, phys, key, size, kind)
        done = self.slots.get(self.done_slot)
        if done is not None:
            self.done_index = min(self.done_index, len(done))
            self.pending -= self.done_index
            if self.done_index >= len(done):
                self._drop(self.done_slot)
        else:
            self.done_index = 0

    def _drop(self, slot_ms: int) -> None:
        del self.slots[slot_ms]
        self._heap = [s for s in self._heap if s != slot_ms]
        heapq.heapify(self._heap)
        self.done_slot, self.done_index = slot_ms + self.precision_ms, 0

    # ---- out ---------------------------------------------------------------------------

    def next_due_ms(self) -> int | None:
        """The time of the earliest slot holding something, or None."""
        return self._heap[0] if self._heap else None

    def take_due(self, now_ms: int, limit: int) -> list[DueEntry]:
        """Up to ``limit`` entries due at ``now_ms``, in order; the cursor moves
        past them (recalled ones are skipped and counted, not returned)."""
        out: list[DueEntry] = []
        heap = self._heap
        while heap and heap[0] <= now_ms and len(out) < limit:
            slot_ms = heap[0]
            slot = self.slots[slot_ms]
            if self.done_slot != slot_ms:
                self.done_slot, self.done_index = slot_ms, 0
            i = self.done_index
            end = min(len(slot), i + limit - len(out))
            recalled = self.recalled
            while i < end:
                key = slot.keys[i]
                if recalled and recalled.get(key) == slot_ms:
                    del recalled[key]
                    self.recalled_skipped += 1
                else:
                    out.append(DueEntry(slot_ms, slot.due[i], slot.phys[i], slot.size[i], key))
                i += 1
            self.pending -= i - self.done_index
            self.done_index = i
            if i >= len(slot):
                heapq.heappop(heap)
                del self.slots[slot_ms]
                self.done_slot, self.done_index = slot_ms + self.precision_ms, 0
        return out

    # ---- recall ------------------------------------------------------------------------

    def find(self, key: int, slot_hint: int | None = None) -> int | None:
        """The slot of a pending, not recalled entry with this key hash, or None.
        ``slot_hint``: the slot to look in first (a recall handle's time)."""
        if key == 0 or key in self.recalled:
            return None
        order = list(self.slots)
        if slot_hint is not None and slot_hint in self.slots:
            order.insert(0, slot_hint)
        for slot_ms in order:
            slot = self.slots[slot_ms]
            start = self.done_index if slot_ms == self.done_slot else 0
            try:
                at = slot.keys.index(key, start)
            except ValueError:
                continue
            if at >= start:
                return slot_ms
        return None

    def recall(self, key: int, slot_ms: int) -> None:
        self.recalled[key] = slot_ms

    def cursor(self) -> tuple[int, int]:
        return self.done_slot, self.done_index


__all__ = ["RECORD_SIZE", "DueEntry", "Kind", "TimerRecord", "TimerWheel", "decode_records",
           "key_hash"]
