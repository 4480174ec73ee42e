"""Scrape /metrics of a live broker and name server while producing and consuming."""

from __future__ import annotations

import urllib.error
import urllib.request

import trio
from prometheus_client.parser import text_string_to_metric_families

from client import Message, Producer, PullConsumer
from client.admin import MQAdmin
from protocol.message import MessageQueue
from tests.integration.cluster import Cluster, free_port
from tests.waits import routed, wait_until

TOPIC = "MetricsTopic"
GROUP = "metrics-group"
N = 120
QUEUES = 4

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


async def scrape(port: int) -> Samples:
    """Every sample of ``/metrics``, parsed with prometheus_client's own parser."""
    status, text = await trio.to_thread.run_sync(_get, f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items()
               if n == name and set(labels.items()) <= set(ls))


async def test_scrape_counts_exactly_and_lag_matches_consumer_progress(cluster: Cluster) -> None:
    ns_metrics, broker_metrics = free_port(1), free_port(1)
    ns = cluster.namesrv(metricsPort=ns_metrics)
    broker = cluster.broker("broker-a", ns.addr, metricsPort=broker_metrics)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=QUEUES,
                                 write_queue_nums=QUEUES)
        await wait_until(routed(admin, TOPIC), 10, "routed")
        before = await scrape(broker_metrics)
        assert value(before, "rocketmq_producer_messages_total", topic=TOPIC) == 0

        async with Producer("metrics-producer", ns.addr) as producer:
            for i in range(N // 2):  # singles
                await producer.send(Message(TOPIC, b"x" * 100), MessageQueue(TOPIC, "broker-a",
                                                                          i % QUEUES))
            for q in range(QUEUES):  # and batches
                batch = [Message(TOPIC, b"y" * 200) for _ in range(N // 2 // QUEUES)]
                await producer.send_batch(batch, MessageQueue(TOPIC, "broker-a", q))
        after_put = await scrape(broker_metrics)
        put = value(after_put, "rocketmq_producer_messages_total", cluster="DefaultCluster",
                    broker="broker-a", topic=TOPIC)
        assert put == N
        assert value(after_put, "rocketmq_broker_put_messages_total") == N
        stored_bytes = value(after_put, "rocketmq_producer_message_bytes_total", topic=TOPIC)
        assert stored_bytes > N // 2 * 100 + N // 2 * 200  # bodies plus record headers
        assert value(after_put, "rocketmq_brokeruntime_put_latency_seconds_count") == N // 2 + QUEUES
        assert value(after_put, "rocketmq_brokeruntime_commitlog_maxoffset") >= stored_bytes
        assert 0 < value(after_put, "rocketmq_brokeruntime_commitlog_disk_ratio") < 1

        # consume all N, commit part of it: a lag per queue
        got = 0
        async with PullConsumer(GROUP, ns.addr) as consumer:
            for q in range(QUEUES):
                mq = MessageQueue(TOPIC, "broker-a", q)
                offset = 0
                while True:
                    result = await consumer.pull(mq, "*", offset, 7)
                    if not result.msg_found_list:
                        break
                    got += len(result.msg_found_list)
                    offset = result.next_begin_offset
                await consumer.update_consume_offset(mq, q * 3)  # lags differ per queue
        assert got == N
        after_get = await scrape(broker_metrics)
        assert value(after_get, "rocketmq_consumer_messages_total", topic=TOPIC, group=GROUP) == N
        assert value(after_get, "rocketmq_broker_get_messages_total") == N
        assert value(after_get, "rocketmq_consumer_message_bytes_total", topic=TOPIC,
                     group=GROUP) == stored_bytes  # pulls return the records as stored
        # puts did not move
        assert value(after_get, "rocketmq_producer_messages_total", topic=TOPIC) == N

        rows = await admin.consume_stats(GROUP, TOPIC)
        assert len(rows) == QUEUES
        for row in rows:
            lag = value(after_get, "rocketmq_group_diff", topic=TOPIC, group=GROUP,
                        queueid=str(row["queueId"]))
            assert lag == row["lag"] == row["brokerOffset"] - row["queueId"] * 3

        ns_before = await scrape(ns_metrics)
        assert value(ns_before, "rocketmq_namesrv_brokers_live") == 1
        assert value(ns_before, "rocketmq_namesrv_topics") >= 1
        assert value(ns_before, "rocketmq_namesrv_registrations_total") >= 1
        await admin.topic_route(TOPIC)
        ns_after = await scrape(ns_metrics)
        assert (value(ns_after, "rocketmq_namesrv_route_lookups_total", result="found")
                == value(ns_before, "rocketmq_namesrv_route_lookups_total", result="found") + 1)

    # anything but /metrics is 404
    status, _ = await trio.to_thread.run_sync(_get, f"http://127.0.0.1:{broker_metrics}/other")
    assert status == 404


async def test_metrics_off_by_default(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    cluster.broker("broker-a", ns.addr)
    assert "metrics served" not in ns.log_text()
    assert "metrics served" not in cluster.daemons[-1].log_text()
