"""The no-op Python data source that ``mqbench spark --noop`` reads: Spark's
own share of a read, with the rocketmq schema and no project code in the
processes that run it."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench.mqbench import cli
from client.spark.noop import NOOP_NAME, noop_source
from client.spark.source import SCHEMA, RocketMQDataSource

OURS = ("client", "protocol", "broker", "namesrv", "dashboard")


def test_reads_one_row_per_partition_with_the_rocketmq_schema(spark: Any) -> None:
    spark.dataSource.register(noop_source())
    df = spark.read.format(NOOP_NAME).load()
    assert df.schema == spark.createDataFrame([], SCHEMA).schema
    rows = df.collect()
    assert sorted(r.queueId for r in rows) == [0, 1, 2, 3]
    assert {(r.topic, r.brokerName, r.queueOffset, r.body) for r in rows} == {
        ("noop", "noop", 0, b"")}
    assert all(r.msgId is None and r.properties is None for r in rows)
    two = spark.read.format(NOOP_NAME).option("partitions", "2").load().collect()
    assert sorted(r.queueId for r in two) == [0, 1]


@pytest.mark.parametrize("bad", ["x", "0", "1025"])
def test_a_bad_partition_count_is_refused(spark: Any, bad: str) -> None:
    spark.dataSource.register(noop_source())
    with pytest.raises(Exception, match="option partitions must be"):
        spark.read.format(NOOP_NAME).option("partitions", bad).load().collect()


def test_rows_split_over_the_partitions_in_the_sources_batches(spark: Any) -> None:
    from pyspark.sql import functions as F

    from client.spark.source import BATCH_ROWS
    spark.dataSource.register(noop_source())
    rows = 9 * BATCH_ROWS + 3  # partitions of unequal shares, each over two batches
    df = (spark.read.format(NOOP_NAME).option("rows", str(rows)).option("bodySize", "10")
          .load())
    got = {r.queueId: (r.n, r.bytes, r.offsets, r.lo, r.hi) for r in df.groupBy("queueId").agg(
        F.count("*").alias("n"), F.sum(F.length("body")).alias("bytes"),
        F.countDistinct("queueOffset").alias("offsets"), F.min("queueOffset").alias("lo"),
        F.max("queueOffset").alias("hi")).collect()}
    share = rows // 4
    assert {q: n for q, (n, *_) in got.items()} == {0: share + 1, 1: share + 1, 2: share + 1,
                                                   3: share}
    assert share > 2 * BATCH_ROWS
    assert all(b == n * 10 for n, b, *_ in got.values())
    assert all((offsets, lo, hi) == (BATCH_ROWS, 0, BATCH_ROWS - 1)
               for _, _, offsets, lo, hi in got.values()), got  # one batch, given again
    one = spark.read.format(NOOP_NAME).option("rows", "3").option("partitions", "4").load()
    assert sorted(r.queueId for r in one.collect()) == [0, 1, 2]  # a share of 0: no rows
    assert {len(r.body) for r in one.collect()} == {1024}  # the default body


@pytest.mark.parametrize(("name", "bad"), [("rows", "-1"), ("rows", "many"),
                                           ("bodySize", str((4 << 20) + 1))])
def test_bad_rows_or_body_sizes_are_refused(spark: Any, name: str, bad: str) -> None:
    spark.dataSource.register(noop_source())
    with pytest.raises(Exception, match=f"option {name} must be"):
        spark.read.format(NOOP_NAME).option(name, bad).load().collect()


def test_it_is_pickled_by_value_and_imports_nothing_of_ours(tmp_path: Path) -> None:
    from pyspark import cloudpickle

    blob = tmp_path / "noop.pickle"
    blob.write_bytes(cloudpickle.dumps(noop_source()))
    code = ("import pickle, sys; cls = pickle.loads(open(sys.argv[1], 'rb').read()); "
            "print(cls.name()); "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {OURS!r}))")
    out = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == [NOOP_NAME, "[]"]
    # the rocketmq source itself is pickled by reference: loading it imports ours
    assert b"client.spark.source" in cloudpickle.dumps(RocketMQDataSource)
    assert pickle.loads(cloudpickle.dumps(RocketMQDataSource)) is RocketMQDataSource


def test_mqbench_noop_reads_in_batch_mode_only() -> None:
    result = CliRunner().invoke(cli, ["spark", "--noop", "--mode", "stream"])
    assert result.exit_code == 2 and "--noop reads in batch mode only" in result.output
    result = CliRunner().invoke(cli, ["spark", "--noop-rows", "10"])
    assert result.exit_code == 2 and "--noop-rows goes with --noop" in result.output
