"""Pure conversions of a TopicRouteData into the queues a client uses.

As RocketMQ's MQClientInstance.topicRouteData2TopicPublishInfo /
topicRouteData2TopicSubscribeInfo: queue data sorted by broker name; a
writable queue data whose broker has a master gives ``writeQueueNums``
publish queues, a readable one gives ``readQueueNums`` subscribe queues.
"""

from __future__ import annotations

from protocol.message import MessageQueue
from protocol.route import (
    DEFAULT_MAX_QUEUE_NUMS,
    MASTER_ID,
    BrokerData,
    QueueData,
    TopicRouteData,
    is_readable,
    is_writeable,
    queue_counts_problem,
)


def usable(qd: QueueData, max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS) -> bool:
    """Whether a route's queue data is within bounds; a client ignores any other
    (a name server could hand out 2^31 queues that no broker has)."""
    return queue_counts_problem("", qd.read_queue_nums, qd.write_queue_nums, qd.perm,
                                max_queue_nums) is None


def publish_queues(topic: str, route: TopicRouteData,
                   max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS) -> list[MessageQueue]:
    """Writable queues of ``topic``, brokers in name order, queue ids ascending.

    Queue data beyond ``max_queue_nums`` queues is ignored."""
    masters = {
        b.broker_name for b in route.broker_datas if b.broker_addrs.get(MASTER_ID) is not None
    }
    out: list[MessageQueue] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if not is_writeable(qd.perm) or qd.broker_name not in masters:
            continue
        if not usable(qd, max_queue_nums):
            continue
        out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return out


def subscribe_queues(topic: str, route: TopicRouteData,
                     max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS) -> list[MessageQueue]:
    """Readable queues of ``topic``, sorted; queue data beyond ``max_queue_nums`` is ignored."""
    out: list[MessageQueue] = []
    for qd in route.queue_datas:
        if is_readable(qd.perm) and usable(qd, max_queue_nums):
            out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
    out.sort()
    return out


def default_topic_route(default_route: TopicRouteData, queue_nums: int) -> TopicRouteData:
    """A route for a not-yet-created topic built from ``TBW102``'s route.

    Each broker gets min(``queue_nums``, TBW102's read queue count) queues,
    as RocketMQ's producer does before the broker auto-creates the topic.
    """
    queue_datas = []
    for qd in default_route.queue_datas:
        if not usable(qd):
            continue
        n = min(queue_nums, qd.read_queue_nums)
        queue_datas.append(QueueData(qd.broker_name, n, n, qd.perm, qd.topic_sys_flag))
    broker_datas = [
        BrokerData(b.cluster, b.broker_name, dict(b.broker_addrs))
        for b in default_route.broker_datas
    ]
    return TopicRouteData(
        queue_datas=queue_datas,
        broker_datas=broker_datas,
        order_topic_conf=default_route.order_topic_conf,
        filter_server_table=dict(default_route.filter_server_table),
    )


class FailureRefreshes:
    """When a failed request to a topic's broker may fetch the topic's route at
    once, instead of waiting for the periodic refresh (``pollNameServerInterval``,
    30 s): a broker that died (a master after a failover) leaves the route at the
    name servers within moments, and its successor enters it once elected.

    At most one such refresh per topic every ``interval`` seconds; time is passed
    in. At most ``max_topics`` topics are remembered: past that, the ones whose
    interval passed are forgotten, and if every one is recent the refresh is
    refused (the periodic refresh still runs)."""

    def __init__(self, interval: float = 1.0, max_topics: int = 4096) -> None:
        if interval <= 0 or max_topics <= 0:
            raise ValueError("interval and max_topics must be positive")
        self.interval = interval
        self.max_topics = max_topics
        self._last: dict[str, float] = {}

    def due(self, topic: str, now: float) -> bool:
        """Whether a refresh of ``topic`` may run now; if so, it counts as run."""
        last = self._last.get(topic)
        if last is not None and now - last < self.interval:
            return False
        if last is None and len(self._last) >= self.max_topics:
            self._last = {t: at for t, at in self._last.items() if now - at < self.interval}
            if len(self._last) >= self.max_topics:
                return False
        self._last[topic] = now
        return True
