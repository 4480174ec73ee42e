"""A slave's metadata copy between real daemons on 127.0.0.1: it never loses the
slave's state. A master restarted with an empty store empties nothing on its
slave; offsets committed on the slave while the master is down reach the master
when it returns (and the master's never go back); an admin's reset on the
master (downwards) reaches the slave and is not undone by it."""

from __future__ import annotations

import shutil
from typing import Any

from client import Message, MessageQueue, Producer, SendStatus
from client.admin import MQAdmin
from protocol.body import pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import UpdateConsumerOffsetRequestHeader
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster, Daemon
from tests.waits import routed, wait_until

TOPIC = "HaMetaTopic"
GROUP = "ha-meta-group"
KEY = f"{TOPIC}@{GROUP}"
QUEUES = 4
BROKER: dict[str, Any] = {"mapedFileSizeCommitLog": 1 << 20,
                          "mapedFileSizeConsumeQueue": 20 * 10_000, "slaveSyncInterval": 300}


def pair(cluster: Cluster, ns: str) -> tuple[Daemon, Daemon]:
    """broker-a: an ASYNC_MASTER and its slave, syncing every 300 ms."""
    master = cluster.broker("broker-a", ns, brokerRole="ASYNC_MASTER", **BROKER)
    slave = cluster.broker("broker-a-s", ns, brokerName="broker-a", brokerId=1,
                           brokerRole="SLAVE", **BROKER)
    return master, slave


async def call(rc: RemotingClient, addr: str, code: int, fields: dict[str, Any] | None = None,
               body: bytes | None = None) -> Any:
    r = await rc.invoke(addr, RemotingCommand.request(code, fields, body), 5)
    assert r.code == ResponseCode.SUCCESS, r
    return unpack_body(r.body) if r.body else None


async def commit(rc: RemotingClient, addr: str, offsets: dict[int, int], **extra: Any) -> None:
    for q, offset in offsets.items():
        h = UpdateConsumerOffsetRequestHeader(GROUP, TOPIC, q, offset, **extra)
        await call(rc, addr, RequestCode.UPDATE_CONSUMER_OFFSET, h.to_fields())


async def offsets_of(rc: RemotingClient, addr: str) -> dict[int, int]:
    """The group's committed offsets of TOPIC on the broker at ``addr``."""
    body = await call(rc, addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
    return {int(q): o for q, o in (body["offsetTable"].get(KEY) or {}).items()}


async def reset_version(rc: RemotingClient, addr: str) -> int:
    body = await call(rc, addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
    return int((body.get("resetVersions") or {}).get(KEY, 0))


async def topics_of(rc: RemotingClient, addr: str) -> set[str]:
    body = await call(rc, addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    return set(body["topicConfigTable"])


async def groups_of(rc: RemotingClient, addr: str) -> dict[str, Any]:
    body = await call(rc, addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    table: dict[str, Any] = body["subscriptionGroupTable"]
    return table


async def rounds(rc: RemotingClient, slave: Daemon) -> tuple[int, int]:
    """The slave's metadata sync rounds: (completed, skipped for an untrusted master)."""
    table = (await call(rc, slave.addr, RequestCode.GET_BROKER_RUNTIME_INFO))["table"]
    return int(table.get("slaveSyncRounds", 0)), int(table.get("slaveSyncSkipped", 0))


async def after_rounds(rc: RemotingClient, slave: Daemon, n: int) -> bool:
    """Wait until the slave has completed (or skipped) ``n`` more rounds; True
    when they were completed."""
    done0, skipped0 = await rounds(rc, slave)

    async def passed() -> bool:
        done, skipped = await rounds(rc, slave)
        return done >= done0 + n or skipped >= skipped0 + n
    await wait_until(passed, 15, f"{n} more metadata sync rounds on the slave")
    return (await rounds(rc, slave))[0] >= done0 + n


async def create_topic(ns: Daemon, master: Daemon, topic: str = TOPIC) -> None:
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(topic, broker_addr=master.addr, read_queue_nums=QUEUES,
                                 write_queue_nums=QUEUES)
        await wait_until(routed(admin, topic), 10, f"{topic} routed")


async def on_slave(rc: RemotingClient, slave: Daemon, want: dict[int, int], what: str) -> None:
    async def there() -> bool:
        return await offsets_of(rc, slave.addr) == want
    await wait_until(there, 15, what)


async def test_an_empty_master_empties_nothing_on_its_slave(cluster: Cluster) -> None:
    """The master's store is lost and it restarts empty: the slave keeps its
    topic, group and offsets through several rounds (RocketMQ's slave copies the
    master's tables as they are, and would hold none of them)."""
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr)
    await create_topic(ns, master)
    offsets = {q: 100 + q for q in range(QUEUES)}
    async with RemotingClient() as rc:
        await call(rc, master.addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                   body=pack_body({"groupName": GROUP, "retryMaxTimes": 3}))
        await commit(rc, master.addr, offsets)

        async def copied() -> bool:
            return (TOPIC in await topics_of(rc, slave.addr)
                    and GROUP in await groups_of(rc, slave.addr)
                    and await offsets_of(rc, slave.addr) == offsets)
        await wait_until(copied, 15, "the topic, group and offsets on the slave")

        master.stop()
        shutil.rmtree(cluster.root / "store-broker-a")
        master.start()
        # something only the new master has: a round from it takes it (when the
        # slave syncs from an empty master at all: one whose log it does not trust
        # is skipped)
        _, skipped0 = await rounds(rc, slave)
        await create_topic(ns, master, "HaMetaMarker")

        async def marker_or_skipped() -> bool:
            return ("HaMetaMarker" in await topics_of(rc, slave.addr)
                    or (await rounds(rc, slave))[1] >= skipped0 + 3)
        await wait_until(marker_or_skipped, 15, "a round from the empty master")

        async def kept() -> None:
            assert TOPIC in await topics_of(rc, slave.addr)
            group = (await groups_of(rc, slave.addr)).get(GROUP)
            assert group is not None and group["retryMaxTimes"] == 3
            assert await offsets_of(rc, slave.addr) == offsets
        await kept()
        if await after_rounds(rc, slave, 3):
            assert "HaMetaMarker" in await topics_of(rc, slave.addr)
        await kept()


async def test_offsets_committed_on_the_slave_reach_the_returned_master(cluster: Cluster
                                                                       ) -> None:
    """While the master is down consumers commit to the slave; when it returns
    (same store, older offsets) the slave's newer offsets reach it, and neither
    side goes back."""
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr)
    await create_topic(ns, master)
    before = {q: 10 * (q + 1) for q in range(QUEUES)}
    async with RemotingClient() as rc:
        await commit(rc, master.addr, before)
        await on_slave(rc, slave, before, "the master's offsets on the slave")

        master.stop()
        newer = {q: 1000 + q for q in range(QUEUES)}
        await commit(rc, slave.addr, newer)  # what our client and RocketMQ's do
        assert await offsets_of(rc, slave.addr) == newer
        master.start()

        async def on_master() -> bool:
            return await offsets_of(rc, master.addr) == newer
        await wait_until(on_master, 20, "the slave's offsets on the returned master")
        # a slave's offset is taken only forward
        await commit(rc, master.addr, {0: 5}, increase_only=True, reset_version=0)
        assert await offsets_of(rc, master.addr) == newer

        assert await after_rounds(rc, slave, 3)
        assert await offsets_of(rc, master.addr) == newer
        assert await offsets_of(rc, slave.addr) == newer


async def test_an_admin_reset_on_the_master_reaches_the_slave(cluster: Cluster) -> None:
    """mqadmin resetOffsetByTime on the master moves the group back: the slave
    takes the lower offsets (the reset counter says so) and does not send its
    higher ones back."""
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr)
    await create_topic(ns, master)
    async with Producer("ha-meta-producer", ns.addr) as producer:
        for i in range(4 * QUEUES):
            r = await producer.send(Message(TOPIC, b"m%d" % i),
                                    MessageQueue(TOPIC, "broker-a", i % QUEUES))
            assert r.send_status == SendStatus.SEND_OK, r
    consumed = {q: 4 for q in range(QUEUES)}
    async with RemotingClient() as rc:
        await commit(rc, master.addr, consumed)
        await on_slave(rc, slave, consumed, "the master's offsets on the slave")

        async with MQAdmin(ns.addr) as admin:
            rows = await admin.reset_offset_by_time(GROUP, TOPIC, 0)
        reset = {q: o for _, q, o in rows}
        assert reset == {q: 0 for q in range(QUEUES)}
        assert await offsets_of(rc, master.addr) == reset
        version = await reset_version(rc, master.addr)
        assert version >= 1

        async def taken() -> bool:
            return (await offsets_of(rc, slave.addr) == reset
                    and await reset_version(rc, slave.addr) == version)
        await wait_until(taken, 15, "the reset offsets and counter on the slave")

        assert await after_rounds(rc, slave, 3)
        assert await offsets_of(rc, master.addr) == reset  # not sent back up
        assert await offsets_of(rc, slave.addr) == reset
