"""SendMessageProcessor: SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE,
CONSUMER_SEND_MSG_BACK.

The three send codes are one entry point (``send``), as RocketMQ's: the header
is SendMessageRequestHeader for SEND_MESSAGE, its one-letter form
(SendMessageRequestHeaderV2) for SEND_MESSAGE_V2 and for a SEND_BATCH_MESSAGE
that carries it (RocketMQ's clients; this project's producer sends the long
names). The header's ``batch`` flag decides, whatever the code, as in
RocketMQ's broker: true is a batch (the C++ client sends its batches as
SEND_MESSAGE_V2), false or absent one message, even under SEND_BATCH_MESSAGE
(its body is then stored as it came).

A send to ``%RETRY%<group>`` (RocketMQ's clients send a message there
themselves when CONSUMER_SEND_MSG_BACK fails) whose ``reconsumeTimes`` has
reached the group's limit is stored in ``%DLQ%<group>`` instead
(handleRetryAndDLQ); a batch to a retry topic is refused, as RocketMQ 5's
broker does.

Runs inline in the connection's reader loop: every check and the store append
are synchronous, so a send costs no await on the broker. A SLAVE refuses all
three with NO_PERMISSION before anything else (no topic is auto-created): the
producer moves on to a master.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from broker.acl.stored import message_needs
from broker.config import BrokerRole
from broker.message_rewrite import (
    DELAY,
    PGROUP,
    TRAN_MSG,
    build_batch_inners,
    build_inner,
    is_prepared,
    send_back_message,
    to_schedule,
)
from broker.store import MessageExtBrokerInner, PutMessageResult, PutMessageStatus
from broker.store.offset_waiters import AllDone, Waiter
from broker.topic_validator import check_user_topic
from protocol.batch import decode_batch
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
    is_v2_send_header,
)
from protocol.message import MessageConst, properties_to_string, string_to_properties
from protocol.names import (
    RETRY_GROUP_TOPIC_PREFIX,
    InvalidNameError,
    dlq_topic,
    retry_topic,
    shown,
)
from protocol.record import TRANSACTION_NOT_TYPE, transaction_type
from protocol.route import PERM_RW, TopicConfig, is_writeable
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger("broker.send")

PUT_STATUS_TO_CODE: dict[PutMessageStatus, tuple[int, str | None]] = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (
        ResponseCode.FLUSH_DISK_TIMEOUT,
        "flush disk timeout: the message is stored but not yet on disk",
    ),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, "flush slave timeout"),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, "slave not available"),
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: (ResponseCode.SYSTEM_ERROR, "create mapped file failed"),
    PutMessageStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, "the message is illegal"),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message properties are longer than 32767 bytes",
    ),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "the message store is not writable",
    ),
    PutMessageStatus.OS_PAGECACHE_BUSY: (ResponseCode.SYSTEM_BUSY, "the page cache is busy"),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "unknown store error"),
    PutMessageStatus.DISK_FULL: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "disk full: the store cannot allocate a new file; writes resume once space is freed",
    ),
    PutMessageStatus.DISPATCH_BEHIND: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "the store cannot index stored messages yet: writes resume once it catches up",
    ),
}


MSG_REGION, TRACE_ON = MessageConst.PROPERTY_MSG_REGION, MessageConst.PROPERTY_TRACE_SWITCH

# a single send holding neither property takes the batch's way into the log
DELAY_PROBE, TRAN_PROBE = DELAY + "\x01", TRAN_MSG + "\x01"


class SendMessageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller
        self.config = controller.config
        self.stats = controller.stats
        self.put_latency = controller.put_latency
        self._trace_fields = {MSG_REGION: self.config.region_id,
                              TRACE_ON: "true" if self.config.trace_on else "false"}

    def _count(self, topic: str, result: PutMessageResult, started: float) -> None:
        """A stored put: its messages and bytes (per request, broker/stats.py)
        and the store's latency."""
        ar = result.append_result
        if ar is not None and result.put_message_status is PutMessageStatus.PUT_OK:
            self.stats.record_put(topic, ar.msg_num, ar.wrote_bytes)
            self.put_latency.observe(time.perf_counter() - started)

    # ---- checks ----------------------------------------------------------------

    def _slave_refusal(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """NO_PERMISSION on a slave: it stores only what its master replicates."""
        if not self.config.is_slave:
            return None
        return self._fail(cmd, ResponseCode.NO_PERMISSION,
                          f"the broker[{self.config.broker_name}] is a slave, "
                          "sending message is forbidden")

    def _check(
        self, cmd: RemotingCommand, h: SendMessageRequestHeader
    ) -> tuple[RemotingCommand | None, TopicConfig | None]:
        """The topic config, or an error response (RocketMQ's msgCheck)."""
        refused = self._slave_refusal(cmd)
        if refused is not None:
            return refused, None
        if not is_writeable(self.config.broker_permission):
            return self._fail(cmd, ResponseCode.NO_PERMISSION,
                              f"the broker[{self.config.broker_name}] sending message is forbidden"), None
        reason = check_user_topic(h.topic)
        if reason is not None:
            return self._fail(cmd, ResponseCode.MESSAGE_ILLEGAL, reason), None
        topics = self.controller.topic_config_manager
        cfg = topics.get(h.topic)
        if cfg is None and self.config.auto_create_topic_enable:
            cfg = topics.create_topic_in_send_message_method(
                h.topic, h.default_topic, h.default_topic_queue_nums
            )
            if cfg is not None:
                self.controller.trigger_register()
        if cfg is None:
            return self._fail(cmd, ResponseCode.TOPIC_NOT_EXIST,
                              f"topic[{h.topic}] not exist, apply first please!"), None
        if not is_writeable(cfg.perm):
            return self._fail(cmd, ResponseCode.NO_PERMISSION,
                              f"the topic[{h.topic}] sending message is forbidden"), None
        if h.queue_id >= cfg.write_queue_nums:
            return self._fail(cmd, ResponseCode.SYSTEM_ERROR,
                              f"request queueId[{h.queue_id}] is illegal, topic {h.topic} "
                              f"has {cfg.write_queue_nums} write queues"), None
        return None, cfg

    def _check_body(self, cmd: RemotingCommand, body: Any) -> RemotingCommand | None:
        if not isinstance(body, bytes) or not body:
            return self._fail(cmd, ResponseCode.MESSAGE_ILLEGAL, "the message body is empty")
        if len(body) > self.config.max_message_size:
            return self._fail(
                cmd,
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size {len(body)} exceeds maxMessageSize "
                f"{self.config.max_message_size}",
            )
        return None

    @staticmethod
    def _fail(cmd: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        return cmd.response(code, remark)

    # ---- handlers --------------------------------------------------------------

    def _inner(
        self, h: SendMessageRequestHeader, queue_id: int, flag: int, body: bytes,
        props_text: str, born_host: str, props: dict[str, str] | None = None,
    ) -> MessageExtBrokerInner:
        """The message to store; ``props`` is ``props_text`` already parsed, if it is."""
        if props is None:
            props = string_to_properties(props_text)
        return build_inner(
            h.topic, queue_id, body, props, props_text=props_text,
            flag=flag, sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
            born_host=born_host, reconsume_times=h.reconsume_times,
        )

    def _queue_id(self, h: SendMessageRequestHeader, cfg: TopicConfig) -> int:
        return h.queue_id if h.queue_id >= 0 else random.randrange(cfg.write_queue_nums)

    # ---- retry and dead letters ------------------------------------------------

    def _dead_letter_topic(self, group: str) -> TopicConfig:
        """``%DLQ%<group>``, created on first use (the name servers told).
        Raises InvalidNameError for a group that cannot have one."""
        cfg, created = self.controller.topic_config_manager.create_dead_letter_topic(
            dlq_topic(group))
        if created:
            self.controller.trigger_register()
        return cfg

    def _past_retry_limit(self, cmd: RemotingCommand, h: SendMessageRequestHeader
                          ) -> tuple[RemotingCommand | None, SendMessageRequestHeader]:
        """RocketMQ's handleRetryAndDLQ: a send to ``%RETRY%<group>`` whose
        header's ``reconsumeTimes`` has reached the group's limit (the header's
        ``maxReconsumeTimes``, else the group's ``retryMaxTimes``) goes to
        ``%DLQ%<group>`` queue 0, its delay level dropped. Returns (an error
        response or None, the header to store the message under)."""
        if not h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return None, h
        group = h.topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        group_cfg = self.controller.subscription_group_manager.find(group)
        if group_cfg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group {shown(group)} does not exist"), h
        if h.reconsume_times < group_cfg.retry_limit(h.max_reconsume_times):
            return None, h
        try:
            cfg = self._dead_letter_topic(group)
        except InvalidNameError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc)), h
        props = string_to_properties(h.properties)
        props.pop(DELAY, None)
        log.debug("send to a retry topic past its retry limit: dead letter", group=group,
                 reconsume_times=h.reconsume_times)
        return None, dataclasses.replace(h, topic=cfg.topic_name, queue_id=0,
                                         properties=properties_to_string(props))

    @staticmethod
    def send_header(cmd: RemotingCommand) -> SendMessageRequestHeader:
        """The send header of ``cmd``, whichever form it came in (RocketMQ's
        SendMessageRequestHeader.parseRequestHeader). Raises RemoteProtocolError."""
        fields = cmd.ext_fields
        if cmd.code == RequestCode.SEND_MESSAGE_V2 or (
                cmd.code == RequestCode.SEND_BATCH_MESSAGE and is_v2_send_header(fields)):
            return SendMessageRequestHeaderV2.from_fields(fields).to_v1()
        return SendMessageRequestHeader.from_fields(fields)

    def send(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        """SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE."""
        h = self.send_header(cmd)
        if h.batch:
            return self._send_batch(conn, cmd, h)
        return self._send_single(conn, cmd, h)

    send_message = send
    send_batch_message = send

    def _send_single(self, conn: RemotingConnection, cmd: RemotingCommand,
                     h: SendMessageRequestHeader) -> RemotingCommand | None:
        err, cfg = self._check(cmd, h)
        if err is not None:
            return err
        assert cfg is not None
        err = self._check_body(cmd, cmd.body)
        if err is not None:
            return err
        assert cmd.body is not None
        err, h = self._past_retry_limit(cmd, h)
        if err is not None:
            return err
        queue_id = self._queue_id(h, cfg)
        text = h.properties
        if DELAY_PROBE not in text and TRAN_PROBE not in text \
                and transaction_type(h.sys_flag) == TRANSACTION_NOT_TYPE:
            # the usual send (no delay, no transaction): as one message of a batch,
            # with no properties dict or message object (CommitLog.put_batch)
            store = self.controller.message_store
            started = time.perf_counter()
            result = store.put_batch(h.topic, queue_id, [(h.flag, cmd.body, text)],
                                     sys_flag=h.sys_flag,
                                     born_timestamp=h.born_timestamp or int(time.time() * 1000),
                                     born_host=conn.remote_addr,
                                     reconsume_times=h.reconsume_times, defer=True)
            if result is not None:
                self._count(h.topic, result, started)
                return self._reply(conn, cmd, self._response(cmd, result, queue_id), result)
        props = string_to_properties(text)
        inner = self._inner(h, queue_id, h.flag, cmd.body, h.properties, conn.remote_addr, props)
        level = props.get(DELAY, "0")
        if level not in ("0", ""):
            if not (level.isascii() and level.lstrip("-").isdigit() and len(level) < 10):
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"bad delay level {shown(level)}")
        delayed = int(level or "0") > 0
        if is_prepared(h.sys_flag, props):
            refused = self._transaction_refusal(cmd, delayed)
            if refused is not None:
                return refused
            busy = self.controller.transaction_service.pending_refusal(
                props.get(PGROUP, h.producer_group))
            if busy is not None:
                return cmd.response(ResponseCode.SYSTEM_BUSY, busy)
            started = time.perf_counter()
            result = self.controller.transaction_service.prepare(inner, props, h.producer_group)
            self._count(h.topic, result, started)
            return self._reply(conn, cmd, self._response(cmd, result, queue_id, inner.uniq_key),
                               result)
        if transaction_type(h.sys_flag) != TRANSACTION_NOT_TYPE:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL,
                                "a commit or rollback sysFlag is the broker's to set")
        if delayed:
            to_schedule(inner, props, self.controller.schedule_service.max_level)
        started = time.perf_counter()
        result = self.controller.message_store.put_message(inner)
        self._count(h.topic, result, started)
        return self._reply(conn, cmd, self._response(cmd, result, queue_id), result)

    def _transaction_refusal(self, cmd: RemotingCommand, delayed: bool) -> RemotingCommand | None:
        if self.config.reject_transaction_message:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                f"the broker[{self.config.broker_name}] sending transaction "
                                "message is forbidden")
        if delayed:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL,
                                "a delayed message cannot be transactional")
        return None

    def consumer_send_msg_back(
        self, conn: RemotingConnection, cmd: RemotingCommand
    ) -> RemotingCommand | None:
        """A consumer gives a message back: retry topic with a delay, or the DLQ."""
        h = ConsumerSendMsgBackRequestHeader.from_fields(cmd.ext_fields)
        refused = self._slave_refusal(cmd)
        if refused is not None:
            return refused
        store = self.controller.message_store
        msg = store.look_message_by_offset(h.offset)
        if msg is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"look message by offset failed, {h.offset}")
        # ACL: the guard checked SUB on the group; the message given back must be
        # one the group consumes: of the group's own retry topic, or of a topic the
        # account may SUB (else any message could be copied into the caller's retry topic)
        if msg.topic != RETRY_GROUP_TOPIC_PREFIX + h.group:
            denied = self.controller.acl_check.refusal(
                conn, cmd, message_needs(msg.topic, msg.properties),
                remark=f"No permission for the message at commit-log offset {h.offset}: "
                       "SUB on its topic needed to give it back")
            if denied is not None:
                return cmd.response(ResponseCode.NO_PERMISSION, denied.remark)
        group_cfg = self.controller.subscription_group_manager.find(h.group)
        if group_cfg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group {shown(h.group)} does not exist")
        topics = self.controller.topic_config_manager
        reconsume = msg.reconsume_times  # failures so far, before this one
        to_dlq = reconsume >= group_cfg.retry_limit(h.max_reconsume_times) or h.delay_level < 0
        try:
            if to_dlq:
                cfg = self._dead_letter_topic(h.group)
                queue_id = 0
                level = 0
            else:
                cfg = topics.create_topic_in_send_back(
                    retry_topic(h.group), max(1, group_cfg.retry_queue_nums), PERM_RW)
                queue_id = random.randrange(cfg.write_queue_nums) if cfg.write_queue_nums > 0 else 0
                level = h.delay_level or 3 + reconsume
                self.controller.trigger_register()
        except InvalidNameError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
        topic = cfg.topic_name
        inner = send_back_message(msg, topic, queue_id, h.origin_msg_id, level,
                                  self.controller.schedule_service.max_level)
        started = time.perf_counter()
        result = store.put_message(inner)
        self._count(topic, result, started)
        response = self._response(cmd, result, queue_id)
        if response.code == ResponseCode.SUCCESS:
            response.ext_fields = {}
        return self._reply(conn, cmd, response, result)

    def _send_batch(self, conn: RemotingConnection, cmd: RemotingCommand,
                    h: SendMessageRequestHeader) -> RemotingCommand | None:
        err, cfg = self._check(cmd, h)
        if err is not None:
            return err
        assert cfg is not None
        if transaction_type(h.sys_flag) != TRANSACTION_NOT_TYPE:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL,
                                "a batch cannot be transactional: send each prepared message alone")
        if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # RocketMQ 5's refusal
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL,
                                f"batch request does not support retry group {h.topic}")
        if not cmd.body:
            raise RemoteProtocolError("batch body must hold at least one message")
        queue_id = self._queue_id(h, cfg)
        store = self.controller.message_store
        born = h.born_timestamp or int(time.time() * 1000)
        started = time.perf_counter()
        # straight from the body into the log where the compiled loops run and
        # nothing is out of the ordinary; otherwise decoded, checked, and put
        result = store.put_batch_body(h.topic, queue_id, cmd.body, sys_flag=h.sys_flag,
                                      born_timestamp=born, born_host=conn.remote_addr,
                                      reconsume_times=h.reconsume_times, defer=True)
        if result is None:
            items = decode_batch(cmd.body)
            max_size = self.config.max_message_size
            prepared = TRAN_MSG + "\x01"
            for _, body, text in items:
                if not body or len(body) > max_size:
                    return self._check_body(cmd, body)  # says which
                if prepared in text and is_prepared(0, string_to_properties(text)):
                    return cmd.response(ResponseCode.MESSAGE_ILLEGAL,
                                        "a batch cannot be transactional: send each prepared "
                                        "message alone")
            result = store.put_batch(h.topic, queue_id, items, sys_flag=h.sys_flag,
                                     born_timestamp=born, born_host=conn.remote_addr,
                                     reconsume_times=h.reconsume_times, defer=True)
            if result is None:  # out of the ordinary: the general way says what is wrong
                result = store.put_messages(build_batch_inners(
                    h.topic, queue_id, items, sys_flag=h.sys_flag, born_timestamp=born,
                    born_host=conn.remote_addr, reconsume_times=h.reconsume_times))
        self._count(h.topic, result, started)
        return self._reply(conn, cmd, self._response(cmd, result, queue_id), result)

    def _response(
        self, cmd: RemotingCommand, result: PutMessageResult, queue_id: int,
        transaction_id: str | None = None,
    ) -> RemotingCommand:
        code, remark = PUT_STATUS_TO_CODE.get(
            result.put_message_status, (ResponseCode.SYSTEM_ERROR, "unknown store status")
        )
        if result.detail and code != ResponseCode.SUCCESS:
            remark = f"{remark}: {result.detail}"
        if self.controller.message_store.disk_full and code == ResponseCode.SERVICE_NOT_AVAILABLE:
            remark = (f"the broker[{self.config.broker_name}] disk is full (over "
                      f"{self.config.disk_space_warning_level_ratio}% used): writes refused, reads served")
        ar = result.append_result
        if code != ResponseCode.SUCCESS and code not in (
            ResponseCode.FLUSH_DISK_TIMEOUT,
            ResponseCode.FLUSH_SLAVE_TIMEOUT,
            ResponseCode.SLAVE_NOT_AVAILABLE,
        ):
            return cmd.response(code, remark)
        if ar is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "store returned no append result")
        header = SendMessageResponseHeader(ar.msg_id, queue_id, ar.logics_offset, transaction_id)
        fields = header.to_fields()
        fields.update(self._trace_fields)  # MSG_REGION, TRACE_ON (as RocketMQ's)
        return cmd.response(code, remark, ext_fields=fields)

    def _reply(
        self, conn: RemotingConnection, cmd: RemotingCommand, response: RemotingCommand,
        result: PutMessageResult,
    ) -> RemotingCommand | None:
        """The response now, or None when it is answered once the waiters it
        joined are done (SYNC_FLUSH: the fsync; SYNC_MASTER: a slave's ack).
        A oneway send joins the waiters too (its bytes are flushed like any
        other's) and is never answered.

        What a put left undispatched (``defer=True``) is indexed after the
        answer is written: it is off the send's critical path, and a
        SYNC_FLUSH's indexing does not compete with its fsync (dispatching
        while the fsync ran made single sends slower). Until then the
        records are in the commit log only; any put dispatches them first."""
        store = self.controller.message_store
        commit = self.controller.group_commit
        sync_master = self.config.broker_role is BrokerRole.SYNC_MASTER
        ar = result.append_result
        if (commit is None and not sync_master) or response.code != ResponseCode.SUCCESS \
                or ar is None:
            conn.after_answers(store.dispatch_deferred)
            return response
        end = ar.wrote_offset + ar.wrote_bytes
        waiters = [commit.wait(end)] if commit is not None else []
        if sync_master:  # a slave must hold it too (GroupTransferService)
            waiters.append(self.controller.ha_service.wait_slave(end))
        answer_when_done(conn, response, waiters, send=not cmd.is_oneway,
                         then=store.dispatch_deferred)
        return None


def answer_when_done(conn: RemotingConnection, response: RemotingCommand,
                     waiters: list[Waiter], send: bool = True,
                     then: Callable[[], None] | None = None) -> None:
    """Send ``response`` once every waiter is done; the worst status decides
    its code and remark (PUT_STATUS_TO_CODE), the send result travels anyway.
    ``send`` False (a oneway request): only wait. ``then`` runs after."""

    def answer(done: AllDone) -> None:
        if send:
            status = done.status
            if status is not None and status is not PutMessageStatus.PUT_OK:
                code, remark = PUT_STATUS_TO_CODE.get(
                    status, (ResponseCode.SYSTEM_ERROR, "unknown store status"))
                response.code, response.remark = int(code), remark
            conn.send_response(response)
        if then is not None:
            then()

    AllDone(waiters).on_done(answer)
