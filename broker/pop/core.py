"""POP's pure core: in-flight records, receipt handles and the table they live in.

Popping a message moves the group's pop offset for its queue at once and
leaves one in-flight record (``Inflight``): group, topic, queue, queue offset,
commit-log offset, the time the message becomes visible again, the delivery
attempt and a generation. Ack deletes the record; change-invisible moves its
visible time and bumps its generation; the revive loop takes the records whose
visible time has come (``PopTable.due``, a heap by visible time).

An orderly record (``Inflight.orderly``, a FIFO group's batch) is kept off the
revive heap: its queue's next pop delivers it again (``PopTable.orderly_batch``,
broker/service/pop_orderly.py), never the revive loop.

Every change is an *entry* (a small dict, ``pop_entry`` ... ``revive_entry``)
that the service appends to the log (broker/store/pop_log.py) and applies with
``PopTable.apply``: recovery is the same ``apply`` over the log, and a
checkpoint is ``PopTable.snapshot()`` (entries that rebuild the table).

Receipt handles (``HandleCodec``): ``1.<payload>.<mac>``, the payload naming
the broker, topic, queue, queue offset and generation, the mac an HMAC-SHA256
(16 bytes) over the group and the payload with a broker-local secret. A handle
is valid while its record exists with the same generation; an older
generation (the handle a change-invisible replaced) or a record that is gone
(acked, or revived) is ``INVALID_RECEIPT_HANDLE`` with a remark saying which;
a forged, foreign, too long or malformed handle is refused the same way
before any lookup. No time is read here: callers pass ``now_ms``.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

HANDLE_VERSION = "1"
MAX_HANDLE_LEN = 512  # longest accepted handle (a 127-char topic fits with room)
MAC_BYTES = 16
SEP = "\x1f"

Key = tuple[str, str, int, int]  # (group, topic, queue id, queue offset)
QueueKey = tuple[str, str, int]  # (group, topic, queue id)


class EntryError(ValueError):
    """A log entry that is not one this table wrote (corruption or misuse)."""


@dataclass(slots=True)
class Inflight:
    """One popped, un-acked message."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    visible_at_ms: int
    attempt: int  # delivery attempt, 1 on the first pop (reconsume times + 1)
    pop_time_ms: int
    gen: int = 0  # bumped by each change-invisible (and each orderly re-delivery)
    orderly: bool = False  # of an orderly batch: blocks its queue, never revived

    @property
    def key(self) -> Key:
        return (self.group, self.topic, self.queue_id, self.queue_offset)


@dataclass(frozen=True, slots=True)
class HandleRef:
    """What a verified handle names."""

    broker_name: str
    topic: str
    queue_id: int
    queue_offset: int
    gen: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


class HandleCodec:
    """Makes and checks receipt handles with a broker-local secret."""

    def __init__(self, secret: bytes, broker_name: str) -> None:
        if len(secret) < 16:
            raise ValueError("a handle secret needs at least 16 bytes")
        self._secret = secret
        self.broker_name = broker_name

    def _mac(self, group: str, payload: bytes) -> bytes:
        msg = group.encode("utf-8") + b"\x00" + payload
        return hmac.digest(self._secret, msg, "sha256")[:MAC_BYTES]  # one-shot: C fast path

    def encode(self, rec: Inflight) -> str:
        payload = SEP.join((self.broker_name, rec.topic, str(rec.queue_id),
                            str(rec.queue_offset), str(rec.gen))).encode("utf-8")
        return f"{HANDLE_VERSION}.{_b64(payload)}.{_b64(self._mac(rec.group, payload))}"

    def decode(self, handle: str, group: str) -> HandleRef | str:
        """The reference a handle of ``group`` names, or why it is refused."""
        if not isinstance(handle, str) or not handle:
            return "empty receipt handle"
        if len(handle) > MAX_HANDLE_LEN:
            return f"receipt handle longer than {MAX_HANDLE_LEN} characters"
        parts = handle.split(".")
        if len(parts) != 3 or parts[0] != HANDLE_VERSION:
            return "malformed receipt handle"
        try:
            payload = _unb64(parts[1])
            mac = _unb64(parts[2])
        except (binascii.Error, ValueError):
            return "malformed receipt handle"
        if not hmac.compare_digest(mac, self._mac(group, payload)):
            return "receipt handle not issued by this broker for this group"
        fields = payload.decode("utf-8", "replace").split(SEP)
        if len(fields) != 5:  # a handle we signed always has five: defensive only
            return "malformed receipt handle"
        broker, topic, queue_id, offset, gen = fields
        return HandleRef(broker, topic, int(queue_id), int(offset), int(gen))


# ---- entries (what the log holds) -------------------------------------------------------


def pop_entry(group: str, topic: str, queue_id: int, next_offset: int,
              records: Iterable[Inflight], orderly: bool = False) -> dict[str, Any]:
    """A pop: the queue's pop offset moves to ``next_offset`` and the records
    are in flight (one entry, so both or neither survive a crash). ``orderly``:
    the records are an orderly batch (``"ord": 1``; absent in older logs). An
    orderly re-delivery is a pop entry of the same offsets: it replaces them
    with their new attempt, visible time and generation."""
    entry = {"k": "pop", "g": group, "t": topic, "q": queue_id, "n": next_offset,
             "r": [[r.queue_offset, r.commit_log_offset, r.visible_at_ms, r.attempt,
                    r.pop_time_ms, r.gen] for r in records]}
    if orderly:
        entry["ord"] = 1
    return entry


def ack_entry(key: Key) -> dict[str, Any]:
    return {"k": "ack", "g": key[0], "t": key[1], "q": key[2], "o": key[3]}


def revive_entry(key: Key) -> dict[str, Any]:
    return {"k": "rev", "g": key[0], "t": key[1], "q": key[2], "o": key[3]}


def change_entry(key: Key, visible_at_ms: int, gen: int) -> dict[str, Any]:
    return {"k": "chg", "g": key[0], "t": key[1], "q": key[2], "o": key[3],
            "v": visible_at_ms, "gen": gen}


def _int(entry: dict[str, Any], name: str) -> int:
    value = entry.get(name)
    if type(value) is not int:
        raise EntryError(f"pop log entry field {name!r} is not an integer: {value!r}")
    return value


def _str(entry: dict[str, Any], name: str) -> str:
    value = entry.get(name)
    if not isinstance(value, str):
        raise EntryError(f"pop log entry field {name!r} is not a string: {value!r}")
    return value


class PopTable:
    """In-flight records and pop offsets; bounded per group and in total.

    ``apply`` is the only way state changes. The heap holds
    (visible_at, gen, key); a popped heap item whose record is gone or has a
    newer generation is stale and skipped (lazy deletion), and the heap is
    rebuilt when stale items outnumber live records."""

    def __init__(self, max_per_group: int, max_total: int) -> None:
        self.max_per_group = max_per_group
        self.max_total = max_total
        self.records: dict[Key, Inflight] = {}
        self.offsets: dict[QueueKey, int] = {}
        self.per_group: dict[str, int] = {}
        self._heap: list[tuple[int, int, Key]] = []
        self._queue_offsets: dict[QueueKey, list[int]] = {}  # in-flight offsets, a heap
        # offsets of each queue's orderly batch (records kept off the revive heap)
        self._orderly: dict[QueueKey, set[int]] = {}

    # -- reads --

    def __len__(self) -> int:
        return len(self.records)

    def room(self, group: str) -> int:
        """How many more records ``group`` may have in flight now."""
        return max(0, min(self.max_per_group - self.per_group.get(group, 0),
                          self.max_total - len(self.records)))

    def offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.offsets.get((group, topic, queue_id))

    def get(self, key: Key) -> Inflight | None:
        return self.records.get(key)

    def ack_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The queue's lowest offset still in flight, else its pop offset:
        every message below it is acked or revived (what the consumer offset
        table is told, so a master taking over without this table delivers
        the in-flight ones again rather than never)."""
        qk = (group, topic, queue_id)
        heap = self._queue_offsets.get(qk)
        while heap:
            if (group, topic, queue_id, heap[0]) in self.records:
                return heap[0]
            heapq.heappop(heap)
        if heap is not None:
            del self._queue_offsets[qk]
        return self.offsets.get(qk)

    def orderly_batch(self, group: str, topic: str, queue_id: int) -> list[Inflight]:
        """The queue's orderly batch still in flight (un-acked), by offset."""
        offsets = self._orderly.get((group, topic, queue_id))
        if not offsets:
            return []
        return [self.records[(group, topic, queue_id, o)] for o in sorted(offsets)]

    def due(self, now_ms: int, limit: int) -> list[Inflight]:
        """Up to ``limit`` records visible again at ``now_ms``, earliest first
        (they stay until a revive entry is applied)."""
        out: list[Inflight] = []
        heap = self._heap
        skipped: list[tuple[int, int, Key]] = []
        while heap and len(out) < limit and heap[0][0] <= now_ms:
            item = heapq.heappop(heap)
            rec = self.records.get(item[2])
            if rec is None or rec.gen != item[1] or rec.visible_at_ms != item[0]:
                continue  # stale
            out.append(rec)
            skipped.append(item)
        for item in skipped:  # still in flight until revived
            heapq.heappush(heap, item)
        return out

    def next_visible_ms(self) -> int | None:
        """The earliest live visible time (stale heap heads are dropped)."""
        heap = self._heap
        while heap:
            at, gen, key = heap[0]
            rec = self.records.get(key)
            if rec is not None and rec.gen == gen and rec.visible_at_ms == at:
                return at
            heapq.heappop(heap)
        return None

    def snapshot(self) -> list[dict[str, Any]]:
        """Entries that rebuild this table from nothing (a checkpoint)."""
        by_queue: dict[QueueKey, list[Inflight]] = {}
        orderly: dict[QueueKey, list[Inflight]] = {}
        for rec in self.records.values():
            into = orderly if rec.orderly else by_queue
            into.setdefault((rec.group, rec.topic, rec.queue_id), []).append(rec)
        out = []
        for qk, next_offset in self.offsets.items():
            out.append(pop_entry(qk[0], qk[1], qk[2], next_offset, by_queue.pop(qk, [])))
            if qk in orderly:
                out.append(pop_entry(qk[0], qk[1], qk[2], next_offset, orderly.pop(qk), True))
        for qk, recs in by_queue.items():  # records of a queue with no offset (not expected)
            out.append(pop_entry(qk[0], qk[1], qk[2], 0, recs))
        for qk, recs in orderly.items():
            out.append(pop_entry(qk[0], qk[1], qk[2], 0, recs, True))
        return out

    # -- the state machine --

    def apply(self, entry: dict[str, Any]) -> None:
        """Apply one entry; raises EntryError for one this table never wrote."""
        kind = entry.get("k")
        group, topic, queue_id = _str(entry, "g"), _str(entry, "t"), _int(entry, "q")
        if kind == "pop":
            qk = (group, topic, queue_id)
            next_offset = _int(entry, "n")
            if next_offset > self.offsets.get(qk, -1):
                self.offsets[qk] = next_offset
            rows = entry.get("r")
            if not isinstance(rows, list):
                raise EntryError("pop log entry without its records")
            orderly = entry.get("ord", 0)
            if type(orderly) is not int or orderly not in (0, 1):
                raise EntryError(f"pop log entry field 'ord' is not 0 or 1: {orderly!r}")
            for row in rows:
                if not (isinstance(row, list) and len(row) == 6
                        and all(type(v) is int for v in row)):
                    raise EntryError(f"bad in-flight record {row!r}")
                rec = Inflight(group, topic, queue_id, row[0], row[1], row[2], row[3],
                               row[4], row[5], orderly == 1)
                self._put(rec)
        elif kind in ("ack", "rev"):
            self._drop((group, topic, queue_id, _int(entry, "o")))
        elif kind == "chg":
            key = (group, topic, queue_id, _int(entry, "o"))
            moved = self.records.get(key)
            if moved is not None:
                moved.visible_at_ms = _int(entry, "v")
                moved.gen = _int(entry, "gen")
                self._push(moved)
        else:
            raise EntryError(f"unknown pop log entry kind {kind!r}")

    def _put(self, rec: Inflight) -> None:
        key = rec.key
        if key not in self.records:
            self.per_group[rec.group] = self.per_group.get(rec.group, 0) + 1
            heapq.heappush(self._queue_offsets.setdefault(key[:3], []), rec.queue_offset)
        self.records[key] = rec
        if rec.orderly:
            self._orderly.setdefault(key[:3], set()).add(rec.queue_offset)
        self._push(rec)

    def _drop(self, key: Key) -> None:
        rec = self.records.pop(key, None)
        if rec is not None:
            if rec.orderly:
                batch = self._orderly[key[:3]]
                batch.discard(key[3])
                if not batch:
                    del self._orderly[key[:3]]
            left = self.per_group[key[0]] - 1
            if left:
                self.per_group[key[0]] = left
            else:
                del self.per_group[key[0]]

    def _push(self, rec: Inflight) -> None:
        if rec.orderly:  # an orderly batch is re-delivered by pops, never revived
            return
        heapq.heappush(self._heap, (rec.visible_at_ms, rec.gen, rec.key))
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self.records):
            self._heap = [(r.visible_at_ms, r.gen, r.key) for r in self.records.values()
                          if not r.orderly]
            heapq.heapify(self._heap)
