"""Producer: sync, async, oneway and batch sends (RocketMQ's DefaultMQProducer).

Queue selection is round robin over every writable queue of every broker of
the topic; a send that fails (connection error, timeout, or a retryable
response code such as SYSTEM_BUSY) is retried up to
``retry_times_when_send_failed`` times on a queue of another broker, all
within ``send_msg_timeout`` (as RocketMQ's MQFaultStrategy with latency fault
tolerance off). Responses FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and
SLAVE_NOT_AVAILABLE are not errors: the message is stored and the
SendResult's ``send_status`` says what did not finish.

``send_async`` does not start a task per message: it validates and encodes
the message, puts it on a bounded queue and returns a ``SendFuture``; a fixed
pool of worker tasks sends from the queue (up to ``async_send_workers``
requests in flight, ``async_send_backlog`` messages queued; ``send_async``
waits when the queue is full).
"""

from __future__ import annotations

import dataclasses
import struct
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import structlog
import trio

from client.config import ClientConfig, merge_config
from client.credentials import AclCredentials
from client.errors import MQBrokerError, MQClientError
from client.hooks import SendMessageContext, SendMessageHook, send_hooks
from client.instance import (
    DEFAULT_POLL_NAME_SERVER_INTERVAL,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_TOPIC_QUEUE_NUMS,
    MQClientInstance,
    client_namesrv_addr,
)
from client.metrics import FAILED, ONEWAY, ClientMetrics
from client.publish_info import TopicPublishInfo
from client.send_future import SendCallback, SendFuture
from client.send_result import SEND_STATUS_BY_CODE, SendResult, region_and_trace_switch
from client.service import ServiceNursery
from client.trace import PRODUCE, AsyncTraceDispatcher, SendMessageTraceHook, check_trace_topic
from client.uniq_id import create_uniq_id, create_uniq_ids
from client.validators import (
    AUTO_CREATE_TOPIC_KEY,
    DEFAULT_MAX_MESSAGE_SIZE,
    TopicChecker,
    check_body,
    check_group,
    encode_properties,
)
from protocol.batch import (
    ENCODE_MESSAGES,
    ENTRY_HEAD,
    ENTRY_OVERHEAD,
    PROPERTIES_LENGTH,
    decode_batch,
    encode_batch,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import ProtocolError, RemoteProtocolError
from protocol.headers import (
    RecallMessageRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from protocol.message import (
    TIMER_INPUTS,
    Message,
    MessageConst,
    MessageQueue,
    string_to_properties,
)
from protocol.names import RETRY_GROUP_TOPIC_PREFIX
from protocol.namespace import unwrap, wrap
from protocol.recall_handle import build_handle, parse_handle
from protocol.record import FLAG_COMPRESSED
from protocol.trio import RemotingError

log = structlog.get_logger("client.producer")

DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
# RocketMQ's compressMsgBodyOverHowmuch and its zlib level
DEFAULT_COMPRESS_OVER = 4 * 1024
DEFAULT_COMPRESS_LEVEL = 5
_UNIQ_KEY = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_DELAY = MessageConst.PROPERTY_DELAY_TIME_LEVEL

_RECONSUME_TIME = MessageConst.PROPERTY_RECONSUME_TIME
_MAX_RECONSUME_TIMES = MessageConst.PROPERTY_MAX_RECONSUME_TIMES


def retry_header_fields(props: dict[str, str]) -> tuple[dict[str, str], dict[str, int]]:
    """A message to a ``%RETRY%`` topic carries its reconsume times in the send
    header, not in properties (RocketMQ's DefaultMQProducerImpl.sendKernelImpl):
    ``props`` without ``RECONSUME_TIME``/``MAX_RECONSUME_TIMES``, and the header
    fields ``reconsumeTimes``/``maxReconsumeTimes`` they become. The broker
    stores such a message in the group's DLQ once its reconsume times reach
    the limit. Raises MQClientError for a value that is not a count."""
    out = dict(props)
    fields: dict[str, int] = {}
    for prop, field in ((_RECONSUME_TIME, "reconsumeTimes"),
                        (_MAX_RECONSUME_TIMES, "maxReconsumeTimes")):
        raw = out.pop(prop, None)
        if raw is None:
            continue
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 10 and int(raw) < 2**31):
            raise MQClientError(f"property {prop} must be a count, not {raw!r}")
        fields[field] = int(raw)
    return out, fields


# send_async yields to the scheduler once per this many queued messages.
ASYNC_YIELD_EVERY = 64

# Broker answers worth trying on another broker (RocketMQ's retryResponseCodes + SYSTEM_BUSY).
RETRY_RESPONSE_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
    }
)


def _encode_messages(batch: list[Message], topic: str, max_size: int, ids: list[str]) -> bytes:
    """The batch body of ``batch`` (protocol.batch's layout, as encode_batch
    makes it): each message without a UNIQ_KEY gets ``ids[i]``, one with its
    own puts it in ``ids[i]``. Raises MQClientError naming what is wrong.
    ``protocol.batch_kernel.encode_messages`` makes the same, compiled."""
    # an entry struct refuses is given to encode_batch after the loop, which
    # says what is wrong with it
    parts: list[bytes] = []
    pack_head, pack_props = ENTRY_HEAD.pack, PROPERTIES_LENGTH.pack
    refused: tuple[int, bytes, str] | None = None
    for i, msg in enumerate(batch):
        if not isinstance(msg, Message):
            raise MQClientError(f"expected Messages, got {type(msg).__name__}")
        if msg.topic != topic:
            raise MQClientError(
                f"the topic of every message of a batch must be the same ({topic!r} != {msg.topic!r})"
            )
        body = msg.body
        if type(body) is not bytes or not body or len(body) > max_size:
            check_body(msg, max_size)  # raises, or it is a bytearray or memoryview
            body = bytes(body)
        props = msg.properties
        if not props:  # the usual message: its text is its new id's, no checks needed
            new_id = props[_UNIQ_KEY] = ids[i]
            text = f"{_UNIQ_KEY}\x01{new_id}\x02"
        else:
            if props.get(_DELAY, "0") != "0":
                raise MQClientError("delay levels are not supported for batching")
            if any(name in props for name in TIMER_INPUTS):
                raise MQClientError("timer messages (deliver_time_ms, delay_ms) are not "
                                    "supported for batching: send each alone")
            own = props.get(_UNIQ_KEY)
            if own:
                ids[i] = own
            else:
                props[_UNIQ_KEY] = ids[i]
            text = encode_properties(props)
        encoded = text.encode()
        n = len(body)
        try:
            parts += (pack_head(ENTRY_OVERHEAD + n + len(encoded), 0, 0, msg.flag, n), body,
                      pack_props(len(encoded)) + encoded)
        except struct.error:
            if refused is None:
                refused = (msg.flag, body, text)
    try:
        if refused is not None:
            encode_batch([refused])  # raises ValueError naming the problem
        return b"".join(parts)
    except ValueError as exc:
        raise MQClientError(f"a message of the batch cannot be sent: {exc}") from exc


class _State(Enum):
    CREATED = "created"
    RUNNING = "running"
    STOPPING = "stopping"  # no new sends; queued async sends still go out
    SHUTDOWN = "shutdown"


@dataclass(slots=True)
class _Prepared:
    """A validated message or batch: request code, header fields (no queueId), body."""

    code: int
    topic: str
    fields: dict[str, Any]
    body: bytes
    msg_id: str
    messages: Sequence[Message]  # what the hooks see: the message, or the batch's


@dataclass(slots=True)
class _AsyncJob:
    prepared: _Prepared
    mq: MessageQueue | None
    deadline: float
    future: SendFuture


class Producer:
    """A message producer on trio.

    Use ``async with Producer("group", "ns1:9876;ns2:9876") as p:`` or call
    ``await start()`` / ``await shutdown()``. Producers of one trio run with
    the same name servers share one MQClientInstance (connections, routes).

    Args:
        group: producer group name (``^[%|a-zA-Z0-9_-]+$``).
        namesrv_addr: name servers, ``;``-separated (default: the NAMESRV_ADDR
            environment variable, else 127.0.0.1:9876).
        send_msg_timeout: seconds for a whole send, retries included.
        retry_times_when_send_failed: extra attempts (on another broker).
        max_message_size: largest body (and encoded batch) accepted, bytes.
        default_topic_queue_nums: queues per broker for an auto-created topic.
        poll_name_server_interval: seconds between route refreshes.
        async_send_workers: concurrent requests used by ``send_async``.
        async_send_backlog: ``send_async`` messages queued before it waits.
        compress_msg_body_over_howmuch: a single message's body of at least this
            many bytes is sent zlib-compressed (system flag 0x1), as RocketMQ's
            clients do (4 KiB); consumers uncompress it. Batches are not
            compressed. 0 turns compression off.
        compress_level: zlib level of that compression (RocketMQ's default 5).
        metrics: a ``client.metrics.ClientMetrics`` recording sends and their
            latency in the user's Prometheus registry (None: no metrics, no cost).
        enable_msg_trace: record every send in the trace topic (RocketMQ's
            enableMsgTrace; client/trace.py, docs/trace.md).
        customized_trace_topic: the trace topic (RocketMQ's customizedTraceTopic;
            default ``RMQ_SYS_TRACE_TOPIC``).
        config: a ``client.config.ClientConfig`` (name servers, credentials, TLS,
            request timeout, instance name); the keywords namesrv_addr,
            credentials, access_key/secret_key and use_tls/tls_*_path are merged
            into it (a contradiction is a TypeError).

    Raises MQClientError for an invalid group name or setting.
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        send_msg_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
        poll_name_server_interval: float = DEFAULT_POLL_NAME_SERVER_INTERVAL,
        async_send_workers: int = 64,
        async_send_backlog: int = 10_000,
        compress_msg_body_over_howmuch: int = DEFAULT_COMPRESS_OVER,
        compress_level: int = DEFAULT_COMPRESS_LEVEL,
        metrics: ClientMetrics | None = None,
        credentials: AclCredentials | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        use_tls: bool = False,
        tls_ca_path: str | None = None,
        tls_cert_path: str | None = None,
        tls_key_path: str | None = None,
        enable_msg_trace: bool = False,
        customized_trace_topic: str | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        check_group(group, DEFAULT_PRODUCER_GROUP)
        self.enable_msg_trace = bool(enable_msg_trace)
        self.customized_trace_topic = check_trace_topic(customized_trace_topic)
        self.config = merge_config(
            config, namesrv_addr=namesrv_addr, credentials=credentials, access_key=access_key,
            secret_key=secret_key, use_tls=use_tls, tls_ca_path=tls_ca_path,
            tls_cert_path=tls_cert_path, tls_key_path=tls_key_path)
        self.credentials = self.config.credentials
        self.tls = self.config.client_tls()
        if send_msg_timeout <= 0:
            raise MQClientError("send_msg_timeout must be positive")
        if retry_times_when_send_failed < 0:
            raise MQClientError("retry_times_when_send_failed must be >= 0")
        if max_message_size <= 0:
            raise MQClientError("max_message_size must be positive")
        if default_topic_queue_nums <= 0:
            raise MQClientError("default_topic_queue_nums must be positive")
        if async_send_workers <= 0 or async_send_backlog < 0:
            raise MQClientError("async_send_workers must be positive, async_send_backlog >= 0")
        if compress_msg_body_over_howmuch < 0:
            raise MQClientError("compress_msg_body_over_howmuch must be >= 0 (0: never)")
        if not -1 <= compress_level <= 9:
            raise MQClientError("compress_level must be a zlib level, -1..9")
        self.namespace = self.config.namespace or ""
        self.group = wrap(self.namespace, group)
        self.namesrv_addr = client_namesrv_addr(self.config.namesrv_addr)
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.poll_name_server_interval = poll_name_server_interval
        self.async_send_workers = async_send_workers
        self.async_send_backlog = async_send_backlog
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self.compress_level = compress_level
        self._metrics = metrics
        self._state = _State.CREATED
        self._instance: MQClientInstance | None = None
        self._service: ServiceNursery | None = None
        self._async_tx: trio.MemorySendChannel[_AsyncJob] | None = None
        self._async_rx: trio.MemoryReceiveChannel[_AsyncJob] | None = None
        self._workers_left = 0
        self._workers_done: trio.Event | None = None
        self._topics = TopicChecker()
        self._header_templates: dict[tuple[str, bool], dict[str, Any]] = {}
        self._submits_since_yield = 0
        self._log = log.bind(group=group, namesrv=self.namesrv_addr)
        self._send_hooks = send_hooks(self._log)
        self.trace_dispatcher: AsyncTraceDispatcher | None = None

    # ---- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the shared client instance. Raises MQClientError if the
        producer was already started or the name-server address is invalid."""
        if self._state is not _State.CREATED:
            raise MQClientError(f"the producer is {self._state.value}; it can be started once")
        self._instance = await MQClientInstance.acquire(
            self.namesrv_addr,
            request_timeout=self.config.timeout_or(DEFAULT_REQUEST_TIMEOUT),
            poll_name_server_interval=self.poll_name_server_interval,
            credentials=self.credentials,
            tls=self.tls,
            instance_name=self.config.instance_name,
        )
        try:
            self._service = ServiceNursery(f"Producer[{self.group}] async senders")
            await self._service.start()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._instance.release()
            raise
        try:
            self._register(self._instance, self._service)
            if self.enable_msg_trace:
                await self._start_trace()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._service.stop()
                await self._instance.release()
            raise
        self._state = _State.RUNNING
        self._log.info("producer started")

    async def _start_trace(self) -> None:
        dispatcher = AsyncTraceDispatcher(
            self.group, PRODUCE, self.namesrv_addr, self.customized_trace_topic,
            credentials=self.credentials, tls=self.tls)
        await dispatcher.start()
        self.trace_dispatcher = dispatcher
        self._send_hooks.register(SendMessageTraceHook(dispatcher))

    def register_send_message_hook(self, hook: SendMessageHook) -> None:
        """Call ``hook`` around every attempt of every send (client/hooks.py).
        Raises MQClientError for an object without the hook's methods."""
        self._send_hooks.register(hook)

    def _register(self, instance: MQClientInstance, service: ServiceNursery) -> None:
        """Make the producer known to the client instance (a subclass adds what
        it needs, e.g. background tasks in ``service``). Raises MQClientError."""
        instance.register_producer(self.group)

    async def shutdown(self) -> None:
        """Stop: queued async sends are given up to ``send_msg_timeout`` to finish
        (the rest fail with MQClientError), then the client instance is released.
        Idempotent; safe to call from a cancelled task."""
        if self._state is not _State.RUNNING:
            self._state = _State.SHUTDOWN
            return
        self._state = _State.STOPPING
        with trio.CancelScope(shield=True):
            if self._async_tx is not None:
                self._async_tx.close()
                if self._workers_done is not None:
                    with trio.move_on_after(self.send_msg_timeout + 1.0):
                        await self._workers_done.wait()
            self._state = _State.SHUTDOWN
            if self._service is not None:
                await self._service.stop()
            if self._async_rx is not None:
                self._fail_queued_jobs(self._async_rx)
            if self.trace_dispatcher is not None:
                await self.trace_dispatcher.shutdown()
            if self._instance is not None:
                with trio.move_on_after(self._instance.request_timeout):
                    await self._instance.unregister_producer(self.group)
                await self._instance.release()
        self._log.info("producer shut down")

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def _deadline(self, timeout: float | None) -> float:
        if timeout is None:
            timeout = self.send_msg_timeout
        elif not timeout > 0:
            raise MQClientError(f"timeout must be positive, got {timeout}")
        return trio.current_time() + timeout

    def _running_instance(self) -> MQClientInstance:
        """The instance, for a new send: only while running."""
        if self._state is not _State.RUNNING or self._instance is None:
            raise MQClientError(f"the producer is not running ({self._state.value})")
        return self._instance

    def _sending_instance(self) -> MQClientInstance:
        """The instance, for a send under way: also while draining at shutdown."""
        if self._state not in (_State.RUNNING, _State.STOPPING) or self._instance is None:
            raise MQClientError(f"the producer is not running ({self._state.value})")
        return self._instance

    # ---- message preparation ----------------------------------------------------

    def _header(self, topic: str, flag: int, properties: str, batch: bool) -> dict[str, Any]:
        """SendMessageRequestHeader fields; the constant part is built once per topic."""
        template = self._header_templates.get((topic, batch))
        if template is None:
            if len(self._header_templates) > 1024:
                self._header_templates.clear()
            template = self._header_templates[topic, batch] = SendMessageRequestHeader(
                producer_group=self.group,
                topic=topic,
                queue_id=0,
                sys_flag=0,
                born_timestamp=0,
                flag=0,
                properties="",
                reconsume_times=0,
                default_topic=AUTO_CREATE_TOPIC_KEY,
                default_topic_queue_nums=self.default_topic_queue_nums,
                batch=batch,
            ).to_fields()
        fields = template.copy()
        fields["bornTimestamp"] = int(time.time() * 1000)
        fields["flag"] = flag
        fields["properties"] = properties
        return fields

    def _prepare_message(self, msg: Message) -> _Prepared:
        if not isinstance(msg, Message):
            raise MQClientError(f"expected a Message, got {type(msg).__name__}")
        self._topics.check(msg.topic)
        check_body(msg, self.max_message_size)
        topic = wrap(self.namespace, msg.topic) if self.namespace else msg.topic
        props = msg.properties
        uniq = props.get(_UNIQ_KEY)
        if not uniq:
            uniq = props[_UNIQ_KEY] = create_uniq_id()
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            props, times = retry_header_fields(props)
        else:
            times = {}
        fields = self._header(topic, msg.flag, encode_properties(props), False)
        fields.update(times)
        body = bytes(msg.body)
        over = self.compress_msg_body_over_howmuch
        if over and len(body) >= over:
            packed = zlib.compress(body, self.compress_level)
            if len(packed) < len(body):  # an incompressible body goes as it is
                body = packed
                fields["sysFlag"] = FLAG_COMPRESSED
        return _Prepared(RequestCode.SEND_MESSAGE, topic, fields, body, uniq, (msg,))

    def _prepare_batch(self, msgs: Iterable[Message]) -> _Prepared:
        batch = list(msgs)
        if not batch:
            raise MQClientError("a batch needs at least one message")
        first = batch[0]
        if not isinstance(first, Message):
            raise MQClientError(f"expected Messages, got {type(first).__name__}")
        topic = first.topic
        self._check_batch_topic(topic)
        max_size = self.max_message_size
        ids = create_uniq_ids(len(batch))  # what messages without a UNIQ_KEY get
        kernel = ENCODE_MESSAGES
        body = None if kernel is None else kernel(
            batch, topic, max_size, ids, Message, _UNIQ_KEY, _DELAY, encode_properties)
        if body is None:
            body = _encode_messages(batch, topic, max_size, ids)
        return self._batch_request(topic, body, ",".join(ids), batch,
                                   f"the encoded batch of {len(batch)} messages")

    def _check_batch_topic(self, topic: str) -> None:
        self._topics.check(topic)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise MQClientError("retry group topics are not supported for batching")

    def _batch_request(self, topic: str, body: bytes, msg_id: str,
                       messages: Sequence[Message], what: str) -> _Prepared:
        """The SEND_BATCH_MESSAGE of an encoded ``body`` (``what`` names it in the
        size refusal)."""
        if len(body) > self.max_message_size:
            raise MQClientError(f"{what} is {len(body)} bytes, over the maximum "
                                f"{self.max_message_size}; split it")
        topic = wrap(self.namespace, topic) if self.namespace else topic
        fields = self._header(topic, 0, "", True)
        return _Prepared(RequestCode.SEND_BATCH_MESSAGE, topic, fields, body, msg_id, messages)

    def _prepare_encoded(self, topic: str, body: bytes, msg_id: str) -> _Prepared:
        """A batch body already encoded (``protocol.batch``'s layout): the topic and
        size are checked here, the layout by the broker."""
        if not isinstance(body, bytes):
            raise MQClientError(f"an encoded batch is bytes, not {type(body).__name__}")
        self._check_batch_topic(topic)
        if not body:
            raise MQClientError("a batch needs at least one message")
        prepared = self._batch_request(topic, body, msg_id, (), "the encoded batch")
        if self._send_hooks.hooks:  # what a hook (a trace) sees: the messages themselves
            try:
                entries = decode_batch(body)
            except RemoteProtocolError as exc:
                raise MQClientError(f"the encoded batch is malformed: {exc}") from exc
            prepared.messages = [
                Message(topic, data, properties=string_to_properties(props), flag=flag)
                for flag, data, props in entries]
        return prepared

    # ---- sending ----------------------------------------------------------------

    async def _publish_info(self, topic: str, deadline: float) -> TopicPublishInfo:
        instance = self._sending_instance()
        info = instance.publish_info(topic)
        if info is not None and info.queues:
            return info
        with trio.move_on_at(deadline):
            return await instance.find_publish_info(topic, self.default_topic_queue_nums)
        raise MQClientError(f"timed out looking up the route of topic {topic}")

    async def _broker_addr(self, instance: MQClientInstance, mq: MessageQueue) -> str:
        addr = instance.find_broker_addr(mq.broker_name)
        if addr is None:
            addr, _ = await instance.require_broker_addr(mq.broker_name, mq.topic)
        return addr

    async def _send_kernel(
        self, prepared: _Prepared, mq: MessageQueue, deadline: float
    ) -> SendResult:
        """One attempt, between the send hooks when there are any."""
        instance = self._sending_instance()
        addr = await self._broker_addr(instance, mq)
        hooks = self._send_hooks
        ctx: SendMessageContext | None = None
        if hooks.hooks:  # a list: the usual, empty case costs one truth test
            ctx = SendMessageContext(self.group, prepared.messages, mq, addr,
                                     prepared.code == RequestCode.SEND_BATCH_MESSAGE)
            hooks.before(ctx)
        fields = dict(prepared.fields)
        fields["queueId"] = mq.queue_id
        cmd = RemotingCommand.request(prepared.code, fields, prepared.body)
        try:
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                raise MQClientError(f"send to {mq} timed out")
            response = await instance.invoke(addr, cmd, remaining)
            status = SEND_STATUS_BY_CODE.get(response.code)
            if status is None:
                raise MQBrokerError(response.code, response.remark, addr,
                                    context=f"send to {mq}")
            try:
                header = SendMessageResponseHeader.from_fields(response.ext_fields)
            except ProtocolError as exc:
                raise MQClientError(f"bad send response from {addr}: {exc}") from exc
        except Exception as exc:
            if ctx is not None:
                ctx.exception = exc
                hooks.after(ctx)
            raise
        region_id, trace_on = region_and_trace_switch(response.ext_fields)
        result = SendResult(
            send_status=status,
            msg_id=prepared.msg_id,
            message_queue=MessageQueue(mq.topic, mq.broker_name, header.queue_id),
            queue_offset=header.queue_offset,
            offset_msg_id=header.msg_id,
            transaction_id=header.transaction_id,
            region_id=region_id,
            trace_on=trace_on,
            recall_handle=header.recall_handle,
        )
        if ctx is not None:
            ctx.send_result = result
            hooks.after(ctx)
        return result

    async def _send(
        self, prepared: _Prepared, mq: MessageQueue | None, deadline: float
    ) -> SendResult:
        """Send with retries on other brokers until ``deadline``; recorded in the
        metrics, if any."""
        metrics = self._metrics
        if metrics is None:
            return await self._send_retrying(prepared, mq, deadline)
        start = trio.current_time()
        try:
            result = await self._send_retrying(prepared, mq, deadline)
        except Exception:
            metrics.send_done(prepared.topic, FAILED, trio.current_time() - start)
            raise
        metrics.send_done(prepared.topic, result.send_status.name, trio.current_time() - start)
        return result

    async def _send_retrying(
        self, prepared: _Prepared, mq: MessageQueue | None, deadline: float
    ) -> SendResult:
        """Send with retries on other brokers until ``deadline``."""
        if mq is not None:
            if mq.topic != prepared.topic:
                raise MQClientError(
                    f"the message topic {prepared.topic!r} is not the queue's topic {mq.topic!r}"
                )
            try:
                return await self._send_kernel(prepared, mq, deadline)
            except RemotingError as exc:
                raise MQClientError(f"send to {mq} failed: {exc}") from exc
        info = await self._publish_info(prepared.topic, deadline)
        if not info.ok:
            raise MQClientError(f"topic {prepared.topic} has no writable queue: no master "
                                f"of its brokers is registered with the name servers")
        attempts = 1 + self.retry_times_when_send_failed
        last_broker: str | None = None
        last_exc: Exception | None = None
        done = 0
        for _ in range(attempts):
            if trio.current_time() >= deadline:
                break
            mq = info.select(last_broker)
            done += 1
            try:
                return await self._send_kernel(prepared, mq, deadline)
            except MQBrokerError as exc:
                if exc.response_code not in RETRY_RESPONSE_CODES:
                    raise
                last_exc = exc
            except (RemotingError, MQClientError) as exc:
                last_exc = exc
            last_broker = mq.broker_name
            self._log.warning(
                "send attempt failed",
                topic=prepared.topic,
                broker=mq.broker_name,
                attempt=done,
                attempts=attempts,
                error=str(last_exc),
            )
            instance = self._sending_instance()
            if not isinstance(last_exc, MQBrokerError):
                # the broker is unreachable: a failover may have named a new master
                await instance.refresh_route_after_failure(prepared.topic, deadline)
            fresh = instance.publish_info(prepared.topic)
            if fresh is not None and fresh.ok:
                # a route with no writable queue (no master registered: a failover
                # under way) keeps the queues tried so far: the retry fails as a
                # send, not as a missing queue
                info = fresh
        what = f"send to topic {prepared.topic} failed after {done} attempt(s)"
        if trio.current_time() >= deadline and done < attempts:
            what += " (timed out)"
        if isinstance(last_exc, MQBrokerError):
            raise MQBrokerError(
                last_exc.response_code, last_exc.remark, last_exc.addr, context=what
            ) from last_exc
        if last_exc is None:
            raise MQClientError(what)
        raise MQClientError(f"{what}: {last_exc}") from last_exc

    async def send(
        self, msg: Message, mq: MessageQueue | None = None, *, timeout: float | None = None
    ) -> SendResult:
        """Send one message and wait for the broker's answer (one RPC, plus retries).

        With ``mq`` the message goes to that queue and is not retried elsewhere.
        Sets the ``UNIQ_KEY`` property if absent; its value is ``msg_id``.

        Raises:
            MQClientError: invalid message, producer not running, no route,
                connection failures/timeouts after every retry.
            MQBrokerError: a non-retryable error response (e.g. MESSAGE_ILLEGAL),
                or the last retryable one when every attempt failed.
        """
        prepared = self._prepare_message(msg)
        self._running_instance()
        deadline = self._deadline(timeout)
        if not self.namespace:
            return await self._send(prepared, mq, deadline)
        return self._shown(await self._send(prepared, self._wire_queue(mq), deadline))

    async def send_batch(
        self,
        msgs: Iterable[Message],
        mq: MessageQueue | None = None,
        *,
        timeout: float | None = None,
    ) -> SendResult:
        """Send messages of one topic to one queue in a single request.

        ``msg_id`` and ``offset_msg_id`` of the result are comma-joined ids;
        ``queue_offset`` is the first message's. Raises as ``send``; also
        MQClientError for mixed topics, delay levels or an encoded batch over
        ``max_message_size``.
        """
        prepared = self._prepare_batch(msgs)
        self._running_instance()
        deadline = self._deadline(timeout)
        if not self.namespace:
            return await self._send(prepared, mq, deadline)
        return self._shown(await self._send(prepared, self._wire_queue(mq), deadline))

    async def send_oneway(self, msg: Message, mq: MessageQueue | None = None) -> None:
        """Send without waiting for an answer: no result, no retry.

        Raises MQClientError for an invalid message, no route or a connection
        failure; broker-side failures are not reported.
        """
        prepared = self._prepare_message(msg)
        instance = self._running_instance()
        deadline = trio.current_time() + self.send_msg_timeout
        mq = self._wire_queue(mq)
        if mq is None:
            mq = (await self._publish_info(prepared.topic, deadline)).select()
        elif mq.topic != prepared.topic:
            raise MQClientError(
                f"the message topic {prepared.topic!r} is not the queue's topic {mq.topic!r}"
            )
        addr = await self._broker_addr(instance, mq)
        fields = dict(prepared.fields)
        fields["queueId"] = mq.queue_id
        cmd = RemotingCommand.request(prepared.code, fields, prepared.body, oneway=True)
        try:
            await instance.invoke_oneway(addr, cmd, max(deadline - trio.current_time(), 1e-3))
        except RemotingError as exc:
            if self._metrics is not None:
                self._metrics.send_done(prepared.topic, FAILED, None)
            raise MQClientError(f"oneway send to {mq} failed: {exc}") from exc
        if self._metrics is not None:
            self._metrics.send_done(prepared.topic, ONEWAY, None)

    async def send_async(
        self,
        msg: Message,
        callback: SendCallback | None = None,
        *,
        mq: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendFuture:
        """Queue a message for sending and return its ``SendFuture`` at once.

        ``await fut.wait()`` gives the SendResult (or raises); ``callback(result,
        exc)``, if given, is called in the trio thread when the send finishes.
        The timeout counts from this call. Waits only when the async backlog
        is full.

        Raises MQClientError at once for an invalid message or a producer that
        is not running; send failures go to the future and the callback.
        """
        return await self._submit(self._prepare_message(msg), callback, mq, timeout)

    async def send_batch_async(
        self,
        msgs: Iterable[Message],
        callback: SendCallback | None = None,
        *,
        mq: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendFuture:
        """``send_batch`` through the async workers; see ``send_async``."""
        return await self._submit(self._prepare_batch(msgs), callback, mq, timeout)

    async def send_encoded_batch_async(
        self,
        topic: str,
        body: bytes,
        callback: SendCallback | None = None,
        *,
        msg_id: str = "",
        mq: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendFuture:
        """A batch whose body the caller encoded (``protocol.batch.encode_batch``'s
        layout, each message with its own ``UNIQ_KEY``), sent as ``send_batch_async``
        sends: no ``Message`` per entry is made. ``msg_id`` is what the SendResult
        names. The broker refuses a malformed body (MQBrokerError)."""
        return await self._submit(self._prepare_encoded(topic, body, msg_id), callback, mq,
                                  timeout)

    async def _submit(
        self,
        prepared: _Prepared,
        callback: SendCallback | None,
        mq: MessageQueue | None,
        timeout: float | None,
    ) -> SendFuture:
        self._running_instance()
        tx = self._async_tx if self._async_tx is not None else self._start_workers()
        future = SendFuture()
        if callback is not None:
            future.add_done_callback(callback)
        deadline = self._deadline(timeout)
        job = _AsyncJob(prepared, self._wire_queue(mq), deadline, future)
        # trio's checkpoint discipline: a cancelled caller's message is not queued.
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            tx.send_nowait(job)
        except trio.WouldBlock:
            self._submits_since_yield = 0
            try:
                await tx.send(job)
            except (trio.ClosedResourceError, trio.BrokenResourceError) as exc:
                raise MQClientError("the producer is shut down") from exc
            return future
        except (trio.ClosedResourceError, trio.BrokenResourceError) as exc:
            raise MQClientError("the producer is shut down") from exc
        # Queued without waiting. Yield only every ASYNC_YIELD_EVERY calls, so a
        # task submitting in a loop hands the workers many jobs per scheduler
        # round (their frames then go out in one write).
        self._submits_since_yield += 1
        if self._submits_since_yield >= ASYNC_YIELD_EVERY:
            self._submits_since_yield = 0
            await trio.lowlevel.cancel_shielded_checkpoint()
        return future

    async def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        """The writable queues of ``topic`` (fetching its route if needed).
        Raises MQClientError when it has none."""
        info = await self._running_instance().find_publish_info(
            wrap(self.namespace, topic), self.default_topic_queue_nums
        )
        if not self.namespace:
            return list(info.queues)
        return [self._user_queue(mq) for mq in info.queues]

    # ---- namespace (ClientConfig.namespace) --------------------------------------------

    def _wire_queue(self, mq: MessageQueue | None) -> MessageQueue | None:
        """A queue the user named (``TopicA``) as the broker knows it (``ns%TopicA``)."""
        if mq is None or not self.namespace:
            return mq
        return dataclasses.replace(mq, topic=wrap(self.namespace, mq.topic))

    def _user_queue(self, mq: MessageQueue) -> MessageQueue:
        return dataclasses.replace(mq, topic=unwrap(self.namespace, mq.topic))

    def _shown(self, result: SendResult) -> SendResult:
        """A send result as the user sees it: its queue's topic without the namespace."""
        return dataclasses.replace(result, message_queue=self._user_queue(result.message_queue))

    async def recall_message(self, topic: str, handle_or_key: str,
                             timeout: float | None = None) -> str:
        """Cancel a pending timer message: by the ``recall_handle`` its send
        answered, or by its unique key (``SendResult.msg_id``; every broker of
        the topic is asked). Returns the message's unique key. Raises
        MQBrokerError (``NO_MESSAGE``) for a message not pending: unknown,
        delivered or recalled already."""
        deadline = self._deadline(timeout)
        instance = self._running_instance()
        topic = wrap(self.namespace, topic) if self.namespace else topic
        try:
            parsed = parse_handle(handle_or_key)
            handles = [(parsed.broker_name, handle_or_key)]
        except ValueError:
            if not handle_or_key or " " in handle_or_key:
                raise MQClientError("give a recall handle or a message's unique key") from None
            info = await self._publish_info(topic, deadline)
            brokers = sorted({mq.broker_name for mq in info.queues})
            handles = [(b, build_handle(topic, b, 0, handle_or_key)) for b in brokers]
        last: MQBrokerError | None = None
        for broker_name, handle in handles:
            addr = await self._broker_addr(instance, MessageQueue(topic, broker_name, 0))
            fields = RecallMessageRequestHeader(self.group, topic, handle).to_fields()
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                raise MQClientError(f"recall on topic {topic} timed out")
            response = await instance.invoke(
                addr, RemotingCommand.request(RequestCode.RECALL_MESSAGE, fields), remaining)
            if response.code == ResponseCode.SUCCESS:
                return str(response.ext_fields.get("msgId", ""))
            last = MQBrokerError(response.code, response.remark, addr,
                                 context=f"recall on topic {topic}")
            if response.code != ResponseCode.NO_MESSAGE:
                raise last
        assert last is not None
        raise last

    # ---- async workers ----------------------------------------------------------

    def _start_workers(self) -> trio.MemorySendChannel[_AsyncJob]:
        assert self._service is not None
        tx, rx = trio.open_memory_channel[_AsyncJob](self.async_send_backlog)
        self._async_tx, self._async_rx = tx, rx
        self._workers_left = self.async_send_workers
        self._workers_done = trio.Event()
        for _ in range(self.async_send_workers):
            self._service.start_soon(self._async_worker, rx.clone())
        return tx

    async def _async_worker(self, rx: trio.MemoryReceiveChannel[_AsyncJob]) -> None:
        try:
            async with rx:
                async for job in rx:
                    await self._run_job(job)
        finally:
            self._workers_left -= 1
            if self._workers_left == 0 and self._workers_done is not None:
                self._workers_done.set()

    async def _run_job(self, job: _AsyncJob) -> None:
        future = job.future
        try:
            result = await self._send(job.prepared, job.mq, job.deadline)
        except MQClientError as exc:
            future.set_exception(exc)
        except Exception as exc:
            self._log.exception("async send failed unexpectedly")
            future.set_exception(MQClientError(f"send failed: {exc!r}"))
        except BaseException:
            future.set_exception(MQClientError("the producer shut down before the send finished"))
            raise
        else:
            future.set_result(self._shown(result) if self.namespace else result)

    def _fail_queued_jobs(self, rx: trio.MemoryReceiveChannel[_AsyncJob]) -> None:
        failed = 0
        while True:
            try:
                job = rx.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            job.future.set_exception(
                MQClientError("the producer shut down before the send started")
            )
            failed += 1
        rx.close()
        if failed:
            self._log.warning("async sends dropped at shutdown", count=failed)
