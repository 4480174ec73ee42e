"""PullMessageProcessor: PULL_MESSAGE.

The response body is the stored records, concatenated as they are on disk.
A pull with the suspend flag that finds nothing is held (long polling), unless
its filter skipped a whole window of entries and more remain: that one is
answered PULL_RETRY_IMMEDIATELY at once, past the window, as RocketMQ's.

A pull filters by tags (the consume queue's hashes) or, with
``enablePropertyFilter``, by an SQL92 expression over each record's
properties (``broker/consumer_filter_manager.py``, docs/filters.md).

Every response says which broker of the group to pull that queue from next
(``suggestWhichBrokerId``, RocketMQ's rules, ``suggest_which_broker_id``):
with ``slaveReadEnable`` a pull that read cold data (the store's
``suggest_pulling_from_slave``) is sent to the subscription group's
``whichBrokerWhenConsumeSlowly`` and any other to the group's ``brokerId``
(the master unless configured), so a slave sends a consumer that has caught
up back to the master; without it, always the master.

A slave serves pulls (also when its master is down) but never moves a
consumer's offset (RocketMQ's nextOffsetCorrection without offsetCheckInSlave,
``slave_outcome``): it may simply not have the master's latest records yet, so
"offset moved" becomes "retry" at the same offset, and offsets piggybacked on
pulls are stored by masters only (a slave copies its master's table).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.consumer_filter_manager import MessageFilter, sql_filter, tag_filter
from broker.store import GetMessageStatus
from broker.subscription_group_manager import SubscriptionGroupConfig
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.filter import parse_sub_expression
from protocol.filter_sql import SQL92, SqlParseError, is_tag_type, unsupported_remark
from protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from protocol.route import MASTER_ID, is_readable
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.controller import BrokerController

# sysFlag bits of a pull request, as RocketMQ's PullSysFlag. Without
# FLAG_SUBSCRIPTION the request's subscription is not used: the broker takes the
# one the group's consumers registered with their heart-beats (a Java push
# consumer sends none by default). Class filters and lite pulls change nothing
# here; unknown bits are ignored.
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8
FLAG_LITE_PULL = 0x10

GET_STATUS_TO_CODE: dict[GetMessageStatus, int] = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MESSAGE_IN_QUEUE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE: ResponseCode.PULL_OFFSET_MOVED,
}


# Answers that mean "nothing for you yet": a held pull waits on these, unless
# its scan stopped short of the queue's end (a filter skipped a window of
# entries that matched nothing: the client goes on at once, as RocketMQ's
# PULL_RETRY_IMMEDIATELY).
_EMPTY = (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY)

# Outcomes whose next offset is where reading goes on (records were scanned);
# the others' next offset is a correction a slave does not make.
_SCANNED = (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE,
            GetMessageStatus.MESSAGE_WAS_REMOVING)


def suggest_which_broker_id(
    slave_read_enable: bool, cold: bool, group: SubscriptionGroupConfig
) -> int:
    """The broker id a consumer should pull the queue from next (RocketMQ's
    PullMessageProcessor): with ``slaveReadEnable``, the group's
    ``whichBrokerWhenConsumeSlowly`` after a cold read, else its ``brokerId``;
    without it, the master."""
    if not slave_read_enable:
        return MASTER_ID
    return group.which_broker_when_consume_slowly if cold else group.broker_id


def slave_outcome(
    status: GetMessageStatus, code: int, next_begin_offset: int, requested: int
) -> tuple[int, int]:
    """(response code, next offset) of a slave's answer: the requested offset
    stays where it is unless records were scanned, and "offset moved" becomes
    "retry" (a lagging slave must not send a consumer back or forward)."""
    if status in _SCANNED:
        return code, next_begin_offset
    if code == ResponseCode.PULL_OFFSET_MOVED:
        code = ResponseCode.PULL_RETRY_IMMEDIATELY
    return code, requested


class PullMessageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller
        self.config = controller.config
        self.stats = controller.stats

    def pull_message(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        return self.process(conn, cmd, allow_suspend=True)

    def retry_held(
        self, conn: RemotingConnection, cmd: RemotingCommand, final: bool
    ) -> RemotingCommand | None:
        """Re-run a held pull: its response, or None to keep holding it. A
        re-run that scanned new entries and matched none keeps holding from
        past them, so the next one reads only what arrives next (a property
        filter is not asked about a record twice)."""
        response, more = self._process(conn, cmd, allow_suspend=False)
        if not final and response is not None and response.code in _EMPTY and not more:
            nxt = PullMessageResponseHeader.from_fields(response.ext_fields).next_begin_offset
            fields = cmd.ext_fields
            asked = fields.get("queueOffset")
            if nxt > PullMessageRequestHeader.from_fields(fields).queue_offset:
                fields["queueOffset"] = str(nxt) if isinstance(asked, str) else nxt
            return None
        return response

    def queue_tags_codes(self, topic: str, queue_id: int, offset: int, max_count: int
                         ) -> list[int]:
        """The tags codes of up to ``max_count`` consume-queue entries from
        ``offset`` (fewer at the queue's end or at a gap): what the hold
        service matches held pulls against when messages arrive."""
        cq = self.controller.message_store.consume_queue_table.get(topic, {}).get(queue_id)
        codes: list[int] = []
        if cq is None:
            return codes
        while len(codes) < max_count:  # bounded: each round adds an entry or stops
            entries = cq.get_entries(offset + len(codes), max_count - len(codes))
            if not entries:
                break
            codes.extend(tag for _, _, tag in entries)
        return codes

    def subscription_filter(
        self, cmd: RemotingCommand, h: PullMessageRequestHeader, group_cfg: SubscriptionGroupConfig,
    ) -> tuple[RemotingCommand | None, MessageFilter]:
        """(refusal, _) or (None, how to filter): from the request's
        subscription with FLAG_SUBSCRIPTION, else from the group's heart-beats
        (RocketMQ's PullMessageProcessor). An SQL92 subscription needs
        ``enablePropertyFilter``; its expression is compiled once per
        subscription (``ConsumerFilterManager``)."""
        nothing = MessageFilter()
        from_request = bool(h.sys_flag & FLAG_SUBSCRIPTION)
        if from_request:
            expression, expression_type = h.subscription, h.expression_type
            version = h.sub_version
        else:
            info = self.controller.consumer_manager.groups.get(h.consumer_group)
            if info is None:
                return cmd.response(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                    "the consumer's group info not exist"), nothing
            if info.message_model == "BROADCASTING" and not group_cfg.consume_broadcast_enable:
                return cmd.response(ResponseCode.NO_PERMISSION,
                                    f"the consumer group[{h.consumer_group}] can not consume "
                                    "by broadcast way"), nothing
            sub = info.subscriptions.get(h.topic)
            if sub is None:
                return cmd.response(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                    "the consumer's subscription not exist"), nothing
            version = sub.get("subVersion", 0)
            if version < h.sub_version:
                return cmd.response(ResponseCode.SUBSCRIPTION_NOT_LATEST,
                                    "the consumer's subscription not latest"), nothing
            expression = sub.get("subString", "*")
            expression_type = sub.get("expressionType", "TAG")
        if is_tag_type(expression_type):
            try:
                tags = parse_sub_expression(expression)
            except ValueError as exc:
                return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc)), nothing
            return None, tag_filter(tags)
        if expression_type != SQL92 or not self.config.enable_property_filter:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                unsupported_remark(expression_type)), nothing
        try:
            compiled = self.controller.consumer_filter_manager.get(
                h.consumer_group, h.topic, expression or "", version)
        except SqlParseError as exc:
            if from_request:
                return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                    f"parse the consumer's subscription failed: {exc}"), nothing
            return cmd.response(ResponseCode.FILTER_DATA_NOT_EXIST,
                                "The broker's consumer filter data is not exist!Your "
                                f"expression may be wrong! {exc}"), nothing
        return None, sql_filter(compiled)

    def process(
        self, conn: RemotingConnection, cmd: RemotingCommand, allow_suspend: bool
    ) -> RemotingCommand | None:
        return self._process(conn, cmd, allow_suspend)[0]

    def _process(
        self, conn: RemotingConnection, cmd: RemotingCommand, allow_suspend: bool
    ) -> tuple[RemotingCommand | None, bool]:
        """(the response, or None when held; whether the scan stopped short of
        the queue's end)."""
        h = PullMessageRequestHeader.from_fields(cmd.ext_fields)
        refused, group_cfg = self._checked(cmd, h)
        if group_cfg is None:
            return refused, False
        refused, how = self.subscription_filter(cmd, h, group_cfg)
        if refused is not None:
            return refused, False
        store = self.controller.message_store
        result = store.get_message(
            h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums,
            how.tag_codes, how.record_filter, how.max_scan,
        )
        slave = self.config.is_slave
        if h.sys_flag & FLAG_COMMIT_OFFSET and h.commit_offset >= 0 and not slave:
            self.controller.consumer_offset_manager.commit_offset(
                h.consumer_group, h.topic, h.queue_id, h.commit_offset
            )
        code = GET_STATUS_TO_CODE.get(result.status, ResponseCode.SYSTEM_ERROR)
        next_begin_offset = result.next_begin_offset
        if slave:
            code, next_begin_offset = slave_outcome(
                result.status, code, next_begin_offset, h.queue_offset)
        more = result.status in _SCANNED and next_begin_offset < result.max_offset
        if (
            allow_suspend
            and code in _EMPTY
            and not more
            and h.sys_flag & FLAG_SUSPEND
            and h.suspend_timeout_millis > 0
            and self.config.long_polling_enable
        ):
            timeout_ms = min(h.suspend_timeout_millis, self.config.long_polling_max_suspend_millis)
            if self.controller.pull_hold_service.suspend(
                h.topic, h.queue_id, h.queue_offset, conn, cmd, timeout_ms / 1000,
                tag_codes=how.tag_codes, max_offset=result.max_offset,
            ):
                return None, False
            # not held (a bound on held pulls): the empty answer of a suspend time that is over
        header = PullMessageResponseHeader(
            suggest_which_broker_id=suggest_which_broker_id(
                self.config.slave_read_enable, result.suggest_pulling_from_slave, group_cfg),
            next_begin_offset=next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
        )
        # one piece that is a read's bytes (a run of records, all good) goes as it is
        body = b"".join(result.pieces) if code == ResponseCode.SUCCESS else None
        if body:  # per response: what it returns (a retry topic counts under its group)
            self.stats.record_get(h.topic, h.consumer_group, result.message_count, len(body))
        remark = None if code == ResponseCode.SUCCESS else result.status.name
        return cmd.response(code, remark, ext_fields=header.to_fields(), body=body), more

    def _checked(self, cmd: RemotingCommand, h: PullMessageRequestHeader
                 ) -> tuple[RemotingCommand | None, SubscriptionGroupConfig | None]:
        """(None, the group's config), or (the answer, None) to a pull the
        broker, group, topic or queue refuses."""
        def refuse(code: int, remark: str) -> tuple[RemotingCommand, None]:
            return cmd.response(code, remark), None

        if not is_readable(self.config.broker_permission):
            return refuse(ResponseCode.NO_PERMISSION,
                          f"the broker[{self.config.broker_name}] pulling message is forbidden")
        group_cfg = self.controller.subscription_group_manager.find(h.consumer_group)
        if group_cfg is None:
            return refuse(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                          f"subscription group [{h.consumer_group}] does not exist")
        if not group_cfg.consume_enable:
            return refuse(ResponseCode.NO_PERMISSION,
                          f"subscription group [{h.consumer_group}] has consumption disabled")
        cfg = self.controller.topic_config_manager.get(h.topic)
        if cfg is None:
            return refuse(ResponseCode.TOPIC_NOT_EXIST,
                          f"topic[{h.topic}] not exist, apply first please!")
        if not is_readable(cfg.perm):
            return refuse(ResponseCode.NO_PERMISSION,
                          f"the topic[{h.topic}] pulling message is forbidden")
        if h.queue_id < 0 or h.queue_id >= cfg.read_queue_nums:
            return refuse(ResponseCode.SYSTEM_ERROR,
                          f"queueId[{h.queue_id}] is illegal, topic {h.topic} has "
                          f"{cfg.read_queue_nums} read queues")
        if h.max_msg_nums <= 0:
            return refuse(ResponseCode.SYSTEM_ERROR, "maxMsgNums must be positive")
        return None, group_cfg
