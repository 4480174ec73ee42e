"""A Python data source that reads nothing: what Spark's own machinery costs.

``mqbench spark --noop`` reads it instead of a topic, in a session of its own,
so that a first read of the ``rocketmq`` source can be set beside a first read
that pays only Spark's part: the same Python processes started (Spark's
data-source lookup, create and plan runners, and the workers), the same schema,
the same number of partitions, each yielding one Arrow record batch, but no
connection, no pulls and no import of this project's packages.

``noop_source()`` makes the class inside a function, so Spark's pickler
(cloudpickle) sends it by value: the processes that run it import pyspark and
pyarrow, and nothing of ours. A test checks that.
"""

from __future__ import annotations

from typing import Any

NOOP_NAME = "rocketmq-noop"
DEFAULT_PARTITIONS = 4  # a topic's default queue count on one broker


def noop_source() -> type:
    """The no-op data source class (option ``partitions``, default 4): one
    row per partition, with every column of the ``rocketmq`` schema."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from client.spark.source import SCHEMA

    schema_ddl = SCHEMA  # a plain string: pickled with the class, by value

    class NoopReader(DataSourceReader):  # type: ignore[misc]
        def __init__(self, schema: Any, partitions: int) -> None:
            self.schema = schema
            self.count = partitions

        def partitions(self) -> list[Any]:
            return [InputPartition(i) for i in range(self.count)]

        def read(self, partition: Any) -> Any:
            import pyarrow as pa
            from pyspark.sql.pandas.types import to_arrow_schema

            arrow_schema = to_arrow_schema(self.schema, timezone="UTC")  # as client.spark.arrow
            row: dict[str, Any] = {name: None for name in arrow_schema.names}
            row.update(topic="noop", brokerName="noop", queueId=partition.value,
                       queueOffset=0, body=b"")
            yield pa.RecordBatch.from_pylist([row], schema=arrow_schema)

    class NoopDataSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return NOOP_NAME

        def schema(self) -> str:
            return schema_ddl

        def reader(self, schema: Any) -> Any:
            raw = dict(self.options).get("partitions", str(DEFAULT_PARTITIONS))
            try:
                count = int(raw)
            except ValueError:
                raise ValueError(f"option partitions must be an integer, not {raw!r}") from None
            if not 1 <= count <= 1024:
                raise ValueError(f"option partitions must be 1..1024, not {count}")
            return NoopReader(schema, count)

    return NoopDataSource


__all__ = ["DEFAULT_PARTITIONS", "NOOP_NAME", "noop_source"]
