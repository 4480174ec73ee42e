"""One name server and two brokers as real processes: produce, pull, restart."""

from __future__ import annotations

import pytest

from client import Message, Producer, PullConsumer, PullStatus, SendStatus
from client.admin import MQAdmin
from protocol.message import MessageQueue
from tests.integration.cluster import Cluster
from tests.waits import wait_until

TOPIC = "E2ETopic"
TAGS = ("TagA", "TagB", "TagC")
SMALL_FILES = {"mapedFileSizeCommitLog": 1024 * 1024, "mapedFileSizeConsumeQueue": 20 * 1000}


def make_message(i: int) -> Message:
    return Message(TOPIC, f"body-{i}-".encode() + bytes([i % 251]) * (i % 300),
                   tags=TAGS[i % 3], keys=[f"k{i}", f"order-{i % 97}"],
                   properties={"idx": str(i), "note": "ü-€"})


async def pull_all(consumer: PullConsumer, queues: list[MessageQueue], expression: str = "*"
                   ) -> dict[MessageQueue, list]:
    out: dict[MessageQueue, list] = {}
    for mq in queues:
        msgs: list = []
        offset = 0
        for _ in range(10_000):
            r = await consumer.pull(mq, expression, offset, 32)
            if r.pull_status == PullStatus.NO_NEW_MSG:
                break
            assert r.pull_status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG), r
            msgs.extend(r.msg_found_list)
            assert r.next_begin_offset > offset
            offset = r.next_begin_offset
        out[mq] = msgs
    return out


async def test_produce_pull_restart(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    a = cluster.broker("broker-a", ns.addr, **SMALL_FILES)
    b = cluster.broker("broker-b", ns.addr, **SMALL_FILES)
    async with MQAdmin(ns.addr) as admin:
        await wait_until(lambda: _brokers_registered(admin, 2), 10, "two brokers")
        await admin.create_topic(TOPIC, cluster="DefaultCluster", read_queue_nums=8, write_queue_nums=8)
        await wait_until(lambda: _route_brokers(admin, TOPIC, 2), 10, "topic route on both brokers")

    total = 20_000
    sent = {i: make_message(i) for i in range(total)}
    results: dict[int, object] = {}
    async with Producer("e2e-producer", ns.addr) as producer:
        # 5,000 sync sends
        for i in range(0, 5000):
            r = await producer.send(sent[i])
            assert r.send_status == SendStatus.SEND_OK
            results[i] = r
        # 5,000 async sends, many in flight
        futures = [(i, await producer.send_async(sent[i])) for i in range(5000, 10000)]
        for i, fut in futures:
            r = await fut.wait()
            assert r.send_status == SendStatus.SEND_OK
            results[i] = r
        # 5,000 batch sends of 50
        for start in range(10000, 15000, 50):
            r = await producer.send_batch([sent[i] for i in range(start, start + 50)])
            assert r.send_status == SendStatus.SEND_OK
        # 5,000 oneway sends
        for i in range(15000, 20000):
            await producer.send_oneway(sent[i])

    async with MQAdmin(ns.addr) as admin:
        async def all_stored() -> bool:
            return sum(q.max_offset for q in await admin.topic_status(TOPIC)) == total
        await wait_until(all_stored, 20, "every oneway message stored")
        status_before = await admin.topic_status(TOPIC)
    assert len(status_before) == 16

    async with PullConsumer("e2e-consumer", ns.addr) as consumer:
        queues = await consumer.fetch_subscribe_message_queues(TOPIC)
        assert len(queues) == 16
        pulled = await pull_all(consumer, queues)
        got = {}
        for mq, msgs in pulled.items():
            # per-queue order: offsets 0..n-1 in order
            assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
            idxs = [int(m.properties["idx"]) for m in msgs]
            sync_idxs = [i for i in idxs if i < 5000]
            assert sync_idxs == sorted(sync_idxs), "sync sends keep their order within a queue"
            for m in msgs:
                i = int(m.properties["idx"])
                assert i not in got, f"message {i} pulled twice"
                got[i] = (mq, m)
        assert set(got) == set(sent)
        for i, (mq, m) in got.items():
            want = sent[i]
            assert m.body == want.body
            assert m.tags == want.tags and m.keys == want.keys
            assert m.properties["note"] == "ü-€"
            assert m.topic == TOPIC and m.queue_id == mq.queue_id
        for i, r in results.items():
            mq, m = got[i]
            assert (r.message_queue, r.queue_offset) == (mq, m.queue_offset)
            assert r.msg_id == m.properties["UNIQ_KEY"]

        # tag filter on the broker (hash) and the client (string)
        filtered = await pull_all(consumer, queues, "TagA || TagB")
        ftags = [m.tags for msgs in filtered.values() for m in msgs]
        assert set(ftags) == {"TagA", "TagB"}
        assert len(ftags) == sum(1 for i in sent if TAGS[i % 3] != "TagC")
        layout = {(mq, m.queue_offset): m.body for mq, msgs in pulled.items() for m in msgs}

    # clean restart of both brokers: same messages at the same offsets
    assert a.stop() == 0 and b.stop() == 0
    a.start()
    b.start()
    async with MQAdmin(ns.addr) as admin:
        await wait_until(lambda: _route_brokers(admin, TOPIC, 2), 10, "brokers back in the route")
        assert await admin.topic_status(TOPIC) == status_before
    async with PullConsumer("e2e-consumer", ns.addr) as consumer:
        queues = await consumer.fetch_subscribe_message_queues(TOPIC)
        again = await pull_all(consumer, queues)
        assert {(mq, m.queue_offset): m.body for mq, msgs in again.items() for m in msgs} == layout
    max_before = {(q.broker_name, q.queue_id): q.max_offset for q in status_before}
    async with Producer("e2e-producer", ns.addr) as producer:
        for i in range(total, total + 64):
            r = await producer.send(make_message(i))
            key = (r.message_queue.broker_name, r.message_queue.queue_id)
            assert r.queue_offset == max_before[key]
            max_before[key] += 1


async def _brokers_registered(admin: MQAdmin, n: int) -> bool:
    info = await admin.cluster_info()
    return len(info["brokerAddrTable"]) >= n


async def _route_brokers(admin: MQAdmin, topic: str, n: int) -> bool:
    try:
        route = await admin.topic_route(topic)
    except Exception:
        return False
    return len(route.queue_datas) == n


async def _one_broker_topic(namesrv: str, topic: str, queues: int) -> None:
    """Once the one broker is registered: ``topic`` with ``queues`` queues, routed."""
    async with MQAdmin(namesrv) as admin:
        await wait_until(lambda: _brokers_registered(admin, 1), 10, "the broker")
        await admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=queues,
                                 write_queue_nums=queues)
        await wait_until(lambda: _route_brokers(admin, topic, 1), 10, "the topic route")


async def test_busy_poll_on_both_sides(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SYNC_FLUSH broker and a client that spin after requests: sends
    (single, batch) are answered once flushed, every message reads back, and
    the broker stops cleanly."""
    monkeypatch.setenv("ROCKETMQ_BUSY_POLL_US", "1000")
    ns = cluster.namesrv()
    broker = cluster.broker("broker-bp", ns.addr, flushDiskType="SYNC_FLUSH",
                            busyPollMicros=1000, **SMALL_FILES)
    topic = "BusyPollTopic"
    await _one_broker_topic(ns.addr, topic, 2)
    bodies = [f"bp-{i}".encode() for i in range(300)]
    async with Producer("bp-producer", ns.addr) as producer:
        assert producer._running_instance().busy_poll_us == 1000
        for body in bodies[:200]:
            assert (await producer.send(Message(topic, body))).send_status == SendStatus.SEND_OK
        for start in range(200, 300, 50):
            r = await producer.send_batch([Message(topic, b) for b in bodies[start:start + 50]])
            assert r.send_status == SendStatus.SEND_OK
    async with PullConsumer("bp-consumer", ns.addr) as consumer:
        queues = await consumer.fetch_subscribe_message_queues(topic)
        got = await pull_all(consumer, queues)
    assert sorted(m.body for msgs in got.values() for m in msgs) == sorted(bodies)
    assert broker.stop() == 0


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_an_answered_send_is_pulled_at_once(cluster: Cluster, flush: str) -> None:
    """The broker indexes a send after writing its answer (or, SYNC_FLUSH, when
    the fsync answers it): by the time the producer holds the answer, a pull on
    another connection (another client instance) finds the message at the
    offset it was given."""
    ns = cluster.namesrv()
    cluster.broker("broker-vis", ns.addr, flushDiskType=flush, **SMALL_FILES)
    topic = "VisibleTopic"
    await _one_broker_topic(ns.addr, topic, 1)
    async with Producer("vis-producer", ns.addr) as producer, \
            PullConsumer("vis-consumer", ns.addr, instance_name="vis-reader") as consumer:
        assert consumer._running_instance() is not producer._running_instance()
        (mq,) = await consumer.fetch_subscribe_message_queues(topic)
        for i in range(100):
            if i % 10 == 9:
                batch = [Message(topic, f"b{i}-{j}".encode()) for j in range(3)]
                r = await producer.send_batch(batch, mq)
                want = [m.body for m in batch]
            else:
                r = await producer.send(Message(topic, f"m{i}".encode()), mq)
                want = [f"m{i}".encode()]
            assert r.send_status == SendStatus.SEND_OK
            got = await consumer.pull(mq, "*", r.queue_offset, 32)
            assert got.pull_status == PullStatus.FOUND, (i, got)
            assert [m.body for m in got.msg_found_list] == want
