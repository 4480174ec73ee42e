"""What a RocketMQ 5 push consumer is told: its assignments (QueryAssignment)
and its group's retry policy (Telemetry ``Settings``). Pure: configs in,
protobuf out.

Assignments (RocketMQ 5 proxy's RouteActivity.queryAssignment): for each broker
of the topic's route that serves gRPC and whose queues of the topic are
readable (``perm`` readable, ``readQueueNums`` > 0),

- a normal group gets one assignment with queue id -1: the client receives
  from that broker and the broker pops from any of its queues;
- a FIFO group (``consumeMessageOrderly``) gets one assignment per readable
  queue (ids 0 .. readQueueNums - 1), so that each queue is consumed in order.

Each names the broker's master when it serves gRPC (else its lowest-id member
that does) and the queues' permission.

Retry policy (GrpcClientSettingsManager.mergeSubscriptionData): ``max_attempts``
is the group's ``retryMaxTimes`` + 1 (the first delivery counts); a normal
group backs off by the broker's ``messageDelayLevel`` (customized backoff: the
n-th failed attempt waits the n-th level), a FIFO group exponentially as
RocketMQ's ExponentialRetryPolicy defaults (5 s, doubling, at most 2 h).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from broker.grpc.convert import address_scheme, permission
from broker.grpc.pb import definition_pb2 as pb
from protocol.route import MASTER_ID, PERM_WRITE, TopicConfig, TopicRouteData, is_readable
from protocol.subscription_group import SubscriptionGroupConfig

# RocketMQ's ExponentialRetryPolicy defaults (a FIFO group's back-off)
FIFO_BACKOFF_INITIAL_MS = 5_000
FIFO_BACKOFF_MAX_MS = 2 * 3600 * 1000
FIFO_BACKOFF_MULTIPLIER = 2.0


@dataclass(frozen=True, slots=True)
class BrokerQueues:
    """One broker's share of a topic as a gRPC client reaches it."""

    broker_name: str
    broker_id: int
    host: str
    port: int
    config: TopicConfig  # the topic's queue counts and permission on that broker

    def broker(self) -> pb.Broker:
        endpoints = pb.Endpoints(scheme=address_scheme(self.host),
                                 addresses=[pb.Address(host=self.host, port=self.port)])
        return pb.Broker(name=self.broker_name, id=self.broker_id, endpoints=endpoints)


def route_brokers(route: TopicRouteData, topic: str, own_broker: str) -> list[BrokerQueues]:
    """The brokers in ``route`` but ``own_broker`` that serve gRPC: each broker
    name's master when it serves gRPC, else its lowest-id member that does (a
    slave's queues are not writable)."""
    members = {bd.broker_name: bd for bd in route.broker_datas}
    out: list[BrokerQueues] = []
    for qd in route.queue_datas:
        bd = members.get(qd.broker_name)
        if qd.broker_name == own_broker or bd is None or not bd.grpc_ports:
            continue
        ids = sorted(bid for bid in bd.grpc_ports if bid in bd.broker_addrs)
        if not ids:
            continue
        bid = MASTER_ID if MASTER_ID in ids else ids[0]
        host = bd.broker_addrs[bid].rsplit(":", 1)[0].strip("[]")
        perm = qd.perm if bid == MASTER_ID else qd.perm & ~PERM_WRITE
        cfg = TopicConfig(topic, qd.read_queue_nums, qd.write_queue_nums, perm)
        out.append(BrokerQueues(qd.broker_name, bid, host, bd.grpc_ports[bid], cfg))
    return out


def assignments(topic: pb.Resource, brokers: Sequence[BrokerQueues], fifo: bool
                ) -> list[pb.Assignment]:
    """The assignments of a push consumer of ``topic`` (see the module's doc);
    empty when no broker has a readable queue of it."""
    out: list[pb.Assignment] = []
    seen: set[str] = set()
    for b in brokers:
        cfg = b.config
        if b.broker_name in seen or not is_readable(cfg.perm) or cfg.read_queue_nums <= 0:
            continue
        seen.add(b.broker_name)
        broker = b.broker()
        perm = permission(cfg.perm)
        ids = range(cfg.read_queue_nums) if fifo else (-1,)
        out.extend(pb.Assignment(message_queue=pb.MessageQueue(
            topic=topic, id=qid, permission=perm, broker=broker)) for qid in ids)
    return out


def retry_policy(group: SubscriptionGroupConfig, delay_levels: Mapping[int, int]
                 ) -> pb.RetryPolicy:
    """The back-off a consumer of ``group`` is told (see the module's doc);
    ``delay_levels``: level (1-based) -> ms, the broker's messageDelayLevel."""
    policy = pb.RetryPolicy(max_attempts=group.retry_max_times + 1)
    if group.consume_message_orderly:
        policy.exponential_backoff.initial.FromMilliseconds(FIFO_BACKOFF_INITIAL_MS)
        policy.exponential_backoff.max.FromMilliseconds(FIFO_BACKOFF_MAX_MS)
        policy.exponential_backoff.multiplier = FIFO_BACKOFF_MULTIPLIER
        return policy
    for level in sorted(delay_levels):
        policy.customized_backoff.next.add().FromMilliseconds(delay_levels[level])
    return policy


__all__ = ["BrokerQueues", "FIFO_BACKOFF_INITIAL_MS", "FIFO_BACKOFF_MAX_MS",
           "FIFO_BACKOFF_MULTIPLIER", "assignments", "retry_policy", "route_brokers"]
