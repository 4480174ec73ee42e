"""The ``rocketmq`` Spark sink without Spark or sockets: options, the input
schema's columns, rows -> messages, unique keys, queue choice and batching.

A row becomes a ``Message`` of its ``topic`` (column, else the ``topic``
option) with its ``body``, ``tags``, ``keys``, user ``properties`` and, where
set, a delay (``delayLevel``) or a delivery time (``deliverTimeMs``: a timer
message, delivered at that time to the broker's timerPrecisionMs). Every message gets a ``UNIQ_KEY`` made from (write id, batch id,
partition id, row index): the same row of a retried task or a replayed
micro-batch gets the same key, so a consumer drops the copies by it.

Rows of only ``body`` (and ``tags``, ``keys``) to the ``topic`` option skip
the ``Message``: ``ArrowRows`` encodes their batch bodies from the Arrow
columns, with the same checks and the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from client.spark.offsets import OptionError, _positive_int, security_options
from protocol import names
from protocol.batch import ENTRY_HEAD, PROPERTIES_LENGTH
from protocol.batch import ENTRY_OVERHEAD as BATCH_ENTRY_OVERHEAD
from protocol.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from protocol.hashing import java_string_hash
from protocol.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    Message,
    MessageConst,
    MessageQueue,
)
from protocol.record import MAX_PROPERTIES_BYTES

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

ENTRY_HEAD_SIZE = ENTRY_HEAD.size
PROPERTIES_LENGTH_SIZE = PROPERTIES_LENGTH.size

UNIQ_KEY = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
DELAY = MessageConst.PROPERTY_DELAY_TIME_LEVEL

DEFAULT_PRODUCER_GROUP = "spark-rocketmq-sink"
DEFAULT_BATCH_SIZE = 256
DEFAULT_MAX_IN_FLIGHT = 8
DEFAULT_SEND_TIMEOUT_MS = 3000
# a batch request's body stays under this (the broker's maxMessageSize default
# is 4 MiB, and a batch is checked against it as a whole)
DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024
MAX_DELAY_LEVEL = 64  # well past any table; the broker clamps to its own last level

# property names the sink sets itself or the broker reserves: a row's
# ``properties`` may not name them (RocketMQ refuses them as user properties)
RESERVED_PROPERTIES = frozenset(
    value for name, value in vars(MessageConst).items()
    if name.startswith("PROPERTY_") and isinstance(value, str))


class SinkRowError(ValueError):
    """A row that cannot be sent, named by its partition and index."""


class SinkSchemaError(ValueError):
    """The DataFrame's columns do not fit the sink."""


# column -> accepted Spark types (simpleString)
_INTEGRAL = ("int", "bigint", "smallint", "tinyint")
COLUMN_TYPES: dict[str, tuple[str, ...]] = {
    "body": ("binary", "string"),
    "topic": ("string",),
    "tags": ("string",),
    "keys": ("string", "array<string>"),
    "properties": ("map<string,string>",),
    "queueId": _INTEGRAL,
    "shardingKey": ("string",),
    "deliverTimeMs": _INTEGRAL,
    "delayLevel": _INTEGRAL,
}


@dataclass(frozen=True)
class Columns:
    """Where each known column is in the input (None: absent)."""

    names: tuple[str, ...]  # the canonical name of each input column, in order
    body_is_string: bool

    def has(self, name: str) -> bool:
        return name in self.names


def check_columns(fields: Sequence[tuple[str, str]], topic_option: str | None) -> Columns:
    """Check the input's (name, Spark type) columns. Names match case-insensitively.
    Raises SinkSchemaError naming every unknown column, a missing ``body``, a
    missing topic (no column and no option), a column of the wrong type, or
    both ``queueId`` and ``shardingKey``."""
    canonical = {name.lower(): name for name in COLUMN_TYPES}
    unknown = [name for name, _ in fields if name.lower() not in canonical]
    if unknown:
        raise SinkSchemaError(
            f"the rocketmq sink does not know the column(s) {', '.join(map(repr, unknown))}; "
            f"it takes {', '.join(COLUMN_TYPES)} (select or rename the columns to write)")
    names_seen: list[str] = []
    for name, kind in fields:
        known = canonical[name.lower()]
        if known in names_seen:
            raise SinkSchemaError(f"the column {known!r} is given twice")
        names_seen.append(known)
        if kind.replace(" ", "") not in COLUMN_TYPES[known]:
            raise SinkSchemaError(
                f"the column {name!r} is {kind}; the sink takes it as "
                f"{' or '.join(COLUMN_TYPES[known])}")
    if "body" not in names_seen:
        raise SinkSchemaError("the rocketmq sink needs a 'body' column (binary or string)")
    if "topic" not in names_seen and not topic_option:
        raise SinkSchemaError("the rocketmq sink needs a 'topic' column or the 'topic' option")
    if "queueId" in names_seen and "shardingKey" in names_seen:
        raise SinkSchemaError("give 'queueId' or 'shardingKey', not both")
    body_kind = dict((canonical[n.lower()], k) for n, k in fields)["body"]
    return Columns(tuple(names_seen), body_kind == "string")


@dataclass(frozen=True)
class SinkOptions:
    namesrv: str
    topic: str | None
    producer_group: str
    send_timeout_ms: int
    batch_size: int
    max_in_flight: int
    max_batch_bytes: int
    retries: int
    delay_levels: tuple[tuple[int, int], ...]  # (level, ms), ascending
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    use_tls: bool = False
    tls_ca_path: str | None = None
    tls_cert_path: str | None = None
    tls_key_path: str | None = None

    def cache_key(self) -> tuple[Any, ...]:
        """What a cached producer is shared by: the options it was made with."""
        return (self.namesrv, self.producer_group, self.send_timeout_ms, self.retries,
                self.max_batch_bytes, self.access_key, self.secret_key, self.use_tls,
                self.tls_ca_path, self.tls_cert_path, self.tls_key_path)


def parse_sink_options(options: Mapping[str, str], env_namesrv: str | None = None
                       ) -> SinkOptions:
    """Validate the sink's options (case-insensitive names). ``env_namesrv``:
    the name servers to use when the option is not given. Raises OptionError."""
    opts = {k.lower(): v for k, v in options.items()}
    namesrv = opts.get("namesrv", "").strip() or (env_namesrv or "")
    if not namesrv:
        raise OptionError("option 'namesrv' is required, e.g. '127.0.0.1:9876'")
    topic = opts.get("topic", "").strip() or None
    if topic is not None:
        problem = names.topic_problem(topic)
        if problem is not None:
            raise OptionError(f"option 'topic': {problem}")
    group = opts.get("producergroup", DEFAULT_PRODUCER_GROUP).strip()
    problem = names.group_problem(group)
    if problem is not None:
        raise OptionError(f"option 'producerGroup': {problem}")
    max_bytes = _positive_int(opts.get("maxbatchbytes", str(DEFAULT_MAX_BATCH_BYTES)),
                              "maxBatchBytes")
    retries_text = opts.get("retries", "2").strip()
    if not retries_text.isdigit() or int(retries_text) > 16:
        raise OptionError(f"retries must be an integer from 0 to 16, got {retries_text!r}")
    try:
        levels = parse_delay_levels(opts.get("messagedelaylevel", DEFAULT_MESSAGE_DELAY_LEVEL))
    except ValueError as exc:
        raise OptionError(f"option 'messageDelayLevel': {exc}") from exc
    batch_size = _positive_int(opts.get("batchsize", str(DEFAULT_BATCH_SIZE)), "batchSize")
    if batch_size > 10_000:
        raise OptionError(f"batchSize must be at most 10000, got {batch_size}")
    in_flight = _positive_int(opts.get("maxinflight", str(DEFAULT_MAX_IN_FLIGHT)), "maxInFlight")
    if in_flight > 1024:
        raise OptionError(f"maxInFlight must be at most 1024, got {in_flight}")
    for unused in ("startingoffsets", "endingoffsets", "consumergroup"):
        if unused in opts:
            raise OptionError(f"option {unused!r} is for reads, not for the sink")
    return SinkOptions(
        namesrv=namesrv, topic=topic, producer_group=group,
        send_timeout_ms=_positive_int(opts.get("sendtimeoutms", str(DEFAULT_SEND_TIMEOUT_MS)),
                                      "sendTimeoutMs"),
        batch_size=batch_size, max_in_flight=in_flight, max_batch_bytes=max_bytes,
        retries=int(retries_text), delay_levels=tuple(sorted(levels.items())),
        **security_options(opts))


# ---- unique keys ------------------------------------------------------------------

_WRITE_ID = re.compile(r"[0-9a-f]{32}")
_KEY = re.compile(r"([0-9a-f]{32})-(\d+)-(\d+)-(\d+)")


def write_id(uuid_text: str) -> str:
    """A query id or job id (a UUID, with or without dashes) as the key's prefix:
    32 lower-case hex digits. Raises ValueError for anything else."""
    text = uuid_text.replace("-", "").lower()
    if _WRITE_ID.fullmatch(text) is None:
        raise ValueError(f"not a UUID: {uuid_text!r}")
    return text


def unique_key(write: str, batch_id: int, partition_id: int, row: int) -> str:
    """The row's ``UNIQ_KEY``: ``<write id>-<batch>-<partition>-<row>``; the same
    inputs give the same key, different ones a different key."""
    return f"{write}-{batch_id}-{partition_id}-{row}"


def parse_unique_key(key: str) -> tuple[str, int, int, int] | None:
    """(write id, batch id, partition id, row index) of a sink's key, else None."""
    m = _KEY.fullmatch(key)
    if m is None:
        return None
    return m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))


# ---- queue choice ------------------------------------------------------------------

def queue_for_sharding_key(key: str, queues: Sequence[MessageQueue]) -> MessageQueue:
    """RocketMQ's SelectMessageQueueByHash: ``abs(key.hashCode() % n)`` (Java's
    remainder), so a Java producer with that selector picks the same queue of
    the same list."""
    n = len(queues)
    if not n:
        raise ValueError("no writable queue")
    # Java's remainder takes the sign of the hash; abs() of it is abs(hash) % n
    return queues[abs(java_string_hash(key)) % n]


def sorted_queues(queues: Iterable[MessageQueue]) -> list[MessageQueue]:
    """A topic's writable queues in route order: by broker name, then queue id."""
    return sorted(queues, key=lambda q: (q.broker_name, q.queue_id))


# ---- rows -> messages ---------------------------------------------------------------

@dataclass(slots=True)
class OutRow:
    """One row made into a message: where it goes and whether it is delayed."""

    index: int
    message: Message
    queue_index: int | None  # queueId column: index into the topic's queues
    sharding_key: str | None
    delayed: bool
    size: int  # body + properties, as a batch entry counts them


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    if NAME_VALUE_SEPARATOR in value or PROPERTY_SEPARATOR in value:
        raise ValueError(f"{what} may not contain \\x01 or \\x02")
    return value


class RowConverter:
    """Rows (a dict of column values each) -> ``OutRow``s for one task, with
    per-row checks; errors name the row's partition and index."""

    def __init__(self, columns: Columns, opts: SinkOptions, write: str, batch_id: int,
                 partition_id: int, max_body: int = 4 * 1024 * 1024) -> None:
        self.columns = columns
        self.opts = opts
        self.write = write
        self.batch_id = batch_id
        self.partition_id = partition_id
        self.max_body = max_body
        self._topics_ok: set[str] = set()

    def error(self, index: int, what: str) -> SinkRowError:
        return SinkRowError(
            f"row {index} of partition {self.partition_id} cannot be sent: {what}")

    def convert(self, index: int, row: Mapping[str, Any], now_ms: int) -> OutRow:
        try:
            return self._convert(index, row, now_ms)
        except ValueError as exc:
            raise self.error(index, str(exc)) from None

    def _topic(self, value: Any) -> str:
        if value is None:
            if self.opts.topic is None:
                raise ValueError("its topic is null and there is no 'topic' option")
            return self.opts.topic
        if value not in self._topics_ok:
            problem = names.topic_problem(value)
            if problem is not None:
                raise ValueError(f"bad topic: {problem}")
            if len(self._topics_ok) > 1024:
                self._topics_ok.clear()
            self._topics_ok.add(value)
        return str(value)

    def _convert(self, index: int, row: Mapping[str, Any], now_ms: int) -> OutRow:
        body = row.get("body")
        if body is None:
            raise ValueError("its body is null")
        if isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, bytes):
            body = bytes(body)
        if not body:
            raise ValueError("its body is empty")
        if len(body) > self.max_body:
            raise ValueError(f"its body is {len(body)} bytes, over the maximum {self.max_body}")
        topic = self._topic(row.get("topic"))
        props: dict[str, str] = {}
        user = row.get("properties")
        if user:
            pairs = user.items() if isinstance(user, Mapping) else user
            for name, value in pairs:
                name = _text(name, "a property name")
                if value is None:
                    continue
                if not name:
                    raise ValueError("a property name is empty")
                if name in RESERVED_PROPERTIES:
                    raise ValueError(f"the property {name!r} is reserved (a system property)")
                props[name] = _text(value, f"the property {name!r}")
        tags = row.get("tags")
        if tags:
            props[MessageConst.PROPERTY_TAGS] = _text(tags, "tags")
        keys = row.get("keys")
        if keys:
            if not isinstance(keys, str):
                keys = " ".join(_text(k, "a key") for k in keys if k)
            if keys:
                props[MessageConst.PROPERTY_KEYS] = _text(keys, "keys")
        level, deliver_at = self._delay(row, now_ms)
        if level:
            props[DELAY] = str(level)
        if deliver_at is not None:
            props[MessageConst.PROPERTY_TIMER_DELIVER_MS] = str(deliver_at)
        key = unique_key(self.write, self.batch_id, self.partition_id, index)
        props[UNIQ_KEY] = key
        # the encoded ``key\x01value\x02`` text's bytes (what the batch entry holds)
        size = len("".join(map("".join, props.items())).encode()) + 2 * len(props)
        if size > MAX_PROPERTIES_BYTES:
            raise ValueError(f"its properties take {size} bytes, over the maximum "
                             f"{MAX_PROPERTIES_BYTES}")
        queue_index = row.get("queueId")
        if queue_index is not None and queue_index < 0:
            raise ValueError(f"queueId {queue_index} is negative")
        sharding = row.get("shardingKey")
        msg = Message(topic, body, properties=props)
        return OutRow(index, msg, queue_index, sharding, bool(level) or deliver_at is not None,
                      len(body) + size + BATCH_ENTRY_OVERHEAD)

    def _delay(self, row: Mapping[str, Any], now_ms: int) -> tuple[int, int | None]:
        """(delay level, timer delivery time): a time already past is neither
        (delivered at once)."""
        level = row.get("delayLevel")
        at = row.get("deliverTimeMs")
        if level is not None and at is not None:
            raise ValueError("it sets both delayLevel and deliverTimeMs")
        if level is not None:
            if not 0 <= level <= MAX_DELAY_LEVEL:
                raise ValueError(f"delayLevel {level} is not from 0 to {MAX_DELAY_LEVEL}")
            return int(level), None
        if at is not None:
            if not 0 <= at < 2**63:
                raise ValueError(f"deliverTimeMs {at} is not a non-negative 64-bit integer")
            return 0, (int(at) if at > now_ms else None)
        return 0, None


# ---- batching ----------------------------------------------------------------------

Destination = tuple[str, MessageQueue | None]  # (topic, queue or the producer's choice)


class Batcher:
    """Messages gathered into batches per destination: a batch is ready when it
    holds ``batch_size`` messages or one more would take it over ``max_bytes``.
    A delayed message goes alone (batches carry no delay)."""

    def __init__(self, batch_size: int, max_bytes: int) -> None:
        self.batch_size = batch_size
        self.max_bytes = max_bytes
        self._open: dict[Destination, tuple[list[OutRow], int]] = {}

    def add(self, dest: Destination, row: OutRow) -> list[tuple[Destination, list[OutRow]]]:
        """Add ``row``; the batches this makes ready (to send now)."""
        if row.delayed:
            return [(dest, [row])]
        rows, size = self._open.get(dest, ([], 0))
        ready: list[tuple[Destination, list[OutRow]]] = []
        if rows and size + row.size > self.max_bytes:
            ready.append((dest, rows))
            rows, size = [], 0
        rows.append(row)
        size += row.size
        if len(rows) >= self.batch_size:
            ready.append((dest, rows))
            self._open.pop(dest, None)
        else:
            self._open[dest] = (rows, size)
        return ready

    def drain(self) -> list[tuple[Destination, list[OutRow]]]:
        """Every open batch (the input ended)."""
        out = [(dest, rows) for dest, (rows, _) in self._open.items() if rows]
        self._open.clear()
        return out

    def __len__(self) -> int:
        return sum(len(rows) for rows, _ in self._open.values())


# an entry's fixed head, as numpy writes it for a whole Arrow batch at once
# (protocol.batch.ENTRY_HEAD: total size, magic code, body CRC, flag, body length)
_HEAD_FIELDS = ("total", "magic", "crc", "flag", "length")


class ArrowRows:
    """The common case without a Python object per row: rows of only ``body`` (and
    ``tags``, ``keys``) to the ``topic`` option, sent where the producer's selector
    puts them. Each request's body is encoded straight from the Arrow columns, in
    ``protocol.batch``'s layout, with the properties TAGS, KEYS and UNIQ_KEY in that
    order: the bytes ``RowConverter``'s messages encode to, after the same checks.
    Arrow batches in, ready ``(first row, rows, body)`` batches out, cut by
    ``batch_size`` and ``max_bytes`` as ``Batcher`` cuts them; a batch may span
    two Arrow batches."""

    def __init__(self, converter: RowConverter, batch_size: int, max_bytes: int) -> None:
        topic = converter.opts.topic
        assert topic is not None
        self.topic = topic
        self.converter = converter
        prefix = unique_key(converter.write, converter.batch_id, converter.partition_id, 0)[:-1]
        self._uniq_head = f"{UNIQ_KEY}{NAME_VALUE_SEPARATOR}{prefix}".encode()
        self.batch_size = batch_size
        self.max_bytes = max_bytes
        self._parts: list[memoryview] = []
        self._first = 0
        self._count = 0
        self._bytes = 0

    def add(self, first: int, body: pa.Array, tags: pa.Array | None = None,
            keys: pa.Array | None = None) -> list[tuple[int, int, bytes]]:
        """Rows ``first``, ``first + 1``, ... (one Arrow batch's columns); the
        batches made ready. Raises SinkRowError as RowConverter does."""
        if not len(body):
            return []
        return self._cut(first, self._encode(first, body, tags, keys))

    def drain(self) -> list[tuple[int, int, bytes]]:
        """The open batch (the input ended)."""
        return [self._flush()] if self._count else []

    # -- encoding --

    def _error(self, index: int, what: str) -> SinkRowError:
        return self.converter.error(index, what)

    def _encode(self, first: int, body: pa.Array, tags: pa.Array | None,
                keys: pa.Array | None) -> pa.Array:
        """Every row's batch entry (a large_binary array)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(body)
        binary = pa.large_binary()
        body = body.cast(binary)  # a string column's UTF-8 as it is: a relabel
        if body.null_count:
            raise self._error(first + _first_set(pc.is_null(body)), "its body is null")
        lengths = pc.binary_length(body).to_numpy()
        bad = np.flatnonzero((lengths == 0) | (lengths > self.converter.max_body))
        if bad.size:
            at = int(bad[0])
            size = int(lengths[at])
            raise self._error(first + at, "its body is empty" if size == 0 else
                              f"its body is {size} bytes, over the maximum "
                              f"{self.converter.max_body}")
        empty = pa.scalar(b"", binary)
        end = pa.scalar(PROPERTY_SEPARATOR.encode(), binary)
        parts: list[pa.Array] = []
        if tags is not None:
            parts.append(self._property(self._checked(first, tags, "tags"),
                                        MessageConst.PROPERTY_TAGS))
        if keys is not None:
            if pa.types.is_list(keys.type) or pa.types.is_large_list(keys.type):
                keys = self._joined_keys(first, keys)
            parts.append(self._property(self._checked(first, keys, "keys"),
                                        MessageConst.PROPERTY_KEYS))
        rows = pa.array(np.arange(first, first + n, dtype=np.int64)).cast(pa.string())
        parts.append(pc.binary_join_element_wise(
            pa.scalar(self._uniq_head, binary), rows.cast(binary), end, empty))
        props = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, empty)
        props_lengths = pc.binary_length(props).to_numpy()
        over = np.flatnonzero(props_lengths > MAX_PROPERTIES_BYTES)
        if over.size:
            at = int(over[0])
            raise self._error(first + at, f"its properties take {int(props_lengths[at])} "
                                          f"bytes, over the maximum {MAX_PROPERTIES_BYTES}")
        sizes = BATCH_ENTRY_OVERHEAD + lengths + props_lengths
        head = np.zeros(n, dtype=[(name, ">i4") for name in _HEAD_FIELDS])
        head["total"] = sizes
        head["length"] = lengths
        heads = _fixed(head, ENTRY_HEAD_SIZE, n)
        props_length = _fixed(props_lengths.astype(">i2"), PROPERTIES_LENGTH_SIZE, n)
        return pc.binary_join_element_wise(heads, body, props_length, props, empty)

    def _checked(self, first: int, values: pa.Array, what: str) -> pa.Array:
        """A string column, refused by its first row holding a separator."""
        bad = _separators(values)
        if bad.size:
            raise self._error(first + int(bad[0]), f"{what} may not contain \\x01 or \\x02")
        return values

    def _property(self, values: pa.Array, name: str) -> pa.Array:
        """``name\x01value\x02`` where a row's value is set and not empty, else b''."""
        import pyarrow as pa
        import pyarrow.compute as pc

        binary = pa.large_binary()
        empty = pa.scalar(b"", binary)
        joined = pc.binary_join_element_wise(
            pa.scalar(f"{name}{NAME_VALUE_SEPARATOR}".encode(), binary), values.cast(binary),
            pa.scalar(PROPERTY_SEPARATOR.encode(), binary), empty)
        present = pc.fill_null(pc.greater(pc.binary_length(values), 0), False)
        return pc.if_else(present, joined, empty)

    def _joined_keys(self, first: int, keys: pa.Array) -> pa.Array:
        """An array<string> keys column as RowConverter joins it: its set, non-empty
        keys with a space between (none: no KEYS)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        values = pc.list_flatten(keys)
        parents = pc.list_parent_indices(keys).to_numpy()
        bad = _separators(values)
        if bad.size:
            raise self._error(first + int(parents[bad[0]]), "a key may not contain \\x01 or \\x02")
        keep = pc.fill_null(pc.greater(pc.binary_length(values), 0), False)
        kept_parents = parents[keep.to_numpy(zero_copy_only=False)]
        counts = np.bincount(kept_parents, minlength=len(keys))
        offsets = np.zeros(len(keys) + 1, dtype=np.int32)
        np.cumsum(counts, out=offsets[1:])
        lists = pa.ListArray.from_arrays(pa.array(offsets), pc.filter(values, keep))
        return pc.binary_join(lists, " ")

    # -- cutting into batches --

    def _cut(self, first: int, entries: pa.Array) -> list[tuple[int, int, bytes]]:
        import numpy as np

        n = len(entries)
        _, offsets, values = entries.buffers()
        # entry i is data[ends[i]:ends[i + 1]] (large_binary: 64-bit offsets)
        ends = np.frombuffer(offsets, dtype=np.int64)[entries.offset:entries.offset + n + 1]
        data = memoryview(values)
        ready: list[tuple[int, int, bytes]] = []
        at = 0
        while at < n:
            stop = min(at + self.batch_size - self._count, n)
            fits = int(np.searchsorted(ends, ends[at] + self.max_bytes - self._bytes,
                                       side="right")) - 1
            stop = min(stop, fits)
            if stop <= at:
                if self._count:  # the next row does not fit the open batch
                    ready.append(self._flush())
                    continue
                stop = at + 1  # alone over max_bytes: it goes alone (and is refused by size)
            if not self._count:
                self._first = first + at
            start_byte, end_byte = int(ends[at]), int(ends[stop])
            self._parts.append(data[start_byte:end_byte])
            self._count += stop - at
            self._bytes += end_byte - start_byte
            at = stop
            if self._count >= self.batch_size:
                ready.append(self._flush())
        return ready

    def _flush(self) -> tuple[int, int, bytes]:
        parts = self._parts
        body = bytes(parts[0]) if len(parts) == 1 else b"".join(parts)
        out = (self._first, self._count, body)
        self._parts, self._count, self._bytes = [], 0, 0
        return out


def _first_set(mask: pa.Array) -> int:
    """The index of the first true value of a boolean array."""
    import pyarrow.compute as pc

    return int(pc.indices_nonzero(mask)[0].as_py())


def _separators(values: pa.Array) -> np.ndarray:
    """The indices of the strings holding \\x01 or \\x02."""
    import numpy as np
    import pyarrow.compute as pc

    found = pc.or_(pc.match_substring(values, NAME_VALUE_SEPARATOR),
                   pc.match_substring(values, PROPERTY_SEPARATOR))
    return np.flatnonzero(pc.fill_null(found, False).to_numpy(zero_copy_only=False))


def _fixed(values: np.ndarray, width: int, n: int) -> pa.Array:
    """``n`` big-endian records of ``width`` bytes each, as a large_binary array."""
    import pyarrow as pa

    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), n, [None, pa.py_buffer(values)]).cast(pa.large_binary())


def plain(columns: Columns, opts: SinkOptions) -> bool:
    """Whether rows of these columns go through ``ArrowRows``."""
    return opts.topic is not None and set(columns.names) <= {"body", "tags", "keys"}


def describe(dest: Destination, first: int, count: int, partition_id: int) -> str:
    """A batch as an error names it."""
    topic, mq = dest
    where = topic if mq is None else f"{topic} {mq.broker_name}:{mq.queue_id}"
    span = f"row {first}" if count == 1 else f"rows {first}..{first + count - 1} ({count})"
    return f"{span} of partition {partition_id} to {where}"


__all__ = [
    "Batcher", "COLUMN_TYPES", "Columns", "DEFAULT_BATCH_SIZE", "DEFAULT_MAX_IN_FLIGHT",
    "ArrowRows", "Destination", "OptionError", "OutRow", "RowConverter", "SinkOptions", "SinkRowError",
    "SinkSchemaError", "UNIQ_KEY", "check_columns", "describe", "parse_sink_options",
    "parse_unique_key", "plain", "queue_for_sharding_key", "sorted_queues", "unique_key", "write_id",
]
