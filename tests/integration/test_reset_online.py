"""mqadmin resetOffsetByTime while a push consumer of the group runs, with listener
calls in progress: the broker moves the group's offsets back and tells the consumer
(RESET_CONSUMER_CLIENT_OFFSET), which consumes again from there without a restart;
its old, higher offsets are not written back over the reset."""

from __future__ import annotations

import json
import time

import trio

from client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from client.admin import MQAdmin
from protocol.message import MessageQueue
from tests.integration.cluster import Cluster
from tests.integration.test_admin_groups import make_topic, mqadmin_process, start
from tests.waits import wait_until

TOPIC = "ResetOnlineTopic"
GROUP = "reset_online_group"
QUEUES = 2


async def test_reset_by_time_reaches_a_running_push_consumer(cluster: Cluster) -> None:
    (ns,), b = start(cluster)
    n = ns.addr
    await make_topic(n, b, TOPIC, QUEUES)
    got: list[bytes] = []
    gate = trio.Event()

    async def listener(msgs: list, ctx: object) -> ConsumeConcurrentlyStatus:
        got.extend(m.body for m in msgs)
        if msgs[0].body.startswith(b"busy"):
            await gate.wait()  # in progress while the reset comes
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def count(prefix: bytes) -> int:
        return sum(1 for body in got if body.startswith(prefix))

    consumer = PushConsumer(GROUP, n, persist_consumer_offset_interval=0.2)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listener)
    # the consumer first: the producer shares its client instance (offsets persisted
    # every 0.2 s)
    async with consumer, Producer("reset_online_producer", n) as producer, MQAdmin(n) as admin:
        async def send(prefix: str, total: int) -> None:
            for i in range(total):
                await producer.send(Message(TOPIC, f"{prefix}{i}".encode()),
                                    MessageQueue(TOPIC, "broker-a", i % QUEUES))

        async def all_committed() -> bool:
            """The broker's committed offsets and the consumer's own at every queue's end."""
            rows = await admin.consume_stats(GROUP, TOPIC)
            return len(rows) == QUEUES and all(
                r["lag"] == 0 and consumer.offset_table().get(
                    MessageQueue(TOPIC, "broker-a", r["queueId"])) == r["brokerOffset"]
                for r in rows)

        await send("early", 4)
        await wait_until(lambda: count(b"early") == 4, 20, "the early messages consumed")
        await wait_until(all_committed, 20, "the early messages committed")
        since = int(time.time() * 1000)  # after the early messages were stored
        await send("late", 6)
        await wait_until(lambda: count(b"late") == 6, 20, "the late messages consumed")
        await wait_until(all_committed, 20, "the late messages committed")
        await send("busy", 4)
        await wait_until(lambda: count(b"busy") == 4, 20, "listener calls in progress")

        rows = json.loads(await mqadmin_process("resetOffsetByTime", "-n", n, "-g", GROUP,
                                                "-t", TOPIC, "-s", str(since), "--json"))
        assert {r["queueId"]: r["offset"] for r in rows} == {0: 2, 1: 2}  # the first late ones

        # the consumer takes the reset at once, its listener calls still in progress:
        # the late messages come again, not the early ones
        await wait_until(lambda: count(b"late") >= 12, 20, "the late messages consumed again")
        gate.set()
        await wait_until(all_committed, 20, "the offsets committed to the end again")
        ends = {r["queueId"]: r["brokerOffset"] for r in await admin.consume_stats(GROUP, TOPIC)}
        assert ends == {0: 7, 1: 7}
        # the busy ones: those in progress, and again from the reset offsets on
        assert (count(b"early"), count(b"late"), count(b"busy")) == (4, 12, 8)
