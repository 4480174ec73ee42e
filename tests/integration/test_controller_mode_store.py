"""A real broker in controller mode, before any controller speaks to it:
sends to an ASYNC_MASTER are stored but never shown to consumers (no
SyncStateSet, so no confirm offset); a SYNC_MASTER refuses them
IN_SYNC_REPLICAS_NOT_ENOUGH; a kill -9 and a restart keep both rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from client import Message, Producer, PullConsumer, PullStatus, SendStatus
from client.admin import MQAdmin
from client.errors import MQBrokerError
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPIC = "CtlTopic"


async def pulled(ns: str) -> int:
    found = 0
    async with PullConsumer("ctl-check", ns) as consumer:
        for mq in await consumer.fetch_subscribe_message_queues(TOPIC):
            r = await consumer.pull(mq, "*", 0, 32)
            if r.pull_status == PullStatus.FOUND:
                found += len(r.msg_found_list)
    return found


async def test_nothing_unconfirmed_is_shown_across_a_kill_9(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-c", ns.addr, enableControllerMode="true",
                            haMasterStartWaitMs=0)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2,
                                 write_queue_nums=2)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
        async with Producer("ctl-producer", ns.addr, retry_times_when_send_failed=0) as p:
            for i in range(20):
                r = await p.send(Message(TOPIC, b"m%d" % i))
                assert r.send_status == SendStatus.SEND_OK
        info = await admin.broker_runtime_info(broker.addr)
        stored = int(info["commitLogMaxOffset"])
        assert stored > 0
        # the state that implies quiet: stored, and the dispatch limit where it started
        assert info["ha"]["dispatchLimit"] == 0 and info["ha"]["syncStateSet"] is None, info
    assert await pulled(ns.addr) == 0
    broker.kill()
    assert (Path(cluster.root) / "store-broker-c" / "abort").exists()
    broker.start()
    async with MQAdmin(ns.addr) as admin:
        await wait_until(routed(admin, TOPIC), 10, "broker back")
        info = await admin.broker_runtime_info(broker.addr)
        assert int(info["commitLogMaxOffset"]) == stored
    assert await pulled(ns.addr) == 0
    broker.stop()


async def test_a_sync_master_without_a_sync_state_set_refuses_sends(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-d", ns.addr, enableControllerMode="true",
                            brokerRole="SYNC_MASTER", haMasterStartWaitMs=0)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
        async with Producer("ctl-producer-2", ns.addr, retry_times_when_send_failed=0) as p:
            with pytest.raises(MQBrokerError) as err:
                await p.send(Message(TOPIC, b"refused"))
        assert "in-sync replicas not enough" in str(err.value)
        info = await admin.broker_runtime_info(broker.addr)
        assert int(info["commitLogMaxOffset"]) == 0  # nothing written
    broker.stop()
