"""Compressed bodies through a real broker: stored as sent, read back whole."""

from __future__ import annotations

from client import Message, Producer, PullConsumer, PullStatus
from client.admin import MQAdmin
from protocol.record import FLAG_COMPRESSED
from tests.integration.cluster import Cluster
from tests.waits import wait_until

TOPIC = "CompressTopic"


async def test_large_bodies_are_stored_compressed_and_read_uncompressed(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr)
    bodies = [f"line {i} of a long message\n".encode() * (40 * (i + 1)) for i in range(6)]
    bodies.append(b"short")
    async with MQAdmin(ns.addr) as admin:
        await wait_until(lambda: _registered(admin), 10, "the broker registered")
        await admin.create_topic(TOPIC, cluster="DefaultCluster", read_queue_nums=1,
                                 write_queue_nums=1)
    async with Producer("compress-producer", ns.addr) as producer:
        for body in bodies:
            await producer.send(Message(TOPIC, body, tags="T"))
    async with PullConsumer("compress-consumer", ns.addr) as consumer:
        (mq,) = await consumer.fetch_subscribe_message_queues(TOPIC)
        result = await consumer.pull(mq, "*", 0, 32)
    assert result.pull_status == PullStatus.FOUND
    got = result.msg_found_list
    assert [m.body for m in got] == bodies
    # stored compressed: the record keeps the flag and a smaller store size
    assert [bool(m.sys_flag & FLAG_COMPRESSED) for m in got] == [len(b) >= 4096 for b in bodies]
    big = got[-2]
    assert big.store_size < len(big.body)
    assert broker.addr


async def _registered(admin: MQAdmin) -> bool:
    info = await admin.cluster_info()
    return bool(info["brokerAddrTable"])
