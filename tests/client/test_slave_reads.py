"""Which broker of a master/slave group a consumer talks to (fake brokers):
pulls follow each response's suggestion, fall back to the master, else a
slave; offsets go to the master, else a slave, and are written again to a
master that comes back; a pull that cannot reach its broker refreshes the
route; the group's members are joined from every broker."""

from __future__ import annotations

from collections.abc import Callable

import trio

from client import MessageQueue, MQClientError, PullConsumer
from client.consumer_api import ConsumerAPI
from client.instance import MQClientInstance
from client.offset_store import RemoteBrokerOffsetStore
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.route import MASTER_ID
from protocol.trio import RemotingConnection
from tests.client.fakes import FakeBroker, FakeCluster, closed_port_addr

TOPIC = FakeCluster.TOPIC
GROUP = "slave_read_group"
MQ = MessageQueue(TOPIC, "broker-a", 1)


async def with_slave(cluster: FakeCluster, nursery: trio.Nursery) -> tuple[FakeBroker, FakeBroker]:
    """broker-a's master and a started slave, both routed; each holds 3 messages
    of MQ's queue with bodies telling them apart."""
    master = cluster.broker("broker-a")
    slave = FakeBroker("broker-a")
    await slave.start(nursery)
    cluster.namesrv.set_route(TOPIC, cluster.brokers, slaves={"broker-a": slave.addr})
    for i in range(3):
        master.put(TOPIC, 1, b"m%d" % i)
        slave.put(TOPIC, 1, b"s%d" % i)
    return master, slave


def master_gone(cluster: FakeCluster, slave: FakeBroker, master_addr: str = "") -> None:
    """The name server's view once broker-a's master is dropped (or at ``master_addr``)."""
    cluster.namesrv.set_route(
        TOPIC, [("broker-a", master_addr), cluster.broker("broker-b")],
        slaves={"broker-a": slave.addr})


async def test_pulls_follow_the_suggestion_there_and_back(
        cluster: FakeCluster, nursery: trio.Nursery) -> None:
    master, slave = await with_slave(cluster, nursery)
    master.suggest_which_broker_id = 1  # a cold read: go to the slave
    slave.suggest_which_broker_id = MASTER_ID  # caught up: back to the master
    async with PullConsumer(GROUP, cluster.namesrv_addr) as c:
        bodies = [(await c.pull(MQ, "*", i, 1)).msg_found_list[0].body for i in range(3)]
        assert bodies == [b"m0", b"s1", b"m2"]
        assert c._api is not None and c._api.pull_from[MQ] == 1


async def test_a_suggestion_without_an_address_falls_back(
        cluster: FakeCluster, nursery: trio.Nursery) -> None:
    master, slave = await with_slave(cluster, nursery)
    master.suggest_which_broker_id = 5  # no broker 5 in the route: the master
    async with PullConsumer(GROUP, cluster.namesrv_addr) as c:
        assert (await c.pull(MQ, "*", 0, 1)).msg_found_list[0].body == b"m0"
        assert (await c.pull(MQ, "*", 1, 1)).msg_found_list[0].body == b"m1"
        # the master dropped from the routes: any slave
        master_gone(cluster, slave)
        assert c._instance is not None
        await c._instance.update_topic_route(TOPIC)
        assert (await c.pull(MQ, "*", 2, 1)).msg_found_list[0].body == b"s2"


async def test_a_failed_pull_refreshes_the_route(
        cluster: FakeCluster, nursery: trio.Nursery) -> None:
    master, slave = await with_slave(cluster, nursery)
    dead = closed_port_addr()
    master_gone(cluster, slave, master_addr=dead)  # the master died: nothing listens
    # the long periodic refresh never runs in this test
    async with PullConsumer(GROUP, cluster.namesrv_addr, poll_name_server_interval=3600) as c:
        assert c._instance is not None
        await c._instance.update_topic_route(TOPIC)
        assert c._instance.find_broker_addr("broker-a") == dead
        master_gone(cluster, slave)  # the name server noticed
        asked = len(cluster.namesrv.route_requests)
        with trio.fail_after(10):
            try:
                await c.pull(MQ, "*", 0, 1)
            except MQClientError as exc:
                assert "failed" in str(exc)
            assert len(cluster.namesrv.route_requests) > asked
            # the next pull goes to the slave
            assert (await c.pull(MQ, "*", 0, 1)).msg_found_list[0].body == b"s0"


async def test_offsets_go_to_a_slave_while_the_master_is_down(
        cluster: FakeCluster, nursery: trio.Nursery) -> None:
    master, slave = await with_slave(cluster, nursery)
    master_gone(cluster, slave)
    slave.min_offsets[(TOPIC, 2)] = 4
    async with PullConsumer(GROUP, cluster.namesrv_addr) as c:
        await c.update_consume_offset(MQ, 2)
        assert slave.consumer_offsets[(GROUP, TOPIC, 1)] == 2
        assert await c.fetch_consume_offset(MQ) == 2
        assert await c.max_offset(MQ) == 3
        assert await c.min_offset(MessageQueue(TOPIC, "broker-a", 2)) == 4
    assert master.requests == []


async def test_offsets_are_written_again_when_the_master_returns(
        cluster: FakeCluster, nursery: trio.Nursery) -> None:
    master, slave = await with_slave(cluster, nursery)
    master_gone(cluster, slave)
    inst = MQClientInstance(cluster.namesrv_addr, poll_name_server_interval=3600)
    await inst.start()
    try:
        store = RemoteBrokerOffsetStore(ConsumerAPI(inst, GROUP))
        await inst.update_topic_route(TOPIC)
        store.update_offset(MQ, 2)
        await store.persist_all({MQ})
        assert slave.consumer_offsets[(GROUP, TOPIC, 1)] == 2
        updates = len(slave.requests_of(RequestCode.UPDATE_CONSUMER_OFFSET))
        await store.persist_all({MQ})  # unchanged, same broker: not written again
        assert len(slave.requests_of(RequestCode.UPDATE_CONSUMER_OFFSET)) == updates
        # the master is back (its table older than the slave's): written there too
        cluster.namesrv.set_route(TOPIC, cluster.brokers, slaves={"broker-a": slave.addr})
        await inst.update_topic_route(TOPIC)
        await store.persist_all({MQ})
        assert master.consumer_offsets[(GROUP, TOPIC, 1)] == 2
        await store.persist_all({MQ})
        assert len(master.requests_of(RequestCode.UPDATE_CONSUMER_OFFSET)) == 1
    finally:
        await inst.shutdown()


async def test_group_members_are_joined_from_every_broker(
        cluster: FakeCluster, nursery: trio.Nursery) -> None:
    master, slave = await with_slave(cluster, nursery)

    def ids(*names: str) -> Callable[[RemotingConnection, RemotingCommand], RemotingCommand]:
        def handler(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
            return cmd.response(ResponseCode.SUCCESS,
                                body=pack_body({"consumerIdList": list(names)}))
        return handler

    # a master just restarted has heard from one member; its slave from both
    master.handlers.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, ids("c1"))
    slave.handlers.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, ids("c2", "c1"))
    cluster.broker("broker-b").handlers.register(
        RequestCode.GET_CONSUMER_LIST_BY_GROUP, ids("c1", "c2"))
    inst = MQClientInstance(cluster.namesrv_addr, poll_name_server_interval=3600)
    await inst.start()
    try:
        api = ConsumerAPI(inst, GROUP)
        await inst.update_topic_route(TOPIC)
        assert await api.consumer_ids(TOPIC) == ["c1", "c2"]
        # a broker that cannot be reached is left out
        master_gone(cluster, slave, master_addr=closed_port_addr())
        await inst.update_topic_route(TOPIC)
        assert await api.consumer_ids(TOPIC) == ["c1", "c2"]
        assert await api.consumer_ids("Unrouted") == []
    finally:
        await inst.shutdown()
