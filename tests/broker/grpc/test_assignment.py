"""broker/grpc/assignment.py: a push consumer's assignments and its group's retry policy,
from configs alone."""

from __future__ import annotations

from broker.grpc.assignment import (
    FIFO_BACKOFF_INITIAL_MS,
    FIFO_BACKOFF_MAX_MS,
    BrokerQueues,
    assignments,
    retry_policy,
    route_brokers,
)
from broker.grpc.pb import definition_pb2 as pb
from protocol.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from protocol.route import (
    PERM_READ,
    PERM_RW,
    PERM_WRITE,
    BrokerData,
    QueueData,
    TopicConfig,
    TopicRouteData,
)
from protocol.subscription_group import SubscriptionGroupConfig

TOPIC = pb.Resource(name="T", resource_namespace="ns")


def queues(name: str, read: int, write: int, perm: int, port: int = 8081) -> BrokerQueues:
    return BrokerQueues(name, 0, "10.0.0.1", port, TopicConfig("T", read, write, perm))


def shape(found: list[pb.Assignment]) -> list[tuple[str, int, int]]:
    return [(a.message_queue.broker.name, a.message_queue.id, a.message_queue.permission)
            for a in found]


def test_a_normal_group_gets_one_assignment_per_readable_broker_with_queue_minus_one() -> None:
    brokers = [queues("a", 4, 4, PERM_RW), queues("b", 2, 2, PERM_READ, 9000),
               queues("c", 4, 4, PERM_WRITE), queues("d", 0, 4, PERM_RW)]
    found = assignments(TOPIC, brokers, fifo=False)
    assert shape(found) == [("a", -1, pb.READ_WRITE), ("b", -1, pb.READ)]
    mq = found[1].message_queue
    assert mq.topic == TOPIC
    assert [(x.host, x.port) for x in mq.broker.endpoints.addresses] == [("10.0.0.1", 9000)]
    assert mq.broker.endpoints.scheme == pb.IPv4


def test_a_fifo_group_gets_every_readable_queue() -> None:
    brokers = [queues("a", 3, 4, PERM_RW), queues("c", 4, 4, PERM_WRITE),
               queues("a", 3, 4, PERM_RW)]  # a broker named twice counts once
    found = assignments(TOPIC, brokers, fifo=True)
    assert shape(found) == [("a", 0, pb.READ_WRITE), ("a", 1, pb.READ_WRITE),
                            ("a", 2, pb.READ_WRITE)]


def test_nothing_readable_means_no_assignment() -> None:
    assert assignments(TOPIC, [queues("c", 4, 4, PERM_WRITE)], fifo=False) == []
    assert assignments(TOPIC, [], fifo=True) == []


def test_route_brokers_take_each_brokers_grpc_master_else_a_read_only_member() -> None:
    route = TopicRouteData(
        queue_datas=[QueueData("own", 4, 4, PERM_RW), QueueData("m", 4, 4, PERM_RW),
                     QueueData("s", 2, 2, PERM_RW), QueueData("none", 4, 4, PERM_RW)],
        broker_datas=[
            BrokerData("c", "own", {0: "10.0.0.9:10911"}, grpc_ports={0: 8081}),
            BrokerData("c", "m", {0: "10.0.0.2:10911", 1: "10.0.0.3:10911"},
                       grpc_ports={0: 8082, 1: 8083}),
            BrokerData("c", "s", {0: "10.0.0.4:10911", 2: "10.0.0.5:10911"},
                       grpc_ports={2: 8085}),
            BrokerData("c", "none", {0: "10.0.0.6:10911"})])
    got = route_brokers(route, "T", "own")
    assert [(b.broker_name, b.broker_id, b.host, b.port, b.config.perm) for b in got] == [
        ("m", 0, "10.0.0.2", 8082, PERM_RW), ("s", 2, "10.0.0.5", 8085, PERM_READ)]


def test_retry_policy_of_a_normal_group_is_the_delay_levels() -> None:
    levels = parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)
    policy = retry_policy(SubscriptionGroupConfig("g", retry_max_times=3), levels)
    assert policy.max_attempts == 4  # the first delivery counts
    assert policy.WhichOneof("strategy") == "customized_backoff"
    nexts = [d.ToMilliseconds() for d in policy.customized_backoff.next]
    assert nexts == [levels[i] for i in sorted(levels)]
    assert nexts[:4] == [1000, 5000, 10000, 30000] and nexts[-1] == 7_200_000
    short = retry_policy(SubscriptionGroupConfig("g"), {1: 500, 2: 1500})
    assert [d.ToMilliseconds() for d in short.customized_backoff.next] == [500, 1500]
    assert short.max_attempts == 17


def test_retry_policy_of_a_fifo_group_is_exponential() -> None:
    policy = retry_policy(SubscriptionGroupConfig("g", retry_max_times=0,
                                                  consume_message_orderly=True), {1: 1000})
    assert policy.max_attempts == 1
    assert policy.WhichOneof("strategy") == "exponential_backoff"
    exp = policy.exponential_backoff
    assert exp.initial.ToMilliseconds() == FIFO_BACKOFF_INITIAL_MS == 5000
    assert exp.max.ToMilliseconds() == FIFO_BACKOFF_MAX_MS == 7_200_000
    assert exp.multiplier == 2.0
