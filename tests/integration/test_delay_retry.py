"""Delay levels, send-back to %RETRY%, dead letters, against real brokers."""

from __future__ import annotations

import time

from client import Message, Producer, PullConsumer, PullStatus
from client.admin import MQAdmin
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import ConsumerSendMsgBackRequestHeader
from protocol.message import MessageQueue
from protocol.record import decode_msg_id
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster
from tests.waits import delays_delivered, routed, wait_until

TOPIC = "DelayTopic"
LEVELS = "1s 2s 3s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"


async def pull_queue(consumer: PullConsumer, mq: MessageQueue) -> list:  # type: ignore[type-arg]
    out: list = []  # type: ignore[type-arg]
    offset = 0
    while True:
        r = await consumer.pull(mq, "*", offset, 32)
        if r.pull_status != PullStatus.FOUND:
            return out
        out += r.msg_found_list
        offset = r.next_begin_offset


async def test_delay_survives_restart_and_is_never_early(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, messageDelayLevel=LEVELS)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1, write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "routed")
    mq = MessageQueue(TOPIC, "broker-a", 0)
    async with Producer("delay-producer", ns.addr) as producer:
        msg = Message(TOPIC, b"later", tags="T")
        msg.delay_time_level = 3  # 3 s with these levels
        sent_at = time.time()
        await producer.send(msg)
        await producer.send(Message(TOPIC, b"now"))
    async with PullConsumer("delay-consumer", ns.addr) as consumer:
        assert [m.body for m in await pull_queue(consumer, mq)] == [b"now"]
    broker.stop()  # restart while the message waits
    broker.start()
    async with MQAdmin(ns.addr) as admin:  # listening comes before registering
        await wait_until(routed(admin, TOPIC), 10, "routed again")
    async with PullConsumer("delay-consumer", ns.addr) as consumer:
        async def delivered() -> list:  # type: ignore[type-arg]
            return [m for m in await pull_queue(consumer, mq) if m.body == b"later"]
        got = await wait_until(delivered, 15, "delayed message delivered", interval=0.05)
        assert len(got) == 1
        m = got[0]
        assert m.store_timestamp / 1000 >= sent_at + 3 - 0.05, "delivered early"
        assert m.tags == "T" and "DELAY" not in m.properties and "REAL_TOPIC" not in m.properties
        # exactly once: the delay level has moved past it (a re-put and the level's
        # offset move together), so no second copy can come
        async with MQAdmin(ns.addr) as admin:
            await wait_until(delays_delivered(admin, [broker.addr]), 10, "every delay level done")
        assert len(await delivered()) == 1


async def test_send_back_retry_then_dlq(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, messageDelayLevel=LEVELS)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1, write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "routed")
    async with Producer("retry-producer", ns.addr) as producer:
        r = await producer.send(Message(TOPIC, b"fails", keys="k1"))
    group = "g1"
    async with RemotingClient() as rc, PullConsumer(group, ns.addr) as consumer:
        original = (await pull_queue(consumer, MessageQueue(TOPIC, "broker-a", 0)))[0]

        async def send_back(msg_offset: int, origin: str, max_times: int) -> None:
            h = ConsumerSendMsgBackRequestHeader(offset=msg_offset, group=group, delay_level=0,
                                                 origin_msg_id=origin, origin_topic=TOPIC,
                                                 max_reconsume_times=max_times)
            resp = await rc.invoke(broker.addr, RemotingCommand.request(
                RequestCode.CONSUMER_SEND_MSG_BACK, h.to_fields()), 5)
            assert resp.code == ResponseCode.SUCCESS, resp.remark

        retry_mq = MessageQueue("%RETRY%" + group, "broker-a", 0)
        current = original
        for attempt in range(1, 4):
            await send_back(current.commit_log_offset, original.msg_id, 3)

            async def nth(n: int = attempt) -> list:  # type: ignore[type-arg]
                try:
                    msgs = await pull_queue(consumer, retry_mq)
                except Exception:
                    return []
                return msgs if len(msgs) >= n else []
            msgs = await wait_until(nth, 15, f"retry {attempt} delivered", interval=0.1)
            current = msgs[attempt - 1]
            assert current.body == b"fails" and current.reconsume_times == attempt
            assert current.properties["RETRY_TOPIC"] == TOPIC
            assert current.properties["ORIGIN_MESSAGE_ID"] == original.msg_id
            assert current.keys == "k1"
        # failing its third retry (reconsume times 3 = maxReconsumeTimes): dead letter
        await send_back(current.commit_log_offset, original.msg_id, 3)
        async with MQAdmin(ns.addr) as admin:
            await wait_until(routed(admin, "%DLQ%" + group), 10, "DLQ routed")
            status = await admin.topic_status("%DLQ%" + group)
            assert sum(q.max_offset for q in status) == 1
            route = await admin.topic_route("%DLQ%" + group)
            assert route.queue_datas[0].perm == 2  # write only: consumers do not read it
    assert decode_msg_id(original.msg_id)[0] == broker.addr and r.msg_id
