"""Name-server liveness against real broker processes: freeze, thaw, kill."""

from __future__ import annotations

import time

import trio

from client import Message, Producer
from client.admin import MQAdmin
from tests.integration.cluster import Cluster
from tests.waits import wait_until

TOPIC = "LiveTopic"


async def route_brokers(admin: MQAdmin) -> set[str]:
    try:
        route = await admin.topic_route(TOPIC)
    except Exception:
        return set()
    return {q.broker_name for q in route.queue_datas}


async def test_frozen_broker_dropped_then_back(cluster: Cluster) -> None:
    ns = cluster.namesrv(scanNotActiveBrokerInterval=200, brokerChannelExpiredTime=3000)
    a = cluster.broker("broker-a", ns.addr, registerBrokerIntervalMs=1000)
    cluster.broker("broker-b", ns.addr, registerBrokerIntervalMs=1000)
    async with MQAdmin(ns.addr) as admin:
        await wait_until(lambda: _count(admin, 2), 10, "both brokers registered")
        await admin.create_topic(TOPIC, cluster="DefaultCluster", read_queue_nums=4, write_queue_nums=4)
        await wait_until(lambda: _has(admin, {"broker-a", "broker-b"}), 10, "route on both")

        async with Producer("live-producer", ns.addr, poll_name_server_interval=0.3,
                            send_msg_timeout=3.0) as producer:
            a.freeze()  # connections stay open; only the liveness scan can notice
            frozen_at = time.monotonic()
            await wait_until(lambda: _has(admin, {"broker-b"}), 10, "broker-a dropped")
            assert time.monotonic() - frozen_at >= 2.0, "dropped before the liveness window"

            async def producer_sees_only_b() -> bool:
                qs = await producer.fetch_publish_message_queues(TOPIC)
                return {q.broker_name for q in qs} == {"broker-b"}

            await wait_until(producer_sees_only_b, 5, "producer route refreshed")
            with trio.fail_after(20):
                for i in range(200):
                    r = await producer.send(Message(TOPIC, f"m{i}".encode()))
                    assert r.message_queue.broker_name == "broker-b"

            a.thaw()
            await wait_until(lambda: _has(admin, {"broker-a", "broker-b"}), 10, "broker-a back")


async def test_killed_broker_dropped_at_once(cluster: Cluster) -> None:
    ns = cluster.namesrv()  # default 120 s window: only the closed connection can explain a drop
    a = cluster.broker("broker-a", ns.addr)
    cluster.broker("broker-b", ns.addr)
    async with MQAdmin(ns.addr) as admin:
        await wait_until(lambda: _count(admin, 2), 10, "both brokers registered")
        a.kill()
        t0 = time.monotonic()
        await wait_until(lambda: _count_exact(admin, 1), 5, "killed broker dropped")
        assert time.monotonic() - t0 < 5


async def _count(admin: MQAdmin, n: int) -> bool:
    return len((await admin.cluster_info())["brokerAddrTable"]) >= n


async def _count_exact(admin: MQAdmin, n: int) -> bool:
    return len((await admin.cluster_info())["brokerAddrTable"]) == n


async def _has(admin: MQAdmin, names: set[str]) -> bool:
    return await route_brokers(admin) == names
