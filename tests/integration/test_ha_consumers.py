"""Consumers and slaves, between real daemons on 127.0.0.1 (issue 12, tests 6
and 7): consumers go on reading a group's queues from its slave while the
master is down, keep the offsets they commit meanwhile and go on without
re-delivering more than what they had in flight when it returns; producers
skip the group meanwhile; a master sends cold reads to the slave and the
consumer follows."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio

from client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    LitePullConsumer,
    Message,
    MessageExt,
    MessageQueue,
    MQClientError,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
)
from client.admin import MQAdmin
from client.consumer_api import ConsumerAPI
from client.pull_result import RawPullResult
from client.range_reader import RangeChunk
from client.subscription import SubscriptionData, build_subscription
from protocol.body import unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    GetMaxOffsetRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
)
from protocol.record import decode_records
from protocol.route import MASTER_ID
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster, Daemon
from tests.waits import routed, wait_until

TOPIC = "HaConsumeTopic"
QUEUES = 4
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
# Short client periods: a dead master leaves the routes within a second.
FAST: dict[str, Any] = {"poll_name_server_interval": 0.5, "heartbeat_broker_interval": 1.0,
                        "rebalance_interval": 2.0}
BROKER: dict[str, Any] = {"mapedFileSizeCommitLog": 1 << 20,
                          "mapedFileSizeConsumeQueue": 20 * 10_000, "slaveSyncInterval": 300}


def pair(cluster: Cluster, ns: str, **props: Any) -> tuple[Daemon, Daemon]:
    """broker-a: an ASYNC_MASTER and its slave."""
    master = cluster.broker("broker-a", ns, brokerRole="ASYNC_MASTER", **BROKER, **props)
    slave = cluster.broker("broker-a-s", ns, brokerName="broker-a", brokerId=1,
                           brokerRole="SLAVE", **BROKER, **props)
    return master, slave


async def create_topic(ns: Daemon, masters: list[Daemon]) -> None:
    async with MQAdmin(ns.addr) as admin:
        for m in masters:
            await admin.create_topic(TOPIC, broker_addr=m.addr, read_queue_nums=QUEUES,
                                     write_queue_nums=QUEUES)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")

        async def all_routed() -> bool:
            return len((await admin.topic_route(TOPIC)).queue_datas) == len(masters)
        await wait_until(all_routed, 10, "every master routed")


async def broker_ids(ns: Daemon, name: str = "broker-a") -> set[int]:
    async with MQAdmin(ns.addr) as admin:
        route = await admin.topic_route(TOPIC)
    return {bid for bd in route.broker_datas if bd.broker_name == name
            for bid in bd.broker_addrs}


async def offset_at(addr: str, code: int, fields: dict[str, Any]) -> int:
    """An offset answer of the broker at ``addr`` (-1 for none)."""
    async with RemotingClient() as rc:
        r = await rc.invoke(addr, RemotingCommand.request(code, fields), 5)
    if r.code == ResponseCode.QUERY_NOT_FOUND:
        return -1
    assert r.code == ResponseCode.SUCCESS, r
    return OffsetResponseHeader.from_fields(r.ext_fields).offset


async def max_offsets(addr: str) -> list[int]:
    return [await offset_at(addr, RequestCode.GET_MAX_OFFSET,
                            GetMaxOffsetRequestHeader(TOPIC, q).to_fields())
            for q in range(QUEUES)]


async def committed(addr: str, group: str) -> list[int]:
    return [await offset_at(addr, RequestCode.QUERY_CONSUMER_OFFSET,
                            QueryConsumerOffsetRequestHeader(group, TOPIC, q).to_fields())
            for q in range(QUEUES)]


async def wait_replicated(master: Daemon, slave: Daemon) -> None:
    """The slave holds every queue entry the master has, and the topic."""
    async def same() -> bool:
        return await max_offsets(slave.addr) == await max_offsets(master.addr)
    await wait_until(same, 30, "the slave caught up with the master")

    async def topic_copied() -> bool:
        async with RemotingClient() as rc:
            r = await rc.invoke(slave.addr, RemotingCommand.request(
                RequestCode.GET_ALL_TOPIC_CONFIG), 5)
        return TOPIC in unpack_body(r.body)["topicConfigTable"]
    await wait_until(topic_copied, 30, "the topic copied to the slave")


async def wait_committed(addr: str, group: str, want: list[int], what: str) -> None:
    async def reached() -> bool:
        return await committed(addr, group) == want
    await wait_until(reached, 30, what)


async def send_all(producer: Producer, bodies: list[bytes]) -> Counter[str]:
    """Send each body once; how many went to each broker name."""
    where: Counter[str] = Counter()
    for body in bodies:
        r = await producer.send(Message(TOPIC, body))
        where[r.message_queue.broker_name] += 1
    return where


async def test_push_consumers_finish_from_the_slave_and_go_on_with_the_master(
        cluster: Cluster) -> None:
    """Test 6: the master is killed (-9) while two push consumers work through a
    backlog; they finish it from the slave, committing offsets there, while a
    producer sends only to the other broker; the master is restarted and
    consumption goes on. Every message is consumed; duplicates are counted and
    bounded by what the consumers held in flight."""
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr)
    other = cluster.broker("broker-b", ns.addr, **BROKER)
    await create_topic(ns, [master, other])

    group = "ha-push-group"
    batch, threshold = 16, 64
    # at most this many messages of broker-a's queues are pulled and not yet
    # committed at any moment: all a consumer could be given twice
    window = QUEUES * (threshold + batch)
    seen: Counter[bytes] = Counter()
    go = trio.Event()  # the backlog is on the slave
    hold = trio.Event()  # the master is dead
    held = trio.Event()
    stop_at = 400

    async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        await go.wait()
        if sum(seen.values()) >= stop_at and not hold.is_set():
            held.set()  # consuming pauses here until the master is dead
            await hold.wait()
        for m in msgs:
            seen[m.body] += 1
        return SUCCESS

    consumers = []
    for name in ("ha-c1", "ha-c2"):
        c = PushConsumer(group, ns.addr, instance_name=name, consume_from_where=FIRST,
                         pull_batch_size=batch, pull_threshold_for_queue=threshold,
                         persist_consumer_offset_interval=0.5, **FAST)
        c.subscribe(TOPIC, "*")
        c.register_message_listener(listener)
        consumers.append(c)
    async with Producer("ha-consume-producer", ns.addr,
                        poll_name_server_interval=FAST["poll_name_server_interval"]) as producer:
        try:
            for c in consumers:
                await c.start()

            # the group settles before there is anything to consume, so what
            # follows is not mixed up with a member joining
            async def settled() -> bool:
                owned = [[mq for mq in c.assigned_queues() if mq.topic == TOPIC]
                         for c in consumers]
                return [len(o) for o in owned] == [QUEUES, QUEUES]
            await wait_until(settled, 30, "the two consumers sharing the queues")
            backlog = [b"backlog-%d" % i for i in range(1600)]
            where = await send_all(producer, backlog)
            assert where["broker-a"] > 0 and where["broker-b"] > 0
            await wait_replicated(master, slave)
            go.set()
            with trio.fail_after(60):
                await held.wait()
            # the master dies with consumers mid-backlog (pulled, not all consumed)
            master.kill()
            hold.set()

            async def master_gone() -> bool:
                return await broker_ids(ns) == {1}
            await wait_until(master_gone, 20, "the name server dropping the dead master")

            # the producer skips broker-a while its master is gone
            during = [b"during-%d" % i for i in range(200)]
            where = await send_all(producer, during)
            assert where == Counter({"broker-b": len(during)}), where

            async def consumed(bodies: list[bytes]) -> bool:
                return all(seen[b] for b in bodies)
            await wait_until(lambda: consumed(backlog + during), 60,
                             "the backlog consumed with broker-a's master dead")
            # the offsets committed meanwhile are on the slave
            slave_max = await max_offsets(slave.addr)
            await wait_committed(slave.addr, group, slave_max,
                                 "the group's offsets committed on the slave")

            # the master comes back: the producer resumes sending to it
            master.start()

            async def master_back() -> bool:
                return await broker_ids(ns) == {0, 1}
            await wait_until(master_back, 20, "the master routed again")

            async def sent_to_master() -> bool:
                r = await producer.send(Message(TOPIC, b"probe"))
                return r.message_queue.broker_name == "broker-a"
            await wait_until(sent_to_master, 20, "a send reaching the returned master")
            after = [b"after-%d" % i for i in range(400)]
            where = await send_all(producer, after)
            assert where["broker-a"] > 0, where
            await wait_until(lambda: consumed(after), 60,
                             "messages sent after the master's return consumed")
            # quiet: the returned master holds offsets at its queues' ends
            # (written there again by the consumers), so nothing more comes back
            await wait_committed(master.addr, group, await max_offsets(master.addr),
                                 "the group's offsets committed on the returned master")
        finally:
            go.set()
            hold.set()
            for c in consumers:
                await c.shutdown()

    everything = backlog + during + after
    assert all(seen[b] >= 1 for b in everything)
    duplicates = sum(n - 1 for b, n in seen.items() if b != b"probe")
    print(f"\nmaster kill and return: {len(everything)} messages, {duplicates} delivered "
          f"twice or more (bound: {window})")
    assert duplicates <= window


async def test_lite_pull_and_pull_consumers_read_from_the_slave(cluster: Cluster) -> None:
    """The master stops before the consumers start: a lite-pull consumer and a pull
    consumer's range reads (the Spark source's calls) get everything from the
    slave, their offsets kept there; when the master returns the offsets reach
    it and consumption goes on with no message delivered twice."""
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr)
    await create_topic(ns, [master])
    bodies = [b"lite-%d" % i for i in range(300)]
    async with Producer("ha-lite-producer", ns.addr) as producer:
        await send_all(producer, bodies)
    await wait_replicated(master, slave)
    ends = await max_offsets(master.addr)
    master.stop()

    async def master_gone() -> bool:
        return await broker_ids(ns) == {1}
    await wait_until(master_gone, 20, "the name server dropping the stopped master")

    # the Spark source's reads: queue offsets and ranges from the slave, offsets kept there
    reader_group = "ha-range-group"
    async with PullConsumer(reader_group, ns.addr) as pc:
        got: list[bytes] = []
        for q in range(QUEUES):
            mq = MessageQueue(TOPIC, "broker-a", q)
            assert (await pc.min_offset(mq), await pc.max_offset(mq)) == (0, ends[q])
            send, recv = trio.open_memory_channel[RangeChunk](100)
            async with send, recv:
                assert await pc.read_range(mq, "*", 0, ends[q], send) == ends[q]
                send.close()
                async for chunk in recv:
                    got += [m.body for b in chunk.bodies for m in decode_records(b)
                            if m.queue_offset < chunk.end]
            await pc.update_consume_offset(mq, ends[q])
        assert sorted(got) == sorted(bodies)
    assert await committed(slave.addr, reader_group) == ends

    group = "ha-lite-group"
    seen: Counter[bytes] = Counter()
    lite = LitePullConsumer(group, ns.addr, consume_from_where=FIRST,
                            auto_commit_interval=0.5, **FAST)
    lite.subscribe(TOPIC, "*")
    async with lite:
        async def polled(want: list[bytes]) -> bool:
            for m in await lite.poll(timeout=0.2):
                seen[m.body] += 1
            return all(seen[b] for b in want)
        await wait_until(lambda: polled(bodies), 60, "lite pull reading from the slave")
        await wait_committed(slave.addr, group, ends, "lite pull offsets kept on the slave")
        # no master: nowhere to send
        async with Producer("ha-lite-producer", ns.addr) as producer:
            with pytest.raises(MQClientError):
                await producer.send(Message(TOPIC, b"nowhere"))

        master.start()

        async def master_back() -> bool:
            return await broker_ids(ns) == {0, 1}
        await wait_until(master_back, 20, "the master routed again")
        # the offsets given to the slave reach the returned master (its own are older)
        await wait_committed(master.addr, group, ends, "lite pull offsets on the master")
        more = [b"more-%d" % i for i in range(100)]
        async with Producer("ha-lite-producer", ns.addr) as producer:
            await send_all(producer, more)
        await wait_until(lambda: polled(more), 60, "lite pull going on with the master")
    assert set(seen) == set(bodies + more) and max(seen.values()) == 1


async def test_cold_reads_go_to_the_slave(cluster: Cluster, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """Test 7: with accessMessageInMemoryMaxRatio=0 every read on the master is cold,
    so it suggests the slave; the slave (default ratio) finds the same reads warm
    and suggests the master. Every pull goes where the previous answer of its
    queue said, and the slave serves some of the messages."""
    ns = cluster.namesrv()
    master = cluster.broker("broker-a", ns.addr, brokerRole="ASYNC_MASTER",
                            slaveReadEnable="true", accessMessageInMemoryMaxRatio=0, **BROKER)
    slave = cluster.broker("broker-a-s", ns.addr, brokerName="broker-a", brokerId=1,
                           brokerRole="SLAVE", slaveReadEnable="true", **BROKER)
    await create_topic(ns, [master])
    bodies = [b"cold-%d" % i for i in range(400)]
    async with Producer("ha-cold-producer", ns.addr) as producer:
        await send_all(producer, bodies)
    await wait_replicated(master, slave)
    assert await broker_ids(ns) == {0, 1}

    # a pull consumer: the master's answer names the slave, the next pull goes there
    async with PullConsumer("ha-cold-reader", ns.addr) as pc:
        mq = MessageQueue(TOPIC, "broker-a", 0)
        api = pc._api
        assert api is not None
        sub = build_subscription(TOPIC, "*")
        first = await api.pull_raw(mq, sub, 0, 4, timeout=5)
        assert (first.pull_status, first.addr) == (PullStatus.FOUND, master.addr)
        assert api.pull_from[mq] == 1
        second = await api.pull_raw(mq, sub, first.next_begin_offset, 4, timeout=5)
        assert (second.pull_status, second.addr) == (PullStatus.FOUND, slave.addr)
        assert api.pull_from[mq] == MASTER_ID  # warm on the slave
        end = second.max_offset
        api.pull_from[mq] = 1
        caught_up = await api.pull_raw(mq, sub, end, 4, timeout=5)
        assert (caught_up.pull_status, caught_up.addr) == (PullStatus.NO_NEW_MSG, slave.addr)
        assert api.pull_from[mq] == MASTER_ID

    # a push consumer follows the same way
    group = "ha-cold-group"
    pulls: list[tuple[MessageQueue, str, int]] = []  # queue, where, suggested next
    real_pull_raw = ConsumerAPI.pull_raw

    async def spy(self: ConsumerAPI, mq: MessageQueue, sub: SubscriptionData, offset: int,
                  max_nums: int, **kw: Any) -> RawPullResult:
        r = await real_pull_raw(self, mq, sub, offset, max_nums, **kw)
        if self.group == group and mq.topic == TOPIC:
            pulls.append((mq, r.addr, self.pull_from[mq]))
        return r

    monkeypatch.setattr(ConsumerAPI, "pull_raw", spy)
    seen: Counter[bytes] = Counter()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            seen[m.body] += 1
        return SUCCESS

    consumer = PushConsumer(group, ns.addr, consume_from_where=FIRST, pull_batch_size=8, **FAST)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listener)
    async with consumer:
        async def all_seen() -> bool:
            return all(seen[b] for b in bodies)
        await wait_until(all_seen, 60, "every message consumed")
    addr_of = {MASTER_ID: master.addr, 1: slave.addr}
    by_queue: dict[MessageQueue, list[tuple[str, int]]] = {}
    for mq, addr, suggested in pulls:
        by_queue.setdefault(mq, []).append((addr, suggested))
    for mq, seq in by_queue.items():
        assert seq[0][0] == master.addr, (mq, seq[:3])  # nothing suggested yet
        for (_, suggested), (addr, _) in zip(seq, seq[1:], strict=False):
            assert addr == addr_of[suggested], (mq, seq)
    from_slave = sum(1 for _, addr, _ in pulls if addr == slave.addr)
    print(f"\ncold reads: {len(pulls)} pulls, {from_slave} served by the slave")
    assert from_slave > 0 and all(n == 1 for n in seen.values())

