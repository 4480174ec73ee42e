"""mqadmin consumerProgress, resetOffsetByTime and consumerConnection."""

from __future__ import annotations

import time

from client import Message, Producer, PullConsumer
from client.admin import MQAdmin
from protocol.body import pack_body
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.message import MessageQueue
from protocol.trio import RemotingClient
from tests.integration.cluster import Cluster
from tests.integration.test_cli import mqadmin_process as mqadmin
from tests.waits import routed, wait_until

TOPIC = "ProgressTopic"


async def test_progress_reset_and_connections(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2, write_queue_nums=2)
        await wait_until(routed(admin, TOPIC), 10, "routed")
    async with Producer("progress-producer", ns.addr) as producer:
        for i in range(10):
            await producer.send(Message(TOPIC, b"m%d" % i), MessageQueue(TOPIC, "broker-a", i % 2))
    async with PullConsumer("pg", ns.addr) as consumer:
        await consumer.update_consume_offset(MessageQueue(TOPIC, "broker-a", 0), 2)
        await consumer.update_consume_offset(MessageQueue(TOPIC, "broker-a", 1), 5)
    out = mqadmin("consumerProgress", "-n", ns.addr, "-g", "pg")
    rows = [line.split() for line in out.splitlines() if line.startswith(TOPIC)]
    assert [(r[2], r[3], r[4], r[5]) for r in rows] == [("0", "5", "2", "3"), ("1", "5", "5", "0")]
    assert "Diff Total: 3" in out

    mqadmin("resetOffsetByTime", "-n", ns.addr, "-g", "pg", "-t", TOPIC, "-s", "0")
    assert "Diff Total: 10" in mqadmin("consumerProgress", "-n", ns.addr, "-g", "pg", "-t", TOPIC)
    future = str(int(time.time() * 1000) + 60_000)
    mqadmin("resetOffsetByTime", "-n", ns.addr, "-g", "pg", "-t", TOPIC, "-s", future)
    assert "Diff Total: 0" in mqadmin("consumerProgress", "-n", ns.addr, "-g", "pg")

    async with RemotingClient() as rc:
        hb = {"clientID": "client-x", "consumerDataSet": [{
            "groupName": "pg", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "TagA || TagB"}]}]}
        await rc.invoke(broker.addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=pack_body(hb)), 3)
        out = mqadmin("consumerConnection", "-n", ns.addr, "-g", "pg")
        assert "client-x" in out and "TagA || TagB" in out and "CONSUME_FROM_FIRST_OFFSET" in out
