"""The timer log and its checkpoint (synchronous files, no trio).

The timer log is an append-only sequence of 40-byte records (``wheel.RECORD``)
in segment files named by the index of their first record (20 digits) under
``<storePathRootDir>/timer/log/``. The checkpoint (``timer/checkpoint.json``,
replaced atomically) says:

- ``cqOffset``: how far the timer topic's consume queue has been moved into
  the log (every entry before it has its record);
- ``records``: how many records the log holds for that (records past it are
  a crash's torn or unconfirmed tail: cut off at load, made again from the
  consume queue);
- ``doneSlot``/``doneIndex``: the wheel's delivery cursor.

The log is fsynced before a checkpoint naming its records is written, so
every record a checkpoint counts is on disk. A segment whose records all lie
behind the cursor is deleted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.timer.wheel import RECORD_SIZE, TimerRecord, iter_records
from protocol.trio.files import write_atomically

SEGMENT_RECORDS = 1 << 20  # 40 MiB a segment


@dataclass(frozen=True, slots=True)
class TimerCheckpoint:
    cq_offset: int = 0
    records: int = 0
    done_slot: int = 0
    done_index: int = 0

    def encode(self) -> bytes:
        return json.dumps({"cqOffset": self.cq_offset, "records": self.records,
                           "doneSlot": self.done_slot, "doneIndex": self.done_index}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> TimerCheckpoint:
        """Raises ValueError for a file that is not a checkpoint."""
        try:
            data = json.loads(raw)
            values = [data[k] for k in ("cqOffset", "records", "doneSlot", "doneIndex")]
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"not a timer checkpoint: {exc}") from exc
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise ValueError(f"not a timer checkpoint: {values}")
        return cls(*values)


class TimerLog:
    def __init__(self, root: Path, segment_records: int = SEGMENT_RECORDS) -> None:
        self.dir = root / "log"
        self.checkpoint_path = root / "checkpoint.json"
        self.segment_records = segment_records
        self.records = 0  # the index the next record gets
        self.segments: dict[int, int] = {}  # first record index -> largest slot ms in it
        self._fd: int | None = None
        self._fd_start = -1
        self._unsynced: list[int] = []  # descriptors of segments written since the last sync

    def _path(self, start: int) -> Path:
        return self.dir / f"{start:020d}"

    # ---- load --------------------------------------------------------------------------

    def load(self) -> tuple[TimerCheckpoint, Iterator[tuple[int, int, int, int, int, int]]]:
        """The checkpoint (a zero one when there is none) and the records it
        counts that remain on disk, oldest first. Records past it are cut off.
        Raises ValueError for an unreadable checkpoint."""
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            cp = TimerCheckpoint.decode(self.checkpoint_path.read_bytes())
        except FileNotFoundError:
            cp = TimerCheckpoint()
        starts = sorted(int(p.name) for p in self.dir.iterdir() if p.name.isdigit())
        keep: list[int] = []
        for start in starts:
            path = self._path(start)
            if start >= cp.records:
                path.unlink()
                continue
            limit = (cp.records - start) * RECORD_SIZE
            if path.stat().st_size > limit:
                os.truncate(path, limit)
            keep.append(start)
        end = cp.records
        if keep:
            last = keep[-1]
            on_disk = self._path(last).stat().st_size // RECORD_SIZE
            if last + on_disk < cp.records:
                raise ValueError(f"timer log holds {last + on_disk} records, the checkpoint "
                                 f"counts {cp.records}")
        elif cp.records:
            # every segment went (all delivered): the next record still gets its number
            end = cp.records
        self.records = end
        for start in keep:
            self.segments[start] = -1
        return cp, self._read(keep)

    def _read(self, starts: list[int]) -> Iterator[tuple[int, int, int, int, int, int]]:
        for start in starts:
            data = self._path(start).read_bytes()
            top = -1
            for rec in iter_records(data):
                top = max(top, rec[0])
                yield rec
            self.segments[start] = top

    # ---- append ------------------------------------------------------------------------

    def append(self, records: list[TimerRecord]) -> None:
        """Write records at the end (page cache; ``sync`` makes them durable)."""
        i = 0
        while i < len(records):
            room = self.segment_records - (self.records % self.segment_records)
            chunk = records[i:i + room]
            start = self.records - self.records % self.segment_records
            fd = self._segment_fd(start)
            os.write(fd, b"".join(r.encode() for r in chunk))
            top = max(r.slot_ms for r in chunk)
            self.segments[start] = max(self.segments.get(start, -1), top)
            self.records += len(chunk)
            i += len(chunk)

    def _segment_fd(self, start: int) -> int:
        if self._fd is not None and self._fd_start == start:
            return self._fd
        if self._fd is not None:
            self._unsynced.append(self._fd)  # closed after its next sync
        self._fd = os.open(self._path(start), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._fd_start = start
        return self._fd

    def sync(self) -> None:
        """fsync what was written (blocking: call in a worker thread)."""
        old, self._unsynced = self._unsynced, []
        for done in old:
            os.fsync(done)
            os.close(done)
        current = self._fd
        if current is not None:
            os.fsync(current)

    def write_checkpoint(self, cp: TimerCheckpoint) -> None:
        """Sync the log, then replace the checkpoint (blocking)."""
        self.sync()
        write_atomically(self.checkpoint_path, cp.encode())

    def deletable(self, done_slot: int) -> list[Path]:
        """Segments (not the one written to) whose every record lies behind
        the cursor; forgotten here, to be unlinked by the caller."""
        out = []
        for start, top in list(self.segments.items()):
            if start != self._fd_start and start + self.segment_records <= self.records \
                    and 0 <= top < done_slot:
                del self.segments[start]
                out.append(self._path(start))
        return out

    def close(self) -> None:
        for fd in self._unsynced:
            os.close(fd)
        self._unsynced = []
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._fd_start = -1


__all__ = ["SEGMENT_RECORDS", "TimerCheckpoint", "TimerLog"]
