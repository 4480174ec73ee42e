"""Optional Prometheus metrics of the client SDK, in a registry the user owns.

    from prometheus_client import CollectorRegistry
    from client.metrics import ClientMetrics

    registry = CollectorRegistry()            # or prometheus_client.REGISTRY
    metrics = ClientMetrics(registry)
    async with Producer("g", ns, metrics=metrics) as producer: ...
    consumer = PushConsumer("cg", ns, metrics=metrics)

One ``ClientMetrics`` may serve any number of producers and consumers (labels tell
them apart); build it once per registry (prometheus_client refuses a second
collector of the same name). Clients built without ``metrics=`` make no call at all.

Series (``namespace`` prefix, ``rocketmq_client`` by default):
    <ns>_sends_total{topic,status}            sends finished: SendStatus name (SEND_OK,
                                              FLUSH_DISK_TIMEOUT...), FAILED when the send
                                              raised, ONEWAY for a oneway send handed over
    <ns>_send_latency_seconds{topic}          a send's time, retries included (not oneway)
    <ns>_consumed_messages_total{group,topic,status}
                                              messages given to a listener, by its answer
                                              (CONSUME_SUCCESS, RECONSUME_LATER, SUCCESS,
                                              SUSPEND_CURRENT_QUEUE_A_MOMENT, EXCEPTION,
                                              INVALID for another value); POLLED for the
                                              messages a LitePullConsumer's poll returned
    <ns>_consume_latency_seconds{group,topic} a listener call's time
    <ns>_consume_failures_total{group,topic,reason}
                                              messages whose listener call failed: reason
                                              RECONSUME_LATER, SUSPEND_CURRENT_QUEUE_A_MOMENT,
                                              EXCEPTION or INVALID
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from protocol.message import MessageExt

DEFAULT_NAMESPACE = "rocketmq_client"
# Seconds; a send is a round trip (ms), a listener call may be long.
SEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CONSUME_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)
SUCCESS_STATUSES = frozenset({"CONSUME_SUCCESS", "SUCCESS", "POLLED"})
FAILED = "FAILED"
ONEWAY = "ONEWAY"
EXCEPTION = "EXCEPTION"
INVALID = "INVALID"
POLLED = "POLLED"


class ClientMetrics:
    """Counters and histograms of sends and consumption, registered in ``registry``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        send_buckets: Sequence[float] = SEND_BUCKETS,
        consume_buckets: Sequence[float] = CONSUME_BUCKETS,
    ) -> None:
        from prometheus_client import Counter, Histogram

        self.registry = registry
        self.sends = Counter(f"{namespace}_sends", "Sends finished, by topic and status.",
                             ["topic", "status"], registry=registry)
        self.send_latency = Histogram(
            f"{namespace}_send_latency_seconds", "Time of a send, retries included.",
            ["topic"], registry=registry, buckets=tuple(send_buckets))
        self.consumed = Counter(
            f"{namespace}_consumed_messages", "Messages given to a listener, by its answer.",
            ["group", "topic", "status"], registry=registry)
        self.consume_latency = Histogram(
            f"{namespace}_consume_latency_seconds", "Time of a message listener call.",
            ["group", "topic"], registry=registry, buckets=tuple(consume_buckets))
        self.consume_failures = Counter(
            f"{namespace}_consume_failures", "Messages whose listener call failed, by reason.",
            ["group", "topic", "reason"], registry=registry)

    # ---- called by the clients ---------------------------------------------------------

    def send_done(self, topic: str, status: str, seconds: float | None) -> None:
        """A send finished with ``status`` (a SendStatus name, FAILED or ONEWAY)."""
        self.sends.labels(topic, status).inc()
        if seconds is not None:
            self.send_latency.labels(topic).observe(max(seconds, 0.0))

    def consume_done(self, group: str, msgs: Sequence[MessageExt], status: str,
                     seconds: float | None) -> None:
        """A listener call on ``msgs`` answered ``status`` after ``seconds``."""
        by_topic: dict[str, int] = {}
        for m in msgs:
            by_topic[m.topic] = by_topic.get(m.topic, 0) + 1
        failed = status not in SUCCESS_STATUSES
        for topic, count in by_topic.items():
            self.consumed.labels(group, topic, status).inc(count)
            if failed:
                self.consume_failures.labels(group, topic, status).inc(count)
            if seconds is not None:
                self.consume_latency.labels(group, topic).observe(max(seconds, 0.0))


def status_name(result: Any) -> str:
    """The label of a listener's answer: an enum member's name, else INVALID."""
    name = getattr(result, "name", None)
    return name if isinstance(name, str) else INVALID
