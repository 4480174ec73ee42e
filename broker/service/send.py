"""SendService: storing what producers send and consumers give back, with no transport.

The remoting adapter (broker/send_processor.py) decodes a request's header,
calls ``send`` or ``send_back`` and encodes the ``SendOutcome`` it gets: a
``SendStatus`` (mapped to a response code by one table per transport), the
remark, and for a stored message its id, queue and queue offset. Every check
RocketMQ's SendMessageProcessor makes is here (msgCheck, handleRetryAndDLQ,
the transaction and delay routing, the send-back's retry or dead-letter
choice); nothing here knows of RemotingCommand or connections.

A single send holding neither a delay nor a transaction goes into the log as a
batch of one (CommitLog.put_batch), with no properties dict nor message object;
a batch goes straight from its body into the log where the compiled loops run.
Both leave their indexing to ``after_answer`` (``defer=True``), which the
transport calls once the answer is written: off the send's critical path, and a
SYNC_FLUSH's indexing does not compete with its fsync.

A stored message that must be flushed (SYNC_FLUSH) or held by a slave
(SYNC_MASTER) before it is acknowledged comes back with the ``waiters`` it
joined: the transport answers once they are all done, the worst status
deciding (``STORE_STATUS``).

The service takes narrow collaborators (the protocols below), never the
controller, and reads the live role (broker/role.py), never the config's: its
tests build it with fakes (tests/broker/service/test_send.py).
"""

from __future__ import annotations

import dataclasses
import enum
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from broker.config import BrokerConfig
from broker.message_rewrite import (
    DELAY,
    PGROUP,
    TRAN_MSG,
    build_batch_inners,
    build_inner,
    is_prepared,
    send_back_message,
    to_schedule,
    to_timer,
)
from broker.service.types import LiveRole
from broker.store import MessageExtBrokerInner, PutMessageResult, PutMessageStatus
from broker.store.offset_waiters import Waiter
from broker.timer.rules import PROBE as TIMER_PROBE
from broker.timer.rules import TimerRefusal, has_timer
from broker.timer.rules import due_ms as timer_due_ms
from broker.topic_validator import check_user_topic
from protocol.batch import decode_batch
from protocol.errors import RemoteProtocolError
from protocol.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from protocol.message import MessageExt, properties_to_string, string_to_properties
from protocol.names import (
    RETRY_GROUP_TOPIC_PREFIX,
    InvalidNameError,
    dlq_topic,
    retry_topic,
    shown,
)
from protocol.recall_handle import build_handle
from protocol.record import TRANSACTION_NOT_TYPE, transaction_type
from protocol.route import PERM_RW, TopicConfig, is_writeable
from protocol.subscription_group import SubscriptionGroupConfig

log = structlog.get_logger("broker.send")


class SendStatus(enum.Enum):
    """How a send ended. The first four stored the message (its id, queue and
    offset travel with them); the others stored nothing."""

    OK = "ok"
    FLUSH_DISK_TIMEOUT = "flush disk timeout"
    FLUSH_SLAVE_TIMEOUT = "flush slave timeout"
    SLAVE_NOT_AVAILABLE = "slave not available"
    NO_PERMISSION = "no permission"
    MESSAGE_ILLEGAL = "message illegal"
    TOPIC_NOT_EXIST = "topic not exist"
    GROUP_NOT_EXIST = "subscription group not exist"
    BUSY = "busy"
    SERVICE_NOT_AVAILABLE = "service not available"
    SYSTEM_ERROR = "system error"


STORED = frozenset({SendStatus.OK, SendStatus.FLUSH_DISK_TIMEOUT,
                    SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE})

# a store's status: the send's, and the remark it is told with
STORE_STATUS: dict[PutMessageStatus, tuple[SendStatus, str | None]] = {
    PutMessageStatus.PUT_OK: (SendStatus.OK, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (
        SendStatus.FLUSH_DISK_TIMEOUT,
        "flush disk timeout: the message is stored but not yet on disk",
    ),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (SendStatus.FLUSH_SLAVE_TIMEOUT, "flush slave timeout"),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (SendStatus.SLAVE_NOT_AVAILABLE, "slave not available"),
    PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: (SendStatus.SYSTEM_ERROR,
                                                   "in-sync replicas not enough"),
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: (SendStatus.SYSTEM_ERROR, "create mapped file failed"),
    PutMessageStatus.MESSAGE_ILLEGAL: (SendStatus.MESSAGE_ILLEGAL, "the message is illegal"),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        SendStatus.MESSAGE_ILLEGAL,
        "the message properties are longer than 32767 bytes",
    ),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        SendStatus.SERVICE_NOT_AVAILABLE,
        "the message store is not writable",
    ),
    PutMessageStatus.OS_PAGECACHE_BUSY: (SendStatus.BUSY, "the page cache is busy"),
    PutMessageStatus.UNKNOWN_ERROR: (SendStatus.SYSTEM_ERROR, "unknown store error"),
    PutMessageStatus.DISK_FULL: (
        SendStatus.SERVICE_NOT_AVAILABLE,
        "disk full: the store cannot allocate a new file; writes resume once space is freed",
    ),
    PutMessageStatus.DISPATCH_BEHIND: (
        SendStatus.SERVICE_NOT_AVAILABLE,
        "the store cannot index stored messages yet: writes resume once it catches up",
    ),
}
UNKNOWN_STORE_STATUS = (SendStatus.SYSTEM_ERROR, "unknown store status")

# a single send holding neither property takes the batch's way into the log
DELAY_PROBE, TRAN_PROBE = DELAY + "\x01", TRAN_MSG + "\x01"


@dataclasses.dataclass(slots=True)
class SendOutcome:
    """What became of a send. ``msg_id`` is None when nothing was stored.
    ``put``: the store was asked (the transport then calls ``after_answer``
    once it answered). ``waiters``: the flush and slave waits the answer
    waits for (None: answer now)."""

    status: SendStatus
    remark: str | None = None
    msg_id: str | None = None
    queue_id: int = 0
    queue_offset: int = 0
    transaction_id: str | None = None
    waiters: list[Waiter] | None = None
    put: bool = False
    recall_handle: str | None = None  # a stored timer message's (protocol/recall_handle.py)


TIMER_PROBE_BYTES = TIMER_PROBE.encode()  # in a batch body exactly where a timer may be

# ---- what the service needs --------------------------------------------------------------


class SendStore(Protocol):
    """The message store's writes a send makes (DefaultMessageStore)."""

    disk_full: bool

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult: ...

    def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult: ...

    def put_batch(self, topic: str, queue_id: int, items: list[tuple[int, bytes, str]], *,
                  sys_flag: int, born_timestamp: int, born_host: str, reconsume_times: int,
                  defer: bool = False) -> PutMessageResult | None: ...

    def put_batch_body(self, topic: str, queue_id: int, data: bytes, *, sys_flag: int,
                       born_timestamp: int, born_host: str, reconsume_times: int,
                       defer: bool = False) -> PutMessageResult | None: ...

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None: ...

    def dispatch_deferred(self) -> None: ...


class SendTopics(Protocol):
    """The topic table (TopicConfigManager): look-ups and the creations a send makes."""

    def get(self, topic: str) -> TopicConfig | None: ...

    def create_topic_in_send_message_method(
        self, topic: str, default_topic: str, queue_nums: int) -> TopicConfig | None: ...

    def create_dead_letter_topic(self, topic: str) -> tuple[TopicConfig, bool]: ...

    def create_topic_in_send_back(self, topic: str, queue_nums: int,
                                  perm: int) -> TopicConfig: ...


class SendGroups(Protocol):
    """The subscription groups (SubscriptionGroupManager)."""

    def find(self, group: str) -> SubscriptionGroupConfig | None: ...


class HalfMessages(Protocol):
    """The transactional message service's side of a prepared message."""

    def pending_refusal(self, group: str) -> str | None: ...

    def prepare(self, inner: MessageExtBrokerInner, props: dict[str, str],
                group: str) -> PutMessageResult: ...


class DelayLevels(Protocol):
    """The schedule service's highest delay level."""

    max_level: int


GiveBackCheck = Callable[[MessageExt], str | None]


class SendService:
    """Sends and send-backs as domain values in, ``SendOutcome`` out.

    ``wait_flush`` (SYNC_FLUSH's group commit) and ``wait_slave`` (the HA
    service, SYNC_MASTER) each register a waiter for the offset a stored
    message's bytes end at. ``on_topics_changed`` is told of a topic created
    here (the name servers must hear of it); ``record_put`` and
    ``observe_put`` count stored puts (broker/stats.py)."""

    def __init__(self, config: BrokerConfig, role: LiveRole, store: SendStore,
                 topics: SendTopics, groups: SendGroups, half: HalfMessages,
                 delays: DelayLevels, *,
                 on_topics_changed: Callable[[], None],
                 record_put: Callable[[str, int, int], None],
                 observe_put: Callable[[float], None],
                 wait_flush: Callable[[int], Waiter] | None,
                 wait_slave: Callable[[int], Waiter]) -> None:
        self.config = config
        self.role = role
        self.store = store
        self.topics = topics
        self.groups = groups
        self.half = half
        self.delays = delays
        self.on_topics_changed = on_topics_changed
        self.record_put = record_put
        self.observe_put = observe_put
        self.wait_flush = wait_flush
        self.wait_slave = wait_slave
        self.after_answer = store.dispatch_deferred

    # ---- checks ----------------------------------------------------------------------

    def _slave_refusal(self) -> SendOutcome | None:
        """NO_PERMISSION on a slave: it stores only what its master replicates."""
        if not self.role.is_slave:
            return None
        return SendOutcome(SendStatus.NO_PERMISSION,
                           f"the broker[{self.config.broker_name}] is a slave, "
                           "sending message is forbidden")

    def _check(self, h: SendMessageRequestHeader) -> TopicConfig | SendOutcome:
        """The topic config, or the refusal (RocketMQ's msgCheck)."""
        refused = self._slave_refusal()
        if refused is not None:
            return refused
        config = self.config
        if not is_writeable(config.broker_permission):
            return SendOutcome(SendStatus.NO_PERMISSION,
                               f"the broker[{config.broker_name}] sending message is forbidden")
        reason = check_user_topic(h.topic)
        if reason is not None:
            return SendOutcome(SendStatus.MESSAGE_ILLEGAL, reason)
        cfg = self.topics.get(h.topic)
        if cfg is None and config.auto_create_topic_enable:
            cfg = self.topics.create_topic_in_send_message_method(
                h.topic, h.default_topic, h.default_topic_queue_nums)
            if cfg is not None:
                self.on_topics_changed()
        if cfg is None:
            return SendOutcome(SendStatus.TOPIC_NOT_EXIST,
                               f"topic[{h.topic}] not exist, apply first please!")
        if not is_writeable(cfg.perm):
            return SendOutcome(SendStatus.NO_PERMISSION,
                               f"the topic[{h.topic}] sending message is forbidden")
        if h.queue_id >= cfg.write_queue_nums:
            return SendOutcome(SendStatus.SYSTEM_ERROR,
                               f"request queueId[{h.queue_id}] is illegal, topic {h.topic} "
                               f"has {cfg.write_queue_nums} write queues")
        return cfg

    def _check_body(self, body: Any) -> SendOutcome | None:
        if not isinstance(body, bytes) or not body:
            return SendOutcome(SendStatus.MESSAGE_ILLEGAL, "the message body is empty")
        if len(body) > self.config.max_message_size:
            return SendOutcome(SendStatus.MESSAGE_ILLEGAL,
                               f"the message body size {len(body)} exceeds maxMessageSize "
                               f"{self.config.max_message_size}")
        return None

    @staticmethod
    def _queue_id(h: SendMessageRequestHeader, cfg: TopicConfig) -> int:
        return h.queue_id if h.queue_id >= 0 else random.randrange(cfg.write_queue_nums)

    # ---- outcomes --------------------------------------------------------------------

    def _outcome(self, result: PutMessageResult, queue_id: int, started: float,
                 topic: str, transaction_id: str | None = None) -> SendOutcome:
        """The outcome of a put: counted if stored, with the waiters its answer
        waits for (SYNC_FLUSH: the fsync; SYNC_MASTER: a slave's ack)."""
        status, remark = STORE_STATUS.get(result.put_message_status, UNKNOWN_STORE_STATUS)
        ar = result.append_result
        if status is SendStatus.OK:
            if ar is None:
                return SendOutcome(SendStatus.SYSTEM_ERROR, "store returned no append result",
                                   put=True)
            self.record_put(topic, ar.msg_num, ar.wrote_bytes)
            self.observe_put(time.perf_counter() - started)
            waiters = None
            sync_master = self.role.sync_master
            if self.wait_flush is not None or sync_master:
                end = ar.wrote_offset + ar.wrote_bytes
                waiters = [self.wait_flush(end)] if self.wait_flush is not None else []
                if sync_master:  # a slave must hold it too (GroupTransferService)
                    waiters.append(self.wait_slave(end))
            return SendOutcome(status, None, ar.msg_id, queue_id, ar.logics_offset,
                               transaction_id, waiters, True)
        if result.detail:
            remark = f"{remark}: {result.detail}"
        if status is SendStatus.SERVICE_NOT_AVAILABLE and self.store.disk_full:
            remark = (f"the broker[{self.config.broker_name}] disk is full (over "
                      f"{self.config.disk_space_warning_level_ratio}% used): writes refused, "
                      "reads served")
        if status not in STORED:
            return SendOutcome(status, remark, put=True)
        if ar is None:
            return SendOutcome(SendStatus.SYSTEM_ERROR, "store returned no append result",
                               put=True)
        return SendOutcome(status, remark, ar.msg_id, queue_id, ar.logics_offset,
                           transaction_id, None, True)

    # ---- retry and dead letters ------------------------------------------------------

    def _dead_letter_topic(self, group: str) -> TopicConfig:
        """``%DLQ%<group>``, created on first use (the name servers told).
        Raises InvalidNameError for a group that cannot have one."""
        cfg, created = self.topics.create_dead_letter_topic(dlq_topic(group))
        if created:
            self.on_topics_changed()
        return cfg

    def _past_retry_limit(self, h: SendMessageRequestHeader
                          ) -> SendMessageRequestHeader | SendOutcome:
        """RocketMQ's handleRetryAndDLQ: a send to ``%RETRY%<group>`` whose
        header's ``reconsumeTimes`` has reached the group's limit (the header's
        ``maxReconsumeTimes``, else the group's ``retryMaxTimes``) goes to
        ``%DLQ%<group>`` queue 0, its delay level dropped. Returns the header
        to store the message under, or the refusal."""
        if not h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return h
        group = h.topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        group_cfg = self.groups.find(group)
        if group_cfg is None:
            return SendOutcome(SendStatus.GROUP_NOT_EXIST,
                               f"subscription group {shown(group)} does not exist")
        if h.reconsume_times < group_cfg.retry_limit(h.max_reconsume_times):
            return h
        try:
            cfg = self._dead_letter_topic(group)
        except InvalidNameError as exc:
            return SendOutcome(SendStatus.SYSTEM_ERROR, str(exc))
        props = string_to_properties(h.properties)
        props.pop(DELAY, None)
        log.debug("send to a retry topic past its retry limit: dead letter", group=group,
                  reconsume_times=h.reconsume_times)
        return dataclasses.replace(h, topic=cfg.topic_name, queue_id=0,
                                   properties=properties_to_string(props))

    # ---- sends -----------------------------------------------------------------------

    def send(self, h: SendMessageRequestHeader, body: bytes | None,
             born_host: str) -> SendOutcome:
        """One message, or a batch if the header's ``batch`` flag says so.
        Raises RemoteProtocolError for a batch body that is no batch."""
        if h.batch:
            return self.send_batch(h, body, born_host)
        return self.send_single(h, body, born_host)

    def send_single(self, h: SendMessageRequestHeader, body: bytes | None,
                    born_host: str) -> SendOutcome:
        """One message (``send`` when the header says no batch)."""
        cfg = self._check(h)
        if isinstance(cfg, SendOutcome):
            return cfg
        refused = self._check_body(body)
        if refused is not None:
            return refused
        assert body is not None
        routed = self._past_retry_limit(h)
        if isinstance(routed, SendOutcome):
            return routed
        h = routed
        queue_id = self._queue_id(h, cfg)
        text = h.properties
        if DELAY_PROBE not in text and TRAN_PROBE not in text and TIMER_PROBE not in text \
                and transaction_type(h.sys_flag) == TRANSACTION_NOT_TYPE:
            # the usual send (no delay, no transaction): as one message of a batch,
            # with no properties dict or message object (CommitLog.put_batch)
            started = time.perf_counter()
            result = self.store.put_batch(h.topic, queue_id, [(h.flag, body, text)],
                                          sys_flag=h.sys_flag,
                                          born_timestamp=h.born_timestamp or int(time.time() * 1000),
                                          born_host=born_host,
                                          reconsume_times=h.reconsume_times, defer=True)
            if result is not None:
                return self._outcome(result, queue_id, started, h.topic)
        props = string_to_properties(text)
        inner = build_inner(
            h.topic, queue_id, body, props, props_text=text,
            flag=h.flag, sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
            born_host=born_host, reconsume_times=h.reconsume_times,
        )
        level = props.get(DELAY, "0")
        if level not in ("0", ""):
            if not (level.isascii() and level.lstrip("-").isdigit() and len(level) < 10):
                return SendOutcome(SendStatus.MESSAGE_ILLEGAL, f"bad delay level {shown(level)}")
        delayed = int(level or "0") > 0
        due = self._timer_due(props)
        if isinstance(due, SendOutcome):
            return due
        if is_prepared(h.sys_flag, props):
            if due is not None:
                return SendOutcome(SendStatus.MESSAGE_ILLEGAL,
                                   "a timer message cannot be transactional")
            refused = self._transaction_refusal(delayed)
            if refused is not None:
                return refused
            busy = self.half.pending_refusal(props.get(PGROUP, h.producer_group))
            if busy is not None:
                return SendOutcome(SendStatus.BUSY, busy)
            started = time.perf_counter()
            result = self.half.prepare(inner, props, h.producer_group)
            return self._outcome(result, queue_id, started, h.topic, inner.uniq_key)
        if transaction_type(h.sys_flag) != TRANSACTION_NOT_TYPE:
            return SendOutcome(SendStatus.MESSAGE_ILLEGAL,
                               "a commit or rollback sysFlag is the broker's to set")
        if delayed:
            to_schedule(inner, props, self.delays.max_level)
        elif due is not None and due > int(time.time() * 1000):
            to_timer(inner, props, due)
            started = time.perf_counter()
            out = self._outcome(self.store.put_message(inner), queue_id, started, h.topic)
            if out.msg_id is not None and inner.uniq_key:
                out.recall_handle = build_handle(h.topic, self.config.broker_name, due,
                                                 inner.uniq_key)
            return out
        started = time.perf_counter()
        result = self.store.put_message(inner)
        return self._outcome(result, queue_id, started, h.topic)

    def _timer_due(self, props: dict[str, str]) -> int | SendOutcome | None:
        """A send's due time (broker/timer/rules.py), None without a timer, or
        the refusal of a bad or too late one, or of any when timers are off."""
        if not has_timer(props):
            return None
        if not self.config.timer_wheel_enable:
            return SendOutcome(SendStatus.MESSAGE_ILLEGAL,
                               "timer messages are off on this broker (timerWheelEnable=false)")
        try:
            return timer_due_ms(props, int(time.time() * 1000),
                                self.config.timer_max_delay_sec * 1000)
        except TimerRefusal as exc:
            return SendOutcome(SendStatus.MESSAGE_ILLEGAL, str(exc))

    def _transaction_refusal(self, delayed: bool) -> SendOutcome | None:
        if self.config.reject_transaction_message:
            return SendOutcome(SendStatus.NO_PERMISSION,
                               f"the broker[{self.config.broker_name}] sending transaction "
                               "message is forbidden")
        if delayed:
            return SendOutcome(SendStatus.MESSAGE_ILLEGAL,
                               "a delayed message cannot be transactional")
        return None

    def send_batch(self, h: SendMessageRequestHeader, body: bytes | None,
                   born_host: str) -> SendOutcome:
        """A batch (``send`` when the header says batch). Raises
        RemoteProtocolError for an empty body."""
        cfg = self._check(h)
        if isinstance(cfg, SendOutcome):
            return cfg
        if transaction_type(h.sys_flag) != TRANSACTION_NOT_TYPE:
            return SendOutcome(SendStatus.MESSAGE_ILLEGAL,
                               "a batch cannot be transactional: send each prepared message alone")
        if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # RocketMQ 5's refusal
            return SendOutcome(SendStatus.MESSAGE_ILLEGAL,
                               f"batch request does not support retry group {h.topic}")
        if not body:
            raise RemoteProtocolError("batch body must hold at least one message")
        if TIMER_PROBE_BYTES in body and any(
                has_timer(string_to_properties(text)) for _, _, text in decode_batch(body)):
            # a batch is put as it is: a timer would be ignored (RocketMQ's clients
            # refuse a delay in a batch; its broker would store it as due at once)
            return SendOutcome(SendStatus.MESSAGE_ILLEGAL,
                               "timer messages cannot be batched: send each alone")
        queue_id = self._queue_id(h, cfg)
        store = self.store
        born = h.born_timestamp or int(time.time() * 1000)
        started = time.perf_counter()
        # straight from the body into the log where the compiled loops run and
        # nothing is out of the ordinary; otherwise decoded, checked, and put
        result = store.put_batch_body(h.topic, queue_id, body, sys_flag=h.sys_flag,
                                      born_timestamp=born, born_host=born_host,
                                      reconsume_times=h.reconsume_times, defer=True)
        if result is None:
            items = decode_batch(body)
            for _, item_body, text in items:
                refused = self._check_body(item_body)
                if refused is not None:
                    return refused
                if TRAN_PROBE in text and is_prepared(0, string_to_properties(text)):
                    return SendOutcome(SendStatus.MESSAGE_ILLEGAL,
                                       "a batch cannot be transactional: send each prepared "
                                       "message alone")
            result = store.put_batch(h.topic, queue_id, items, sys_flag=h.sys_flag,
                                     born_timestamp=born, born_host=born_host,
                                     reconsume_times=h.reconsume_times, defer=True)
            if result is None:  # out of the ordinary: the general way says what is wrong
                result = store.put_messages(build_batch_inners(
                    h.topic, queue_id, items, sys_flag=h.sys_flag, born_timestamp=born,
                    born_host=born_host, reconsume_times=h.reconsume_times))
        return self._outcome(result, queue_id, started, h.topic)

    # ---- send-back -------------------------------------------------------------------

    def send_back(self, h: ConsumerSendMsgBackRequestHeader,
                  may_give_back: GiveBackCheck | None = None, *,
                  immediate: bool = False) -> SendOutcome:
        """A consumer gives a message back: to its group's retry topic with a
        delay, or to the dead-letter topic past the retry limit (or when the
        consumer asks, with a negative delay level). ``may_give_back`` (ACL)
        says why the caller may not give back a message that is not of its
        group's own retry topic, or None when it may. ``immediate``: the retry
        is visible at once, with no delay level (POP's revive: the invisible
        time was the back-off)."""
        refused = self._slave_refusal()
        if refused is not None:
            return refused
        msg = self.store.look_message_by_offset(h.offset)
        if msg is None:
            return SendOutcome(SendStatus.SYSTEM_ERROR,
                               f"look message by offset failed, {h.offset}")
        # the message given back must be one the group consumes: of the group's own
        # retry topic, or one the caller may consume (else any message could be
        # copied into the caller's retry topic)
        if may_give_back is not None and msg.topic != RETRY_GROUP_TOPIC_PREFIX + h.group:
            denied = may_give_back(msg)
            if denied is not None:
                return SendOutcome(SendStatus.NO_PERMISSION, denied)
        group_cfg = self.groups.find(h.group)
        if group_cfg is None:
            return SendOutcome(SendStatus.GROUP_NOT_EXIST,
                               f"subscription group {shown(h.group)} does not exist")
        reconsume = msg.reconsume_times  # failures so far, before this one
        to_dlq = reconsume >= group_cfg.retry_limit(h.max_reconsume_times) or h.delay_level < 0
        try:
            if to_dlq:
                cfg = self._dead_letter_topic(h.group)
                queue_id = 0
                level = 0
            else:
                cfg = self.topics.create_topic_in_send_back(
                    retry_topic(h.group), max(1, group_cfg.retry_queue_nums), PERM_RW)
                queue_id = random.randrange(cfg.write_queue_nums) if cfg.write_queue_nums > 0 else 0
                level = 0 if immediate else h.delay_level or 3 + reconsume
                self.on_topics_changed()
        except InvalidNameError as exc:
            return SendOutcome(SendStatus.SYSTEM_ERROR, str(exc))
        topic = cfg.topic_name
        inner = send_back_message(msg, topic, queue_id, h.origin_msg_id, level,
                                  self.delays.max_level)
        started = time.perf_counter()
        result = self.store.put_message(inner)
        return self._outcome(result, queue_id, started, topic)
