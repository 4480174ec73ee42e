"""QueryService: what tools ask of a broker's messages and queues, with no
transport (RocketMQ's QueryMessageProcessor and the queue part of its
AdminBrokerProcessor; broker/query_processor.py and
broker/queue_admin_processor.py are the remoting adapters).

- ``search_offset``: the first queue offset stored at or after a time
  (SEARCH_OFFSET_BY_TIMESTAMP).
- ``query_messages``: records indexed under a key (KEYS or UNIQ_KEY), newest
  first, with how far the index goes (QUERY_MESSAGE); a query by message id
  takes up to DEFAULT_QUERY_MAX_NUM records, any query at most MAX_QUERY_NUM.
- ``view_message``: the record at a commit-log offset (VIEW_MESSAGE_BY_ID).
- ``topic_config``: one topic's config (GET_TOPIC_CONFIG).
- ``consume_queue``: a queue's entries and, for a group, whether its
  subscription selects each one by its tags hash (QUERY_CONSUME_QUEUE).
- ``clean_expired`` and ``clean_unused``: mqadmin's ``cleanExpiredCQ`` and
  ``cleanUnusedTopic``. What goes is decided without I/O (``expired_plan``,
  ``unused_plan``: broker/store/queue_cleanup.py over the store's queue facts
  and the broker's tables); the store takes the queues out on the event loop
  (``detach_consume_queues``) and their files are deleted in a worker thread
  (``DetachedQueues.delete_files``). A slave refuses ``clean_unused``: its
  topic table is a copy of its master's that may lag (a topic's first
  messages can reach it before its config does).

Access control for what a request does not name (the topic of a stored
message) is the transport's: it passes a check the service calls for each
message (``MessageCheck``, ``MessageFilter``). Expected outcomes are a
``QueryStatus`` (one table per transport maps it to a code); the service
takes narrow collaborators (the protocols below), never the controller, and
its tests build it with fakes (tests/broker/service/test_queries.py).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
import trio

from broker.client_manager import ConsumerGroupInfo
from broker.service.types import LiveRole
from broker.store.queue_cleanup import (
    CleanPlan,
    KeepRule,
    QueueFacts,
    expired_queues,
    keep_rule,
    unused_topics,
)
from broker.topic_validator import is_system_topic
from protocol.filter import parse_sub_expression, tag_codes
from protocol.message import MessageExt
from protocol.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, shown
from protocol.record import decode_record
from protocol.route import TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig

log = structlog.get_logger("broker.queue_admin")

# records a query by message id takes (messageStoreConfig.defaultQueryMaxNum),
# and any query at most (maxMsgsNumBatch)
DEFAULT_QUERY_MAX_NUM = 32
MAX_QUERY_NUM = 64
# entries one consume-queue query answers at most (20 bytes each on disk)
QUERY_CQ_MAX_COUNT = 1000


class QueryStatus(enum.Enum):
    OK = "OK"
    NOT_FOUND = "NOT_FOUND"  # no record under the key (in the time range)
    NO_MESSAGE = "NO_MESSAGE"  # nothing at the commit-log offset
    NO_PERMISSION = "NO_PERMISSION"  # the caller may not read the message
    TOPIC_NOT_EXIST = "TOPIC_NOT_EXIST"
    NO_QUEUE = "NO_QUEUE"  # the consume queue does not exist
    ILLEGAL_REQUEST = "ILLEGAL_REQUEST"  # a count out of bounds
    NOT_ON_SLAVE = "NOT_ON_SLAVE"  # a request only a master serves


# ---- requests and outcomes ---------------------------------------------------------


@dataclass(slots=True)
class MessageQuery:
    """Records of ``topic`` indexed under ``key`` stored between the two
    times (ms). ``by_id``: the key is a message id (UNIQ_KEY): up to
    DEFAULT_QUERY_MAX_NUM records whatever ``max_num`` says."""

    topic: str
    key: str
    max_num: int
    begin_ms: int
    end_ms: int
    by_id: bool = False


@dataclass(slots=True)
class MessageQueryOutcome:
    """The records found (raw, as stored), and how far the index goes: its
    newest entry's store time and commit-log offset (told with every answer)."""

    status: QueryStatus
    remark: str | None = None
    records: list[bytes] = field(default_factory=list)
    index_end_timestamp: int = 0
    index_end_phy_offset: int = 0


@dataclass(slots=True)
class ViewOutcome:
    status: QueryStatus
    remark: str | None = None
    record: bytes | None = None  # the raw record (OK)


@dataclass(slots=True)
class TopicConfigOutcome:
    status: QueryStatus
    remark: str | None = None
    config: TopicConfig | None = None


@dataclass(slots=True)
class ConsumeQueueQuery:
    """``count`` entries of a queue from ``index``; with ``group``, whether its
    subscription to the topic selects each."""

    topic: str
    queue_id: int
    index: int
    count: int
    group: str | None = None


@dataclass(frozen=True, slots=True)
class QueueEntry:
    index: int
    physic_offset: int
    physic_size: int
    tags_code: int
    selected: bool | None = None  # by the group's subscription (None: not evaluated)


@dataclass(slots=True)
class ConsumeQueueOutcome:
    """A queue's bounds and entries. ``subscription``: the group's, as its
    consumers registered it; ``filter_note``: why entries were not evaluated
    (the group is not online, its expression does not parse)."""

    status: QueryStatus
    remark: str | None = None
    min_index: int = 0
    max_index: int = 0
    entries: list[QueueEntry] = field(default_factory=list)
    subscription: dict[str, Any] | None = None
    filter_note: str | None = None


@dataclass(slots=True)
class CleanOutcome:
    """What a clean-up removed and kept (``plan.report()`` tells it)."""

    status: QueryStatus
    remark: str | None = None
    plan: CleanPlan = field(default_factory=CleanPlan)
    removed: int = 0  # queues the store removed


# Whether the caller may see a stored message: None, or why not (the remark).
MessageCheck = Callable[[MessageExt], str | None]
# Whether the caller may see a stored message (no reason: it is left out).
MessageFilter = Callable[[MessageExt], bool]


# ---- what the service needs ----------------------------------------------------------


class DetachedFiles(Protocol):
    """Queues taken out of the store, their files still on disk."""

    @property
    def count(self) -> int: ...

    def delete_files(self) -> int: ...


class QueryStore(Protocol):
    """DefaultMessageStore's reads and the consume-queue removal."""

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int,
                                    timestamp_ms: int) -> int: ...

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int,
                      end_ms: int) -> list[bytes]: ...

    def index_progress(self) -> tuple[int, int]: ...

    def record_at(self, commit_log_offset: int) -> bytes | None: ...

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None: ...

    def consume_queue_entries(self, topic: str, queue_id: int, index: int, count: int
                              ) -> tuple[int, int, list[tuple[int, int, int, int]]] | None: ...

    def consume_queue_facts(self) -> list[QueueFacts]: ...

    def get_min_phy_offset(self) -> int: ...

    def detach_consume_queues(self, chosen: dict[str, set[int] | None]) -> DetachedFiles: ...


class Topics(Protocol):
    def get(self, topic: str) -> TopicConfig | None: ...


class Consumers(Protocol):
    """The groups' registrations (heart-beats) and their subscriptions."""

    @property
    def groups(self) -> Mapping[str, ConsumerGroupInfo]: ...


class OffsetTable(Protocol):
    """ConsumerOffsetManager's table: ``topic@group`` -> queue -> offset."""

    @property
    def offset_table(self) -> Mapping[str, Mapping[int, int]]: ...


class GroupTable(Protocol):
    """SubscriptionGroupManager's table (read only: never auto-creates)."""

    @property
    def table(self) -> Mapping[str, SubscriptionGroupConfig]: ...


class QueryService:
    def __init__(self, broker_name: str, role: LiveRole, store: QueryStore, topics: Topics,
                 consumers: Consumers, offsets: OffsetTable, groups: GroupTable) -> None:
        self.role = role
        self.store = store
        self.topics = topics
        self.consumers = consumers
        self.offsets = offsets
        self.groups = groups
        self.log = log.bind(broker=broker_name)

    # ---- messages --------------------------------------------------------------------

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (the max
        offset when every message is older; 0 for a queue that does not exist)."""
        return self.store.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms)

    def query_messages(self, q: MessageQuery,
                       visible: MessageFilter | None = None) -> MessageQueryOutcome:
        """Records indexed under the key, newest first. ``visible`` (ACL) leaves
        out a message the caller may not read: one of a system topic (a half or
        delayed message) needs its real topic too."""
        max_num = DEFAULT_QUERY_MAX_NUM if q.by_id else q.max_num
        max_num = max(1, min(max_num, MAX_QUERY_NUM))
        store = self.store
        records = store.query_message(q.topic, q.key, max_num, q.begin_ms, q.end_ms)
        if visible is not None:
            records = [r for r in records if visible(decode_record(r))]
        end_timestamp, end_offset = store.index_progress()
        if not records:
            return MessageQueryOutcome(
                QueryStatus.NOT_FOUND,
                f"can not find message, maybe time range not correct (key {shown(q.key)}, "
                f"topic {q.topic})", [], end_timestamp, end_offset)
        return MessageQueryOutcome(QueryStatus.OK, None, records, end_timestamp, end_offset)

    def view_message(self, offset: int, may_read: MessageCheck | None = None) -> ViewOutcome:
        """The record at a commit-log offset. ``may_read`` (ACL) says why the
        caller may not read that message (its topic is not told)."""
        store = self.store
        data = store.record_at(offset)
        msg = store.look_message_by_offset(offset) if data is not None else None
        if data is None or msg is None:
            return ViewOutcome(QueryStatus.NO_MESSAGE, f"no message at commit-log offset {offset}")
        refused = may_read(msg) if may_read is not None else None
        if refused is not None:
            return ViewOutcome(QueryStatus.NO_PERMISSION, refused)
        return ViewOutcome(QueryStatus.OK, None, data)

    # ---- topics and queues -----------------------------------------------------------

    def topic_config(self, topic: str) -> TopicConfigOutcome:
        cfg = self.topics.get(topic)
        if cfg is None:
            return TopicConfigOutcome(QueryStatus.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        return TopicConfigOutcome(QueryStatus.OK, None, cfg)

    def consume_queue(self, q: ConsumeQueueQuery) -> ConsumeQueueOutcome:
        if not 0 < q.count <= QUERY_CQ_MAX_COUNT:
            return ConsumeQueueOutcome(
                QueryStatus.ILLEGAL_REQUEST,
                f"count must be within 1..{QUERY_CQ_MAX_COUNT}, not {q.count}")
        found = self.store.consume_queue_entries(q.topic, q.queue_id, q.index, q.count)
        if found is None:
            return ConsumeQueueOutcome(QueryStatus.NO_QUEUE,
                                       f"{q.queue_id}@{q.topic} is not exist!")
        lo, hi, rows = found
        out = ConsumeQueueOutcome(QueryStatus.OK, None, lo, hi)
        codes: set[int] | None = None
        evaluate = False
        if q.group is not None:
            info = self.consumers.groups.get(q.group)
            sub = info.subscriptions.get(q.topic) if info is not None else None
            if sub is None:
                out.filter_note = f"{q.group}@{q.topic} is not online!"
            else:
                out.subscription = sub
                try:
                    text = sub.get("subString")
                    codes = tag_codes(parse_sub_expression(text if isinstance(text, str) else None))
                    evaluate = True
                except ValueError as exc:
                    out.filter_note = f"the subscription cannot be evaluated: {exc}"
        out.entries = [
            QueueEntry(index, phys, size, tag,
                       (codes is None or tag in codes) if evaluate else None)
            for index, phys, size, tag in rows]
        if not rows:
            out.remark = f"Index {q.index} of {q.queue_id}@{q.topic} is not exist!"
        return out

    # ---- clean-ups: decided without I/O, carried out with the files off the loop ------

    def keep_rule(self) -> KeepRule:
        """What keeps a topic's queues (queue_cleanup.Keep), from the broker's
        tables as they are now."""
        with_offsets = {key.partition("@")[0] for key in self.offsets.offset_table}
        subscribed = {t for info in self.consumers.groups.values() for t in info.subscriptions}
        groups = self.groups.table
        topics = self.topics

        def group_topic(topic: str) -> bool:
            for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
                if topic.startswith(prefix) and topic[len(prefix):] in groups:
                    return True
            return False

        return keep_rule(lambda t: topics.get(t) is not None, is_system_topic,
                         with_offsets.__contains__, subscribed.__contains__, group_topic)

    def expired_plan(self) -> tuple[CleanPlan, int]:
        """cleanExpiredCQ's decision: (the plan, the commit log's min offset)."""
        min_phy = self.store.get_min_phy_offset()
        return expired_queues(self.store.consume_queue_facts(), min_phy, self.keep_rule()), min_phy

    def unused_plan(self) -> CleanPlan | CleanOutcome:
        """cleanUnusedTopic's decision, or a slave's refusal."""
        if self.role.is_slave:
            return CleanOutcome(
                QueryStatus.NOT_ON_SLAVE,
                "a slave does not clean unused topics: its topic table is a copy of its "
                "master's that may lag behind the messages it receives (clean the master; "
                "cleanExpiredCQ is safe on a slave)")
        return unused_topics(self.store.consume_queue_facts(), self.keep_rule())

    async def clean_expired(self) -> CleanOutcome:
        """Remove the consume queues whose messages are all gone, of topics
        nothing refers to (cleanExpiredCQ)."""
        plan, min_phy = self.expired_plan()
        return await self._carry_out(plan, "expired consume queues cleaned", min_phy=min_phy)

    async def clean_unused(self) -> CleanOutcome:
        """Remove every consume queue of the topics nothing refers to (cleanUnusedTopic)."""
        plan = self.unused_plan()
        if isinstance(plan, CleanOutcome):
            return plan
        return await self._carry_out(plan, "unused topics cleaned")

    async def _carry_out(self, plan: CleanPlan, event: str, **context: object) -> CleanOutcome:
        """The queues leave the store's tables at once (on the event loop: a put
        or pull after this sees them gone); their files are deleted in a worker
        thread."""
        detached = self.store.detach_consume_queues(plan.by_topic())
        if detached.count:
            await trio.to_thread.run_sync(detached.delete_files)
        topics = sorted({t for t, _ in plan.remove})
        self.log.warning(event, removed_queues=detached.count, topics=topics[:20],
                         topic_count=len(topics), kept=len(plan.kept), **context)
        return CleanOutcome(QueryStatus.OK, None, plan, detached.count)
