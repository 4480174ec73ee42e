"""mqadmin's queue requests on the broker: the clean-up decisions (pure), the store
calls, and the handlers of GET_TOPIC_CONFIG, QUERY_CONSUME_QUEUE,
CLEAN_EXPIRED_CONSUMEQUEUE and CLEAN_UNUSED_TOPIC on a BrokerController (no
sockets); the broker's own topics under brokerTopicEnable/clusterTopicEnable."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import BrokerConfig, BrokerRole
from broker.controller import BrokerController
from broker.service.queries import QUERY_CQ_MAX_COUNT
from broker.store.queue_cleanup import (
    REPORT_MAX_NAMES,
    CleanPlan,
    Keep,
    QueueFacts,
    expired_queues,
    keep_rule,
    unused_topics,
)
from broker.subscription_group_manager import SubscriptionGroupConfig
from broker.topic_config_manager import TopicConfigManager
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.hashing import java_string_hash
from protocol.names import RMQ_SYS_SCHEDULE_TOPIC
from protocol.route import PERM_INHERIT, PERM_RW, TopicConfig
from tests.broker.fakes import FakeConn
from tests.broker.store.helpers import inner

# ---------------------------------------------------------------- pure decisions


def q(topic: str, end: int, queue_id: int = 0) -> QueueFacts:
    return QueueFacts(topic, queue_id, end)


RULES = {"Configured": Keep.CONFIGURED, "Held": Keep.OFFSETS, "rmq_sys_x": Keep.SYSTEM}


def rule(topic: str) -> Keep | None:
    return RULES.get(topic)


def test_expired_queues_keep_what_is_referred_to_or_still_stored() -> None:
    queues = [q("Gone", 100), q("Gone", 90, queue_id=1), q("Gone", 300, queue_id=2),
              q("Configured", 50), q("Held", 50), q("rmq_sys_x", 50),
              q("Empty", 0)]
    plan = expired_queues(queues, 100, rule)
    # queue 2 still points at stored messages; a queue that never had an entry is not expired
    assert plan.remove == [("Gone", 0), ("Gone", 1)]
    # an existing topic is not reported; the others say why they stay
    assert plan.kept == {"Held": Keep.OFFSETS, "rmq_sys_x": Keep.SYSTEM}


def test_unused_topics_remove_every_queue_of_an_unreferred_topic() -> None:
    queues = [q("Gone", 10**9), q("Gone", 0, queue_id=3), q("Configured", 5),
              q("Held", 5)]
    plan = unused_topics(queues, rule)
    assert plan.remove == [("Gone", 0), ("Gone", 3)]
    assert plan.kept == {"Held": Keep.OFFSETS}


def test_keep_rule_asks_in_order() -> None:
    asked: list[str] = []

    def test(name: str, answer: bool) -> Any:
        def check(topic: str) -> bool:
            asked.append(name)
            return answer
        return check

    r = keep_rule(test("configured", False), test("system", False), test("offsets", True),
                  test("subscribed", True), test("group", True))
    assert r("T") is Keep.OFFSETS
    assert asked == ["configured", "system", "offsets"]
    none = keep_rule(*(lambda t: False for _ in range(5)))
    assert none("T") is None


def test_report_caps_the_names_and_counts_them_all() -> None:
    plan = CleanPlan(remove=[(f"T{i:05d}", 0) for i in range(REPORT_MAX_NAMES + 5)],
                     kept={"B": Keep.OFFSETS, "A": Keep.GROUP})
    report = plan.report()
    assert report["removedCount"] == REPORT_MAX_NAMES + 5
    assert len(report["removed"]) == REPORT_MAX_NAMES  # type: ignore[arg-type]
    assert report["kept"] == [{"topic": "A", "reason": Keep.GROUP.value},
                              {"topic": "B", "reason": Keep.OFFSETS.value}]


# ---------------------------------------------------------------- the broker's own topics


def test_broker_and_cluster_topics_are_writable_unless_turned_off(tmp_path: Path) -> None:
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path), broker_name="bx",
                       broker_cluster_name="cx")
    table = TopicConfigManager(cfg).table
    assert table["bx"].perm == table["cx"].perm == PERM_RW | PERM_INHERIT
    cfg = BrokerConfig.from_properties({"storePathRootDir": str(tmp_path), "brokerName": "bx",
                                        "brokerClusterName": "cx",
                                        "brokerTopicEnable": "false",
                                        "clusterTopicEnable": "false"})
    table = TopicConfigManager(cfg).table
    assert table["bx"].perm == table["cx"].perm == PERM_INHERIT


# ---------------------------------------------------------------- a broker, without sockets


def make_broker(root: Path, **kw: Any) -> BrokerController:
    c = BrokerController(BrokerConfig(
        store_path_root_dir=str(root), listen_port=0, maped_file_size_commit_log=4096,
        maped_file_size_consume_queue=10 * 20, max_message_size=2048, max_hash_slot_num=64,
        max_index_num=256, **kw))
    c._load()
    return c


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerController]:
    c = make_broker(tmp_path / "store")
    try:
        yield c
    finally:
        c._persist_and_close()


def call(c: BrokerController, code: int, fields: dict[str, Any] | None = None
         ) -> RemotingCommand:
    """The handler's answer; an async one (the clean-ups) in a trio run of its own."""
    sync, async_ = c.server.handlers.lookup(code)
    cmd = RemotingCommand.request(code, fields or {})
    if async_ is not None:
        response = trio.run(async_, FakeConn(), cmd)
    else:
        assert sync is not None
        response = sync(FakeConn(), cmd)  # type: ignore[arg-type]
    assert response is not None
    return response


def put(c: BrokerController, topic: str, n: int = 1, tags: str | None = None,
        size: int = 300) -> list[int]:
    """Queue offsets of ``n`` messages put into queue 0 of ``topic``."""
    out = []
    for _ in range(n):
        result = c.message_store.put_message(inner(topic, 0, b"x" * size, tags=tags))
        assert result.append_result is not None
        out.append(result.append_result.logics_offset)
    return out


def test_get_topic_config(broker: BrokerController) -> None:
    broker.topic_config_manager.update(TopicConfig("T", 3, 2, 4, order=True))
    resp = call(broker, RequestCode.GET_TOPIC_CONFIG, {"topic": "T"})
    assert resp.code == ResponseCode.SUCCESS
    assert TopicConfig.from_dict(resp.decode_body()) == TopicConfig("T", 3, 2, 4, order=True)
    resp = call(broker, RequestCode.GET_TOPIC_CONFIG, {"topic": "Nope"})
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in (resp.remark or "")


def test_query_consume_queue(broker: BrokerController) -> None:
    broker.topic_config_manager.update(TopicConfig("T", 1, 1))
    put(broker, "T", 2, tags="A")
    put(broker, "T", 1, tags="B")
    fields = {"topic": "T", "queueId": 0, "index": 1, "count": 5}
    body = call(broker, RequestCode.QUERY_CONSUME_QUEUE, fields).decode_body()
    assert (body["minQueueIndex"], body["maxQueueIndex"]) == (0, 3)
    rows = body["queueData"]
    assert [r["index"] for r in rows] == [1, 2]
    assert [r["tagsCode"] for r in rows] == [java_string_hash("A"), java_string_hash("B")]
    assert all(r["physicSize"] > 0 for r in rows) and "eval" not in rows[0]
    # a group: its subscription, and which entries it selects
    broker.consumer_manager.register("G", "cid", FakeConn(), time.monotonic(), {
        "subscriptionDataSet": [{"topic": "T", "subString": "B || C"}]})
    body = call(broker, RequestCode.QUERY_CONSUME_QUEUE, {**fields, "consumerGroup": "G"}
                ).decode_body()
    assert body["subscriptionData"]["subString"] == "B || C"
    assert [r["eval"] for r in body["queueData"]] == [False, True]
    body = call(broker, RequestCode.QUERY_CONSUME_QUEUE, {**fields, "consumerGroup": "Off"}
                ).decode_body()
    assert body["filterData"] == "Off@T is not online!"
    # past the end: no entries, and the remark says so
    resp = call(broker, RequestCode.QUERY_CONSUME_QUEUE, {**fields, "index": 3})
    assert resp.code == ResponseCode.SUCCESS and resp.decode_body()["queueData"] == []
    assert resp.remark == "Index 3 of 0@T is not exist!"
    # no such queue; a count out of bounds
    resp = call(broker, RequestCode.QUERY_CONSUME_QUEUE, {**fields, "queueId": 7})
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == "7@T is not exist!"
    for count in (0, QUERY_CQ_MAX_COUNT + 1):
        resp = call(broker, RequestCode.QUERY_CONSUME_QUEUE, {**fields, "count": count})
        assert resp.code == ResponseCode.SYSTEM_ERROR and "count" in (resp.remark or "")


def expire_first_files(c: BrokerController, root: Path) -> None:
    """Every commit-log file but the one being written goes (aged, then a manual clean)."""
    old = time.time() - 100 * 3600
    for f in (root / "commitlog").iterdir():
        os.utime(f, (old, old))
    while c.message_store.clean_expired_files(int(time.time() * 1000), 13, manual=True):
        pass


def removed(resp: RemotingCommand) -> list[tuple[str, int]]:
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return [(r["topic"], r["queueId"]) for r in resp.decode_body()["removed"]]


def kept(resp: RemotingCommand) -> dict[str, str]:
    return {r["topic"]: r["reason"] for r in resp.decode_body()["kept"]}


def test_clean_expired_and_unused_lose_nothing_referred_to(tmp_path: Path) -> None:
    root = tmp_path / "store"
    c = make_broker(root)
    try:
        tm = c.topic_config_manager
        tm.update(TopicConfig("Idle", 1, 1))
        tm.update(TopicConfig("Busy", 1, 1))
        # queues without a topic config (a topic deleted, a delayed message re-put after)
        put(c, "Gone", 2)
        put(c, "Held", 1)
        c.consumer_offset_manager.commit_offset("grp", "Held", 0, 1)
        put(c, "Watched", 1)
        c.consumer_manager.register("W", "cid", FakeConn(), time.monotonic(), {
            "subscriptionDataSet": [{"topic": "Watched", "subString": "*"}]})
        c.subscription_group_manager.update(SubscriptionGroupConfig("grp"))
        put(c, "%RETRY%grp", 1)
        put(c, RMQ_SYS_SCHEDULE_TOPIC, 1)
        idle = put(c, "Idle", 3)
        put(c, "Busy", 30)  # rolls the commit log over several files
        expire_first_files(c, root)
        store = c.message_store
        assert store.get_min_phy_offset() > 0
        put(c, "Fresh", 1)  # no topic config, stored after the clean-up: not expired

        resp = call(c, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)
        assert removed(resp) == [("Gone", 0)]
        assert kept(resp) == {"Held": Keep.OFFSETS.value, "Watched": Keep.SUBSCRIBED.value,
                              "%RETRY%grp": Keep.GROUP.value,
                              RMQ_SYS_SCHEDULE_TOPIC: Keep.SYSTEM.value}
        assert store._existing_cq("Gone", 0) is None and not (root / "consumequeue" / "Gone").exists()
        assert store._existing_cq("Fresh", 0) is not None
        # an existing topic's expired queue keeps its offsets: the next message follows
        assert store.get_max_offset_in_queue("Idle", 0) == idle[-1] + 1
        assert put(c, "Idle") == [idle[-1] + 1]
        assert removed(call(c, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)) == []  # nothing more

        resp = call(c, RequestCode.CLEAN_UNUSED_TOPIC)
        assert removed(resp) == [("Fresh", 0)]
        assert set(kept(resp)) == {"Held", "Watched", "%RETRY%grp", RMQ_SYS_SCHEDULE_TOPIC}
        for topic in ("Idle", "Busy", "Held", "Watched", "%RETRY%grp", RMQ_SYS_SCHEDULE_TOPIC):
            assert store._existing_cq(topic, 0) is not None, topic
    finally:
        c._persist_and_close()
    c = make_broker(root)  # after a restart: the removed queues stay gone, offsets go on
    try:
        assert c.message_store._existing_cq("Gone", 0) is None
        assert c.message_store._existing_cq("Fresh", 0) is None
        assert put(c, "Idle") == [idle[-1] + 2]
    finally:
        c._persist_and_close()


def test_a_slave_does_not_clean_unused_topics(tmp_path: Path) -> None:
    c = make_broker(tmp_path, broker_role=BrokerRole.SLAVE, broker_id=1)
    try:
        put_ok = c.message_store.put_message(inner("Orphan", 0, b"x"))
        assert put_ok.append_result is not None
        resp = call(c, RequestCode.CLEAN_UNUSED_TOPIC)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "slave" in (resp.remark or "")
        assert c.message_store._existing_cq("Orphan", 0) is not None
        # expired queues are safe to clean on a slave: nothing expired here
        assert removed(call(c, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)) == []
    finally:
        c._persist_and_close()


def test_the_clean_ups_are_served_off_the_reader_loop(broker: BrokerController) -> None:
    """Their handlers are async (the files go in a worker thread), the others inline."""
    for code in (RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, RequestCode.CLEAN_UNUSED_TOPIC):
        sync, async_ = broker.server.handlers.lookup(code)
        assert sync is None and async_ is not None
    for code in (RequestCode.GET_TOPIC_CONFIG, RequestCode.QUERY_CONSUME_QUEUE):
        sync, async_ = broker.server.handlers.lookup(code)
        assert sync is not None and async_ is None
