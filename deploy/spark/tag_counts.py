"""Messages per tag per time window of a topic, counted by a Spark streaming
job and published to another topic.

The job (``job``, run with spark-submit) reads ``--topic`` with the rocketmq
source, counts its messages per tag and per ``--window`` of their born time,
and writes each count that changed in a micro-batch (output mode ``update``)
to ``--output-topic`` with the rocketmq sink (a batch write per micro-batch,
``foreachBatch``): the body is JSON ``{"tag", "windowStart", "windowEnd",
"count", "batch"}`` (``batch``: the micro-batch's id), ``keys`` and
``shardingKey`` are ``<tag>@<windowStart>``, so every update of one count
goes to the same queue, in order, and the last message of a key holds its
count. ``show`` prints those last counts.

    deploy/spark/submit.sh --master 'local[2]' deploy/spark/tag_counts.py job \\
        --namesrv 127.0.0.1:9876 --topic SparkEvents --output-topic SparkTagCounts \\
        --checkpoint /tmp/tag-counts-ck
    .venv/bin/python -m deploy.spark.tag_counts show --namesrv 127.0.0.1:9876 \\
        --output-topic SparkTagCounts

The checkpoint holds the source's offsets and the counts (Spark's state
store): a job killed and started again with it goes on from its last
committed micro-batch, counting every message once; the updates of the
micro-batch that was running when it died are published again (at least
once: the same bodies, ``batch`` included, so a reader drops the copies by
body or takes the last message of each key, which is right either way).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

NO_TAG = "(none)"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    job = sub.add_parser("job", help="the streaming job (spark-submit)")
    job.add_argument("--namesrv", default="127.0.0.1:9876")
    job.add_argument("--topic", default="SparkEvents")
    job.add_argument("--output-topic", default="SparkTagCounts")
    job.add_argument("--group", default="tag-counts")
    job.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    job.add_argument("--window", default="1 minute", help="window length, e.g. '10 seconds'")
    job.add_argument("--watermark", default="10 minutes",
                     help="how late a message may be born and still be counted")
    job.add_argument("--starting-offsets", default="earliest")
    job.add_argument("--max-offsets-per-trigger", type=int, default=None)
    job.add_argument("--trigger", choices=("availableNow", "processingTime"),
                     default="availableNow",
                     help="availableNow: what is there, then stop; processingTime: go on")
    job.add_argument("--processing-time", default="5 seconds")
    job.add_argument("--timeout", type=float, default=None,
                     help="with processingTime: stop after this many seconds")
    show = sub.add_parser("show", help="print the last count of each tag and window")
    show.add_argument("--namesrv", default="127.0.0.1:9876")
    show.add_argument("--output-topic", default="SparkTagCounts")
    return p.parse_args(argv)


def counts_query(spark: Any, args: argparse.Namespace) -> Any:
    """The streaming query's plan: messages per (tag, window)."""
    from pyspark.sql import functions as F

    source = (spark.readStream.format("rocketmq").option("namesrv", args.namesrv)
              .option("topic", args.topic).option("consumerGroup", args.group)
              .option("startingOffsets", args.starting_offsets))
    if args.max_offsets_per_trigger is not None:
        source = source.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    events = (source.load().withWatermark("bornTimestamp", args.watermark)
              .select(F.coalesce("tags", F.lit(NO_TAG)).alias("tag"), "bornTimestamp"))
    return events.groupBy("tag", F.window("bornTimestamp", args.window).alias("w")).count()


def as_messages(counts: Any, batch_id: int) -> Any:
    """One micro-batch's updated counts as the sink's columns: a JSON body, the
    count's key as ``keys`` and ``shardingKey`` (one queue per key)."""
    from pyspark.sql import functions as F

    start = F.date_format("w.start", "yyyy-MM-dd'T'HH:mm:ss'Z'")
    end = F.date_format("w.end", "yyyy-MM-dd'T'HH:mm:ss'Z'")
    key = F.concat("tag", F.lit("@"), start)
    body = F.to_json(F.struct(F.col("tag"), start.alias("windowStart"), end.alias("windowEnd"),
                              F.col("count"), F.lit(batch_id).alias("batch")))
    return counts.select(body.alias("body"), key.alias("keys"), key.alias("shardingKey"),
                         F.lit("tagCount").alias("tags"))


def run_job(args: argparse.Namespace) -> None:
    from client.spark import spark_session

    spark = spark_session("tag-counts", **{"spark.sql.session.timeZone": "UTC"})
    spark.sparkContext.setLogLevel("WARN")

    def publish(counts: Any, batch_id: int) -> None:
        # Spark's Python data sources take streaming writes in append mode only:
        # the updated counts of each micro-batch go out as a batch write
        (as_messages(counts, batch_id).write.format("rocketmq").mode("append")
         .option("namesrv", args.namesrv).option("topic", args.output_topic).save())

    writer = (counts_query(spark, args).writeStream.outputMode("update").foreachBatch(publish)
              .option("checkpointLocation", args.checkpoint))
    if args.trigger == "availableNow":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.processing_time)
    query = writer.start()
    print(f"tag counts of {args.topic} to {args.output_topic}: query {query.id}", flush=True)
    if args.timeout is not None and args.trigger == "processingTime":
        query.awaitTermination(args.timeout)
        query.stop()
    else:
        query.awaitTermination()
    exc = query.exception()
    if exc is not None:
        raise SystemExit(f"the query failed: {exc}")
    for progress in query.recentProgress:
        if progress["numInputRows"]:
            took = progress["durationMs"]
            print(f"batch {progress['batchId']}: {progress['numInputRows']} messages in "
                  f"{took.get('triggerExecution', 0) / 1000:.1f} s ({took})", flush=True)
    spark.stop()


def latest_counts(bodies: Iterable[bytes]) -> dict[tuple[str, str], dict[str, Any]]:
    """The last update of each (tag, windowStart) among ``bodies``, in the order
    given (one queue's order: every update of a key is in one queue)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for body in bodies:
        update = json.loads(body)
        out[(update["tag"], update["windowStart"])] = update
    return out


def read_topic(namesrv: str, topic: str) -> Iterator[tuple[str, bytes, dict[str, str]]]:
    """Every message of ``topic`` (queue, body, properties), each queue in offset order."""
    from client.blocking import PullConsumer, PullStatus

    with PullConsumer("tag-counts-reader", namesrv) as consumer:
        for mq in consumer.fetch_subscribe_message_queues(topic):
            offset, end = consumer.min_offset(mq), consumer.max_offset(mq)
            while offset < end:
                r = consumer.pull(mq, "*", offset, 64)
                if r.pull_status is not PullStatus.FOUND:
                    break
                for m in r.msg_found_list:
                    yield f"{mq.broker_name}:{mq.queue_id}", m.body, dict(m.properties)
                offset = r.next_begin_offset


def show(args: argparse.Namespace) -> None:
    by_queue: dict[str, list[bytes]] = {}
    for queue, body, _ in read_topic(args.namesrv, args.output_topic):
        by_queue.setdefault(queue, []).append(body)
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for bodies in by_queue.values():
        latest.update(latest_counts(bodies))
    for (tag, start), update in sorted(latest.items()):
        print(f"{start}  {tag:<12} {update['count']}")
    total = sum(u["count"] for u in latest.values())
    print(f"{len(latest)} counts, {total} messages in all", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.monotonic()
    if args.command == "job":
        run_job(args)
        print(f"done in {time.monotonic() - started:.1f} s", file=sys.stderr)
    else:
        show(args)


if __name__ == "__main__":
    main()
