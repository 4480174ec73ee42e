"""CommitLog: every topic's messages in one append-only log.

Records use RocketMQ 4.x's layout (protocol/record.py). A record that does not
fit in the rest of a file is preceded by a BLANK record filling that rest, and
goes to the next file; a file always ends full or with a BLANK of >= 8 bytes.
Queue offsets come from ``topic_queue_table`` ("topic-queueId" -> next offset).

A put is checked before anything is written (topic name, integer ranges,
sizes) and its bytes are built before they are written: it either lands
whole or leaves the log untouched. A file that cannot be allocated raises
AllocationError (DiskFullError) with nothing written; the next put tries again.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import structlog

from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.status import (
    AppendMessageResult,
    AppendMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    StoreError,
)
from broker.topic_validator import RMQ_SYS_SCHEDULE_TOPIC as SCHEDULE_TOPIC
from protocol.crc import crc32
from protocol.hashing import tags_hash_code
from protocol.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, find_property
from protocol.names import topic_problem
from protocol.record import (
    BLANK_HEAD,
    BLANK_MAGIC_CODE,
    BLANK_MIN_SIZE,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    MESSAGE_MAGIC_CODE,
    OFF_STORE_TIMESTAMP,
    PROPERTIES_LENGTH,
    RECORD_HEAD,
    RECORD_HEAD_SIZE,
    Buffer,
    RecordStatus,
    check_record,
    encode_blank,
    pack_host,
    record_size,
    topic_part,
)
from protocol.speedups import compiled

log = structlog.get_logger("store.commitlog")

# A file must always keep room for a BLANK header at its end.
END_FILE_MIN_BLANK_LENGTH = BLANK_MIN_SIZE
_LONG = struct.Struct(">q")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and low <= value <= high


def message_problem(m: MessageExtBrokerInner) -> str | None:
    """Why ``m`` cannot become a record (None when it can): an invalid topic
    (protocol.names), a field out of its record range, a wrong type."""
    problem = topic_problem(m.topic)
    if problem is not None:
        return problem
    return _explain(m)


def _explain(m: MessageExtBrokerInner) -> str | None:
    if not _int_in(m.queue_id, 0, INT32_MAX):
        return "the queue id is out of range"
    if not _int_in(m.flag, INT32_MIN, INT32_MAX):
        return "the flag is out of range"
    if not _int_in(m.sys_flag, INT32_MIN, INT32_MAX):
        return "the sysFlag is out of range"
    if not _int_in(m.born_timestamp, INT64_MIN, INT64_MAX):
        return "the born timestamp is out of range"
    if not _int_in(m.reconsume_times, 0, INT32_MAX):
        return "the reconsume times are out of range"
    if not _int_in(m.prepared_transaction_offset, INT64_MIN, INT64_MAX):
        return "the prepared transaction offset is out of range"
    if not _int_in(m.tags_code, INT64_MIN, INT64_MAX):
        return "the tags code is out of range"
    if not isinstance(m.body, bytes | bytearray | memoryview):
        return "the body is not bytes"
    if not isinstance(m.properties_string, str):
        return "the properties are not a string"
    try:
        m.properties_string.encode()
    except UnicodeEncodeError:
        return "the properties are not valid UTF-8"
    try:
        pack_host(m.born_host)
    except (ValueError, TypeError, AttributeError, struct.error):
        return "the born host is not host:port"
    return None


_NOTHING = object()  # "none seen yet", unlike any value a message may hold


def _illegal(msgs: list[MessageExtBrokerInner], exc: Exception | None = None
             ) -> tuple[PutMessageResult, list[DispatchRequest]]:
    """MESSAGE_ILLEGAL (the slow path: say which field is wrong)."""
    detail = next((p for p in map(message_problem, msgs) if p is not None), None)
    if detail is None:
        detail = f"the message cannot be encoded: {exc}"
    return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, detail=detail), []


@dataclass(slots=True)
class MessageExtBrokerInner:
    """A message on its way into the commit log."""

    topic: str
    queue_id: int
    flag: int
    body: bytes
    properties_string: str
    tags_code: int = 0
    keys: str | None = None
    uniq_key: str | None = None
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


class BatchKernel(NamedTuple):
    """``batch_records_kernel``'s two functions (compiled, or its plain Python
    source in the tests)."""

    encode_batch: Callable[..., Any]
    stamp_batch: Callable[..., Any]


def compiled_batch_kernel() -> BatchKernel | None:
    """``batch_records_kernel`` compiled (deploy/speedups.py), when built from
    the source beside this file and not turned off; else None."""
    source = Path(__file__).with_name("batch_records_kernel.py")
    encode = compiled("broker.store._batch_records_kernel_c", source, "encode_batch")
    stamp = compiled("broker.store._batch_records_kernel_c", source, "stamp_batch")
    return None if encode is None or stamp is None else BatchKernel(encode, stamp)


_BATCH_KERNEL = compiled_batch_kernel()


# batches up to this many records keep their msgId format cached: at most 64
# formats of 33 bytes a record (about 2 MiB), whatever counts peers send
_CACHED_IDS_MAX = 1024


@lru_cache(maxsize=64)
def _msg_ids_format(id_head: str, count: int) -> str:
    return ",".join([id_head + "%016X"] * count)


def msg_ids(id_head: str, offsets: list[int]) -> str:
    """The comma-separated offset msgIds of records at ``offsets`` (``id_head``
    then 16 upper-case hex digits each), made by one ``%`` of a format: 100 ns
    a record, against 250 for an f-string per record."""
    n = len(offsets)
    fmt = (_msg_ids_format(id_head, n) if n <= _CACHED_IDS_MAX
           else ",".join([id_head + "%016X"] * n))
    return fmt % tuple(offsets)


class DispatchRequest(NamedTuple):
    """What the indexes need to know of one stored record. A named tuple: the
    put path makes one per message with ``tuple.__new__`` (90 ns against 360
    for a dataclass's ``__init__``)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int


class CommitLog:
    def __init__(self, store_dir: Path, file_size: int, store_host: str,
                 max_message_size: int, delay_levels: dict[int, int] | None = None,
                 warm: bool = False) -> None:
        # SCHEDULE_TOPIC_XXXX queue n holds delay level n + 1; its consume-queue
        # tag field carries the delivery time instead of a tag hash (as RocketMQ).
        self.delay_levels = delay_levels or {}
        # warm: files made ahead have every block written (warmMapedFileEnable)
        self.mapped_file_queue = MappedFileQueue(store_dir, file_size, "commit-log file", warm)
        self.file_size = file_size
        self.store_host = b""
        self._id_head = ""  # offset msgIds: the store host's hex + 16 hex digits
        self.set_store_host(store_host)
        self.max_message_size = max_message_size
        self.topic_queue_table: dict[str, int] = {}
        self._lock = threading.Lock()
        # append_data: (log end, offset of the next record header) as of the
        # last replica append; stale once anything else moves the end.
        self._replica_mark: tuple[int, int] | None = None
        # put_batch_body's compiled loops (None: not built or turned off)
        self.batch_kernel: BatchKernel | None = _BATCH_KERNEL

    def set_store_host(self, addr: str) -> None:
        """The address ``host:port`` records written from now on carry."""
        self.store_host = pack_host(addr)
        self._id_head = self.store_host.hex().upper()

    # ---- append ----------------------------------------------------------------

    def put_messages(
        self, msgs: list[MessageExtBrokerInner], mixed: bool = False
    ) -> tuple[PutMessageResult, list[DispatchRequest]]:
        """Append one message, or a batch (one topic and queue, one file).

        With ``mixed`` the messages may go to different topics and queues
        (each gets its own queue's next offset); they are still written with
        one copy into one file, so they land together or not at all.

        Raises AllocationError (DiskFullError) when the file it needs cannot
        be created; nothing is written then.
        """
        encoded: list[tuple[MessageExtBrokerInner, bytes, bytes, int, int]] = []
        add = encoded.append
        total = 0
        max_body = self.max_message_size
        topic: object = _NOTHING  # the last topic checked (any value can be wrong), its field
        topic_field = b""
        fixed = 0
        pack_props_len = PROPERTIES_LENGTH.pack
        try:
            for m in msgs:
                # Cheap checks here (protocol.names caches its topic checks; a
                # batch's messages share one topic, checked once); the other
                # integer ranges are struct's when the record is encoded.
                if m.topic is not topic:
                    if topic_problem(m.topic) is not None:
                        return _illegal(msgs)
                    topic_b = m.topic.encode()
                    if len(topic_b) > MAX_TOPIC_BYTES:
                        return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL), []
                    topic, topic_field = m.topic, topic_part(topic_b)
                    fixed = record_size(0, len(topic_b), 0)
                if m.queue_id < 0 or m.reconsume_times < 0 or not (
                        INT64_MIN <= m.tags_code <= INT64_MAX):
                    return _illegal(msgs)
                props_b = m.properties_string.encode()
                if len(props_b) > MAX_PROPERTIES_BYTES:
                    return PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED), []
                body = m.body
                if len(body) > max_body:
                    return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL), []
                size = fixed + len(body) + len(props_b)  # record_size, inline
                # properties_part and body_crc, inline
                add((m, topic_field, pack_props_len(len(props_b)) + props_b, size,
                     crc32(body) & 0x7FFFFFFF))
                total += size
        except (TypeError, ValueError, AttributeError) as exc:  # UnicodeEncodeError included
            return _illegal(msgs, exc)
        if not encoded or total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL), []
        first = encoded[0][0]
        nexts: dict[str, int] | None = {} if mixed else None

        def encode(start: int, queue_offset: int
                   ) -> tuple[bytes, AppendMessageResult, list[DispatchRequest]]:
            offsets: list[int] | None = None
            if nexts is not None:  # under the lock: each queue's next offset
                offsets = []
                table = self.topic_queue_table
                for m in msgs:
                    k = f"{m.topic}-{m.queue_id}"
                    o = nexts.get(k, table.get(k, 0))
                    offsets.append(o)
                    nexts[k] = o + 1
            return self._encode(encoded, start, total, queue_offset, offsets)

        try:
            return self._append(total, f"{first.topic}-{first.queue_id}", encode, nexts)
        except (struct.error, ValueError, OverflowError, TypeError, AttributeError) as exc:
            return _illegal(msgs, exc)

    def put_batch(self, topic: str, queue_id: int, items: list[tuple[int, bytes, str]], *,
                  sys_flag: int, born_timestamp: int, born_host: str,
                  reconsume_times: int,
                  ) -> tuple[PutMessageResult, list[DispatchRequest]] | None:
        """Append a producer's batch as it came off the wire: the (flag, body,
        properties text) of each message (protocol.batch.decode_batch), one
        topic and queue. The records are those ``put_messages`` writes for
        ``build_batch_inners`` of the same arguments, made without a message
        object each (a fifth of a batched send's broker CPU).

        Returns None, writing nothing, when anything is out of the ordinary (a
        topic, size, range or text that ``put_messages`` refuses, or the
        schedule topic): the caller then puts the messages the general way,
        which says what is wrong. Raises AllocationError as ``put_messages``."""
        if not items:
            return None
        fields = self._batch_fields(topic, queue_id, sys_flag, born_timestamp, born_host,
                                    reconsume_times)
        if fields is None:
            return None
        topic_field, fixed, born_field = fields
        max_body = self.max_message_size
        pack_props_len = PROPERTIES_LENGTH.pack
        has_tags, has_keys = PROPERTY_TAGS + "\x01", PROPERTY_KEYS + "\x01"
        pre: list[tuple[int, bytes, bytes, int, int, int, str | None, str | None]] = []
        add = pre.append
        total = 0
        try:
            for flag, body, text in items:
                props_b = text.encode()
                if len(props_b) > MAX_PROPERTIES_BYTES or len(body) > max_body:
                    return None
                size = fixed + len(body) + len(props_b)
                tags = find_property(text, PROPERTY_TAGS) if has_tags in text else None
                add((flag, body, pack_props_len(len(props_b)) + props_b, size,
                     crc32(body) & 0x7FFFFFFF, tags_hash_code(tags) if tags else 0,
                     find_property(text, PROPERTY_KEYS) if has_keys in text else None,
                     find_property(text, PROPERTY_UNIQ_KEY)))
                total += size
        except (TypeError, ValueError, AttributeError):  # UnicodeEncodeError included
            return None
        if total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            return None

        def encode(start: int, queue_offset: int
                   ) -> tuple[bytes, AppendMessageResult, list[DispatchRequest]]:
            now = int(time.time() * 1000)
            phys = start
            parts: list[bytes] = []
            add_part = parts.append
            dispatches: list[DispatchRequest] = []
            add_dispatch = dispatches.append
            offsets: list[int] = []
            add_offset = offsets.append
            pack_head = RECORD_HEAD.pack
            store_host = self.store_host
            new_tuple = tuple.__new__
            for flag, body, props_field, size, crc, tags_code, keys, uniq_key in pre:
                add_part(pack_head(size, MESSAGE_MAGIC_CODE, crc, queue_id, flag, queue_offset,
                                   phys, sys_flag, born_timestamp, born_field, now, store_host,
                                   reconsume_times, 0, len(body)))
                add_part(body)
                add_part(topic_field)
                add_part(props_field)
                add_dispatch(new_tuple(DispatchRequest, (
                    topic, queue_id, phys, size, tags_code, now, queue_offset, keys, uniq_key,
                    sys_flag,
                )))
                add_offset(phys)
                phys += size
                queue_offset += 1
            result = AppendMessageResult(
                AppendMessageStatus.PUT_OK, start, total, msg_ids(self._id_head, offsets), now,
                dispatches[0].consume_queue_offset, len(dispatches),
            )
            return b"".join(parts), result, dispatches

        try:
            return self._append(total, f"{topic}-{queue_id}", encode, None)
        except (struct.error, ValueError, OverflowError, TypeError, AttributeError):
            return None  # a flag, sysFlag or born time out of its field: nothing written

    def put_batch_body(self, topic: str, queue_id: int, data: bytes, *, sys_flag: int,
                       born_timestamp: int, born_host: str, reconsume_times: int,
                       ) -> tuple[PutMessageResult, list[DispatchRequest]] | None:
        """``put_batch`` of ``decode_batch(data)``, straight from the batch body
        by the compiled loops of ``batch_records_kernel.py``: each body and
        properties field copied once from the request into the records.

        None, with nothing written, where those loops are not in use (not
        built, stale, or turned off), where ``put_batch`` would answer None,
        and where the body holds anything out of the ordinary (a bad layout,
        an empty or too long body, properties not UTF-8, a TRAN_MSG
        property): the caller then decodes the body and goes the general way,
        which says what is wrong. Raises AllocationError as ``put_messages``."""
        kernel = self.batch_kernel
        if kernel is None or type(data) is not bytes:
            return None
        fields = self._batch_fields(topic, queue_id, sys_flag, born_timestamp, born_host,
                                    reconsume_times)
        if fields is None:
            return None
        topic_field, fixed, born_field = fields
        laid = kernel.encode_batch(data, fixed, topic_field, queue_id, sys_flag, born_timestamp,
                                   born_field, self.store_host, reconsume_times,
                                   self.max_message_size, MAX_PROPERTIES_BYTES, crc32,
                                   tags_hash_code)
        if laid is None:
            return None
        records, metas = laid
        total = len(records)
        if not metas or total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            return None
        stamp = kernel.stamp_batch

        def encode(start: int, queue_offset: int
                   ) -> tuple[bytearray, AppendMessageResult, list[DispatchRequest]]:
            now = int(time.time() * 1000)
            dispatches, ids = stamp(records, metas, topic, queue_id, sys_flag, start,
                                    queue_offset, now, tuple.__new__, DispatchRequest,
                                    self._id_head)
            return records, AppendMessageResult(
                AppendMessageStatus.PUT_OK, start, total, ids, now,
                queue_offset, len(dispatches),
            ), dispatches

        return self._append(total, f"{topic}-{queue_id}", encode, None)

    def _batch_fields(self, topic: str, queue_id: int, sys_flag: int, born_timestamp: int,
                      born_host: str, reconsume_times: int,
                      ) -> tuple[bytes, int, bytes] | None:
        """(topic field, record size without body and properties, born host
        field) for a batch's records; None for a batch the general path must
        take (the schedule topic, a bad topic, a value out of its field)."""
        if topic == SCHEDULE_TOPIC or topic_problem(topic) is not None:
            return None
        topic_b = topic.encode()
        if len(topic_b) > MAX_TOPIC_BYTES or not 0 <= queue_id <= INT32_MAX \
                or not 0 <= reconsume_times <= INT32_MAX \
                or not INT32_MIN <= sys_flag <= INT32_MAX \
                or not INT64_MIN <= born_timestamp <= INT64_MAX:
            return None
        try:
            born_field = pack_host(born_host)
        except (ValueError, TypeError, AttributeError, struct.error):
            return None
        return topic_part(topic_b), record_size(0, len(topic_b), 0), born_field

    def _append(self, total: int, key: str,
                encode: Callable[[int, int], tuple[bytes | bytearray, AppendMessageResult,
                                                   list[DispatchRequest]]],
                nexts: dict[str, int] | None,
                ) -> tuple[PutMessageResult, list[DispatchRequest]]:
        """Write ``total`` bytes of records made by ``encode(log offset, queue
        offset of queue ``key``)`` at the log's end (in the next file when they
        do not fit this one); then move the queues on: ``key`` by the records
        written, or each queue of ``nexts`` to its next offset (a mixed put).
        Raises what ``encode`` raises, with nothing written."""
        with self._lock:
            mfq = self.mapped_file_queue
            mf = mfq.last_for_append()
            target = mf
            if total + END_FILE_MIN_BLANK_LENGTH > mf.remaining:
                target = mfq.prepare_next()  # before the pad: a failure writes nothing
            start = target.file_from_offset + (target.wrote_position if target is mf else 0)
            table = self.topic_queue_table
            data, result, dispatches = encode(start, table.get(key, 0))
            if target is not mf:
                if mf.remaining > 0:
                    mf.append(encode_blank(mf.remaining))
                target = mfq.last_for_append()
            target.append(data)
            target.store_timestamp = result.store_timestamp
            if nexts is not None:
                table.update(nexts)
            else:
                table[key] = result.logics_offset + len(dispatches)
            return PutMessageResult(PutMessageStatus.PUT_OK, result), dispatches

    def _encode(self, encoded: list, wrote_offset: int, total: int, queue_offset: int,
                queue_offsets: list[int] | None = None,
                ) -> tuple[bytes, AppendMessageResult, list[DispatchRequest]]:
        """The bytes of the records appended at ``wrote_offset`` (nothing written):
        queue offsets from ``queue_offset`` on, or ``queue_offsets``, one per
        record. Raises struct.error for an integer out of its field's range.

        The record layout is protocol.record's (``encode_record``), written
        here in one loop: the sizes were checked by ``put_messages``, and the
        topic and properties arrive as their fields (``topic_part``,
        ``properties_part``)."""
        now = int(time.time() * 1000)
        phys = wrote_offset
        parts: list[bytes] = []
        add = parts.append
        dispatches: list[DispatchRequest] = []
        add_dispatch = dispatches.append
        offsets: list[int] = []  # each record's commit-log offset, for its msgId
        add_offset = offsets.append
        pack_head = RECORD_HEAD.pack
        store_host = self.store_host
        schedule_levels = self.delay_levels
        new_tuple = tuple.__new__
        born_host: object = _NOTHING  # a batch's messages share one: packed once
        born_field = b""
        for i, (m, topic_field, props_field, size, crc) in enumerate(encoded):
            if queue_offsets is not None:
                queue_offset = queue_offsets[i]
            body = m.body
            if m.born_host is not born_host:
                born_host = m.born_host
                born_field = pack_host(m.born_host)
            add(pack_head(size, MESSAGE_MAGIC_CODE, crc, m.queue_id, m.flag, queue_offset, phys,
                          m.sys_flag, m.born_timestamp, born_field, now, store_host,
                          m.reconsume_times, m.prepared_transaction_offset, len(body)))
            add(body)
            add(topic_field)
            add(props_field)
            tags_code = m.tags_code
            topic = m.topic
            if topic == SCHEDULE_TOPIC:
                tags_code = now + schedule_levels.get(m.queue_id + 1, 0)
            add_dispatch(new_tuple(DispatchRequest, (
                topic, m.queue_id, phys, size, tags_code, now, queue_offset,
                m.keys, m.uniq_key, m.sys_flag,
            )))
            add_offset(phys)
            phys += size
            queue_offset += 1
        result = AppendMessageResult(
            AppendMessageStatus.PUT_OK, wrote_offset, total,
            msg_ids(self._id_head, offsets), now,
            dispatches[0].consume_queue_offset, len(dispatches),
        )
        return b"".join(parts), result, dispatches

    # ---- replica append (a slave writes its master's bytes) ----------------------

    def append_data(self, start_offset: int, data: bytes | bytearray | memoryview) -> int:
        """Write a master's commit-log bytes, unchanged, at ``start_offset``:
        this log's end, or the start of a file when the log holds no bytes
        (a new slave of a master whose older files are gone). Returns the new
        end. Nothing is re-encoded: queue offsets and store times are the
        master's.

        ``data`` may end inside a record and may span file ends. Before a
        byte is written, every record header it completes is checked: a
        known magic code, a message that leaves room for a BLANK in its file,
        a BLANK that ends exactly at a file end. The master's files end at
        those offsets only when both use the same ``mapedFileSizeCommitLog``,
        so a different file size is caught here. Raises StoreError, nothing
        written, when the bytes do not belong at ``start_offset``; raises
        AllocationError (DiskFullError) when a file cannot be created: the
        bytes before that file stay written and ``max_offset`` says how far
        the append got.
        """
        with self._lock:
            mfq = self.mapped_file_queue
            end = mfq.max_offset
            empty = end == mfq.min_offset  # no bytes (no file, or one empty file)
            if start_offset != end and not (empty and start_offset >= 0
                                            and start_offset % self.file_size == 0):
                raise StoreError(
                    f"replica bytes for commit-log offset {start_offset} do not start at "
                    f"this log's end {end}"
                )
            if not data:
                return end
            if empty:
                header_at = start_offset  # a file starts with a record
            else:
                header_at = self._replica_header_at(end)
            tail = self._read_tail(header_at, start_offset)
            buf = tail + data if tail else data
            header_at = self._check_headers(header_at, buf, start_offset - len(tail),
                                            start_offset + len(data))
            if empty and start_offset != end:
                mfq.delete_all()
            n = len(data)
            done = 0
            try:
                while done < n:
                    mf = mfq.last_for_append(start_offset)
                    k = min(mf.remaining, n - done)
                    mf.append(data if k == n else data[done : done + k])
                    done += k
            finally:
                # after a partial write the mark is stale: recomputed next time
                self._replica_mark = (mfq.max_offset, header_at) if done == n else None
            return mfq.max_offset

    def _read_tail(self, header_at: int, end: int) -> bytes:
        """The bytes of a record header begun before ``end`` (at most 7)."""
        if header_at >= end:
            return b""
        mf = self.mapped_file_queue.find_by_offset(header_at)
        if mf is None:
            raise StoreError(f"no commit-log file holds offset {header_at}")
        return mf.read(header_at - mf.file_from_offset, end - header_at)

    def _replica_header_at(self, end: int) -> int:
        """Offset of the first record header not wholly before ``end``."""
        mark = self._replica_mark
        if mark is not None and mark[0] == end:
            return mark[1]
        # a file starts with a record: walk the last file's headers
        last = self.mapped_file_queue.last()
        assert last is not None
        if last.is_full():
            return end
        start = last.file_from_offset
        return self._check_headers(start, last.mm, start, end)

    def _check_headers(self, pos: int, buf: Buffer, buf_start: int, stop: int) -> int:
        """Walk the record headers from log offset ``pos`` up to ``stop``
        (``buf`` holds the log's bytes from ``buf_start``) and return the
        offset of the first header not complete before ``stop``. Raises
        StoreError at a header that cannot be there."""
        fs = self.file_size
        unpack_from = BLANK_HEAD.unpack_from
        while pos + BLANK_MIN_SIZE <= stop:
            total, magic = unpack_from(buf, pos - buf_start)
            file_end = pos - pos % fs + fs
            if magic == BLANK_MAGIC_CODE:
                if total < BLANK_MIN_SIZE or pos + total != file_end:
                    raise StoreError(
                        f"replica bytes hold a BLANK at commit-log offset {pos} of {total} bytes "
                        f"that does not end at this log's file end {file_end}: does the master "
                        f"use another mapedFileSizeCommitLog than {fs}?"
                    )
            elif magic == MESSAGE_MAGIC_CODE:
                if total < RECORD_HEAD_SIZE + 3 or pos + total + END_FILE_MIN_BLANK_LENGTH > file_end:
                    raise StoreError(
                        f"replica bytes hold a record at commit-log offset {pos} of {total} bytes "
                        f"that does not fit this log's file ending at {file_end}: does the master "
                        f"use another mapedFileSizeCommitLog than {fs}?"
                    )
            else:
                raise StoreError(
                    f"replica bytes hold no record at commit-log offset {pos} "
                    f"(magic code {magic & 0xFFFFFFFF:#x})"
                )
            pos += total
        return pos

    # ---- read ------------------------------------------------------------------

    def get_raw(self, offset: int, max_bytes: int) -> bytes | None:
        """Up to ``max_bytes`` of the log from ``offset``, within the file
        holding it (what a master sends a slave). b"" at the end of the
        log; None when no file holds ``offset`` (before the min offset)."""
        if offset >= self.max_offset:
            return b"" if offset == self.max_offset else None
        mf = self.mapped_file_queue.find_by_offset(offset)
        if mf is None or offset < mf.file_from_offset:
            return None
        pos = offset - mf.file_from_offset
        return mf.read(pos, max(0, min(max_bytes, mf.wrote_position - pos)))

    def get_data(self, offset: int, size: int) -> bytes | None:
        mf = self.mapped_file_queue.find_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + size > mf.wrote_position:
            return None
        return mf.read(pos, size)

    @property
    def min_offset(self) -> int:
        return self.mapped_file_queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.mapped_file_queue.max_offset

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    # ---- flush -----------------------------------------------------------------

    def flush(self) -> bool:
        return self.mapped_file_queue.flush()

    # ---- recovery --------------------------------------------------------------

    def load(self) -> None:
        self.mapped_file_queue.load()

    def recover(self, abnormal: bool, checkpoint_ms: int = 0) -> tuple[int, int]:
        """Find the end of valid data and cut everything after it.

        Normal recovery checks the last 3 files. Abnormal recovery starts at the
        newest file whose first record was stored at or before ``checkpoint_ms``
        (everything before it was flushed). Every record's magic code, sizes and
        body CRC are checked. Returns (scan start offset, end offset).
        """
        files = self.mapped_file_queue.files
        if not files:
            return 0, 0
        if abnormal:
            start_idx = self._abnormal_start(checkpoint_ms)
        else:
            start_idx = max(0, len(files) - 3)
        t0 = time.monotonic()
        start = end = files[start_idx].file_from_offset
        for n, mf in enumerate(files[start_idx:], 1):
            if n % 4 == 0:
                log.info("recovering commit log", file=mf.path.name, scanned_files=n)
            pos, complete = self._scan_file(mf)
            end = mf.file_from_offset + pos
            if not complete:
                break
        self.mapped_file_queue.truncate_dirty_files(end)
        log.info("commit log recovered", abnormal=abnormal, start_offset=start, end_offset=end,
                 files=len(self.mapped_file_queue.files),
                 seconds=round(time.monotonic() - t0, 3))
        return start, end

    def _abnormal_start(self, checkpoint_ms: int) -> int:
        files = self.mapped_file_queue.files
        for idx in range(len(files) - 1, -1, -1):
            mf = files[idx]
            check = check_record(mf.mm, 0, mf.file_size, verify_crc=False)
            if check.status is not RecordStatus.MESSAGE:
                continue
            (stored,) = _LONG.unpack_from(mf.mm, OFF_STORE_TIMESTAMP)
            if checkpoint_ms and stored <= checkpoint_ms:
                log.info("abnormal recovery starts at the checkpoint's file", file=mf.path.name)
                return idx
        return 0

    def delete_expired_files(self, expired_ms: int, now_ms: int, force: bool, max_files: int) -> int:
        """Delete the oldest files last modified more than ``expired_ms`` ago (any
        age when ``force``), never the file being written. Returns how many."""
        files = self.mapped_file_queue.files
        deleted = 0
        while len(files) > 1 and deleted < max_files:
            mf = files[0]
            if not force and mf.last_modified_ms() + expired_ms > now_ms:
                break
            log.info("deleting commit-log file", file=mf.path.name, forced=force)
            mf.destroy()
            files.pop(0)
            deleted += 1
        return deleted

    @property
    def flushed_where(self) -> int:
        return self.mapped_file_queue.flushed_where

    def preallocate_next(self) -> None:
        """Create and reserve the next file once the current one is half full."""
        if self.wants_next_file():
            self.mapped_file_queue.preallocate_next()

    def wants_next_file(self) -> bool:
        """Whether the current file is half full and its successor not made yet."""
        mfq = self.mapped_file_queue
        last = mfq.last()
        return (last is not None and last.wrote_position * 2 >= self.file_size
                and not mfq.next_ready)

    def _scan_file(self, mf: MappedFile) -> tuple[int, bool]:
        """(end of valid data in the file, whether the file is complete)."""
        buf = mf.mm
        pos = 0
        limit = mf.file_size
        while True:
            check = check_record(buf, pos, limit, verify_crc=True)
            if check.status is RecordStatus.MESSAGE:
                pos += check.size
                if pos == limit:
                    return pos, True
            elif check.status is RecordStatus.BLANK:
                return limit, True
            elif check.status is RecordStatus.END:
                return pos, False
            else:
                log.warning("corrupt record, truncating", file=mf.path.name, pos=pos,
                            reason=check.reason)
                return pos, False

    def close(self) -> None:
        self.mapped_file_queue.close()
