"""PullService: a consumer's pull, in domain terms (RocketMQ's
PullMessageProcessor without the remoting, as RocketMQ 5's proxy
MessagingProcessor sits over its transports).

``PullService.pull(PullRequest, waiter)`` checks the broker, group, topic and
queue, works out how to filter, reads the store and answers a ``PullOutcome``:
a ``PullStatus``, the records as the store returned them (zero-copy pieces),
the next/min/max offsets and the broker to pull the queue from next. A pull
that finds nothing and may wait (``suspend_timeout_ms`` > 0 and a ``waiter``)
is held by the long-polling service (``broker/long_polling.py``) and the
answer is ``None``: the waiter gets the outcome later, through its ``answer``
callback, when a message for it arrives or at its deadline. The service never
sees a connection or a command; a transport (``broker/pull_processor.py`` for
remoting) decodes its request into a ``PullRequest``, supplies the waiter and
maps outcomes to its wire codes with one table.

Filters: tags by the consume queue's hashes, or SQL92 over each record's
properties with ``enablePropertyFilter`` (``broker/consumer_filter_manager.py``,
docs/filters.md). A held pull is answered at once with ``NO_MATCHED_MSG`` when
its filter skipped a whole window of entries and more remain (the client goes
on past the window, as RocketMQ's PULL_RETRY_IMMEDIATELY).

Every read outcome says which broker of the group to pull that queue from next
(``suggest_which_broker_id``, RocketMQ's rules): with ``slaveReadEnable`` a
pull that read cold data (the store's ``suggest_pulling_from_slave``) is sent
to the subscription group's ``whichBrokerWhenConsumeSlowly`` and any other to
the group's ``brokerId`` (the master unless configured), so a slave sends a
consumer that has caught up back to the master; without it, always the master.

A slave serves pulls (also when its master is down) but never moves a
consumer's offset (RocketMQ's nextOffsetCorrection without offsetCheckInSlave,
``slave_outcome``): it may simply not have the master's latest records yet, so
"offset moved" becomes "retry" at the same offset, and offsets piggybacked on
pulls (``commit_offset``) are stored by masters only (a slave copies its
master's table).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from broker.client_manager import ConsumerGroupInfo
from broker.consumer_filter_manager import MessageFilter, sql_filter, tag_filter
from broker.long_polling import (
    DEFAULT_MAX_HELD,
    DEFAULT_MAX_HELD_PER_CONNECTION,
    PullRequestHoldService,
)
from broker.service.types import LiveRole
from broker.store import GetMessageStatus
from broker.store.message_store import MAX_FILTER_SCAN, RecordFilter
from broker.store.status import GetMessageResult
from protocol.filter import parse_sub_expression
from protocol.filter_sql import SQL92, SqlFilter, SqlParseError, is_tag_type, unsupported_remark
from protocol.record import Buffer
from protocol.route import MASTER_ID, TopicConfig, is_readable
from protocol.subscription_group import SubscriptionGroupConfig


class PullStatus(enum.Enum):
    """What a pull came to. The first five are reads (offsets and the
    suggested broker are set); the others refuse the pull (a remark says why)."""

    FOUND = "FOUND"  # records in ``pieces``
    NO_NEW_MSG = "NO_NEW_MSG"  # nothing at or past the offset (yet)
    NO_MATCHED_MSG = "NO_MATCHED_MSG"  # the filter skipped a window: go on at once
    RETRY_IMMEDIATELY = "RETRY_IMMEDIATELY"  # being removed, or a slave not there yet
    OFFSET_MOVED = "OFFSET_MOVED"  # the offset is out of the queue: take next_begin_offset
    NO_PERMISSION = "NO_PERMISSION"  # broker, group or topic not readable, no broadcast
    GROUP_NOT_EXIST = "GROUP_NOT_EXIST"
    TOPIC_NOT_EXIST = "TOPIC_NOT_EXIST"
    ILLEGAL_REQUEST = "ILLEGAL_REQUEST"  # queue id or max messages out of range
    SUBSCRIPTION_NOT_EXIST = "SUBSCRIPTION_NOT_EXIST"
    SUBSCRIPTION_NOT_LATEST = "SUBSCRIPTION_NOT_LATEST"
    SUBSCRIPTION_PARSE_FAILED = "SUBSCRIPTION_PARSE_FAILED"
    FILTER_DATA_NOT_EXIST = "FILTER_DATA_NOT_EXIST"  # a registered SQL92 that does not parse
    FILTER_UNSUPPORTED = "FILTER_UNSUPPORTED"  # an expression type this broker does not run


READS = frozenset({PullStatus.FOUND, PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG,
                   PullStatus.RETRY_IMMEDIATELY, PullStatus.OFFSET_MOVED})

# Answers that mean "nothing for you yet": a held pull waits on these.
EMPTY = frozenset({PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG,
                   PullStatus.RETRY_IMMEDIATELY})

GET_STATUS_TO_PULL: dict[GetMessageStatus, PullStatus] = {
    GetMessageStatus.FOUND: PullStatus.FOUND,
    GetMessageStatus.NO_MATCHED_MESSAGE: PullStatus.NO_MATCHED_MSG,
    GetMessageStatus.MESSAGE_WAS_REMOVING: PullStatus.RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MESSAGE_IN_QUEUE: PullStatus.NO_NEW_MSG,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: PullStatus.NO_NEW_MSG,
    GetMessageStatus.OFFSET_FOUND_NULL: PullStatus.NO_NEW_MSG,
    GetMessageStatus.OFFSET_TOO_SMALL: PullStatus.OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: PullStatus.OFFSET_MOVED,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE: PullStatus.OFFSET_MOVED,
}

# Store outcomes whose next offset is where reading goes on (records were
# scanned); the others' next offset is a correction a slave does not make.
_SCANNED = frozenset({GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE,
                      GetMessageStatus.MESSAGE_WAS_REMOVING})


@dataclass(slots=True)
class PullRequest:
    """One pull. ``expression`` None: filter with the subscription the group's
    consumers registered (heart-beats), else with this one. ``commit_offset``
    (not None, >= 0): the consumer's offset, stored on the way (masters only).
    ``suspend_timeout_ms`` > 0: the pull may be held that long (at most the
    broker's ``longPollingMaxSuspendMillis``). A held pull's ``queue_offset``
    moves past entries its re-runs scanned and matched none of."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    commit_offset: int | None = None
    suspend_timeout_ms: int = 0
    expression: str | None = None
    expression_type: str = "TAG"
    sub_version: int = 0


@dataclass(slots=True)
class PullOutcome:
    """A pull's answer. A read (``status in READS``) has its offsets and the
    broker to pull from next; ``pieces`` (FOUND) are the store's buffers,
    each one or more whole records back to back. ``remark``: a refusal's
    reason, or the store's status of a read that found nothing."""

    status: PullStatus
    remark: str | None = None
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    suggest_which_broker_id: int = MASTER_ID
    pieces: Sequence[Buffer] = ()
    message_count: int = 0


def refusal(status: PullStatus, remark: str) -> PullOutcome:
    return PullOutcome(status, remark)


class PullWaiter(Protocol):
    """Whom a held pull answers, supplied by the transport. ``owner`` is what
    the per-connection bound counts (a connection); ``closed``: nobody to
    answer any more (the hold is dropped). ``answer`` takes the outcome of a
    held pull; ``fail`` says the held pull failed on the broker."""

    @property
    def owner(self) -> Hashable: ...

    @property
    def closed(self) -> bool: ...

    def answer(self, outcome: PullOutcome) -> None: ...

    def fail(self, remark: str) -> None: ...


# ---- what the service needs of the broker (BrokerConfig, the managers, the store) --


class PullSettings(Protocol):
    """Read on each pull: an admin may change them while the broker runs (the
    role is read from the live role, ``LiveRole``)."""

    @property
    def broker_name(self) -> str: ...
    @property
    def broker_permission(self) -> int: ...
    @property
    def slave_read_enable(self) -> bool: ...
    @property
    def enable_property_filter(self) -> bool: ...
    @property
    def long_polling_enable(self) -> bool: ...
    @property
    def long_polling_max_suspend_millis(self) -> int: ...


class SubscriptionGroups(Protocol):
    def find(self, group: str) -> SubscriptionGroupConfig | None: ...


class Topics(Protocol):
    def get(self, topic: str) -> TopicConfig | None: ...


class Consumers(Protocol):
    """The groups' registrations (heart-beats): model and subscriptions."""

    @property
    def groups(self) -> Mapping[str, ConsumerGroupInfo]: ...


class SqlFilters(Protocol):
    """Compiled SQL92 subscriptions (ConsumerFilterManager); raises SqlParseError."""

    def get(self, group: str, topic: str, text: str, version: int) -> SqlFilter: ...


class EntryReader(Protocol):
    def get_entries(self, index: int, max_count: int) -> Sequence[tuple[int, int, int]]: ...


class PullStore(Protocol):
    @property
    def consume_queue_table(self) -> Mapping[str, Mapping[int, EntryReader]]: ...

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_nums: int,
                    tag_codes: set[int] | None, record_filter: RecordFilter | None = None,
                    max_scan: int = MAX_FILTER_SCAN) -> GetMessageResult: ...


class OffsetCommits(Protocol):
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...


class GetStats(Protocol):
    def record_get(self, topic: str, group: str, messages: int, size: int) -> None: ...


# ---- the pure rules ------------------------------------------------------------------


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
    got: GetMessageStatus, status: PullStatus, next_begin_offset: int, requested: int
) -> tuple[PullStatus, int]:
    """(status, next offset) of a slave's answer: the requested offset stays
    where it is unless records were scanned, and "offset moved" becomes
    "retry" (a lagging slave must not send a consumer back or forward)."""
    if got in _SCANNED:
        return status, next_begin_offset
    if status is PullStatus.OFFSET_MOVED:
        status = PullStatus.RETRY_IMMEDIATELY
    return status, requested


class PullService:
    """Pulls and their long polling (``holds``), over narrow collaborators."""

    def __init__(self, settings: PullSettings, role: LiveRole, groups: SubscriptionGroups,
                 topics: Topics, consumers: Consumers, filters: SqlFilters, store: PullStore,
                 offsets: OffsetCommits, stats: GetStats, *,
                 max_held: int = DEFAULT_MAX_HELD,
                 max_held_per_connection: int = DEFAULT_MAX_HELD_PER_CONNECTION) -> None:
        self.settings = settings
        self.role = role
        self.groups = groups
        self.topics = topics
        self.consumers = consumers
        self.filters = filters
        self.store = store
        self.offsets = offsets
        self.stats = stats
        self.holds = PullRequestHoldService(
            self.retry_held, settings.broker_name, read_tags=self.queue_tags_codes,
            max_held=max_held, max_held_per_connection=max_held_per_connection)

    def pull(self, req: PullRequest, waiter: PullWaiter | None = None) -> PullOutcome | None:
        """The pull's outcome, or None when it is held: ``waiter`` is answered
        later (without a waiter a pull is never held)."""
        return self._pull(req, waiter)[0]

    def retry_held(self, req: PullRequest, final: bool) -> PullOutcome | None:
        """Re-run a held pull: its outcome, or None to keep holding it. A
        re-run that scanned new entries and matched none keeps holding from
        past them, so the next one reads only what arrives next (a property
        filter is not asked about a record twice)."""
        outcome, more = self._pull(req, None)
        if not final and outcome is not None and outcome.status in EMPTY and not more:
            if outcome.next_begin_offset > req.queue_offset:
                req.queue_offset = outcome.next_begin_offset
            return None
        return outcome

    def queue_tags_codes(self, topic: str, queue_id: int, offset: int, max_count: int
                         ) -> list[int]:
        """The tags codes of up to ``max_count`` consume-queue entries from
        ``offset`` (fewer at the queue's end or at a gap): what the hold
        service matches held pulls against when messages arrive."""
        cq = self.store.consume_queue_table.get(topic, {}).get(queue_id)
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
        self, req: PullRequest, group_cfg: SubscriptionGroupConfig
    ) -> PullOutcome | MessageFilter:
        """How to filter, or the refusal: from the request's subscription when
        it has one, else from the group's heart-beats (RocketMQ's
        PullMessageProcessor). An SQL92 subscription needs
        ``enablePropertyFilter``; its expression is compiled once per
        subscription (``ConsumerFilterManager``)."""
        from_request = req.expression is not None
        if req.expression is not None:
            expression, expression_type, version = (
                req.expression, req.expression_type, req.sub_version)
        else:
            info = self.consumers.groups.get(req.group)
            if info is None:
                return refusal(PullStatus.SUBSCRIPTION_NOT_EXIST,
                               "the consumer's group info not exist")
            if info.message_model == "BROADCASTING" and not group_cfg.consume_broadcast_enable:
                return refusal(PullStatus.NO_PERMISSION,
                               f"the consumer group[{req.group}] can not consume "
                               "by broadcast way")
            sub = info.subscriptions.get(req.topic)
            if sub is None:
                return refusal(PullStatus.SUBSCRIPTION_NOT_EXIST,
                               "the consumer's subscription not exist")
            version = sub.get("subVersion", 0)
            if version < req.sub_version:
                return refusal(PullStatus.SUBSCRIPTION_NOT_LATEST,
                               "the consumer's subscription not latest")
            expression = sub.get("subString", "*")
            expression_type = sub.get("expressionType", "TAG")
        if is_tag_type(expression_type):
            try:
                tags = parse_sub_expression(expression)
            except ValueError as exc:
                return refusal(PullStatus.SUBSCRIPTION_PARSE_FAILED, str(exc))
            return tag_filter(tags)
        if expression_type != SQL92 or not self.settings.enable_property_filter:
            return refusal(PullStatus.FILTER_UNSUPPORTED, unsupported_remark(expression_type))
        try:
            compiled = self.filters.get(req.group, req.topic, expression or "", version)
        except SqlParseError as exc:
            if from_request:
                return refusal(PullStatus.SUBSCRIPTION_PARSE_FAILED,
                               f"parse the consumer's subscription failed: {exc}")
            return refusal(PullStatus.FILTER_DATA_NOT_EXIST,
                           "The broker's consumer filter data is not exist!Your "
                           f"expression may be wrong! {exc}")
        return sql_filter(compiled)

    def _pull(self, req: PullRequest, waiter: PullWaiter | None
              ) -> tuple[PullOutcome | None, bool]:
        """(the outcome, or None when held; whether the scan stopped short of
        the queue's end)."""
        group_cfg = self._checked(req)
        if not isinstance(group_cfg, SubscriptionGroupConfig):
            return group_cfg, False
        how = self.subscription_filter(req, group_cfg)
        if isinstance(how, PullOutcome):
            return how, False
        settings = self.settings
        result = self.store.get_message(
            req.group, req.topic, req.queue_id, req.queue_offset, req.max_msg_nums,
            how.tag_codes, how.record_filter, how.max_scan,
        )
        slave = self.role.is_slave
        commit = req.commit_offset
        if commit is not None and commit >= 0 and not slave:
            self.offsets.commit_offset(req.group, req.topic, req.queue_id, commit)
        got = result.status
        status = GET_STATUS_TO_PULL[got]
        next_begin_offset = result.next_begin_offset
        if slave:
            status, next_begin_offset = slave_outcome(
                got, status, next_begin_offset, req.queue_offset)
        more = got in _SCANNED and next_begin_offset < result.max_offset
        if (
            waiter is not None
            and status in EMPTY
            and not more
            and req.suspend_timeout_ms > 0
            and settings.long_polling_enable
        ):
            timeout_ms = min(req.suspend_timeout_ms, settings.long_polling_max_suspend_millis)
            if self.holds.suspend(req, waiter, timeout_ms / 1000, tag_codes=how.tag_codes,
                                  max_offset=result.max_offset):
                return None, False
            # not held (a bound on held pulls): the empty answer of a suspend time that is over
        pieces = result.pieces
        if status is PullStatus.FOUND:
            size = sum(map(len, pieces))
            if size:  # per response: what it returns (a retry topic counts under its group)
                self.stats.record_get(req.topic, req.group, result.message_count, size)
            remark = None
        else:
            remark = got.name
        return PullOutcome(
            status, remark, next_begin_offset, result.min_offset, result.max_offset,
            suggest_which_broker_id(settings.slave_read_enable,
                                    result.suggest_pulling_from_slave, group_cfg),
            pieces, result.message_count,
        ), more

    def _checked(self, req: PullRequest) -> SubscriptionGroupConfig | PullOutcome:
        """The group's config, or the refusal of a pull the broker, group,
        topic or queue refuses."""
        settings = self.settings
        if not is_readable(settings.broker_permission):
            return refusal(PullStatus.NO_PERMISSION,
                           f"the broker[{settings.broker_name}] pulling message is forbidden")
        group_cfg = self.groups.find(req.group)
        if group_cfg is None:
            return refusal(PullStatus.GROUP_NOT_EXIST,
                           f"subscription group [{req.group}] does not exist")
        if not group_cfg.consume_enable:
            return refusal(PullStatus.NO_PERMISSION,
                           f"subscription group [{req.group}] has consumption disabled")
        cfg = self.topics.get(req.topic)
        if cfg is None:
            return refusal(PullStatus.TOPIC_NOT_EXIST,
                           f"topic[{req.topic}] not exist, apply first please!")
        if not is_readable(cfg.perm):
            return refusal(PullStatus.NO_PERMISSION,
                           f"the topic[{req.topic}] pulling message is forbidden")
        if req.queue_id < 0 or req.queue_id >= cfg.read_queue_nums:
            return refusal(PullStatus.ILLEGAL_REQUEST,
                           f"queueId[{req.queue_id}] is illegal, topic {req.topic} has "
                           f"{cfg.read_queue_nums} read queues")
        if req.max_msg_nums <= 0:
            return refusal(PullStatus.ILLEGAL_REQUEST, "maxMsgNums must be positive")
        return group_cfg
