"""The rocketmq source against real brokers, in one shared SparkSession."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from client.blocking import Message, MessageQueue, Producer, PullConsumer
from tests.spark.conftest import Pair
from tests.waits import wait_until_sync


def produce(pair: Pair, topic: str, bodies: list[bytes], tags: list[str] | None = None,
            batch: int = 50) -> None:
    with Producer("spark-test-producer", pair.ns.addr) as p:
        for i in range(0, len(bodies), batch):
            p.send_batch([Message(topic, b, tags=None if tags is None else tags[i + j],
                                  keys=str(i + j))
                          for j, b in enumerate(bodies[i:i + batch])])


def reader(spark: Any, pair: Pair, topic: str, **opts: str) -> Any:
    r = spark.read.format("rocketmq").option("namesrv", pair.ns.addr).option("topic", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r


def test_batch_read_columns_bounds_and_tags(spark: Any, pair: Pair) -> None:
    topic = "SparkBatch"
    pair.create_topic(topic)
    bodies = [b"b%d" % i for i in range(400)]
    produce(pair, topic, bodies, tags=["A" if i % 2 else "B" for i in range(400)])

    rows = reader(spark, pair, topic).load().collect()
    assert sorted(r.body for r in rows) == sorted(bodies)
    assert {r.brokerName for r in rows} == {"broker-a", "broker-b"}
    assert {r.queueId for r in rows} == {0, 1, 2, 3}
    keys = {(r.brokerName, r.queueId, r.queueOffset) for r in rows}
    assert len(keys) == 400
    r0 = rows[0]
    assert r0.topic == topic and r0.keys == r0.body.decode()[1:] and r0.tags in ("A", "B")
    assert isinstance(r0.bornTimestamp, datetime) and isinstance(r0.storeTimestamp, datetime)
    assert r0.properties["TAGS"] == r0.tags and r0.msgId == r0.properties["UNIQ_KEY"]

    ending = {topic: {f"{b}:{q}": 5 for b in ("broker-a", "broker-b") for q in range(4)}}
    bounded = reader(spark, pair, topic, endingOffsets=json.dumps(ending)).load().collect()
    assert len(bounded) == 40 and max(r.queueOffset for r in bounded) == 4

    tagged = reader(spark, pair, topic, subExpression="A").load().collect()
    assert len(tagged) == 200 and {r.tags for r in tagged} == {"A"}

    # an SQL92 property filter, evaluated by the brokers
    sql = reader(spark, pair, topic, subExpression="TAGS = 'A' AND KEYS >= 300",
                 expressionType="SQL92").load().collect()
    assert sorted(int(r.keys) for r in sql) == list(range(301, 400, 2))


def test_streaming_available_now_exactly_once(spark: Any, pair: Pair, tmp_path: Path) -> None:
    topic = "SparkStream"
    group = "spark-stream-group"
    pair.create_topic(topic)
    produce(pair, topic, [b"s%d" % i for i in range(300)])
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def run() -> Any:
        df = (spark.readStream.format("rocketmq").option("namesrv", pair.ns.addr)
              .option("topic", topic).option("consumerGroup", group)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100").load())
        q = (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        return q

    q = run()
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert len(batches) == 3 and all(p["numInputRows"] == 100 for p in batches)
    assert spark.read.parquet(out).count() == 300

    produce(pair, topic, [b"t%d" % i for i in range(200)])
    run()
    result = spark.read.parquet(out)
    assert result.count() == 500
    assert result.select("brokerName", "queueId", "queueOffset").distinct().count() == 500
    assert {r.body for r in result.collect()} == {b"s%d" % i for i in range(300)} | {
        b"t%d" % i for i in range(200)}

    # commit() recorded the processed end offsets as the group's offsets
    with PullConsumer(group, pair.ns.addr) as c:
        for mq in c.fetch_subscribe_message_queues(topic):
            assert c.fetch_consume_offset(mq) == c.max_offset(mq), mq


def test_start_below_min_offset_fails_or_skips(spark: Any, pair: Pair, tmp_path: Path) -> None:
    topic = "SparkLoss"
    hours = ";".join(f"{h:02d}" for h in range(24))
    broker = pair.cluster.broker("broker-c", pair.ns.addr, mapedFileSizeCommitLog=64 * 1024,
                                 mapedFileSizeConsumeQueue=20 * 50, fileReservedTime=0,
                                 deleteWhen=hours, cleanResourceInterval=200)
    pair.create_topic(topic, queues=1, brokers=[broker])
    produce(pair, topic, [b"x" * 1024 for _ in range(300)], batch=10)
    mq = MessageQueue(topic, "broker-c", 0)
    with PullConsumer("loss-check", pair.ns.addr) as c:
        low = wait_until_sync(lambda: c.min_offset(mq), 30, "old files to be cleaned")
    start = json.dumps({topic: {"broker-c:0": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, pair, topic, startingOffsets=start).load().collect()
    rows = reader(spark, pair, topic, startingOffsets=start, failOnDataLoss="false").load().collect()
    assert min(r.queueOffset for r in rows) >= low and len(rows) == 300 - min(r.queueOffset for r in rows)

    def stream(tmp: Path, **opts: str) -> Any:
        r = (spark.readStream.format("rocketmq").option("namesrv", pair.ns.addr)
             .option("topic", topic).option("startingOffsets", start))
        for k, v in opts.items():
            r = r.option(k, v)
        q = (r.load().writeStream.format("parquet").option("path", str(tmp / "out"))
             .option("checkpointLocation", str(tmp / "ck")).trigger(availableNow=True).start())
        return q

    q = stream(tmp_path / "fail")
    with pytest.raises(Exception, match="failOnDataLoss"):
        q.awaitTermination(120)
    q = stream(tmp_path / "skip", failOnDataLoss="false")
    q.awaitTermination(120)
    offsets = sorted(r.queueOffset for r in spark.read.parquet(str(tmp_path / "skip" / "out")).collect())
    assert offsets[0] >= low and offsets == list(range(offsets[0], 300))
    broker.stop()


def test_arrow_schema_is_sparks_own(spark: Any) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from client.spark.arrow import SCHEMA as ARROW_SCHEMA
    from client.spark.source import SCHEMA

    struct = spark.createDataFrame([], SCHEMA).schema
    assert to_arrow_schema(struct, timezone="UTC").equals(ARROW_SCHEMA)


def test_partition_read_in_several_arrow_batches(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    import client.spark.source as source
    from client.spark.offsets import QueueRange

    topic = "SparkArrowBatches"
    pair.create_topic(topic, queues=1, brokers=pair.brokers[:1])
    bodies = [b"a%d" % i for i in range(1000)]
    produce(pair, topic, bodies, tags=["A" if i % 3 else "B" for i in range(1000)])
    monkeypatch.setattr(source, "BATCH_ROWS", 100)
    broker = pair.brokers[0].name

    def read(start: int, end: int, expression: str = "*") -> list[Any]:
        part = source.RangePartition(pair.ns.addr, "arrow-batches", expression, 7, True,
                                     QueueRange(topic, broker, 0, start, end))
        return list(source._batches(part))

    batches = read(0, 1000)
    # a batch closes once 100 rows are decoded; the chunks ready at that moment
    # (at most in_flight + 1 of 7 offsets) may take it past 100
    assert all(b.num_rows < 100 + 9 * 7 for b in batches) and len(batches) >= 1000 // 163
    offsets = [o for b in batches for o in b.column("queueOffset").to_pylist()]
    assert offsets == list(range(1000))
    assert [x for b in batches for x in b.column("body").to_pylist()] == bodies

    middle = [o for b in read(123, 456) for o in b.column("queueOffset").to_pylist()]
    assert middle == list(range(123, 456))

    tagged = [r for b in read(0, 1000, "B") for r in b.to_pylist()]
    assert [r["queueOffset"] for r in tagged] == list(range(0, 1000, 3))
    assert {r["tags"] for r in tagged} == {"B"}

    assert [o for b in read(990, 1500) for o in b.column("queueOffset").to_pylist()] == list(
        range(990, 1000))


def test_queues_that_appear_mid_stream_start_from_earliest(spark: Any, pair: Pair,
                                                           tmp_path: Path) -> None:
    topic = "SparkNewQueues"
    pair.create_topic(topic, queues=2, brokers=pair.brokers[:1])
    produce(pair, topic, [b"first%d" % i for i in range(100)])
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def run() -> None:
        q = (spark.readStream.format("rocketmq").option("namesrv", pair.ns.addr)
             .option("topic", topic).option("startingOffsets", "earliest").load()
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        q.awaitTermination(120)

    run()
    assert spark.read.parquet(out).count() == 100
    # the topic grows onto the second broker; its queues start from offset 0
    pair.create_topic(topic, queues=2)
    produce(pair, topic, [b"second%d" % i for i in range(100)], batch=10)  # round robin: every queue
    run()
    rows = spark.read.parquet(out).collect()
    assert sorted(r.body for r in rows) == sorted([b"first%d" % i for i in range(100)]
                                                  + [b"second%d" % i for i in range(100)])
    new = [r for r in rows if r.brokerName == pair.brokers[1].name]
    assert {r.queueId for r in new if r.queueOffset == 0} == {0, 1}
