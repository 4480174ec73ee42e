"""The Spark sink's write rate next to our own producer's batched rate, in one run.

    python -m bench.spark_sink --rows 200000

Starts a name server and a broker (tests/integration/cluster.py) in a temporary
directory, then, alternating, for each of ``--runs`` rounds:

- ``mqbench producer`` (a separate process) sends ROWS messages of SIZE bytes in
  batches of 256 with 8 sends in flight: our producer's batched rate;
- a ``local[2]`` SparkSession writes a DataFrame of ROWS rows (``spark.range``
  in two partitions, a SIZE-byte string body each) with ``df.write.format("rocketmq")``
  (its defaults: batches of 256, 8 in flight per task).

Before the first round Spark writes 1,000 rows (the JVM and the Python workers
start, the producer cache fills). Prints rows/s of each and their ratio
(the issue's goal: the sink at >= 0.6x the producer).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import trio

from client.admin import MQAdmin
from tests.integration.cluster import Cluster

TOPIC = "SparkSinkBench"


def producer_rate(namesrv: str, rows: int, size: int) -> float:
    """``mqbench producer -b 256 -w 8`` in its own process: msgs/s."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.mqbench", "producer", "-n", namesrv, "-t", TOPIC,
         "-s", str(size), "-b", "256", "-w", "8", "-c", str(rows), "--json"],
        check=True, capture_output=True, text=True)
    return float(json.loads(out.stdout)["msgs_per_s"])


def sink_rate(spark: object, namesrv: str, rows: int, size: int) -> float:
    df = spark.range(0, rows, numPartitions=2).selectExpr(  # type: ignore[attr-defined]
        f"substring(concat(cast(id as string), repeat('x', {size})), 1, {size}) as body")
    t0 = time.perf_counter()
    df.write.format("rocketmq").mode("append").option("namesrv", namesrv) \
        .option("topic", TOPIC).save()
    return rows / (time.perf_counter() - t0)


@click.command()
@click.option("--rows", type=click.IntRange(min=1000), default=200_000, show_default=True)
@click.option("--size", type=click.IntRange(min=16), default=1024, show_default=True,
              help="Body bytes per row.")
@click.option("--runs", type=click.IntRange(min=1), default=2, show_default=True)
def main(rows: int, size: int, runs: int) -> None:
    """Spark sink rows/s against our producer's batched msgs/s."""
    from client.spark import spark_session

    with tempfile.TemporaryDirectory() as d:
        cluster = Cluster(Path(d))
        try:
            ns = cluster.namesrv()
            broker = cluster.broker("broker-a", ns.addr)

            async def create() -> None:
                async with MQAdmin(ns.addr) as admin:
                    await admin.create_topic(TOPIC, broker_addr=broker.addr,
                                             read_queue_nums=4, write_queue_nums=4)
                    with trio.fail_after(15):
                        while True:
                            try:
                                await admin.topic_route(TOPIC)
                                return
                            except Exception:
                                await trio.sleep(0.2)
            trio.run(create)

            spark = spark_session("spark-sink-bench", "local[2]",
                                  **{"spark.ui.enabled": "false",
                                     "spark.driver.memory": "1g"})
            spark.sparkContext.setLogLevel("ERROR")
            try:
                sink_rate(spark, ns.addr, 1000, size)  # warm-up
                pairs = []
                for run in range(runs):
                    p = producer_rate(ns.addr, rows, size)
                    s = sink_rate(spark, ns.addr, rows, size)
                    pairs.append((p, s))
                    click.echo(f"run {run + 1}: producer {p:,.0f} msg/s, spark sink "
                               f"{s:,.0f} rows/s, ratio {s / p:.2f}")
            finally:
                spark.stop()
            ratio = statistics.median(s / p for p, s in pairs)
            click.echo(f"{rows:,} rows of {size} B, local[2]: median ratio sink/producer "
                       f"{ratio:.2f} (goal >= 0.6)")
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
