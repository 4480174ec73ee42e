"""PullService in process: no controller, no sockets, no RemotingCommand.

A real store in a temp dir (its zero-copy pieces, its dispatch waking held
pulls), the real filter manager, and small fakes for the rest (settings,
groups, topics, registrations, offsets, stats). Long polling in virtual time."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.client_manager import ConsumerGroupInfo
from broker.consumer_filter_manager import ConsumerFilterManager
from broker.service.pull import (
    READS,
    PullOutcome,
    PullRequest,
    PullService,
    PullStatus,
)
from broker.store import DefaultMessageStore
from protocol.record import decode_records
from protocol.route import PERM_READ, PERM_WRITE, TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig
from tests.broker.fakes import FakeOwner
from tests.broker.store.helpers import inner, make_config, open_store

GROUP, TOPIC = "g", "T"


@dataclass
class Settings:
    broker_name: str = "b"
    broker_permission: int = PERM_READ | PERM_WRITE
    slave_read_enable: bool = False
    enable_property_filter: bool = True
    long_polling_enable: bool = True
    long_polling_max_suspend_millis: int = 15_000


@dataclass
class LiveRole:
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
class Consumers:
    groups: dict[str, ConsumerGroupInfo] = field(default_factory=dict)


@dataclass
class Offsets:
    commits: list[tuple[str, str, int, int]] = field(default_factory=list)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commits.append((group, topic, queue_id, offset))


@dataclass
class Stats:
    gets: list[tuple[str, str, int, int]] = field(default_factory=list)

    def record_get(self, topic: str, group: str, messages: int, size: int) -> None:
        self.gets.append((topic, group, messages, size))


@dataclass
class World:
    svc: PullService
    store: DefaultMessageStore
    settings: Settings
    role: LiveRole
    groups: Groups
    topics: Topics
    consumers: Consumers
    offsets: Offsets
    stats: Stats

    def put(self, count: int = 1, tags: str = "TagA", **props: str) -> None:
        for _ in range(count):
            body = f"{tags}-{self.store.get_max_offset_in_queue(TOPIC, 0)}".encode()
            assert self.store.put_message(inner(TOPIC, 0, body, tags=tags, properties=props)).ok

    def pull(self, offset: int = 0, waiter: FakeOwner | None = None, **kw: object
             ) -> PullOutcome | None:
        return self.svc.pull(request(offset, **kw), None if waiter is None else waiter.waiter())


def request(offset: int = 0, **kw: object) -> PullRequest:
    req = PullRequest(GROUP, TOPIC, 0, offset, 32, expression="*")
    for name, value in kw.items():
        setattr(req, name, value)
    return req


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=100))
    settings, role, offsets, stats = Settings(), LiveRole(), Offsets(), Stats()
    groups = Groups({GROUP: SubscriptionGroupConfig(GROUP)})
    topics = Topics({TOPIC: TopicConfig(TOPIC, 1, 1)})
    consumers = Consumers()
    svc = PullService(settings, role, groups, topics, consumers, ConsumerFilterManager(), store,
                      offsets, stats, max_held=4, max_held_per_connection=2)
    store.dispatch_listeners.append(svc.holds.notify_message_arriving)
    yield World(svc, store, settings, role, groups, topics, consumers, offsets, stats)
    store.shutdown()


def answered(outcome: PullOutcome | None) -> PullOutcome:
    assert outcome is not None, "held"
    return outcome


def bodies(outcome: PullOutcome) -> list[bytes]:
    return [m.body for m in decode_records(b"".join(outcome.pieces))]


# ---- reads ---------------------------------------------------------------------------


def test_found_returns_the_stores_records_and_offsets(world: World) -> None:
    world.put(3)
    out = answered(world.pull(0))
    assert (out.status, out.remark) == (PullStatus.FOUND, None)
    assert (out.next_begin_offset, out.min_offset, out.max_offset) == (3, 0, 3)
    assert bodies(out) == [b"TagA-0", b"TagA-1", b"TagA-2"] and out.message_count == 3
    assert out.suggest_which_broker_id == 0
    size = sum(len(p) for p in out.pieces)
    assert world.stats.gets == [(TOPIC, GROUP, 3, size)]


def test_nothing_new_and_offsets_out_of_the_queue(world: World) -> None:
    empty = answered(world.pull(0))
    assert (empty.status, empty.remark) == (PullStatus.NO_NEW_MSG, "NO_MESSAGE_IN_QUEUE")
    world.put(2)
    at_end = answered(world.pull(2))
    assert (at_end.status, at_end.remark, at_end.next_begin_offset) == (
        PullStatus.NO_NEW_MSG, "OFFSET_OVERFLOW_ONE", 2)
    past = answered(world.pull(9))
    assert (past.status, past.remark, past.next_begin_offset) == (
        PullStatus.OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", 0)
    assert world.stats.gets == []  # nothing returned: nothing counted


def test_a_slave_never_moves_an_offset_nor_stores_a_commit(world: World) -> None:
    world.put(2)
    assert answered(world.pull(9, commit_offset=1)).status is PullStatus.OFFSET_MOVED
    assert world.offsets.commits == [(GROUP, TOPIC, 0, 1)]
    world.role.is_slave = True
    out = answered(world.pull(9, commit_offset=2))
    assert (out.status, out.next_begin_offset) == (PullStatus.RETRY_IMMEDIATELY, 9)
    assert world.offsets.commits == [(GROUP, TOPIC, 0, 1)]  # a slave stores none
    world.role.is_slave = False
    answered(world.pull(0, commit_offset=-1))  # a negative commit is not stored
    assert world.offsets.commits == [(GROUP, TOPIC, 0, 1)]


def test_tags_and_sql92_filters(world: World) -> None:
    world.put(2, "TagA", n="1")
    world.put(2, "TagB", n="2")
    out = answered(world.pull(0, expression="TagB"))
    assert bodies(out) == [b"TagB-2", b"TagB-3"]
    out = answered(world.pull(0, expression="n = 1 AND TAGS = 'TagA'", expression_type="SQL92"))
    assert bodies(out) == [b"TagA-0", b"TagA-1"] and out.next_begin_offset == 4
    none = answered(world.pull(0, expression="n = 7", expression_type="SQL92"))
    assert (none.status, none.remark, none.next_begin_offset) == (
        PullStatus.NO_MATCHED_MSG, "NO_MATCHED_MESSAGE", 4)


def test_the_registered_subscription_filters_without_one_in_the_request(world: World) -> None:
    world.put(1, "TagA")
    world.put(1, "TagB")
    info = ConsumerGroupInfo(GROUP)
    info.subscriptions[TOPIC] = {"subString": "TagB", "expressionType": "TAG", "subVersion": 5}
    world.consumers.groups[GROUP] = info
    assert bodies(answered(world.pull(0, expression=None))) == [b"TagB-1"]
    stale = answered(world.pull(0, expression=None, sub_version=6))
    assert stale.status is PullStatus.SUBSCRIPTION_NOT_LATEST


# ---- refusals ------------------------------------------------------------------------


def refuse_broker(w: World) -> None:
    w.settings.broker_permission = PERM_WRITE


def refuse_group_disabled(w: World) -> None:
    w.groups.table[GROUP] = replace(w.groups.table[GROUP], consume_enable=False)


def refuse_topic_perm(w: World) -> None:
    w.topics.table[TOPIC].perm = PERM_WRITE


def refuse_broadcast(w: World) -> None:
    w.groups.table[GROUP] = replace(w.groups.table[GROUP], consume_broadcast_enable=False)
    w.consumers.groups[GROUP] = ConsumerGroupInfo(GROUP, message_model="BROADCASTING")


def no_property_filter(w: World) -> None:
    w.settings.enable_property_filter = False


def registered_bad_sql(w: World) -> None:
    info = ConsumerGroupInfo(GROUP)
    info.subscriptions[TOPIC] = {"subString": "a =", "expressionType": "SQL92"}
    w.consumers.groups[GROUP] = info


def nothing(w: World) -> None:
    pass


@pytest.mark.parametrize(("setup", "kw", "status", "says"), [
    (refuse_broker, {}, PullStatus.NO_PERMISSION, "broker[b] pulling message is forbidden"),
    (nothing, {"group": "nope"}, PullStatus.GROUP_NOT_EXIST, "[nope] does not exist"),
    (refuse_group_disabled, {}, PullStatus.NO_PERMISSION, "consumption disabled"),
    (nothing, {"topic": "nope"}, PullStatus.TOPIC_NOT_EXIST, "topic[nope] not exist"),
    (refuse_topic_perm, {}, PullStatus.NO_PERMISSION, "topic[T] pulling message is forbidden"),
    (nothing, {"queue_id": 1}, PullStatus.ILLEGAL_REQUEST, "queueId[1] is illegal"),
    (nothing, {"queue_id": -1}, PullStatus.ILLEGAL_REQUEST, "queueId[-1] is illegal"),
    (nothing, {"max_msg_nums": 0}, PullStatus.ILLEGAL_REQUEST, "maxMsgNums"),
    (nothing, {"expression": None}, PullStatus.SUBSCRIPTION_NOT_EXIST, "group info not exist"),
    (refuse_broadcast, {"expression": None}, PullStatus.NO_PERMISSION, "by broadcast way"),
    (nothing, {"expression": "||"}, PullStatus.SUBSCRIPTION_PARSE_FAILED, ""),
    (no_property_filter, {"expression": "a = 1", "expression_type": "SQL92"},
     PullStatus.FILTER_UNSUPPORTED, "SQL92"),
    (nothing, {"expression": "a = 1", "expression_type": "CLASS"},
     PullStatus.FILTER_UNSUPPORTED, "CLASS"),
    (nothing, {"expression": "a =", "expression_type": "SQL92"},
     PullStatus.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"),
    (registered_bad_sql, {"expression": None}, PullStatus.FILTER_DATA_NOT_EXIST,
     "filter data is not exist"),
])
def test_refusals(world: World, setup: object, kw: dict[str, object], status: PullStatus,
                  says: str) -> None:
    world.put(1)
    assert callable(setup)
    setup(world)
    out = answered(world.pull(0, FakeOwner(), commit_offset=1, **kw))
    assert out.status is status and status not in READS
    assert out.remark is not None and says in out.remark
    assert out.pieces == () and world.stats.gets == []
    assert world.offsets.commits == [] and world.svc.holds.index.total == 0


# ---- long polling: the waiter --------------------------------------------------------


async def test_a_held_pull_is_answered_through_its_waiter_when_a_message_arrives(
        world: World, autojump_clock: trio.testing.MockClock) -> None:
    world.put(2, "TagA")
    owner = FakeOwner()
    assert world.pull(2, owner, suspend_timeout_ms=10_000, expression="TagB") is None
    assert world.svc.holds.index.total == 1 and owner.sent == []
    world.put(1, "TagA")  # another tag: not even re-run
    assert world.svc.holds.retries == 0 and owner.sent == []
    world.put(1, "TagB")
    [out] = owner.outcomes()
    assert (out.status, bodies(out), out.next_begin_offset) == (PullStatus.FOUND, [b"TagB-3"], 4)
    assert world.svc.holds.index.total == 0 and world.stats.gets[-1][2] == 1


async def test_a_held_pull_gets_an_empty_outcome_at_its_deadline(
        world: World, autojump_clock: trio.testing.MockClock) -> None:
    world.settings.long_polling_max_suspend_millis = 5_000
    short, long = FakeOwner(), FakeOwner()
    async with trio.open_nursery() as nursery:
        await nursery.start(world.svc.holds.run)
        start = trio.current_time()
        assert world.pull(0, short, suspend_timeout_ms=2_000) is None
        assert world.pull(0, long, suspend_timeout_ms=60_000) is None  # the broker's cap: 5 s
        await short.wait_answered(1)
        await long.wait_answered(1)
        nursery.cancel_scope.cancel()
    assert [round(t - start, 3) for t, _ in short.sent + long.sent] == [2.0, 5.0]
    assert short.statuses() + long.statuses() == [PullStatus.NO_NEW_MSG] * 2


async def test_a_held_filtered_pull_holds_on_past_what_it_scanned(
        world: World, autojump_clock: trio.testing.MockClock) -> None:
    owner = FakeOwner()
    sql = {"expression": "n = 9", "expression_type": "SQL92", "suspend_timeout_ms": 10_000}
    assert world.pull(0, owner, **sql) is None
    [held] = world.svc.holds.index.by_owner[owner]
    world.put(3, "TagA", n="1")  # re-run three times, nothing matched: still held
    assert owner.sent == [] and held.request.queue_offset == 3
    world.put(1, "TagA", n="9")
    assert bodies(owner.outcomes()[0]) == [b"TagA-3"]


async def test_when_a_pull_is_not_held(world: World,
                                       autojump_clock: trio.testing.MockClock) -> None:
    world.put(1)
    owner = FakeOwner()
    held = {"suspend_timeout_ms": 10_000}
    assert answered(world.pull(1, None, **held)).status is PullStatus.NO_NEW_MSG  # no waiter
    assert answered(world.pull(1, owner)).status is PullStatus.NO_NEW_MSG  # no suspend time
    world.settings.long_polling_enable = False
    assert answered(world.pull(1, owner, **held)).status is PullStatus.NO_NEW_MSG
    world.settings.long_polling_enable = True
    assert world.pull(1, owner, **held) is None and world.pull(1, owner, **held) is None
    # the owner's bound (2): the third is answered at once, as if its time were over
    out = answered(world.pull(1, owner, **held))
    assert (out.status, out.next_begin_offset) == (PullStatus.NO_NEW_MSG, 1)
    gone = FakeOwner()
    gone.closed = True
    assert answered(world.pull(1, gone, **held)).status is PullStatus.NO_NEW_MSG
    world.svc.holds.connection_closed(owner)  # the transport says the owner is gone
    assert world.svc.holds.index.total == 0
    world.put(1)
    assert owner.sent == []  # dropped holds are never answered
