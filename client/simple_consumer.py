"""SimpleConsumer: RocketMQ 5's simple consumer over POP (docs/pop.md).

The caller receives messages, acks each one it has processed, and may give
itself longer (``change_invisible_duration``). A message not acked within its
invisible duration is delivered again (``delivery_attempt`` + 1), to any
consumer of the group; past the group's ``retryMaxTimes`` it goes to
``%DLQ%<group>``. No queues are assigned (no rebalance): every receive pops
from one broker of a subscribed topic, taking the brokers and topics in turn,
routed by the name servers.

Over the remoting wire: POP_MESSAGE (with ``pollTime`` for long polling),
ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME to the broker's master. A receipt
handle is the broker's opaque string; an ack or change with a handle the
broker no longer takes (acked, expired and redelivered, or replaced by a
change) raises ``InvalidReceiptHandle``.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
import trio

from client.config import ClientConfig, merge_config
from client.credentials import AclCredentials
from client.errors import MQBrokerError, MQClientError
from client.instance import (
    DEFAULT_POLL_NAME_SERVER_INTERVAL,
    DEFAULT_REQUEST_TIMEOUT,
    client_namesrv_addr,
)
from client.instance_user import InstanceUser
from client.subscription import MessageSelector
from client.validators import check_group
from protocol.batch_ack import MAX_BATCH_ACK, BatchAckError, decode_results, encode_handles
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import ProtocolError
from protocol.filter import parse_sub_expression
from protocol.filter_sql import SQL92, TAG, SqlParseError, compile_sql, is_tag_type
from protocol.headers import (
    AckMessageRequestHeader,
    BatchAckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from protocol.message import MessageConst, MessageExt
from protocol.names import topic_problem
from protocol.namespace import unwrap, wrap
from protocol.record import FLAG_COMPRESSED, decode_records
from protocol.trio.errors import RemotingError

log = structlog.get_logger("client.simple_consumer")

MAX_RECEIVE = 32  # the broker's limit on one pop
DEFAULT_AWAIT_DURATION = 5.0  # s a receive waits for messages (long polling)
DEFAULT_INVISIBLE_DURATION = 30.0
INIT_MODES = {"MIN": 0, "MAX": 1}


class InvalidReceiptHandle(MQBrokerError):
    """The broker no longer takes this receipt handle: the message was acked,
    its invisible time ran out (it is being delivered again), or a change of
    invisible duration replaced the handle."""


@dataclass(slots=True)
class ReceivedMessage:
    """A received message and what acking it needs. ``topic`` is the topic it
    was sent to (also for a redelivery, which comes from the group's retry
    topic); ``receipt_handle`` changes with ``change_invisible_duration``."""

    message: MessageExt
    topic: str
    receipt_handle: str
    delivery_attempt: int
    broker_name: str
    broker_addr: str

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def tag(self) -> str | None:
        return self.message.properties.get(MessageConst.PROPERTY_TAGS)

    @property
    def msg_id(self) -> str:
        return self.message.msg_id


class SimpleConsumer(InstanceUser):
    """Receive, ack and change invisible duration (RocketMQ 5's SimpleConsumer).

    Use ``async with SimpleConsumer("group", "ns:9876") as c: c.subscribe("T")``.

    Args:
        group: consumer group.
        namesrv_addr: name servers, ``;``-separated.
        await_duration: seconds a receive waits for messages when none are there.
        init_mode: where a group that never consumed a queue starts: ``"MAX"``
            (new messages only, RocketMQ's default) or ``"MIN"`` (all kept).
    """

    KIND = "simple consumer"

    def __init__(self, group: str, namesrv_addr: str | None = None, *,
                 await_duration: float = DEFAULT_AWAIT_DURATION, init_mode: str = "MAX",
                 request_timeout: float | None = None,
                 poll_name_server_interval: float = DEFAULT_POLL_NAME_SERVER_INTERVAL,
                 credentials: AclCredentials | None = None, access_key: str | None = None,
                 secret_key: str | None = None, use_tls: bool = False,
                 tls_ca_path: str | None = None, instance_name: str | None = None,
                 config: ClientConfig | None = None) -> None:
        check_group(group, "DEFAULT_CONSUMER")
        if init_mode not in INIT_MODES:
            raise MQClientError(f"init_mode must be one of {sorted(INIT_MODES)}, not {init_mode!r}")
        if not 0 <= await_duration <= 60 or math.isnan(await_duration):
            raise MQClientError("await_duration must be within 0..60 seconds")
        self.config = merge_config(
            config, namesrv_addr=namesrv_addr, credentials=credentials, access_key=access_key,
            secret_key=secret_key, use_tls=use_tls, tls_ca_path=tls_ca_path,
            request_timeout=request_timeout, instance_name=instance_name)
        # ClientConfig.namespace: the group and topics on the wire are the namespaced
        # names; received messages (and ReceivedMessage.topic) are named without it
        self.namespace = self.config.namespace or ""
        self.group = wrap(self.namespace, group)
        self.namesrv_addr = client_namesrv_addr(self.config.namesrv_addr)
        self.await_duration = await_duration
        self.init_mode = INIT_MODES[init_mode]
        self.request_timeout = self.config.timeout_or(DEFAULT_REQUEST_TIMEOUT)
        self.poll_name_server_interval = poll_name_server_interval
        self.subscriptions: dict[str, str] = {}
        self._tags: dict[str, frozenset[str] | None] = {}
        self._types: dict[str, str] = {}  # topic -> TAG or SQL92
        self._brokers: dict[str, tuple[float, list[str]]] = {}  # topic -> (fetched, names)
        self._turn = 0
        super().__init__()
        self._log = log.bind(group=group, namesrv=self.namesrv_addr)

    # ---- lifecycle: start, shutdown, async with (InstanceUser) ---------------------

    # ---- subscriptions ----------------------------------------------------------

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Receive ``topic``'s messages whose tag ``expression`` selects
        (``"*"``, ``"TagA || TagB"``), or those a ``MessageSelector`` selects
        (``MessageSelector.by_sql("a > 5")``: the broker evaluates it on each
        message's properties, with ``enablePropertyFilter=true``)."""
        problem = topic_problem(topic)
        if problem is not None:
            raise MQClientError(problem)
        topic = wrap(self.namespace, topic)
        selector = expression if isinstance(expression, MessageSelector) \
            else MessageSelector.by_tag(expression)
        if is_tag_type(selector.expression_type):
            try:
                self._tags[topic] = parse_sub_expression(selector.expression)
            except ValueError as exc:
                raise MQClientError(str(exc)) from None
            self.subscriptions[topic] = selector.expression.strip() or "*"
        elif selector.expression_type == SQL92:
            try:
                compile_sql(selector.expression)
            except SqlParseError as exc:
                raise MQClientError(f"bad SQL92 expression: {exc}") from None
            self._tags[topic] = None  # the broker looks at each message itself
            self.subscriptions[topic] = selector.expression
        else:
            raise MQClientError(f"unknown expression type {selector.expression_type!r}")
        self._types[topic] = selector.expression_type or TAG

    def unsubscribe(self, topic: str) -> None:
        topic = wrap(self.namespace, topic)
        self.subscriptions.pop(topic, None)
        self._tags.pop(topic, None)
        self._types.pop(topic, None)

    async def _broker_names(self, topic: str) -> list[str]:
        now = trio.current_time()
        cached = self._brokers.get(topic)
        if cached is not None and now - cached[0] < self.poll_name_server_interval:
            return cached[1]
        queues = await self._running_instance().fetch_subscribe_queues(topic)
        names = sorted({q.broker_name for q in queues})
        self._brokers[topic] = (now, names)
        return names

    # ---- receive, ack, change ---------------------------------------------------

    async def receive(self, max_messages: int = 16,
                      invisible_duration: float = DEFAULT_INVISIBLE_DURATION
                      ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` (1..32) messages, each invisible to the group
        for ``invisible_duration`` seconds (1 s .. 12 h) unless acked; waits up
        to ``await_duration`` when there are none, then answers []."""
        instance = self._running_instance()
        if not 1 <= max_messages <= MAX_RECEIVE:
            raise MQClientError(f"max_messages must be within 1..{MAX_RECEIVE}")
        invisible_ms = round(invisible_duration * 1000)
        if not 1_000 <= invisible_ms <= 12 * 3600 * 1000:
            raise MQClientError("invisible_duration must be within 1 s .. 12 h")
        if not self.subscriptions:
            raise MQClientError("subscribe to a topic before receiving")
        targets = [(t, b) for t in sorted(self.subscriptions) for b in await self._broker_names(t)]
        self._turn = (self._turn + 1) % len(targets)
        topic, broker_name = targets[self._turn]
        addr, _ = await instance.require_broker_addr(broker_name, topic)
        header = PopMessageRequestHeader(
            consumer_group=self.group, topic=topic, queue_id=-1, max_msg_nums=max_messages,
            invisible_time=invisible_ms, poll_time=round(self.await_duration * 1000),
            born_time=int(time.time() * 1000), init_mode=self.init_mode,
            exp_type=self._types.get(topic, TAG), exp=self.subscriptions[topic])
        cmd = RemotingCommand.request(RequestCode.POP_MESSAGE, header.to_fields())
        try:
            response = await instance.invoke(addr, cmd,
                                             self.request_timeout + self.await_duration)
        except RemotingError as exc:
            self._brokers.pop(topic, None)
            raise MQClientError(f"receive from {broker_name} failed: {exc}") from exc
        if response.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.POLLING_TIMEOUT):
            return []
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr, context="receive")
        try:
            rh = PopMessageResponseHeader.from_fields(response.ext_fields)
            msgs = decode_records(response.body or b"")
        except ProtocolError as exc:
            raise MQClientError(f"bad receive answer from {addr}: {exc}") from exc
        handles = rh.receipt_handles.split(" ") if rh.receipt_handles else []
        if len(handles) != len(msgs):
            raise MQClientError(f"bad receive answer from {addr}: {len(msgs)} messages, "
                                f"{len(handles)} receipt handles")
        out = []
        tags = self._tags.get(topic)
        for msg, handle in zip(msgs, handles, strict=True):
            if msg.sys_flag & FLAG_COMPRESSED:
                msg.body = zlib.decompress(msg.body)
            origin = msg.properties.get(MessageConst.PROPERTY_RETRY_TOPIC, msg.topic)
            if self.namespace:
                origin = unwrap(self.namespace, origin)
                msg.topic = unwrap(self.namespace, msg.topic)
            received = ReceivedMessage(msg, origin, handle, msg.reconsume_times + 1,
                                       broker_name, addr)
            if tags is not None and received.tag not in tags:  # a tag hash collision
                await self.ack(received)
                continue
            out.append(received)
        return out

    async def ack(self, msg: ReceivedMessage) -> None:
        """Done with ``msg``: it is not delivered again. Raises
        InvalidReceiptHandle when the broker no longer takes its handle."""
        header = AckMessageRequestHeader(
            consumer_group=self.group, topic=wrap(self.namespace, msg.topic),
            queue_id=msg.message.queue_id,
            extra_info=msg.receipt_handle, offset=msg.message.queue_offset)
        await self._handle_request(RequestCode.ACK_MESSAGE, header.to_fields(), msg, "ack")

    async def ack_batch(self, msgs: Sequence[ReceivedMessage]
                        ) -> list[tuple[ReceivedMessage, str]]:
        """Ack many messages with one request per broker and topic (RocketMQ's
        BATCH_ACK_MESSAGE, up to 1024 handles each). Answers the messages the
        broker no longer takes, each with the broker's remark (as ``ack``'s
        InvalidReceiptHandle); raises MQBrokerError or MQClientError when a
        whole request fails (the acks of the requests before it stand)."""
        groups: dict[tuple[str, str], list[ReceivedMessage]] = {}
        for m in msgs:
            groups.setdefault((m.broker_name, wrap(self.namespace, m.topic)), []).append(m)
        refused: list[tuple[ReceivedMessage, str]] = []
        instance = self._running_instance()
        for (broker_name, topic), batch in groups.items():
            addr, _ = await instance.require_broker_addr(broker_name, topic)
            for start in range(0, len(batch), MAX_BATCH_ACK):
                part = batch[start:start + MAX_BATCH_ACK]
                header = BatchAckMessageRequestHeader(consumer_group=self.group, topic=topic)
                cmd = RemotingCommand.request(RequestCode.BATCH_ACK_MESSAGE, header.to_fields(),
                                              body=encode_handles([m.receipt_handle
                                                                   for m in part]))
                try:
                    response = await instance.invoke(addr, cmd)
                except RemotingError as exc:
                    raise MQClientError(f"batch ack at {broker_name} failed: {exc}") from exc
                if response.code != ResponseCode.SUCCESS:
                    raise MQBrokerError(response.code, response.remark, addr,
                                        context="batch ack")
                try:
                    remarks = decode_results(response.body, len(part))
                except (BatchAckError, UnicodeDecodeError) as exc:
                    raise MQClientError(f"bad batch ack answer: {exc}") from exc
                refused.extend((m, r) for m, r in zip(part, remarks, strict=True)
                               if r is not None)
        return refused

    async def change_invisible_duration(self, msg: ReceivedMessage, duration: float) -> None:
        """``msg`` stays invisible ``duration`` seconds from now; its receipt
        handle is replaced (the old one is refused from now on)."""
        ms = round(duration * 1000)
        if not 1_000 <= ms <= 12 * 3600 * 1000:
            raise MQClientError("duration must be within 1 s .. 12 h")
        header = ChangeInvisibleTimeRequestHeader(
            consumer_group=self.group, topic=wrap(self.namespace, msg.topic),
            queue_id=msg.message.queue_id,
            extra_info=msg.receipt_handle, offset=msg.message.queue_offset, invisible_time=ms)
        response = await self._handle_request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                                              header.to_fields(), msg, "change invisible")
        try:
            rh = ChangeInvisibleTimeResponseHeader.from_fields(response.ext_fields)
        except ProtocolError as exc:
            raise MQClientError(f"bad change-invisible answer: {exc}") from exc
        if not rh.receipt_handle:
            raise MQClientError("change-invisible answer without a receipt handle")
        msg.receipt_handle = rh.receipt_handle

    async def _handle_request(self, code: int, fields: dict[str, object], msg: ReceivedMessage,
                              what: str) -> RemotingCommand:
        instance = self._running_instance()
        addr, _ = await instance.require_broker_addr(msg.broker_name,
                                                     wrap(self.namespace, msg.topic))
        cmd = RemotingCommand.request(code, fields)
        try:
            response = await instance.invoke(addr, cmd)
        except RemotingError as exc:
            raise MQClientError(f"{what} at {msg.broker_name} failed: {exc}") from exc
        if response.code == ResponseCode.NO_MESSAGE:
            raise InvalidReceiptHandle(response.code, response.remark, addr, context=what)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr, context=what)
        return response
