"""A store's identity and its log's epoch history: which writer wrote which bytes.

Replication must never splice two logs together. Offsets alone cannot tell a
slave that follows its master's log from one that holds another log of the
same length (a master whose disk was replaced, restarted empty, and took new
sends). So every store keeps, in ``epochs.json`` under its root:

- ``storeId``: made once, when the store is created (a replaced disk makes a
  new one);
- the epoch history: one entry per stretch of the log one master wrote, in
  offset order. An entry is (epoch, start offset, token, the writer's store
  id). A master begins a new epoch each time it starts taking writes (at its
  log's end); a slave copies its master's entries as the bytes they cover
  arrive. The token is random: two epochs never share one, so a store restored
  from an old copy cannot repeat an entry it once had.

Two logs hold the same bytes below offset ``n`` when their entries that start
below ``n`` are equal (only one writer ever writes an epoch) — and, as a second
check, when the bytes just before ``n`` have the same checksum. That is what
the HA handshake compares (``judge``): a master accepts a slave only when the
slave's log is a prefix of its own, and a master whose own log is a prefix of
a longer slave's (it lost data) is told so instead of taking writes over it.

The file is a JSON object with a CRC32 of its content, written temp + fsync +
rename (+ the directory's fsync) before the bytes it describes are written. A
damaged file falls back to its ``.bak``; with neither the store refuses to
load (``EpochFileError``) rather than guess its lineage.
"""

from __future__ import annotations

import json
import secrets
import zlib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from broker.persist import atomic_write_bytes
from broker.store.status import StoreError

EPOCH_FILE = "epochs.json"
MAX_EPOCHS = 512  # entries a peer may send (each master start adds one)
# entries a file may hold: a master that restarted more than MAX_EPOCHS times within
# its log's files still starts (its hellos, answers, are then refused, saying why)
MAX_FILE_EPOCHS = 100_000
TAIL_WINDOW = 4096  # bytes before an offset whose checksum the handshake compares
_TOKEN_HEX = 16


class EpochFileError(StoreError):
    """The epoch file is unreadable and so is its backup."""


@dataclass(frozen=True, slots=True)
class Epoch:
    epoch: int
    start: int  # commit-log offset of the epoch's first byte
    token: str  # random, unique to this epoch
    writer: str  # store id of the master that began it

    def to_wire(self) -> list[Any]:
        return [self.epoch, self.start, self.token, self.writer]

    def __str__(self) -> str:
        return f"epoch {self.epoch} from offset {self.start} (writer {self.writer[:8]})"


def epochs_from_wire(raw: Any, max_entries: int = MAX_EPOCHS) -> list[Epoch]:
    """Entries from a peer or a file; ValueError for anything malformed
    (wrong shapes, offsets going back, more than ``max_entries``)."""
    if not isinstance(raw, list):
        raise ValueError("epochs must be a list")
    if len(raw) > max_entries:
        raise ValueError(f"{len(raw)} epochs exceed {max_entries}")
    out: list[Epoch] = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 4):
            raise ValueError("an epoch is [epoch, start, token, writer]")
        epoch, start, token, writer = item
        if not (isinstance(epoch, int) and not isinstance(epoch, bool) and 0 < epoch < 2**62):
            raise ValueError(f"bad epoch number {epoch!r}")
        if not (isinstance(start, int) and not isinstance(start, bool) and 0 <= start < 2**63):
            raise ValueError(f"bad epoch start {start!r}")
        for name, value in (("token", token), ("writer", writer)):
            if not (isinstance(value, str) and 0 < len(value) <= 64 and value.isalnum()):
                raise ValueError(f"bad epoch {name} {value!r}")
        if out and (start < out[-1].start or epoch <= out[-1].epoch):
            raise ValueError("epochs must grow in number and start offset")
        out.append(Epoch(epoch, start, token, writer))
    return out


def extended(known: list[Epoch], entry: Epoch, max_entries: int = MAX_EPOCHS) -> list[Epoch]:
    """``known`` (a master's history as a slave knows it) after the master
    began ``entry`` at its log's end: as ``EpochHistory.begin`` does, entries
    from its start on (they describe no bytes) give way to it. ValueError
    unless it is numbered above every epoch known, or past ``max_entries``."""
    if known and entry.epoch <= known[-1].epoch:
        raise ValueError(f"{entry} is not numbered above {known[-1]}")
    kept = covering(known, entry.start)
    if len(kept) >= max_entries:
        raise ValueError(f"more than {max_entries} epochs")
    return [*kept, entry]


def begun_since(current: list[Epoch], known: list[Epoch]) -> list[Epoch] | None:
    """A master's side: the epochs of its history ``current`` begun since a
    slave was told ``known`` (the master's history as its answer sent it,
    maybe without the oldest entries): sent in order, ``extended`` makes the
    slave's ``known`` end as ``current`` does. None when no such epochs do
    (the slave must say hello again)."""
    if not known:
        return list(current)
    new = [e for e in current if e.epoch > known[-1].epoch]
    told = known
    try:
        for e in new:
            told = extended(told, e, MAX_FILE_EPOCHS)
    except ValueError:
        return None
    n = min(len(told), len(current))
    return new if told[len(told) - n:] == current[len(current) - n:] else None


def covering(epochs: list[Epoch], end: int) -> list[Epoch]:
    """The entries that describe bytes below ``end``."""
    return [e for e in epochs if e.start < end]


def live(epochs: list[Epoch], floor: int) -> list[Epoch]:
    """The entries that describe bytes from ``floor`` on (a log whose files
    below ``floor`` are gone needs no older ones): from the last that starts
    at or below it."""
    first = 0
    for i, e in enumerate(epochs):
        if e.start <= floor:
            first = i
    return epochs[first:]


def lineage_problem(mine: list[Epoch], theirs: list[Epoch], upto: int,
                    floor: int = 0) -> str | None:
    """Why two logs cannot hold the same bytes in [floor, upto) (None: they
    can). ``floor``: below it neither log holds bytes any more."""
    a, b = live(covering(mine, upto), floor), live(covering(theirs, upto), floor)
    if a == b:
        return None
    for x, y in zip(a, b, strict=False):
        if x != y:
            return f"below offset {upto} one log has {x}, the other {y}"
    longer, other = (a, "one") if len(a) > len(b) else (b, "the other")
    extra = longer[min(len(a), len(b))]
    return f"below offset {upto} {other} log has {extra} that the other lacks"


@dataclass(frozen=True, slots=True)
class CommonPoint:
    """Where a replica's log and a new master's part (``common_point``)."""

    offset: int | None  # the largest offset below which both hold the same bytes
    reason: str = ""  # why there is none (offset None)


def common_point(mine: list[Epoch], my_min: int, my_end: int,
                 theirs: list[Epoch], their_min: int, their_end: int) -> CommonPoint:
    """The last point two logs share (pure; KIP-101's idea): the end of the
    last epoch both histories hold, in the log where it ends first. Entries
    are aligned at the first one both hold (older ones may have been dropped
    from one history with the files they described); from there they must
    agree entry by entry. None when they share no epoch, or when the point
    lies below what either log still holds."""
    if my_end <= my_min:
        return CommonPoint(my_end)  # nothing to cut
    a = live(covering(mine, my_end), my_min)
    b = live(covering(theirs, their_end), their_min)
    first = next(((i, b.index(e)) for i, e in enumerate(a) if e in b), None)
    if first is None:
        return CommonPoint(None, "the logs share no epoch: this replica's log "
                                 "(epochs " + (", ".join(str(e) for e in a[-3:]) or "unknown")
                           + ") holds nothing of the master's")
    i, j = first
    while i + 1 < len(a) and j + 1 < len(b) and a[i + 1] == b[j + 1]:
        i, j = i + 1, j + 1
    mine_to = a[i + 1].start if i + 1 < len(a) else my_end
    theirs_to = b[j + 1].start if j + 1 < len(b) else their_end
    point = min(mine_to, theirs_to, my_end)
    floor = max(my_min, their_min)
    if point < floor:
        return CommonPoint(None, f"the last point the logs share, offset {point}, is below "
                                 f"what both still hold (from offset {floor})")
    return CommonPoint(point)


class EpochHistory:
    """A store's ``epochs.json``: its id and its epoch history (see above)."""

    def __init__(self, root: Path) -> None:
        self.path = root / EPOCH_FILE
        self.store_id = ""
        self.entries: list[Epoch] = []
        self.created = False  # made by this load (no file before)

    # ---- file ------------------------------------------------------------------------

    def load(self) -> None:
        """Read the file (or its .bak); without either, a new identity with no
        history (a new store, or one from before epochs were kept: its
        lineage is unknown until it writes or follows a master)."""
        found = False
        problems: list[str] = []
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                data = candidate.read_bytes()
            except FileNotFoundError:
                continue
            found = True
            try:
                self.store_id, self.entries = _decode(data)
                return
            except ValueError as exc:
                problems.append(f"{candidate}: {exc}")
        if found:
            raise EpochFileError(
                "the store's epoch file is damaged and so is its backup ("
                + "; ".join(problems) + "): restore it, or move it away to start the store "
                "with an unknown lineage (its slaves and master then compare the log's "
                "last bytes only)")
        self.store_id = secrets.token_hex(16)
        self.entries = []
        self.created = True
        self.write()

    def write(self) -> None:
        atomic_write_bytes(self.path, _encode(self.store_id, self.entries))

    # ---- history ---------------------------------------------------------------------

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def begin(self, start: int, at_least: int = 0, min_offset: int = 0) -> Epoch:
        """A new epoch of this store's writes from ``start`` (the log's end),
        numbered above every epoch known (``at_least`` too); entries from
        ``start`` on describe no bytes and are dropped, and so are those wholly
        below ``min_offset`` (the log's oldest byte). Written before it returns."""
        kept = live(covering(self.entries, start), min_offset)
        number = max(self.last_epoch, at_least) + 1
        epoch = Epoch(number, start, secrets.token_hex(_TOKEN_HEX // 2), self.store_id)
        self.entries = [*kept, epoch]
        self.write()
        return epoch

    def follow(self, master: list[Epoch], end: int, min_offset: int = 0) -> bool:
        """Before bytes up to ``end`` from a master arrive: this history below
        ``end`` becomes the master's (the caller has checked they agree below
        the log's current end), without entries wholly below ``min_offset``.
        Written when it changed; True then."""
        wanted = live(covering(master, end), min_offset)
        if wanted == self.entries:
            return False
        self.entries = wanted
        self.write()
        return True

    def truncate(self, end: int) -> bool:
        """The log is cut at ``end``: entries that start at or past it go.
        Written when it changed; True then."""
        kept = covering(self.entries, end)
        if kept == self.entries:
            return False
        self.entries = kept
        self.write()
        return True

    def to_wire(self) -> list[list[Any]]:
        return [e.to_wire() for e in self.entries]


def _encode(store_id: str, entries: list[Epoch]) -> bytes:
    body = {"storeId": store_id, "epochs": [e.to_wire() for e in entries]}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return json.dumps({**body, "crc": zlib.crc32(text.encode())}, indent=1).encode()


def _decode(data: bytes) -> tuple[str, list[Epoch]]:
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    store_id, raw = obj.get("storeId"), obj.get("epochs")
    text = json.dumps({"storeId": store_id, "epochs": raw}, sort_keys=True,
                      separators=(",", ":"))
    if obj.get("crc") != zlib.crc32(text.encode()):
        raise ValueError("checksum mismatch")
    if not (isinstance(store_id, str) and store_id.isalnum() and 0 < len(store_id) <= 64):
        raise ValueError("bad storeId")
    return store_id, epochs_from_wire(raw, MAX_FILE_EPOCHS)


# ---- the handshake's judgement ---------------------------------------------------------


class Verdict(Enum):
    ACCEPT = "accept"  # the slave's log is a prefix of the master's: stream from its end
    DIVERGED = "diverged"  # the logs differ below the shorter one's end
    MASTER_BEHIND = "master-behind"  # the master's log is a prefix of the longer slave's
    TOO_OLD = "too-old"  # the slave ends below the master's oldest byte


@dataclass(frozen=True, slots=True)
class LogView:
    """What one side tells the other of its log."""

    store_id: str
    epochs: list[Epoch]
    min_offset: int
    max_offset: int
    tail: tuple[int, int] | None  # (from, crc32 of the bytes from there to max_offset)

    @property
    def empty(self) -> bool:
        return self.max_offset <= self.min_offset


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    reason: str = ""
    start: int = 0  # ACCEPT: the first byte to send


def judge(master: LogView, slave: LogView, master_crc: Any) -> Judgement:
    """The master's decision on a slave (pure). ``master_crc(start, end)`` is
    the CRC32 of the master's bytes in [start, end), or None when it no longer
    holds them all."""
    s, m = slave.max_offset, master.max_offset
    if s == 0:
        return Judgement(Verdict.ACCEPT, start=master.min_offset)
    floor = max(master.min_offset, slave.min_offset)  # below it neither holds bytes
    if s <= m:
        problem = lineage_problem(master.epochs, slave.epochs, s, floor)
        if problem is None and slave.tail is not None:
            start, crc = slave.tail
            mine = master_crc(start, s) if start >= master.min_offset else None
            if mine is not None and mine != crc:
                problem = (f"the bytes before offset {s} differ (checksum of [{start}, {s}): "
                           f"slave {crc:#010x}, master {mine:#010x})")
        if problem is not None:
            return Judgement(Verdict.DIVERGED,
                             f"the slave's log is not a prefix of the master's: {problem}")
        if s < master.min_offset:
            return Judgement(Verdict.TOO_OLD,
                             f"slave too far behind: it ends at offset {s}, the master's oldest "
                             f"file starts at {master.min_offset}")
        return Judgement(Verdict.ACCEPT, start=s)
    problem = lineage_problem(master.epochs, slave.epochs, m, floor)
    if problem is not None:
        return Judgement(Verdict.DIVERGED, f"the logs differ: {problem}")
    return Judgement(
        Verdict.MASTER_BEHIND,
        f"slave log longer than master: the slave holds {s - m} bytes past the master's end "
        f"{m} (offset {s}); the master lost data. Restore the master from the slave "
        "(recoverFromSlave=true) or discard the slave's log (haDiscardLog=true on the slave)")


def tail_of(max_offset: int, file_start: int, read: Any) -> tuple[int, int] | None:
    """(from, crc32) of up to TAIL_WINDOW bytes ending at ``max_offset``,
    within the commit-log file that starts at ``file_start`` and holds the
    byte before it; ``read(start, n)`` gives the bytes (or None)."""
    start = max(max_offset - TAIL_WINDOW, file_start)
    if start >= max_offset:
        return None
    data = read(start, max_offset - start)
    if data is None or len(data) != max_offset - start:
        return None
    return start, zlib.crc32(data)
