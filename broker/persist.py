"""Atomic JSON persistence for the broker's managers (ConfigManager in RocketMQ).

Write a temp file, fsync it, keep the previous file as ``.bak``, rename the
temp file into place, fsync the directory. Loading falls back to ``.bak`` when
the main file is missing or unreadable.

A manager's table is mutated by the event loop; it is never iterated by a
worker thread. The loop takes a ``ConfigSnapshot`` (a copy that shares nothing
mutable with the table) and the worker thread serialises and writes that.

A table too large to rewrite on every change (the topics) keeps a journal
beside its snapshot file: ``TableJournal`` appends one record per change
(``<file>.journal``; length, crc32, JSON), one write and one fsync for every
record waiting (``JournalBatch``: group commit), and a compaction
(``JournaledSnapshot``) writes the whole table atomically as above, then
starts the journal afresh. Records carry a sequence number and the snapshot
the number of the last change it holds, so loading is snapshot + the records
after it, and a crash between any two steps of a compaction loses nothing:

1. ``<file>.tmp`` written and fsynced: the old snapshot and the journal hold
   everything;
2. the old snapshot renamed to ``<file>.bak``, the new one into place, the
   directory fsynced: the new snapshot holds every record of the journal
   (they are skipped by their numbers);
3. the journal renamed to ``<file>.journal.bak``: the records after the
   ``.bak`` snapshot stay readable should the new snapshot ever be unreadable.

A torn last record (a crash during an append) and anything after it is not
replayed, and is cut off before the next append.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

from protocol.trio.files import fsync_dir

log = structlog.get_logger("broker.persist")


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True).encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data``: temp file, fsync, previous file kept as
    ``.bak``, rename, directory fsync."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if path.exists():
        bak = path.with_name(path.name + ".bak")
        os.replace(path, bak)
    os.replace(tmp, path)
    fsync_dir(path.parent)


@dataclass(frozen=True, slots=True)
class ConfigSnapshot:
    """A table copied on the event loop, written from anywhere.

    ``data`` holds no object the loop mutates after the snapshot (immutable
    values may be shared); ``render`` turns it into the JSON document in the
    writer's thread, so the loop only pays for the copy.
    """

    path: Path
    data: Any
    render: Callable[[Any], Any] | None = None

    def write(self) -> None:
        atomic_write_json(self.path, self.data if self.render is None else self.render(self.data))


class SnapshotTable(Protocol):
    """A manager whose table is written from snapshots (a ``dirty`` flag)."""

    dirty: bool

    def snapshot(self, force: bool = False) -> ConfigSnapshot | None: ...


def write_snapshot_now(table: SnapshotTable, force: bool = False) -> None:
    """Snapshot ``table`` and write it in the caller's thread (tests, shutdown);
    a failed write leaves it dirty for the next try."""
    snap = table.snapshot(force)
    if snap is None:
        return
    try:
        snap.write()
    except BaseException:
        table.dirty = True
        raise


def load_json(path: Path) -> Any | None:
    """The file's content, or its ``.bak``'s, or None when neither is readable."""
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            return json.loads(candidate.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            log.warning("config file unreadable, trying backup", path=str(candidate), error=str(exc))
    return None


# ---- journal ---------------------------------------------------------------

JOURNAL_HEADER = struct.Struct(">II")  # payload length, crc32 of the payload
JOURNAL_RECORD_MAX = 1 << 20  # a longer declared length is a torn or corrupt record
# A compaction is due once a journal holds this many records and more than its table.
COMPACT_MIN_RECORDS = 10_000


def encode_journal_record(obj: Any) -> bytes:
    """One journal record: length, crc32, compact JSON."""
    payload = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
    return JOURNAL_HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def decode_journal(data: bytes) -> tuple[list[Any], int]:
    """The whole records at the start of ``data`` and where they end. Reading
    stops at the first record that is torn (cut short), fails its crc or is
    not JSON: it and whatever follows are not records."""
    out: list[Any] = []
    pos, end = 0, len(data)
    head = JOURNAL_HEADER.size
    while pos + head <= end:
        n, crc = JOURNAL_HEADER.unpack_from(data, pos)
        if n == 0 or n > JOURNAL_RECORD_MAX or pos + head + n > end:
            break
        payload = data[pos + head:pos + head + n]
        if zlib.crc32(payload) != crc:
            break
        try:
            obj = json.loads(payload)
        except ValueError:
            break
        out.append(obj)
        pos += head + n
    return out, pos


class TableJournal:
    """The append-only journal beside a snapshot file. Synchronous file work:
    call it from one worker thread at a time (the broker's topic persist task
    serialises it), never from the event loop."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bak = path.with_name(path.name + ".bak")
        self.records = 0  # records in the current file
        self.broken = False  # an append failed and could not be undone: compact next
        self._created = False  # the file exists and its directory entry is durable

    def recover(self) -> list[Any]:
        """Every whole record, ``.bak``'s first; a torn tail of the journal is
        cut off (and logged) so the next append follows the last whole record."""
        out: list[Any] = []
        for path in (self.bak, self.path):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            records, end = decode_journal(data)
            out.extend(records)
            if path is self.path:
                self.records = len(records)
                self._created = True
                if end < len(data):
                    log.warning("torn journal tail ignored", path=str(path), records=len(records),
                                dropped_bytes=len(data) - end)
                    with open(path, "r+b") as f:
                        f.truncate(end)
                        os.fsync(f.fileno())
        return out

    def append(self, data: bytes, count: int) -> None:
        """Append ``count`` encoded records and fsync: durable on return. A
        failed append is undone (the file cut back), or the journal is marked
        ``broken`` so that the next write is a compaction."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as f:
            start = f.tell()
            try:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            except BaseException:
                try:
                    f.truncate(start)
                except OSError:
                    self.broken = True
                raise
        if not self._created:
            fsync_dir(self.path.parent)
            self._created = True
        self.records += count

    def rotate(self) -> None:
        """After a snapshot holding every record: the journal becomes ``.bak``,
        the next append starts a new one."""
        if self.path.exists():
            os.replace(self.path, self.bak)
            fsync_dir(self.path.parent)
        self.records = 0
        self.broken = False
        self._created = False


@dataclass(frozen=True, slots=True)
class JournalBatch:
    """Records waiting for the journal, taken on the event loop: ``seqs`` are
    their change numbers, ``data`` their encoded bytes; one write, one fsync."""

    journal: TableJournal
    seqs: list[int]
    data: bytes

    @property
    def seq(self) -> int:
        """The last change number it makes durable."""
        return self.seqs[-1]

    def write(self) -> None:
        self.journal.append(self.data, len(self.seqs))


@dataclass(frozen=True, slots=True)
class JournaledSnapshot(ConfigSnapshot):
    """A compaction: the whole table (``data``, copied on the event loop,
    turned into the file's bytes by ``render`` in the writer's thread)
    replaces the snapshot file, then the journal starts afresh. Holds every
    change up to ``seq``."""

    journal: TableJournal | None = None
    seq: int = 0

    def write(self) -> None:
        assert self.render is not None
        atomic_write_bytes(self.path, self.render(self.data))
        if self.journal is not None:
            self.journal.rotate()


TableWrite = JournalBatch | JournaledSnapshot


class JournaledTable:
    """The journal bookkeeping a table kept as snapshot + journal shares (the
    topics, the subscription groups): every change gets a number (``seq``)
    and an encoded record waiting in ``_pending``; the broker's journal writer
    (broker/journal_writer.py) takes what waits (``next_write``: one append
    and one fsync for every record, or a compaction), writes it in a worker
    thread and reports it (``written``): ``durable_seq`` says which changes
    are on disk. A subclass says what a record and the whole table are:
    ``table_size`` and ``snapshot_data`` (the table copied on the event loop
    and the function turning it into the file's bytes, with ``seq`` as its
    ``journalSeq``). Methods run on the event loop unless they say otherwise."""

    path: Path
    journal: TableJournal

    def _init_journal(self, path: Path) -> None:
        self.path = path
        self.journal = TableJournal(path.with_name(path.name + ".journal"))
        self.seq = 0  # the number of the latest change
        self.durable_seq = 0  # every change up to this number is on disk
        # changes not yet handed to a writer (set with every change, cleared when taken)
        self.dirty = False
        self._pending: list[tuple[int, bytes]] = []  # (seq, encoded journal record)
        self._snapshot_due = False  # the next write must be a whole-table snapshot
        # called when a change waits to be written (the broker wakes its writer)
        self.on_dirty: Callable[[], None] = lambda: None

    def table_size(self) -> int:
        raise NotImplementedError

    def snapshot_data(self) -> tuple[Any, Callable[[Any], bytes]]:
        """The whole table, copied (sharing nothing the loop mutates), and its renderer."""
        raise NotImplementedError

    def _journal_record(self, rec: dict[str, Any]) -> int:
        """Number a change (``rec`` gets its ``seq``), queue its record, wake the writer."""
        self.seq += 1
        rec["seq"] = self.seq
        self._pending.append((self.seq, encode_journal_record(rec)))
        self.dirty = True
        self.on_dirty()
        return self.seq

    def _whole_table_due(self) -> int:
        """The next write is the whole table (many changes at once): its number."""
        self.seq += 1
        self._pending.clear()
        self._snapshot_due = True
        self.dirty = True
        self.on_dirty()
        return self.seq

    def replay(self, base_seq: int, apply: Callable[[dict[str, Any]], None]) -> int:
        """At load (a worker thread): the journal's records after the snapshot's
        ``base_seq``, in order, to ``apply``; the numbers continue after the
        last one. Returns how many were replayed."""
        applied, replayed = base_seq, 0
        for rec in self.journal.recover():
            seq = rec.get("seq") if isinstance(rec, dict) else None
            if type(seq) is not int or seq <= applied:
                continue
            assert isinstance(rec, dict)
            apply(rec)
            applied, replayed = seq, replayed + 1
        self.seq = self.durable_seq = applied
        return replayed

    def compact_min_records(self) -> int:
        return COMPACT_MIN_RECORDS

    def compaction_due(self) -> bool:
        records = self.journal.records + len(self._pending)
        return records >= self.compact_min_records() and records > self.table_size()

    def journaled_snapshot(self, force: bool = True) -> JournaledSnapshot | None:
        """The whole table to write, holding every change so far; None when
        nothing waits and ``force`` is off."""
        if not (force or self.dirty):
            return None
        self.dirty = False
        self._pending.clear()  # the snapshot holds them
        self._snapshot_due = False
        data, render = self.snapshot_data()
        return JournaledSnapshot(self.path, data, render, self.journal, self.seq)

    def next_write(self) -> TableWrite | None:
        """What the writer writes next, in a worker thread: every record
        waiting (one append, one fsync), or a compaction when one is due; None
        when everything is on disk."""
        if self._snapshot_due or self.journal.broken or (self.dirty and self.compaction_due()):
            return self.journaled_snapshot()
        if self._pending:
            batch = JournalBatch(self.journal, [s for s, _ in self._pending],
                                 b"".join(r for _, r in self._pending))
            self._pending = []
            self.dirty = False
            return batch
        if self.dirty:  # e.g. a snapshot written elsewhere failed: its changes left _pending
            return self.journaled_snapshot()
        return None

    def written(self, work: TableWrite) -> None:
        """``work`` is on disk."""
        if work.seq > self.durable_seq:
            self.durable_seq = work.seq

    def write_failed(self, work: TableWrite) -> None:
        """``work`` did not reach the disk; its changes are written again, as a
        snapshot (which also replaces a journal left torn)."""
        self._snapshot_due = True
        self.dirty = True

    def persist(self) -> None:
        """Write the whole table now, in the caller's thread (fsync: durable on
        return). Not while the writer runs (tools, tests, shutdown)."""
        snap = self.journaled_snapshot()
        assert snap is not None
        snap.write()
        self.written(snap)
