"""IndexService: keys ``topic#key`` for every KEYS entry and UNIQ_KEY, across index files.

A record counts as indexed only once all its keys are in: when a new index
file cannot be allocated the dispatch raises and a later one (the store's
reput) indexes the record again (a key added twice is found once).

The next index file is made ahead of need (``prepare_next``, in a worker
thread: at load, and once a dispatch leaves the last file half full, by the
broker's task woken through ``on_wants_next``, else by the next consume-queue
flush), so the dispatch, which runs on the event loop, only takes it. Making
one (a 420 MB file and 20 MB of slots in memory) took 40-50 ms on the loop
of a new broker, and every request waited behind it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from broker.store.allocation import LogThrottle, remove_stale_allocations
from broker.store.commit_log import DispatchRequest
from broker.store.dispatch import compiled_dispatch_kernel
from broker.store.index_file import IndexFile, index_file_name
from broker.store.status import StoreError
from protocol.crc import crc32
from protocol.record import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)

log = structlog.get_logger("store.index")


_NOTHING = object()  # no topic seen yet


def index_hashes_loop(requests: list[DispatchRequest], indexed_to: int,
                      ) -> tuple[list[tuple[int, int, int]], int]:
    """(hash, commit-log offset, store ms) of each key of ``requests`` to
    index, and the highest commit-log offset seen: records at or below
    ``indexed_to`` are skipped (a replay), prepared and rolled-back
    transaction records have no keys. The reference for
    ``batch_records_kernel.index_hashes``, which the broker runs where it is built.

    A key's hash is ``key_hash("topic#key")``, made as the CRC of the key
    continuing from the CRC of "topic#" (a batch's requests share a topic:
    its CRC made once), so no "topic#key" string is built."""
    hashed: list[tuple[int, int, int]] = []
    add = hashed.append
    topic: object = _NOTHING  # the last topic seen, and the CRC of "topic#"
    topic_crc = 0
    for req in requests:
        req_topic, _, phy, _, _, ts, _, keys, uniq_key, sys_flag = req
        if phy <= indexed_to:
            continue  # already indexed (re-dispatch after recovery)
        tx = sys_flag & TRANSACTION_TYPE_MASK
        if tx != TRANSACTION_PREPARED_TYPE and tx != TRANSACTION_ROLLBACK_TYPE:
            if req_topic is not topic:
                topic = req_topic
                topic_crc = crc32(f"{req_topic}#".encode())
            if keys:
                for key in keys.split(" "):
                    if key:
                        add((crc32(key.encode(), topic_crc) & 0x7FFFFFFF, phy, ts))
            if uniq_key:
                add((crc32(uniq_key.encode(), topic_crc) & 0x7FFFFFFF, phy, ts))
        indexed_to = phy
    return hashed, indexed_to


def _half_full(f: IndexFile) -> bool:
    """Whether ``f`` holds half its entries or more: time to make the next file."""
    return 2 * f.index_count >= f.index_num


def _name_after(now_ms: int, files: list[IndexFile]) -> str:
    """The name of a file made at ``now_ms``, moved on a ms at a time until it
    sorts after the last of ``files`` (names are creation times)."""
    name = index_file_name(now_ms)
    while files and name <= files[-1].path.name:
        now_ms += 1
        name = index_file_name(now_ms)
    return name


class IndexService:
    def __init__(self, store_dir: Path, hash_slot_num: int = 5_000_000,
                 index_num: int = 20_000_000) -> None:
        self.store_dir = store_dir
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        # the next file, made ahead of need by prepare_next (a worker thread);
        # taken by _writable on the loop. Both under _next_lock.
        self._next: IndexFile | None = None
        self._next_lock = threading.Lock()
        self._preparing = False
        self._closed = False
        self._prepare_failed = LogThrottle()
        # called (on the loop) when a dispatch leaves the last file half full
        # with none made ahead: the broker then runs prepare_next in a thread
        self.on_wants_next: Callable[[], None] | None = None
        self._indexed_to = -1  # highest commit-log offset indexed: replays are skipped
        # batch_records_kernel.index_hashes compiled, or None: index_hashes_loop
        self.hash_kernel: Callable[..., tuple[list[tuple[int, int, int]], int] | None] | None = \
            compiled_dispatch_kernel("index_hashes")

    def load(self) -> None:
        if not self.store_dir.exists():
            return
        remove_stale_allocations(self.store_dir)
        for path in sorted(p for p in self.store_dir.iterdir() if p.name.isascii() and p.name.isdigit()):
            self.files.append(IndexFile(path, self.hash_slot_num, self.index_num))
        self._indexed_to = self.max_phy_offset if self.max_phy_offset or self._has_entries() else -1

    def _has_entries(self) -> bool:
        return any(f.index_count > 1 for f in self.files)

    def _writable(self, now_ms: int) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full():
            if not last.file.allocated:  # an older broker's file may be sparse
                last.file.ensure_allocated()
            return last
        with self._next_lock:
            ready, self._next = self._next, None
        if ready is not None:
            if last is None or ready.path.name > last.path.name:
                self.files.append(ready)
                return ready
            ready.destroy()  # named before the last file (the clock went back): made anew
        f = IndexFile(self.store_dir / _name_after(now_ms, self.files), self.hash_slot_num,
                      self.index_num)
        self.files.append(f)
        return f

    @property
    def next_ready(self) -> bool:
        """Whether the next index file has been made ahead (``prepare_next``)."""
        return self._next is not None

    def wants_next_file(self) -> bool:
        """Whether ``prepare_next`` has a file to make: none is made ahead yet,
        and there is no file, or the last is half full or more."""
        if self._next is not None or self._preparing or self._closed:
            return False
        files = list(self.files)  # one C call: safe while the loop appends
        return not files or _half_full(files[-1])

    def prepare_next(self, now_ms: int | None = None) -> bool:
        """Make the next index file ahead of need when ``wants_next_file``
        (blocking: run it in a worker thread). True when one was made. A
        failure (disk full) is logged, at most every 10 s, and left for the
        dispatch to meet, which makes the file itself then."""
        with self._next_lock:
            if not self.wants_next_file():
                return False
            self._preparing = True
            files = list(self.files)
        try:
            name = _name_after(int(time.time() * 1000) if now_ms is None else now_ms, files)
            try:
                made = IndexFile(self.store_dir / name, self.hash_slot_num, self.index_num)
            except (StoreError, OSError) as exc:  # AllocationError is a StoreError
                self._prepare_failed(log, "cannot make the next index file ahead",
                                     level="warning", dir=str(self.store_dir), error=str(exc))
                return False
            with self._next_lock:
                if not self._closed and self._next is None:
                    self._next = made
                    return True
            made.destroy()  # closed meanwhile
            return False
        finally:
            with self._next_lock:
                self._preparing = False

    def dispatch(self, req: DispatchRequest) -> None:
        self.dispatch_batch([req])

    def dispatch_batch(self, requests: list[DispatchRequest]) -> None:
        """Index the keys of each request (prepared and rolled-back transaction
        records have none), written in one pass per index file. A record counts
        as indexed once all keys of the batch are in (see the module's note).
        The keys' hashes: ``index_hashes_loop``, or its compiled twin."""
        kernel = self.hash_kernel
        got = None if kernel is None else kernel(requests, self._indexed_to, crc32)
        hashed, indexed_to = got or index_hashes_loop(requests, self._indexed_to)
        done = 0
        while done < len(hashed):  # _writable gives a file with room: each pass adds some
            done += self._writable(hashed[done][2]).put_hashes(hashed[done:] if done else hashed)
        self._indexed_to = indexed_to
        wants = self.on_wants_next
        if wants is not None and self._next is None and not self._preparing \
                and self.files and _half_full(self.files[-1]):
            wants()

    def query_offset(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Commit-log offsets of ``topic#key``, newest first, at most ``max_num``."""
        out: list[int] = []
        full_key = f"{topic}#{key}"
        for f in reversed(self.files):
            if len(out) >= max_num:
                break
            if f.index_count > 1 and f.is_time_matched(begin_ms, end_ms):
                for phy in f.select_phy_offsets(full_key, max_num, begin_ms, end_ms):
                    if phy not in out and len(out) < max_num:
                        out.append(phy)
        return out

    @property
    def max_phy_offset(self) -> int:
        for f in reversed(self.files):
            if f.index_count > 1:
                return f.end_phy_offset
        return 0

    def truncate(self, phy_offset: int) -> None:
        """Drop index files that start at or past ``phy_offset`` (recovery)."""
        while self.files and self.files[-1].index_count > 1 and self.files[-1].begin_phy_offset >= phy_offset:
            self.files.pop().destroy()
        # entries of a kept file past the end point at nothing; queries verify offsets
        self._indexed_to = min(self._indexed_to, phy_offset - 1)

    def delete_expired(self, min_phy_offset: int) -> int:
        """Drop files whose entries all point below the commit log's min offset."""
        deleted = 0
        while len(self.files) > 1 and self.files[0].end_phy_offset < min_phy_offset:
            self.files.pop(0).destroy()
            deleted += 1
        return deleted

    def flush(self) -> None:
        for f in list(self.files):
            f.flush()

    def close(self) -> None:
        with self._next_lock:
            self._closed = True
            ready, self._next = self._next, None
        if ready is not None:
            ready.destroy()  # never used: no empty file is left behind
        for f in self.files:
            f.close()
