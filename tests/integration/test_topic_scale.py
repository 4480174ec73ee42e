"""Many topics against real daemons: 10,000 admin creations, all routable,
all back after a kill -9, all listed by the name server; a forged
REGISTER_BROKER cannot take a live broker's routes away."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from client.admin import MQAdmin
from protocol.body import pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPICS = 10_000
IN_FLIGHT = 64


async def for_each(names: list[str], fn: Callable[[str], Awaitable[None]]) -> None:
    """``fn(name)`` for every name, IN_FLIGHT at a time."""
    limit = trio.Semaphore(IN_FLIGHT)

    async def one(name: str) -> None:
        try:
            await fn(name)
        finally:
            limit.release()

    async with trio.open_nursery() as nursery:
        for name in names:
            await limit.acquire()
            nursery.start_soon(one, name)


async def create_all(admin: MQAdmin, broker: str, names: list[str]) -> None:
    async def create(name: str) -> None:
        await admin.create_topic(name, broker_addr=broker, read_queue_nums=2,
                                 write_queue_nums=2)

    await for_each(names, create)


async def broker_topics(client: RemotingClient, addr: str) -> set[str]:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), 30)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return set(unpack_body(resp.body)["topicConfigTable"])


async def listed(admin: MQAdmin, names: set[str]) -> bool:
    return names <= set(await admin.topic_list())


async def all_routed(admin: MQAdmin, names: list[str]) -> None:
    missing: list[str] = []

    async def check(name: str) -> None:
        try:
            route = await admin.topic_route(name)
            if [q.write_queue_nums for q in route.queue_datas] != [2]:
                missing.append(name)
        except Exception:
            missing.append(name)

    await for_each(names, check)
    assert not missing, f"{len(missing)} topics without a route, e.g. {missing[:3]}"


async def test_ten_thousand_topics_routable_and_back_after_kill_9(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr)
    names = [f"Scale-{i:05d}" for i in range(TOPICS)]
    async with MQAdmin(ns.addr, timeout=30) as admin, RemotingClient() as client:
        with trio.fail_after(120):
            await create_all(admin, broker.addr, names)
        assert set(names) <= await broker_topics(client, broker.addr)
        await wait_until(lambda: listed(admin, set(names)), 60, "the name server lists them all")
        await all_routed(admin, names)

        # every creation was answered, so every one is on disk: a kill -9 loses none
        broker.kill()
        broker.start(timeout=60)
        client.close_connection(broker.addr)
        assert set(names) <= await broker_topics(client, broker.addr)
        await wait_until(lambda: listed(admin, set(names)), 60, "listed again after the restart")
        await all_routed(admin, names[::50])


async def test_a_forged_registration_leaves_the_real_broker_routed(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr)
    async with MQAdmin(ns.addr) as admin, RemotingClient() as forger:
        await admin.create_topic("RealTopic", broker_addr=broker.addr)
        await wait_until(routed(admin, "RealTopic"), 30, "RealTopic routed")
        header = RegisterBrokerRequestHeader(broker_name="broker-a", broker_addr=broker.addr,
                                             cluster_name="DefaultCluster", broker_id=0)
        body = pack_body({"topicConfigTable": {},
                          "dataVersion": {"timestamp": 2**40, "counter": 1}})
        resp = await forger.invoke(ns.addr, RemotingCommand.request(
            RequestCode.REGISTER_BROKER, header.to_fields(), body), 10)
        assert resp.code == ResponseCode.NO_PERMISSION, resp
        assert "another live connection" in (resp.remark or "")
        route = await admin.topic_route("RealTopic")  # at once: nothing was replaced
        assert [q.broker_name for q in route.queue_datas] == ["broker-a"]

        unregister = UnRegisterBrokerRequestHeader("broker-a", broker.addr, "DefaultCluster", 0)
        resp = await forger.invoke(ns.addr, RemotingCommand.request(
            RequestCode.UNREGISTER_BROKER, unregister.to_fields()), 10)
        assert resp.code == ResponseCode.NO_PERMISSION, resp
        route = await admin.topic_route("RealTopic")
        assert route.broker_datas[0].broker_addrs == {0: broker.addr}
    assert "REGISTER_BROKER refused" in ns.log_text()

    # the real broker restarting registers again (its old connection went with it)
    broker.stop()
    broker.start()
    async with MQAdmin(ns.addr) as admin:
        await wait_until(routed(admin, "RealTopic"), 30, "RealTopic routed after the restart")
