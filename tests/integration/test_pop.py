"""POP against a real broker: SimpleConsumer receives, acks, changes
invisibility, gets an un-acked message again with attempt + 1 and finally
sees it dead-lettered; batch acks; kill -9 of the broker (ASYNC_FLUSH, the
default: answered acks are in the page cache, not yet fsynced) during a
receive/ack loop loses no ack and hides no message for good."""

from __future__ import annotations

import pytest
import trio

from client import Message, Producer, SendStatus
from client.admin import MQAdmin, MQAdminError
from client.errors import MQBrokerError, MQClientError
from client.simple_consumer import InvalidReceiptHandle, ReceivedMessage, SimpleConsumer
from client.subscription import MessageSelector
from protocol.names import dlq_topic
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPIC = "PopTopic"
GROUP = "pop-group"


async def setup(cluster: Cluster, **props: object) -> tuple[str, str]:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, reviveInterval=100, **props)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2,
                                 write_queue_nums=2)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
    return ns.addr, broker.addr


async def send(ns: str, bodies: list[bytes]) -> None:
    async with Producer("pop-producer", ns) as p:
        for body in bodies:
            r = await p.send(Message(TOPIC, body, tags="A"))
            assert r.send_status == SendStatus.SEND_OK


async def receive_until(c: SimpleConsumer, n: int, invisible: float, timeout: float
                        ) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    with trio.fail_after(timeout):
        while len(got) < n:
            got.extend(await c.receive(16, invisible))
    return got


async def dlq_count(ns: str) -> int:
    """Messages in the group's dead-letter topic (write-only: its queue status)."""
    async with MQAdmin(ns) as admin:
        try:
            return sum(q.max_offset for q in await admin.topic_status(dlq_topic(GROUP)))
        except MQAdminError:
            return 0  # not routed yet: made with the first dead letter


async def test_receive_ack_change_redeliver_and_dead_letter(cluster: Cluster) -> None:
    ns, _ = await setup(cluster, maxReconsumeTimes=1)
    await send(ns, [b"one", b"two", b"three"])
    async with SimpleConsumer(GROUP, ns, init_mode="MIN", await_duration=1) as c:
        c.subscribe(TOPIC, "A")
        got = {m.body: m for m in await receive_until(c, 3, 30, 20)}
        assert sorted(got) == [b"one", b"three", b"two"]
        assert all(m.delivery_attempt == 1 and m.topic == TOPIC for m in got.values())
        await c.ack(got[b"one"])
        with pytest.raises(InvalidReceiptHandle):
            await c.ack(got[b"one"])  # spent
        two = got[b"two"]
        old = two.receipt_handle
        await c.change_invisible_duration(two, 60)
        assert two.receipt_handle != old
        stale = ReceivedMessage(two.message, two.topic, old, 1, two.broker_name, two.broker_addr)
        with pytest.raises(InvalidReceiptHandle, match="replaced"):
            await c.ack(stale)
        await c.ack(two)
        forged = ReceivedMessage(two.message, two.topic, "1.AAAA.AAAA", 1, two.broker_name,
                                 two.broker_addr)
        with pytest.raises(InvalidReceiptHandle, match="malformed|not issued"):
            await c.ack(forged)
        forged.receipt_handle = "x" * 2000  # past the header's bound: a bad request
        with pytest.raises(MQBrokerError, match="bad request") as bad:
            await c.ack(forged)
        assert not isinstance(bad.value, InvalidReceiptHandle)
        # "three" is never acked: back after 1 s with attempt 2 (from %RETRY%)
        three = got[b"three"]
        await c.change_invisible_duration(three, 1)
        again = await receive_until(c, 1, 1, 20)
        assert [m.body for m in again] == [b"three"]
        assert again[0].delivery_attempt == 2 and again[0].topic == TOPIC
        with pytest.raises(InvalidReceiptHandle):
            await c.ack(three)  # the first delivery's handle expired
        # retryMaxTimes 1: its second expiry sends it to the dead-letter queue
        await wait_until(lambda: dlq_count(ns), 20, "dead letter")
        assert await dlq_count(ns) == 1
        assert await c.receive(16, 1) == []  # nothing else comes


async def test_kill_9_during_pops_and_acks(cluster: Cluster) -> None:
    ns, _ = await setup(cluster)
    broker = cluster.daemons[-1]
    bodies = [b"m%04d" % i for i in range(400)]
    await send(ns, bodies)
    acked: set[bytes] = set()  # acks the broker answered OK
    seen: dict[bytes, int] = {}
    async with SimpleConsumer(GROUP, ns, init_mode="MIN", await_duration=0.5) as c:
        c.subscribe(TOPIC)
        rounds = 0
        with trio.fail_after(60):
            while len(acked) < 150:
                rounds += 1
                to_ack = []
                for m in await c.receive(16, 2):
                    seen[m.body] = seen.get(m.body, 0) + 1
                    if int(m.body[1:]) % 3:  # one in three is left un-acked
                        to_ack.append(m)
                if rounds % 2:  # one ack per message, or one batch ack per receive
                    for m in to_ack:
                        await c.ack(m)
                        acked.add(m.body)
                else:
                    refused = {id(m) for m, _ in await c.ack_batch(to_ack)}
                    acked.update(m.body for m in to_ack if id(m) not in refused)
        broker.kill()  # between acks, with un-acked messages in flight
    broker.start()
    async with MQAdmin(ns) as admin:
        await wait_until(routed(admin, TOPIC), 10, "broker back")
    after: set[bytes] = set()
    async with SimpleConsumer(GROUP, ns, init_mode="MIN", await_duration=0.5) as c:
        c.subscribe(TOPIC)
        with trio.fail_after(90):
            while len(acked | after) < len(bodies):
                for m in await c.receive(32, 2):
                    assert m.body not in acked, f"{m.body!r} was acked, yet came back"
                    await c.ack(m)
                    after.add(m.body)
    assert acked | after == set(bodies)
    assert after  # the un-acked ones (and those never received) came after the restart


async def test_batch_ack_acks_many_and_names_the_refused(cluster: Cluster) -> None:
    ns, _ = await setup(cluster)
    await send(ns, [b"b%d" % i for i in range(6)])
    async with SimpleConsumer(GROUP, ns, init_mode="MIN", await_duration=1) as c:
        c.subscribe(TOPIC)
        got = await receive_until(c, 6, 30, 20)
        await c.ack(got[0])
        refused = await c.ack_batch(got)
        assert [(m.body, "INVALID_RECEIPT_HANDLE" in remark) for m, remark in refused] == [
            (got[0].body, True)]
        again = await c.ack_batch(got[1:])  # all spent now
        assert [m.body for m, _ in again] == [m.body for m in got[1:]]
        assert all(r.startswith("INVALID_RECEIPT_HANDLE") for _, r in again)
        assert await c.receive(16, 1) == []  # acked: nothing comes back


async def test_sql92_selector_over_pop(cluster: Cluster) -> None:
    """SimpleConsumer with MessageSelector.by_sql: the broker (enablePropertyFilter)
    delivers only the messages whose properties match; without the key it refuses."""
    ns, _ = await setup(cluster, enablePropertyFilter="true")
    async with Producer("pop-producer", ns) as p:
        for i in range(10):
            m = Message(TOPIC, b"n%d" % i, tags="A" if i % 2 else "B")
            m.put_user_property("n", str(i))
            assert (await p.send(m)).send_status == SendStatus.SEND_OK
    async with SimpleConsumer(GROUP, ns, init_mode="MIN", await_duration=1) as c:
        c.subscribe(TOPIC, MessageSelector.by_sql("n >= 4 AND TAGS = 'A'"))
        got = await receive_until(c, 3, 30, 20)
        assert sorted(m.body for m in got) == [b"n5", b"n7", b"n9"]
        for m in got:
            await c.ack(m)
        assert await c.receive(16, 30) == []  # the rest never come
        with pytest.raises(MQClientError, match="SQL92"):
            c.subscribe(TOPIC, MessageSelector.by_sql("n >="))


async def test_sql92_over_pop_needs_enable_property_filter(cluster: Cluster) -> None:
    ns, _ = await setup(cluster)
    async with SimpleConsumer(GROUP, ns, init_mode="MIN", await_duration=1) as c:
        c.subscribe(TOPIC, MessageSelector.by_sql("n >= 4"))
        with pytest.raises(MQBrokerError, match="SQL92"):
            await c.receive(16, 30)
