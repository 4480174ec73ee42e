"""gRPC clients in the broker's client tables (broker/grpc/clients.py): the
real ClientService, client tables and remoting notifier, a fake subscription
group table that auto-creates as the broker's does; then the same through
MessagingService's Heartbeat, Telemetry and NotifyClientTermination handlers
driven in process. No sockets; times are numbers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker.client_manage_processor import RemotingNotifier
from broker.client_manager import ClientGroups, RebalanceLockManager
from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.grpc.clients import GrpcClients, heartbeat_body
from broker.grpc.messaging import MessagingService
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from broker.service.clients import ClientService
from broker.service.ops import OpsService
from broker.service.types import SessionChannel
from broker.transaction_service import Asked
from protocol.client_data import MAX_SUBSCRIPTIONS_PER_CONSUMER
from protocol.route import TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig
from tests.broker.grpc.test_messaging import FakeSend, FakeTopics, call

G = "grpc-group"


@dataclass
class Groups:
    auto_create: bool = True
    table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        if group not in self.table and self.auto_create:
            self.table[group] = SubscriptionGroupConfig(group)
        return self.table.get(group)


@dataclass
class RetryTopics:
    table: dict[str, TopicConfig] = field(default_factory=dict)

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def create_topic_in_send_back(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        self.table[topic] = TopicConfig(topic, queue_nums, queue_nums, perm)
        return self.table[topic]


@dataclass
class Filters:
    enable_property_filter: bool = False


@dataclass
class World:
    clients: GrpcClients
    producers: ClientGroups
    consumers: ClientGroups
    groups: Groups
    topics: RetryTopics


@pytest.fixture
def w() -> World:
    producers, consumers = ClientGroups("producer"), ClientGroups("consumer")
    groups, topics = Groups(), RetryTopics()
    service: ClientService[SessionChannel] = ClientService(
        producers=producers, consumers=consumers, groups=groups, topics=topics,
        locks=RebalanceLockManager(), settings=Filters(), notifier=RemotingNotifier())
    return World(GrpcClients(service, max_sessions=3), producers, consumers, groups, topics)


def consumer_settings(group: str = G, *topics: str, expression: str = "A||B",
                      fifo: bool = False) -> pb.Settings:
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER)
    settings.subscription.group.name = group
    settings.subscription.fifo = fifo
    settings.user_agent.language = pb.JAVA
    settings.user_agent.version = "5.0.7"
    for t in topics or ("T",):
        settings.subscription.subscriptions.add(
            topic=pb.Resource(name=t), expression=pb.FilterExpression(type=pb.TAG,
                                                                      expression=expression))
    return settings


def producer_settings(*topics: str) -> pb.Settings:
    settings = pb.Settings(client_type=pb.PRODUCER)
    for t in topics:
        settings.publishing.topics.add(name=t)
    return settings


def test_a_simple_consumer_joins_its_group_with_its_subscriptions(w: World) -> None:
    assert w.clients.settings("c1", "10.0.0.5:777", consumer_settings(), 0.0)[0] == pb.OK
    assert w.clients.heartbeat("c1", "10.0.0.5:777", G, pb.SIMPLE_CONSUMER, 1.0)[0] == pb.OK
    info = w.consumers.groups[G]
    assert info.client_ids() == ["c1"]
    assert info.consume_type == "CONSUME_ACTIVELY" and info.message_model == "CLUSTERING"
    assert info.subscriptions["T"]["tagsSet"] == ["A", "B"]
    assert info.subscriptions["T"]["subString"] == "A||B"
    channel = info.clients["c1"].conn
    assert isinstance(channel, SessionChannel) and channel.remote_addr == "10.0.0.5:777"
    assert channel.attrs["language"] == "JAVA"
    # the group was created (autoCreateSubscriptionGroup) with its retry topic
    assert G in w.groups.table and f"%RETRY%{G}" in w.topics.table


def test_a_producer_is_registered_under_its_topics_and_group(w: World) -> None:
    w.clients.settings("p1", "10.0.0.6:1", producer_settings("T", "U"), 0.0)
    w.clients.heartbeat("p1", "10.0.0.6:1", "PG", pb.PRODUCER, 1.0)
    assert sorted(w.producers.groups) == ["PG", "T", "U"]
    ops = OpsService(stats=None, offsets=None, topics=None,  # type: ignore[arg-type]
                     consumers=w.consumers, producers=w.producers)
    [member] = ops.producers("T") or []
    assert member.client_id == "p1" and isinstance(member.channel, SessionChannel)


def test_a_missing_group_is_refused_without_auto_creation(w: World) -> None:
    w.groups.auto_create = False
    code, remark = w.clients.settings("c1", "h:1", consumer_settings(), 0.0)
    assert code == pb.FORBIDDEN and "does not exist" in remark
    assert G not in w.consumers.groups


def test_heartbeats_keep_a_client_and_silence_expires_it(w: World) -> None:
    w.clients.settings("c1", "h:1", consumer_settings(), 0.0)
    for t in (30.0, 60.0, 90.0):
        w.clients.heartbeat("c1", "h:1", G, pb.SIMPLE_CONSUMER, t)
    assert w.clients.expire(100.0, 120.0) == 0
    assert w.consumers.scan_not_active(100.0, 120.0) == set()
    # the broker's housekeeping: the tables' scan, then the sessions'
    assert w.consumers.scan_not_active(211.0, 120.0) == {G}
    assert w.clients.expire(211.0, 120.0) == 1 and w.clients.sessions == {}


def test_termination_leaves_every_group(w: World) -> None:
    w.clients.settings("c1", "h:1", consumer_settings(), 0.0)
    w.clients.heartbeat("c1", "h:1", G, pb.SIMPLE_CONSUMER, 0.0)
    w.clients.settings("c2", "h:2", consumer_settings(), 0.0)
    channel = w.consumers.groups[G].clients["c1"].conn
    assert w.clients.terminate("c1") and channel.closed
    assert w.consumers.client_ids(G) == ["c2"]
    assert not w.clients.terminate("c1")  # twice: nothing more


def test_bounds_hold_as_for_remoting(w: World) -> None:
    too_many = consumer_settings(G, *[f"T{i}" for i in range(MAX_SUBSCRIPTIONS_PER_CONSUMER + 1)])
    code, remark = w.clients.settings("c1", "h:1", too_many, 0.0)
    assert code == pb.BAD_REQUEST and "at most" in remark
    code, remark = w.clients.settings("c1", "h:1", consumer_settings("bad group!"), 0.0)
    assert code == pb.BAD_REQUEST and "groupName" in remark
    code, _ = w.clients.heartbeat("", "h:1", G, pb.SIMPLE_CONSUMER, 0.0)
    assert code == pb.BAD_REQUEST
    for cid in ("c1", "c2", "c3"):
        w.clients.heartbeat(cid, "h:1", None, pb.PRODUCER, 0.0)
    code, remark = w.clients.heartbeat("c4", "h:1", None, pb.PRODUCER, 0.0)
    assert code == pb.TOO_MANY_REQUESTS and len(w.clients.sessions) == 3
    assert w.clients.heartbeat("c1", "h:1", None, pb.PRODUCER, 1.0)[0] == pb.OK


def test_heartbeat_body_without_settings() -> None:
    """A Heartbeat before any Settings: the group it names, no subscriptions."""
    body = heartbeat_body("c1", G, pb.PUSH_CONSUMER, None)
    [consumer] = body["consumerDataSet"]
    assert (consumer["groupName"], consumer["consumeType"]) == (G, "CONSUME_PASSIVELY")
    assert heartbeat_body("c1", None, pb.SIMPLE_CONSUMER, None)["consumerDataSet"] == []
    assert heartbeat_body("c1", None, pb.CLIENT_TYPE_UNSPECIFIED, None) == {
        "clientID": "c1", "producerDataSet": [], "consumerDataSet": []}


def test_a_session_is_told_nothing_by_the_remoting_notifier() -> None:
    assert RemotingNotifier().consumer_ids_changed(SessionChannel("c", "h:1"), G)


# ---- through the gRPC handlers -----------------------------------------------------------

async def test_handlers_register_and_terminate(w: World) -> None:
    svc = MessagingService(BrokerConfig(broker_name="broker-a"), FakeSend(),  # type: ignore[arg-type]
                           FakeTopics(), endpoint=lambda: ("10.1.2.3", 8081),
                           on_topics_changed=lambda: None, clients=w.clients)
    _, (raw,) = await call(svc, "Telemetry", spb.TelemetryCommand(settings=consumer_settings()))
    assert spb.TelemetryCommand.FromString(raw).status.code == pb.OK
    _, (raw,) = await call(svc, "Heartbeat", spb.HeartbeatRequest(
        group=pb.Resource(name=G), client_type=pb.SIMPLE_CONSUMER))
    assert spb.HeartbeatResponse.FromString(raw).status.code == pb.OK
    info = w.consumers.groups[G]
    assert info.client_ids() == ["cid-1"]  # the call's x-mq-client-id
    assert info.clients["cid-1"].conn.remote_addr == "10.9.9.9:4000"
    _, (raw,) = await call(svc, "NotifyClientTermination", spb.NotifyClientTerminationRequest(
        group=pb.Resource(name=G)))
    assert spb.NotifyClientTerminationResponse.FromString(raw).status.code == pb.OK
    assert G not in w.consumers.groups and w.clients.sessions == {}


# ---- in the broker: its housekeeping and transaction checks -----------------------------

@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerController]:
    c = BrokerController(BrokerConfig(store_path_root_dir=str(tmp_path), listen_port=0,
                                      maped_file_size_commit_log=4096,
                                      maped_file_size_consume_queue=200, max_hash_slot_num=64,
                                      max_index_num=256))
    c._load()
    yield c
    c._persist_and_close()


def test_the_brokers_housekeeping_expires_grpc_clients(broker: BrokerController) -> None:
    clients = broker.grpc_clients = GrpcClients(broker.client_service)
    assert clients.settings("c1", "h:1", consumer_settings(), 0.0)[0] == pb.OK
    assert clients.settings("p1", "h:2", producer_settings("T"), 0.0)[0] == pb.OK
    assert broker.consumer_manager.client_ids(G) == ["c1"]
    # a gRPC producer with no Telemetry stream open is not asked for a transaction's state
    # (tests/broker/grpc/test_transactions.py: one with a stream is)
    assert broker.ask_producer("T", lambda: pytest.fail("nothing to build")) \
        is Asked.NO_PRODUCER
    expired_after = broker.config.channel_expired_timeout / 1000
    broker.housekeeping(expired_after)  # not silent long enough yet
    assert len(clients.sessions) == 2 and broker.consumer_manager.client_ids(G) == ["c1"]
    broker.housekeeping(expired_after + 1)
    assert clients.sessions == {} and broker.consumer_manager.client_ids(G) == []
    assert broker.producer_manager.groups == {}
