"""The broker's Prometheus metrics: one Collector reading the broker at scrape time.

The put path pays nothing for Prometheus: sends and pulls increment the plain
counters of broker/stats.py and the latency arrays; this collector turns them
into metric families when ``/metrics`` is scraped (protocol/trio/metrics_http.py).

Names follow rocketmq-exporter where it has one, its per-second figures
(``rocketmq_producer_tps``, ``rocketmq_producer_message_size``, ...) become
counters Prometheus takes rates of:

- ``rocketmq_producer_messages_total`` / ``rocketmq_producer_message_bytes_total``
  {cluster, broker, topic}: messages and bytes put;
- ``rocketmq_consumer_messages_total`` / ``rocketmq_consumer_message_bytes_total``
  {cluster, broker, topic, group}: messages and bytes pulls returned;
- ``rocketmq_broker_put_messages_total`` / ``rocketmq_broker_get_messages_total``
  {cluster, broker};
- ``rocketmq_group_diff`` {cluster, broker, topic, group, queueid}: brokerOffset -
  consumerOffset, the figure of GET_CONSUME_STATS (consumerProgress);
- ``rocketmq_brokeruntime_put_latency_seconds`` and
  ``rocketmq_brokeruntime_flush_latency_seconds`` histograms;
- gauges ``rocketmq_brokeruntime_commitlog_maxoffset``,
  ``rocketmq_brokeruntime_commitlog_minoffset``,
  ``rocketmq_brokeruntime_commitlog_disk_ratio``,
  ``rocketmq_brokeruntime_pull_requests_held``,
  ``rocketmq_producer_connections`` / ``rocketmq_consumer_connections`` {group},
  ``rocketmq_brokeruntime_slave_ack_offset`` / ``rocketmq_brokeruntime_slave_lag_bytes``
  {slave} (a master), ``rocketmq_brokeruntime_master_lag_bytes`` (a slave),
  ``rocketmq_brokeruntime_transaction_half_pending``.
- counters ``rocketmq_brokeruntime_transaction_checks_dropped`` (checks not sent to
  producers that read nothing), ``rocketmq_brokeruntime_transaction_prepare_refused``
  (SYSTEM_BUSY past transactionMaxPendingPerGroup) and
  ``rocketmq_brokeruntime_notifications_dropped`` (rebalance notices not sent to
  consumers that read nothing).
- ``rocketmq_acl_refusals_total`` {cluster, broker, code, reason}: requests the plain
  ACL refused (reason: no_access_key, unknown_account, signature, admin,
  permission, not_loaded).

A scrape is bounded: each per-topic/group/queue family emits at most
``max_series`` series; what is left out is counted in
``rocketmq_metrics_series_dropped{family}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from broker.consumer_offset_manager import TOPIC_GROUP_SEPARATOR
from broker.stats import BYTES, MSGS, LatencyHistogram

if TYPE_CHECKING:
    from broker.controller import BrokerController

DEFAULT_MAX_SERIES = 20_000


def consume_pairs(c: BrokerController) -> Iterator[tuple[str, str]]:
    """(group, topic) of every committed offset and online subscription, sorted:
    what consumerProgress reports on."""
    topics = c.topic_config_manager.table
    pairs: set[tuple[str, str]] = set()
    for key in c.consumer_offset_manager.offset_table:
        topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
        if sep and topic in topics:
            pairs.add((group, topic))
    for group, info in c.consumer_manager.groups.items():
        pairs.update((group, t) for t in info.subscriptions if t in topics)
    return iter(sorted(pairs))


def queue_lags(c: BrokerController, group: str, topic: str) -> Iterator[tuple[int, int, int]]:
    """(queueId, brokerOffset, consumerOffset) of each read queue, as GET_CONSUME_STATS."""
    cfg = c.topic_config_manager.table.get(topic)
    if cfg is None:
        return
    store = c.message_store
    for qid in range(cfg.read_queue_nums):
        broker_off = store.get_max_offset_in_queue(topic, qid)
        consumer_off = c.consumer_offset_manager.query_offset(group, topic, qid)
        yield qid, broker_off, max(consumer_off, 0)


def histogram(name: str, doc: str, labels: list[str], values: list[str],
              h: LatencyHistogram) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=labels)
    fam.add_metric(values, buckets=h.cumulative(), sum_value=h.sum)
    return fam


class BrokerCollector(Collector):
    def __init__(self, controller: BrokerController, max_series: int = DEFAULT_MAX_SERIES
                 ) -> None:
        self.c = controller
        self.max_series = max_series

    def describe(self) -> Iterable[Metric]:
        return []  # collected only at scrape time (no work at registration)

    def collect(self) -> Iterable[Metric]:
        c = self.c
        cfg = c.config
        base = [cfg.broker_cluster_name, cfg.broker_name]
        bl = ["cluster", "broker"]
        stats = c.stats
        dropped: dict[str, int] = {}

        def bounded(family: str, items: Iterable[Any]) -> Iterator[Any]:
            n = 0
            for item in items:
                if n >= self.max_series:
                    dropped[family] = dropped.get(family, 0) + 1
                    continue
                n += 1
                yield item

        pm = CounterMetricFamily("rocketmq_producer_messages", "Messages put, per topic",
                                 labels=bl + ["topic"])
        pb = CounterMetricFamily("rocketmq_producer_message_bytes",
                                 "Bytes put (as stored), per topic", labels=bl + ["topic"])
        for topic, counter in bounded("rocketmq_producer_messages", list(stats.put.items())):
            pm.add_metric(base + [topic], counter[MSGS])
            pb.add_metric(base + [topic], counter[BYTES])
        yield pm
        yield pb

        cm = CounterMetricFamily("rocketmq_consumer_messages",
                                 "Messages pulls returned, per topic and group",
                                 labels=bl + ["topic", "group"])
        cb = CounterMetricFamily("rocketmq_consumer_message_bytes",
                                 "Bytes pulls returned, per topic and group",
                                 labels=bl + ["topic", "group"])
        for (topic, group), counter in bounded("rocketmq_consumer_messages",
                                               list(stats.get.items())):
            cm.add_metric(base + [topic, group], counter[MSGS])
            cb.add_metric(base + [topic, group], counter[BYTES])
        yield cm
        yield cb

        for which, counter in (("put", stats.put_total), ("get", stats.get_total)):
            fam = CounterMetricFamily(f"rocketmq_broker_{which}_messages",
                                      f"Messages {which} on this broker", labels=bl)
            fam.add_metric(base, counter[MSGS])
            yield fam

        refusals = CounterMetricFamily("rocketmq_acl_refusals",
                                       "Requests refused by the plain ACL, per request code "
                                       "and reason", labels=bl + ["code", "reason"])
        for (code, reason), count in sorted(stats.acl_refusals.items()):
            refusals.add_metric(base + [str(code), reason], count)
        yield refusals

        lag = GaugeMetricFamily("rocketmq_group_diff",
                                "Messages not consumed yet: brokerOffset - consumerOffset "
                                "(consumerProgress)",
                                labels=bl + ["topic", "group", "queueid"])
        rows = (row for group, topic in consume_pairs(c)
                for row in ((group, topic, *q) for q in queue_lags(c, group, topic)))
        for group, topic, qid, broker_off, consumer_off in bounded("rocketmq_group_diff", rows):
            lag.add_metric(base + [topic, group, str(qid)], broker_off - consumer_off)
        yield lag

        yield histogram("rocketmq_brokeruntime_put_latency_seconds",
                        "Store put time of a send request", bl, base, c.put_latency)
        yield histogram("rocketmq_brokeruntime_flush_latency_seconds",
                        "Commit-log flush (fsync) time", bl, base, c.flush_latency)

        store = c.message_store

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            fam = GaugeMetricFamily(name, doc, labels=bl)
            fam.add_metric(base, value)
            return fam

        yield gauge("rocketmq_brokeruntime_commitlog_maxoffset", "Commit-log max offset",
                    store.get_max_phy_offset())
        yield gauge("rocketmq_brokeruntime_commitlog_minoffset", "Commit-log min offset",
                    store.get_min_phy_offset())
        yield gauge("rocketmq_brokeruntime_commitlog_disk_ratio",
                    "Used share (0..1) of the commit log's disk", c.commit_log_disk_ratio())
        yield gauge("rocketmq_brokeruntime_pull_requests_held", "Long-polling pulls held",
                    c.pull_hold_service.index.total)
        yield gauge("rocketmq_brokeruntime_boot_timestamp_seconds", "When the broker started",
                    c.boot_timestamp_ms / 1000)

        for kind, manager in (("producer", c.producer_manager), ("consumer", c.consumer_manager)):
            conns = GaugeMetricFamily(f"rocketmq_{kind}_connections",
                                      f"Connected {kind} clients per group",
                                      labels=bl + ["group"])
            for group, info in bounded(f"rocketmq_{kind}_connections",
                                       list(manager.groups.items())):
                conns.add_metric(base + [group], len(info.clients))
            yield conns

        ha = c.ha_service
        if cfg.is_slave:
            client = ha.client
            if client is not None:
                yield gauge("rocketmq_brokeruntime_master_lag_bytes",
                            "Commit-log bytes the master holds that this slave does not",
                            max(0, client.master_offset - store.get_max_phy_offset()))
            yield gauge("rocketmq_ha_master_log_accepted",
                        "1 while the master's log continues this slave's (it replicates), "
                        "0 while either refuses the other's", 1 if ha.master_accepted else 0)
        else:
            ack = GaugeMetricFamily("rocketmq_brokeruntime_slave_ack_offset",
                                    "A slave's acknowledged commit-log offset",
                                    labels=bl + ["slave"])
            behind = GaugeMetricFamily("rocketmq_brokeruntime_slave_lag_bytes",
                                       "Commit-log bytes a slave has not acknowledged",
                                       labels=bl + ["slave"])
            master_max = store.get_max_phy_offset()
            for i, conn in enumerate(sorted(ha.connections, key=id)):
                name = str(getattr(conn, "remote_addr", None) or i)
                ack.add_metric(base + [name], conn.acked_offset)
                behind.add_metric(base + [name], conn.lag(master_max))
            yield ack
            yield behind
            yield gauge("rocketmq_ha_writable",
                        "1 while the master takes writes, 0 while it is fenced (starting, "
                        "or behind a slave's longer log)", 1 if store.write_fence is None else 0)
            refused = CounterMetricFamily("rocketmq_ha_slave_refused",
                                          "Slaves' logs refused at their hello, by verdict",
                                          labels=bl + ["verdict"])
            for verdict, n in sorted(ha.refused.items()):
                refused.add_metric(base + [verdict], n)
            yield refused
            yield gauge("rocketmq_brokeruntime_transaction_half_pending",
                        "Transaction half messages neither committed nor rolled back",
                        len(c.transaction_service.book.pending))
            tx = c.transaction_service
            for name, doc, value in (
                    ("rocketmq_brokeruntime_transaction_checks_dropped",
                     "Transaction checks not sent: the group's producers read nothing "
                     "(asked again next pass)", tx.checks_dropped),
                    ("rocketmq_brokeruntime_transaction_prepare_refused",
                     "Prepared messages refused SYSTEM_BUSY (transactionMaxPendingPerGroup)",
                     tx.refused_busy)):
                fam = CounterMetricFamily(name, doc, labels=bl)
                fam.add_metric(base, value)
                yield fam
        notices = CounterMetricFamily(
            "rocketmq_brokeruntime_notifications_dropped",
            "NOTIFY_CONSUMER_IDS_CHANGED not sent: the consumer read nothing", labels=bl)
        notices.add_metric(base, c.client_manage_processor.notifications_dropped)
        yield notices

        drops = GaugeMetricFamily("rocketmq_metrics_series_dropped",
                                  "Series left out of this scrape (past the bound)",
                                  labels=bl + ["family"])
        for family, n in sorted(dropped.items()):
            drops.add_metric(base + [family], n)
        yield drops


def broker_registry(controller: BrokerController,
                    max_series: int = DEFAULT_MAX_SERIES) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(controller, max_series))
    return registry
