"""ClientService in process: the real client tables and queue locks
(broker/client_manager.py, pure), fakes for groups, topics, settings and the
transport's notifier; channels are plain objects. No controller, no sockets.
Then the remoting adapter's own parts: its code table, its header decoding,
its notifier and what a heart-beat's connection remembers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from acl.plain import Need, Perm, group_resource
from broker.acl.stored import ResourceCheck
from broker.client_manage_processor import (
    CLIENT_STATUS_TO_CODE,
    ClientManageProcessor,
    RemotingNotifier,
    decode_unregister,
)
from broker.client_manager import ClientGroups, RebalanceLockManager
from broker.service.clients import (
    ClientService,
    ClientStatus,
    QueueLockRequest,
    Unregister,
    lock_needs,
)
from protocol.client_data import ConsumerData, HeartbeatData, SubscriptionData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.route import PERM_RW, TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig
from tests.broker.fakes import FakeConn

G, G2 = "g", "g2"


class Channel:
    """A client's channel as a transport hands it in: only ``closed`` is asked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def __repr__(self) -> str:
        return f"Channel({self.name})"


@dataclass
class Notifier:
    """Records each notice; channels in ``full`` take none (False)."""

    told: list[tuple[str, str]] = field(default_factory=list)
    full: set[str] = field(default_factory=set)
    fail_groups: set[str] = field(default_factory=set)

    def consumer_ids_changed(self, channel: Channel, group: str) -> bool:
        if group in self.fail_groups:
            raise RuntimeError(f"cannot tell {group}")
        if channel.name in self.full:
            return False
        self.told.append((channel.name, group))
        return True


@dataclass
class Groups:
    table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)


@dataclass
class Topics:
    table: dict[str, TopicConfig] = field(default_factory=dict)
    created: list[tuple[str, int, int]] = field(default_factory=list)

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def create_topic_in_send_back(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        self.created.append((topic, queue_nums, perm))
        cfg = TopicConfig(topic, queue_nums, queue_nums, perm)
        self.table[topic] = cfg
        return cfg


@dataclass
class Settings:
    enable_property_filter: bool = True


@dataclass
class Log:
    warnings: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def warning(self, event: str, **kw: Any) -> None:
        self.warnings.append((event, kw))


@dataclass
class World:
    svc: ClientService[Channel]
    consumers: ClientGroups
    notifier: Notifier
    groups: Groups
    topics: Topics
    settings: Settings
    log: Log
    registers: list[int]


@pytest.fixture
def w() -> World:
    notifier, groups, topics, settings, log = Notifier(), Groups(), Topics(), Settings(), Log()
    groups.table[G] = SubscriptionGroupConfig(G)
    groups.table[G2] = SubscriptionGroupConfig(G2)
    registers: list[int] = []
    consumers = ClientGroups("consumer")
    svc: ClientService[Channel] = ClientService(
        producers=ClientGroups("producer"), consumers=consumers,
        groups=groups, topics=topics, locks=RebalanceLockManager(), settings=settings,
        notifier=notifier, on_topics_changed=lambda: registers.append(1), log=log)
    return World(svc, consumers, notifier, groups, topics, settings, log, registers)


def hb(cid: str, *consumers: ConsumerData, producers: Sequence[str] = ()) -> HeartbeatData:
    return HeartbeatData(cid, list(producers), list(consumers))


def test_new_members_make_the_group_told_and_a_renewal_does_not(w: World) -> None:
    a, b = Channel("a"), Channel("b")
    assert w.svc.heart_beat(a, hb("A", ConsumerData(G)), 0.0).status is ClientStatus.OK
    assert w.notifier.told == [("a", G)]
    w.notifier.told.clear()
    assert w.svc.heart_beat(b, hb("B", ConsumerData(G)), 1.0).status is ClientStatus.OK
    assert sorted(w.notifier.told) == [("a", G), ("b", G)]
    w.notifier.told.clear()
    w.svc.heart_beat(a, hb("A", ConsumerData(G)), 2.0)  # known member: no change
    assert w.notifier.told == []
    assert w.svc.consumer_ids(G).client_ids == ["A", "B"]


def test_refused_groups_are_named_and_the_rest_registered(w: World) -> None:
    w.groups.table[G2] = SubscriptionGroupConfig(G2, consume_broadcast_enable=False)
    out = w.svc.heart_beat(Channel("a"), hb(
        "A", ConsumerData("missing"), ConsumerData(G2, message_model="BROADCASTING"),
        ConsumerData(G), producers=["pg"]), 0.0)
    assert out.status is ClientStatus.REFUSED
    assert out.remark == ("subscription group missing does not exist; "
                          "subscription group g2 does not allow broadcasting")
    assert w.svc.producers.client_ids("pg") == ["A"]
    assert w.svc.consumer_ids(G).client_ids == ["A"]
    assert w.svc.consumer_ids(G2).status is ClientStatus.NO_CONSUMER
    assert w.svc.consumer_ids("missing").status is ClientStatus.NO_CONSUMER


def test_a_clustering_group_gets_its_retry_topic_on_its_first_heart_beat(w: World) -> None:
    w.groups.table[G] = SubscriptionGroupConfig(G, retry_queue_nums=0)
    w.groups.table[G2] = SubscriptionGroupConfig(G2, retry_queue_nums=3)
    w.svc.heart_beat(Channel("a"), hb("A", ConsumerData(G), ConsumerData(G2)), 0.0)
    assert w.topics.created == [("%RETRY%g", 1, PERM_RW), ("%RETRY%g2", 3, PERM_RW)]
    assert len(w.registers) == 2  # the name servers hear of each new topic
    w.svc.heart_beat(Channel("b"), hb("B", ConsumerData(G)), 1.0)
    assert len(w.topics.created) == 2 and len(w.registers) == 2


def test_a_broadcasting_group_gets_no_retry_topic(w: World) -> None:
    out = w.svc.heart_beat(Channel("a"), hb("A", ConsumerData(G, message_model="BROADCASTING")),
                           0.0)
    assert out.status is ClientStatus.OK
    assert w.topics.created == [] and w.registers == []


def test_the_heart_beats_model_and_subscriptions_are_kept(w: World) -> None:
    data = ConsumerData(G, consume_type="CONSUME_ACTIVELY",
                        subscriptions=[SubscriptionData("T", "a || b", ["a", "b"])])
    w.svc.heart_beat(Channel("a"), hb("A", data), 0.0)
    info = w.consumers.groups[G]
    assert info.consume_type == "CONSUME_ACTIVELY"
    assert info.subscriptions["T"]["subString"] == "a || b"


def test_unregister_tells_the_remaining_members(w: World) -> None:
    a, b = Channel("a"), Channel("b")
    w.svc.heart_beat(a, hb("A", ConsumerData(G), producers=["pg"]), 0.0)
    w.svc.heart_beat(b, hb("B", ConsumerData(G)), 0.0)
    w.notifier.told.clear()
    assert w.svc.unregister(Unregister("A", "pg", G)).status is ClientStatus.OK
    assert w.notifier.told == [("b", G)]
    assert w.svc.producers.client_ids("pg") == []
    w.notifier.told.clear()
    w.svc.unregister(Unregister("nobody", None, G))  # not a member: nothing changes
    w.svc.unregister(Unregister("B", None, None))
    assert w.notifier.told == []
    assert w.svc.consumer_ids(G).client_ids == ["B"]


def test_a_closed_channel_leaves_every_group_and_its_groups_are_told(w: World) -> None:
    a, b = Channel("a"), Channel("b")
    w.svc.heart_beat(a, hb("A", ConsumerData(G), ConsumerData(G2), producers=["pg"]), 0.0)
    w.svc.heart_beat(b, hb("B", ConsumerData(G)), 0.0)
    w.notifier.told.clear()
    a.closed = True
    w.svc.channel_closed(a)
    assert w.notifier.told == [("b", G)]  # g2 has no member left to tell
    assert w.svc.producers.client_ids("pg") == []
    assert w.svc.consumer_ids(G2).status is ClientStatus.NO_CONSUMER


def test_notices_skip_closed_channels_and_count_the_ones_not_taken(w: World) -> None:
    a, b, c = Channel("a"), Channel("b"), Channel("c")
    for ch in (a, b, c):
        w.svc.heart_beat(ch, hb(ch.name.upper(), ConsumerData(G)), 0.0)
    w.notifier.told.clear()
    b.closed = True
    w.notifier.full = {"c"}
    w.svc.notify_consumer_ids_changed(G)
    assert w.notifier.told == [("a", G)]
    assert w.svc.notifications_dropped == 1


def test_silent_clients_expire_and_a_failing_notice_spares_the_other_groups(w: World) -> None:
    old, fresh = Channel("old"), Channel("fresh")
    w.svc.heart_beat(old, hb("OLD", ConsumerData(G), ConsumerData(G2), producers=["pg"]), 0.0)
    w.svc.heart_beat(fresh, hb("FRESH", ConsumerData(G), ConsumerData(G2)), 100.0)
    w.notifier.told.clear()
    assert w.svc.expire(120.0, 120.0) == set()  # exactly 120 s silent: kept
    w.notifier.fail_groups = {G2}
    assert w.svc.expire(120.5, 120.0) == {G, G2}
    assert w.notifier.told == [("fresh", G)]
    assert [(e, kw["group"]) for e, kw in w.log.warnings] == [
        ("notifying a group's consumers failed", "'g2'")]
    assert "cannot tell g2" in w.log.warnings[0][1]["error"]
    assert w.svc.producers.client_ids("pg") == []
    assert w.svc.consumer_ids(G).client_ids == ["FRESH"]


@pytest.mark.parametrize(("etype", "expr", "enabled", "status"), [
    ("TAG", "a || b", False, ClientStatus.OK),
    ("SQL92", "a > 1 AND b = 'x'", True, ClientStatus.OK),
    ("SQL92", "a > 1", False, ClientStatus.FILTER_UNSUPPORTED),
    ("SQL92", "a >", True, ClientStatus.FILTER_PARSE_FAILED),
    ("CLASS", "x", True, ClientStatus.FILTER_UNSUPPORTED),
])
def test_check_filter(w: World, etype: str, expr: str, enabled: bool,
                      status: ClientStatus) -> None:
    w.settings.enable_property_filter = enabled
    out = w.svc.check_filter(etype, expr)
    assert out.status is status
    assert (out.remark is None) == (status is ClientStatus.OK)


Q1, Q2, Q3 = ("T", "b", 0), ("T", "b", 1), ("U", "b", 0)


def test_locks_go_to_one_client_until_they_expire(w: World) -> None:
    svc = w.svc
    out = svc.lock_batch(QueueLockRequest(G, "A", [Q1, Q2]), 0.0)
    assert out.status is ClientStatus.OK and out.locked == [Q1, Q2]
    assert svc.lock_batch(QueueLockRequest(G, "B", [Q1, Q2, Q3]), 1.0).locked == [Q3]
    assert svc.lock_batch(QueueLockRequest(G2, "B", [Q1]), 1.0).locked == [Q1]  # other group
    svc.unlock_batch(QueueLockRequest(G, "B", [Q1]))  # not B's: left alone
    assert svc.lock_batch(QueueLockRequest(G, "B", [Q1]), 2.0).locked == []
    svc.unlock_batch(QueueLockRequest(G, "A", [Q1]))
    assert svc.lock_batch(QueueLockRequest(G, "B", [Q1]), 3.0).locked == [Q1]
    # A's lock on Q2, not renewed for more than 60 s, is free
    assert svc.lock_batch(QueueLockRequest(G, "B", [Q2]), 60.5).locked == [Q2]


def test_locks_ask_the_transport_for_sub_on_the_group_and_each_topic(w: World) -> None:
    asked: list[list[Need]] = []

    def refuse(needs: Sequence[Need]) -> str | None:
        asked.append(list(needs))
        return "No permission: SUB on topic U"

    req = QueueLockRequest(G, "A", [Q1, Q2, Q3])
    assert lock_needs(req) == [Need(group_resource(G), Perm.SUB), Need("T", Perm.SUB),
                               Need("U", Perm.SUB)]
    out = w.svc.lock_batch(req, 0.0, refuse)
    assert (out.status, out.remark, out.locked) == (
        ClientStatus.NO_PERMISSION, "No permission: SUB on topic U", [])
    assert asked == [lock_needs(req)]
    assert w.svc.lock_batch(QueueLockRequest(G, "B", [Q1]), 0.0).locked == [Q1]  # none taken
    out = w.svc.unlock_batch(QueueLockRequest(G, "B", [Q1]), refuse)
    assert out.status is ClientStatus.NO_PERMISSION
    assert w.svc.lock_batch(QueueLockRequest(G, "A", [Q1]), 1.0).locked == []  # still B's
    out = w.svc.lock_batch(QueueLockRequest(G, "A", [Q3]), 1.0, lambda needs: None)
    assert out.status is ClientStatus.OK and out.locked == [Q3]


# ---- the remoting adapter ----------------------------------------------------------

def test_every_status_has_a_remoting_code() -> None:
    assert set(CLIENT_STATUS_TO_CODE) == set(ClientStatus)
    assert CLIENT_STATUS_TO_CODE[ClientStatus.REFUSED] == ResponseCode.NO_PERMISSION
    assert CLIENT_STATUS_TO_CODE[ClientStatus.NO_CONSUMER] == ResponseCode.SYSTEM_ERROR
    assert CLIENT_STATUS_TO_CODE[ClientStatus.FILTER_PARSE_FAILED] \
        == ResponseCode.SUBSCRIPTION_PARSE_FAILED


def test_unregister_header() -> None:
    assert decode_unregister({"clientID": "c", "producerGroup": "", "consumerGroup": "g"}) \
        == Unregister("c", None, "g")
    assert decode_unregister({"clientID": "c"}) == Unregister("c", None, None)
    for bad in ({}, {"clientID": "c" * 256}, {"clientID": 5},
                {"clientID": "c", "consumerGroup": "bad group"},
                {"clientID": "c", "producerGroup": 7}):
        with pytest.raises(RemoteProtocolError):
            decode_unregister(bad)


def test_remoting_notifier_offers_a_oneway_notice() -> None:
    class Full(FakeConn):
        def offer(self, cmd: RemotingCommand) -> bool:
            return False

    conn = FakeConn()
    assert RemotingNotifier().consumer_ids_changed(conn, G) is True  # type: ignore[arg-type]
    (notice,) = conn.sent
    assert notice.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and notice.is_oneway
    assert notice.ext_fields == {"consumerGroup": G}
    assert RemotingNotifier().consumer_ids_changed(Full(), G) is False  # type: ignore[arg-type]


async def test_a_heart_beats_connection_remembers_language_and_version(w: World) -> None:
    conn = FakeConn()
    conn.attrs = {}  # type: ignore[attr-defined]
    proc = ClientManageProcessor(w.svc, ResourceCheck)  # type: ignore[arg-type]
    cmd = RemotingCommand.request(RequestCode.HEART_BEAT, {}, None)
    cmd.body = cmd.encode_body(hb("A", ConsumerData("missing")).to_dict())
    cmd.language, cmd.version = "JAVA", 401
    resp = proc.heart_beat(conn, cmd)  # type: ignore[arg-type]
    assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION,
                                        "subscription group missing does not exist")
    assert conn.attrs == {"language": "JAVA", "version": 401}  # type: ignore[attr-defined]
