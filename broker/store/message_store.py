"""DefaultMessageStore: the storage engine the broker talks to.

Synchronous and free of trio: the broker calls ``put_message`` and
``get_message`` from its event loop and runs the blocking ``flush_*`` methods
in worker threads.
"""

from __future__ import annotations

import shutil
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from broker.config import BrokerConfig
from broker.store.commit_log import (
    SCHEDULE_TOPIC,
    CommitLog,
    DispatchRequest,
    MessageExtBrokerInner,
)
from broker.store.consume_queue import ConsumeQueue
from broker.store.dispatch import CommitLogDispatcher, CommitLogDispatcherBuildConsumeQueue
from broker.store.index_service import IndexService
from broker.store.status import (
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    StoreError,
)
from broker.store.store_checkpoint import StoreCheckpoint
from protocol.errors import CorruptRecordError
from protocol.hashing import tags_hash_code
from protocol.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, MessageExt
from protocol.record import (
    OFF_STORE_TIMESTAMP,
    Buffer,
    RecordStatus,
    check_record,
    decode_record,
    record_crc_ok,
)

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")

DispatchListener = Callable[[str, int, int], None]
DiskUsage = Callable[[Path], float]


def disk_used_ratio(path: Path) -> float:
    """Fraction (0..1) of the file system holding ``path`` that is in use."""
    usage = shutil.disk_usage(path)
    return (usage.total - usage.free) / usage.total if usage.total else 0.0


class DefaultMessageStore:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        root = Path(config.store_path_root_dir)
        self.root = root
        self.log = structlog.get_logger("store").bind(broker=config.broker_name)
        self.commit_log = CommitLog(
            root / "commitlog", config.maped_file_size_commit_log, config.broker_addr,
            config.max_message_size, config.delay_level_table(),
        )
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self.checkpoint = StoreCheckpoint(root / "checkpoint")
        self.abort_file = root / "abort"
        self.dispatchers: list[CommitLogDispatcher] = [CommitLogDispatcherBuildConsumeQueue(self)]
        self.index_service: IndexService | None = None
        if config.message_index_enable:
            self.index_service = IndexService(root / "index", config.max_hash_slot_num,
                                              config.max_index_num)
            self.dispatchers.append(self.index_service)
        self.dispatch_listeners: list[DispatchListener] = []
        self.running = False
        # Held by flushes (worker threads) and by anything that closes files.
        self._file_lock = threading.Lock()
        # Replaceable (tests); past diskSpaceWarningLevelRatio writes are refused.
        self.disk_usage: DiskUsage = disk_used_ratio
        self.disk_full = False

    # ---- lifecycle -------------------------------------------------------------------

    def load(self) -> bool:
        """Open the files and recover to a consistent state. True on success."""
        abnormal = self.abort_file.exists()
        t0 = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        self.commit_log.load()
        self._load_consume_queues()
        if self.index_service is not None:
            self.index_service.load()
        scan_start, end = self.commit_log.recover(abnormal, self.checkpoint.min_timestamp)
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
        replayed = self.dispatch_from(reput_from)
        self.commit_log.topic_queue_table = {
            f"{cq.topic}-{cq.queue_id}": cq.max_offset_in_queue for cq in self._all_consume_queues()
        }
        self.log.info("store loaded", abnormal=abnormal, commit_log_end=end,
                      consume_queues=len(cqs), replayed=replayed,
                      seconds=round(time.monotonic() - t0, 3))
        return True

    def _load_consume_queues(self) -> None:
        cq_root = self.root / "consumequeue"
        if not cq_root.exists():
            return
        for topic_dir in sorted(cq_root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for qdir in sorted(topic_dir.iterdir()):
                if qdir.is_dir() and qdir.name.isdigit():
                    cq = self.find_consume_queue(topic_dir.name, int(qdir.name))
                    cq.load()

    def start(self) -> None:
        self.abort_file.parent.mkdir(parents=True, exist_ok=True)
        self.abort_file.touch()
        self.running = True

    def shutdown(self) -> None:
        """Flush everything, close the files, remove the abort file."""
        if not self.running:
            return
        self.running = False
        self.flush_commit_log()
        self.flush_consume_queues()
        with self._file_lock:
            self.commit_log.close()
            for cq in self._all_consume_queues():
                cq.close()
            if self.index_service is not None:
                self.index_service.close()
        self.abort_file.unlink(missing_ok=True)

    # ---- consume queues --------------------------------------------------------------

    def _all_consume_queues(self) -> list[ConsumeQueue]:
        # list() of a dict is one C call, so this is safe from a flush thread
        # while the event loop adds queues.
        return [cq for qs in list(self.consume_queue_table.values()) for cq in list(qs.values())]

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queues = self.consume_queue_table.setdefault(topic, {})
        cq = queues.get(queue_id)
        if cq is None:
            cq = ConsumeQueue(topic, queue_id, self.root / "consumequeue",
                              self.config.maped_file_size_consume_queue)
            queues[queue_id] = cq
        return cq

    def _existing_cq(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.consume_queue_table.get(topic, {}).get(queue_id)

    # ---- put -------------------------------------------------------------------------

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        return self.put_messages([msg])

    def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult:
        """Append one message or a batch (one topic and queue) and index it."""
        if not self.running or self.disk_full:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
        if not msgs:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        first = msgs[0]
        if any(m.topic != first.topic or m.queue_id != first.queue_id for m in msgs):
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        try:
            result, dispatches = self.commit_log.put_messages(msgs)
        except OSError as exc:
            self.log.error("commit log append failed", error=str(exc))
            return PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED)
        if dispatches:
            for d in self.dispatchers:
                d.dispatch_batch(dispatches)
            last = dispatches[-1]
            for listener in self.dispatch_listeners:
                listener(last.topic, last.queue_id, last.consume_queue_offset + 1)
        return result

    def do_dispatch(self, req: DispatchRequest) -> None:
        for d in self.dispatchers:
            d.dispatch(req)

    def dispatch_from(self, offset: int) -> int:
        """Re-index every record from ``offset`` to the end of the commit log."""
        count = 0
        mfq = self.commit_log.mapped_file_queue
        end = mfq.max_offset
        while offset < end:
            mf = mfq.find_by_offset(offset)
            if mf is None:
                break
            pos = offset - mf.file_from_offset
            check = check_record(mf.mm, pos, mf.wrote_position, verify_crc=False)
            if check.status is RecordStatus.MESSAGE:
                self.do_dispatch(self._dispatch_request(mf.mm, pos))
                offset += check.size
                count += 1
            elif check.status is RecordStatus.BLANK or pos >= mf.wrote_position:
                offset = mf.file_from_offset + mf.file_size
            else:
                raise StoreError(f"cannot re-dispatch at commit-log offset {offset}: {check.reason}")
        return count

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
    ) -> GetMessageResult:
        """Up to ``max_nums`` raw records of a queue from ``offset`` (RocketMQ's rules)."""
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
        # scan more entries than we return, so a tag filter can skip unmatched ones
        entries = cq.get_entries(offset, max(max_count, 16) if tag_codes is None else 400)
        if not entries:
            nxt = self.commit_log.roll_next_file(offset * 20) // 20
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, nxt, min_off, max_off)
        buffers: list[bytes] = []
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        total = 0
        scanned = 0
        cl_min = self.commit_log.min_offset
        get_data = self.commit_log.get_data
        for phys, size, tag in entries:
            if buffers and (len(buffers) >= max_count or total + size > max_bytes):
                break
            scanned += 1
            if size <= 0:
                continue
            if tag_codes is not None and tag not in tag_codes:
                continue
            if phys < cl_min:
                status = GetMessageStatus.MESSAGE_WAS_REMOVING if not buffers else status
                continue
            data = get_data(phys, size)
            if data is None:
                if not buffers:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                continue
            if not record_crc_ok(data):
                self.log.error("record fails its CRC, not served", topic=topic,
                               queue_id=queue_id, commit_log_offset=phys)
                continue
            buffers.append(data)
            total += size
            status = GetMessageStatus.FOUND
        return GetMessageResult(status, offset + scanned, min_off, max_off, buffers)

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

    # ---- admin -----------------------------------------------------------------------

    def delete_topics(self, topics: set[str]) -> int:
        deleted = 0
        for topic in topics:
            queues = self.consume_queue_table.pop(topic, {})
            for cq in queues.values():
                with self._file_lock:
                    cq.destroy()
                self.commit_log.topic_queue_table.pop(f"{topic}-{cq.queue_id}", None)
                deleted += 1
            topic_dir = self.root / "consumequeue" / topic
            if topic_dir.exists():
                for qdir in topic_dir.iterdir():
                    if qdir.is_dir():
                        qdir.rmdir() if not any(qdir.iterdir()) else None
                if not any(topic_dir.iterdir()):
                    topic_dir.rmdir()
        return deleted

    # ---- cleanup ---------------------------------------------------------------------

    def check_disk(self) -> float:
        """Re-read disk usage; refuse or accept writes accordingly. Returns the ratio."""
        ratio = self.disk_usage(self.root)
        full = ratio * 100 >= self.config.disk_space_warning_level_ratio
        if full != self.disk_full:
            if full:
                self.log.error("disk full, refusing writes", used=round(ratio, 3))
            else:
                self.log.info("disk space back, accepting writes", used=round(ratio, 3))
        self.disk_full = full
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
        cfg = self.config
        hours = {int(h) for h in cfg.delete_when.replace(",", ";").split(";") if h.strip().isdigit()}
        time_up = hour in hours
        space_full = ratio * 100 >= cfg.disk_max_used_space_ratio
        force = ratio * 100 >= cfg.disk_space_clean_forcibly_ratio
        if not (time_up or space_full or manual):
            return 0
        with self._file_lock:
            deleted = self.commit_log.delete_expired_files(
                cfg.file_reserved_time * 3_600_000, now_ms, force, cfg.delete_files_batch_max
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

    def flush_commit_log(self) -> int:
        """fsync the commit log (blocking: run it in a worker thread).

        Returns the commit-log offset known to be on disk.
        """
        before = int(time.time() * 1000)  # every record stored before this is covered
        with self._file_lock:
            flushed = self.commit_log.flush()
            if self.running:
                self.commit_log.preallocate_next()
        if flushed:
            self.checkpoint.physic_msg_timestamp = before
            self.checkpoint.flush()
        return self.commit_log.flushed_where

    def flush_consume_queues(self) -> bool:
        before = int(time.time() * 1000)
        flushed = False
        for cq in self._all_consume_queues():
            with self._file_lock:
                flushed = cq.flush() or flushed
        if self.index_service is not None:
            with self._file_lock:
                self.index_service.flush()
        if flushed:
            self.checkpoint.logics_msg_timestamp = before
            self.checkpoint.flush()
        return flushed
