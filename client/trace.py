"""Message trace, client side (RocketMQ's AsyncTraceDispatcher and its
SendMessageTraceHookImpl / ConsumeMessageTraceHookImpl).

A producer or push consumer made with ``enable_msg_trace=True`` registers a
trace hook (client/hooks.py). The send hook keeps the facts of each send (a
``PubTrace``: a ``Pub`` record per message, encoded later); the consume hook
makes a ``TraceContext`` before each listener call (``SubBefore``) and after it
(``SubAfter``), a record per message. Either is handed to the client's
``AsyncTraceDispatcher`` with a ``send_nowait`` on a bounded channel; when the
channel is full the item is dropped and counted, never waited for.

The dispatcher, a task of its own service nursery, encodes the items
(protocol/trace_data.py), packs the records into batches (``TraceBatcher``,
pure: at most ``batch_bytes`` of text and ``MAX_KEYS_BYTES`` of index keys, sent
at latest ``batch_wait`` s after a batch's first record) and sends each batch as
one message to the trace topic (``RMQ_SYS_TRACE_TOPIC`` or the customized one),
keyed by the msgIds and keys it holds, through an internal producer
(``_INNER_TRACE_PRODUCER-<group>-<PRODUCE|CONSUME>-<n>``) and a few sender
tasks. A failed trace send is logged (rate-limited) and counted, never raised:
the user's sends and consumption never wait for, nor fail because of, trace.
``shutdown`` sends what is held, waiting at most ``flush_timeout`` s.

Counters (records, one per message a context describes): ``appended``,
``dropped`` (queue or batch backlog full, or unsent at shutdown), ``sent``,
``failed`` (the trace send failed); ``batches_sent``, ``batches_failed``.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from client.credentials import AclCredentials
from client.errors import MQBrokerError, MQClientError
from client.hooks import ConsumeMessageContext, SendMessageContext
from client.send_result import SendStatus
from client.service import ServiceNursery
from client.uniq_id import create_uniq_id
from protocol.message import Message, MessageConst
from protocol.names import GROUP_MAX_LENGTH, RMQ_SYS_TRACE_TOPIC, topic_problem
from protocol.trace_data import (
    DEFAULT_REGION,
    GROUP_NAME_PREFIX,
    TraceBean,
    TraceContext,
    TraceRecord,
    TraceType,
    encode_records,
    pub_record,
)
from protocol.trio.service import Guard, describe
from protocol.trio.tls import ClientTls

log = structlog.get_logger("client.trace")

# RocketMQ's AsyncTraceDispatcher: 1024 contexts queued, a batch sent once it holds
# maxMsgSize - 10,000 characters (128,000 - 10,000) or 500 ms after its first record
QUEUE_SIZE = 1024
BATCH_BYTES = 118_000
BATCH_WAIT = 0.5
# a batch's index keys (its KEYS property, within the broker's 32,767 bytes of properties)
MAX_KEYS_BYTES = 16 * 1024
SEND_TIMEOUT = 5.0
SENDERS = 4
BATCH_BACKLOG = 64
FLUSH_TIMEOUT = 5.0
# contexts taken from the queue per scheduler round (~10 µs each: bounded loop time)
DRAIN_AT_ONCE = 256
# the trace producer's largest message (a context of a large consume batch is one piece)
TRACE_MAX_MESSAGE_SIZE = 4 * 1024 * 1024

_UNIQ_KEY = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_TAGS, _KEYS = MessageConst.PROPERTY_TAGS, MessageConst.PROPERTY_KEYS

PRODUCE = "PRODUCE"
CONSUME = "CONSUME"
_COUNTER = itertools.count(1)


def trace_topic_of(customized: str | None) -> str:
    return customized.strip() if customized and customized.strip() else RMQ_SYS_TRACE_TOPIC


def check_trace_topic(customized: str | None) -> str | None:
    """A customized trace topic as given (None or blank: the default), or
    MQClientError naming what is wrong with it."""
    if customized is None or not customized.strip():
        return None
    problem = topic_problem(customized.strip())
    if problem is not None:
        raise MQClientError(f"customized_trace_topic: {problem}")
    return customized.strip()


def trace_group(group: str, kind: str) -> str:
    """The internal trace producer's group (RocketMQ's genGroupNameForTrace),
    within the group name's length."""
    n = next(_COUNTER)
    name = f"{GROUP_NAME_PREFIX}-{group}-{kind}-{n}"
    return name if len(name) <= GROUP_MAX_LENGTH else f"{GROUP_NAME_PREFIX}-{kind}-{n}"


# ---- the pure core: records into batches ------------------------------------------


@dataclass(slots=True)
class TraceBatch:
    """One trace message: its body, its KEYS, and how many records it holds."""

    data: bytes
    keys: list[str]
    records: int


@dataclass(slots=True)
class TraceBatcher:
    """Records into batches (RocketMQ's TraceDataSegment), time passed in.

    ``add`` returns the batches a record completes: a batch is cut once its text
    reaches ``batch_bytes``, and before a record whose msgId would take its keys
    past ``max_keys_bytes``. A message's own keys go into the batch's keys only
    while they fit (its msgId always does), so a query by msgId finds every
    record; by a message key, most. ``due`` gives the batch whose first record
    waited ``wait`` s; ``drain`` whatever is held."""

    batch_bytes: int = BATCH_BYTES
    max_keys_bytes: int = MAX_KEYS_BYTES
    wait: float = BATCH_WAIT
    _parts: list[bytes] = field(default_factory=list)
    _size: int = 0
    _keys: dict[str, None] = field(default_factory=dict)
    _keys_size: int = 0
    _first_at: float | None = None

    @property
    def pending(self) -> int:
        """Records held."""
        return len(self._parts)

    def due_at(self) -> float | None:
        """When the held batch is due (None: nothing held)."""
        return None if self._first_at is None else self._first_at + self.wait

    def _key_cost(self, key: str) -> int:
        if key in self._keys:
            return 0
        return (len(key) if key.isascii() else len(key.encode())) + 1

    def add(self, record: TraceRecord, now: float) -> list[TraceBatch]:
        out: list[TraceBatch] = []
        if self._parts and self._keys_size + self._key_cost(record.msg_id) > self.max_keys_bytes:
            out.append(self._cut())
        data = record.data.encode()
        if self._first_at is None:
            self._first_at = now
        self._parts.append(data)
        self._size += len(data)
        for key in (record.msg_id, record.keys):
            if not key:
                continue
            cost = self._key_cost(key)
            if cost and (key is record.msg_id or self._keys_size + cost <= self.max_keys_bytes):
                self._keys[key] = None
                self._keys_size += cost
        if self._size >= self.batch_bytes:
            out.append(self._cut())
        return out

    def due(self, now: float) -> TraceBatch | None:
        at = self.due_at()
        return self._cut() if at is not None and now >= at else None

    def drain(self) -> TraceBatch | None:
        return self._cut() if self._parts else None

    def _cut(self) -> TraceBatch:
        batch = TraceBatch(b"".join(self._parts), list(self._keys), len(self._parts))
        self._parts, self._size, self._keys, self._keys_size = [], 0, {}, 0
        self._first_at = None
        return batch


@dataclass(slots=True)
class PubTrace:
    """One send's Pub records, encoded by the dispatcher's task: the send hook
    keeps only what must be read at once, per message (msgId, tags, keys, body
    length, offset msgId), and makes no context or bean objects."""

    group: str
    topic: str
    store_host: str
    region_id: str
    born_ms: int
    cost: int
    msg_type: int
    success: bool
    messages: list[tuple[str, str | None, str | None, int, str]]

    @property
    def count(self) -> int:
        return len(self.messages)

    def encode(self) -> list[TraceRecord]:
        return [pub_record(self.born_ms, self.region_id, self.group, self.topic, msg_id, tags,
                           keys, self.store_host, length, self.cost, self.msg_type, offset_id,
                           self.success)
                for msg_id, tags, keys, length, offset_id in self.messages]


TraceItem = TraceContext | PubTrace


def item_count(item: TraceItem) -> int:
    """The records ``item`` makes."""
    return item.count if isinstance(item, PubTrace) else len(item.beans)


def item_records(item: TraceItem) -> list[TraceRecord]:
    return item.encode() if isinstance(item, PubTrace) else encode_records(item)


# ---- the edge: queue, batching task, senders --------------------------------------


class AsyncTraceDispatcher:
    """Collects trace contexts and sends them to the trace topic in batches.

    ``append`` never waits; ``start``/``shutdown`` own the internal producer and
    the dispatcher's tasks (``run``). See the module docstring."""

    def __init__(
        self,
        group: str,
        kind: str,
        namesrv_addr: str,
        trace_topic: str | None = None,
        *,
        credentials: AclCredentials | None = None,
        tls: ClientTls | None = None,
        queue_size: int = QUEUE_SIZE,
        batch_bytes: int = BATCH_BYTES,
        batch_wait: float = BATCH_WAIT,
        send_timeout: float = SEND_TIMEOUT,
        senders: int = SENDERS,
        batch_backlog: int = BATCH_BACKLOG,
        flush_timeout: float = FLUSH_TIMEOUT,
        producer: Any = None,
    ) -> None:
        """``producer``: what sends the batches (an object with ``send(msg,
        timeout=)``, ``start()`` and ``shutdown()``); by default an internal
        ``Producer`` on the same name servers, credentials and TLS."""
        if queue_size < 1 or senders < 1 or batch_backlog < 1:
            raise MQClientError("trace queue_size, senders and batch_backlog must be positive")
        self.group = group
        self.kind = kind
        self.trace_topic = trace_topic_of(trace_topic)
        self.namesrv_addr = namesrv_addr
        self.send_timeout = send_timeout
        self.senders = senders
        self.flush_timeout = flush_timeout
        self.core = TraceBatcher(batch_bytes=batch_bytes, wait=batch_wait)
        self._tx, self._rx = trio.open_memory_channel[TraceItem](queue_size)
        self._batch_tx, self._batch_rx = trio.open_memory_channel[TraceBatch](batch_backlog)
        self.appended = self.dropped = self.sent = self.failed = 0
        self.batches_sent = self.batches_failed = 0
        self._log = log.bind(group=group, trace_topic=self.trace_topic, kind=kind)
        self._guard = Guard(self._log, "trace dispatcher")
        self._service: ServiceNursery | None = None
        self._done = trio.Event()
        self._running = False
        if producer is None:
            from client.producer import Producer  # the producer module imports this one

            producer = Producer(trace_group(group, kind), namesrv_addr,
                                send_msg_timeout=send_timeout, credentials=credentials,
                                max_message_size=TRACE_MAX_MESSAGE_SIZE)
            producer.tls = tls
        self.producer = producer

    def stats(self) -> dict[str, int]:
        return {"appended": self.appended, "dropped": self.dropped, "sent": self.sent,
                "failed": self.failed, "batchesSent": self.batches_sent,
                "batchesFailed": self.batches_failed}

    # ---- what hooks call ----------------------------------------------------------

    def append(self, item: TraceItem) -> bool:
        """Queue ``item`` (a context, or a send's Pub records) for sending; False
        (and counted) when the queue is full or the dispatcher stopped. Never waits."""
        n = item_count(item)
        self.appended += n
        try:
            self._tx.send_nowait(item)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            self.dropped += n
            self._guard.note("trace queue full, records dropped", "queue full",
                             dropped=self.dropped)
            return False
        return True

    # ---- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Start the internal producer and the dispatcher's tasks."""
        await self.producer.start()
        try:
            self._service = ServiceNursery(f"trace dispatcher[{self.group}]")
            await self._service.start()
            await self._service.start_task(self.run)
        except BaseException:
            with trio.CancelScope(shield=True):
                if self._service is not None:
                    await self._service.stop()
                await self.producer.shutdown()
            raise
        self._running = True
        self._log.info("message trace on")

    async def shutdown(self) -> None:
        """Take no more contexts, send what is held (at most ``flush_timeout`` s;
        what is left is counted dropped), stop. Idempotent; shielded."""
        if not self._running:
            return
        self._running = False
        self._tx.close()
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.flush_timeout):
                await self._done.wait()
            if self._service is not None:
                await self._service.stop()
            left = self.appended - self.dropped - self.sent - self.failed
            if left > 0:
                self.dropped += left
                self._log.warning("trace records unsent at shutdown", count=left)
            await self.producer.shutdown()
        self._log.info("message trace off", **self.stats())

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Batch until the context channel closes, then send what is held; the
        senders end when every batch is sent."""
        try:
            async with trio.open_nursery() as nursery:
                for _ in range(self.senders):
                    nursery.start_soon(self._sender, self._batch_rx.clone())
                self._batch_rx.close()
                task_status.started()
                try:
                    await self._collect()
                finally:
                    self._batch_tx.close()
        finally:
            self._done.set()

    async def _collect(self) -> None:
        core = self.core
        async with self._rx:
            while True:
                due_at = core.due_at()
                ctx: TraceItem | None = None
                with trio.move_on_at(math.inf if due_at is None else due_at):
                    try:
                        ctx = await self._rx.receive()
                    except trio.EndOfChannel:
                        break
                if ctx is not None:
                    self._take(ctx)
                    # what else is queued, without a scheduler round each (busy
                    # producers and consumers queue items faster than one a round)
                    for _ in range(DRAIN_AT_ONCE):
                        try:
                            self._take(self._rx.receive_nowait())
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                batch = core.due(trio.current_time())
                if batch is not None:
                    self._queue(batch)
        batch = core.drain()
        if batch is not None:
            self._queue(batch)

    def _take(self, item: TraceItem) -> None:
        try:
            records = item_records(item)
        except Exception as exc:  # a bug: lose this item, keep tracing
            self.dropped += item_count(item)
            self._guard.failed(exc, "trace context not encoded")
            return
        now = trio.current_time()
        for record in records:
            for batch in self.core.add(record, now):
                self._queue(batch)

    def _queue(self, batch: TraceBatch) -> None:
        try:
            self._batch_tx.send_nowait(batch)
        except trio.WouldBlock:
            self.dropped += batch.records
            self._guard.note("trace senders behind, batch dropped", "backlog full",
                             records=batch.records, dropped=self.dropped)

    async def _sender(self, rx: trio.MemoryReceiveChannel[TraceBatch]) -> None:
        async with rx:
            async for batch in rx:
                msg = Message(self.trace_topic, batch.data, keys=batch.keys)
                try:
                    await self.producer.send(msg, timeout=self.send_timeout)
                except (MQClientError, MQBrokerError) as exc:
                    self.failed += batch.records
                    self.batches_failed += 1
                    self._guard.note("trace send failed", describe(exc)[:120],
                                     error=describe(exc), records=batch.records,
                                     failed=self.failed)
                except Exception as exc:
                    self.failed += batch.records
                    self.batches_failed += 1
                    self._guard.failed(exc, "trace send failed", records=batch.records)
                else:
                    self.sent += batch.records
                    self.batches_sent += 1


# ---- the hooks --------------------------------------------------------------------


def _now_ms() -> int:
    return int(time.time() * 1000)


class SendMessageTraceHook:
    """A ``Pub`` record per message of each send the broker answered (RocketMQ's
    SendMessageTraceHookImpl; a batch gets one per message, each with its own
    msgId, where RocketMQ writes one record with the joined ids)."""

    def __init__(self, dispatcher: AsyncTraceDispatcher) -> None:
        self.dispatcher = dispatcher

    def hook_name(self) -> str:
        return "SendMessageTraceHook"

    def send_message_before(self, ctx: SendMessageContext) -> None:
        return None  # the context holds when the attempt started

    def send_message_after(self, ctx: SendMessageContext) -> None:
        result = ctx.send_result
        if result is None or not result.trace_on:  # failed attempt, or the broker says no
            return
        if ctx.mq.topic.startswith(self.dispatcher.trace_topic):  # trace data itself
            return
        msgs = ctx.messages
        offset_ids = (result.offset_msg_id or "").split(",")
        if len(offset_ids) != len(msgs):
            offset_ids = [""] * len(msgs)
        uniq, tags, keys = _UNIQ_KEY, _TAGS, _KEYS
        items = []
        for msg, offset_id in zip(msgs, offset_ids, strict=True):
            get = msg.properties.get
            items.append((get(uniq) or "", get(tags), get(keys), len(msg.body), offset_id))
        self.dispatcher.append(PubTrace(
            ctx.producer_group, ctx.mq.topic, ctx.broker_addr, result.region_id, ctx.born_ms,
            int((trio.current_time() - ctx.started) * 1000), int(ctx.msg_type),
            result.send_status is SendStatus.SEND_OK, items))


class ConsumeMessageTraceHook:
    """``SubBefore`` before each listener call and ``SubAfter`` after it, a
    record per message (RocketMQ's ConsumeMessageTraceHookImpl). Messages with
    ``TRACE_ON=false`` are left out, and so are messages of the trace topic
    (tracing their consumption would feed the topic it reads)."""

    KEY = "trace"

    def __init__(self, dispatcher: AsyncTraceDispatcher) -> None:
        self.dispatcher = dispatcher

    def hook_name(self) -> str:
        return "ConsumeMessageTraceHook"

    def consume_message_before(self, ctx: ConsumeMessageContext) -> None:
        beans: list[TraceBean] = []
        region = ""
        trace_topic = self.dispatcher.trace_topic
        for msg in ctx.msgs:
            props = msg.properties
            if props.get(MessageConst.PROPERTY_TRACE_SWITCH) == "false":
                continue
            if msg.topic == trace_topic:
                continue
            region = props.get(MessageConst.PROPERTY_MSG_REGION) or region
            beans.append(TraceBean(
                topic=msg.topic, msg_id=msg.uniq_key or msg.msg_id, tags=msg.tags or "",
                keys=msg.keys or "", store_time=msg.store_timestamp,
                body_length=msg.store_size, retry_times=msg.reconsume_times,
                store_host=str(msg.store_host)))
        if not beans:
            return
        before = TraceContext(
            TraceType.SubBefore, timestamp=_now_ms(), region_id=region or DEFAULT_REGION,
            group_name=ctx.consumer_group, request_id=create_uniq_id(), beans=beans)
        ctx.hook_data[self.KEY] = before
        self.dispatcher.append(before)

    def consume_message_after(self, ctx: ConsumeMessageContext) -> None:
        before = ctx.hook_data.get(self.KEY)
        if not isinstance(before, TraceContext) or not ctx.msgs:
            return
        cost = int((trio.current_time() - ctx.started) * 1000 / len(ctx.msgs))
        self.dispatcher.append(TraceContext(
            TraceType.SubAfter, timestamp=_now_ms(), region_id=before.region_id,
            group_name=before.group_name, request_id=before.request_id, cost_time=cost,
            success=ctx.success,
            context_code=int(ctx.return_type) if ctx.return_type is not None else 0,
            beans=before.beans))
