"""The ``rocketmq`` Spark sink: ``df.write.format("rocketmq")`` and
``df.writeStream.format("rocketmq")``.

The writer is made on the driver from the DataFrame's schema (unknown
columns, a missing body or topic fail there, before any task runs) and
pickled to the tasks. Each task turns its Arrow batches into messages
(``client.spark.sink_rows``; rows of only a body, tags and keys straight into
encoded batch bodies), sends them in batches of ``batchSize`` with
up to ``maxInFlight`` requests outstanding through one blocking producer per
Python worker process (made on first use for its option set, kept for the
next tasks, shut down when the process exits), and fails when a send does
not end in SEND_OK after the producer's retries: Spark runs the task again,
which sends its rows again (at least once). Every message's ``UNIQ_KEY``
is ``<write id>-<batch id>-<partition>-<row>`` (the write id is the
streaming query's id, kept in its checkpoint, or a batch write's own), so a
retried task's copies carry the same keys as the first attempt's.
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from client.spark.sink_rows import (
    ArrowRows,
    Batcher,
    Columns,
    Destination,
    OutRow,
    RowConverter,
    SinkOptions,
    check_columns,
    describe,
    parse_sink_options,
    plain,
    queue_for_sharding_key,
    sorted_queues,
    write_id,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from client.blocking import Producer
    from protocol.message import Message, MessageQueue

log = logging.getLogger("client.spark")

# what Spark sets on a streaming query's tasks (StreamExecution's local properties)
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


class SinkSendError(RuntimeError):
    """A batch of the task's rows did not end in SEND_OK after the producer's retries."""


@dataclass
class SinkCommit(WriterCommitMessage):  # type: ignore[misc]
    """What one task sent."""

    partition_id: int
    rows: int
    requests: int


# ---- one producer per Python worker process and option set -------------------------

_producers: dict[tuple[Any, ...], Producer] = {}
_producers_lock = threading.Lock()
_atexit_registered = False


def cached_producer(opts: SinkOptions) -> Producer:
    """The process's started producer for ``opts`` (made on first use)."""
    global _atexit_registered
    key = opts.cache_key()
    with _producers_lock:
        producer = _producers.get(key)
        if producer is not None:
            return producer
        from client.blocking import Producer
        from client.spark.clients import client_config

        config = client_config(opts.namesrv, opts.access_key, opts.secret_key, opts.use_tls,
                               opts.tls_ca_path, opts.tls_cert_path, opts.tls_key_path)
        producer = Producer(opts.producer_group, config=config,
                            send_msg_timeout=opts.send_timeout_ms / 1000,
                            retry_times_when_send_failed=opts.retries,
                            max_message_size=opts.max_batch_bytes)
        producer.start()
        _producers[key] = producer
        if not _atexit_registered:
            # registered after the client loop's own hook: runs before it
            atexit.register(shutdown_producers)
            _atexit_registered = True
        return producer


def shutdown_producers() -> None:
    """Shut down every cached producer (at process exit; tests call it too)."""
    with _producers_lock:
        producers = list(_producers.values())
        _producers.clear()
    for producer in producers:
        try:
            producer.shutdown()
        except Exception as exc:  # exiting anyway
            log.warning("shutting down a sink producer failed: %s", exc)


# ---- a task's sends -----------------------------------------------------------------

class _Sender:
    """Batches out through the producer, at most ``max_in_flight`` unanswered."""

    def __init__(self, producer: Producer, opts: SinkOptions, partition_id: int) -> None:
        self.producer = producer
        self.opts = opts
        self.partition_id = partition_id
        self.in_flight: collections.deque[tuple[Future[Any], Destination, int, int]] = \
            collections.deque()
        self.requests = 0
        self._queues: dict[str, list[MessageQueue]] = {}

    def queues(self, topic: str) -> list[MessageQueue]:
        found = self._queues.get(topic)
        if found is None:
            found = self._queues[topic] = sorted_queues(
                self.producer.fetch_publish_message_queues(topic))
        return found

    def send(self, dest: Destination, first: int, msgs: list[Message]) -> None:
        """Send rows ``first``.. as ``msgs`` (one request), waiting first while
        ``max_in_flight`` are unanswered. Raises SinkSendError."""
        _, mq = dest
        if len(msgs) == 1:
            self._submit(dest, first, 1, lambda: self.producer.send_async(msgs[0], mq=mq))
        else:
            self._submit(dest, first, len(msgs),
                         lambda: self.producer.send_batch_async(msgs, mq=mq))

    def send_encoded(self, dest: Destination, first: int, count: int, body: bytes) -> None:
        """Send rows ``first``.. (``count``, encoded in ``body``) as one request."""
        topic, mq = dest
        self._submit(dest, first, count,
                     lambda: self.producer.send_encoded_batch_async(topic, body, mq=mq))

    def _submit(self, dest: Destination, first: int, count: int,
                start: Callable[[], Future[Any]]) -> None:
        """``start`` a request of rows ``first``.. (``count``) once fewer than
        ``max_in_flight`` are unanswered. Raises SinkSendError."""
        while len(self.in_flight) >= self.opts.max_in_flight:
            self._wait_oldest()
        try:
            future = start()
        except Exception as exc:
            what = describe(dest, first, count, self.partition_id)
            raise SinkSendError(f"sending {what} failed: {exc}") from exc
        self.requests += 1
        self.in_flight.append((future, dest, first, count))

    def send_rows(self, dest: Destination, rows: list[OutRow]) -> None:
        self.send(dest, rows[0].index, [r.message for r in rows])

    def _wait_oldest(self) -> None:
        future, dest, first, count = self.in_flight.popleft()
        what = describe(dest, first, count, self.partition_id)
        try:
            result = future.result()
        except Exception as exc:
            raise SinkSendError(f"sending {what} failed after the producer's retries: "
                                f"{exc}") from exc
        status = result.send_status.name
        if status != "SEND_OK":
            raise SinkSendError(f"sending {what} ended in {status}, not SEND_OK (stored on "
                                f"the master, but not flushed or replicated as configured)")

    def finish(self) -> None:
        while self.in_flight:
            self._wait_oldest()


def _column_values(batch: pa.RecordBatch, columns: Columns) -> dict[str, list[Any]]:
    """Each column's values as Python objects; a string body as bytes (the
    cast only relabels the UTF-8 the column holds: no str made and encoded
    again a row)."""
    out: dict[str, list[Any]] = {}
    for name, column in zip(columns.names, batch.columns, strict=True):
        if name == "body" and columns.body_is_string:
            import pyarrow as pa

            column = column.cast(pa.binary())
        out[name] = column.to_pylist()
    return out


def write_task(batches: Iterator[pa.RecordBatch], opts: SinkOptions, columns: Columns,
               write: str, batch_id: int, partition_id: int) -> SinkCommit:
    """Send one task's rows; the commit message says how many. Raises
    SinkRowError for a bad row, SinkSendError for a failed send."""
    from client.spark.clients import quiet_client_logs

    quiet_client_logs()
    converter = RowConverter(columns, opts, write, batch_id, partition_id,
                             max_body=opts.max_batch_bytes)
    sender = _Sender(cached_producer(opts), opts, partition_id)
    if plain(columns, opts):
        rows = _write_plain(batches, columns, converter, sender)
    else:
        rows = _write_rows(batches, columns, converter, sender)
    sender.finish()
    return SinkCommit(partition_id, rows, sender.requests)


def _write_plain(batches: Iterator[pa.RecordBatch], columns: Columns,
                 converter: RowConverter, sender: _Sender) -> int:
    """Rows of body/tags/keys to the topic option: each request's body encoded
    from the Arrow columns (``ArrowRows``), no Python object per row."""
    opts = converter.opts
    assert opts.topic is not None
    dest: Destination = (opts.topic, None)
    rows = ArrowRows(converter, opts.batch_size, opts.max_batch_bytes)
    at = {name: i for i, name in enumerate(columns.names)}
    index = 0
    for batch in batches:
        tags, keys = (batch.column(at[name]) if name in at else None for name in ("tags", "keys"))
        for first, count, body in rows.add(index, batch.column(at["body"]), tags, keys):
            sender.send_encoded(dest, first, count, body)
        index += batch.num_rows
    for first, count, body in rows.drain():
        sender.send_encoded(dest, first, count, body)
    return index


def _write_rows(batches: Iterator[pa.RecordBatch], columns: Columns,
                converter: RowConverter, sender: _Sender) -> int:
    """Any columns: one OutRow a row, batched per destination."""
    opts = converter.opts
    batcher = Batcher(opts.batch_size, opts.max_batch_bytes)
    by_queue = columns.has("queueId")
    by_key = columns.has("shardingKey")
    index = 0
    for batch in batches:
        values = _column_values(batch, columns)
        names = list(values)
        now_ms = int(time.time() * 1000)
        for row_values in zip(*values.values(), strict=True):
            row = dict(zip(names, row_values, strict=True))
            out = converter.convert(index, row, now_ms)
            topic = out.message.topic
            mq: MessageQueue | None = None
            if by_queue and out.queue_index is not None:
                queues = sender.queues(topic)
                if out.queue_index >= len(queues):
                    raise converter.error(
                        index, f"queueId {out.queue_index} is past the {len(queues)} "
                               f"writable queues of {topic}")
                mq = queues[out.queue_index]
            elif by_key and out.sharding_key is not None:
                mq = queue_for_sharding_key(out.sharding_key, sender.queues(topic))
            for dest, rows in batcher.add((topic, mq), out):
                sender.send_rows(dest, rows)
            index += 1
    for dest, rows in batcher.drain():
        sender.send_rows(dest, rows)
    return index


def _rows(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.rows for m in messages if isinstance(m, SinkCommit))


def _task_context() -> Any:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the rocketmq sink writes inside Spark tasks only")
    return ctx


def _fields(schema: StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


class RocketMQBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """``df.write.format("rocketmq")``: one write id for the whole job."""

    def __init__(self, opts: SinkOptions, columns: Columns) -> None:
        self.opts = opts
        self.columns = columns
        self.write_id = write_id(uuid.uuid4().hex)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        ctx = _task_context()
        return write_task(iterator, self.opts, self.columns, self.write_id, 0,
                          ctx.partitionId())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = _rows(messages)
        log.info("rocketmq sink: write %s sent %d rows", self.write_id, rows)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = _rows(messages)
        log.warning("rocketmq sink: write %s failed; %d rows of finished tasks were sent "
                    "(messages are not taken back: consumers drop copies by UNIQ_KEY)",
                    self.write_id, sent)


class RocketMQStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """``df.writeStream.format("rocketmq")``: keys from the query id and batch id,
    both the same when a micro-batch is replayed from the checkpoint."""

    def __init__(self, opts: SinkOptions, columns: Columns) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        ctx = _task_context()
        query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if query is None or batch is None or not batch.isdigit():
            raise RuntimeError(f"the task has no streaming query id or batch id "
                               f"({QUERY_ID_PROPERTY}={query!r}, {BATCH_ID_PROPERTY}={batch!r})")
        return write_task(iterator, self.opts, self.columns, write_id(query), int(batch),
                          ctx.partitionId())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows = _rows(messages)
        log.info("rocketmq sink: micro-batch %d sent %d rows", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("rocketmq sink: micro-batch %d failed; it is sent again when the "
                    "query restarts from its checkpoint", batchId)


def _prepare(options: dict[str, str], schema: StructType) -> tuple[SinkOptions, Columns]:
    from protocol.namesrv_addr import namesrv_addr_from_env

    opts = parse_sink_options(options, namesrv_addr_from_env())
    return opts, check_columns(_fields(schema), opts.topic)


def batch_writer(options: dict[str, str], schema: StructType, overwrite: bool
                 ) -> RocketMQBatchWriter:
    if overwrite:
        raise ValueError("the rocketmq sink appends messages; mode('overwrite') cannot be "
                         "honoured: use mode('append')")
    return RocketMQBatchWriter(*_prepare(options, schema))


def stream_writer(options: dict[str, str], schema: StructType, overwrite: bool
                  ) -> RocketMQStreamWriter:
    if overwrite:
        raise ValueError("the rocketmq sink appends messages; outputMode('complete') "
                         "cannot be honoured: use outputMode('append'), or foreachBatch with "
                         "a batch write for aggregates (Spark refuses 'update' for Python "
                         "data sources)")
    return RocketMQStreamWriter(*_prepare(options, schema))


__all__ = ["RocketMQBatchWriter", "RocketMQStreamWriter", "SinkCommit", "SinkSendError",
           "batch_writer", "cached_producer", "shutdown_producers", "stream_writer",
           "write_task"]
