"""The rocketmq source with its queues' master killed (-9): a streaming query
started before the kill goes on from the slave (brokerId 1) and back to the
master when it returns, delivering every message once; a batch read meanwhile
reads every message from the slave."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from client.admin import MQAdmin
from client.blocking import Message, Producer
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import OffsetResponseHeader, QueryConsumerOffsetRequestHeader
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster, Daemon
from tests.integration.ha_reads import max_offsets, topic_readable
from tests.waits import wait_until, wait_until_sync

TOPIC = "SparkHa"
QUEUES = 2
GROUP = "spark-ha-stream"
BROKER: dict[str, Any] = {"mapedFileSizeCommitLog": 1 << 20,
                          "mapedFileSizeConsumeQueue": 20 * 10_000}


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Daemon, Daemon]]:
    """A name server and broker-a: an ASYNC_MASTER and its slave."""
    cluster = Cluster(tmp_path_factory.mktemp("spark-ha"))
    try:
        ns = cluster.namesrv()
        master = cluster.broker("broker-a", ns.addr, brokerRole="ASYNC_MASTER", **BROKER)
        slave = cluster.broker("broker-a-s", ns.addr, brokerName="broker-a", brokerId=1,
                               brokerRole="SLAVE", **BROKER)
        yield ns, master, slave
    finally:
        cluster.close()


def broker_ids(ns: Daemon, topic: str = TOPIC) -> set[int]:
    async def go() -> set[int]:
        async with MQAdmin(ns.addr) as admin:
            route = await admin.topic_route(topic)
        return {bid for bd in route.broker_datas for bid in bd.broker_addrs}
    return trio.run(go)


def ends(addr: str, topic: str = TOPIC, queues: int = QUEUES) -> list[int]:
    async def go() -> list[int]:
        async with RemotingClient() as rc:
            return await max_offsets(rc, addr, topic, queues)
    return trio.run(go)


def committed(addr: str) -> list[int]:
    async def go() -> list[int]:
        out = []
        async with RemotingClient() as rc:
            for q in range(QUEUES):
                h = QueryConsumerOffsetRequestHeader(GROUP, TOPIC, q)
                r = await rc.invoke(addr, RemotingCommand.request(
                    RequestCode.QUERY_CONSUMER_OFFSET, h.to_fields()), 5)
                out.append(OffsetResponseHeader.from_fields(r.ext_fields).offset
                           if r.code == ResponseCode.SUCCESS else -1)
        return out
    return trio.run(go)


def produce(ns: Daemon, bodies: list[bytes], topic: str = TOPIC) -> None:
    with Producer("spark-ha-producer", ns.addr) as p:
        for i in range(0, len(bodies), 50):
            r = p.send_batch([Message(topic, b) for b in bodies[i:i + 50]])
            assert r.message_queue.broker_name == "broker-a"


def create_topic(ns: Daemon, master: Daemon, slave: Daemon, topic: str = TOPIC,
                 queues: int = QUEUES) -> None:
    async def go() -> None:
        async with MQAdmin(ns.addr) as admin:
            await admin.create_topic(topic, broker_addr=master.addr, read_queue_nums=queues,
                                     write_queue_nums=queues)

            async def routed() -> bool:
                try:
                    return bool((await admin.topic_route(topic)).queue_datas)
                except Exception:
                    return False
            await wait_until(routed, 15, "the topic routed")
        async with RemotingClient() as rc:
            await wait_until(lambda: topic_readable(rc, slave.addr, topic), 30,
                             "the topic copied to the slave")
    trio.run(go)


def test_a_partition_read_goes_on_from_the_slave(ha: tuple[Daemon, Daemon, Daemon],
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """An executor's read of a planned range (no Spark: the source's reading
    function in this process) whose master is killed after its first Arrow batch:
    the rest comes from the slave, each offset once."""
    import client.spark.source as source
    from client.spark.offsets import QueueRange

    ns, master, slave = ha
    topic = "SparkHaRange"
    create_topic(ns, master, slave, topic, 1)
    bodies = [b"range-%d" % i for i in range(300)]
    produce(ns, bodies, topic)
    wait_until_sync(lambda: ends(slave.addr, topic, 1) == [300], 30, "the slave caught up")
    monkeypatch.setattr(source, "BATCH_ROWS", 50)
    part = source.RangePartition(ns.addr, "spark-ha-range", "*", 16, True,
                                 QueueRange(topic, "broker-a", 0, 0, 300),
                                 failover_timeout=30.0, must_reach=300)
    batches = source._batches(part)
    first = next(batches)
    assert first.num_rows < 300
    master.kill()
    try:
        rest = list(batches)
    finally:
        master.start()
    got = [x for b in [first, *rest] for x in b.column("body").to_pylist()]
    assert got == bodies
    assert [x for b in [first, *rest] for x in b.column("queueOffset").to_pylist()] == list(
        range(300))
    assert any("again from offset" in r.getMessage() for r in caplog.records)
    wait_until_sync(lambda: broker_ids(ns, topic) == {0, 1}, 30, "the master routed again")


def test_stream_and_batch_reads_survive_a_dead_master(spark: Any, ha: tuple[Daemon, Daemon, Daemon],
                                                     tmp_path: Path) -> None:
    ns, master, slave = ha
    create_topic(ns, master, slave)
    first = [b"first-%d" % i for i in range(240)]
    produce(ns, first)
    wait_until_sync(lambda: ends(slave.addr) == ends(master.addr), 30, "the slave caught up")

    # a stream of 80-message micro-batches, started while the master is alive
    df = (spark.readStream.format("rocketmq").option("namesrv", ns.addr).option("topic", TOPIC)
          .option("consumerGroup", GROUP).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "80").option("failoverTimeoutMs", "30000").load())
    q = (df.select("body", "msgId").writeStream.format("memory").queryName("spark_ha_sink")
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="200 milliseconds").start())

    def delivered() -> int:
        return sum(p["numInputRows"] for p in q.recentProgress)

    def alive() -> None:
        if q.exception() is not None:
            raise AssertionError(f"the query failed: {q.exception()}")

    try:
        wait_until_sync(lambda: delivered() >= 80, 60, "the first micro-batch", check=alive)
        master.kill()
        at_kill = delivered()
        assert at_kill < len(first), "the stream finished before the kill: nothing to show"

        wait_until_sync(lambda: delivered() >= len(first), 60,
                        "the rest of the messages read from the slave", check=alive)
        assert broker_ids(ns) == {1}  # only the slave is routed: it served them
        # the offsets the stream commits go to the slave meanwhile
        slave_ends = ends(slave.addr)
        wait_until_sync(lambda: committed(slave.addr) == slave_ends, 30,
                        "the stream's offsets committed on the slave", check=alive)

        # a batch read with the master dead: every message, from the slave
        rows = (spark.read.format("rocketmq").option("namesrv", ns.addr).option("topic", TOPIC)
                .load().select("body").collect())
        assert sorted(r.body for r in rows) == sorted(first)

        # the master returns: the stream reads what is sent to it
        master.start()
        wait_until_sync(lambda: broker_ids(ns) == {0, 1}, 30, "the master routed again")
        second = [b"second-%d" % i for i in range(80)]
        produce(ns, second)
        wait_until_sync(lambda: delivered() >= len(first) + len(second), 60,
                        "the messages sent after the master's return", check=alive)
        master_ends = ends(master.addr)
        assert sum(master_ends) == len(first) + len(second)
        wait_until_sync(lambda: committed(master.addr) == master_ends, 30,
                        "the stream's offsets committed on the returned master", check=alive)
    finally:
        q.stop()
    got = Counter(r.body for r in spark.sql("select body from spark_ha_sink").collect())
    assert set(got) == set(first + second) and max(got.values()) == 1  # each exactly once
    print(f"\nmaster killed after {at_kill} of {len(first)} messages; "
          f"{len(first) - at_kill} read from the slave, {len(second)} from the returned master")
