"""PopService in process: a real store in a temp dir, the real table and
handle codec, small fakes for settings, groups, topics and offsets, and a
reviver that re-puts into the retry or dead-letter topic as SendService's
send-back does (broker/message_rewrite.send_back_message). Time is a number;
crash points replay every prefix of the journal."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker.consumer_filter_manager import ConsumerFilterManager
from broker.message_rewrite import send_back_message
from broker.pop.core import HandleCodec, Inflight, PopTable
from broker.service.pop import (
    INIT_MODE_MIN,
    PopRequest,
    PopService,
    PopStatus,
    ReviveResult,
)
from broker.store import DefaultMessageStore
from broker.store.pop_log import decode_frames
from protocol.names import dlq_topic, retry_topic
from protocol.record import decode_record
from protocol.route import PERM_READ, PERM_WRITE, TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig
from tests.broker.store.helpers import inner, make_config, open_store

GROUP, TOPIC = "g", "T"
RETRY, DLQ = retry_topic(GROUP), dlq_topic(GROUP)


@dataclass
class Settings:
    broker_name: str = "b"
    broker_permission: int = PERM_READ | PERM_WRITE
    enable_property_filter: bool = False


@dataclass
class Role:
    is_slave: bool = False
    sync_master: bool = False


@dataclass
class Groups:
    table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)


@dataclass
class Topics:
    table: dict[str, TopicConfig] = field(default_factory=dict)

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)


@dataclass
class Offsets:
    table: dict[tuple[str, str, int], int] = field(default_factory=dict)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self.table.get((group, topic, queue_id), -1)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table[(group, topic, queue_id)] = offset


@dataclass
class World:
    svc: PopService
    store: DefaultMessageStore
    groups: Groups
    topics: Topics
    role: Role
    later: bool = False  # the reviver answers LATER

    def put(self, n: int, tags: str = "A", queue_id: int = 0) -> None:
        for i in range(n):
            assert self.store.put_message(inner(TOPIC, queue_id, f"m{i}".encode(),
                                                tags=tags)).ok

    def revive(self, rec: Inflight) -> ReviveResult:
        if self.later:
            return ReviveResult.LATER
        msg = self.store.look_message_by_offset(rec.commit_log_offset)
        if msg is None:
            return ReviveResult.GONE
        cfg = self.groups.find(rec.group)
        assert cfg is not None
        if msg.reconsume_times >= cfg.retry_max_times:
            self.topics.table.setdefault(DLQ, TopicConfig(DLQ, 1, 1))
            target = DLQ
        else:
            self.topics.table.setdefault(RETRY, TopicConfig(RETRY, 1, 1))
            target = RETRY
        assert self.store.put_message(send_back_message(msg, target, 0, None, 0, 18)).ok
        return ReviveResult.DONE


def req(n: int = 32, invisible: int = 10_000, **kw: object) -> PopRequest:
    r = PopRequest(GROUP, TOPIC, -1, n, invisible, init_mode=INIT_MODE_MIN)
    for k, v in kw.items():
        setattr(r, k, v)
    return r


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=100))
    groups = Groups({GROUP: SubscriptionGroupConfig(GROUP, retry_max_times=2)})
    topics = Topics({TOPIC: TopicConfig(TOPIC, 2, 2)})
    role = Role()
    holder: list[World] = []
    svc = PopService(Settings(), role, groups, topics, store, Offsets(),
                     PopTable(max_per_group=5, max_total=8), HandleCodec(b"k" * 32, "b"),
                     lambda rec: holder[0].revive(rec))
    w = World(svc, store, groups, topics, role)
    holder.append(w)
    yield w
    store.shutdown()


def bodies(outcome_messages: list) -> list[bytes]:  # type: ignore[type-arg]
    return [decode_record(m.record).body for m in outcome_messages]


def test_pop_ack_and_the_handle_is_spent(world: World) -> None:
    world.put(3)
    out = world.svc.pop(req(), 0)
    assert out.status is PopStatus.FOUND and bodies(out.messages) == [b"m0", b"m1", b"m2"]
    assert [m.attempt for m in out.messages] == [1, 1, 1]
    assert world.svc.pop(req(), 1).status is PopStatus.NO_MESSAGE  # offset moved at once
    first = out.messages[0].handle
    assert world.svc.ack(GROUP, TOPIC, first).status is PopStatus.OK
    again = world.svc.ack(GROUP, TOPIC, first)
    assert again.status is PopStatus.INVALID_RECEIPT_HANDLE and "no longer in flight" in str(
        again.remark)
    assert len(world.svc.table) == 2


def test_change_invisible_gives_a_new_handle_and_refuses_the_old(world: World) -> None:
    world.put(1)
    old = world.svc.pop(req(), 0).messages[0].handle
    changed = world.svc.change_invisible(GROUP, TOPIC, old, 60_000, 5_000)
    assert changed.status is PopStatus.OK and changed.handle != old
    assert changed.visible_at_ms == 65_000
    stale = world.svc.ack(GROUP, TOPIC, old)
    assert stale.status is PopStatus.INVALID_RECEIPT_HANDLE and "replaced" in str(stale.remark)
    stale_change = world.svc.change_invisible(GROUP, TOPIC, old, 5_000, 6_000)
    assert stale_change.status is PopStatus.INVALID_RECEIPT_HANDLE
    assert world.svc.revive_due(20_000) == 0  # the old visible time means nothing now
    assert world.svc.ack(GROUP, TOPIC, changed.handle).status is PopStatus.OK


@pytest.mark.parametrize("handle", ["", "garbage", "1.AAAA.AAAA", "1." + "A" * 600 + ".A"])
def test_hostile_handles(world: World, handle: str) -> None:
    out = world.svc.ack(GROUP, TOPIC, handle)
    assert out.status is PopStatus.INVALID_RECEIPT_HANDLE and out.remark


def test_a_handle_of_another_group_or_topic_is_refused(world: World) -> None:
    world.groups.table["h"] = SubscriptionGroupConfig("h")
    world.put(1)
    handle = world.svc.pop(req(), 0).messages[0].handle
    assert world.svc.ack("h", TOPIC, handle).status is PopStatus.INVALID_RECEIPT_HANDLE
    other = world.svc.ack(GROUP, "Other", handle)
    assert other.status is PopStatus.INVALID_RECEIPT_HANDLE and "of topic" in str(other.remark)


def test_revive_redelivers_with_attempt_plus_one_then_dead_letters(world: World) -> None:
    world.put(1)
    now = 0
    attempts = []
    for _ in range(3):  # retryMaxTimes 2: three deliveries
        out = world.svc.pop(req(invisible=1_000), now)
        assert out.status is PopStatus.FOUND, out
        attempts.append(out.messages[0].attempt)
        now += 1_000
        assert world.svc.revive_due(now) == 1
        assert world.svc.ack(GROUP, TOPIC, out.messages[0].handle).status \
            is PopStatus.INVALID_RECEIPT_HANDLE
    assert attempts == [1, 2, 3]
    assert world.svc.pop(req(), now).status is PopStatus.NO_MESSAGE
    assert world.store.get_max_offset_in_queue(DLQ, 0) == 1
    assert len(world.svc.table) == 0


def test_revive_keeps_a_record_the_reviver_cannot_put_yet(world: World) -> None:
    world.put(1)
    world.svc.pop(req(invisible=1_000), 0)
    world.later = True
    assert world.svc.revive_due(5_000) == 0 and len(world.svc.table) == 1
    world.later = False
    assert world.svc.revive_due(5_000) == 1 and len(world.svc.table) == 0


def test_bounds_answer_busy(world: World) -> None:
    world.put(7)
    assert len(world.svc.pop(req(), 0).messages) == 5  # per group
    busy = world.svc.pop(req(), 0)
    assert busy.status is PopStatus.BUSY and "popInflightMessageThreshold" in str(busy.remark)
    world.groups.table["h"] = SubscriptionGroupConfig("h")
    other = world.svc.pop(PopRequest("h", TOPIC, -1, 32, 10_000, init_mode=INIT_MODE_MIN), 0)
    assert len(other.messages) == 3  # the broker's total, 8


def test_tags_filter_skips_and_moves_on(world: World) -> None:
    world.put(2, tags="A")
    world.put(2, tags="B")
    out = world.svc.pop(req(expression="B"), 0)
    assert [m.queue_offset for m in out.messages] == [2, 3]
    assert world.svc.pop(req(), 0).status is PopStatus.NO_MESSAGE  # A skipped for good


@pytest.mark.parametrize("change, status", [
    ({"max_msg_nums": 0}, PopStatus.ILLEGAL_REQUEST),
    ({"max_msg_nums": 33}, PopStatus.ILLEGAL_REQUEST),
    ({"invisible_time_ms": 10}, PopStatus.ILLEGAL_REQUEST),
    ({"queue_id": 2}, PopStatus.ILLEGAL_REQUEST),
    ({"init_mode": 7}, PopStatus.ILLEGAL_REQUEST),
    ({"topic": "Nope"}, PopStatus.TOPIC_NOT_EXIST),
    ({"group": "nobody"}, PopStatus.GROUP_NOT_EXIST),
    ({"expression_type": "SQL92"}, PopStatus.FILTER_UNSUPPORTED),
    ({"expression": "||"}, PopStatus.SUBSCRIPTION_PARSE_FAILED),
])
def test_refusals(world: World, change: dict[str, object], status: PopStatus) -> None:
    out = world.svc.pop(req(**change), 0)
    assert out.status is status and out.remark


def test_a_slave_refuses(world: World) -> None:
    world.role.is_slave = True
    assert world.svc.pop(req(), 0).status is PopStatus.SLAVE
    assert world.svc.revive_due(10**12) == 0


def test_new_group_at_max_starts_at_0_while_the_first_message_is_in_memory(
        world: World) -> None:
    """RocketMQ 5's getInitOffset: a young queue is read from its start, so a
    new group sees what was sent before its first pop."""
    world.put(2)
    first = world.svc.pop(req(init_mode=1, queue_id=0), 0)
    assert [m.queue_offset for m in first.messages] == [0, 1]


def test_new_group_at_max_misses_older_messages_once_they_are_in_disk(world: World) -> None:
    world.put(2)
    world.store.total_physical_memory = 0  # no memory budget: offset 0 is "in disk"
    first = world.svc.pop(req(init_mode=1, queue_id=0), 0)
    assert first.status is PopStatus.NO_MESSAGE
    world.put(1)
    assert [m.queue_offset for m in world.svc.pop(req(init_mode=1, queue_id=0), 0).messages] \
        == [2]


def test_every_crash_point_loses_nothing_and_hides_nothing_forever(world: World) -> None:
    """Replay each prefix of the journal (a crash after any entry, or in the
    middle of one): every message below a queue's pop offset is in flight or
    was acked or revived by then; nothing else."""
    world.put(6)
    frames: list[bytes] = []
    settled: set[int] = set()  # queue offsets acked or revived, in journal order
    history: list[set[int]] = []

    def cut() -> None:  # the journal's frames so far, as the log would get them
        data, _ = world.svc.journal.take()
        frames.append(data)
        history.append(set(settled))

    a = world.svc.pop(req(n=3, invisible=1_000, queue_id=0), 0)
    cut()
    assert world.svc.ack(GROUP, TOPIC, a.messages[0].handle).status is PopStatus.OK
    settled.add(0)
    cut()
    ch = world.svc.change_invisible(GROUP, TOPIC, a.messages[1].handle, 5_000, 0)
    cut()
    b = world.svc.pop(req(n=3, invisible=1_000, queue_id=0), 10)
    cut()
    assert world.svc.revive_due(1_500) == 4  # offsets 2 to 5 (1 was moved)
    settled.update({2, 3, 4, 5})
    cut()
    assert world.svc.ack(GROUP, TOPIC, ch.handle).status is PopStatus.OK
    settled.add(1)
    cut()
    assert len(b.messages) == 3
    log = b"".join(frames)
    assert history[-1] == settled
    for end in range(len(log) + 1):
        entries, _ = decode_frames(log[:end])
        table = PopTable(100, 100)
        for e in entries:
            table.apply(e)
        known = {e["o"] for e in entries if e["k"] in ("ack", "rev")}
        assert known <= settled  # every ack or revive in the log was one the service made
        top = table.offset(GROUP, TOPIC, 0) or 0
        in_flight = {k[3] for k in table.records}
        for offset in range(top):  # below the pop offset: in flight, or settled by then
            assert offset in in_flight or offset in known, (end, offset)
        assert not (in_flight & known)
        assert all(k[3] < top for k in table.records)  # no record beyond the offset


def test_consumer_offset_table_is_told_the_lowest_unacked(world: World) -> None:
    """A master taking over with only the consumer offsets (not this broker's
    in-flight log) starts at the first un-acked message: redelivery, not loss."""
    world.put(3)
    out = world.svc.pop(req(queue_id=0), 0)
    offsets = world.svc.offsets
    assert offsets.query_offset(GROUP, TOPIC, 0) == 0
    world.svc.ack(GROUP, TOPIC, out.messages[1].handle)
    assert offsets.query_offset(GROUP, TOPIC, 0) == 0
    world.svc.ack(GROUP, TOPIC, out.messages[0].handle)
    assert offsets.query_offset(GROUP, TOPIC, 0) == 2
    world.svc.ack(GROUP, TOPIC, out.messages[2].handle)
    assert offsets.query_offset(GROUP, TOPIC, 0) == 3


def sql_world(world: World, enabled: bool = True) -> ConsumerFilterManager:
    filters = ConsumerFilterManager()
    world.svc.filters = filters
    world.svc.settings.enable_property_filter = enabled  # type: ignore[misc]
    return filters


def put_props(world: World, values: list[int], tags: str = "A") -> None:
    for i, a in enumerate(values):
        assert world.store.put_message(inner(TOPIC, 0, f"a{i}".encode(), tags=tags,
                                             properties={"a": str(a)})).ok


def test_sql92_selects_by_properties_and_moves_past_the_rest(world: World) -> None:
    filters = sql_world(world)
    put_props(world, [1, 7, 3, 9, 2])
    out = world.svc.pop(req(expression="a > 5", expression_type="SQL92"), 0)
    assert out.status is PopStatus.FOUND
    assert [m.queue_offset for m in out.messages] == [1, 3]
    # the entries that did not match are behind the group for good
    again = world.svc.pop(req(expression="a > 5", expression_type="SQL92"), 0)
    assert again.status is PopStatus.NO_MESSAGE
    put_props(world, [6])
    later = world.svc.pop(req(expression="a > 5", expression_type="SQL92"), 0)
    assert [m.queue_offset for m in later.messages] == [5]
    assert filters.compiled == 1  # compiled once for the (group, topic, text)
    # acked, the queue's consumer offset passes the skipped entries too
    for m in out.messages + later.messages:
        assert world.svc.ack(GROUP, TOPIC, m.handle).status is PopStatus.OK


def test_sql92_with_tags_in_the_expression(world: World) -> None:
    sql_world(world)
    put_props(world, [9], tags="A")
    put_props(world, [9, 1], tags="B")
    out = world.svc.pop(req(expression="TAGS = 'B' AND a > 5", expression_type="SQL92"), 0)
    assert [m.queue_offset for m in out.messages] == [1]


@pytest.mark.parametrize("enabled, expression, status", [
    (False, "a > 5", PopStatus.FILTER_UNSUPPORTED),  # enablePropertyFilter=false
    (True, "a >", PopStatus.SUBSCRIPTION_PARSE_FAILED),
    (True, "a > 'x' AND", PopStatus.SUBSCRIPTION_PARSE_FAILED),
])
def test_sql92_refusals(world: World, enabled: bool, expression: str, status: PopStatus) -> None:
    sql_world(world, enabled)
    put_props(world, [9])
    out = world.svc.pop(req(expression=expression, expression_type="SQL92"), 0)
    assert out.status is status and out.remark
    # nothing moved: a TAG pop still sees the message
    assert [m.queue_offset for m in world.svc.pop(req(), 0).messages] == [0]
