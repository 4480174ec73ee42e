"""AdminService in process: the real topic, group and offset tables, fakes for
the journals' writers, the store's offsets, the online consumers and the
runtime figures; and the remoting adapter's status table. No controller, no
sockets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from broker.admin_processor import RESPONSE_CODES
from broker.client_manager import ClientChannelInfo, ConsumerGroupInfo
from broker.config import BrokerConfig, BrokerRole
from broker.consumer_offset_manager import ConsumerOffsetManager
from broker.role import RoleState
from broker.service.admin import (
    GROUP_NOT_DURABLE,
    OK,
    TOPIC_NOT_DURABLE,
    AdminResult,
    AdminService,
    AdminStatus,
    AdminTables,
    ConsumeQueueStats,
    ConsumerConnection,
    QueueStats,
    RuntimeSources,
)
from broker.stats import BrokerStats
from broker.subscription_group_manager import SubscriptionGroupManager
from broker.topic_config_manager import TopicConfigManager
from protocol.codes import ResponseCode
from protocol.route import TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig

BROKER = "broker-x"


@dataclass
class Writer:
    """A journal's writer: changes become durable when the test says so."""

    durable: int = 0
    waiting: list[tuple[int, Callable[[bool], None]]] = field(default_factory=list)

    def when_durable(self, seq: int, done: Callable[[bool], None]) -> bool:
        if seq <= self.durable:
            return True
        self.waiting.append((seq, done))
        return False

    def write(self, up_to: int, ok: bool = True) -> None:
        self.durable = max(self.durable, up_to) if ok else self.durable
        for seq, done in [w for w in self.waiting if w[0] <= up_to]:
            self.waiting.remove((seq, done))
            done(ok)


@dataclass
class Store:
    offsets: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # min, max

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.offsets.get((topic, queue_id), (0, 0))[0]

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.offsets.get((topic, queue_id), (0, 0))[1]

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        return 1_000_000 + offset  # a store time that names the offset read

    def get_min_phy_offset(self) -> int:
        return 7

    def get_max_phy_offset(self) -> int:
        return 4096


@dataclass
class Consumers:
    groups: dict[str, ConsumerGroupInfo] = field(default_factory=dict)


@dataclass
class Conn:
    remote_addr: str
    owed: int = 0
    dropped_requests: int = 0


@dataclass
class Env:
    config: BrokerConfig
    service: AdminService
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    topic_writer: Writer
    group_writer: Writer
    store: Store
    consumers: Consumers
    stats: BrokerStats
    role: RoleState
    registered: list[int]
    deleted: list[str]
    answers: list[AdminResult]

    def answer(self, result: AdminResult) -> None:
        self.answers.append(result)


def runtime(conns: list[Conn]) -> RuntimeSources:
    return RuntimeSources(
        boot_timestamp_ms=lambda: 1_000, start_accept_send_timestamp_ms=lambda: 2_000,
        commit_log_disk_ratio=lambda: 0.25, held_pulls=lambda: 3,
        connections=lambda: conns, notifications_dropped=lambda: 4,
        ha_listen_port=lambda: 10912, ha_status=lambda: {"slaves": []},
        schedule_stats=lambda: {"scheduleMessageOffset_1": "5,9"},
        transaction_status=lambda: {"committed": 1, "rolled_back": 2, "checks": 3,
                                    "discarded": 4, "pending": 5, "passes": 6,
                                    "checks_dropped": 7, "refused_busy": 8, "copies": 9},
        slave_sync_status=lambda: {"slaveSyncRounds": 11},
        now_ms=lambda: 1_000 + 90_061_000)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    config = BrokerConfig(store_path_root_dir=str(tmp_path), broker_name=BROKER,
                          max_queue_nums=64)
    topics, groups = TopicConfigManager(config), SubscriptionGroupManager(config)
    offsets = ConsumerOffsetManager(config)
    tw, gw, store, consumers = Writer(), Writer(), Store(), Consumers()
    stats = BrokerStats(BROKER, 0.0)
    role = RoleState(BrokerRole.ASYNC_MASTER, 0)
    registered: list[int] = []
    deleted: list[str] = []
    delay = {1: 5, 3: 8}
    service = AdminService(
        config, role, AdminTables(topics, tw, groups, gw, offsets, lambda: delay),
        store, consumers, stats, runtime([Conn("a", 10, 1), Conn("b", 30, 2)]),
        on_topics_changed=lambda: registered.append(1), delete_topic_data=deleted.append)
    return Env(config, service, topics, groups, offsets, tw, gw, store, consumers, stats, role,
               registered, deleted, [])


# ---- topics -------------------------------------------------------------------------


@pytest.mark.parametrize(("cfg", "remark"), [
    (TopicConfig("bad topic!", 4, 4), "topic"),
    (TopicConfig("SCHEDULE_TOPIC_XXXX", 4, 4), "reserved system topic"),
    (TopicConfig("T", 0, 4), "within 1..64"),
    (TopicConfig("T", 4, 65), "within 1..64"),
    (TopicConfig("T", 4, 4, perm=99), "perm must be within"),
])
def test_an_invalid_topic_is_refused_and_changes_nothing(env: Env, cfg: TopicConfig,
                                                         remark: str) -> None:
    before = dict(env.topics.table)
    result = env.service.update_and_create_topic(cfg, env.answer)
    assert result is not None and result.status is AdminStatus.INVALID
    assert result.remark is not None and remark in result.remark
    assert env.topics.table == before and env.topics.seq == 0 and env.registered == []


def test_a_topic_change_is_answered_once_journaled(env: Env) -> None:
    cfg = TopicConfig("T", 4, 2)
    assert env.service.update_and_create_topic(cfg, env.answer) is None
    assert env.topics.get("T") == cfg and env.registered == [1]
    assert env.answers == []  # not on disk yet
    env.topic_writer.write(env.topics.seq)
    assert env.answers == [OK]
    # already durable (the writer is past it): answered at once
    env.topic_writer.durable = env.topics.seq + 1
    assert env.service.update_and_create_topic(TopicConfig("T", 8, 8), env.answer) == OK


def test_a_topic_change_not_journaled_in_time_says_so(env: Env) -> None:
    assert env.service.update_and_create_topic(TopicConfig("T", 4, 4), env.answer) is None
    env.topic_writer.write(env.topics.seq, ok=False)
    assert env.answers == [AdminResult(AdminStatus.NOT_DURABLE, TOPIC_NOT_DURABLE)]
    assert env.topics.get("T") is not None  # applied: written when the disk allows


def test_delete_topic(env: Env) -> None:
    assert env.service.delete_topic("Nobody", env.answer) == OK  # nothing to journal
    assert env.deleted == ["Nobody"]
    env.service.update_and_create_topic(TopicConfig("T", 4, 4), env.answer)
    assert env.service.delete_topic("T", env.answer) is None
    assert env.topics.get("T") is None and env.deleted == ["Nobody", "T"]
    env.topic_writer.write(env.topics.seq)
    assert env.answers == [OK, OK]


def test_topic_stats(env: Env) -> None:
    assert env.service.topic_stats("T") is None
    env.topics.put(TopicConfig("T", 1, 2))
    env.store.offsets[("T", 1)] = (3, 10)
    assert env.service.topic_stats("T") == [
        QueueStats(BROKER, 0, 0, 0, 0),
        QueueStats(BROKER, 1, 3, 10, 1_000_009),  # the last message's store time
    ]
    assert "T" in env.service.all_topic_configs()["topicConfigTable"]


# ---- subscription groups --------------------------------------------------------------


def test_a_group_change_is_answered_once_journaled(env: Env) -> None:
    cfg = SubscriptionGroupConfig("g", retry_max_times=3, consume_broadcast_enable=False)
    assert env.service.update_and_create_group(cfg, env.answer) is None
    assert env.groups.table["g"] == cfg and env.answers == []
    env.group_writer.write(env.groups.seq - 1)  # an earlier change only
    assert env.answers == []
    env.group_writer.write(env.groups.seq)
    assert env.answers == [OK]
    assert env.service.all_groups()["subscriptionGroupTable"]["g"]["retryMaxTimes"] == 3
    assert env.topic_writer.waiting == []  # the topics' journal has nothing to do with it


def test_a_group_change_not_journaled_in_time_says_so(env: Env) -> None:
    env.service.update_and_create_group(SubscriptionGroupConfig("g"), env.answer)
    env.group_writer.write(env.groups.seq, ok=False)
    assert env.answers == [AdminResult(AdminStatus.NOT_DURABLE, GROUP_NOT_DURABLE)]


@pytest.mark.parametrize(("cfg", "remark"), [
    (SubscriptionGroupConfig("bad group!"), "group"),
    (SubscriptionGroupConfig("g", retry_queue_nums=65), "retryQueueNums must be within 0..64"),
])
def test_an_invalid_group_is_refused(env: Env, cfg: SubscriptionGroupConfig, remark: str) -> None:
    result = env.service.update_and_create_group(cfg, env.answer)
    assert result is not None and result.status is AdminStatus.INVALID
    assert result.remark is not None and remark in result.remark
    assert env.groups.table == {} and env.groups.seq == 0


def test_delete_group(env: Env) -> None:
    result = env.service.delete_group("g", env.answer)
    assert result == AdminResult(AdminStatus.GROUP_NOT_EXIST, "subscription group g does not exist")
    env.groups.put(SubscriptionGroupConfig("g"))
    env.stats.record_get("T", "g", 5, 50)
    env.stats.record_get("T", "other", 5, 50)
    assert env.service.delete_group("g", env.answer) is None
    assert "g" not in env.groups.table and set(env.stats.get) == {("T", "other")}
    env.group_writer.write(env.groups.seq)
    assert env.answers == [OK]


# ---- consumers ----------------------------------------------------------------------


def test_consume_stats_cover_offsets_and_subscriptions(env: Env) -> None:
    for name in ("A", "B", "C"):
        env.topics.put(TopicConfig(name, 2, 2))
    env.offsets.commit_offset("g", "A", 1, 4)  # a committed offset: A counts
    info = ConsumerGroupInfo("g", subscriptions={"B": {}, "Gone": {}})  # B subscribed
    env.consumers.groups["g"] = info
    env.store.offsets[("A", 1)] = (0, 9)
    stats = env.service.consume_stats("g")
    assert stats.queues == [
        ConsumeQueueStats("A", BROKER, 0, 0, 0, 0),
        ConsumeQueueStats("A", BROKER, 1, 9, 4, 1_000_003),  # the last consumed one's time
        ConsumeQueueStats("B", BROKER, 0, 0, 0, 0),
        ConsumeQueueStats("B", BROKER, 1, 0, 0, 0),
    ]
    assert stats.consume_tps == 0.0
    assert [q.topic for q in env.service.consume_stats("g", "B").queues] == ["B", "B"]
    assert env.service.consume_stats("g", "C").queues == []
    assert env.service.consume_stats("nobody").queues == []


def test_consumer_connections(env: Env) -> None:
    assert env.service.consumer_connections("g") is None
    info = ConsumerGroupInfo("g", "CONSUME_ACTIVELY", "BROADCASTING",
                             subscriptions={"T": {"subString": "*"}})
    info.clients["c1"] = ClientChannelInfo("c1", Conn("127.0.0.1:5000"), 0.0)
    env.consumers.groups["g"] = info
    found = env.service.consumer_connections("g")
    assert found is not None
    assert found.connections == [ConsumerConnection("c1", "127.0.0.1:5000")]
    assert (found.consume_type, found.message_model) == ("CONSUME_ACTIVELY", "BROADCASTING")
    assert found.subscriptions == {"T": {"subString": "*"}}


def test_whole_tables(env: Env) -> None:
    env.offsets.commit_offset("g", "T", 0, 5)
    assert env.service.all_consumer_offsets()["offsetTable"] == {"T@g": {"0": 5}}
    assert env.service.all_delay_offsets() == {1: 5, 3: 8}


# ---- the broker -----------------------------------------------------------------------


def test_runtime_info_of_a_master_and_a_slave(env: Env) -> None:
    env.topics.put(TopicConfig("T", 1, 1))
    env.groups.put(SubscriptionGroupConfig("g"))
    info: dict[str, Any] = env.service.runtime_info()
    assert info["brokerName"] == BROKER and info["brokerRole"] == "ASYNC_MASTER"
    assert (info["commitLogMinOffset"], info["commitLogMaxOffset"]) == (7, 4096)
    assert info["topics"] == len(env.topics.table) and info["subscriptionGroups"] == 1
    assert info["runtime"] == "[ 1 days, 1 hours, 1 minutes, 1 seconds ]"
    assert (info["bootTimestamp"], info["startAcceptSendRequestTimeStamp"]) == (1_000, 2_000)
    assert info["commitLogDiskRatio"] == 0.25 and info["pageCacheLockTimeMills"] == 0
    assert (info["connectionOwedMaxBytes"], info["requestsToClientsDropped"]) == (30, 3)
    assert (info["heldPulls"], info["notificationsDropped"], info["haListenPort"]) == (3, 4, 10912)
    assert info["scheduleMessageOffset_1"] == "5,9" and info["transactionHalfCopies"] == 9
    assert "slaveSyncRounds" not in info
    env.role.apply(env.role.current.__class__(BrokerRole.SLAVE, 1, "127.0.0.1:1", None))
    info = env.service.runtime_info()
    assert info["brokerRole"] == "SLAVE" and info["slaveSyncRounds"] == 11
    assert "transactionCommitted" not in info


def test_every_status_has_a_wire_code() -> None:
    assert set(RESPONSE_CODES) == set(AdminStatus)
    assert RESPONSE_CODES[AdminStatus.GROUP_NOT_EXIST] == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert RESPONSE_CODES[AdminStatus.NOT_DURABLE] == ResponseCode.SYSTEM_ERROR


def test_topic_attributes_are_altered_kept_and_validated(env: Env) -> None:
    typed = {"message.type": "FIFO"}
    assert env.service.update_and_create_topic(TopicConfig("T", 4, 4), env.answer,
                                               {"message.type": "FIFO"}) is None
    assert env.topics.get("T") == TopicConfig("T", 4, 4, attributes=typed)
    # an update naming no attribute (updateTopicPerm, a plain updateTopic) keeps them
    env.service.update_and_create_topic(TopicConfig("T", 8, 8), env.answer)
    assert env.topics.get("T") == TopicConfig("T", 8, 8, attributes=typed)
    seq = env.topics.seq
    refused = env.service.update_and_create_topic(TopicConfig("T", 8, 8), env.answer,
                                                  {"message.type": "ORDERED"})
    assert refused is not None and refused.status is AdminStatus.INVALID
    assert "not one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED" in (refused.remark or "")
    assert env.topics.seq == seq and env.topics.get("T") == TopicConfig("T", 8, 8,
                                                                       attributes=typed)
    env.service.update_and_create_topic(TopicConfig("T", 8, 8), env.answer,
                                        {"message.type": None})
    assert env.topics.get("T") == TopicConfig("T", 8, 8)
