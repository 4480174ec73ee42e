"""The name server's Prometheus metrics: one Collector read at scrape time.

- ``rocketmq_namesrv_brokers_live``: brokers registered and alive;
- ``rocketmq_namesrv_topics``: topics with routes;
- ``rocketmq_namesrv_registrations_total``: REGISTER_BROKER requests applied;
- ``rocketmq_namesrv_route_lookups_total{result}``: GET_ROUTEINFO_BY_TOPIC
  answered, ``result`` "found" or "not_found";
- ``rocketmq_namesrv_acl_refusals_total{code, reason}``: requests refused by the
  ACL (aclEnable), by request code and reason (no_access_key, unknown_account,
  signature, admin, permission, not_loaded).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager


class NamesrvCollector(Collector):
    def __init__(self, routes: RouteInfoManager, processor: NamesrvProcessor) -> None:
        self.routes = routes
        self.processor = processor

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        p = self.processor
        live = GaugeMetricFamily("rocketmq_namesrv_brokers_live", "Brokers registered and alive")
        live.add_metric([], len(self.routes.broker_live_table))
        yield live
        topics = GaugeMetricFamily("rocketmq_namesrv_topics", "Topics with routes")
        topics.add_metric([], len(self.routes.topic_queue_table))
        yield topics
        regs = CounterMetricFamily("rocketmq_namesrv_registrations",
                                   "REGISTER_BROKER requests applied")
        regs.add_metric([], p.registrations)
        yield regs
        lookups = CounterMetricFamily("rocketmq_namesrv_route_lookups",
                                      "GET_ROUTEINFO_BY_TOPIC requests answered",
                                      labels=["result"])
        lookups.add_metric(["found"], p.route_lookups - p.route_lookups_missed)
        lookups.add_metric(["not_found"], p.route_lookups_missed)
        yield lookups
        refusals = CounterMetricFamily("rocketmq_namesrv_acl_refusals",
                                       "Requests refused by the ACL (aclEnable)",
                                       labels=["code", "reason"])
        for (code, reason), count in sorted(p.acl_refusals.items()):
            refusals.add_metric([str(code), reason], count)
        yield refusals


def namesrv_registry(routes: RouteInfoManager, processor: NamesrvProcessor) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NamesrvCollector(routes, processor))
    return registry
