"""The ``rocketmq`` PySpark data source (batch and streaming reads; the
writes, ``df.write`` / ``df.writeStream``, are ``client.spark.sink``).

    from client.spark import register
    register(spark)
    df = (spark.read.format("rocketmq")
          .option("namesrv", "127.0.0.1:9876").option("topic", "Orders").load())

The driver asks the brokers for each queue's offsets and plans one input
partition per queue range with data; each executor task opens its own
connection (lazily, in ``read``) with the blocking client and pulls its
range. In streaming, Spark's checkpoint holds the offsets; ``commit``
also records them as the consumer group's offsets on the brokers, so
``mqadmin consumerProgress`` shows the job's lag.

Against brokers with ``aclEnable=true``, the options ``accessKey`` and
``secretKey`` make the driver's and the executors' consumers sign their
requests (the account needs SUB on the topics and the consumer group).

Against daemons with ``tlsMode=enforcing`` (or to encrypt anyway), ``useTls``
(true/false, default false) makes those consumers connect over TLS;
``tlsCaPath`` is the CA the servers' certificates must chain to (default: the
system's CAs), and ``tlsCertPath`` with ``tlsKeyPath`` a client certificate for
servers with ``tls.server.need.client.auth``. The paths must exist on the
driver and on every executor.

Options (case-insensitive): ``namesrv`` (required unless ``NAMESRV_ADDR`` is
set where the driver runs; ``;``-separated, one name server asked at a time,
the next on failure), ``topic`` (one or a comma
list, required), ``consumerGroup``, ``startingOffsets``, ``endingOffsets``
(batch), ``maxOffsetsPerTrigger`` (streaming), ``failOnDataLoss``,
``pullBatchSize``, ``subExpression``, ``expressionType`` (``TAG``, the default,
or ``SQL92``: ``subExpression`` is then a property filter the brokers evaluate,
docs/filters.md), ``accessKey``, ``secretKey``, ``useTls``, ``tlsCaPath``,
``tlsCertPath``, ``tlsKeyPath``, ``failoverTimeoutMs``.

A queue whose master dies is read from its slave (brokerId 1): the driver's
offset queries and the executors' range reads that cannot reach a broker are
tried again with fresh routes, a read from where it stopped, for up to
``failoverTimeoutMs`` (60000) without progress (``client.spark.resume``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from client.spark.clients import client_config, quiet_client_logs
from client.spark.offsets import (
    DataLossError,
    Offsets,
    QueueRange,
    QueueState,
    SourceOptions,
    check_data_loss,
    limit_offsets,
    parse_options,
    plan_ranges,
    queue_key,
    resolve_offsets,
    with_new_queues,
)

if TYPE_CHECKING:
    from client.config import ClientConfig
    from client.range_reader import RangeChunk

log = logging.getLogger("client.spark")

SCHEMA = (
    "topic string, brokerName string, queueId int, queueOffset long, msgId string, "
    "keys string, tags string, body binary, bornTimestamp timestamp, "
    "storeTimestamp timestamp, properties map<string,string>"
)


@dataclass(frozen=True)
class RangePartition(InputPartition):  # type: ignore[misc]
    """Everything an executor needs to read one queue range."""

    namesrv: str
    group: str
    expression: str
    batch_size: int
    fail_on_data_loss: bool
    range: QueueRange
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    use_tls: bool = False
    tls_ca_path: str | None = None
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    expression_type: str = "TAG"
    failover_timeout: float = 60.0  # seconds a read keeps trying without progress
    # the offset the read must reach, waiting for a lagging slave or a returning
    # master: what a broker reported when the range was planned (None: the read
    # may end where the queue does, as past a batch read's reported max offsets)
    must_reach: int | None = None

    def client_config(self) -> ClientConfig:
        """The blocking PullConsumer's ClientConfig: name servers, credentials, TLS."""
        return client_config(self.namesrv, self.access_key, self.secret_key, self.use_tls,
                             self.tls_ca_path, self.tls_cert_path, self.tls_key_path)


def partition(opts: SourceOptions, r: QueueRange, must_reach: int | None = None
              ) -> RangePartition:
    """The input partition reading ``r`` with the source's options."""
    return RangePartition(opts.namesrv, opts.consumer_group, opts.sub_expression,
                          opts.pull_batch_size, opts.fail_on_data_loss, r, opts.access_key,
                          opts.secret_key, opts.use_tls, opts.tls_ca_path,
                          opts.tls_cert_path, opts.tls_key_path, opts.expression_type,
                          opts.failover_timeout, must_reach)


class UnknownTopicError(RuntimeError):
    """A subscribed topic the name servers do not know (not retried)."""


class _Brokers:
    """Driver-side queries (blocking client), opened on first use."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._consumer: Any = None
        self._listed: set[str] = set()  # topics whose queues the name servers listed

    def consumer(self) -> Any:
        if self._consumer is None:
            from client.blocking import PullConsumer

            o = self.opts
            c = PullConsumer(o.consumer_group,
                             config=client_config(o.namesrv, o.access_key, o.secret_key,
                                                  o.use_tls, o.tls_ca_path, o.tls_cert_path,
                                                  o.tls_key_path))
            c.start()
            self._consumer = c
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.shutdown()
            self._consumer = None

    def queues(self, with_group: bool = False) -> dict[str, dict[str, QueueState]]:
        """Each queue's offsets, from its master, else its slave. A broker that
        cannot be reached (a master killed, still in the routes for a moment)
        is asked again with fresh routes for up to ``failover_timeout`` seconds."""
        from client.spark.resume import RetryWindow, retry_call  # the client loads on use

        def again(error: BaseException, delay: float) -> None:
            log.warning("asking the brokers for the queues' offsets again in %.1f s: %s",
                        delay, error)

        return retry_call(lambda: self._queues(with_group), RetryWindow(self.opts.failover_timeout),
                          clock=time.monotonic, sleep=time.sleep, on_retry=again,
                          what="asking the brokers for the queues' offsets")

    def _queues(self, with_group: bool) -> dict[str, dict[str, QueueState]]:
        from client.errors import MQBrokerError, MQClientError

        c = self.consumer()
        out: dict[str, dict[str, QueueState]] = {}
        for topic in self.opts.topics:
            out[topic] = {}
            try:
                mqs = c.fetch_subscribe_message_queues(topic)  # fresh routes each time
            except MQClientError as exc:
                # a topic never seen fails at once (a typo waits for nothing); one
                # that was listed may be gone for a while (its only master dead)
                if topic not in self._listed and not isinstance(exc, MQBrokerError) \
                        and "does not exist" in str(exc):
                    raise UnknownTopicError(str(exc)) from exc
                raise
            self._listed.add(topic)
            for mq in mqs:
                out[topic][queue_key(mq.broker_name, mq.queue_id)] = QueueState(
                    c.min_offset(mq), c.max_offset(mq),
                    c.fetch_consume_offset(mq) if with_group else -1)
        return out

    def commit(self, offsets: Offsets) -> None:
        from client.blocking import MessageQueue
        from client.spark.offsets import parse_queue_key

        c = self.consumer()
        for topic, queues in offsets.items():
            for key, offset in queues.items():
                broker, qid = parse_queue_key(key)
                c.update_consume_offset(MessageQueue(topic, broker, qid), offset)

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "_consumer": None, "_listed": set()}


# An Arrow batch goes to Spark once this many rows or body bytes are decoded.
# A batch's bytes are touched several times (received, walked, gathered into
# its columns, written to the JVM): 4,096 rows of 1 KiB read faster than 8,192
# here (warm reads 193k against 180k msg/s, 202k against 195k for 2,048).
BATCH_ROWS = 4096
BATCH_BYTES = 4 << 20
# Pulls in flight per partition (each up to pullBatchSize messages, at most
# 256 KiB by the broker's default): 1 MiB in flight covers a round trip of
# about a millisecond at a gigabyte a second; answers waiting in the socket's
# buffer go cold in the caches, so more cost more here (warm reads 215k
# against 200k msg/s with 8, and 212k against 215k with 2).
PULLS_IN_FLIGHT = 4


def _batches(part: RangePartition) -> Iterator[Any]:
    """Read one queue range as Arrow record batches of ``arrow.SCHEMA``.

    A read that fails (the queue's master died under it) or ends short of the
    range's end (a slave still copying) is opened again where it stopped, with
    fresh routes, for up to ``failover_timeout`` seconds without progress
    (``client.spark.resume``): the range is read in full, each offset once,
    from the master or its slave."""
    quiet_client_logs()
    from client.blocking import MessageQueue, PullConsumer
    from client.spark.arrow import RecordScan
    from client.spark.resume import RetryWindow, read_planned
    from client.subscription import MessageSelector, build_subscription

    r = part.range
    key = queue_key(r.broker_name, r.queue_id)
    mq = MessageQueue(r.topic, r.broker_name, r.queue_id)
    selector = MessageSelector(part.expression_type, part.expression)
    tags = build_subscription(r.topic, part.expression, part.expression_type).tags_set

    def moved(offset: int, min_offset: int) -> int:
        return check_data_loss(r.topic, key, offset, min_offset, part.fail_on_data_loss)

    def skipped(lo: int, hi: int) -> None:
        log.warning("skipping lost messages of %s %s from %d to %d", r.topic, key, lo, hi)

    @contextmanager
    def open_read(offset: int, attempt: int) -> Iterator[Iterable[list[RangeChunk]]]:
        with PullConsumer(part.group, config=part.client_config()) as consumer:
            if attempt:  # the routes now: a dead master dropped, a slave or a returned master
                consumer.fetch_subscribe_message_queues(r.topic)
            start = moved(offset, consumer.min_offset(mq))
            if start > offset:
                skipped(offset, start)
            with consumer.read_range_here(mq, selector, start, r.end,
                                          batch_size=part.batch_size,
                                          in_flight=PULLS_IN_FLIGHT,
                                          on_offset_moved=moved) as reader:
                yield reader

    def again(offset: int, error: BaseException, delay: float) -> None:
        log.warning("reading %s %s again from offset %d (to %d) in %.1f s: %s", r.topic, key,
                    offset, r.end, delay, error)

    window = RetryWindow(part.failover_timeout)
    scan = RecordScan()
    for chunks in read_planned(open_read, r.start, r.end, window, clock=time.monotonic,
                               sleep=time.sleep, on_retry=again,
                               must_reach=r.start if part.must_reach is None else part.must_reach,
                               what=f"{r.topic} {key}"):
        for chunk in chunks:
            for lo, hi in chunk.skipped:
                skipped(lo, hi)
            for body in chunk.bodies:
                scan.add(body, stop_offset=chunk.end)
        if len(scan) >= BATCH_ROWS or scan.size >= BATCH_BYTES:
            batch = scan.to_batch(r.broker_name, tags)
            if batch.num_rows:
                yield batch
            scan = RecordScan()
    if len(scan):
        batch = scan.to_batch(r.broker_name, tags)
        if batch.num_rows:
            yield batch


class RocketMQBatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        brokers = _Brokers(opts)
        try:
            queues = brokers.queues(with_group=opts.starting == "group")
        finally:
            brokers.close()
        self.start = resolve_offsets(opts.starting, queues)
        ending = opts.ending if opts.ending is not None else "latest"
        self.end = resolve_offsets(ending, queues, default="latest")
        # what the brokers reported: a read waits for these (an endingOffsets past
        # them may end where its queue does)
        self.max_offsets = {t: {k: st.max_offset for k, st in q.items()}
                            for t, q in queues.items()}
        for topic, table in queues.items():
            for key, st in table.items():
                begin = self.start[topic][key]
                self.start[topic][key] = check_data_loss(topic, key, begin, st.min_offset,
                                                         opts.fail_on_data_loss)

    def partitions(self) -> Sequence[InputPartition]:
        return [partition(self.opts, r, self.max_offsets.get(r.topic, {}).get(
                    queue_key(r.broker_name, r.queue_id), r.end))
                for r in plan_ranges(self.start, self.end)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, RangePartition)
        return _batches(partition)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.brokers = _Brokers(opts)
        self._target: Offsets | None = None
        self._committed: Offsets | None = None

    def initialOffset(self) -> dict[str, Any]:
        queues = self.brokers.queues(with_group=self.opts.starting == "group")
        return resolve_offsets(self.opts.starting, queues)

    def _latest(self) -> Offsets:
        queues = self.brokers.queues()
        return {t: {k: st.max_offset for k, st in q.items()} for t, q in queues.items()}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        # Spark plans the next batch only after the previous one finished, so
        # ``start`` has been processed: record it (the last batch of a run
        # gets no commit() call otherwise).
        if start and start != self._committed:
            self.commit(start)
        latest = self._target if self._target is not None else self._latest()
        queues = self.brokers.queues()
        begin = with_new_queues(start, queues)  # queues that appeared start from earliest
        latest = {t: {k: max(v, begin.get(t, {}).get(k, 0)) for k, v in q.items()}
                  for t, q in latest.items()}
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = limit_offsets(begin, latest, cap)
        # keep queues Spark already tracks even if a route lost them for a moment
        for topic, table in start.items():
            for key, offset in table.items():
                end.setdefault(topic, {}).setdefault(key, offset)
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        queues = self.brokers.queues()
        begin = with_new_queues(start, queues)
        ranges = []
        for r in plan_ranges(begin, end):
            st = queues.get(r.topic, {}).get(queue_key(r.broker_name, r.queue_id))
            if st is not None and r.start < st.min_offset:
                first = check_data_loss(r.topic, queue_key(r.broker_name, r.queue_id), r.start,
                                        st.min_offset, self.opts.fail_on_data_loss)
                log.warning("skipping lost messages of %s %s:%d from %d to %d", r.topic,
                            r.broker_name, r.queue_id, r.start, first)
                if first >= r.end:
                    continue
                r = QueueRange(r.topic, r.broker_name, r.queue_id, first, r.end)
            ranges.append(r)
        # each end is at most a max offset a broker reported (latestOffset)
        return [partition(self.opts, r, r.end) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, RangePartition)
        return _batches(partition)

    def commit(self, end: dict[str, Any]) -> None:
        try:
            self.brokers.commit(end)
            self._committed = end
        except Exception as exc:  # the checkpoint is the source of truth
            log.warning("recording the group's offsets on the brokers failed: %s", exc)

    def stop(self) -> None:
        self.brokers.close()


class RocketMQDataSource(DataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        quiet_client_logs()
        return RocketMQBatchReader(parse_options(dict(self.options), streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        quiet_client_logs()
        return RocketMQStreamReader(parse_options(dict(self.options), streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from client.spark.sink import batch_writer  # docs: client/spark/sink.py

        quiet_client_logs()
        return batch_writer(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from client.spark.sink import stream_writer

        quiet_client_logs()
        return stream_writer(dict(self.options), schema, overwrite)


__all__ = ["DataLossError", "RocketMQDataSource", "SCHEMA", "UnknownTopicError"]
