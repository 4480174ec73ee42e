"""The Spark sink's write rate next to our own producer's batched rate, in one run.

    python -m bench.spark_sink --rows 200000

Starts a name server and a broker (tests/integration/cluster.py) in a temporary
directory and a ``local[2]`` SparkSession, then measures, ``--runs`` times:

- ``mqbench producer`` (a separate process) sends ROWS messages of SIZE bytes in
  batches of 256 with 8 sends in flight: our producer's batched rate;
- the SparkSession writes a DataFrame of ROWS rows (``spark.range`` in two
  partitions, a SIZE-byte string body each) with ``df.write.format("rocketmq")``
  (its defaults: batches of 256, 8 in flight per task). The DataFrame is cached
  and counted before the clock starts: the figure is the write's, not the
  making of a gigabyte of strings (which alone takes Spark about as long as our
  producer takes to send them; ``--no-cache`` times both together).

Each measurement starts on an empty store: the broker is stopped, its store
deleted and the broker started again on the same port (the cached producers of
Spark's workers reconnect). On a virtual machine, writing into memory the page
cache has not used before can be several times slower than into memory it
has freed (measured here: ``page cache`` below), so a measurement that ran
after a gigabyte or two of others would be slowed by the machine, not by what
it measures. The order alternates (producer first in odd runs, the sink first
in even ones), and before each measurement 256 MiB are written to a file beside
the store and deleted: that rate is printed beside the figure.

Then (``--check``, the default) the sink writes the DataFrame once more to an
empty store and the source reads the topic back: as many messages as rows, each
with its own unique key (``<write id>-<batch>-<partition>-<row>``).

Last, the same DataFrame goes ``--runs`` times to a Python data source that sends
nothing (``NoopSink``): what Spark alone costs a Python sink, the sink's ceiling.

Before the first round Spark writes 1,000 rows (the JVM and the Python workers
start, the producer cache fills). Prints rows/s of each and their ratio
(the issue's goal: the sink at >= 0.6x the producer).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import trio
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from client.admin import MQAdmin
from tests.integration.cluster import Cluster, Daemon

TOPIC = "SparkSinkBench"
PROBE_BYTES = 256 * 1024 * 1024


def producer_rate(namesrv: str, rows: int, size: int) -> float:
    """``mqbench producer -b 256 -w 8`` in its own process: msgs/s."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.mqbench", "producer", "-n", namesrv, "-t", TOPIC,
         "-s", str(size), "-b", "256", "-w", "8", "-c", str(rows), "--json"],
        check=True, capture_output=True, text=True)
    return float(json.loads(out.stdout)["msgs_per_s"])


def frame(spark: Any, rows: int, size: int, cache: bool) -> Any:
    """ROWS rows of a SIZE-byte string body, in two partitions (cached and counted)."""
    df = spark.range(0, rows, numPartitions=2).selectExpr(
        f"substring(concat(cast(id as string), repeat('x', {size})), 1, {size}) as body")
    if cache:
        df = df.cache()
        df.count()
    return df


def sink_rate(df: Any, namesrv: str, rows: int) -> float:
    t0 = time.perf_counter()
    df.write.format("rocketmq").mode("append").option("namesrv", namesrv) \
        .option("topic", TOPIC).save()
    return rows / (time.perf_counter() - t0)


class _Count(WriterCommitMessage):  # type: ignore[misc]
    def __init__(self, rows: int) -> None:
        self.rows = rows


class _NoopWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """Takes the Arrow batches and counts their rows: what Spark costs a Python sink."""

    def write(self, iterator: Iterator[Any]) -> _Count:
        return _Count(sum(batch.num_rows for batch in iterator))


class NoopSink(DataSource):  # type: ignore[misc]
    """``format("rocketmq-bench-noop")``: a sink that sends nothing."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq-bench-noop"

    def writer(self, schema: Any, overwrite: bool) -> _NoopWriter:
        return _NoopWriter()


def noop_rate(df: Any, rows: int) -> float:
    """rows/s of handing ``df`` to a Python data source that sends nothing."""
    t0 = time.perf_counter()
    df.write.format(NoopSink.name()).mode("append").save()
    return rows / (time.perf_counter() - t0)


def verify(spark: Any, namesrv: str, rows: int) -> str:
    """Read the topic back (the source): every row once by its unique key.
    Raises AssertionError otherwise; what it found."""
    from pyspark.sql import functions as F

    got = spark.read.format("rocketmq").option("namesrv", namesrv).option("topic", TOPIC) \
        .option("startingOffsets", "earliest").load().select("msgId")
    sink_key = r"^[0-9a-f]{32}-\d+-\d+-\d+$"  # client.spark.sink_rows.unique_key's form
    counts = got.agg(F.count("*").alias("n"), F.countDistinct("msgId").alias("keys"),
                     F.sum(F.col("msgId").rlike(sink_key).cast("int")).alias("ours")).first()
    assert (counts.n, counts.keys, counts.ours) == (rows, rows, rows), \
        f"{counts.n} messages with {counts.keys} unique keys ({counts.ours} of the sink's " \
        f"form), not {rows}"
    return f"{counts.n:,} messages read back, {counts.keys:,} unique keys"


def page_cache_rate(directory: Path) -> float:
    """MB/s of writing PROBE_BYTES to a new file (no fsync: into the page cache), then deleting it."""
    path = directory / "page-cache-probe"
    chunk = b"\0" * (1024 * 1024)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(PROBE_BYTES // len(chunk)):
            f.write(chunk)
    rate = PROBE_BYTES / (time.perf_counter() - t0) / 1e6
    path.unlink()
    return rate


def fresh_broker(broker: Daemon, namesrv: str, store: Path) -> None:
    """The broker stopped, its store deleted, started again on the same port, the
    topic created and routed."""
    broker.stop()
    shutil.rmtree(store, ignore_errors=True)
    broker.start()

    async def create() -> None:
        async with MQAdmin(namesrv) as admin:
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


@click.command()
@click.option("--rows", type=click.IntRange(min=1000), default=200_000, show_default=True)
@click.option("--size", type=click.IntRange(min=16), default=1024, show_default=True,
              help="Body bytes per row.")
@click.option("--runs", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--cache/--no-cache", default=True, show_default=True,
              help="Cache the DataFrame before timing the write.")
@click.option("--check/--no-check", default=True, show_default=True,
              help="Write once more and read it back: every row once by unique key.")
def main(rows: int, size: int, runs: int, cache: bool, check: bool) -> None:
    """Spark sink rows/s against our producer's batched msgs/s."""
    from client.spark import spark_session

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        cluster = Cluster(root)
        try:
            ns = cluster.namesrv()
            broker = cluster.broker("broker-a", ns.addr)
            store = root / "store-broker-a"
            memory = max(1, rows * size * 3 // 2**30 + 1) if cache else 1
            spark = spark_session("spark-sink-bench", "local[2]",
                                  **{"spark.ui.enabled": "false",
                                     "spark.driver.memory": f"{memory}g"})
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(NoopSink)
            try:
                fresh_broker(broker, ns.addr, store)
                sink_rate(frame(spark, 1000, size, False), ns.addr, 1000)  # warm-up
                df = frame(spark, rows, size, cache)

                def measure(what: str) -> tuple[float, float]:
                    fresh_broker(broker, ns.addr, store)
                    probe = page_cache_rate(root)
                    rate = producer_rate(ns.addr, rows, size) if what == "producer" \
                        else sink_rate(df, ns.addr, rows)
                    return rate, probe

                pairs = []
                for run in range(runs):
                    order = ("producer", "sink") if run % 2 == 0 else ("sink", "producer")
                    got = {what: measure(what) for what in order}
                    (p, p_probe), (s, s_probe) = got["producer"], got["sink"]
                    pairs.append((p, s))
                    click.echo(f"run {run + 1} ({order[0]} first): producer {p:,.0f} msg/s "
                               f"(page cache {p_probe:,.0f} MB/s), spark sink {s:,.0f} rows/s "
                               f"(page cache {s_probe:,.0f} MB/s), ratio {s / p:.2f}")
                if check:
                    fresh_broker(broker, ns.addr, store)
                    sink_rate(df, ns.addr, rows)
                    click.echo(f"one more sink write, read back: {verify(spark, ns.addr, rows)}")
                noop = statistics.median(noop_rate(df, rows) for _ in range(runs))
                click.echo(f"the same DataFrame to a Python sink that sends nothing: "
                           f"{noop:,.0f} rows/s (median of {runs})")
                if cache:
                    df.unpersist()
            finally:
                spark.stop()
            ratio = statistics.median(s / p for p, s in pairs)
            click.echo(f"{rows:,} rows of {size} B, local[2], input "
                       f"{'cached' if cache else 'made during the write'}: median ratio "
                       f"sink/producer {ratio:.2f} (goal >= 0.6)")
        finally:
            cluster.close()


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main()
