"""The commit-log record codec, RocketMQ 4.x layout (IPv4 hosts).

    offset size field
    0      4    TOTALSIZE
    4      4    MAGICCODE      0xdaa320a7 (message) / 0xcbd43194 (BLANK pad)
    8      4    BODYCRC        crc32(body) & 0x7fffffff
    12     4    QUEUEID
    16     4    FLAG
    20     8    QUEUEOFFSET
    28     8    PHYSICALOFFSET
    36     4    SYSFLAG
    40     8    BORNTIMESTAMP  (ms)
    48     8    BORNHOST       IPv4 (4) + port (4)
    56     8    STORETIMESTAMP (ms)
    64     8    STOREHOST      IPv4 (4) + port (4)
    72     4    RECONSUMETIMES
    76     8    PREPARED TRANSACTION OFFSET
    84     4+n  BODY
    ..     1+n  TOPIC
    ..     2+n  PROPERTIES     key\\x01value\\x02...

All integers are big-endian, signed as in Java. A pull response body is a
concatenation of these records, exactly as the store holds them.
"""

from __future__ import annotations

import mmap
import socket
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeAlias

from protocol.crc import crc32
from protocol.errors import CorruptRecordError
from protocol.message import MessageExt, offset_msg_id, string_to_properties
from protocol.speedups import compiled

Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap

MESSAGE_MAGIC_CODE = 0xDAA320A7
BLANK_MAGIC_CODE = 0xCBD43194

# TOTALSIZE .. BODY length, 88 bytes.
RECORD_HEAD = struct.Struct(">iIiiiqqiq8sq8siqi")
RECORD_HEAD_SIZE = RECORD_HEAD.size
# The head's fields decode_columns keeps (the others skipped as padding).
_COLUMNS_HEAD = struct.Struct(">iI4xi4xqqiq8xq8s12xi")
# A BLANK pad: TOTALSIZE + MAGICCODE, the rest of the file end is filler.
BLANK_HEAD = struct.Struct(">iI")
BLANK_MIN_SIZE = BLANK_HEAD.size

OFF_TOTAL_SIZE = 0
OFF_MAGIC = 4
OFF_BODY_CRC = 8
OFF_QUEUE_ID = 12
OFF_QUEUE_OFFSET = 20
OFF_PHYSICAL_OFFSET = 28
OFF_SYS_FLAG = 36
OFF_STORE_TIMESTAMP = 56
OFF_STORE_HOST = 64
OFF_RECONSUME_TIMES = 72
OFF_BODY_LEN = 84

# SYSFLAG bits.
FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC


def transaction_type(sys_flag: int) -> int:
    """The transaction bits of a sysFlag (one of the TRANSACTION_*_TYPE values)."""
    return sys_flag & TRANSACTION_TYPE_MASK


def with_transaction_type(sys_flag: int, tx_type: int) -> int:
    """``sys_flag`` with its transaction bits set to ``tx_type`` (RocketMQ's
    MessageSysFlag.resetTransactionValue)."""
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | tx_type

MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767


def body_crc(body: bytes) -> int:
    return crc32(body) & 0x7FFFFFFF


@lru_cache(maxsize=4096)
def pack_host(addr: str) -> bytes:
    """``"1.2.3.4:5678"`` -> 8 bytes (IPv4 + port)."""
    host, _, port = addr.rpartition(":")
    try:
        ip = socket.inet_aton(host or "0.0.0.0")
    except OSError:
        ip = b"\x00\x00\x00\x00"
    return ip + struct.pack(">i", int(port or 0))


@lru_cache(maxsize=4096)
def unpack_host(data: bytes) -> str:
    (port,) = struct.unpack(">i", data[4:8])
    return f"{socket.inet_ntoa(data[:4])}:{port}"


# BODYCRC and BODY length of a record head, read from its start in one call
_CRC_AND_BODY_LEN = struct.Struct(f">{OFF_BODY_CRC}xi{OFF_BODY_LEN - OFF_BODY_CRC - 4}xi")


def record_crc_ok(record: Buffer) -> bool:
    """Whether one whole message record's body matches its BODYCRC field."""
    return check_run(record, ((0, len(record)),))[1] == 1


def check_run(buf: Buffer, run: Sequence[tuple[int, int]]
              ) -> tuple[list[bytes | memoryview], int, list[int]]:
    """Records lying back to back in ``buf``, one per (commit-log offset, size)
    of ``run``: (the records whose body matches its BODYCRC field, as pieces of
    ``buf``; how many those are; the offsets of those that do not, or that the
    record's sizes do not fit). Good records next to each other make one piece,
    and when every record is good and they fill ``buf``, the piece is ``buf``
    itself (when it is ``bytes``): a pull's run of records goes out without a
    view or a copy each."""
    view = memoryview(buf)
    pieces: list[bytes | memoryview] = []
    bad: list[int] = []
    unpack = _CRC_AND_BODY_LEN.unpack_from
    head = RECORD_HEAD_SIZE
    limit = len(buf)
    at = 0
    start = 0  # where the stretch of good records before ``at`` starts
    count = 0
    for phys, size in run:
        end = at + size
        if at >= 0 and size >= head and end <= limit:
            crc, body_len = unpack(buf, at)
            if (0 <= body_len <= size - head
                    and crc32(view[at + head:at + head + body_len]) & 0x7FFFFFFF == crc):
                count += 1
                at = end
                continue
        if start < at:
            pieces.append(view[start:at])
        bad.append(phys)
        at = end
        start = at
    if start < at <= limit:
        whole = start == 0 and at == limit and type(buf) is bytes
        pieces.append(buf if whole else view[start:at])  # type: ignore[arg-type]
    return pieces, count, bad


def record_size(body_len: int, topic_len: int, props_len: int) -> int:
    return RECORD_HEAD_SIZE + body_len + 1 + topic_len + 2 + props_len


def encode_record(
    *,
    topic: bytes,
    queue_id: int,
    flag: int,
    body: bytes,
    properties: bytes,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    queue_offset: int,
    physical_offset: int,
    crc: int | None = None,
) -> bytes:
    """One record's bytes. ``topic`` and ``properties`` are already UTF-8."""
    if len(topic) > MAX_TOPIC_BYTES:
        raise ValueError(f"topic longer than {MAX_TOPIC_BYTES} bytes")
    if len(properties) > MAX_PROPERTIES_BYTES:
        raise ValueError(f"properties longer than {MAX_PROPERTIES_BYTES} bytes")
    total = RECORD_HEAD_SIZE + len(body) + 1 + len(topic) + 2 + len(properties)
    head = RECORD_HEAD.pack(
        total,
        MESSAGE_MAGIC_CODE,
        body_crc(body) if crc is None else crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        len(body),
    )
    return b"".join((head, body, topic_part(topic), properties_part(properties)))


def topic_part(topic: bytes) -> bytes:
    """The TOPIC field: its length byte, then the UTF-8 name."""
    return bytes((len(topic),)) + topic


def properties_part(properties: bytes) -> bytes:
    """The PROPERTIES field: its 2-byte length, then the text."""
    return PROPERTIES_LENGTH.pack(len(properties)) + properties


def encode_blank(size: int) -> bytes:
    """A BLANK pad of ``size`` bytes (at least 8) for the end of a file."""
    return BLANK_HEAD.pack(size, BLANK_MAGIC_CODE) + bytes(size - BLANK_MIN_SIZE)


def encode_msg_id(store_host: bytes, commit_log_offset: int) -> str:
    """RocketMQ's offset msgId: hex(store host 8 bytes + commit-log offset 8 bytes)."""
    return offset_msg_id(store_host.hex().upper(), commit_log_offset)


def decode_msg_id(msg_id: str) -> tuple[str, int]:
    """Offset msgId -> (store address, commit-log offset). Raises ValueError."""
    if len(msg_id) != 32:
        raise ValueError(f"not an offset message id: {msg_id!r}")
    raw = bytes.fromhex(msg_id)
    return unpack_host(raw[:8]), struct.unpack(">q", raw[8:])[0]


class RecordStatus(Enum):
    """What ``check_record`` found at a position."""

    MESSAGE = "message"
    BLANK = "blank"
    END = "end"  # zeroed bytes or no room for a header: the data stops here
    CORRUPT = "corrupt"


@dataclass(frozen=True, slots=True)
class RecordCheck:
    status: RecordStatus
    size: int
    reason: str = ""


def check_record(buf: Buffer, pos: int, limit: int, verify_crc: bool = True) -> RecordCheck:
    """Validate the record at ``pos`` (the readable data ends at ``limit``).

    Used by recovery scans: magic code, every length field and the body CRC.
    """
    room = limit - pos
    if room < BLANK_MIN_SIZE:
        return RecordCheck(RecordStatus.END, 0)
    total, magic = BLANK_HEAD.unpack_from(buf, pos)
    if total == 0 and magic == 0:
        return RecordCheck(RecordStatus.END, 0)
    if magic == BLANK_MAGIC_CODE:
        if total < BLANK_MIN_SIZE or total > room:
            return RecordCheck(RecordStatus.CORRUPT, 0, f"bad BLANK size {total}")
        return RecordCheck(RecordStatus.BLANK, total)
    if magic != MESSAGE_MAGIC_CODE:
        return RecordCheck(RecordStatus.CORRUPT, 0, f"bad magic code {magic:#x}")
    if total < RECORD_HEAD_SIZE + 3 or total > room:
        return RecordCheck(RecordStatus.CORRUPT, 0, f"bad total size {total}")
    (body_len,) = struct.unpack_from(">i", buf, pos + OFF_BODY_LEN)
    p = pos + RECORD_HEAD_SIZE + body_len
    if body_len < 0 or p + 1 > pos + total:
        return RecordCheck(RecordStatus.CORRUPT, 0, f"bad body length {body_len}")
    topic_len = buf[p]
    p += 1 + topic_len
    if p + 2 > pos + total:
        return RecordCheck(RecordStatus.CORRUPT, 0, f"bad topic length {topic_len}")
    (props_len,) = struct.unpack_from(">h", buf, p)
    if props_len < 0 or p + 2 + props_len != pos + total:
        return RecordCheck(RecordStatus.CORRUPT, 0, "sizes do not add up to the total")
    if verify_crc:
        (crc,) = struct.unpack_from(">i", buf, pos + OFF_BODY_CRC)
        start = pos + RECORD_HEAD_SIZE
        if body_crc(bytes(buf[start : start + body_len])) != crc:
            return RecordCheck(RecordStatus.CORRUPT, 0, "body CRC mismatch")
    return RecordCheck(RecordStatus.MESSAGE, total)


PROPERTIES_LENGTH = struct.Struct(">h")  # the PROPERTIES field's length


def _record_layout(buf: Buffer, pos: int, limit: int, total: int, magic: int,
                   body_len: int) -> tuple[int, int, int]:
    """Check the sizes of the record at ``pos`` (its head already unpacked;
    the data ends at ``limit``) and return (topic length byte, properties,
    end) positions. Raises CorruptRecordError (or struct.error/IndexError on
    a buffer too short, which the callers turn into one)."""
    if magic != MESSAGE_MAGIC_CODE:
        raise CorruptRecordError(f"bad magic code {magic:#x} at {pos}")
    end = pos + total
    if total < RECORD_HEAD_SIZE + 3 or end > limit or body_len < 0:
        raise CorruptRecordError(f"bad record size {total} at {pos}")
    topic_at = pos + RECORD_HEAD_SIZE + body_len
    if topic_at + 3 > end:
        raise CorruptRecordError(f"bad body length at {pos}")
    props_at = topic_at + 3 + buf[topic_at]
    (props_len,) = PROPERTIES_LENGTH.unpack_from(buf, props_at - 2)
    if props_len < 0 or props_at + props_len != end:
        raise CorruptRecordError(f"record sizes do not add up at {pos}")
    return topic_at, props_at, end


_BODY_LENGTH = struct.Struct(">i")


def record_properties(record: Buffer, pos: int = 0) -> str:
    """The PROPERTIES text (``key\\x01value\\x02...``) of the message record
    at ``pos``, without decoding the rest; bytes that are not UTF-8 are
    replaced (as Java's ``new String(bytes, UTF_8)``). Raises CorruptRecordError."""
    try:
        total, magic = BLANK_HEAD.unpack_from(record, pos)
        (body_len,) = _BODY_LENGTH.unpack_from(record, pos + OFF_BODY_LEN)
        _, props_at, end = _record_layout(record, pos, len(record), total, magic, body_len)
    except (struct.error, IndexError) as exc:
        raise CorruptRecordError(f"undecodable record at {pos}: {exc}") from exc
    return bytes(record[props_at:end]).decode("utf-8", "replace")


class _DecodeCache:
    """What repeats from record to record of one buffer (topic names, hosts,
    the hex of store hosts), decoded once."""

    __slots__ = ("topics", "hosts", "id_heads")

    def __init__(self) -> None:
        self.topics: dict[bytes, str] = {}
        self.hosts: dict[bytes, str] = {}
        self.id_heads: dict[bytes, str] = {}


def _decode_at(view: Buffer, pos: int, limit: int, verify_crc: bool,
               cache: _DecodeCache, extra: Mapping[str, str] | None = None) -> MessageExt:
    """The message record at ``pos`` (the data ends at ``limit``). Raises
    CorruptRecordError, or struct/Index/UnicodeDecodeError for the callers
    to turn into one."""
    (total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
     born_ts, born_host, store_ts, store_host, reconsume, prepared,
     body_len) = RECORD_HEAD.unpack_from(view, pos)
    end = pos + total
    topic_at = pos + RECORD_HEAD_SIZE + body_len
    if (magic != MESSAGE_MAGIC_CODE or total < RECORD_HEAD_SIZE + 3 or end > limit
            or body_len < 0 or topic_at + 3 > end):
        _record_layout(view, pos, limit, total, magic, body_len)  # raises with the reason
    props_at = topic_at + 3 + view[topic_at]
    (props_len,) = PROPERTIES_LENGTH.unpack_from(view, props_at - 2)
    if props_len < 0 or props_at + props_len != end:
        raise CorruptRecordError(f"record sizes do not add up at {pos}")
    body = bytes(view[pos + RECORD_HEAD_SIZE : topic_at])
    if verify_crc and body_crc(body) != crc:
        raise CorruptRecordError(f"body CRC mismatch at {pos}")
    topic_b = bytes(view[topic_at + 1 : props_at - 2])
    topic = cache.topics.get(topic_b)
    if topic is None:
        topic = cache.topics[topic_b] = topic_b.decode()
    hosts = cache.hosts
    born = hosts.get(born_host)
    if born is None:
        born = hosts[born_host] = unpack_host(born_host)
    stored = hosts.get(store_host)
    if stored is None:
        stored = hosts[store_host] = unpack_host(store_host)
    id_head = cache.id_heads.get(store_host)
    if id_head is None:
        id_head = cache.id_heads[store_host] = store_host.hex().upper()
    # UTF-8 checked here; split into a dict when the message's properties are first read
    text = bytes(view[props_at:end]).decode() if props_at < end else ""
    return MessageExt(
        topic, body, None, flag, queue_id, queue_offset, physical_offset, sys_flag,
        born_ts, born, store_ts, stored, reconsume, prepared, crc, total, None, text, id_head,
        extra,
    )


# decode_record's cache, shared by its calls; emptied when it grows past this
_SINGLE = _DecodeCache()
_SINGLE_MAX = 4096


def decode_record(buf: Buffer, pos: int = 0, verify_crc: bool = False) -> MessageExt:
    """Decode the message record at ``pos``. Raises CorruptRecordError."""
    cache = _SINGLE
    if len(cache.topics) > _SINGLE_MAX or len(cache.hosts) > _SINGLE_MAX:
        cache.topics.clear()
        cache.hosts.clear()
        cache.id_heads.clear()
    try:
        return _decode_at(buf, pos, len(buf), verify_crc, cache)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"undecodable record at {pos}: {exc}") from exc


# MAGICCODE, QUEUEOFFSET, PHYSICALOFFSET and RECONSUMETIMES, the rest skipped
_POSITION_HEAD = struct.Struct(">4xI12xqq36xi")


def record_position(buf: Buffer, pos: int = 0) -> tuple[int, int, int]:
    """(queue offset, commit-log offset, reconsume times) of the record at
    ``pos``, read from its head without decoding the rest. Raises
    CorruptRecordError."""
    if pos < 0 or len(buf) - pos < RECORD_HEAD_SIZE:
        raise CorruptRecordError(f"no whole record head at {pos}")
    magic, queue_offset, physical_offset, reconsume = _POSITION_HEAD.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC_CODE:
        raise CorruptRecordError(f"bad magic code {magic:#x} at {pos}")
    return queue_offset, physical_offset, reconsume


# records_kernel.decode_records compiled (deploy/speedups.py), when built from the
# source beside this file and not turned off; else None (the loop below runs)
RECORDS_KERNEL_MODULE = "protocol._records_kernel_c"
RECORDS_KERNEL_SOURCE = Path(__file__).with_name("records_kernel.py")
RECORDS_KERNEL: Callable[..., Any] | None = compiled(
    RECORDS_KERNEL_MODULE, RECORDS_KERNEL_SOURCE, "decode_records")


def decode_records(buf: Buffer, verify_crc: bool = False,
                   extra: Mapping[str, str] | None = None) -> list[MessageExt]:
    """Decode a concatenation of message records (a pull response body);
    ``extra``: properties given to every message (``MessageExt.put_properties``;
    the one mapping, which must not change afterwards).
    Topic names and hosts repeat from record to record: decoded once per call.
    A ``bytes`` body goes to the compiled loop first (records_kernel.py); what
    that leaves (anything out of the ordinary) is decoded here, which says
    what is wrong."""
    kernel = RECORDS_KERNEL
    if kernel is not None and type(buf) is bytes:
        done: list[MessageExt] | None = kernel(buf, verify_crc, crc32, MessageExt, unpack_host,
                                               extra)
        if done is not None:
            return done
    out: list[MessageExt] = []
    pos = 0
    limit = len(buf)
    view = buf if isinstance(buf, bytes) else memoryview(buf)
    cache = _DecodeCache()
    try:
        while pos < limit:
            msg = _decode_at(view, pos, limit, verify_crc, cache, extra)
            out.append(msg)
            pos += msg.store_size
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"undecodable record at {pos}: {exc}") from exc
    return out


@dataclass(slots=True)
class RecordColumns:
    """Message records decoded column by column (``decode_columns``), for
    readers that build columnar batches and never need MessageExt objects.

    Bodies and property texts are memoryviews into the decoded buffer (no
    copy); a compressed body is already uncompressed (as bytes). Property
    texts are RocketMQ's UTF-8 ``key\\x01value\\x02...`` (``properties(i)``
    parses one).
    """

    queue_ids: list[int]
    queue_offsets: list[int]
    physical_offsets: list[int]
    born_timestamps: list[int]
    store_timestamps: list[int]
    store_hosts: list[bytes]
    bodies: list[memoryview | bytes]
    topics: list[str]
    property_texts: list[memoryview]

    def __len__(self) -> int:
        return len(self.queue_offsets)

    def offset_msg_id(self, i: int) -> str:
        """RocketMQ's offset msgId of message ``i``."""
        return offset_msg_id(self.store_hosts[i].hex().upper(), self.physical_offsets[i])

    def properties(self, i: int) -> dict[str, str]:
        return string_to_properties(bytes(self.property_texts[i]).decode())


def empty_columns() -> RecordColumns:
    return RecordColumns([], [], [], [], [], [], [], [], [])


def decode_columns(buf: bytes, out: RecordColumns | None = None,
                   stop_offset: int | None = None) -> RecordColumns:
    """Append the message records of ``buf`` (a pull response body) to ``out``
    (a new RecordColumns if None) and return it; with ``stop_offset``, stop at
    the first record of queue offset >= it (a pull body is in queue-offset
    order). The same checks as
    ``decode_record`` but UTF-8 of the properties, which the reader checks
    when it uses them; raises CorruptRecordError, leaving ``out`` holding the
    records before the bad one."""
    cols = empty_columns() if out is None else out
    queue_ids = cols.queue_ids
    queue_offsets = cols.queue_offsets
    physical_offsets = cols.physical_offsets
    born = cols.born_timestamps
    store = cols.store_timestamps
    hosts = cols.store_hosts
    bodies = cols.bodies
    topics = cols.topics
    props = cols.property_texts
    unpack = _COLUMNS_HEAD.unpack_from
    short = PROPERTIES_LENGTH.unpack_from
    view = memoryview(buf)
    pos = 0
    end = len(buf)
    last_topic = b""
    last_topic_text = ""
    while pos < end:
        try:
            (total, magic, queue_id, queue_offset, physical_offset, sys_flag, born_ts,
             store_ts, store_host, body_len) = unpack(buf, pos)
            rec_end = pos + total
            topic_at = pos + RECORD_HEAD_SIZE + body_len
            # _record_layout's checks, inline; it tells what is wrong
            if (magic != MESSAGE_MAGIC_CODE or total < RECORD_HEAD_SIZE + 3
                    or rec_end > end or body_len < 0 or topic_at + 3 > rec_end):
                _record_layout(buf, pos, end, total, magic, body_len)
            props_at = topic_at + 3 + buf[topic_at]
            props_len = short(buf, props_at - 2)[0]
            if props_len < 0 or props_at + props_len != rec_end:
                _record_layout(buf, pos, end, total, magic, body_len)
            body: memoryview | bytes = view[pos + RECORD_HEAD_SIZE : topic_at]
            topic = buf[topic_at + 1 : props_at - 2]
            if topic != last_topic:
                last_topic, last_topic_text = topic, topic.decode()
            if sys_flag & FLAG_COMPRESSED:
                try:
                    body = zlib.decompress(body)
                except zlib.error:
                    pass  # as ConsumerAPI: served as stored
        except (struct.error, IndexError, UnicodeDecodeError) as exc:
            raise CorruptRecordError(f"undecodable record at {pos}: {exc}") from exc
        if stop_offset is not None and queue_offset >= stop_offset:
            break
        queue_ids.append(queue_id)
        queue_offsets.append(queue_offset)
        physical_offsets.append(physical_offset)
        born.append(born_ts)
        store.append(store_ts)
        hosts.append(store_host)
        bodies.append(body)
        topics.append(last_topic_text)
        props.append(view[props_at:rec_end])
        pos = rec_end
    return cols
