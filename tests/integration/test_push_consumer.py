"""Push and lite-pull consumers against real brokers: clustering with members
joining and leaving, broadcasting, retry and dead letters, orderly
consumption across a rebalance, flow control, lite pull."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    LitePullConsumer,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    Producer,
    PushConsumer,
)
from client.admin import MQAdmin
from tests.integration.cluster import Cluster, Daemon
from tests.waits import consumed_all, routed, wait_lag_zero, wait_until, wait_until_sync

TOPIC = "PushTopic"
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
LEVELS = " ".join(["1s"] * 18)


async def two_brokers(cluster: Cluster, queues: int = 8, **props: Any) -> tuple[Daemon, list[Daemon]]:
    ns = cluster.namesrv()
    brokers = [cluster.broker(name, ns.addr, **props) for name in ("broker-a", "broker-b")]
    async with MQAdmin(ns.addr) as admin:
        for b in brokers:
            await admin.create_topic(TOPIC, broker_addr=b.addr, read_queue_nums=queues,
                                     write_queue_nums=queues)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")

        async def both() -> bool:
            route = await admin.topic_route(TOPIC)
            return len(route.queue_datas) == 2
        await wait_until(both, 10, "both brokers routed")
    return ns, brokers


async def produce(ns: Daemon, bodies: list[bytes], batch: int = 100,
                  between: Callable[[int], Any] | None = None, tags: str | None = None) -> None:
    async with Producer("push-test-producer", ns.addr) as producer:
        for i in range(0, len(bodies), batch):
            if between is not None:
                await between(i)
            await producer.send_batch([Message(TOPIC, b, tags=tags) for b in bodies[i:i + batch]])


async def test_clustering_members_join_and_leave_lose_nothing(cluster: Cluster) -> None:
    ns, _ = await two_brokers(cluster)
    group = "cluster-group"
    seen: Counter[bytes] = Counter()
    per_consumer: Counter[str] = Counter()

    def make(name: str) -> PushConsumer:
        c = PushConsumer(group, ns.addr, instance_name=name, consume_from_where=FIRST,
                         rebalance_interval=2.0, consume_message_batch_max_size=8)
        c.subscribe(TOPIC, "*")

        def listener(msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
            for m in msgs:
                seen[m.body] += 1
            per_consumer[name] += len(msgs)
            return SUCCESS

        c.register_message_listener(listener)
        return c

    c1, c2, c3 = make("c1"), make("c2"), make("c3")
    await c1.start()
    await c2.start()
    n = 30_000
    bodies = [b"m%d" % i for i in range(n)]

    async def membership(i: int) -> None:
        if i == 10_000:
            await c3.start()  # joins mid-stream
        elif i == 20_000:
            await c1.shutdown()  # leaves mid-stream
        await trio.sleep(0.01)

    await produce(ns, bodies, between=membership)
    await wait_until(lambda: len(seen) >= n, 60, "every message consumed", interval=0.2)
    assert set(seen) == set(bodies)
    duplicates = sum(seen.values()) - n
    assert duplicates <= 2000, f"{duplicates} duplicates"
    assert per_consumer["c1"] > 0 and per_consumer["c2"] > 0 and per_consumer["c3"] > 0

    async def split_between_c2_c3() -> bool:
        a, b = set(c2.assigned_queues()), set(c3.assigned_queues())
        return not (a & b) and len({q for q in a | b if q.topic == TOPIC}) == 16
    await wait_until(split_between_c2_c3, 15, "the two remaining members to split the queues")
    await c2.shutdown()
    await c3.shutdown()
    async with MQAdmin(ns.addr) as admin:
        rows = [r for r in await admin.consume_stats(group, TOPIC)]
        assert len(rows) == 16
        assert sum(r["brokerOffset"] for r in rows) == n
        assert all(r["lag"] == 0 for r in rows), rows


async def test_broadcasting_every_member_gets_everything(cluster: Cluster, tmp_path: Path) -> None:
    ns, _ = await two_brokers(cluster, queues=4)
    group = "broadcast-group"
    got: dict[str, Counter[bytes]] = {"b1": Counter(), "b2": Counter()}
    consumers = []
    for name in got:
        c = PushConsumer(group, ns.addr, instance_name=name, consume_from_where=FIRST,
                         message_model=MessageModel.BROADCASTING, offset_store_dir=tmp_path)
        c.subscribe(TOPIC, "*")

        def listener(msgs: list[MessageExt], ctx: Any, name: str = name) -> ConsumeConcurrentlyStatus:
            for m in msgs:
                got[name][m.body] += 1
            return SUCCESS

        c.register_message_listener(listener)
        await c.start()
        consumers.append(c)
    bodies = [b"b%d" % i for i in range(2000)]
    await produce(ns, bodies, batch=50)
    for name in got:
        await wait_until(lambda name=name: len(got[name]) >= 2000, 30, f"{name} got all")
        assert set(got[name]) == set(bodies)
        assert all(v == 1 for v in got[name].values())
    for c in consumers:
        assert len([q for q in c.assigned_queues() if q.topic == TOPIC]) == 8
        await c.shutdown()
    # offsets stayed local: one file per member, none on the brokers
    files = sorted(tmp_path.glob(f"*/{group}/offsets.json"))
    assert len(files) == 2
    for f in files:
        table = json.loads(f.read_text())["offsetTable"]
        assert sum(table.values()) == 2000
    async with MQAdmin(ns.addr) as admin:
        rows = await admin.consume_stats(group, TOPIC)
        assert all(r["consumerOffset"] <= 0 for r in rows), rows

    # a restarted member resumes from its file: nothing is delivered again
    again: Counter[bytes] = Counter()
    c = PushConsumer(group, ns.addr, instance_name="b1", consume_from_where=FIRST,
                     message_model=MessageModel.BROADCASTING, offset_store_dir=tmp_path)
    c.subscribe(TOPIC, "*")
    c.register_message_listener(lambda msgs, ctx: again.update(m.body for m in msgs) or SUCCESS)
    async with c:
        await produce(ns, [b"late"])
        await wait_until(lambda: b"late" in again, 15, "the new message")
    assert list(again) == [b"late"]


async def test_retry_after_failures_then_dead_letter(cluster: Cluster) -> None:
    ns, brokers = await two_brokers(cluster, queues=2, messageDelayLevel=LEVELS)
    group = "retry-group"
    attempts: Counter[bytes] = Counter()
    times: dict[bytes, list[float]] = {}
    uniq: dict[bytes, str] = {}

    def listener(msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            attempts[m.body] += 1
            uniq[m.body] = m.uniq_key or ""
            times.setdefault(m.body, []).append(trio.current_time())
            assert m.topic == TOPIC  # retried messages show their own topic
            if m.body == b"flaky" and m.reconsume_times < 2:
                return LATER
            if m.body == b"poison":
                raise RuntimeError("cannot handle this one")
        return SUCCESS

    c = PushConsumer(group, ns.addr, consume_from_where=FIRST, max_reconsume_times=3)
    c.subscribe(TOPIC, "*")
    c.register_message_listener(listener)
    async with c, MQAdmin(ns.addr) as admin:
        await produce(ns, [b"ok", b"flaky", b"poison"], batch=1)
        await wait_until(lambda: attempts[b"flaky"] >= 3 and attempts[b"poison"] >= 4, 40,
                         "retries")
        # nothing more comes: every queue (the retry topic's too) consumed to its
        # end, no retry waiting for its delay level
        await wait_until(consumed_all(admin, group, [c], [b.addr for b in brokers]), 20,
                         "the group's queues consumed to their end, no retry delayed")
    assert attempts[b"ok"] == 1
    assert attempts[b"flaky"] == 3  # failed twice, third time succeeded
    assert attempts[b"poison"] == 4  # first try + 3 reconsumes, then the DLQ
    gaps = [b - a for a, b in zip(times[b"flaky"], times[b"flaky"][1:], strict=False)]
    assert all(g >= 0.9 for g in gaps), gaps  # each retry waited for its delay level

    dlq = "%DLQ%" + group  # write-only for consumers; tools find it through the index
    async with MQAdmin(ns.addr) as admin:
        found = await admin.query_by_key(dlq, uniq[b"poison"])
    assert [m.body for m in found] == [b"poison"]
    assert found[0].properties["RETRY_TOPIC"] == TOPIC and found[0].topic == dlq


async def test_orderly_keeps_queue_order_across_a_rebalance(cluster: Cluster) -> None:
    ns, _ = await two_brokers(cluster, queues=4)
    group = "orderly-group"
    per_queue: dict[tuple[str, int], list[int]] = {}
    busy: dict[tuple[str, int], str] = {}
    overlaps: list[str] = []

    def make(name: str) -> PushConsumer:
        c = PushConsumer(group, ns.addr, instance_name=name, consume_from_where=FIRST,
                         rebalance_interval=1.0, consume_message_batch_max_size=4)
        c.subscribe(TOPIC, "*")

        async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
            key = (ctx.message_queue.broker_name, ctx.message_queue.queue_id)
            other = busy.get(key)
            if other is not None and other != name:
                overlaps.append(f"{key} by {other} and {name}")
            busy[key] = name
            await trio.sleep(0.001)
            for m in msgs:
                per_queue.setdefault(key, []).append(int(m.body.rsplit(b"-", 1)[1]))
            busy.pop(key, None)
            return ConsumeOrderlyStatus.SUCCESS

        c.register_message_listener(listener, orderly=True)
        return c

    o1, o2 = make("o1"), make("o2")
    await o1.start()
    n = 4000
    # each body names its queue's sequence number: bodies go to queues in order
    async with Producer("orderly-producer", ns.addr) as producer:
        mqs = await producer.fetch_publish_message_queues(TOPIC)
        seq: Counter[MessageQueue] = Counter()
        for i in range(n):
            mq = mqs[i % len(mqs)]
            if i == n // 2:
                await o2.start()  # rebalance mid-stream
            await producer.send(Message(TOPIC, b"%s-%d" % (mq.broker_name.encode(), seq[mq])), mq)
            seq[mq] += 1
    await wait_until(lambda: sum(len(v) for v in per_queue.values()) >= n, 60,
                     "everything consumed", interval=0.2)
    await o1.shutdown()
    await o2.shutdown()
    assert not overlaps, overlaps[:5]
    for key, got in per_queue.items():
        # in order; a rebalance may repeat a tail, never reorder or skip
        dedup = []
        for x in got:
            if dedup and x <= dedup[-1]:
                assert x >= dedup[-1] - 200, (key, x, dedup[-1])
                continue
            dedup.append(x)
        assert dedup == list(range(len(dedup))), key
        assert len(dedup) == seq[MessageQueue(TOPIC, key[0], key[1])]


async def test_orderly_failure_suspends_and_retries_locally(cluster: Cluster) -> None:
    ns, _ = await two_brokers(cluster, queues=1)
    order: list[bytes] = []
    failures = Counter[bytes]()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
        for m in msgs:
            if m.body == b"2" and failures[m.body] < 2:
                failures[m.body] += 1
                ctx.suspend_current_queue_time_millis = 100
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            order.append(m.body)
        return ConsumeOrderlyStatus.SUCCESS

    c = PushConsumer("orderly-retry", ns.addr, consume_from_where=FIRST)
    c.subscribe(TOPIC, "*")
    c.register_message_listener(listener, orderly=True)
    async with c, Producer("p", ns.addr) as producer:
        mq = (await producer.fetch_publish_message_queues(TOPIC))[0]
        for i in range(5):
            await producer.send(Message(TOPIC, str(i).encode()), mq)
        await wait_until(lambda: len(order) >= 5, 20, "all five")
    assert order == [b"0", b"1", b"2", b"3", b"4"] and failures[b"2"] == 2


async def test_flow_control_bounds_the_cache(cluster: Cluster) -> None:
    ns, _ = await two_brokers(cluster, queues=1)
    done = 0
    peak = 0
    c = PushConsumer("flow-group", ns.addr, consume_from_where=FIRST,
                     pull_threshold_for_queue=50, pull_batch_size=16, consume_thread_max=1)

    async def slow(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        nonlocal done, peak
        peak = max(peak, max(pq.msg_count for pq in c.process_queue_table.values()))
        await trio.sleep(0.002)
        done += len(msgs)
        return SUCCESS

    c.subscribe(TOPIC, "*")
    c.register_message_listener(slow)
    await produce(ns, [b"x%d" % i for i in range(600)], batch=100)
    async with c:
        await wait_until(lambda: done >= 600, 30, "all consumed")
    assert 50 <= peak <= 50 + 16, peak


async def test_a_new_group_reads_what_was_sent_before_it_started(cluster: Cluster) -> None:
    """RocketMQ's quickstart: send 200, then start a push consumer of a new group
    (CONSUME_FROM_LAST_OFFSET): the broker answers offset 0 for queues whose
    first message is still in memory, so the group gets all 200."""
    ns, _ = await two_brokers(cluster, queues=2)
    sent = [b"early-%d" % i for i in range(200)]
    await produce(ns, sent, batch=10)
    got: Counter[bytes] = Counter()
    c = PushConsumer("quickstart-group", ns.addr)  # CONSUME_FROM_LAST_OFFSET
    c.subscribe(TOPIC, "*")
    c.register_message_listener(lambda msgs, ctx: got.update(m.body for m in msgs) or SUCCESS)
    async with c:
        await wait_until(lambda: len(got) == len(sent), 30, "the 200 messages")
        rows = await wait_lag_zero(ns.addr, "quickstart-group", TOPIC)
    assert got == Counter(sent)
    assert sum(r["consumerOffset"] for r in rows) == len(sent)


async def test_consume_from_last_offset_skips_history_out_of_memory(cluster: Cluster) -> None:
    """accessMessageInMemoryMaxRatio=0: a queue's first message counts as "in
    disk", the broker answers QUERY_NOT_FOUND and a new group starts at the
    queues' end (an empty queue is answered 0: nothing is skipped there)."""
    ns, _ = await two_brokers(cluster, queues=2, accessMessageInMemoryMaxRatio=0)
    await produce(ns, [b"old"] * 20, batch=10)
    got: list[bytes] = []
    c = PushConsumer("latest-group", ns.addr)  # CONSUME_FROM_LAST_OFFSET
    c.subscribe(TOPIC, "*")
    c.register_message_listener(lambda msgs, ctx: got.extend(m.body for m in msgs) or SUCCESS)
    async with c:
        await produce(ns, [b"new"])
        await wait_until(lambda: got, 15, "the new message")
        rows = await wait_lag_zero(ns.addr, "latest-group", TOPIC)
    assert got == [b"new"]
    assert sum(r["consumerOffset"] for r in rows) == 21


async def test_tag_filter_on_push_consumer(cluster: Cluster) -> None:
    # a pull that finds only other tags is held, then answered past them at its
    # deadline: a short one brings the consumer's offsets to the queues' ends soon
    ns, brokers = await two_brokers(cluster, queues=2, longPollingMaxSuspendMillis=1000)
    got: list[str | None] = []
    c = PushConsumer("tag-group", ns.addr, consume_from_where=FIRST)
    c.subscribe(TOPIC, "TagA || TagC")
    c.register_message_listener(lambda msgs, ctx: got.extend(m.tags for m in msgs) or SUCCESS)
    for tag in ("TagA", "TagB", "TagC", "TagB"):
        await produce(ns, [tag.encode()] * 10, batch=10, tags=tag)
    async with c, MQAdmin(ns.addr) as admin:
        await wait_until(lambda: len(got) >= 20, 15, "tagged messages")
        # the TagB ones were filtered out: the queues are consumed to their end
        await wait_until(consumed_all(admin, "tag-group", [c], [b.addr for b in brokers]), 15,
                         "the group's queues consumed to their end")
    assert sorted(set(got)) == ["TagA", "TagC"] and len(got) == 20  # type: ignore[type-var]


async def test_lite_pull_subscribe_poll_seek_and_commit(cluster: Cluster) -> None:
    ns, _ = await two_brokers(cluster, queues=2)
    bodies = [b"l%d" % i for i in range(400)]
    await produce(ns, bodies, batch=20)
    group = "lite-group"
    async with LitePullConsumer(group, ns.addr, consume_from_where=FIRST, auto_commit=False) as c:
        c.subscribe(TOPIC, "*")
        got: list[MessageExt] = []
        with trio.fail_after(20):
            while len(got) < 400:
                got += await c.poll(timeout=1.0)
        assert sorted(m.body for m in got) == sorted(bodies)
        assert await c.poll(timeout=0.2) == []
        await c.commit_sync()
        mq = c.assigned_queues()[0]
        await c.seek(mq, 0)
        again: list[MessageExt] = []
        with trio.fail_after(10):
            while len(again) < 100:
                again += await c.poll(timeout=1.0)
        assert await c.poll(timeout=0.2) == []
        assert sorted(m.queue_offset for m in again) == list(range(100))
        assert {m.queue_id for m in again} == {mq.queue_id}
        assert await c.committed(mq) == 100  # seek does not commit
    async with MQAdmin(ns.addr) as admin:
        rows = await admin.consume_stats(group, TOPIC)
        assert sum(r["consumerOffset"] for r in rows) == 400

    # assign: exactly the given queue, from the group's committed offset
    async with Producer("p2", ns.addr) as producer:
        queues = await producer.fetch_publish_message_queues(TOPIC)
        for q in queues:
            await producer.send(Message(TOPIC, b"after-" + str(q.queue_id).encode() + q.broker_name.encode()), q)
    async with LitePullConsumer(group, ns.addr) as c2:
        await c2.assign([queues[0]])
        with trio.fail_after(10):
            polled: list[MessageExt] = []
            while not polled:
                polled = await c2.poll(timeout=1.0)
        assert [m.body for m in polled] == [b"after-" + str(queues[0].queue_id).encode()
                                           + queues[0].broker_name.encode()]
        assert c2.assigned_queues() == [queues[0]]


def test_blocking_push_and_lite_pull_consumers(cluster: Cluster) -> None:
    import threading
    import time

    from client import blocking

    ns, _ = trio.run(two_brokers, cluster, 2)
    got: list[bytes] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        with lock:  # a plain function, run in worker threads
            got.extend(m.body for m in msgs)
            threads.add(threading.current_thread().name)
        return SUCCESS

    consumer = blocking.PushConsumer("blocking-group", ns.addr, consume_from_where=FIRST)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listener)
    with consumer, blocking.Producer("blocking-producer", ns.addr) as producer:
        for i in range(50):
            producer.send(Message(TOPIC, b"s%d" % i))
        wait_until_sync(lambda: len(got) >= 50, 15, "50 messages in the listener")
    assert sorted(got) == sorted(b"s%d" % i for i in range(50))
    assert threading.main_thread().name not in threads

    with blocking.LitePullConsumer("blocking-lite", ns.addr, consume_from_where=FIRST) as lite:
        lite.subscribe(TOPIC, "*")
        polled: list[MessageExt] = []
        end = time.monotonic() + 15
        while len(polled) < 50 and time.monotonic() < end:
            polled += lite.poll(timeout=0.5)
    assert sorted(m.body for m in polled) == sorted(got)
