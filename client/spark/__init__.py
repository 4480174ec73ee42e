"""PySpark integration: the ``rocketmq`` data source (``client.spark.source``).

    from client.spark import register, spark_session
    spark = spark_session("my-job")          # or your own SparkSession
    register(spark)
    df = spark.read.format("rocketmq").option("namesrv", "127.0.0.1:9876") \\
        .option("topic", "Orders").load()
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any


def prepare_environment() -> None:
    """Point Spark's Python workers at this interpreter and find Java 17 when
    JAVA_HOME is not set. Call before the SparkSession starts."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "JAVA_HOME" not in os.environ:
        candidates = sorted(glob.glob("/usr/lib/jvm/java-17*")) + sorted(glob.glob("/usr/lib/jvm/*17*"))
        if candidates:
            os.environ["JAVA_HOME"] = candidates[0]


def register(spark: Any) -> None:
    """Register ``format("rocketmq")`` with ``spark``."""
    from client.spark.source import RocketMQDataSource

    spark.dataSource.register(RocketMQDataSource)


def spark_session(app_name: str = "rocketmq", master: str | None = None, **conf: str) -> Any:
    """A SparkSession with the environment prepared and the source registered.

    Where this starts the JVM and a class-sharing archive for this JDK and
    Spark is in place (``python -m client.spark.cds build``), the driver's JVM
    starts with it (``client.spark.cds``; ``ROCKETMQ_SPARK_CDS=off`` turns it off)."""
    prepare_environment()
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # the JVM is not running yet (spark-submit starts it first and names its port)
    if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        from client.spark import cds

        conf = cds.with_archive(conf, cds.java_options())

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


__all__ = ["prepare_environment", "register", "spark_session"]
