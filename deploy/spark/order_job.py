"""Order analytics on Spark, reading a RocketMQ topic of JSON order events.

Each message body is ``{"order_id": str, "user": str, "amount": float, "ts": ms}``.
Writes parquet under OUTPUT:

- ``orders/``: the parsed events (streaming: one directory per micro-batch,
  ``batch_id=N``, overwritten if a batch is replayed, so reruns never duplicate);
- ``user_totals/``: per user, total amount and order count;
- ``per_minute/``: orders per minute of event time.

    deploy/spark/submit.sh --master 'local[2]' deploy/spark/order_job.py \\
        --namesrv 127.0.0.1:9876 --topic Orders --mode batch --output /tmp/orders-out
    deploy/spark/submit.sh --master 'local[2]' deploy/spark/order_job.py \\
        --namesrv 127.0.0.1:9876 --topic Orders --mode stream \\
        --output /tmp/orders-out --checkpoint /tmp/orders-ck
"""

from __future__ import annotations

import argparse
from typing import Any

ORDER_SCHEMA = "order_id string, user string, amount double, ts long"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--namesrv", default="127.0.0.1:9876")
    p.add_argument("--topic", default="Orders")
    p.add_argument("--group", default="order-job")
    p.add_argument("--mode", choices=("batch", "stream"), default="batch")
    p.add_argument("--output", required=True)
    p.add_argument("--checkpoint", help="checkpoint directory (stream mode)")
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--ending-offsets", default="latest", help="batch mode: latest or offsets JSON")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--trigger", choices=("availableNow", "processingTime"), default="availableNow")
    p.add_argument("--processing-time", default="10 seconds")
    p.add_argument("--timeout", type=float, default=None,
                   help="stream mode with processingTime: stop after this many seconds")
    args = p.parse_args(argv)
    if args.mode == "stream" and not args.checkpoint:
        p.error("--checkpoint is required in stream mode")
    return args


def parse_orders(df: Any) -> Any:
    from pyspark.sql import functions as F

    return (df.select(F.from_json(F.col("body").cast("string"), ORDER_SCHEMA).alias("o"))
              .select("o.*").where(F.col("order_id").isNotNull()))


def write_aggregates(spark: Any, orders: Any, output: str) -> None:
    from pyspark.sql import functions as F

    (orders.groupBy("user")
        .agg(F.round(F.sum("amount"), 2).alias("total_amount"), F.count("*").alias("orders"))
        .write.mode("overwrite").parquet(f"{output}/user_totals"))
    (orders.withColumn("minute", F.date_trunc("minute", F.timestamp_millis("ts")))
        .groupBy("minute").agg(F.count("*").alias("orders"))
        .write.mode("overwrite").parquet(f"{output}/per_minute"))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from client.spark import spark_session

    spark = spark_session("order-job")
    reader_opts = {"namesrv": args.namesrv, "topic": args.topic, "consumerGroup": args.group,
                   "startingOffsets": args.starting_offsets}
    if args.mode == "batch":
        df = (spark.read.format("rocketmq").options(**reader_opts)
              .option("endingOffsets", args.ending_offsets).load())
        orders = parse_orders(df)
        orders.write.mode("overwrite").parquet(f"{args.output}/orders")
        write_aggregates(spark, spark.read.parquet(f"{args.output}/orders"), args.output)
    else:
        stream = spark.readStream.format("rocketmq").options(**reader_opts)
        if args.max_offsets_per_trigger:
            stream = stream.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        orders = parse_orders(stream.load())

        def each_batch(batch: Any, batch_id: int) -> None:
            # keyed by batch id: a replayed batch overwrites its own directory
            batch.write.mode("overwrite").parquet(f"{args.output}/orders/batch_id={batch_id}")
            write_aggregates(spark, spark.read.parquet(f"{args.output}/orders"), args.output)

        writer = orders.writeStream.foreachBatch(each_batch).option(
            "checkpointLocation", args.checkpoint)
        if args.trigger == "availableNow":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=args.processing_time)
        query = writer.start()
        query.awaitTermination(args.timeout)
        query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
