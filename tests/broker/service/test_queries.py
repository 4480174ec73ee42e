"""QueryService in process, over fakes: messages by key, id and time, a topic's
config, a consume queue's entries, the clean-ups (decided without I/O, the
files deleted in a worker thread); the remoting adapters' table and decoding.
No controller, no sockets."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.client_manager import ConsumerGroupInfo
from broker.query_processor import QUERY_STATUS_TO_CODE, decode_query
from broker.service.queries import (
    DEFAULT_QUERY_MAX_NUM,
    MAX_QUERY_NUM,
    QUERY_CQ_MAX_COUNT,
    ConsumeQueueQuery,
    MessageQuery,
    QueryService,
    QueryStatus,
)
from broker.store.queue_cleanup import CleanPlan, Keep, QueueFacts
from broker.topic_validator import RMQ_SYS_TRANS_HALF_TOPIC
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.hashing import java_string_hash
from protocol.message import MessageConst, MessageExt, properties_to_string
from protocol.record import decode_record, encode_record, pack_host
from protocol.route import TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig
from tests.broker.store.helpers import inner, make_config, open_store

HOST = pack_host("127.0.0.1:10911")


def record(topic: str, body: bytes, offset: int, **props: str) -> bytes:
    return encode_record(
        topic=topic.encode(), queue_id=0, flag=0, body=body,
        properties=properties_to_string(props).encode(), sys_flag=0, born_timestamp=1,
        born_host=HOST, store_timestamp=2, store_host=HOST, reconsume_times=0,
        prepared_transaction_offset=0, queue_offset=0, physical_offset=offset)


@dataclass
class Detached:
    count: int
    threads: list[int] = field(default_factory=list)

    def delete_files(self) -> int:
        self.threads.append(threading.get_ident())
        return self.count


@dataclass
class Store:
    """The store's reads the service makes, from tables; detach records its calls."""

    records: dict[int, bytes] = field(default_factory=dict)
    index: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    progress: tuple[int, int] = (0, 0)
    queues: dict[tuple[str, int], tuple[int, int, list[tuple[int, int, int, int]]]] = field(
        default_factory=dict)
    facts: list[QueueFacts] = field(default_factory=list)
    min_phy: int = 0
    asked_max: list[int] = field(default_factory=list)
    detached: list[dict[str, set[int] | None]] = field(default_factory=list)
    detach_threads: list[int] = field(default_factory=list)
    last: Detached | None = None

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return timestamp_ms // 1000 + queue_id

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int,
                      end_ms: int) -> list[bytes]:
        self.asked_max.append(max_num)
        return [self.records[o] for o in self.index.get((topic, key), [])][:max_num]

    def index_progress(self) -> tuple[int, int]:
        return self.progress

    def record_at(self, commit_log_offset: int) -> bytes | None:
        return self.records.get(commit_log_offset)

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        data = self.records.get(commit_log_offset)
        return None if data is None else decode_record(data)

    def consume_queue_entries(self, topic: str, queue_id: int, index: int, count: int
                              ) -> tuple[int, int, list[tuple[int, int, int, int]]] | None:
        found = self.queues.get((topic, queue_id))
        if found is None:
            return None
        lo, hi, rows = found
        return lo, hi, [r for r in rows if r[0] >= index][:count]

    def consume_queue_facts(self) -> list[QueueFacts]:
        return list(self.facts)

    def get_min_phy_offset(self) -> int:
        return self.min_phy

    def detach_consume_queues(self, chosen: dict[str, set[int] | None]) -> Detached:
        self.detached.append(chosen)
        self.detach_threads.append(threading.get_ident())
        self.last = Detached(sum(len(ids or ()) for ids in chosen.values()))
        return self.last


@dataclass
class Role:
    is_slave: bool = False
    sync_master: bool = False


class Topics:
    def __init__(self, *names: str) -> None:
        self.table = {n: TopicConfig(n, 4, 4) for n in names}

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)


@dataclass
class Consumers:
    groups: dict[str, ConsumerGroupInfo] = field(default_factory=dict)

    def subscribe(self, group: str, topic: str, expression: str) -> None:
        info = self.groups.setdefault(group, ConsumerGroupInfo(group))
        info.subscriptions[topic] = {"topic": topic, "subString": expression}


@dataclass
class Offsets:
    offset_table: dict[str, dict[int, int]] = field(default_factory=dict)


@dataclass
class Groups:
    table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)


@dataclass
class World:
    store: Store = field(default_factory=Store)
    role: Role = field(default_factory=Role)
    topics: Topics = field(default_factory=lambda: Topics("T"))
    consumers: Consumers = field(default_factory=Consumers)
    offsets: Offsets = field(default_factory=Offsets)
    groups: Groups = field(default_factory=Groups)

    def service(self) -> QueryService:
        return QueryService("b", self.role, self.store, self.topics, self.consumers,
                            self.offsets, self.groups)


@pytest.fixture
def w() -> World:
    return World()


# ---------------------------------------------------------------- messages


def test_search_offset_is_the_stores_answer(w: World) -> None:
    assert w.service().search_offset("T", 2, 7_000) == 9


def test_query_bounds_the_records_a_query_takes(w: World) -> None:
    w.store.records = {i * 100: record("T", b"m%d" % i, i * 100, KEYS="k") for i in range(80)}
    w.store.index[("T", "k")] = sorted(w.store.records)
    w.store.progress = (1234, 5678)
    svc = w.service()
    for asked, by_id, taken in ((1000, False, MAX_QUERY_NUM), (0, False, 1), (-5, False, 1),
                                (10, False, 10), (1000, True, DEFAULT_QUERY_MAX_NUM),
                                (1, True, DEFAULT_QUERY_MAX_NUM)):
        out = svc.query_messages(MessageQuery("T", "k", asked, 0, 2**62, by_id))
        assert out.status is QueryStatus.OK
        assert w.store.asked_max[-1] == taken and len(out.records) == taken
        assert (out.index_end_timestamp, out.index_end_phy_offset) == (1234, 5678)
    out = svc.query_messages(MessageQuery("T", "nothing", 10, 0, 1))
    assert out.status is QueryStatus.NOT_FOUND and out.records == []
    assert "nothing" in (out.remark or "") and out.index_end_timestamp == 1234


def test_query_leaves_out_what_the_caller_may_not_see(w: World) -> None:
    w.store.records = {0: record("T", b"plain", 0, KEYS="k"),
                       100: record(RMQ_SYS_TRANS_HALF_TOPIC, b"half", 100, KEYS="k",
                                   **{MessageConst.PROPERTY_REAL_TOPIC: "Secret"})}
    w.store.index[("T", "k")] = [0, 100]
    seen: list[str] = []

    def visible(msg: MessageExt) -> bool:
        seen.append(msg.topic)
        return msg.properties.get(MessageConst.PROPERTY_REAL_TOPIC) != "Secret"

    svc = w.service()
    out = svc.query_messages(MessageQuery("T", "k", 10, 0, 1), visible)
    assert out.status is QueryStatus.OK and out.records == [w.store.records[0]]
    assert seen == ["T", RMQ_SYS_TRANS_HALF_TOPIC]
    out = svc.query_messages(MessageQuery("T", "k", 10, 0, 1), lambda m: False)
    assert out.status is QueryStatus.NOT_FOUND  # everything left out: nothing found


def test_view_message_by_offset(w: World) -> None:
    w.store.records = {64: record("T", b"x", 64)}
    asked: list[MessageExt] = []

    def refuse(msg: MessageExt) -> str:
        asked.append(msg)
        return "no SUB"

    svc = w.service()
    out = svc.view_message(64)
    assert out.status is QueryStatus.OK and out.record == w.store.records[64]
    out = svc.view_message(65, refuse)  # nothing there: not asked, nothing told
    assert out.status is QueryStatus.NO_MESSAGE and out.record is None and asked == []
    assert "65" in (out.remark or "")
    out = svc.view_message(64, refuse)
    assert (out.status, out.remark, out.record) == (QueryStatus.NO_PERMISSION, "no SUB", None)
    assert [m.topic for m in asked] == ["T"]
    assert svc.view_message(64, lambda m: None).status is QueryStatus.OK


# ---------------------------------------------------------------- topics and queues


def test_topic_config(w: World) -> None:
    svc = w.service()
    out = svc.topic_config("T")
    assert out.status is QueryStatus.OK and out.config == TopicConfig("T", 4, 4)
    out = svc.topic_config("Nope")
    assert out.status is QueryStatus.TOPIC_NOT_EXIST and out.config is None
    assert "Nope" in (out.remark or "")


def test_consume_queue_entries_and_what_a_group_selects(w: World) -> None:
    a, b = java_string_hash("A"), java_string_hash("B")
    w.store.queues[("T", 0)] = (0, 3, [(0, 0, 10, a), (1, 10, 10, a), (2, 20, 10, b)])
    svc = w.service()
    out = svc.consume_queue(ConsumeQueueQuery("T", 0, 1, 5))
    assert out.status is QueryStatus.OK and (out.min_index, out.max_index) == (0, 3)
    assert [(e.index, e.physic_offset, e.tags_code, e.selected) for e in out.entries] == [
        (1, 10, a, None), (2, 20, b, None)]
    assert out.remark is None and out.subscription is None and out.filter_note is None
    out = svc.consume_queue(ConsumeQueueQuery("T", 0, 1, 5, "Off"))
    assert out.filter_note == "Off@T is not online!" and out.entries[0].selected is None
    w.consumers.subscribe("G", "T", "B || C")
    out = svc.consume_queue(ConsumeQueueQuery("T", 0, 1, 5, "G"))
    assert out.subscription == {"topic": "T", "subString": "B || C"}
    assert [e.selected for e in out.entries] == [False, True]
    w.consumers.subscribe("All", "T", "*")
    out = svc.consume_queue(ConsumeQueueQuery("T", 0, 0, 5, "All"))
    assert [e.selected for e in out.entries] == [True, True, True]
    w.consumers.subscribe("Bad", "T", "|| ||")  # names no tag: cannot be evaluated
    out = svc.consume_queue(ConsumeQueueQuery("T", 0, 0, 5, "Bad"))
    assert out.status is QueryStatus.OK and out.subscription is not None
    assert "cannot be evaluated" in (out.filter_note or "")
    assert all(e.selected is None for e in out.entries)
    out = svc.consume_queue(ConsumeQueueQuery("T", 0, 3, 5))  # past the end
    assert out.status is QueryStatus.OK and out.entries == []
    assert out.remark == "Index 3 of 0@T is not exist!"


def test_consume_queue_refusals(w: World) -> None:
    svc = w.service()
    out = svc.consume_queue(ConsumeQueueQuery("T", 7, 0, 5))
    assert (out.status, out.remark) == (QueryStatus.NO_QUEUE, "7@T is not exist!")
    for count in (0, -1, QUERY_CQ_MAX_COUNT + 1):
        out = svc.consume_queue(ConsumeQueueQuery("T", 0, 0, count))
        assert out.status is QueryStatus.ILLEGAL_REQUEST and str(count) in (out.remark or "")


# ---------------------------------------------------------------- clean-ups


def test_keep_rule_reads_the_tables_as_they_are_now(w: World) -> None:
    svc = w.service()
    rule = svc.keep_rule()
    assert rule("T") is Keep.CONFIGURED and rule("Other") is None
    w.offsets.offset_table["Held@grp"] = {0: 1}
    w.consumers.subscribe("W", "Watched", "*")
    w.groups.table["grp"] = SubscriptionGroupConfig("grp")
    rule = svc.keep_rule()
    assert rule("Held") is Keep.OFFSETS and rule("Watched") is Keep.SUBSCRIBED
    assert rule("%RETRY%grp") is Keep.GROUP and rule("%DLQ%grp") is Keep.GROUP
    assert rule("%RETRY%gone") is None
    assert rule(RMQ_SYS_TRANS_HALF_TOPIC) is Keep.SYSTEM


def test_plans_are_decided_without_touching_the_store(w: World) -> None:
    w.store.facts = [QueueFacts("Gone", 0, 100), QueueFacts("Gone", 1, 300),
                     QueueFacts("T", 0, 50), QueueFacts("Fresh", 0, 0)]
    w.store.min_phy = 200
    svc = w.service()
    plan, min_phy = svc.expired_plan()
    assert min_phy == 200 and plan.remove == [("Gone", 0)] and plan.kept == {}
    unused = svc.unused_plan()
    assert isinstance(unused, CleanPlan)
    assert unused.remove == [("Gone", 0), ("Gone", 1), ("Fresh", 0)]
    assert w.store.detached == []


async def test_clean_deletes_the_files_in_a_worker_thread(w: World) -> None:
    w.store.facts = [QueueFacts("Gone", 0, 100), QueueFacts("Gone", 2, 150),
                     QueueFacts("Held", 0, 100)]
    w.store.min_phy = 200
    w.offsets.offset_table["Held@grp"] = {0: 1}
    loop_thread = threading.get_ident()
    out = await w.service().clean_expired()
    assert out.status is QueryStatus.OK and out.removed == 2
    assert w.store.detached == [{"Gone": {0, 2}}]
    assert w.store.detach_threads == [loop_thread]  # out of the tables on the loop ...
    assert w.store.last is not None
    (deleted_in,) = w.store.last.threads
    assert deleted_in != loop_thread  # ... the files deleted in a worker thread
    report = out.plan.report()
    assert report["removedCount"] == 2
    assert report["kept"] == [{"topic": "Held", "reason": Keep.OFFSETS.value}]


async def test_clean_with_nothing_to_remove_starts_no_thread(w: World) -> None:
    w.store.facts = [QueueFacts("T", 0, 100)]
    out = await w.service().clean_unused()
    assert out.status is QueryStatus.OK and out.removed == 0 and out.plan.remove == []
    assert w.store.last is not None and w.store.last.threads == []


async def test_a_slave_does_not_clean_unused_topics(w: World) -> None:
    w.store.facts = [QueueFacts("Orphan", 0, 100)]
    w.role.is_slave = True
    out = await w.service().clean_unused()
    assert out.status is QueryStatus.NOT_ON_SLAVE and "slave" in (out.remark or "")
    assert w.store.detached == []
    out = await w.service().clean_expired()  # safe on a slave: nothing expired here
    assert out.status is QueryStatus.OK and out.removed == 0


async def test_clean_over_a_real_store_keeps_a_queue_made_again(tmp_path: Path) -> None:
    """The store takes the queue out at once; a message for the same queue arriving
    while the old files are being deleted goes into a fresh queue that keeps its file."""
    store = open_store(make_config(tmp_path / "store", cq_entries=10))
    try:
        for _ in range(3):
            assert store.put_message(inner("Gone", 0, b"old")).ok
        gone_dir = store.cq_root / "Gone" / "0"
        assert any(gone_dir.iterdir())
        detached = store.detach_consume_queues({"Gone": {0}})
        assert detached.count == 1 and store._existing_cq("Gone", 0) is None
        assert not gone_dir.exists()  # moved aside, its files still there
        (aside,) = (store.cq_root / "Gone").iterdir()
        assert ".removed-" in aside.name and any(aside.iterdir())
        result = store.put_message(inner("Gone", 0, b"new"))  # the queue made again
        assert result.ok and result.append_result is not None
        assert result.append_result.logics_offset == 0
        new_files = sorted(p.name for p in gone_dir.iterdir())
        assert new_files
        assert await trio.to_thread.run_sync(detached.delete_files) == 1
        assert not aside.exists()
        assert sorted(p.name for p in gone_dir.iterdir()) == new_files
        assert store.get_max_offset_in_queue("Gone", 0) == 1
    finally:
        store.shutdown()


def test_a_stop_before_the_files_went_leaves_nothing_at_the_next_load(tmp_path: Path) -> None:
    config = make_config(tmp_path / "store", cq_entries=10)
    store = open_store(config)
    assert store.put_message(inner("Gone", 0, b"x")).ok
    assert store.put_message(inner("Kept", 0, b"x")).ok
    detached = store.detach_consume_queues({"Gone": None})
    assert detached.count == 1
    store.shutdown()  # the deletion never ran
    (aside,) = (config.consume_queue_path / "Gone").iterdir()
    assert ".removed-" in aside.name
    store = open_store(config)
    try:
        assert not aside.exists()
        assert store._existing_cq("Gone", 0) is None
        assert store.get_max_offset_in_queue("Kept", 0) == 1
    finally:
        store.shutdown()


# ---------------------------------------------------------------- the remoting adapters


def test_every_query_status_has_a_code() -> None:
    assert set(QUERY_STATUS_TO_CODE) == set(QueryStatus)
    assert QUERY_STATUS_TO_CODE[QueryStatus.OK] == ResponseCode.SUCCESS
    assert QUERY_STATUS_TO_CODE[QueryStatus.NOT_FOUND] == ResponseCode.QUERY_NOT_FOUND


def test_decode_query_reads_the_unique_key_flag() -> None:
    fields: dict[str, Any] = {"topic": "T", "key": "k", "maxNum": 5, "beginTimestamp": 1,
                              "endTimestamp": 2}
    q = decode_query(RemotingCommand.request(RequestCode.QUERY_MESSAGE, dict(fields)))
    assert q == MessageQuery("T", "k", 5, 1, 2, False)
    for flag, by_id in (("true", True), ("TRUE", True), ("false", False), ("1", False)):
        cmd = RemotingCommand.request(RequestCode.QUERY_MESSAGE,
                                      {**fields, "_UNIQUE_KEY_QUERY": flag})
        assert decode_query(cmd).by_id is by_id

