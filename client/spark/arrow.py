"""Pull response records -> Arrow record batches of the ``rocketmq`` source's schema.

The Python worker hands Arrow batches to Spark as they are, so building them
column by column here (one copy of the bodies, property maps split by Arrow
compute kernels) replaces Spark's per-value conversion of Python rows.
No Spark import: tested on its own, and the schema is checked against
Spark's own conversion in the Spark tests.
"""

from __future__ import annotations

import array
import functools
import itertools
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from protocol.message import MessageConst
from protocol.record import RecordColumns

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


class _Properties:
    """The ``key\\x01value\\x02...`` texts of a batch split once: the map column,
    and the pairs with the row each came from, for ``value``'s look-ups."""

    def __init__(self, texts: Sequence[memoryview]) -> None:
        n = len(texts)
        text = _concat(texts, pa.string())
        text.validate(full=True)  # UTF-8, as decoding a MessageExt would check
        items = pc.split_pattern(text, "\x02")
        pairs = pc.split_pattern(pc.list_flatten(items), "\x01", max_splits=1)
        # items without \x01 (like the empty one after the last \x02) are dropped
        keep = pc.equal(pc.list_value_length(pairs), _PAIR)
        pairs = pairs.filter(keep)
        self.rows = pc.list_parent_indices(items).filter(keep)  # ascending
        self.keys = pc.list_element(pairs, _ZERO)
        self.values = pc.list_element(pairs, _ONE)
        self.row_numbers = _arange(n)
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
    props = _Properties(cols.property_texts)
    uniq = props.value(_UNIQ_KEY)
    if uniq.null_count:
        msg_ids = pa.array([u if u is not None else cols.offset_msg_id(i)
                            for i, u in enumerate(uniq.to_pylist())], pa.string())
    else:
        msg_ids = uniq
    tag_col = props.value(_TAGS)
    batch = pa.RecordBatch.from_arrays([
        _topics(cols.topics),
        _repeated(broker_name, n),
        pa.array(cols.queue_ids, pa.int32()),
        pa.array(cols.queue_offsets, pa.int64()),
        msg_ids,
        props.value(_KEYS),
        tag_col,
        _concat(cols.bodies, pa.binary()),
        _timestamps(cols.born_timestamps),
        _timestamps(cols.store_timestamps),
        props.map,
    ], schema=SCHEMA)
    if tags is None:
        return batch
    return batch.filter(pc.fill_null(
        pc.is_in(tag_col, value_set=pa.array(sorted(tags), pa.string())), _FALSE))
