"""One bad delayed message never stops its delay level (also across a restart).

A real DefaultMessageStore in a tmp dir; messages are put straight into
SCHEDULE_TOPIC_XXXX queue 0 (level 1) with broken or hostile properties.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.config import BrokerConfig
from broker.message_rewrite import (
    DELAY,
    PUT_OUTCOMES,
    REAL_QID,
    REAL_TOPIC,
    PutOutcome,
    RewriteError,
    classify_put_status,
    from_schedule,
    to_schedule,
)
from broker.schedule_service import (
    PARK_MS,
    PERSIST_EVERY_S,
    ScheduleMessageService,
    retry_group_of,
)
from broker.store import DefaultMessageStore, MessageExtBrokerInner, PutMessageResult
from broker.store.commit_log import SCHEDULE_TOPIC
from broker.store.status import GetMessageStatus, PutMessageStatus
from broker.topic_config_manager import TopicConfigManager
from protocol.message import MessageExt, properties_to_string
from protocol.record import decode_record
from protocol.route import PERM_WRITE
from tests.broker.store.helpers import inner, make_config, open_store
from tests.broker.test_guarded_service import FakeLog


def scheduled(props: dict[str, str], body: bytes) -> MessageExtBrokerInner:
    """A level-1 schedule-topic message with exactly these properties."""
    return MessageExtBrokerInner(
        topic=SCHEDULE_TOPIC, queue_id=0, flag=0, body=body,
        properties_string=properties_to_string({DELAY: "1", **props}),
        born_timestamp=1, born_host="10.0.0.1:1234",
    )


def delayed(topic: str, queue_id: int, body: bytes) -> MessageExtBrokerInner:
    """A good message with delay level 1, as the send path stores it."""
    m = inner(topic, queue_id, body, tags="t")
    to_schedule(m, {"TAGS": "t", DELAY: "1"}, 18)
    return m


def bodies(store: DefaultMessageStore, topic: str, queue_id: int) -> list[bytes]:
    r = store.get_message("check", topic, queue_id, 0, 32, None)
    if r.status is not GetMessageStatus.FOUND:
        return []
    return [decode_record(b).body for b in r.buffers]


class Env:
    def __init__(self, root: Path) -> None:
        self.config: BrokerConfig = make_config(root, cl_size=64 * 1024)
        self.store = open_store(self.config)
        self.topics = TopicConfigManager(self.config)
        self.created = 0
        self.real_put = self.store.put_message
        self.stub: Callable[[MessageExtBrokerInner], PutMessageResult | None] = lambda m: None
        self.store.put_message = self._put  # type: ignore[method-assign,assignment]

    def _put(self, m: MessageExtBrokerInner) -> PutMessageResult:
        result = self.stub(m)
        return self.real_put(m) if result is None else result

    def service(self, now_ms: Callable[[], int] | None = None) -> ScheduleMessageService:
        def created() -> None:
            self.created += 1

        kw: dict[str, Any] = {} if now_ms is None else {"now_ms": now_ms}
        svc = ScheduleMessageService(self.config, self.store, self.topics, created, **kw)
        svc.guard.log = FakeLog()
        svc.load()
        return svc


@pytest.fixture
def env(tmp_path: Path) -> Any:
    e = Env(tmp_path)
    yield e
    e.store.shutdown()


def test_poisoned_messages_do_not_stop_the_level(env: Env) -> None:
    # delayOffset.json as a broker stuck on a bad message left it
    env.config.store_path("config", "delayOffset.json").parent.mkdir(parents=True, exist_ok=True)
    env.config.store_path("config", "delayOffset.json").write_text('{"offsetTable": {"1": 0}}')

    def stub(m: MessageExtBrokerInner) -> PutMessageResult | None:
        if m.topic == "%RETRY%illegal":
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        if m.topic == "Boom":
            raise RuntimeError("store bug")
        return None

    env.stub = stub
    puts = [
        delayed("TopicA", 1, b"good-0"),
        scheduled({REAL_QID: "0"}, b"no-real-topic"),
        scheduled({REAL_TOPIC: "%RETRY%" + "g" * 300, REAL_QID: "0"}, b"long-group"),
        scheduled({REAL_TOPIC: "%RETRY%nul\x00byte", REAL_QID: "0"}, b"nul-byte"),
        scheduled({REAL_TOPIC: "%RETRY%gq", REAL_QID: "garbage"}, b"garbage-qid"),
        scheduled({REAL_TOPIC: "%RETRY%illegal", REAL_QID: "0"}, b"illegal"),
        scheduled({REAL_TOPIC: "Boom", REAL_QID: "0"}, b"raises"),
        delayed("TopicA", 1, b"good-1"),
        delayed("%RETRY%cg", 0, b"good-retry"),
    ]
    for m in puts:
        assert env.real_put(m).ok
    svc = env.service()
    assert svc.offset_table == {1: 0}
    now = int(time.time() * 1000) + 10_000
    assert svc.deliver_due(now) == 3
    assert bodies(env.store, "TopicA", 1) == [b"good-0", b"good-1"]
    assert bodies(env.store, "%RETRY%cg", 0) == [b"good-retry"]
    # a known group's undeliverable messages went to its dead-letter queue
    assert bodies(env.store, "%DLQ%gq", 0) == [b"garbage-qid"]
    assert bodies(env.store, "%DLQ%illegal", 0) == [b"illegal"]
    dlq = env.topics.get("%DLQ%gq")
    assert dlq is not None and dlq.perm == PERM_WRITE and env.created == 2
    assert (svc.dead_lettered, svc.dropped) == (2, 4)
    assert svc.offset_table == {1: len(puts)} and svc.dirty
    log = svc.guard.log
    assert isinstance(log, FakeLog)
    dropped = [kw for _, event, kw in log.lines if event == "delayed message dropped"]
    assert {kw["offset"] for kw in dropped} == {1, 2, 3, 6}
    assert any(isinstance(kw.get("exc_info"), RuntimeError) for kw in dropped)
    assert all(len(kw["real_topic"]) < 120 for kw in dropped)  # bounded

    # across a restart: the level goes on from past the bad messages, no duplicates
    svc.persist()
    assert json.loads(svc.path.read_text()) == {"offsetTable": {"1": len(puts)}}
    again = env.service()
    assert again.offset_table == {1: len(puts)}
    assert again.deliver_due(now) == 0
    assert env.real_put(delayed("TopicA", 1, b"good-2")).ok
    assert again.deliver_due(now) == 1
    assert bodies(env.store, "TopicA", 1) == [b"good-0", b"good-1", b"good-2"]


def test_a_transient_status_parks_the_level(env: Env) -> None:
    full = {"on": True}

    def stub(m: MessageExtBrokerInner) -> PutMessageResult | None:
        if full["on"]:
            return PutMessageResult(PutMessageStatus.DISK_FULL)
        return None

    env.stub = stub
    assert env.service().running_stats() == {}  # no delayed message, no level
    for i in range(3):
        assert env.real_put(delayed("TopicA", 0, b"m%d" % i)).ok
    svc = env.service()
    now = int(time.time() * 1000) + 10_000
    assert svc.running_stats() == {"scheduleMessageOffset_1": "0,3"}  # not walked yet
    assert svc.deliver_due(now) == 0
    assert svc.offset_table.get(1, 0) == 0 and svc.dropped == 0  # nothing skipped
    assert svc.running_stats() == {"scheduleMessageOffset_1": "0,3"}  # three wait
    full["on"] = False
    assert svc.deliver_due(now + PARK_MS - 1) == 0  # parked: not even tried
    assert svc.deliver_due(now + PARK_MS) == 3
    assert bodies(env.store, "TopicA", 0) == [b"m0", b"m1", b"m2"]
    assert svc.offset_table[1] == 3
    assert svc.running_stats() == {"scheduleMessageOffset_1": "3,3"}  # none waits


def test_a_transient_dead_letter_put_parks_too(env: Env) -> None:
    def stub(m: MessageExtBrokerInner) -> PutMessageResult | None:
        if m.topic.startswith("%DLQ%"):
            return PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY)
        return None

    env.stub = stub
    assert env.real_put(scheduled({REAL_TOPIC: "%RETRY%gq", REAL_QID: "x"}, b"bad")).ok
    svc = env.service()
    now = int(time.time() * 1000) + 10_000
    assert svc.deliver_due(now) == 0 and svc.offset_table.get(1, 0) == 0
    env.stub = lambda m: None
    assert svc.deliver_due(now + PARK_MS) == 0
    assert svc.offset_table[1] == 1 and bodies(env.store, "%DLQ%gq", 0) == [b"bad"]


def test_every_put_status_is_classified() -> None:
    assert set(PutMessageStatus.__members__) <= set(PUT_OUTCOMES)
    assert classify_put_status(PutMessageStatus.PUT_OK) is PutOutcome.STORED
    assert classify_put_status(PutMessageStatus.FLUSH_DISK_TIMEOUT) is PutOutcome.STORED
    for transient in ("SERVICE_NOT_AVAILABLE", "OS_PAGECACHE_BUSY", "CREATE_MAPEDFILE_FAILED",
                      "DISK_FULL"):
        assert classify_put_status(PutMessageStatus[transient]) is PutOutcome.TRANSIENT
    for permanent in ("MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED"):
        assert classify_put_status(PutMessageStatus[permanent]) is PutOutcome.PERMANENT


def test_from_schedule_and_retry_group() -> None:
    def msg(props: dict[str, str]) -> MessageExt:
        return MessageExt(topic=SCHEDULE_TOPIC, body=b"x", properties=props)

    assert from_schedule(msg({REAL_TOPIC: "T", REAL_QID: "3", DELAY: "2", "K": "v"})).queue_id == 3
    for bad in ({REAL_QID: "0"}, {REAL_TOPIC: "T"}, {REAL_TOPIC: "T", REAL_QID: "-1"},
                {REAL_TOPIC: "T", REAL_QID: "9" * 12}, {REAL_TOPIC: "a b", REAL_QID: "0"},
                {REAL_TOPIC: SCHEDULE_TOPIC, REAL_QID: "0"}, {REAL_TOPIC: "", REAL_QID: "0"}):
        with pytest.raises(RewriteError):
            from_schedule(msg(bad))
    assert retry_group_of("%RETRY%g1") == "g1"
    assert retry_group_of("%RETRY%") is None
    assert retry_group_of("T") is None and retry_group_of(None) is None
    assert retry_group_of("%RETRY%" + "g" * 121) is None  # not a valid topic name
    assert retry_group_of("%RETRY%nul\x00") is None


async def test_run_loop_survives_a_failing_level(
    env: Env, autojump_clock: trio.testing.MockClock, no_threads: None
) -> None:
    base = int(time.time() * 1000)
    svc = env.service(now_ms=lambda: base + int(trio.current_time() * 1000))
    real_min = env.store.get_min_offset_in_queue

    def min_offset(topic: str, queue_id: int) -> int:
        if topic == SCHEDULE_TOPIC and queue_id == 1:
            raise OSError("consume queue unreadable")
        return real_min(topic, queue_id)

    env.store.get_min_offset_in_queue = min_offset  # type: ignore[method-assign]
    assert env.real_put(delayed("TopicA", 0, b"a")).ok
    m = inner("TopicA", 0, b"b")
    to_schedule(m, {DELAY: "2"}, 18)  # level 2: its queue fails every tick
    assert env.real_put(m).ok
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        await trio.sleep(PERSIST_EVERY_S - 1)
        assert bodies(env.store, "TopicA", 0) == [b"a"]
        assert not svc.path.exists()
        await trio.sleep(2)
        assert json.loads(svc.path.read_text()) == {"offsetTable": {"1": 1}}
        nursery.cancel_scope.cancel()
    log = svc.guard.log
    assert isinstance(log, FakeLog)
    level_lines = [kw for _, e, kw in log.lines if e == "delay level failed, retrying later"]
    assert len(level_lines) == 1 and isinstance(level_lines[0]["exc_info"], OSError)
    assert svc.guard.failures > 5  # tried again every park period, logged once
