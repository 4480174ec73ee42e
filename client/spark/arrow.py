"""Pull response records -> Arrow record batches of the ``rocketmq`` source's schema.

The Python worker hands Arrow batches to Spark as they are, so building them
column by column here (property maps split by Arrow compute kernels) replaces
Spark's per-value conversion of Python rows.

Two ways to the same batch:

- ``RecordScan`` (what the source uses): a loop only walks the record sizes
  of each pull body (``records_kernel.walk_records`` compiled where it is
  built, else in Python); the heads are then read for all records at once
  with NumPy (big-endian fields of a strided view) and the bodies and property
  texts are cut out of the joined pull bodies by Arrow's ``take``. About a
  third of the per-message cost of the other way.
- ``to_record_batch`` of ``RecordColumns`` (``decode_columns``, one record
  at a time): the reference, and what ``RecordScan`` falls back to for what
  it does not do itself: a compressed body, several topics in one batch, a
  malformed record (whose exact CorruptRecordError comes from there).

No Spark import: tested on its own, and the schema is checked against
Spark's own conversion in the Spark tests.
"""

from __future__ import annotations

import array
import functools
import itertools
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from protocol.errors import CorruptRecordError
from protocol.message import MessageConst, offset_msg_id
from protocol.record import (
    FLAG_COMPRESSED,
    MESSAGE_MAGIC_CODE,
    RECORD_HEAD_SIZE,
    RECORDS_KERNEL_MODULE,
    RECORDS_KERNEL_SOURCE,
    RecordColumns,
    decode_columns,
    empty_columns,
)
from protocol.speedups import compiled

TIMESTAMP = pa.timestamp("us", tz="UTC")
PROPERTIES = pa.map_(pa.string(), pa.string())

SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("brokerName", pa.string()),
    pa.field("queueId", pa.int32()),
    pa.field("queueOffset", pa.int64()),
    pa.field("msgId", pa.string()),
    pa.field("keys", pa.string()),
    pa.field("tags", pa.string()),
    pa.field("body", pa.binary()),
    pa.field("bornTimestamp", TIMESTAMP),
    pa.field("storeTimestamp", TIMESTAMP),
    pa.field("properties", PROPERTIES),
])

_KEYS = MessageConst.PROPERTY_KEYS
_TAGS = MessageConst.PROPERTY_TAGS
_UNIQ_KEY = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX

# Compute kernels get Arrow scalars made once: a Python value is converted on
# every call, and the conversion looks for dateutil each time (about 45 µs a
# call where it is not installed, more with Spark's zips on sys.path).
_ZERO, _ONE = pa.scalar(0, pa.int32()), pa.scalar(1, pa.int32())
_PAIR = pa.scalar(2, pa.int32())
_ONE_64, _ZERO_64 = pa.scalar(1, pa.int64()), pa.scalar(0, pa.int64())
_US_PER_MS = pa.scalar(1000, pa.int64())
_NO_STRING = pa.scalar(None, pa.string())
_FALSE = pa.scalar(False)


@functools.lru_cache(maxsize=64)
def _string(value: str) -> pa.Scalar:
    return pa.scalar(value, pa.string())


def _concat(pieces: Sequence[memoryview | bytes], kind: pa.DataType) -> pa.Array:
    """A binary/string array from byte pieces with one copy of the data."""
    offsets = array.array("i", [0])
    offsets.extend(itertools.accumulate(map(len, pieces)))
    if offsets[-1] > 0x7FFFFFFF:
        raise ValueError("a record batch may hold at most 2 GiB of one column")
    data = b"".join(pieces)
    return pa.Array.from_buffers(kind, len(pieces), [None, pa.py_buffer(offsets),
                                                     pa.py_buffer(data)])


def _arange(n: int) -> pa.Array:
    """0 .. n-1 as int64 (``pa.arange`` where this pyarrow has it)."""
    arange = getattr(pa, "arange", None)
    return arange(0, n) if arange is not None else pa.array(range(n), pa.int64())


def _plain_pairs(text: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array] | None:
    """(row of each pair, keys, values, map offsets) of property texts that
    are each a run of whole ``key\x01value\x02`` items (or empty), from the
    separators' positions: what the kernels' split gives for such texts,
    at about a third of its cost. None for any other batch."""
    if text.offset or text.null_count:
        return None
    n = len(text)
    _, offsets_buf, data_buf = text.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32, count=n + 1).astype(np.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    octets = np.frombuffer(data_buf, np.uint8, count=stop)[start:]
    ones = np.flatnonzero(octets == 1) + start
    twos = np.flatnonzero(octets == 2) + start
    m = len(twos)
    if len(ones) != m:
        return None
    filled = offsets[1:] > offsets[:-1]
    if m == 0:
        if filled.any():  # text without a separator: the kernels' job
            return None
        empty = pa.array([], pa.string())
        return (pa.array([], pa.int64()), empty, empty,
                pa.array(np.zeros(n + 1, np.int32)))
    # \x01 and \x02 alternate, each row ends with \x02: items are whole pairs
    if not ((ones < twos).all() and (twos[:-1] < ones[1:]).all()
            and (octets[offsets[1:][filled] - 1 - start] == 2).all()):
        return None
    # a key runs from the item's start (after the previous \x02) to its \x01
    key_starts = np.empty(m, np.int64)
    key_starts[0] = start
    key_starts[1:] = twos[:-1] + 1
    keys = _cut(data_buf, stop, key_starts, ones, pa.string())
    values = _cut(data_buf, stop, ones + 1, twos, pa.string())
    rows = np.searchsorted(offsets, ones, side="right") - 1
    map_offsets = np.searchsorted(rows, np.arange(n + 1), side="left").astype(np.int32)
    return pa.array(rows), keys, values, pa.array(map_offsets)


class _Properties:
    """The ``key\\x01value\\x02...`` texts of a batch split once: the map column,
    and the pairs with the row each came from, for ``value``'s look-ups."""

    def __init__(self, text: pa.Array, by_kernels: bool = False) -> None:
        """``text``: one property text a row, checked UTF-8. Texts made only of
        whole ``key\x01value\x02`` items are cut by their separators' positions
        (``_plain_pairs``); others, or with ``by_kernels``, are split by Arrow's
        string kernels as RocketMQ's parser splits them."""
        n = len(text)
        self.row_numbers = _arange(n)
        plain = None if by_kernels else _plain_pairs(text)
        if plain is not None:
            self.rows, self.keys, self.values, offsets = plain
        else:
            items = pc.split_pattern(text, "\x02")
            pairs = pc.split_pattern(pc.list_flatten(items), "\x01", max_splits=1)
            # items without \x01 (like the empty one after the last \x02) are dropped
            keep = pc.equal(pc.list_value_length(pairs), _PAIR)
            pairs = pairs.filter(keep)
            self.rows = pc.list_parent_indices(items).filter(keep)  # ascending
            self.keys = pc.list_element(pairs, _ZERO)
            self.values = pc.list_element(pairs, _ONE)
            offsets = pc.search_sorted(self.rows, _arange(n + 1), side="left").cast(pa.int32())
        self.map = pa.MapArray.from_arrays(offsets, self.keys, self.values, type=PROPERTIES)

    def value(self, name: str) -> pa.Array:
        """Each row's value of ``name``, null where it has none; of two entries
        the later one, as a MessageExt's properties dict holds."""
        n = len(self.row_numbers)
        hits = pc.indices_nonzero(pc.equal(self.keys, _string(name)))
        if len(hits) == 0:
            return pa.nulls(n, pa.string())
        rows = self.rows.take(hits)
        if len(hits) == n and pc.all(pc.equal(rows, self.row_numbers)).as_py():
            return self.values.take(hits)  # one each: the usual UNIQ_KEY
        # the last hit of each row: hits with a row <= r, less one
        last = pc.subtract(pc.search_sorted(rows, self.row_numbers, side="right")
                           .cast(pa.int64()), _ONE_64)
        at = pc.max_element_wise(last, _ZERO_64)
        found = pc.and_(pc.greater_equal(last, _ZERO_64),
                        pc.equal(rows.take(at), self.row_numbers))
        return pc.if_else(found, self.values.take(hits.take(at)), _NO_STRING)


def _repeated(value: str, n: int) -> pa.Array:
    """A string array of ``n`` times ``value``, built from its buffers (a list
    of ``n`` str would be converted one by one)."""
    data = value.encode()
    arange = getattr(pa, "arange", None)
    if arange is None or not data or n * len(data) > 0x7FFFFFFF:
        return pa.array(itertools.repeat(value, n), pa.string(), size=n)
    offsets = arange(0, (n + 1) * len(data), len(data)).cast(pa.int32())
    return pa.Array.from_buffers(pa.string(), n, [None, offsets.buffers()[1],
                                                  pa.py_buffer(data * n)])


def _topics(topics: list[str]) -> pa.Array:
    """The topic column: one topic (a queue's read) repeated, else converted."""
    n = len(topics)
    if n and topics.count(topics[0]) == n:
        return _repeated(topics[0], n)
    return pa.array(topics, pa.string())


def _timestamps(millis: Sequence[int]) -> pa.Array:
    return pc.multiply(pa.array(millis, pa.int64()), _US_PER_MS).cast(TIMESTAMP)


def to_record_batch(cols: RecordColumns, broker_name: str,
                    tags: Iterable[str] | None = None) -> pa.RecordBatch:
    """The rows of ``cols`` as a batch of ``SCHEMA``. ``tags``: keep only
    messages with one of these tags (None: all). Raises ValueError on bad
    UTF-8 in properties."""
    n = len(cols)
    text = _concat(cols.property_texts, pa.string())
    text.validate(full=True)  # UTF-8, as decoding a MessageExt would check
    props = _Properties(text)
    uniq = props.value(_UNIQ_KEY)
    if uniq.null_count:
        msg_ids = pa.array([u if u is not None else cols.offset_msg_id(i)
                            for i, u in enumerate(uniq.to_pylist())], pa.string())
    else:
        msg_ids = uniq
    return _assemble(
        props, msg_ids, tags, _topics(cols.topics), _repeated(broker_name, n),
        pa.array(cols.queue_ids, pa.int32()), pa.array(cols.queue_offsets, pa.int64()),
        _concat(cols.bodies, pa.binary()), _timestamps(cols.born_timestamps),
        _timestamps(cols.store_timestamps))


def _assemble(props: _Properties, msg_ids: pa.Array, tags: Iterable[str] | None,
              *columns: pa.Array) -> pa.RecordBatch:
    """The batch of ``SCHEMA`` from its columns in order, the property ones
    from ``props``; only rows with one of ``tags`` (None: all)."""
    (topics, broker_names, queue_ids, queue_offsets, bodies, born, stored) = columns
    tag_col = props.value(_TAGS)
    batch = pa.RecordBatch.from_arrays([
        topics, broker_names, queue_ids, queue_offsets, msg_ids, props.value(_KEYS),
        tag_col, bodies, born, stored, props.map,
    ], schema=SCHEMA)
    if tags is None:
        return batch
    return batch.filter(pc.fill_null(
        pc.is_in(tag_col, value_set=pa.array(sorted(tags), pa.string())), _FALSE))


# ---- RecordScan ---------------------------------------------------------------------

# TOTALSIZE and QUEUEOFFSET, all the Python loop reads of a record
_TOTAL_AND_QUEUE_OFFSET = struct.Struct(">i16xq")
# TOTALSIZE .. the TOPIC length byte and the PROPERTIES length
_MIN_RECORD = RECORD_HEAD_SIZE + 3
# The record head's fields the batch needs, big-endian at their offsets.
_HEAD = np.dtype({
    "names": ["magic", "queue_id", "queue_offset", "physical_offset", "sys_flag",
              "born", "store", "body_len"],
    "formats": [">u4", ">i4", ">i8", ">i8", ">i4", ">i8", ">i8", ">i4"],
    "offsets": [4, 12, 20, 28, 36, 40, 56, 84],
    "itemsize": RECORD_HEAD_SIZE,
})
_HEAD_BYTES = np.dtype(f"V{RECORD_HEAD_SIZE}")
_STORE_HOST_AT = 64
_INT32_MAX = 0x7FFFFFFF
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_BINARY = pa.binary()
Int64s = npt.NDArray[np.int64]


def _every(data: bytes, dtype: Any) -> npt.NDArray[Any]:
    """``data`` read as one ``dtype`` at every byte position (a strided view,
    nothing copied): ``_every(data, d)[positions]`` reads a d at each position."""
    dt = np.dtype(dtype)
    return np.ndarray(shape=(len(data) - dt.itemsize + 1,), dtype=dt, buffer=data,
                      strides=(1,))


def _cut(data: pa.Buffer, size: int, lo: Int64s, hi: Int64s,
         kind: pa.DataType = _BINARY) -> pa.Array:
    """The byte ranges [lo[i], hi[i]) of ``data``'s first ``size`` bytes
    (ascending, not overlapping) as one array of ``kind``, copied once:
    ``take`` of every other piece of an array whose pieces tile those bytes
    (for pa.string(), every range and gap must be whole UTF-8). Where
    records_kernel.gather_ranges is built, it copies the ranges into a buffer
    made to their size instead (take grows its output as it goes, copying it
    again each time)."""
    n = len(lo)
    gather = GATHER_KERNEL
    if gather is not None:
        lo = np.ascontiguousarray(lo, np.int64)
        hi = np.ascontiguousarray(hi, np.int64)
        out = np.empty(max(int((hi - lo).sum()), 0), np.uint8)
        starts = np.empty(n + 1, np.int32)
        gather(np.frombuffer(data, np.uint8), size, lo, hi, out.data, starts)
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(starts), pa.py_buffer(out)])
    offsets = np.empty(2 * n + 2, np.int32)
    offsets[0] = 0
    offsets[1:-1:2] = lo
    offsets[2:-1:2] = hi
    offsets[-1] = size
    pieces = pa.Array.from_buffers(kind, 2 * n + 1,
                                   [None, pa.py_buffer(offsets), data])
    pieces.validate()  # offsets in order and in the buffer (O(n)): never a bad read
    return pieces.take(pa.array(np.arange(1, 2 * n, 2, dtype=np.int64)))


# records_kernel.gather_ranges compiled (deploy/speedups.py), when built from the
# source beside protocol/record.py and not turned off; else None: _cut takes the
# ranges with Arrow's take
GATHER_KERNEL: Callable[..., int] | None = compiled(
    RECORDS_KERNEL_MODULE, RECORDS_KERNEL_SOURCE, "gather_ranges")


# records_kernel.walk_records compiled (deploy/speedups.py), when built from the
# source beside protocol/record.py and not turned off; else None: RecordScan.add
# walks a body with its own loop
WALK_KERNEL: Callable[..., tuple[int, int]] | None = compiled(
    RECORDS_KERNEL_MODULE, RECORDS_KERNEL_SOURCE, "walk_records")


class RecordScan:
    """Pull response bodies collected for one Arrow batch.

    ``add`` walks a body's records by their TOTALSIZE (stopping, as
    ``decode_columns`` does, at the first of queue offset >= ``stop_offset``);
    ``len`` is the records found, ``size`` their bytes; ``to_batch`` makes
    the batch, equal to ``to_record_batch`` of ``decode_columns`` of the same
    bodies, and raises what that raises."""

    def __init__(self) -> None:
        self._pulls: list[tuple[bytes, int | None]] = []  # as added
        self._kept: list[bytes] = []  # each body up to its last record taken
        self._starts: list[int] = []  # of the records, in the joined kept bytes
        self.size = 0

    def __len__(self) -> int:
        return len(self._starts)

    def add(self, body: bytes, stop_offset: int | None = None) -> None:
        """Take the records of ``body`` (a pull response body) before the
        first of queue offset >= ``stop_offset``. A record whose size does
        not fit raises decode_columns' CorruptRecordError, the scan then
        unusable."""
        walk = WALK_KERNEL
        if walk is not None and type(body) is bytes:
            # a queue offset is an int64: a stop past its range stops no
            # record, one below it the first
            use_stop = stop_offset is not None and stop_offset <= _INT64_MAX
            stop = max(stop_offset, _INT64_MIN) if use_stop else 0  # type: ignore[type-var]
            pos, ended = walk(body, self.size, stop, use_stop, self._starts)
        else:
            pos, ended = self._walk(body, stop_offset)
        if ended == 1:  # decode_columns checks the record it stops at too
            decode_columns(body, stop_offset=stop_offset)
        elif ended == 2:
            decode_columns(body, stop_offset=stop_offset)  # raises, saying what is wrong
            raise CorruptRecordError(f"undecodable record at {pos}")
        self._pulls.append((body, stop_offset))
        self._kept.append(body if pos == len(body) else body[:pos])
        self.size += pos

    def _walk(self, body: bytes, stop_offset: int | None) -> tuple[int, int]:
        """``add``'s walk in Python, where records_kernel.walk_records is not
        built: the records' starts appended; (bytes walked, how it ended) as
        walk_records says it (0 the end, 1 the stop offset, 2 a size that
        does not fit)."""
        unpack = _TOTAL_AND_QUEUE_OFFSET.unpack_from
        starts = self._starts
        base = self.size
        pos = 0
        end = len(body)
        try:
            while pos < end:
                total, queue_offset = unpack(body, pos)
                if total < _MIN_RECORD or total > end - pos:
                    return pos, 2
                if stop_offset is not None and queue_offset >= stop_offset:
                    return pos, 1
                starts.append(base + pos)
                pos += total
        except struct.error:  # fewer bytes left than a head
            return pos, 2
        return pos, 0

    def _by_record(self, broker_name: str, tags: Iterable[str] | None) -> pa.RecordBatch:
        cols = empty_columns()
        for body, stop in self._pulls:
            decode_columns(body, cols, stop_offset=stop)
        return to_record_batch(cols, broker_name, tags)

    def to_batch(self, broker_name: str, tags: Iterable[str] | None = None) -> pa.RecordBatch:
        n = len(self._starts)
        if self.size > _INT32_MAX:
            return self._by_record(broker_name, tags)
        if n == 0:
            return pa.RecordBatch.from_pylist([], schema=SCHEMA)
        data = b"".join(self._kept)
        starts = np.array(self._starts, np.int64)
        ends = np.empty_like(starts)
        ends[:-1] = starts[1:]
        ends[-1] = len(data)
        # gathered as plain 88-byte items (one copy each), then read as fields:
        # a gather of the structured type copies field by field, 9x slower
        head = _every(data, _HEAD_BYTES)[starts].view(_HEAD)
        body_len = head["body_len"].astype(np.int64)
        topic_at = starts + RECORD_HEAD_SIZE + body_len
        if not ((head["magic"] == MESSAGE_MAGIC_CODE).all() and (body_len >= 0).all()
                and (topic_at + 3 <= ends).all()):
            return self._by_record(broker_name, tags)  # it says what is wrong
        if (head["sys_flag"] & FLAG_COMPRESSED).any():
            return self._by_record(broker_name, tags)  # zlib, one body at a time
        octets = np.frombuffer(data, np.uint8)
        topic_len = octets[topic_at].astype(np.int64)
        props_at = topic_at + 3 + topic_len
        if not (props_at <= ends).all():
            return self._by_record(broker_name, tags)
        props_len = _every(data, ">i2")[props_at - 2].astype(np.int64)
        if not ((props_len >= 0).all() and (props_at + props_len == ends).all()):
            return self._by_record(broker_name, tags)
        topic = self._one_topic(data, topic_at, topic_len)
        if topic is None:
            return self._by_record(broker_name, tags)
        buf = pa.py_buffer(data)
        text = _cut(buf, len(data), props_at, ends).cast(pa.string())  # checks UTF-8
        props = _Properties(text)
        uniq = props.value(_UNIQ_KEY)
        if uniq.null_count:
            hosts = _every(data, "V8")[starts + _STORE_HOST_AT]
            physical = head["physical_offset"]
            msg_ids = pa.array([
                u if u is not None
                else offset_msg_id(hosts[i].tobytes().hex().upper(), int(physical[i]))
                for i, u in enumerate(uniq.to_pylist())], pa.string())
        else:
            msg_ids = uniq
        return _assemble(
            props, msg_ids, tags, _repeated(topic, n), _repeated(broker_name, n),
            pa.array(head["queue_id"].astype(np.int32)),
            pa.array(head["queue_offset"].astype(np.int64)),
            _cut(buf, len(data), starts + RECORD_HEAD_SIZE, topic_at),
            pa.array(head["born"].astype(np.int64) * 1000, TIMESTAMP),
            pa.array(head["store"].astype(np.int64) * 1000, TIMESTAMP))

    @staticmethod
    def _one_topic(data: bytes, topic_at: Int64s, topic_len: Int64s) -> str | None:
        """The topic when every record has the same one (a queue's read), else
        None; None too for a name that is not UTF-8 (decode_columns says so)."""
        length = int(topic_len[0])
        if not (topic_len == length).all():
            return None
        first = int(topic_at[0]) + 1
        name = data[first:first + length]
        if length and not (_every(data, f"V{length}")[topic_at + 1] == np.void(name)).all():
            return None
        try:
            return name.decode()
        except UnicodeDecodeError:
            return None
