"""ClientConfig.namespace against a real broker: two apps send to and consume (SimpleConsumer,
PullConsumer, LitePullConsumer, PushConsumer) the same topic and group names, each in its own namespace, and each gets only
its own messages, named as it named them; the broker holds the namespaced topics."""

from __future__ import annotations

from collections.abc import Callable

import trio

from client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    LitePullConsumer,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
)
from client.admin import MQAdmin
from client.config import ClientConfig
from client.simple_consumer import ReceivedMessage, SimpleConsumer
from protocol.message import MessageExt
from tests.integration.cluster import Cluster
from tests.waits import wait_until

COUNT = 5


def recorder(into: list[tuple[str, str, str]]) -> Callable[..., ConsumeConcurrentlyStatus]:
    """A push listener noting each message's body, topic and its context's queue topic."""
    def listener(msgs: list[MessageExt],
                 ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        into.extend((m.body.decode(), m.topic, ctx.message_queue.topic) for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    return listener


async def test_two_namespaces_share_names_not_messages(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("ns-broker", ns.addr)
    async with MQAdmin(ns.addr) as admin:
        for app in ("app1", "app2"):
            await admin.create_topic(f"{app}%Shared", broker_addr=broker.addr,
                                     read_queue_nums=2, write_queue_nums=2)
    got: dict[str, list[ReceivedMessage]] = {}
    for app in ("app1", "app2"):
        config = ClientConfig(namesrv_addr=ns.addr, namespace=app)
        async with Producer("producer", config=config) as producer:
            for i in range(COUNT):
                result = await producer.send(Message("Shared", f"{app}-{i}".encode()))
                assert result.message_queue.topic == "Shared"
        received: list[ReceivedMessage] = []
        async with SimpleConsumer("group", config=config, init_mode="MIN",
                                  await_duration=1) as consumer:
            consumer.subscribe("Shared")
            with trio.fail_after(30):
                while len(received) < COUNT:
                    batch = await consumer.receive(16, 30)
                    for m in batch:
                        await consumer.ack(m)
                    received += batch
        got[app] = received
        async with PullConsumer("reader", config=config) as reader:
            pulled: list[MessageExt] = []
            queues = await reader.fetch_subscribe_message_queues("Shared")
            assert {q.topic for q in queues} == {"Shared"}
            for mq in queues:
                found = await reader.pull(mq, "*", 0, 32)
                if found.pull_status is PullStatus.FOUND:
                    pulled += found.msg_found_list
            assert sorted(m.body.decode() for m in pulled) == [f"{app}-{i}" for i in range(COUNT)]
            assert {m.topic for m in pulled} == {"Shared"}
        lite = LitePullConsumer("lite", config=config,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        async with lite:
            queues = await lite.fetch_message_queues("Shared")
            await lite.assign(queues)
            polled: list[MessageExt] = []
            with trio.fail_after(30):
                while len(polled) < COUNT:
                    polled += await lite.poll(1.0)
            assert sorted(m.body.decode() for m in polled) == [f"{app}-{i}" for i in range(COUNT)]
            assert {m.topic for m in polled} == {"Shared"}
            await lite.commit_sync()
            # the user's queues name the stored ones: their committed offsets are there
            assert sum([await lite.committed(q) for q in queues]) == COUNT
        pushed: list[tuple[str, str, str]] = []
        push = PushConsumer("push", config=config,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        push.subscribe("Shared", "*")
        push.register_message_listener(recorder(pushed))
        async with push:
            await wait_until(lambda: len(pushed) >= COUNT, 30,  # noqa: B023 - awaited here
                             f"{app}'s push consumer got its messages")
        assert sorted(body for body, _t, _q in pushed) == [f"{app}-{i}" for i in range(COUNT)]
        assert {(t, q) for _b, t, q in pushed} == {("Shared", "Shared")}
    for app, received in got.items():
        assert sorted(m.body.decode() for m in received) == [f"{app}-{i}" for i in range(COUNT)]
        assert {m.topic for m in received} == {"Shared"}
        assert {m.message.topic for m in received} == {"Shared"}
    async with MQAdmin(ns.addr) as admin:
        for app in ("app1", "app2"):
            queues = await admin.topic_status(f"{app}%Shared")
            assert sum(q.max_offset for q in queues) == COUNT
