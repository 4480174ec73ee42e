"""The broker's and name server's collectors, read without a server: what a scrape shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from acl.plain import NO_PERMISSION as PERMISSION_REFUSED
from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.metrics import BrokerCollector, broker_registry, frozen_registry
from namesrv.metrics import namesrv_registry
from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager
from protocol.codes import RequestCode
from protocol.route import TopicConfig
from tests.broker.fakes import FakeConn


def parse(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[BrokerController]:
    config = BrokerConfig(store_path_root_dir=str(tmp_path / "store"),
                          maped_file_size_commit_log=1 << 20,
                          maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64,
                          max_index_num=256)
    c = BrokerController(config)
    c._load()
    try:
        yield c
    finally:
        c._persist_and_close()


def test_broker_collector_reads_counters_and_lag(controller: BrokerController) -> None:
    c = controller
    c.topic_config_manager.put(TopicConfig("T", 2, 2))
    c.stats.record_put("T", 32, 32_000)
    c.stats.record_get("T", "g", 5, 5_000)
    c.put_latency.observe(0.0003)
    c.consumer_offset_manager.commit_offset("g", "T", 0, 0)
    samples = parse(generate_latest(broker_registry(c)))
    labels = (("broker", "broker-a"), ("cluster", "DefaultCluster"))
    assert samples[("rocketmq_producer_messages_total", tuple(sorted(labels + (("topic", "T"),))))] == 32
    assert samples[("rocketmq_producer_message_bytes_total",
                    tuple(sorted(labels + (("topic", "T"),))))] == 32_000
    assert samples[("rocketmq_consumer_messages_total",
                    tuple(sorted(labels + (("group", "g"), ("topic", "T")))))] == 5
    lag = {k: v for k, v in samples.items() if k[0] == "rocketmq_group_diff"}
    assert sorted(dict(k[1])["queueid"] for k in lag) == ["0", "1"]  # read queues of T
    assert set(lag.values()) == {0}
    assert samples[("rocketmq_brokeruntime_put_latency_seconds_count", labels)] == 1
    assert samples[("rocketmq_brokeruntime_put_latency_seconds_bucket",
                    tuple(sorted(labels + (("le", "0.0005"),))))] == 1
    assert samples[("rocketmq_brokeruntime_pull_requests_held", labels)] == 0


def test_broker_collector_bounds_series(controller: BrokerController) -> None:
    for i in range(30):
        controller.stats.record_put(f"T{i}", 1, 1)
    samples = parse(generate_latest(broker_registry(controller, max_series=10)))
    assert len([k for k in samples if k[0] == "rocketmq_producer_messages_total"]) == 10
    dropped = {dict(k[1])["family"]: v for k, v in samples.items()
               if k[0] == "rocketmq_metrics_series_dropped"}
    assert dropped["rocketmq_producer_messages"] == 20


def test_namesrv_collector() -> None:
    routes = RouteInfoManager()
    processor = NamesrvProcessor(routes, lambda: 0.0)
    processor.registrations = 3
    processor.route_lookups, processor.route_lookups_missed = 7, 2
    samples = parse(generate_latest(namesrv_registry(routes, processor)))
    assert samples[("rocketmq_namesrv_brokers_live", ())] == 0
    assert samples[("rocketmq_namesrv_registrations_total", ())] == 3
    assert samples[("rocketmq_namesrv_route_lookups_total", (("result", "found"),))] == 5
    assert samples[("rocketmq_namesrv_route_lookups_total", (("result", "not_found"),))] == 2


def test_namesrv_collector_counts_acl_refusals() -> None:
    from acl.plain import parse_plain_acl
    from namesrv.acl import guard_table
    from protocol.codes import RequestCode, ResponseCode
    from protocol.command import RemotingCommand
    from protocol.trio.connection import HandlerTable

    routes = RouteInfoManager()
    processor = NamesrvProcessor(routes, lambda: 0.0)
    table = HandlerTable()
    table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                   lambda conn, cmd: cmd.response(ResponseCode.SUCCESS))
    config = parse_plain_acl("accounts:\n  - accessKey: reader1\n    secretKey: '12345678'\n")
    guarded = guard_table(table, lambda: config, processor.record_acl_refusal)
    handler = guarded._sync[RequestCode.GET_ROUTEINFO_BY_TOPIC]

    class Conn:
        remote_addr = "10.1.2.3:4567"

    conn: Any = Conn()
    for _ in range(2):  # unsigned: refused twice
        resp = handler(conn, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                       {"topic": "T"}))
        assert resp is not None and resp.code == ResponseCode.NO_PERMISSION
    samples = parse(generate_latest(namesrv_registry(routes, processor)))
    key = ("rocketmq_namesrv_acl_refusals_total",
           (("code", str(int(RequestCode.GET_ROUTEINFO_BY_TOPIC))), ("reason", "no_access_key")))
    assert samples[key] == 2


def test_collector_counts_refusals(controller: BrokerController) -> None:
    controller.stats.record_acl_refusal(RequestCode.SEND_MESSAGE_V2, PERMISSION_REFUSED)
    controller.stats.record_acl_refusal(RequestCode.SEND_MESSAGE_V2, PERMISSION_REFUSED)
    controller.stats.record_acl_refusal(RequestCode.UPDATE_AND_CREATE_TOPIC, "admin")
    samples = {}
    for fam in text_string_to_metric_families(generate_latest(broker_registry(controller))
                                              .decode()):
        for s in fam.samples:
            if s.name == "rocketmq_acl_refusals_total":
                samples[(s.labels["code"], s.labels["reason"])] = s.value
    assert samples == {("310", "permission"): 2, ("17", "admin"): 1}


class CountingDict(dict):  # type: ignore[type-arg]
    """A table that counts the entries a reader visits (iteration and look-ups)."""

    visits = 0

    def __iter__(self) -> Iterator[Any]:
        for key in super().__iter__():
            self.visits += 1
            yield key

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        for item in super().items():
            self.visits += 1
            yield item

    def keys(self) -> Iterator[Any]:  # type: ignore[override]
        return iter(self)

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        for _, value in self.items():
            yield value

    def get(self, key: Any, default: Any = None) -> Any:
        self.visits += 1
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.visits += 1
        return super().__getitem__(key)


FRESH = 200_000  # the attack: as many UPDATE_CONSUMER_OFFSET with fresh groups


def test_scrape_work_is_bounded_by_the_cap(controller: BrokerController) -> None:
    """200,000 committed offsets of fresh groups (and as many pulled (topic, group)
    counters): a scrape visits at most ``max_series`` of each table's entries, shows
    the first ones (established before the burst) and counts the rest as dropped."""
    cap = 2_002  # 500 groups of 4 queues, and 2 of the 501st's
    c = controller
    c.topic_config_manager.put(TopicConfig("T", 4, 4))
    c.consumer_offset_manager.commit_offset("zz-established", "T", 0, 7)
    offsets = CountingDict(c.consumer_offset_manager.offset_table)
    gets = CountingDict()
    for i in range(FRESH):
        dict.__setitem__(offsets, f"T@fresh-{i:06d}", {0: 0})
        gets[("T", f"fresh-{i:06d}")] = [1, 1, 1]
    c.consumer_offset_manager.offset_table = offsets
    c.stats.get = gets
    gets.visits = offsets.visits = 0
    samples = parse(generate_latest(broker_registry(c, max_series=cap)))
    assert offsets.visits <= cap, offsets.visits
    assert gets.visits <= cap, gets.visits
    lag = [dict(k[1]) for k in samples if k[0] == "rocketmq_group_diff"]
    assert len(lag) == cap
    assert {"group": "zz-established", "topic": "T", "queueid": "0", "broker": "broker-a",
            "cluster": "DefaultCluster"} in lag  # the first committed is shown, whatever its name
    dropped = {dict(k[1])["family"]: v for k, v in samples.items()
               if k[0] == "rocketmq_metrics_series_dropped"}
    # 4 queues a group: 501 groups walked, the last one's other 2 queues cut; the
    # other offsets counted (from the table's length), not walked
    assert dropped["rocketmq_group_diff"] == 2 + (FRESH + 1 - 501)
    assert dropped["rocketmq_consumer_messages"] == FRESH - cap
    assert len([k for k in samples if k[0] == "rocketmq_consumer_messages_total"]) == cap


def test_frozen_registry_renders_the_snapshot(controller: BrokerController) -> None:
    """What a scrape renders in its worker thread was taken on the loop: tables the
    loop changes after (here: grows) are not walked by the render."""
    c = controller
    c.topic_config_manager.put(TopicConfig("T", 2, 2))
    c.stats.record_put("T", 3, 300)
    c.consumer_offset_manager.commit_offset("g", "T", 0, 0)
    frozen = frozen_registry(BrokerCollector(c, max_series=100))
    for i in range(50):  # during the render, the loop goes on
        c.stats.record_put(f"New{i}", 1, 1)
        c.consumer_offset_manager.commit_offset(f"new{i}", "T", 0, 0)
    samples = parse(generate_latest(frozen))
    topics = {dict(k[1])["topic"] for k in samples if k[0] == "rocketmq_producer_messages_total"}
    assert topics == {"T"}
    groups = {dict(k[1])["group"] for k in samples if k[0] == "rocketmq_group_diff"}
    assert groups == {"g"}


def test_collector_counts_dropped_checks_notices_and_refused_prepares(
        controller: BrokerController) -> None:
    c = controller
    c.transaction_service.checks_dropped = 7
    c.transaction_service.refused_busy = 2
    c.client_service.notifications_dropped = 3
    samples = parse(generate_latest(broker_registry(c)))
    labels = (("broker", "broker-a"), ("cluster", "DefaultCluster"))
    assert samples[("rocketmq_brokeruntime_transaction_checks_dropped_total", labels)] == 7
    assert samples[("rocketmq_brokeruntime_transaction_prepare_refused_total", labels)] == 2
    assert samples[("rocketmq_brokeruntime_notifications_dropped_total", labels)] == 3


def test_rebalance_notices_to_a_consumer_that_reads_nothing_are_dropped_and_counted(
        controller: BrokerController) -> None:
    class Silent(FakeConn):
        def offer(self, cmd: Any) -> bool:
            return False  # what RemotingConnection.offer says past the high-water mark

    reading, silent = FakeConn(), Silent()
    controller.consumer_manager.register("g", "reading@1", reading, 0.0)
    controller.consumer_manager.register("g", "silent@1", silent, 0.0)
    controller.client_service.notify_consumer_ids_changed("g")
    assert [cmd.code for cmd in reading.sent] == [RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]
    assert controller.client_service.notifications_dropped == 1


def test_collector_shows_the_timer_backlog_and_lateness(controller: BrokerController) -> None:
    from broker.message_rewrite import build_inner, to_timer
    c = controller
    now = 1_700_000_000_000
    for i in range(3):
        props = {"UNIQ_KEY": f"k{i}"}
        inner = build_inner("T", 0, b"x", props)
        to_timer(inner, props, now + 1000 * (i + 1))
        c.message_store.put_message(inner)
    timer = c.timer_service
    labels = (("broker", "broker-a"), ("cluster", "DefaultCluster"))
    samples = parse(generate_latest(broker_registry(c)))
    assert samples[("rocketmq_timer_pending", labels)] == 3  # stored, not yet in the wheel
    timer.enqueue()
    timer.deliver(now + 1300)  # the first, 300 ms late
    samples = parse(generate_latest(broker_registry(c)))
    assert samples[("rocketmq_timer_pending", labels)] == 2
    assert samples[("rocketmq_timer_delivered_total", labels)] == 1
    assert samples[("rocketmq_timer_lateness_seconds_count", labels)] == 1
    assert samples[("rocketmq_timer_lateness_seconds_bucket",
                    tuple(sorted(labels + (("le", "0.25"),))))] == 0
    assert samples[("rocketmq_timer_lateness_seconds_bucket",
                    tuple(sorted(labels + (("le", "0.5"),))))] == 1
    status = timer.status()
    assert status["timerPendingCount"] == "2" and status["timerLatenessMaxMs"] == "300"
