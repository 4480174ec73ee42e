"""Pull response records -> Arrow record batches of the ``rocketmq`` source's schema.

The Python worker hands Arrow batches to Spark as they are, so building them
column by column here (one copy of the bodies, property maps split by Arrow
compute kernels) replaces Spark's per-value conversion of Python rows.
No Spark import: tested on its own, and the schema is checked against
Spark's own conversion in the Spark tests.
"""

from __future__ import annotations

import array
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
    """The ``key\x01value\x02...`` texts of a batch split once: the map column,
    and the pairs with the row each came from, for ``value``'s look-ups."""

    def __init__(self, texts: Sequence[memoryview]) -> None:
        n = len(texts)
        text = _concat(texts, pa.string())
        text.validate(full=True)  # UTF-8, as decoding a MessageExt would check
        items = pc.split_pattern(text, "\x02")
        pairs = pc.split_pattern(pc.list_flatten(items), "\x01", max_splits=1)
        # items without \x01 (like the empty one after the last \x02) are dropped
        keep = pc.equal(pc.list_value_length(pairs), 2)
        pairs = pairs.filter(keep)
        self.rows = pc.list_parent_indices(items).filter(keep)  # ascending
        self.keys = pc.list_element(pairs, 0)
        self.values = pc.list_element(pairs, 1)
        self.row_numbers = _arange(n)
        offsets = pc.search_sorted(self.rows, _arange(n + 1), side="left").cast(pa.int32())
        self.map = pa.MapArray.from_arrays(offsets, self.keys, self.values, type=PROPERTIES)

    def value(self, name: str) -> pa.Array:
        """Each row's value of ``name``, null where it has none; of two entries
        the later one, as a MessageExt's properties dict holds."""
        n = len(self.row_numbers)
        hits = pc.indices_nonzero(pc.equal(self.keys, name))
        if len(hits) == 0:
            return pa.nulls(n, pa.string())
        rows = self.rows.take(hits)
        if len(hits) == n and pc.all(pc.equal(rows, self.row_numbers)).as_py():
            return self.values.take(hits)  # one each: the usual UNIQ_KEY
        # the last hit of each row: hits with a row <= r, less one
        last = pc.subtract(pc.search_sorted(rows, self.row_numbers, side="right")
                           .cast(pa.int64()), 1)
        at = pc.max_element_wise(last, 0)
        found = pc.and_(pc.greater_equal(last, 0),
                        pc.equal(rows.take(at), self.row_numbers))
        return pc.if_else(found, self.values.take(hits.take(at)),
                          pa.scalar(None, pa.string()))


def _timestamps(millis: Sequence[int]) -> pa.Array:
    return pc.multiply(pa.array(millis, pa.int64()), 1000).cast(TIMESTAMP)


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
        pa.array(cols.topics, pa.string()),
        pa.array(itertools.repeat(broker_name, n), pa.string(), size=n),
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
        pc.is_in(tag_col, value_set=pa.array(sorted(tags), pa.string())), False))
