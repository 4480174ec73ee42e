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

A scrape is bounded, in its output and in its work: each per-topic/group/queue
family emits at most ``max_series`` series and walks at most ``max_series``
entries of the table it reads, the first ones (tables keep the order entries
were created in: established topics and groups come before what a burst of
fresh ones adds, and are the ones shown). Nothing is sorted and no table is
copied or walked whole: 200,000 committed offsets cost a scrape what
``max_series`` do. What is left out is counted in
``rocketmq_metrics_series_dropped{family}`` (from the tables' lengths, not by
walking them): series for the per-topic/group families; for
``rocketmq_group_diff``, the queue series of the last (group, topic) cut short
plus the committed ``topic@group`` offsets and consumer groups not walked (each
has one series per read queue of its topic, or none if its topic is gone).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from typing import TYPE_CHECKING, TypeVar

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

K = TypeVar("K")
V = TypeVar("V")


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


# What the loop takes for one (group, topic) of rocketmq_group_diff: the group, the
# topic, the group's committed offsets of the topic (the live {queueId: offset}:
# a worker thread reads it one ``get`` at a time, atomic under the GIL) and the
# topic's brokerOffset of each read queue shown (a list per topic, copied).
LagPair = tuple[str, str, Mapping[int, int], list[int]]
_NO_OFFSETS: Mapping[int, int] = {}


def bounded_lag_pairs(c: BrokerController, max_rows: int) -> tuple[list[LagPair], int]:
    """The (group, topic) pairs of at most ``max_rows`` rows of
    ``rocketmq_group_diff`` (a row per read queue) and how much was left out (see the
    module's doc), walking at most ``max_rows`` entries: the committed offsets in the
    order their ``topic@group`` was first committed, then the online consumer groups'
    subscriptions without one. Work O(max_rows) whatever the tables hold; runs on
    the loop, the rows are made off it (``lag_rows``)."""
    topics = c.topic_config_manager.table
    offsets = c.consumer_offset_manager.offset_table
    groups = c.consumer_manager.groups
    store = c.message_store
    pairs: list[LagPair] = []
    broker_offsets: dict[str, list[int]] = {}  # topic -> max offset of each read queue
    walked_offsets = walked_groups = rows = cut = 0
    budget = max_rows  # table entries walked at most

    def add(group: str, topic: str, queues: Mapping[int, int]) -> bool:
        """One (group, topic); False once the rows are full."""
        nonlocal rows, cut
        cfg = topics.get(topic)
        if cfg is None:
            return True
        maxes = broker_offsets.get(topic)
        if maxes is None:
            maxes = broker_offsets[topic] = [store.get_max_offset_in_queue(topic, q)
                                             for q in range(min(cfg.read_queue_nums,
                                                                max_rows - rows))]
        n = cfg.read_queue_nums
        if rows + n > max_rows:  # its queues past the bound are left out
            cut += rows + n - max_rows
            n = max_rows - rows
        pairs.append((group, topic, queues, maxes if n == len(maxes) else maxes[:n]))
        rows += n
        return rows < max_rows

    full = max_rows <= 0
    for key, queues in offsets.items():
        if walked_offsets >= budget or full:
            break
        walked_offsets += 1
        topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
        if sep:
            full = not add(group, topic, queues)
    # past here only when every offset was walked: a subscription with an offset is done
    budget -= walked_offsets
    for group, info in groups.items():
        if budget <= 0 or full:
            break
        walked_groups += 1
        for topic in islice(info.subscriptions, budget):
            budget -= 1
            if (f"{topic}{TOPIC_GROUP_SEPARATOR}{group}" not in offsets
                    and not add(group, topic, _NO_OFFSETS)):
                full = True
                break
    left_out = cut + (len(offsets) - walked_offsets) + (len(groups) - walked_groups)
    return pairs, left_out


def lag_rows(pairs: Iterable[LagPair]) -> Iterator[tuple[str, str, int, int]]:
    """(topic, group, queueId, brokerOffset - consumerOffset) of each copied pair's
    queues, as GET_CONSUME_STATS (no committed offset: 0)."""
    for group, topic, queues, maxes in pairs:
        for qid, broker_off in enumerate(maxes):
            yield topic, group, qid, broker_off - max(queues.get(qid, -1), 0)


def histogram(name: str, doc: str, labels: list[str], values: list[str],
              h: LatencyHistogram) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=labels)
    fam.add_metric(values, buckets=h.cumulative(), sum_value=h.sum)
    return fam


# One family (or a few) made from data copied on the loop: callable anywhere.
Build = Callable[[], Iterable[Metric]]


def _done(*families: Metric) -> Build:
    return lambda: families


class BrokerCollector(Collector):
    """Reads the broker. ``snapshot()`` (on the event loop) copies what a scrape shows,
    at most ``max_series`` entries of each table (O(max_series) work); the builders
    it returns make the metric families from the copies only, so they (and the text
    exposition, the bulk of a scrape's work) can run in a worker thread
    (``frozen_registry``, protocol/trio/metrics_http.py). ``collect()`` does both."""

    def __init__(self, controller: BrokerController, max_series: int = DEFAULT_MAX_SERIES
                 ) -> None:
        self.c = controller
        self.max_series = max_series

    def describe(self) -> Iterable[Metric]:
        return []  # collected only at scrape time (no work at registration)

    def collect(self) -> Iterable[Metric]:
        for build in self.snapshot():
            yield from build()

    def snapshot(self) -> list[Build]:
        c = self.c
        cfg = c.config
        base = [cfg.broker_cluster_name, cfg.broker_name]
        bl = ["cluster", "broker"]
        stats = c.stats
        dropped: dict[str, int] = {}
        out: list[Build] = []
        cap = self.max_series

        def head(family: str, table: Mapping[K, V]) -> Iterator[tuple[K, V]]:
            """The first ``max_series`` entries of ``table``; the rest counted, not walked."""
            if len(table) > cap:
                dropped[family] = len(table) - cap
            return islice(table.items(), cap)

        puts = [(topic, counter[MSGS], counter[BYTES])
                for topic, counter in head("rocketmq_producer_messages", stats.put)]

        def producer() -> Iterable[Metric]:
            pm = CounterMetricFamily("rocketmq_producer_messages", "Messages put, per topic",
                                     labels=bl + ["topic"])
            pb = CounterMetricFamily("rocketmq_producer_message_bytes",
                                     "Bytes put (as stored), per topic", labels=bl + ["topic"])
            for topic, msgs, size in puts:
                pm.add_metric(base + [topic], msgs)
                pb.add_metric(base + [topic], size)
            return pm, pb

        out.append(producer)

        gets = [(topic, group, counter[MSGS], counter[BYTES])
                for (topic, group), counter in head("rocketmq_consumer_messages", stats.get)]

        def consumer() -> Iterable[Metric]:
            cm = CounterMetricFamily("rocketmq_consumer_messages",
                                     "Messages pulls returned, per topic and group",
                                     labels=bl + ["topic", "group"])
            cb = CounterMetricFamily("rocketmq_consumer_message_bytes",
                                     "Bytes pulls returned, per topic and group",
                                     labels=bl + ["topic", "group"])
            for topic, group, msgs, size in gets:
                cm.add_metric(base + [topic, group], msgs)
                cb.add_metric(base + [topic, group], size)
            return cm, cb

        out.append(consumer)

        for which, counter in (("put", stats.put_total), ("get", stats.get_total)):
            fam = CounterMetricFamily(f"rocketmq_broker_{which}_messages",
                                      f"Messages {which} on this broker", labels=bl)
            fam.add_metric(base, counter[MSGS])
            out.append(_done(fam))

        # (code, reason) keys: the served codes times a few reasons (broker/stats.py)
        refusals = CounterMetricFamily("rocketmq_acl_refusals",
                                       "Requests refused by the plain ACL, per request code "
                                       "and reason", labels=bl + ["code", "reason"])
        for (code, reason), count in sorted(stats.acl_refusals.items()):
            refusals.add_metric(base + [str(code), reason], count)
        out.append(_done(refusals))

        pairs, left_out = bounded_lag_pairs(c, cap)
        if left_out:
            dropped["rocketmq_group_diff"] = left_out

        def group_diff() -> Iterable[Metric]:
            lag = GaugeMetricFamily("rocketmq_group_diff",
                                    "Messages not consumed yet: brokerOffset - consumerOffset "
                                    "(consumerProgress)",
                                    labels=bl + ["topic", "group", "queueid"])
            for topic, group, qid, diff in lag_rows(pairs):
                lag.add_metric(base + [topic, group, str(qid)], diff)
            return (lag,)

        out.append(group_diff)

        out.append(_done(
            histogram("rocketmq_brokeruntime_put_latency_seconds",
                      "Store put time of a send request", bl, base, c.put_latency),
            histogram("rocketmq_brokeruntime_flush_latency_seconds",
                      "Commit-log flush (fsync) time", bl, base, c.flush_latency)))

        store = c.message_store

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            fam = GaugeMetricFamily(name, doc, labels=bl)
            fam.add_metric(base, value)
            return fam

        out.append(_done(
            gauge("rocketmq_brokeruntime_commitlog_maxoffset", "Commit-log max offset",
                  store.get_max_phy_offset()),
            gauge("rocketmq_brokeruntime_commitlog_minoffset", "Commit-log min offset",
                  store.get_min_phy_offset()),
            gauge("rocketmq_brokeruntime_commitlog_disk_ratio",
                  "Used share (0..1) of the commit log's disk", c.commit_log_disk_ratio()),
            gauge("rocketmq_brokeruntime_pull_requests_held", "Long-polling pulls held",
                  c.pull_hold_service.index.total),
            gauge("rocketmq_brokeruntime_boot_timestamp_seconds", "When the broker started",
                  c.boot_timestamp_ms / 1000)))

        for kind, manager in (("producer", c.producer_manager), ("consumer", c.consumer_manager)):
            conns = GaugeMetricFamily(f"rocketmq_{kind}_connections",
                                      f"Connected {kind} clients per group",
                                      labels=bl + ["group"])
            for group, info in head(f"rocketmq_{kind}_connections", manager.groups):
                conns.add_metric(base + [group], len(info.clients))
            out.append(_done(conns))

        ha = c.ha_service
        if c.role.is_slave:
            client = ha.client
            if client is not None:
                out.append(_done(gauge(
                    "rocketmq_brokeruntime_master_lag_bytes",
                    "Commit-log bytes the master holds that this slave does not",
                    max(0, client.master_offset - store.get_max_phy_offset()))))
            out.append(_done(gauge(
                "rocketmq_ha_master_log_accepted",
                "1 while the master's log continues this slave's (it replicates), "
                "0 while either refuses the other's", 1 if ha.master_accepted else 0)))
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
            refused = CounterMetricFamily("rocketmq_ha_slave_refused",
                                          "Slaves' logs refused at their hello, by verdict",
                                          labels=bl + ["verdict"])
            for verdict, n in sorted(ha.refused.items()):
                refused.add_metric(base + [verdict], n)
            tx = c.transaction_service
            tx_counters = []
            for name, doc, value in (
                    ("rocketmq_brokeruntime_transaction_checks_dropped",
                     "Transaction checks not sent: the group's producers read nothing "
                     "(asked again next pass)", tx.checks_dropped),
                    ("rocketmq_brokeruntime_transaction_prepare_refused",
                     "Prepared messages refused SYSTEM_BUSY (transactionMaxPendingPerGroup)",
                     tx.refused_busy)):
                fam = CounterMetricFamily(name, doc, labels=bl)
                fam.add_metric(base, value)
                tx_counters.append(fam)
            out.append(_done(
                ack, behind,
                gauge("rocketmq_ha_writable",
                      "1 while the master takes writes, 0 while it is fenced (starting, "
                      "or behind a slave's longer log)", 1 if store.write_fence is None else 0),
                refused,
                gauge("rocketmq_brokeruntime_transaction_half_pending",
                      "Transaction half messages neither committed nor rolled back",
                      len(tx.book.pending)),
                *tx_counters))
        timer = c.timer_service
        timer_counters = []
        for name, doc, value in (
                ("rocketmq_timer_delivered", "Timer messages delivered to their topic",
                 timer.delivered),
                ("rocketmq_timer_dropped", "Timer messages that could never be delivered",
                 timer.dropped),
                ("rocketmq_timer_recalled", "Timer messages recalled before their time",
                 timer.wheel.recalled_skipped)):
            fam = CounterMetricFamily(name, doc, labels=bl)
            fam.add_metric(base, value)
            timer_counters.append(fam)
        lateness = LatencyHistogram(timer.lateness.bounds)
        lateness.counts, lateness.sum = list(timer.lateness.counts), timer.lateness.sum
        out.append(_done(
            gauge("rocketmq_timer_pending", "Timer messages waiting for their time "
                  "(in the wheel, or stored and not yet in it)",
                  timer.wheel.pending + timer.backlog()),
            histogram("rocketmq_timer_lateness_seconds",
                      "Delivered time minus due time of timer messages", bl, base, lateness),
            *timer_counters))
        notices = CounterMetricFamily(
            "rocketmq_brokeruntime_notifications_dropped",
            "NOTIFY_CONSUMER_IDS_CHANGED not sent: the consumer read nothing", labels=bl)
        notices.add_metric(base, c.client_service.notifications_dropped)
        out.append(_done(notices))

        drops = GaugeMetricFamily("rocketmq_metrics_series_dropped",
                                  "Series left out of this scrape (past the bound)",
                                  labels=bl + ["family"])
        for family, n in sorted(dropped.items()):
            drops.add_metric(base + [family], n)
        out.append(_done(drops))
        return out


class FrozenCollector(Collector):
    """The families of one ``BrokerCollector.snapshot()``: reads no live table."""

    def __init__(self, builds: list[Build]) -> None:
        self.builds = builds

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        for build in self.builds:
            yield from build()


def broker_registry(controller: BrokerController,
                    max_series: int = DEFAULT_MAX_SERIES) -> CollectorRegistry:
    """A registry reading the broker when rendered (on the event loop)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(controller, max_series))
    return registry


def frozen_registry(collector: BrokerCollector) -> CollectorRegistry:
    """A registry of what ``collector`` reads now (call it on the event loop):
    rendering it reads only copies, so it may run in a worker thread."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FrozenCollector(collector.snapshot()))
    return registry
