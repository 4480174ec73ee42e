"""The rocketmq sink (df.write / df.writeStream) against real brokers, in the shared
SparkSession; read back with the source and with the broker's unique-key index."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import CliRunner

from client.admin import MQAdmin
from client.admin_cli import cli
from client.spark.sink_rows import parse_unique_key
from protocol.route import PERM_READ
from tests.spark.conftest import Pair
from tests.waits import wait_until


def read_back(spark: Any, pair: Pair, topic: str) -> list[Any]:
    return (spark.read.format("rocketmq").option("namesrv", pair.ns.addr)
            .option("topic", topic).option("startingOffsets", "earliest").load().collect())


def test_batch_write_every_row_once_with_its_columns(spark: Any, pair: Pair) -> None:
    topic = "SparkSinkBatch"
    pair.create_topic(topic)
    rows = [(f"body-{i}", f"T{i % 3}", [f"k{i}", f"id-{i}"], {"n": str(i), "even": str(i % 2 == 0)})
            for i in range(300)]
    df = spark.createDataFrame(rows, "body string, tags string, keys array<string>, "
                                     "properties map<string,string>").repartition(3)
    (df.write.format("rocketmq").mode("append").option("namesrv", pair.ns.addr)
     .option("topic", topic).option("batchSize", "16").option("maxInFlight", "4").save())

    got = read_back(spark, pair, topic)
    assert len(got) == 300
    keys = [r.msgId for r in got]
    assert len(set(keys)) == 300
    parsed = [parse_unique_key(k) for k in keys]
    assert all(p is not None for p in parsed)
    assert len({p[0] for p in parsed if p}) == 1  # one write id for the job
    assert {p[1] for p in parsed if p} == {0}  # batch id 0 for a batch write
    assert {p[2] for p in parsed if p} == {0, 1, 2}  # three partitions
    by_body = {r.body.decode(): r for r in got}
    assert set(by_body) == {f"body-{i}" for i in range(300)}
    for i in (0, 7, 299):
        r = by_body[f"body-{i}"]
        assert r.tags == f"T{i % 3}" and r.keys == f"k{i} id-{i}"
        assert r.properties["n"] == str(i) and r.properties["even"] == str(i % 2 == 0)
    assert {r.brokerName for r in got} == {"broker-a", "broker-b"}  # the default selector

    # the broker's index finds a message by its unique key (mqadmin queryMsgByUniqueKey)
    key = by_body["body-42"].msgId

    async def indexed() -> bool:
        async with MQAdmin(pair.ns.addr) as admin:
            found = await admin.query_by_key(topic, key, 32)
        return [m.body for m in found if m.uniq_key == key] == [b"body-42"]

    trio.run(wait_until, indexed, 15, "the unique key in the index")
    out = CliRunner().invoke(cli, ["queryMsgByUniqueKey", "-n", pair.ns.addr, "-t", topic,
                                   "-i", key, "--json"])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)
    assert [(m["msgId"], m["body"]) for m in shown] == [(key, "body-42")]


def test_plain_rows_every_row_once_with_tags_and_keys(spark: Any, pair: Pair) -> None:
    """Rows of body, tags and keys to the topic option (encoded from the Arrow
    columns), in Arrow batches of 70 rows cut into requests of 64: each row once,
    with its tags and keys, its key naming its partition and row."""
    topic = "SparkSinkPlain"
    pair.create_topic(topic)
    rows = [(f"plain-{i}".encode(), None if i % 5 == 0 else f"T{i % 3}",
             None if i % 7 == 0 else [f"k{i}", "", None, f"id-{i}"]) for i in range(1000)]
    df = spark.createDataFrame(rows, "body binary, tags string, keys array<string>") \
        .repartition(2)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "70")
    try:
        (df.write.format("rocketmq").mode("append").option("namesrv", pair.ns.addr)
         .option("topic", topic).option("batchSize", "64").save())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    got = read_back(spark, pair, topic)
    by_body = Counter(r.body.decode() for r in got)
    assert by_body == Counter(f"plain-{i}" for i in range(1000))
    keys = [parse_unique_key(r.msgId) for r in got]
    assert all(k is not None for k in keys)
    per_partition = Counter(k[2] for k in keys if k)
    assert set(per_partition) == {0, 1} and sum(per_partition.values()) == 1000
    for partition, count in per_partition.items():  # rows 0..count-1 of each partition
        assert sorted(k[3] for k in keys if k and k[2] == partition) == list(range(count))
    for r in got:
        i = int(r.body.decode().split("-")[1])
        assert r.tags == (None if i % 5 == 0 else f"T{i % 3}")
        assert r.keys == (None if i % 7 == 0 else f"k{i} id-{i}")


def test_queue_id_and_sharding_key_pick_queues(spark: Any, pair: Pair) -> None:
    from client.spark.sink_rows import queue_for_sharding_key
    from protocol.message import MessageQueue

    topic = "SparkSinkQueues"
    pair.create_topic(topic, queues=2)  # 4 writable queues: a0 a1 b0 b1
    df = spark.createDataFrame([(f"q{i}", i % 4) for i in range(40)], "body string, queueId int")
    df.write.format("rocketmq").mode("append").option("namesrv", pair.ns.addr) \
        .option("topic", topic).save()
    got = read_back(spark, pair, topic)
    order = [("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)]
    assert {r.body.decode(): (r.brokerName, r.queueId) for r in got} == {
        f"q{i}": order[i % 4] for i in range(40)}

    topic = "SparkSinkSharded"
    pair.create_topic(topic, queues=2)
    users = [f"user-{i % 7}" for i in range(70)]
    df = spark.createDataFrame([(f"s{i}", u) for i, u in enumerate(users)],
                               "body string, shardingKey string").repartition(2)
    df.write.format("rocketmq").mode("append").option("namesrv", pair.ns.addr) \
        .option("topic", topic).save()
    got = read_back(spark, pair, topic)
    queues = [MessageQueue(topic, b, q) for b, q in order]
    expect = {f"s{i}": queue_for_sharding_key(u, queues) for i, u in enumerate(users)}
    assert {r.body.decode(): MessageQueue(topic, r.brokerName, r.queueId) for r in got} == expect
    assert len(got) == 70  # each once: one user's messages all in the user's queue


def test_unknown_columns_fail_at_writer_creation(spark: Any, pair: Pair) -> None:
    df = spark.createDataFrame([("a", 1, "x")], "body string, value int, partition string")
    with pytest.raises(Exception) as info:
        df.write.format("rocketmq").mode("append").option("namesrv", pair.ns.addr) \
            .option("topic", "SparkSinkNever").save()
    text = str(info.value)
    assert "'value', 'partition'" in text and "does not know the column" in text
    no_topic = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception, match="needs a 'topic' column or the 'topic' option"):
        no_topic.write.format("rocketmq").mode("append").option("namesrv", pair.ns.addr).save()


def test_bad_row_names_partition_and_index(spark: Any, pair: Pair) -> None:
    topic = "SparkSinkBadRow"
    pair.create_topic(topic, queues=1, brokers=pair.brokers[:1])
    df = spark.createDataFrame([("ok",), ("",), ("later",)], "body string").coalesce(1)
    with pytest.raises(Exception, match=r"row 1 of partition 0 cannot be sent: its body is empty"):
        df.write.format("rocketmq").mode("append").option("namesrv", pair.ns.addr) \
            .option("topic", topic).save()
    bad_topic = spark.createDataFrame([("x", "ok"), ("y", "no spaces allowed")],
                                      "body string, topic string").coalesce(1)
    with pytest.raises(Exception, match=r"row 1 of partition 0 cannot be sent: bad topic"):
        bad_topic.write.format("rocketmq").mode("append").option("namesrv", pair.ns.addr).save()


def test_send_failure_fails_the_task(spark: Any, pair: Pair) -> None:
    topic = "SparkSinkReadOnly"

    async def read_only() -> None:
        async with MQAdmin(pair.ns.addr) as admin:
            for b in pair.brokers:
                await admin.create_topic(topic, broker_addr=b.addr, read_queue_nums=2,
                                         write_queue_nums=2, perm=PERM_READ)

            async def routed() -> bool:
                try:
                    return len((await admin.topic_route(topic)).queue_datas) == 2
                except Exception:
                    return False
            await wait_until(routed, 15, f"{topic} routed")
    trio.run(read_only)
    df = spark.createDataFrame([(f"m{i}",) for i in range(10)], "body string").coalesce(1)
    with pytest.raises(Exception) as info:
        df.write.format("rocketmq").mode("append").option("namesrv", pair.ns.addr) \
            .option("topic", topic).option("sendTimeoutMs", "2000").save()
    text = str(info.value)
    assert "SinkSendError" in text and topic in text and "partition 0" in text, text[-2000:]


def test_streaming_write_replayed_batch_dedupes_by_unique_key(spark: Any, pair: Pair,
                                                             tmp_path: Path) -> None:
    topic = "SparkSinkStream"
    pair.create_topic(topic)
    src, ck = tmp_path / "in", tmp_path / "ck"
    src.mkdir()

    def add_file(name: str, numbers: range) -> None:
        (src / name).write_text("".join(json.dumps({"n": n}) + "\n" for n in numbers))

    def run() -> Any:
        df = (spark.readStream.schema("n long").option("maxFilesPerTrigger", "1").json(str(src))
              .selectExpr("concat('in-', cast(n as string)) as body",
                          "concat('k', cast(n % 5 as string)) as keys"))
        q = (df.writeStream.format("rocketmq").option("namesrv", pair.ns.addr)
             .option("topic", topic).option("checkpointLocation", str(ck))
             .trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert q.exception() is None, q.exception()
        return q

    add_file("a.json", range(0, 100))
    add_file("b.json", range(100, 200))
    first = run()
    assert sum(p["numInputRows"] for p in first.recentProgress) == 200
    # as if the query died after sending its last batch but before committing it:
    # the restart runs that batch again, with the same batch id and rows
    commits = sorted((ck / "commits").iterdir(), key=lambda p: p.name)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    (ck / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    add_file("c.json", range(200, 300))
    run()

    got = read_back(spark, pair, topic)
    bodies = Counter(r.body.decode() for r in got)
    assert set(bodies) == {f"in-{n}" for n in range(300)}  # every input at least once
    assert sum(bodies.values()) > 300  # the replayed batch went out twice
    by_key: dict[str, set[str]] = {}
    for r in got:
        by_key.setdefault(r.msgId, set()).add(r.body.decode())
    assert len(by_key) == 300 and all(len(b) == 1 for b in by_key.values())
    parsed = {parse_unique_key(k) for k in by_key}
    assert len({p[0] for p in parsed if p}) == 1  # the query's id, across the restart
    assert {r.keys for r in got} == {f"k{i}" for i in range(5)}
