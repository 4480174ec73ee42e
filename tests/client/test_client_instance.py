"""MQClientInstance: name-server failover, route cache and refresh, route conversions."""

from __future__ import annotations

import threading

import pytest
import trio

from client.errors import MQBrokerError, MQClientError
from client.instance import MQClientInstance, parse_namesrv_addr
from client.publish_info import TopicPublishInfo
from client.route_info import (
    FailureRefreshes,
    default_topic_route,
    publish_queues,
    subscribe_queues,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.message import MessageQueue
from protocol.route import PERM_READ, PERM_RW, PERM_WRITE, BrokerData, QueueData, TopicRouteData
from protocol.trio import RemotingConnection
from tests.client.fakes import FakeCluster, closed_port_addr

TOPIC = FakeCluster.TOPIC


def route(*qds: QueueData, masters: dict[str, str] | None = None) -> TopicRouteData:
    masters = masters if masters is not None else {q.broker_name: "h:1" for q in qds}
    return TopicRouteData(
        queue_datas=list(qds),
        broker_datas=[BrokerData("c", n, {0: a}) for n, a in masters.items()],
    )


# ---- pure conversions -------------------------------------------------------------


def test_publish_and_subscribe_queues_follow_perm_and_counts() -> None:
    r = route(
        QueueData("b", 2, 3, PERM_RW),
        QueueData("a", 4, 1, PERM_RW),
        QueueData("c", 2, 2, PERM_READ),
        QueueData("d", 2, 2, PERM_WRITE),
    )
    assert publish_queues("T", r) == [
        MessageQueue("T", "a", 0),
        MessageQueue("T", "b", 0),
        MessageQueue("T", "b", 1),
        MessageQueue("T", "b", 2),
        MessageQueue("T", "d", 0),
        MessageQueue("T", "d", 1),
    ]
    subs = subscribe_queues("T", r)
    assert subs == sorted(subs)
    assert [(q.broker_name, q.queue_id) for q in subs] == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("a", 3),
        ("b", 0),
        ("b", 1),
        ("c", 0),
        ("c", 1),
    ]


def test_publish_queues_skip_brokers_without_master() -> None:
    r = route(QueueData("a", 2, 2, PERM_RW), QueueData("b", 2, 2, PERM_RW), masters={"a": "h:1"})
    r.broker_datas.append(BrokerData("c", "b", {1: "slave:1"}))
    assert {q.broker_name for q in publish_queues("T", r)} == {"a"}


def test_default_topic_route_caps_queue_count() -> None:
    tbw = route(QueueData("a", 8, 8, 7), QueueData("b", 2, 2, 7))
    r = default_topic_route(tbw, 4)
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in r.queue_datas] == [
        ("a", 4, 4),
        ("b", 2, 2),
    ]
    assert tbw.queue_datas[0].write_queue_nums == 8  # not modified


def test_select_round_robin_and_avoid_last_broker() -> None:
    queues = [MessageQueue("T", b, i) for b in ("a", "b") for i in range(2)]
    info = TopicPublishInfo("T", queues, start_index=0)
    assert [info.select() for _ in range(5)] == queues + queues[:1]
    # Next would be a1; after a failure on "a" it takes b0 instead.
    assert info.select("a") == MessageQueue("T", "b", 0)
    only_a = TopicPublishInfo("T", queues[:2], start_index=0)
    assert only_a.select("a").broker_name == "a"  # nothing else: any queue
    with pytest.raises(IndexError):
        TopicPublishInfo("T", []).select()


def test_parse_namesrv_addr() -> None:
    assert parse_namesrv_addr(" a:1 ; b:2;") == ["a:1", "b:2"]
    for bad in ("", ";", "a", "a:x"):
        with pytest.raises(MQClientError):
            parse_namesrv_addr(bad)


# ---- against the fakes -------------------------------------------------------------


async def test_namesrv_failover_skips_unreachable(cluster: FakeCluster) -> None:
    dead = closed_port_addr()
    for addrs in (f"{dead};{cluster.namesrv_addr}", f"{cluster.namesrv_addr};{dead}"):
        instance = await MQClientInstance.acquire(addrs)
        try:
            for _ in range(3):
                r = await instance.update_topic_route(TOPIC)
                assert r is not None
            # After a failure the working name server is used first.
            assert instance.current_namesrv == cluster.namesrv_addr
        finally:
            await instance.release()
    assert len(cluster.namesrv.route_requests) == 6


async def test_no_namesrv_reachable() -> None:
    instance = await MQClientInstance.acquire(f"{closed_port_addr()};{closed_port_addr()}")
    try:
        with pytest.raises(MQClientError, match="no name server could be reached"):
            await instance.update_topic_route(TOPIC)
    finally:
        await instance.release()


async def test_namesrv_error_code_is_a_broker_error(cluster: FakeCluster) -> None:
    def refuse(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "namesrv is sad")

    cluster.namesrv.handlers.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, refuse)
    instance = await MQClientInstance.acquire(cluster.namesrv_addr)
    try:
        with pytest.raises(MQBrokerError, match="namesrv is sad") as info:
            await instance.update_topic_route(TOPIC)
        assert info.value.response_code is ResponseCode.SYSTEM_ERROR
        assert info.value.addr == cluster.namesrv_addr
    finally:
        await instance.release()


async def test_route_cache_and_broker_addresses(cluster: FakeCluster) -> None:
    a, b = cluster.brokers
    cluster.namesrv.set_route(TOPIC, [a, b], slaves={"broker-b": "127.0.0.1:1"})
    instance = await MQClientInstance.acquire(cluster.namesrv_addr)
    try:
        assert instance.publish_info(TOPIC) is None
        info = await instance.find_publish_info(TOPIC)
        assert len(info.queues) == 8
        assert await instance.find_publish_info(TOPIC) is info  # cached
        assert cluster.namesrv.route_requests == [TOPIC]
        assert instance.find_broker_addr("broker-a") == a.addr
        assert instance.find_broker_addr_for_read("broker-b", 1) == ("127.0.0.1:1", 1)
        assert instance.find_broker_addr_for_read("broker-b", 7) == (b.addr, 0)
        assert instance.find_broker_addr("nope") is None
        queues = await instance.fetch_subscribe_queues(TOPIC)
        assert queues == sorted(queues) and len(queues) == 8
    finally:
        await instance.release()


async def test_concurrent_route_lookups_share_one_request(cluster: FakeCluster) -> None:
    instance = await MQClientInstance.acquire(cluster.namesrv_addr)
    try:
        async with trio.open_nursery() as n:
            for _ in range(20):
                n.start_soon(instance.find_publish_info, TOPIC)
        assert cluster.namesrv.route_requests == [TOPIC]
    finally:
        await instance.release()


async def test_route_refresh_every_interval(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[float, str]] = []
    routes = {"T": route(QueueData("a", 4, 4, PERM_RW))}

    async def fake_fetch(topic: str, timeout: float | None = None) -> TopicRouteData | None:
        calls.append((trio.current_time(), topic))
        return routes.get(topic)

    instance = MQClientInstance("127.0.0.1:9", poll_name_server_interval=30.0)
    monkeypatch.setattr(instance, "fetch_route_from_namesrv", fake_fetch)
    await instance.start()
    try:
        t0 = trio.current_time()
        assert len((await instance.find_publish_info("T")).queues) == 4
        assert len(calls) == 1
        await trio.sleep(29.9)
        assert len(calls) == 1
        # The route changes on the name server; the next refresh picks it up.
        routes["T"] = route(QueueData("a", 4, 4, PERM_RW), QueueData("b", 2, 2, PERM_RW))
        await trio.sleep(0.2)
        assert len(calls) == 2 and calls[1][0] == pytest.approx(t0 + 30.0)
        info = instance.publish_info("T")
        assert info is not None and len(info.queues) == 6
        await trio.sleep(60)
        assert [round(t - t0) for t, _ in calls] == [0, 30, 60, 90]
        # A failing refresh is logged and keeps the old route.
        del routes["T"]
        await trio.sleep(30)
        info = instance.publish_info("T")
        assert info is not None and len(info.queues) == 6
    finally:
        await instance.shutdown()
    n = len(calls)
    await trio.sleep(120)
    assert len(calls) == n  # the refresh task is gone


async def test_default_route_replaced_by_real_route_on_refresh(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    routes = {"TBW102": route(QueueData("a", 8, 8, 7))}

    async def fake_fetch(topic: str, timeout: float | None = None) -> TopicRouteData | None:
        return routes.get(topic)

    instance = MQClientInstance("127.0.0.1:9", poll_name_server_interval=30.0)
    monkeypatch.setattr(instance, "fetch_route_from_namesrv", fake_fetch)
    await instance.start()
    try:
        first = await instance.find_publish_info("New", default_topic_queue_nums=4)
        assert first.is_default and len(first.queues) == 4
        assert instance.topic_route("New") is None
        routes["New"] = route(QueueData("a", 6, 6, PERM_RW))
        await trio.sleep(31)
        info = instance.publish_info("New")
        assert info is not None and not info.is_default and len(info.queues) == 6
        assert instance.topic_route("New") is not None
    finally:
        await instance.shutdown()


async def test_instance_not_running() -> None:
    instance = MQClientInstance("127.0.0.1:9")
    with pytest.raises(MQClientError, match="not running"):
        await instance.update_topic_route("T")


def test_busy_poll_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETMQ_BUSY_POLL_US", raising=False)
    assert MQClientInstance("127.0.0.1:9876").busy_poll_us == 0
    assert MQClientInstance("127.0.0.1:9876", busy_poll_us=300).busy_poll_us == 300
    monkeypatch.setenv("ROCKETMQ_BUSY_POLL_US", "700")
    assert MQClientInstance("127.0.0.1:9876").busy_poll_us == 700
    assert MQClientInstance("127.0.0.1:9876", busy_poll_us=0).busy_poll_us == 0
    in_thread: list[int] = []
    t = threading.Thread(target=lambda: in_thread.append(
        MQClientInstance("127.0.0.1:9876").busy_poll_us))
    t.start()
    t.join()
    assert in_thread == [0]  # a loop in a helper thread spins only when asked explicitly
    monkeypatch.setenv("ROCKETMQ_BUSY_POLL_US", "lots")
    with pytest.raises(MQClientError, match="ROCKETMQ_BUSY_POLL_US"):
        MQClientInstance("127.0.0.1:9876")
    with pytest.raises(MQClientError, match="busy_poll_us"):
        MQClientInstance("127.0.0.1:9876", busy_poll_us=-3)


def test_failure_refreshes_once_per_interval_per_topic() -> None:
    r = FailureRefreshes(interval=1.0)
    assert r.due("a", 10.0)
    assert not r.due("a", 10.5)  # within the interval
    assert r.due("b", 10.5)  # another topic has its own
    assert not r.due("a", 10.999)
    assert r.due("a", 11.0)  # the interval passed
    assert not r.due("a", 11.2)


def test_failure_refreshes_bounds_the_topics_it_remembers() -> None:
    r = FailureRefreshes(interval=1.0, max_topics=2)
    assert r.due("a", 0.0) and r.due("b", 0.5)
    assert not r.due("c", 0.9)  # both recent: refused, nothing forgotten
    assert not r.due("a", 0.9)
    assert r.due("c", 1.2)  # "a" is forgotten (its interval passed), "b" is kept
    assert not r.due("b", 1.2)
    with pytest.raises(ValueError):
        FailureRefreshes(interval=0)
    with pytest.raises(ValueError):
        FailureRefreshes(max_topics=0)


async def test_refresh_route_after_failure_is_rate_limited(cluster: FakeCluster) -> None:
    instance = MQClientInstance(cluster.namesrv_addr)
    await instance.start()
    try:
        await instance.update_topic_route(FakeCluster.TOPIC)
        before = len(cluster.namesrv.route_requests)
        deadline = trio.current_time() + 3
        await instance.refresh_route_after_failure(FakeCluster.TOPIC, deadline)
        await instance.refresh_route_after_failure(FakeCluster.TOPIC, deadline)
        assert len(cluster.namesrv.route_requests) == before + 1
        # a topic the name server does not know: logged, not raised
        await instance.refresh_route_after_failure("NoSuchTopic", deadline)
    finally:
        await instance.shutdown()
