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

from client.bench import cli
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
