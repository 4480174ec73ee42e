"""AdminService: an operator's requests to a broker, in domain terms (what
RocketMQ's AdminBrokerProcessor does without the remoting, as RocketMQ 5's
proxy MessagingProcessor sits over its transports; broker/admin_processor.py
is the remoting adapter).

Topics and subscription groups: create or update, delete, list. A change is
answered once it is on disk: the tables are journaled (broker/persist.py
``JournaledTable``) and a ``Durability`` (the table's journal writer) says
when the change's number is durable, so such a call returns an
``AdminResult`` at once (invalid, not found, already durable) or ``None`` and
calls ``answer`` later (``OK``, or ``NOT_DURABLE`` when the journal was not
written in time or the broker stops: the change is applied and written as
soon as the disk allows).

Figures: a topic's queue offsets, a group's consume offsets and lag, a group's
online consumers, the broker's runtime figures (mqadmin brokerStatus), and the
whole tables a slave copies (consumer offsets, delay offsets, topics).

Every collaborator is narrow (a protocol or a bundle of callables), never the
controller; no transport type appears here.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from broker.client_manager import ConsumerGroupInfo
from broker.config import BrokerConfig
from broker.role import Role
from broker.stats import GROUP_GET_NUMS, MSGS, BrokerStats
from broker.topic_validator import is_system_topic, validate_topic
from protocol.names import group_problem
from protocol.route import PERM_MAX, TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig
from protocol.topic_attributes import AttributeProblem, alter

try:
    from importlib.metadata import version as _dist_version

    VERSION = _dist_version("trio-rocketmq")
except Exception:  # not installed as a distribution (a checkout on sys.path)
    VERSION = "0+unknown"

TOPIC_NOT_DURABLE = (
    "the topic change is applied but not confirmed on disk (the topic journal was not "
    "written in time, or the broker is stopping); it is written as soon as the disk allows")
GROUP_NOT_DURABLE = (
    "the subscription group change is applied but not confirmed on disk (the group "
    "journal was not written in time, or the broker is stopping); it is written as soon "
    "as the disk allows")


class AdminStatus(enum.Enum):
    OK = "OK"
    INVALID = "INVALID"  # the request asks for what cannot be (remark says why)
    NOT_DURABLE = "NOT_DURABLE"  # applied, not confirmed on disk in time
    TOPIC_NOT_EXIST = "TOPIC_NOT_EXIST"
    GROUP_NOT_EXIST = "GROUP_NOT_EXIST"
    CONSUMER_NOT_ONLINE = "CONSUMER_NOT_ONLINE"


@dataclass(frozen=True, slots=True)
class AdminResult:
    status: AdminStatus
    remark: str | None = None


OK = AdminResult(AdminStatus.OK)

Answer = Callable[[AdminResult], None]


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue of a topic (GET_TOPIC_STATS_INFO)."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class ConsumeQueueStats:
    """One queue a group consumes (GET_CONSUME_STATS)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int


@dataclass(frozen=True, slots=True)
class ConsumeStats:
    queues: list[ConsumeQueueStats]
    consume_tps: float


@dataclass(frozen=True, slots=True)
class ConsumerConnection:
    client_id: str
    client_addr: str


@dataclass(frozen=True, slots=True)
class ConsumerConnections:
    """A group's online consumers (GET_CONSUMER_CONNECTION_LIST)."""

    connections: list[ConsumerConnection]
    subscriptions: dict[str, dict[str, Any]]
    consume_type: str
    message_model: str
    consume_from_where: str


# ---- collaborators ---------------------------------------------------------------


class Durability(Protocol):
    """A journaled table's writer (broker/journal_writer.py)."""

    def when_durable(self, seq: int, done: Callable[[bool], None]) -> bool: ...


class TopicTable(Protocol):
    """TopicConfigManager's part the service uses."""

    table: dict[str, TopicConfig]

    def get(self, topic: str) -> TopicConfig | None: ...
    def put(self, cfg: TopicConfig) -> int: ...
    def remove(self, topic: str) -> int | None: ...
    def to_wire(self) -> dict[str, Any]: ...


class GroupTable(Protocol):
    """SubscriptionGroupManager's part the service uses."""

    table: dict[str, SubscriptionGroupConfig]

    def put(self, cfg: SubscriptionGroupConfig) -> int: ...
    def remove(self, group: str) -> int | None: ...
    def to_wire(self) -> dict[str, Any]: ...


class OffsetTable(Protocol):
    """ConsumerOffsetManager's part the service uses."""

    def groups_of_topic(self, topic: str) -> set[str]: ...
    def query_offset(self, group: str, topic: str, queue_id: int) -> int: ...
    def to_wire(self) -> dict[str, Any]: ...


class QueueStore(Protocol):
    """The message store's part the service uses."""

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int: ...
    def get_min_phy_offset(self) -> int: ...
    def get_max_phy_offset(self) -> int: ...


class ConsumerRegistry(Protocol):
    """The online consumers by group (ClientGroups)."""

    groups: dict[str, ConsumerGroupInfo]


class RoleNow(Protocol):
    """The broker's live role (broker/role.py RoleState)."""

    is_slave: bool
    current: Role


class OwedConnection(Protocol):
    """What a served connection owes its peer (for the runtime figures)."""

    @property
    def owed(self) -> int: ...
    @property
    def dropped_requests(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RuntimeSources:
    """The live figures GET_BROKER_RUNTIME_INFO reports beyond the tables, each
    read when asked."""

    boot_timestamp_ms: Callable[[], int]
    start_accept_send_timestamp_ms: Callable[[], int]
    commit_log_disk_ratio: Callable[[], float]
    held_pulls: Callable[[], int]
    connections: Callable[[], Iterable[OwedConnection]]
    notifications_dropped: Callable[[], int]
    ha_listen_port: Callable[[], int | None]
    ha_status: Callable[[], dict[str, Any]]
    schedule_stats: Callable[[], Mapping[str, Any]]
    transaction_status: Callable[[], Mapping[str, Any]]
    slave_sync_status: Callable[[], Mapping[str, Any]]
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    # timer messages: pending count, lateness of delivered ones (broker/timer/service.py)
    timer_status: Callable[[], Mapping[str, Any]] = field(default=dict)


@dataclass(frozen=True, slots=True)
class AdminTables:
    """The tables an admin reads and changes, with their journals' writers."""

    topics: TopicTable
    topics_durable: Durability
    groups: GroupTable
    groups_durable: Durability
    offsets: OffsetTable
    delay_offsets: Callable[[], Mapping[int, int]]


def _tps_text(stats: BrokerStats, which: str) -> str:
    """RocketMQ's "putTps"/"getTps": messages per second over the last minute,
    hour and day (RocketMQ's own says 10 s, 1 min, 10 min: its windows differ)."""
    return " ".join(f"{stats.tps(which, w):.2f}" for w in ("statsMinute", "statsHour", "statsDay"))


def _runtime_text(ms: int) -> str:
    s = max(0, ms) // 1000
    return f"[ {s // 86400} days, {s % 86400 // 3600} hours, {s % 3600 // 60} minutes, {s % 60} seconds ]"


def runtime_figures(stats: BrokerStats, src: RuntimeSources) -> dict[str, object]:
    """GET_BROKER_RUNTIME_INFO's operator figures (mqadmin brokerStatus)."""
    boot = src.boot_timestamp_ms()
    conns = list(src.connections())
    return {
        "putTps": _tps_text(stats, "put"),
        "getTps": _tps_text(stats, "get"),
        "putTps1m": stats.tps("put"),
        "getTps1m": stats.tps("get"),
        "msgPutTotal": stats.put_total[MSGS],
        "msgGetTotal": stats.get_total[MSGS],
        "msgPutTotalTodayNow": stats.put_total[MSGS],
        "msgGetTotalTodayNow": stats.get_total[MSGS],
        "bootTimestamp": boot,
        "runtime": _runtime_text(src.now_ms() - boot),
        "version": VERSION,
        "commitLogDiskRatio": src.commit_log_disk_ratio(),
        "pageCacheLockTimeMills": 0,  # appends take no lock here
        "heldPulls": src.held_pulls(),
        # what is queued for clients (issue 48: bounded for a peer that reads nothing)
        "connectionOwedMaxBytes": max((c.owed for c in conns), default=0),
        "requestsToClientsDropped": sum(c.dropped_requests for c in conns),
        "notificationsDropped": src.notifications_dropped(),
        "startAcceptSendRequestTimeStamp": src.start_accept_send_timestamp_ms(),
    }


class AdminService:
    def __init__(self, config: BrokerConfig, role: RoleNow, tables: AdminTables,
                 store: QueueStore, consumers: ConsumerRegistry, stats: BrokerStats,
                 runtime: RuntimeSources, *,
                 on_topics_changed: Callable[[], None],
                 delete_topic_data: Callable[[str], None]) -> None:
        self.config = config
        self.role = role
        self.tables = tables
        self.store = store
        self.consumers = consumers
        self.stats = stats
        self.runtime = runtime
        self.on_topics_changed = on_topics_changed  # register with the name servers soon
        # a deleted topic's offsets, figures, store files and registration
        self.delete_topic_data = delete_topic_data

    @staticmethod
    def _when_durable(durability: Durability, seq: int, answer: Answer,
                      not_durable: str) -> AdminResult | None:
        def done(ok: bool) -> None:
            answer(OK if ok else AdminResult(AdminStatus.NOT_DURABLE, not_durable))

        return OK if durability.when_durable(seq, done) else None

    # ---- topics ------------------------------------------------------------------

    def update_and_create_topic(self, cfg: TopicConfig, answer: Answer,
                                attribute_changes: Mapping[str, str | None] | None = None
                                ) -> AdminResult | None:
        """Create or change a topic; answered once the change is journaled. The
        topic keeps its attributes but those ``attribute_changes`` sets (a
        value) or removes (None), checked by protocol/topic_attributes.py."""
        reason = validate_topic(cfg.topic_name)
        if reason is None and is_system_topic(cfg.topic_name):
            reason = f"the topic {cfg.topic_name!r} is a reserved system topic"
        if reason is not None:
            return AdminResult(AdminStatus.INVALID, reason)
        limit = self.config.max_queue_nums
        if not (0 < cfg.read_queue_nums <= limit and 0 < cfg.write_queue_nums <= limit):
            return AdminResult(AdminStatus.INVALID,
                               f"queue numbers must be within 1..{limit} (maxQueueNums)")
        if not 0 <= cfg.perm <= PERM_MAX:
            return AdminResult(AdminStatus.INVALID, f"perm must be within 0..{PERM_MAX}")
        old = self.tables.topics.get(cfg.topic_name)
        try:
            cfg.attributes = alter(old.attributes if old is not None else {},
                                   attribute_changes or {}, create=old is None)
        except AttributeProblem as exc:
            return AdminResult(AdminStatus.INVALID, str(exc))
        seq = self.tables.topics.put(cfg)
        self.on_topics_changed()
        return self._when_durable(self.tables.topics_durable, seq, answer, TOPIC_NOT_DURABLE)

    def delete_topic(self, topic: str, answer: Answer) -> AdminResult | None:
        """Delete a topic and its data; answered once the deletion is journaled
        (at once when there was no such topic)."""
        seq = self.tables.topics.remove(topic)
        self.delete_topic_data(topic)
        if seq is None:
            return OK
        return self._when_durable(self.tables.topics_durable, seq, answer, TOPIC_NOT_DURABLE)

    def all_topic_configs(self) -> dict[str, Any]:
        return self.tables.topics.to_wire()

    def topic_stats(self, topic: str) -> list[QueueStats] | None:
        """Each writable queue's offsets and last store time; None: no such topic."""
        cfg = self.tables.topics.get(topic)
        if cfg is None:
            return None
        store, name = self.store, self.config.broker_name
        out = []
        for qid in range(cfg.write_queue_nums):
            max_off = store.get_max_offset_in_queue(topic, qid)
            last = store.get_message_store_timestamp(topic, qid, max_off - 1) if max_off > 0 else 0
            out.append(QueueStats(name, qid, store.get_min_offset_in_queue(topic, qid),
                                  max_off, last))
        return out

    # ---- subscription groups -------------------------------------------------------

    def update_and_create_group(self, cfg: SubscriptionGroupConfig, answer: Answer
                                ) -> AdminResult | None:
        """Create or change a group; answered once the change is journaled."""
        reason = group_problem(cfg.group_name)
        if reason is not None:
            return AdminResult(AdminStatus.INVALID, reason)
        limit = self.config.max_queue_nums
        if cfg.retry_queue_nums > limit:  # the queues %RETRY%<group> is created with
            return AdminResult(AdminStatus.INVALID,
                               f"retryQueueNums must be within 0..{limit} (maxQueueNums)")
        seq = self.tables.groups.put(cfg)
        return self._when_durable(self.tables.groups_durable, seq, answer, GROUP_NOT_DURABLE)

    def delete_group(self, group: str, answer: Answer) -> AdminResult | None:
        """Delete a group; answered once the deletion is journaled."""
        seq = self.tables.groups.remove(group)
        if seq is None:
            return AdminResult(AdminStatus.GROUP_NOT_EXIST,
                               f"subscription group {group} does not exist")
        self.stats.drop_group(group)
        return self._when_durable(self.tables.groups_durable, seq, answer, GROUP_NOT_DURABLE)

    def all_groups(self) -> dict[str, Any]:
        return self.tables.groups.to_wire()

    # ---- consumers -------------------------------------------------------------------

    def consume_stats(self, group: str, only_topic: str | None = None) -> ConsumeStats:
        """Per queue of the group's topics (those it has offsets for or
        subscribes to; ``only_topic`` when given and not empty): broker offset,
        consumer offset, last consumed store time; and the group's consume TPS
        over the last minute (RocketMQ's ConsumeStats.consumeTps)."""
        topics_table = self.tables.topics.table
        offsets = self.tables.offsets
        topics = {t for t in topics_table if group in offsets.groups_of_topic(t)}
        info = self.consumers.groups.get(group)
        if info is not None:
            topics |= {t for t in info.subscriptions if t in topics_table}
        if only_topic:
            topics &= {only_topic}
        store, name = self.store, self.config.broker_name
        rows = []
        consume_tps = 0.0
        for topic in sorted(topics):
            windows = self.stats.stats(GROUP_GET_NUMS, f"{topic}@{group}")
            if windows is not None:
                consume_tps += windows["statsMinute"].tps
            for qid in range(topics_table[topic].read_queue_nums):
                broker_off = store.get_max_offset_in_queue(topic, qid)
                consumer_off = offsets.query_offset(group, topic, qid)
                last = (store.get_message_store_timestamp(topic, qid, consumer_off - 1)
                        if consumer_off > 0 else 0)
                rows.append(ConsumeQueueStats(topic, name, qid, broker_off,
                                              max(consumer_off, 0), last))
        return ConsumeStats(rows, round(consume_tps, 2))

    def consumer_connections(self, group: str) -> ConsumerConnections | None:
        """The group's online consumers; None when none is."""
        info = self.consumers.groups.get(group)
        if info is None:
            return None
        return ConsumerConnections(
            [ConsumerConnection(ch.client_id, ch.conn.remote_addr) for ch in info.clients.values()],
            info.subscriptions, info.consume_type, info.message_model, info.consume_from_where)

    def all_consumer_offsets(self) -> dict[str, Any]:
        """Every committed offset (a slave's SlaveSynchronize)."""
        return self.tables.offsets.to_wire()

    def all_delay_offsets(self) -> dict[int, int]:
        """The schedule service's progress per delay level (a slave's SlaveSynchronize)."""
        return dict(self.tables.delay_offsets())

    # ---- the broker ------------------------------------------------------------------

    def runtime_info(self) -> dict[str, object]:
        """Runtime figures (mqadmin brokerStatus): role, offsets and, for HA, each
        slave's acknowledged offset on a master, the master and lag on a slave
        (and its metadata sync rounds)."""
        src, store, role = self.runtime, self.store, self.role
        table: dict[str, object] = {
            "brokerName": self.config.broker_name,
            "brokerId": role.current.broker_id,
            "brokerRole": role.current.broker_role.value,
            "flushDiskType": self.config.flush_disk_type.value,
            "commitLogMinOffset": store.get_min_phy_offset(),
            "commitLogMaxOffset": store.get_max_phy_offset(),
            "topics": len(self.tables.topics.table),
            "subscriptionGroups": len(self.tables.groups.table),
            "haListenPort": src.ha_listen_port(),
            "ha": src.ha_status(),
            **runtime_figures(self.stats, src),
            **src.schedule_stats(),
            **src.timer_status(),
        }
        if not role.is_slave:
            tx = src.transaction_status()
            table.update({
                "transactionCommitted": tx["committed"],
                "transactionRolledBack": tx["rolled_back"],
                "transactionChecks": tx["checks"],
                "transactionDiscarded": tx["discarded"],
                "transactionPending": tx["pending"],
                "transactionCheckPasses": tx["passes"],
                "transactionChecksDropped": tx["checks_dropped"],
                "transactionPrepareRefused": tx["refused_busy"],
                "transactionHalfCopies": tx["copies"],
            })
        else:
            table.update(src.slave_sync_status())
        return table
