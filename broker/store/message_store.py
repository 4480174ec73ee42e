"""DefaultMessageStore: the storage engine the broker talks to.

Synchronous and free of trio: the broker calls ``put_message`` and
``get_message`` from its event loop and runs the blocking ``flush_*`` methods
in worker threads.

Dispatch (consume queues, index, long-poll wake-ups) follows a cursor,
``reput_offset``: every commit-log byte before it is dispatched. A put
dispatches its own records and moves the cursor; when that fails (no space
for a consume-queue or index file) the put is still acknowledged (its record
is in the commit log) and further puts are refused with a status until
``reput`` dispatches everything from the cursor, which the next put and
``check_disk`` try. Recovery dispatches through the same cursor and never
stops at a record a client could have written (an invalid topic is logged
and skipped).

A put may leave its dispatch for later (``defer=True``): the send processor
answers the producer first and runs ``dispatch_deferred`` after. An answer
given at once is written, and the dispatch run, before the connection handles
another frame or yields to any other task; an answer that waits for an fsync
or a slave dispatches when it is sent, and until then the records are in the
commit log only (a pull does not see them yet). Every put and ``reput`` runs
what is deferred first, so at most one put's dispatch waits.
"""

from __future__ import annotations

import itertools
import os
import shutil
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import structlog

from broker.persist import fsync_dir
from broker.store import writeback
from broker.store.allocation import AllocationError, DiskFullError, LogThrottle
from broker.store.commit_log import (
    SCHEDULE_TOPIC,
    CommitLog,
    DispatchRequest,
    MessageExtBrokerInner,
)
from broker.store.config import StoreConfig
from broker.store.consume_queue import CQ_ENTRY, ConsumeQueue, InvalidQueueError, queue_problem
from broker.store.dispatch import CommitLogDispatcher, CommitLogDispatcherBuildConsumeQueue
from broker.store.ha.confirm import ConfirmFile
from broker.store.ha.epochs import EpochHistory, LogView, live, tail_of
from broker.store.ha.truncation import TruncationMarker
from broker.store.index_service import IndexService
from broker.store.mapped_file import MappedFile
from broker.store.memory_ratio import TOTAL_PHYSICAL_MEMORY_SIZE, in_disk, memory_budget
from broker.store.queue_cleanup import QueueFacts
from broker.store.replica_dispatch import MAX_RECORDS, Scan, compiled_scan, scan_loop
from broker.store.status import (
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    StoreError,
)
from broker.store.store_checkpoint import StoreCheckpoint
from broker.store.store_lock import StoreLock
from broker.store.writeback import SyncRange, write_behind_range
from protocol.crc import crc32
from protocol.errors import CorruptRecordError
from protocol.hashing import tags_hash_code
from protocol.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, MessageExt
from protocol.names import shown, topic_problem
from protocol.record import (
    BLANK_HEAD,
    BLANK_MAGIC_CODE,
    BLANK_MIN_SIZE,
    MESSAGE_MAGIC_CODE,
    OFF_BODY_CRC,
    OFF_BODY_LEN,
    OFF_STORE_TIMESTAMP,
    RECORD_HEAD_SIZE,
    RECORDS_KERNEL_MODULE,
    RECORDS_KERNEL_SOURCE,
    Buffer,
    RecordStatus,
    check_record,
    check_run,
    decode_record,
    record_crc_ok,
)
from protocol.speedups import compiled

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")

DispatchListener = Callable[[str, int, int], None]
DiskUsage = Callable[[Path], float]


def disk_used_ratio(path: Path) -> float:
    """Fraction (0..1) of the file system holding ``path`` that is in use, as
    ``df`` shows it and RocketMQ's ``getDiskPartitionSpaceUsedPercent``
    computes it: used / (used + available to us). Blocks reserved for root
    count on neither side, so a file system with a large reserve is not
    "full" while most of what we may write is still free."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    room = used + st.f_bavail * st.f_frsize
    return used / room if room > 0 else 0.0


# Consume-queue entries a filtered pull looks at, at most (RocketMQ's
# maxFilterMessageCount is 16 000 bytes of entries: 800).
MAX_FILTER_SCAN = 400

# Bytes a filtered pull reads from the commit log at once (records back to back).
FILTER_READ_BYTES = 1 << 20

# A record's bytes -> whether the pull returns it (RocketMQ's isMatchedByCommitLog);
# may raise CorruptRecordError for a record it cannot read.
RecordFilter = Callable[[Buffer], bool]


class PullKernel(NamedTuple):
    """``protocol/records_kernel.py``'s two pull functions (compiled, or its
    plain Python source in the tests)."""

    scan_entries: Callable[..., Any]
    check_records: Callable[..., Any]


def compiled_pull_kernel() -> PullKernel | None:
    """Those functions compiled (deploy/speedups.py), when built from the
    source and not turned off; else None."""
    scan = compiled(RECORDS_KERNEL_MODULE, RECORDS_KERNEL_SOURCE, "scan_entries")
    check = compiled(RECORDS_KERNEL_MODULE, RECORDS_KERNEL_SOURCE, "check_records")
    return None if scan is None or check is None else PullKernel(scan, check)


_PULL_KERNEL = compiled_pull_kernel()


def _cut_by_end(mf: MappedFile, pos: int, end: int) -> bool:
    """Whether the record at ``pos`` of ``mf`` is whole but for the bytes
    past the log's ``end``: its header is cut, or it is a message or BLANK
    whose size fits the file but runs past ``end``."""
    if mf.file_from_offset + mf.wrote_position != end:
        return False
    room = mf.wrote_position - pos
    if room < BLANK_MIN_SIZE:
        return room > 0
    total, magic = BLANK_HEAD.unpack_from(mf.mm, pos)
    return magic in (MESSAGE_MAGIC_CODE, BLANK_MAGIC_CODE) and room < total <= mf.file_size - pos


@dataclass(slots=True)
class CommitLogFlush:
    """The fsyncs ``begin_commit_log_flush`` planned: (file, its write position
    then, a dup of its fd) each, the log's end then, and the time before it."""

    files: list[tuple[MappedFile, int, int]]
    target: int
    before_ms: int

    def close(self) -> None:
        """Close the dup'ed fds (once the fsyncs are done)."""
        for _, _, fd in self.files:
            try:
                os.close(fd)
            except OSError:
                pass


# a removed queue's directory, moved aside until its files are deleted:
# ``<topic>/<queue id>.removed-<n>`` (never a queue's name: those are digits)
REMOVED_MARK = ".removed-"


@dataclass(slots=True)
class DetachedQueues:
    """Consume queues ``detach_consume_queues`` took out of the store, their
    files still open and on disk: each queue with the directory it was moved
    to (None: it had none, or it could not be moved and its files are deleted
    by name). ``delete_files`` is the blocking part."""

    lock: threading.Lock  # the store's queue lock: a flush thread may hold a queue
    log: Any
    queues: list[tuple[ConsumeQueue, Path | None]] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)  # every topic asked about (valid names)
    topic_dirs: list[Path] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.queues)

    def delete_files(self) -> int:
        """Close the queues and delete their files and directories, then each
        topic directory left empty; returns how many queues went. Blocking file
        work: a worker thread may run it (nothing on the event loop reaches these
        queues any more, and a queue made again meanwhile lives in a directory
        of its own)."""
        for cq, aside in self.queues:
            with self.lock:
                if aside is None:
                    cq.destroy()
                else:
                    cq.close()
            if aside is not None:
                try:
                    shutil.rmtree(aside)
                except OSError as exc:
                    self.log.warning("cannot delete a removed queue's files", dir=str(aside),
                                     error=str(exc))
        for topic_dir in self.topic_dirs:
            if topic_dir.is_symlink():
                continue
            try:
                topic_dir.rmdir()  # only once empty: a queue made again meanwhile stays
            except OSError:
                pass
        return self.count


class DefaultMessageStore:
    def __init__(self, config: StoreConfig) -> None:
        # what the store reads of the broker's settings (broker/store/config.py);
        # replaced as a whole by reconfigure while the store runs
        self.config = config
        root = config.root_dir
        self.root = root
        # storePathCommitLog, storePathConsumeQueue, ...: under root unless configured
        self.cq_root = config.consume_queue_path
        self.log = structlog.get_logger("store").bind(broker=config.broker_name)
        self.commit_log = CommitLog(
            config.commit_log_path, config.maped_file_size_commit_log, config.store_host,
            config.max_message_size, config.delay_level_table(), config.warm_maped_file_enable,
        )
        # get_message's compiled loops (None: not built or turned off)
        self.pull_kernel: PullKernel | None = _PULL_KERNEL
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self.checkpoint = StoreCheckpoint(config.checkpoint_path)
        self.abort_file = config.abort_path
        self.dispatchers: list[CommitLogDispatcher] = [CommitLogDispatcherBuildConsumeQueue(self)]
        self.index_service: IndexService | None = None
        if config.message_index_enable:
            self.index_service = IndexService(config.index_path, config.max_hash_slot_num,
                                              config.max_index_num)
            self.dispatchers.append(self.index_service)
        self.dispatch_listeners: list[DispatchListener] = []
        # called once a put's records are in the commit log, dispatched or not
        # (the HA writers, which send the log itself)
        self.append_listeners: list[Callable[[], None]] = []
        self.running = False
        # Held from load() to shutdown(): one broker per store directory.
        self.store_lock = StoreLock(root)
        # Held by flushes (worker threads) and by anything that closes files:
        # one for the commit log, one for the consume queues and the index, so
        # a SYNC_FLUSH send never waits for a queue or index fsync.
        self._file_lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._removals = itertools.count()  # names removed queues' directories apart
        # Replaceable (tests); past diskSpaceWarningLevelRatio writes are refused.
        self.disk_usage: DiskUsage = disk_used_ratio
        # Replaceable (tests): a pull more than accessMessageInMemoryMaxRatio % of
        # this many bytes behind the commit log's end reads cold data.
        self.total_physical_memory = TOTAL_PHYSICAL_MEMORY_SIZE
        self.disk_full = False
        # this store's identity and its log's epoch history (broker/store/ha/epochs.py)
        self.epochs = EpochHistory(root)
        # why puts are refused (a master that must not take writes yet, see
        # broker/ha_service.py), or None; replicated appends are not affected
        self.write_fence: str | None = None
        # controller mode on a SYNC_MASTER (broker/ha_service.py): why puts are refused
        # IN_SYNC_REPLICAS_NOT_ENOUGH now (None: they are not); asked before each put
        self.replicas_check: Callable[[], str | None] | None = None
        # Commit-log offset up to which every record is dispatched (reput cursor).
        self.reput_offset = 0
        # controller mode: records ending past this offset (the confirm offset,
        # broker/store/ha/confirm.py) wait in the commit log, not dispatched; puts
        # leave their dispatch to ``set_dispatch_limit``. None: no limit.
        self.dispatch_limit: int | None = 0 if config.enable_controller_mode else None
        self.confirm_file = ConfirmFile(root)
        # a truncation of the log to a new master's common point (controller mode)
        # that a crash cut short is done again at load
        self.truncation = TruncationMarker(root)
        self.dispatch_failure: Exception | None = None  # why the cursor is behind
        # what the cursor's walk reads back from stored records (a slave's
        # appends, recovery): scan_kernel.scan_records compiled, or its Python
        # twin; topic names and tags codes it has met
        self._scan_records: Scan = compiled_scan() or scan_loop
        self._scan_topics: dict[bytes, str] = {}
        self._scan_tag_codes: dict[str, int] = {}
        # the put whose dispatch waits for dispatch_deferred (at most one: every
        # put runs it first): (cursor before the put, its dispatch requests,
        # the end of its records)
        self._deferred: tuple[int, list[DispatchRequest], int] | None = None
        self._refusals = LogThrottle()
        self._illegal = LogThrottle()
        self._dispatch_failures = LogThrottle()
        self._skipped_records = LogThrottle()

    def reconfigure(self, config: StoreConfig) -> None:
        """Take ``config`` while running: what the store reads at each use comes
        from it from now on, and the commit log takes its maxMessageSize and
        store host. ValueError, nothing changed, when a field that cannot change
        while running (paths, file sizes, ...: not StoreConfig.LIVE_FIELDS) differs."""
        fixed = self.config.fixed_changes(config)
        if fixed:
            raise ValueError(f"cannot change while the store runs: {', '.join(fixed)}")
        self.commit_log.max_message_size = config.max_message_size
        self.commit_log.set_store_host(config.store_host)
        self.config = config

    # ---- lifecycle -------------------------------------------------------------------

    def load(self) -> bool:
        """Lock the store directory, open the files and recover to a consistent
        state. True on success. StoreLockedError (a StoreError) when another
        broker holds the directory; on any failure the lock is given back."""
        self.store_lock.acquire()
        try:
            return self._load()
        except BaseException:
            self.store_lock.release()
            raise

    def _load(self) -> bool:
        abnormal = self.abort_file.exists()
        t0 = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        self.commit_log.mapped_file_queue.store_dir.mkdir(parents=True, exist_ok=True)
        self.commit_log.load()
        pending = self.truncation.pending()
        if pending is not None:
            self.log.warning("finishing a truncation of the log cut short", offset=pending)
            if pending < self.commit_log.mapped_file_queue.max_offset:
                self.commit_log.mapped_file_queue.truncate_dirty_files(pending)
        self._load_consume_queues()
        if self.index_service is not None:
            self.index_service.load()
        scan_start, end = self.commit_log.recover(abnormal, self.checkpoint.min_timestamp)
        self.epochs.load()
        if pending is not None:
            self.epochs.truncate(end)
        if self.dispatch_limit is not None:
            limit, problem = self.confirm_file.load()
            if problem is not None:
                self.log.warning("confirm offset unreadable: records past the consume "
                                 "queues wait for the next one", problem=problem)
            self.dispatch_limit = min(limit, end)
        cqs = list(self._all_consume_queues())
        for cq in cqs:
            cq.recover()
            cq.truncate_dirty_logic_files(end)
            cq.delete_expired(self.commit_log.min_offset)
        if self.index_service is not None:
            self.index_service.truncate(end)
        if abnormal:
            # consume queues may lag anywhere after the checkpoint: rebuild from there
            reput_from = scan_start
        else:
            reput_from = max([cq.max_physic_offset for cq in cqs], default=0)
        reput_from = max(reput_from, self.commit_log.min_offset)
        try:
            replayed = self.dispatch_from(reput_from)
        except Exception as exc:  # the broker starts; puts wait for a successful reput
            replayed = 0
            self._dispatch_failed(exc, recovery=True)
        self._rebuild_queue_table()
        if pending is not None:  # every step is done again: now on disk, the marker goes
            self._sync_truncated()
            self.truncation.end()
        mfq = self.commit_log.mapped_file_queue
        if not mfq.files:
            # a new store's first file (warm too, with warmMapedFileEnable), here in
            # the loader's thread: made by the first put, it held the loop for
            # the fallocate of 1 GiB (6-8 ms)
            mfq.preallocate_next(first=True)
        if self.index_service is not None:
            self.index_service.prepare_next()  # if one is due (a new store's first file)
        self.log.info("store loaded", abnormal=abnormal, commit_log_end=end,
                      consume_queues=len(cqs), replayed=replayed,
                      seconds=round(time.monotonic() - t0, 3))
        return True

    def _rebuild_queue_table(self) -> None:
        """Each queue's next offset: its consume queue's end, or past the
        records after the reput cursor (not dispatched yet) that it holds."""
        table = {
            f"{cq.topic}-{cq.queue_id}": cq.max_offset_in_queue for cq in self._all_consume_queues()
        }
        if self.reput_offset < self.commit_log.max_offset:
            self.reput_offset = max(self.reput_offset, self.commit_log.min_offset)
            # records past the cursor hold queue offsets their queues do not show yet
            try:
                for _next, buf, pos in self._walk(self.reput_offset):
                    req = self._dispatchable(buf, pos) if buf is not None else None
                    if req is not None:
                        key = f"{req.topic}-{req.queue_id}"
                        table[key] = max(table.get(key, 0), req.consume_queue_offset + 1)
            except StoreError as exc:
                self.log.error("cannot read the records past the reput cursor", error=str(exc))
        self.commit_log.topic_queue_table = table

    # ---- truncation to a new master's common point (controller mode) ------------------

    def prepare_truncate(self, offset: int) -> None:
        """Before ``truncate_to(offset)`` (in a worker thread: it fsyncs): the
        target on disk (broker/store/ha/truncation.py). StoreError when
        ``offset`` is not inside the log."""
        low, end = self.commit_log.min_offset, self.commit_log.max_offset
        if not low <= offset < end:
            raise StoreError(f"cannot truncate the log to offset {offset}: it holds "
                             f"[{low}, {end})")
        self.truncation.begin(offset)

    def truncate_to(self, offset: int) -> None:
        """Cut the log at ``offset`` (``prepare_truncate`` first, then
        ``finish_truncate``): every step of ``truncation_steps``. On the event
        loop, as ``discard_log``: pulls read the files it cuts."""
        for _step in self.truncation_steps(offset):
            pass

    def truncation_steps(self, offset: int) -> Iterator[str]:
        """The steps of a truncation, each named once done (a test stops
        between any two, as a crash would). Each is idempotent: a load with
        the target on disk does them again."""
        if self.truncation.pending() != offset:
            raise StoreError(f"no truncation to offset {offset} prepared")
        with self._file_lock, self._queue_lock:
            self._deferred = None  # the cursor covers what it would have dispatched
            self.epochs.truncate(offset)
            yield "epochs"
            mfq = self.commit_log.mapped_file_queue
            for mf in mfq.files:
                if mf.file_from_offset <= offset < mf.file_from_offset + mfq.file_size:
                    mf.truncate(offset - mf.file_from_offset)
            yield "commit-log file cut"
            mfq.truncate_dirty_files(offset)  # the files past it go
            yield "commit-log files deleted"
            for cq in self._all_consume_queues():
                cq.truncate_dirty_logic_files(offset)
            yield "consume queues"
            if self.index_service is not None:
                self.index_service.truncate(offset)
            yield "index"
            self.reput_offset = min(self.reput_offset, offset)
            if self.dispatch_limit is not None:
                self.dispatch_limit = min(self.dispatch_limit, offset)
            self.dispatch_failure = None
            self._rebuild_queue_table()
        yield "cursors"

    def finish_truncate(self) -> None:
        """After ``truncate_to`` (in a worker thread): the cut files on disk,
        then the target removed."""
        with self._file_lock, self._queue_lock:
            self._sync_truncated()
        if self.dispatch_limit is not None:
            self.confirm_file.write(min(self.dispatch_limit, self.reput_offset))
        self.truncation.end()

    def _sync_truncated(self) -> None:
        """fsync the zeros a truncation wrote (past each file's data, so a
        plain flush skips them) and the directories files left."""
        last = self.commit_log.mapped_file_queue.last()
        if last is not None and last.fd >= 0:
            os.fsync(last.fd)
        fsync_dir(self.commit_log.mapped_file_queue.store_dir)
        for cq in self._all_consume_queues():
            cq_last = cq.mapped_file_queue.last()
            if cq_last is not None and cq_last.fd >= 0:
                os.fsync(cq_last.fd)
            if cq.mapped_file_queue.store_dir.is_dir():
                fsync_dir(cq.mapped_file_queue.store_dir)

    def _load_consume_queues(self) -> None:
        cq_root = self.cq_root
        if not cq_root.exists():
            return
        for topic_dir in sorted(cq_root.iterdir()):
            if not topic_dir.is_dir():
                continue
            problem = topic_problem(topic_dir.name)
            if problem is not None:
                self.log.warning("skipping a consume-queue directory that is not a topic",
                                 reason=problem)
                continue
            for qdir in sorted(topic_dir.iterdir()):
                name = qdir.name
                if REMOVED_MARK in name and qdir.is_dir() and not qdir.is_symlink():
                    # a removed queue whose files were not all deleted before a stop
                    shutil.rmtree(qdir, ignore_errors=True)
                    continue
                if not (qdir.is_dir() and name.isascii() and name.isdigit() and str(int(name)) == name):
                    continue
                try:
                    cq = self.find_consume_queue(topic_dir.name, int(name))
                except InvalidQueueError as exc:
                    self.log.warning("skipping a consume-queue directory", reason=str(exc))
                    continue
                cq.load()

    def start(self) -> None:
        if not self.store_lock.held:
            raise StoreError(f"the store {self.root} is started before it is loaded (and locked)")
        self.abort_file.parent.mkdir(parents=True, exist_ok=True)
        self.abort_file.touch()
        self.running = True

    def shutdown(self) -> None:
        """Flush everything, close the files, remove the abort file, unlock."""
        if not self.running:
            self.store_lock.release()  # loaded but never started
            return
        self.dispatch_deferred()
        self.running = False
        try:
            self.flush_commit_log()
            self.flush_consume_queues()
            with self._file_lock, self._queue_lock:
                self.commit_log.close()
                for cq in self._all_consume_queues():
                    cq.close()
                if self.index_service is not None:
                    self.index_service.close()
            self.abort_file.unlink(missing_ok=True)
        finally:
            self.store_lock.release()

    # ---- consume queues --------------------------------------------------------------

    def _all_consume_queues(self) -> list[ConsumeQueue]:
        # list() of a dict is one C call, so this is safe from a flush thread
        # while the event loop adds queues.
        return [cq for qs in list(self.consume_queue_table.values()) for cq in list(qs.values())]

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, created on first use; InvalidQueueError (a StoreError)
        for a topic or queue id that cannot name a directory in the store."""
        queues = self.consume_queue_table.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        if cq is None:
            cq = ConsumeQueue(topic, queue_id, self.cq_root,
                              self.config.maped_file_size_consume_queue)
            self.consume_queue_table.setdefault(topic, {})[queue_id] = cq
        return cq

    def _existing_cq(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.consume_queue_table.get(topic, {}).get(queue_id)

    # ---- put -------------------------------------------------------------------------

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        return self.put_messages([msg])

    def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult:
        """Append one message or a batch (one topic and queue) and index it."""
        if not self.running or self.disk_full or self.write_fence is not None:
            return self._not_available()
        if not msgs:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        topic, queue_id = msgs[0].topic, msgs[0].queue_id
        if any(m.topic != topic or m.queue_id != queue_id for m in msgs):
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        result = self._put(topic, lambda: self.commit_log.put_messages(msgs))
        assert result is not None  # put_messages always answers
        return result

    def put_batch(self, topic: str, queue_id: int, items: list[tuple[int, bytes, str]], *,
                  sys_flag: int, born_timestamp: int, born_host: str, reconsume_times: int,
                  defer: bool = False) -> PutMessageResult | None:
        """Append a producer's batch as decoded from the wire and index it
        (CommitLog.put_batch): the same records, results and refusals as
        ``put_messages(build_batch_inners(...))`` of the same arguments, or
        None, with nothing written, when the batch must go that way.
        ``defer``: the indexing waits for ``dispatch_deferred``."""
        return self._put(topic, lambda: self.commit_log.put_batch(
            topic, queue_id, items, sys_flag=sys_flag, born_timestamp=born_timestamp,
            born_host=born_host, reconsume_times=reconsume_times), defer)

    def put_batch_body(self, topic: str, queue_id: int, data: bytes, *, sys_flag: int,
                       born_timestamp: int, born_host: str, reconsume_times: int,
                       defer: bool = False) -> PutMessageResult | None:
        """``put_batch`` of ``decode_batch(data)`` by the compiled loops
        (CommitLog.put_batch_body), or None, with nothing written, when the
        batch must be decoded and go the other ways: those loops are not in
        use, the body holds anything out of the ordinary, or the store is not
        taking writes as it is (the other ways check the messages first).
        ``defer``: the indexing waits for ``dispatch_deferred``."""
        if self._deferred is not None:
            self.dispatch_deferred()
        if not self.running or self.disk_full or self.dispatch_behind or self.write_fence \
                or (self.replicas_check is not None and self._replicas_short() is not None):
            return None
        return self._put(topic, lambda: self.commit_log.put_batch_body(
            topic, queue_id, data, sys_flag=sys_flag, born_timestamp=born_timestamp,
            born_host=born_host, reconsume_times=reconsume_times), defer)

    def _put(self, topic: str,
             put: Callable[[], tuple[PutMessageResult, list[DispatchRequest]] | None],
             defer: bool = False) -> PutMessageResult | None:
        """Run a commit-log put of one queue's records and dispatch them (or,
        ``defer``, leave that to ``dispatch_deferred``); the refusals of a
        store that is not running, is full or is behind."""
        if self._deferred is not None:
            self.dispatch_deferred()
        if not self.running or self.disk_full or self.write_fence is not None:
            return self._not_available()
        if self.replicas_check is not None and (short := self._replicas_short()) is not None:
            return short
        if self.dispatch_behind and not self.reput():
            return self._behind_result()
        cursor = self.reput_offset
        try:
            done = put()
        except DiskFullError as exc:
            self._refusals(self.log, "disk full, put refused", error=str(exc))
            return PutMessageResult(PutMessageStatus.DISK_FULL, detail=str(exc))
        except (AllocationError, OSError) as exc:
            self.log.error("commit log append failed", error=str(exc))
            return PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED, detail=str(exc))
        if done is None:
            return None
        result, dispatches = done
        if result.put_message_status is PutMessageStatus.MESSAGE_ILLEGAL and result.detail:
            self._illegal(self.log, "illegal message refused", level="warning",
                          topic=shown(topic), reason=result.detail)
        if dispatches:
            ar = result.append_result
            assert ar is not None
            for appended in self.append_listeners:
                appended()
            if defer:
                self._deferred = (cursor, dispatches, ar.wrote_offset + ar.wrote_bytes)
            else:
                self._dispatch_appended(dispatches, ar.wrote_offset + ar.wrote_bytes)
        return result

    def _not_available(self) -> PutMessageResult:
        """SERVICE_NOT_AVAILABLE, saying why when the write fence is up."""
        return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                detail=self.write_fence or "")

    def _replicas_short(self) -> PutMessageResult | None:
        """IN_SYNC_REPLICAS_NOT_ENOUGH, saying why, when ``replicas_check`` refuses."""
        check = self.replicas_check
        reason = check() if check is not None else None
        if reason is None:
            return None
        return PutMessageResult(PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, detail=reason)

    def dispatch_deferred(self) -> None:
        """Dispatch what the deferred put appended, unless the cursor has moved
        meanwhile (a reput read it back); a failure leaves it to ``reput`` (the
        cursor stays at it)."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None and self.reput_offset == deferred[0]:
            self._dispatch_appended(deferred[1], deferred[2])

    def put_together(self, msgs: list[MessageExtBrokerInner]
                     ) -> tuple[PutMessageResult, list[DispatchRequest]]:
        """Append messages for any topics and queues in one write: they are
        stored together or not at all (a commit and its op record). Returns
        the result and, when stored, each record's place (its dispatch request)."""
        if not self.running or self.disk_full or self.write_fence is not None:
            return self._not_available(), []
        if self.replicas_check is not None and (short := self._replicas_short()) is not None:
            return short, []
        if not msgs:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL), []
        if self._deferred is not None:
            self.dispatch_deferred()
        if self.dispatch_behind and not self.reput():
            return self._behind_result(), []
        try:
            result, dispatches = self.commit_log.put_messages(msgs, mixed=True)
        except DiskFullError as exc:
            self._refusals(self.log, "disk full, put refused", error=str(exc))
            return PutMessageResult(PutMessageStatus.DISK_FULL, detail=str(exc)), []
        except (AllocationError, OSError) as exc:
            self.log.error("commit log append failed", error=str(exc))
            return PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED, detail=str(exc)), []
        if dispatches:
            ar = result.append_result
            assert ar is not None
            for appended in self.append_listeners:
                appended()
            self._dispatch_appended(dispatches, ar.wrote_offset + ar.wrote_bytes, mixed=True)
        return result, dispatches

    def _dispatch_appended(self, dispatches: list[DispatchRequest], end: int,
                           mixed: bool = False) -> None:
        """Dispatch the records a put appended (the cursor was caught up with
        them); a failure leaves the cursor for ``reput``. With a dispatch
        limit (controller mode) they wait for ``set_dispatch_limit``."""
        if self.dispatch_limit is not None:
            return
        try:
            for d in self.dispatchers:
                if mixed:
                    for req in dispatches:
                        d.dispatch(req)
                else:
                    d.dispatch_batch(dispatches)
        except Exception as exc:  # the records are stored: a reput dispatches them
            self._dispatch_failed(exc)
            return
        self.reput_offset = end
        for last in (dispatches if mixed else dispatches[-1:]):
            for listener in self.dispatch_listeners:
                listener(last.topic, last.queue_id, last.consume_queue_offset + 1)

    @property
    def dispatch_behind(self) -> bool:
        """Whether stored records wait for dispatch (puts are refused meanwhile);
        with a dispatch limit, records past it wait by design: only a failed
        dispatch counts."""
        if self.dispatch_limit is not None:
            return self.dispatch_failure is not None \
                and self.reput_offset < self.commit_log.max_offset
        return self.reput_offset < self.commit_log.max_offset

    def set_dispatch_limit(self, offset: int) -> int:
        """Controller mode: the confirm offset moved to ``offset`` (it only
        moves forward here; truncation lowers it); dispatch the records it now
        covers. Returns how many were dispatched."""
        if self.dispatch_limit is None:
            raise StoreError("no dispatch limit outside controller mode")
        if offset <= self.dispatch_limit:
            return 0
        self.dispatch_limit = offset
        if self.reput_offset >= self.commit_log.max_offset:
            return 0
        try:
            count = self._dispatch_to_end(notify=True)
        except Exception as exc:
            self._dispatch_failed(exc)
            return 0
        self.dispatch_failure = None
        return count

    def reput(self) -> bool:
        """Dispatch every record past the cursor; True once caught up.

        Called by a put while behind and by ``check_disk``; long-poll
        listeners hear of the records it dispatches. A failure is logged (at
        most every 10 s) and leaves the cursor at the record that failed.
        """
        self.dispatch_deferred()
        if not self.dispatch_behind:
            return True
        try:
            count = self._dispatch_to_end(notify=True)
        except Exception as exc:
            self._dispatch_failed(exc)
            return False
        if count or self.dispatch_failure is not None:  # quiet at a replica's partial record
            self.log.info("stored records dispatched, accepting writes again", records=count,
                          reput_offset=self.reput_offset)
        self.dispatch_failure = None
        return True

    def _dispatch_failed(self, exc: Exception, recovery: bool = False) -> None:
        self.dispatch_failure = exc
        self._dispatch_failures(
            self.log, "cannot dispatch stored records to their consume queues; puts are refused "
            "until a retry succeeds", error=str(exc), error_type=type(exc).__name__,
            reput_offset=self.reput_offset, commit_log_end=self.commit_log.max_offset,
            recovery=recovery,
        )

    def _behind_result(self) -> PutMessageResult:
        exc = self.dispatch_failure
        if isinstance(exc, DiskFullError):
            return PutMessageResult(PutMessageStatus.DISK_FULL, detail=str(exc))
        detail = f"stored records wait for dispatch: {exc}" if exc else ""
        return PutMessageResult(PutMessageStatus.DISPATCH_BEHIND, detail=detail)

    def do_dispatch(self, req: DispatchRequest) -> None:
        for d in self.dispatchers:
            d.dispatch(req)

    def dispatch_from(self, offset: int) -> int:
        """Re-index every record from ``offset`` to the end of the commit log
        (recovery), moving the reput cursor; returns how many. Records that
        cannot be dispatched (an invalid topic) are logged and skipped; a
        dispatcher's error propagates with the cursor at its record."""
        self.reput_offset = offset
        return self._dispatch_to_end(notify=False)

    def _dispatch_to_end(self, notify: bool) -> int:
        """Dispatch every record from the cursor to the log's end (``_steps``):
        a group of one queue's records by each dispatcher's ``dispatch_batch``
        (``_dispatch_group``), anything else one record at a time. Returns
        how many records; a dispatcher's error propagates with the cursor at
        its record. Queue offsets and long-poll listeners (``notify``) learn
        of the last record of each queue, even then."""
        count = 0
        arrived: dict[tuple[str, int], int] = {}
        # files before the cursor may have been cleaned meanwhile
        self.reput_offset = max(self.reput_offset, self.commit_log.min_offset)
        limit = self.dispatch_limit
        try:
            for nxt, group, buf, pos in self._steps(self.reput_offset, limit):
                if limit is not None and nxt > limit:
                    # controller mode: records past the confirm offset wait
                    if group is not None:
                        part = [r for r in group if r.commit_log_offset + r.msg_size <= limit]
                        if part:
                            last = part[-1]
                            count += self._dispatch_group(
                                part, last.commit_log_offset + last.msg_size, arrived)
                    break
                if group is not None:
                    count += self._dispatch_group(group, nxt, arrived)
                    continue
                if buf is not None:
                    req = self._dispatchable(buf, pos)
                    if req is not None:
                        self.do_dispatch(req)
                        arrived[(req.topic, req.queue_id)] = req.consume_queue_offset + 1
                        count += 1
                self.reput_offset = nxt
        finally:
            # records a put did not write (a replica's, a retried dispatch's)
            # give the next queue offsets
            table = self.commit_log.topic_queue_table
            for (topic, queue_id), max_offset in arrived.items():
                key = f"{topic}-{queue_id}"
                if table.get(key, 0) < max_offset:
                    table[key] = max_offset
            if notify:
                for (topic, queue_id), max_offset in arrived.items():
                    for listener in self.dispatch_listeners:
                        listener(topic, queue_id, max_offset)
        return count

    def _dispatch_group(self, group: list[DispatchRequest], end: int,
                        arrived: dict[tuple[str, int], int]) -> int:
        """Dispatch ``group`` (consecutive records of one queue, at consecutive
        queue offsets, from the cursor to ``end``) as a put's records are:
        each dispatcher's ``dispatch_batch``. Returns how many were dispatched.
        A group whose topic or queue id cannot have a consume queue is logged
        record by record and skipped, as ``_dispatchable`` does. When a
        dispatcher fails, the group goes again one record at a time (what was
        written is not written twice: a consume queue skips the entries it
        has, the index the records it has seen), so the error propagates with
        the cursor at the record that fails. As after a master's put, the
        dispatchers before the failing one may hold the whole group by then
        (one record at a time, only the records up to the failing one): the
        retry from the cursor writes nothing twice."""
        first = group[0]
        key = (first.topic, first.queue_id)
        problem = queue_problem(first.topic, first.queue_id)
        if problem is not None:
            for _ in group:
                self._skipped_records(self.log, "record not dispatched", level="warning",
                                      reason=shown(problem, 200))
            self.reput_offset = end
            return 0
        try:
            for d in self.dispatchers:
                d.dispatch_batch(group)
        except Exception:
            at = self.reput_offset
            for req in group:
                self.do_dispatch(req)
                arrived[key] = req.consume_queue_offset + 1
                at += req.msg_size
                self.reput_offset = at
        arrived[key] = group[-1].consume_queue_offset + 1
        self.reput_offset = end
        return len(group)

    def _steps(self, offset: int, limit: int | None = None
               ) -> Iterator[tuple[int, list[DispatchRequest] | None, Buffer | None, int]]:
        """``_walk`` with the message records read by the scan
        (broker/store/scan_kernel.py) where it can: each step from ``offset``
        to the commit-log end is (offset after the step, a group of dispatch
        requests or None, and, without a group, ``_walk``'s buffer and
        position of one message record, or None for padding). Records the
        scan stops at (padding, a record cut by the end, anything it cannot
        read) take ``_walk``'s step.

        ``limit`` (controller mode: the dispatch limit) ends the walk there
        instead: the scan reads no record past it, and the one step that
        crosses it (a record or padding running past the limit) is the last.
        Without the bound every call read all the records waiting past the
        confirm offset, again at each move of it."""
        mfq = self.commit_log.mapped_file_queue
        log_end = mfq.max_offset
        end = log_end if limit is None else min(log_end, limit)
        scan = self._scan_records
        topics, tag_codes = self._scan_topics, self._scan_tag_codes
        delay_levels = self.commit_log.delay_levels
        new_tuple = tuple.__new__
        while offset < end:
            mf = mfq.find_by_offset(offset)
            if mf is None:
                raise StoreError(f"no commit-log file holds offset {offset}")
            base = mf.file_from_offset
            pos = offset - base
            scan_end = min(mf.wrote_position, end - base)
            if pos < scan_end:
                if len(topics) > MAX_RECORDS:
                    topics.clear()
                groups, stop = scan(mf.mm, pos, scan_end, MAX_RECORDS, topics,
                                    tag_codes, tags_hash_code, SCHEDULE_TOPIC, delay_levels,
                                    new_tuple, DispatchRequest)
                if stop > pos:
                    for group, after in groups:
                        yield base + after, group, None, 0
                    offset = base + stop
                    continue
            # the log's own end: a record or padding the limit cuts is whole here
            step = self._walk_step(mf, offset, log_end)
            if step is None:
                return
            offset = step[0]
            yield step[0], None, step[1], step[2]

    def _walk(self, offset: int) -> Iterator[tuple[int, Buffer | None, int]]:
        """Each step from ``offset`` to the commit-log end: (offset after the
        step, buffer and position of a message record or None for padding).
        Stops before a record the log's end cuts (a slave's, whose master
        sends bytes in batches that split records: the rest is to come)."""
        mfq = self.commit_log.mapped_file_queue
        end = mfq.max_offset
        while offset < end:
            mf = mfq.find_by_offset(offset)
            if mf is None:
                raise StoreError(f"no commit-log file holds offset {offset}")
            step = self._walk_step(mf, offset, end)
            if step is None:
                return
            offset = step[0]
            yield step

    @staticmethod
    def _walk_step(mf: MappedFile, offset: int, end: int
                   ) -> tuple[int, Buffer | None, int] | None:
        """``_walk``'s step at ``offset`` (in ``mf``; the log ends at ``end``);
        None before a record the log's end cuts."""
        pos = offset - mf.file_from_offset
        check = check_record(mf.mm, pos, mf.wrote_position, verify_crc=False)
        if check.status is RecordStatus.MESSAGE:
            return offset + check.size, mf.mm, pos
        if check.status is RecordStatus.BLANK or pos >= mf.wrote_position:
            return min(mf.file_from_offset + mf.file_size, end), None, 0
        if _cut_by_end(mf, pos, end):
            return None
        raise StoreError(f"cannot re-dispatch at commit-log offset {offset}: {check.reason}")

    def _dispatchable(self, buf: Buffer, pos: int) -> DispatchRequest | None:
        """The dispatch request of the record at ``pos``, or None (logged) when
        it cannot have a consume queue: a record an older broker let in."""
        problem: str | None
        try:
            req = self._dispatch_request(buf, pos)
        except (CorruptRecordError, ValueError) as exc:
            problem = f"undecodable: {exc}"
        else:
            problem = queue_problem(req.topic, req.queue_id)
            if problem is None:
                return req
        self._skipped_records(self.log, "record not dispatched", level="warning",
                              reason=shown(problem, 200))
        return None

    def _dispatch_request(self, buf: Buffer, pos: int) -> DispatchRequest:
        m = decode_record(buf, pos)
        if m.topic == SCHEDULE_TOPIC:
            tags_code = m.store_timestamp + self.commit_log.delay_levels.get(m.queue_id + 1, 0)
        else:
            tags_code = tags_hash_code(m.properties.get(PROPERTY_TAGS))
        return DispatchRequest(
            m.topic, m.queue_id, m.commit_log_offset, m.store_size,
            tags_code, m.store_timestamp, m.queue_offset,
            m.properties.get(PROPERTY_KEYS), m.properties.get(PROPERTY_UNIQ_KEY), m.sys_flag,
        )

    # ---- get -------------------------------------------------------------------------

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int,
        tag_codes: set[int] | None,
        record_filter: RecordFilter | None = None,
        max_scan: int = MAX_FILTER_SCAN,
    ) -> GetMessageResult:
        """Up to ``max_nums`` raw records of a queue from ``offset`` (RocketMQ's rules).

        ``tag_codes`` (None: all) skips entries by their consume-queue tags hash;
        ``record_filter`` (RocketMQ's ``isMatchedByCommitLog``), when given, is
        asked about each record left and skips those it refuses. A filtered
        pull looks at no more than ``max_scan`` entries (at most
        ``MAX_FILTER_SCAN``); the next begin offset goes past every entry
        looked at, matched or not."""
        cq = self._existing_cq(topic, queue_id)
        if cq is None:  # nothing was ever written to this queue
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        min_off, max_off = cq.min_offset_in_queue, cq.max_offset_in_queue
        if max_off == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        if offset < min_off:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            nxt = min_off if min_off == 0 else max_off
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, nxt, min_off, max_off)

        max_count = min(max_nums, self.config.max_transfer_count_on_message_in_memory)
        max_bytes = self.config.max_transfer_bytes_on_message_in_memory
        # scan more entries than we return, so a filter can skip unmatched ones
        if record_filter is not None:
            scan = max(1, min(max_scan, MAX_FILTER_SCAN))
        else:
            scan = max(max_count, 16) if tag_codes is None else MAX_FILTER_SCAN
        data = cq.get_entry_bytes(offset, scan)
        if not data:  # no entry here (a missing file): go on at the queue's next file
            nxt = cq.roll_next_file(offset)
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, nxt, min_off, max_off)
        if record_filter is not None:
            return self._get_filtered(data, offset, max_count, max_bytes, tag_codes,
                                      record_filter, min_off, max_off, topic, queue_id)
        kernel = self.pull_kernel
        if kernel is not None:
            found = self._get_by_kernel(kernel, data, offset, max_count, max_bytes, tag_codes,
                                        min_off, max_off, topic, queue_id)
            if found is not None:
                return found
        entries = list(CQ_ENTRY.iter_unpack(data))
        pieces: list[bytes | memoryview] = []
        count = 0
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        total = 0
        scanned = 0
        cl_min = self.commit_log.min_offset
        find_file = self.commit_log.mapped_file_queue.find_by_offset
        last_phys = entries[0][0]
        # Records that lie back to back in one commit-log file (a batch, or
        # sends to one queue in a row) are read with one pread: a run is
        # (file, position in it, [(commit-log offset, size), ...]).
        run_file: MappedFile | None = None
        run_base = run_start = run_end = 0
        run: list[tuple[int, int]] = []
        picked = 0
        for phys, size, tag in entries:
            if picked and (picked >= max_count or total + size > max_bytes):
                break
            scanned += 1
            last_phys = phys
            if size <= 0:
                continue
            if tag_codes is not None and tag not in tag_codes:
                continue
            if phys < cl_min:
                status = GetMessageStatus.MESSAGE_WAS_REMOVING if not picked else status
                continue
            mf: MappedFile | None
            if run_file is not None and phys == run_base + run_end:
                mf, pos = run_file, run_end  # the run's next record: no file look-up
            else:
                mf = find_file(phys)
                pos = phys - mf.file_from_offset if mf is not None else 0
            if mf is None or pos + size > mf.wrote_position:
                if not picked:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                continue
            if mf is not run_file or pos != run_end:
                if run:
                    count += self._read_run(run_file, run_start, run_end, run, pieces, topic,
                                            queue_id)
                run_file, run_start, run = mf, pos, []
                run_base = mf.file_from_offset
            run.append((phys, size))
            run_end = pos + size
            picked += 1
            total += size
        if run:
            count += self._read_run(run_file, run_start, run_end, run, pieces, topic, queue_id)
        if count:
            status = GetMessageStatus.FOUND
        return GetMessageResult(status, offset + scanned, min_off, max_off, pieces,
                                suggest_pulling_from_slave=self._cold(last_phys),
                                message_count=count)

    def _get_filtered(self, data: bytes, offset: int, max_count: int, max_bytes: int,
                      tag_codes: set[int] | None, record_filter: RecordFilter, min_off: int,
                      max_off: int, topic: str, queue_id: int) -> GetMessageResult:
        """``get_message``'s walk when each record is asked (RocketMQ's
        ``isMatchedByCommitLog``): entries passing the tags hash check have
        their record read and filtered; a record that matches and passes its
        CRC is returned. Records lying back to back in one file (a batch, or
        sends to one queue in a row) are read with one pread of at most
        ``FILTER_READ_BYTES``. The filter sees only records within their
        file's written bytes; a record it cannot read (corrupt) is logged and
        skipped."""
        pieces: list[bytes | memoryview] = []
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        count = total = scanned = 0
        cl_min = self.commit_log.min_offset
        find_file = self.commit_log.mapped_file_queue.find_by_offset
        entries = list(CQ_ENTRY.iter_unpack(data))
        last_phys = 0
        chunk = memoryview(b"")
        chunk_start = chunk_end = 0  # the commit-log offsets the chunk holds
        for k, (phys, size, tag) in enumerate(entries):
            if count and (count >= max_count or total + size > max_bytes):
                break
            scanned += 1
            last_phys = phys
            if size <= 0 or (tag_codes is not None and tag not in tag_codes):
                continue
            if not (chunk_start <= phys and phys + size <= chunk_end and phys >= cl_min):
                mf = find_file(phys) if phys >= cl_min else None
                pos = phys - mf.file_from_offset if mf is not None else 0
                if mf is None or pos + size > mf.wrote_position:
                    if not count:
                        status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    continue
                end = pos + size  # read on over the entries that follow back to back
                j = k + 1
                while j < len(entries):
                    nxt_phys, nxt_size, _ = entries[j]
                    nxt = nxt_phys - mf.file_from_offset
                    if nxt != end or nxt_size <= 0 or nxt + nxt_size > mf.wrote_position \
                            or nxt + nxt_size - pos > FILTER_READ_BYTES:
                        break
                    end = nxt + nxt_size
                    j += 1
                chunk = memoryview(mf.pread(pos, end - pos))
                chunk_start, chunk_end = phys, phys + end - pos
            record = chunk[phys - chunk_start: phys - chunk_start + size]
            try:
                if not record_filter(record):
                    continue
            except CorruptRecordError:
                self._crc_failed(topic, queue_id, phys)
                continue
            good, found, bad = check_run(record, ((phys, size),))
            if bad:
                self._crc_failed(topic, queue_id, phys)
                continue
            pieces += good
            count += found
            total += size
        if count:
            status = GetMessageStatus.FOUND
        return GetMessageResult(status, offset + scanned, min_off, max_off, pieces,
                                suggest_pulling_from_slave=self._cold(last_phys),
                                message_count=count)

    def _get_by_kernel(self, kernel: PullKernel, data: bytes, offset: int, max_count: int,
                       max_bytes: int, tag_codes: set[int] | None, min_off: int, max_off: int,
                       topic: str, queue_id: int) -> GetMessageResult | None:
        """``get_message``'s walk over the entries ``data`` by the compiled
        loops: the same result, or None (nothing read) when a run of records
        does not lie within its file's written bytes (a file missing in the
        middle of the log), for the general loop to sort out."""
        mfq = self.commit_log.mapped_file_queue
        scanned, last_phys, removing, runs = kernel.scan_entries(
            data, max_count, max_bytes, tag_codes, self.commit_log.min_offset,
            mfq.max_offset, self.commit_log.file_size)
        files: list[MappedFile] = []
        for start, end, _, _ in runs:
            mf = mfq.find_by_offset(start)
            if mf is None or not (mf.file_from_offset <= start
                                  and end <= mf.file_from_offset + mf.wrote_position):
                return None
            files.append(mf)
        pieces: list[bytes | memoryview] = []
        count = 0
        for (start, end, first, after), mf in zip(runs, files, strict=True):
            good, found, bad = kernel.check_records(
                mf.pread(start - mf.file_from_offset, end - start), data, first, after, crc32,
                RECORD_HEAD_SIZE, OFF_BODY_CRC, OFF_BODY_LEN)
            pieces += good  # a run's good records, whole: copied at most once, when joined
            count += found
            for phys in bad:
                self._crc_failed(topic, queue_id, phys)
        status = (GetMessageStatus.FOUND if count else GetMessageStatus.MESSAGE_WAS_REMOVING
                  if removing else GetMessageStatus.NO_MATCHED_MESSAGE)
        return GetMessageResult(status, offset + scanned, min_off, max_off, pieces,
                                suggest_pulling_from_slave=self._cold(last_phys),
                                message_count=count)

    def _read_run(self, mf: MappedFile | None, start: int, end: int,
                  run: list[tuple[int, int]], pieces: list[bytes | memoryview], topic: str,
                  queue_id: int) -> int:
        """Read records lying back to back in ``mf`` from ``start`` to ``end``
        with one pread, add those that pass their CRC to ``pieces`` and return
        how many those are."""
        assert mf is not None
        good, count, bad = check_run(mf.pread(start, end - start), run)
        pieces += good  # copied at most once, when the response is joined
        for phys in bad:
            self._crc_failed(topic, queue_id, phys)
        return count

    def _crc_failed(self, topic: str, queue_id: int, phys: int) -> None:
        self.log.error("record fails its CRC, not served", topic=topic,
                       queue_id=queue_id, commit_log_offset=phys)

    def _cold(self, pulled_phys: int) -> bool:
        """Whether a pull that got to commit-log offset ``pulled_phys`` reads cold
        data: more than accessMessageInMemoryMaxRatio % of the machine's memory
        lies between it and the commit log's end (RocketMQ's rule; the master
        then suggests a slave)."""
        return in_disk(self.commit_log.max_offset, pulled_phys, self._memory_budget())

    def _memory_budget(self) -> int:
        return memory_budget(self.total_physical_memory,
                             self.config.access_message_in_memory_max_ratio)

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether the message at queue offset ``offset`` of ``topic``/``queue_id``
        is "in disk" (broker/store/memory_ratio.py); False when the queue has no
        entry there (RocketMQ's checkInDiskByConsumeOffset). Never creates a queue."""
        cq = self._existing_cq(topic, queue_id)
        entry = cq.get_entry(offset) if cq is not None and offset >= cq.min_offset_in_queue \
            else None
        if entry is None:
            return False
        return in_disk(self.commit_log.max_offset, entry[0], self._memory_budget())

    # ---- queries ---------------------------------------------------------------------

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._existing_cq(topic, queue_id)
        return cq.max_offset_in_queue if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._existing_cq(topic, queue_id)
        return cq.min_offset_in_queue if cq else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self._existing_cq(topic, queue_id)
        entry = cq.get_entry(offset) if cq else None
        return entry[0] if entry else 0

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self._existing_cq(topic, queue_id)
        entry = cq.get_entry(offset) if cq else None
        if entry is None:
            return -1
        data = self.commit_log.get_data(entry[0] + OFF_STORE_TIMESTAMP, 8)
        return _LONG.unpack(data)[0] if data else -1

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset whose store time is at or after ``timestamp_ms``
        (the max offset when every message is older). Binary search."""
        cq = self._existing_cq(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        while lo < hi:
            mid = (lo + hi) // 2
            stored = self.get_message_store_timestamp(topic, queue_id, mid)
            if stored < 0:  # entry gone (cleaned): search above it
                lo = mid + 1
            elif stored < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int,
                      end_ms: int) -> list[bytes]:
        """Raw records of ``topic`` indexed under ``key``, newest first."""
        if self.index_service is None:
            return []
        out = []
        for phy in self.index_service.query_offset(topic, key, max_num, begin_ms, end_ms):
            head = self.commit_log.get_data(phy, 4)
            size = _INT.unpack(head)[0] if head else 0
            data = self.commit_log.get_data(phy, size) if size > 0 else None
            if data is None or not record_crc_ok(data):
                continue
            m = decode_record(data)
            keys = (m.properties.get(PROPERTY_KEYS) or "").split(" ")
            # different keys can share a hash: keep only real matches
            if m.topic == topic and (key in keys or m.properties.get(PROPERTY_UNIQ_KEY) == key):
                out.append(data)
        return out

    def record_at(self, commit_log_offset: int) -> bytes | None:
        """The raw record at a commit-log offset as stored (its length field
        read first), or None when nothing is there."""
        head = self.commit_log.get_data(commit_log_offset, 4)
        size = _INT.unpack(head)[0] if head else 0
        return self.commit_log.get_data(commit_log_offset, size) if size > 0 else None

    def index_progress(self) -> tuple[int, int]:
        """How far the index goes: its newest entry's store time and commit-log
        offset ((0, 0) without an index or entry)."""
        index = self.index_service
        for f in reversed(index.files if index is not None else []):
            if f.index_count > 1:
                return f.end_timestamp, f.end_phy_offset
        return 0, 0

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        head = self.commit_log.get_data(commit_log_offset, 4)
        if head is None:
            return None
        size = _INT.unpack(head)[0]
        data = self.commit_log.get_data(commit_log_offset, size) if size > 0 else None
        if data is None:
            return None
        try:
            return decode_record(data, 0, verify_crc=True)
        except CorruptRecordError:
            return None

    def get_max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    def get_min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    # ---- replication -----------------------------------------------------------------

    def log_view(self) -> LogView:
        """What the HA handshake tells a peer of this store's log."""
        lo = self.get_min_phy_offset()
        return LogView(self.epochs.store_id, live(self.epochs.entries, lo), lo,
                       self.get_max_phy_offset(), self.tail_checksum())

    def tail_checksum(self) -> tuple[int, int] | None:
        """(from, crc32) of the last bytes of the log, within its last file
        (None for an empty log)."""
        end = self.get_max_phy_offset()
        if end <= self.get_min_phy_offset():
            return None
        mf = self.commit_log.mapped_file_queue.find_by_offset(end - 1)
        if mf is None:
            return None
        return tail_of(end, mf.file_from_offset, self.get_raw)

    def crc_range(self, start: int, end: int) -> int | None:
        """CRC32 of the log's bytes in [start, end) (one file), or None when
        they are not all here."""
        data = self.get_raw(start, end - start)
        if data is None or len(data) != end - start:
            return None
        return zlib.crc32(data)

    def get_raw(self, offset: int, max_bytes: int) -> bytes | None:
        """Up to ``max_bytes`` commit-log bytes from ``offset``, within one
        file (what a master sends a slave): b"" at the end of the log, None
        when no file holds ``offset`` any more (cleaned)."""
        return self.commit_log.get_raw(offset, max_bytes)

    def append_replica(self, start_offset: int, data: bytes | bytearray | memoryview) -> PutMessageResult:
        """A slave's append of its master's commit-log bytes at ``start_offset``
        (its own end), then the reput cursor: consume queues and the index are
        built, and long polls woken, by the one dispatch path puts and
        recovery use. A record the bytes cut short is dispatched once the
        rest arrives.

        PUT_OK once appended and dispatched; DISPATCH_BEHIND when appended but
        the dispatch failed (logged; the next append or ``check_disk`` tries
        again); SERVICE_NOT_AVAILABLE when not started; DISK_FULL or
        CREATE_MAPEDFILE_FAILED when a commit-log file cannot be created (the
        bytes before it stay: ``get_max_phy_offset`` says how far it got).
        Raises StoreError, nothing written, when the bytes do not belong at
        ``start_offset`` (see ``CommitLog.append_data``).
        """
        if not self.running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
        if self.disk_full:
            return PutMessageResult(PutMessageStatus.DISK_FULL,
                                    detail="disk full: replica bytes refused")
        refused: PutMessageResult | None = None
        before = self.commit_log.max_offset
        try:
            self.commit_log.append_data(start_offset, data)
        except DiskFullError as exc:
            self._refusals(self.log, "disk full, replica append refused", error=str(exc))
            refused = PutMessageResult(PutMessageStatus.DISK_FULL, detail=str(exc))
        except (AllocationError, OSError) as exc:
            self.log.error("replica append failed", error=str(exc))
            refused = PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED, detail=str(exc))
        if self.commit_log.max_offset == before:
            return refused or PutMessageResult(PutMessageStatus.PUT_OK)
        try:
            self._dispatch_to_end(notify=True)
        except Exception as exc:  # the bytes are stored: a later reput dispatches them
            self._dispatch_failed(exc)
            return refused or PutMessageResult(
                PutMessageStatus.DISPATCH_BEHIND, detail=f"stored, not yet dispatched: {exc}")
        if self.dispatch_failure is not None:
            self.log.info("stored records dispatched", reput_offset=self.reput_offset)
            self.dispatch_failure = None
        return refused or PutMessageResult(PutMessageStatus.PUT_OK)

    def discard_log(self) -> None:
        """Empty the store (a slave with haDiscardLog whose master refused its
        log): every commit-log, consume-queue and index file goes, the epoch
        history too; the store id stays. The next replica append starts the
        log again. On the event loop (pulls read these files), holding both
        file locks against the flush threads."""
        with self._file_lock, self._queue_lock:
            self.dispatch_deferred()
            mfq = self.commit_log.mapped_file_queue
            mfq.delete_all()
            mfq.flushed_where = 0
            for cq in self._all_consume_queues():
                cq.destroy()
            self.consume_queue_table.clear()
            if self.index_service is not None:
                self.index_service.truncate(0)
            self.commit_log.topic_queue_table = {}
            self.reput_offset = 0
            if self.dispatch_limit is not None:
                self.dispatch_limit = 0
            self.dispatch_failure = None
            self.epochs.entries = []
            self.epochs.write()
            for topic_dir in list(self.cq_root.iterdir()) if self.cq_root.exists() else []:
                self._remove_empty_dirs(self.cq_root, topic_dir)
        self.log.warning("store emptied: its log was discarded",
                         store_id=self.epochs.store_id)

    # ---- admin -----------------------------------------------------------------------

    def delete_topics(self, topics: set[str]) -> int:
        """Drop the consume queues of ``topics``; returns how many. Invalid names
        are logged and skipped: nothing outside the store is ever touched."""
        detached = self.detach_consume_queues({t: None for t in topics})
        detached.delete_files()
        for topic in detached.topics:  # and whatever empty queue directory is left
            try:
                self._remove_empty_dirs(self.cq_root, self.cq_root / topic)
            except OSError as exc:
                self.log.warning("cannot remove a topic's queue directories", topic=topic,
                                 error=str(exc))
        return detached.count

    def detach_consume_queues(self, chosen: dict[str, set[int] | None]) -> DetachedQueues:
        """Take these consume queues (topic -> queue ids, None: every one) out of
        the store: out of its tables (their next offset forgotten) and their
        directories moved aside, one rename each, so that a queue made again at
        once for the same topic and id starts in a directory of its own. Their
        files are deleted by ``DetachedQueues.delete_files``, which a worker
        thread may run: nothing here reaches those queues any more."""
        self.dispatch_deferred()  # a pending put's entries are not written after this
        detached = DetachedQueues(self._queue_lock, self.log)
        for topic, ids in chosen.items():
            problem = topic_problem(topic)
            if problem is not None:
                self.log.warning("not deleting the queues of an invalid topic", reason=problem)
                continue
            table = self.consume_queue_table.get(topic, {})
            before = detached.count
            for queue_id in list(table) if ids is None else sorted(ids):
                cq = table.pop(queue_id, None)
                if cq is None:
                    continue
                self.commit_log.topic_queue_table.pop(f"{topic}-{queue_id}", None)
                aside = cq.store_dir.with_name(
                    f"{cq.store_dir.name}{REMOVED_MARK}{next(self._removals)}")
                try:
                    os.rename(cq.store_dir, aside)
                    detached.queues.append((cq, aside))
                except FileNotFoundError:  # no file was ever made for it
                    detached.queues.append((cq, None))
                except OSError as exc:  # left where it is: its files are deleted by name
                    detached.queues.append((cq, None))
                    self.log.warning("cannot move a removed queue's directory aside",
                                     topic=topic, queue_id=queue_id, error=str(exc))
            if not table:
                self.consume_queue_table.pop(topic, None)
            detached.topics.append(topic)
            if detached.count > before:
                detached.topic_dirs.append(self.cq_root / topic)
        return detached

    def consume_queue_facts(self) -> list[QueueFacts]:
        """Every consume queue, as queue_cleanup decides on them."""
        return [QueueFacts(cq.topic, cq.queue_id, cq.max_physic_offset)
                for cq in self._all_consume_queues()]

    def consume_queue_entries(self, topic: str, queue_id: int, index: int, count: int
                              ) -> tuple[int, int, list[tuple[int, int, int, int]]] | None:
        """QUERY_CONSUME_QUEUE: (min offset, max offset, up to ``count`` entries
        from ``index`` as (offset, commit-log offset, size, tags code)), or None
        when the queue does not exist. A gap in the queue ends the entries."""
        cq = self._existing_cq(topic, queue_id)
        if cq is None:
            return None
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        out: list[tuple[int, int, int, int]] = []
        at = index if index >= lo else hi  # before the min: nothing (gone)
        while len(out) < count and at < hi:  # each round adds entries or stops
            entries = cq.get_entries(at, count - len(out))
            if not entries:
                break
            out += [(at + i, phys, size, tag) for i, (phys, size, tag) in enumerate(entries)]
            at += len(entries)
        return lo, hi, out

    @staticmethod
    def _remove_empty_dirs(cq_root: Path, topic_dir: Path) -> None:
        if topic_dir.is_symlink() or not topic_dir.is_dir():
            return
        if not topic_dir.resolve().is_relative_to(cq_root.resolve()) or topic_dir.resolve() == cq_root.resolve():
            return
        for qdir in topic_dir.iterdir():
            if REMOVED_MARK in qdir.name:  # a worker thread is deleting it
                continue
            if qdir.is_dir() and not qdir.is_symlink() and not any(qdir.iterdir()):
                qdir.rmdir()
        if not any(topic_dir.iterdir()):
            topic_dir.rmdir()

    # ---- cleanup ---------------------------------------------------------------------

    def check_disk(self) -> float:
        """Re-read disk usage; refuse or accept writes accordingly, and retry a
        failed dispatch (``reput``). Returns the ratio."""
        ratio = self.disk_usage(self.commit_log.mapped_file_queue.store_dir)
        full = ratio * 100 >= self.config.disk_space_warning_level_ratio
        if full != self.disk_full:
            if full:
                self.log.error("disk full, refusing writes", used=round(ratio, 3))
            else:
                self.log.info("disk space back, accepting writes", used=round(ratio, 3))
        self.disk_full = full
        if self.running and self.dispatch_behind:
            self.reput()
        return ratio

    def clean_expired_files(self, now_ms: int, hour: int, manual: bool = False) -> int:
        """One cleanup round (RocketMQ's CleanCommitLogService + CleanConsumeQueueService).

        Commit-log files older than ``fileReservedTime`` hours go at the
        ``deleteWhen`` hour, or at once when disk use passes
        ``diskMaxUsedSpaceRatio``; past ``diskSpaceCleanForciblyRatio`` the
        oldest go whatever their age. Never the file being written. Consume
        queues follow. Returns how many commit-log files were deleted.
        """
        ratio = self.check_disk()
        config = self.config
        hours = {int(h) for h in config.delete_when.replace(",", ";").split(";") if h.strip().isdigit()}
        time_up = hour in hours
        space_full = ratio * 100 >= config.disk_max_used_space_ratio
        force = ratio * 100 >= config.disk_space_clean_forcibly_ratio
        if not (time_up or space_full or manual):
            return 0
        with self._file_lock, self._queue_lock:
            deleted = self.commit_log.delete_expired_files(
                config.file_reserved_time * 3_600_000, now_ms, force, config.delete_files_batch_max
            )
            if deleted:
                min_phys = self.commit_log.min_offset
                for cq in self._all_consume_queues():
                    cq.delete_expired(min_phys)
                if self.index_service is not None:
                    self.index_service.delete_expired(min_phys)
        if deleted:
            self.log.info("expired files deleted", commit_log_files=deleted, used=round(ratio, 3),
                          forced=force, min_offset=self.commit_log.min_offset)
            self.check_disk()
        return deleted

    # ---- flush -----------------------------------------------------------------------

    def flush_commit_log(self, prepare: bool = True) -> int:
        """fsync the commit log (blocking: run it in a worker thread); then,
        with ``prepare``, create the next file once the current one is half
        full (``prepare_next_commit_log_file``).

        Returns the commit-log offset known to be on disk.
        """
        before = int(time.time() * 1000)  # every record stored before this is covered
        with self._file_lock:
            flushed = self.commit_log.flush()
        if prepare:
            self.prepare_next_commit_log_file()
        if flushed:  # written to the file by flush_consume_queues (see store_checkpoint.py)
            self.checkpoint.physic_msg_timestamp = before
        return self.commit_log.flushed_where

    def begin_commit_log_flush(self) -> CommitLogFlush | None:
        """On the event loop, for an fsync no thread runs (broker/aio_fsync.py):
        each commit-log file with bytes not yet fsynced, with its write position
        and a dup of its fd (the fsync may outlive the file's own fd). None when
        the file lock is held (a thread is deleting or creating files): use
        ``flush_commit_log`` in a thread then. OSError if an fd cannot be dup'ed."""
        if not self._file_lock.acquire(blocking=False):
            return None
        try:
            before = int(time.time() * 1000)
            mfq = self.commit_log.mapped_file_queue
            plan = CommitLogFlush([], mfq.max_offset, before)
            try:
                for mf in list(mfq.files):
                    if mf.wrote_position > mf.flushed_position and mf.fd >= 0:
                        plan.files.append((mf, mf.wrote_position, os.dup(mf.fd)))
            except OSError:
                plan.close()
                raise
            return plan
        finally:
            self._file_lock.release()

    def end_commit_log_flush(self, plan: CommitLogFlush) -> int:
        """After every fsync of ``plan`` succeeded: what ``flush_commit_log``
        records after its own (flushed positions, the checkpoint's time).
        Returns the commit-log offset known to be on disk."""
        for mf, wrote, _ in plan.files:
            if wrote > mf.flushed_position:
                mf.flushed_position = wrote
        mfq = self.commit_log.mapped_file_queue
        mfq.flushed_where = max(mfq.flushed_where, plan.target)
        if plan.files:
            self.checkpoint.physic_msg_timestamp = plan.before_ms
        return mfq.flushed_where

    def write_behind(self, least: int, start: SyncRange | None = None) -> int:
        """Start the disk writes of the newest commit-log file's bytes that
        are neither fsynced nor started yet, once they are at least ``least``
        (blocking: run it in a worker thread; ``writeback.start``, without
        waiting for them). Returns how many bytes were started (0: none, or
        the kernel refused; the next fsync writes them as before)."""
        with self._file_lock:
            mf = self.commit_log.mapped_file_queue.last()
            if mf is None or mf.fd < 0:
                return 0
            span = write_behind_range(mf.wrote_position, mf.flushed_position,
                                      mf.written_behind, least)
            if span is None or not writeback.start(mf.fd, span[0], span[1] - span[0], start):
                return 0
            mf.written_behind = span[1]
            return span[1] - span[0]

    def commit_log_wants_next_file(self) -> bool:
        """Whether ``prepare_next_commit_log_file`` has a file to create."""
        return self.running and self.commit_log.wants_next_file()

    def prepare_next_commit_log_file(self) -> None:
        """Create the commit log's next file ahead of need (blocking: a worker
        thread). The file lock is not held: with warmMapedFileEnable the file
        takes a while (its blocks are written), and the commit log's flushes
        must not wait for it (the queue's own lock guards the hand-over)."""
        if self.running:
            self.commit_log.preallocate_next()

    def flush_consume_queues(self) -> bool:
        before = int(time.time() * 1000)
        flushed = False
        for cq in self._all_consume_queues():
            with self._queue_lock:
                flushed = cq.flush() or flushed
        if self.index_service is not None:
            with self._queue_lock:
                self.index_service.flush()
            # the next index file, made here once the last is half full: the
            # dispatch on the event loop only takes it
            self.index_service.prepare_next()
        if flushed:
            self.checkpoint.logics_msg_timestamp = before
        self.checkpoint.flush_if_changed()
        if self.dispatch_limit is not None:
            # what the consume queues may hold by now (never past the log's end)
            self.confirm_file.write(min(self.dispatch_limit, self.reput_offset))
        return flushed
