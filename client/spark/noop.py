"""A Python data source that reads nothing: what Spark's own machinery costs.

``mqbench spark --noop`` reads it instead of a topic, in a session of its own,
so that a first read of the ``rocketmq`` source can be set beside a first read
that pays only Spark's part: the same Python processes started (Spark's
data-source lookup, create and plan runners, and the workers), the same schema,
the same number of partitions, each yielding one Arrow record batch, but no
connection, no pulls and no import of this project's packages.

With ``rows`` it yields that many rows in all instead, bodies of ``bodySize``
bytes, in batches of the ``rocketmq`` source's size (one batch made per
partition, then given again): what Spark alone costs to take a topic's worth
of rows from a Python source (``mqbench spark --noop --noop-rows N``). A first
read of the ``rocketmq`` source can go no faster than that.

``noop_source()`` makes the class inside a function, so Spark's pickler
(cloudpickle) sends it by value: the processes that run it import pyspark and
pyarrow, and nothing of ours. A test checks that.
"""

from __future__ import annotations

from typing import Any

NOOP_NAME = "rocketmq-noop"
DEFAULT_PARTITIONS = 4  # a topic's default queue count on one broker


def noop_source() -> type:
    """The no-op data source class. Options: ``partitions`` (default 4);
    ``rows``, the rows of a read in all (default 0: one row per partition),
    each with a body of ``bodySize`` bytes (default 1024), the other columns
    of the ``rocketmq`` schema null but topic, broker, queue id and offset."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from client.spark.source import BATCH_ROWS, SCHEMA

    schema_ddl = SCHEMA  # plain values: pickled with the class, by value
    batch_rows = BATCH_ROWS  # the rocketmq source's batch size

    class NoopReader(DataSourceReader):  # type: ignore[misc]
        def __init__(self, schema: Any, partitions: int, rows: int, body_size: int) -> None:
            self.schema = schema
            self.count = partitions
            self.rows = rows
            self.body_size = body_size

        def partitions(self) -> list[Any]:
            return [InputPartition(i) for i in range(self.count)]

        def read(self, partition: Any) -> Any:
            import pyarrow as pa
            from pyspark.sql.pandas.types import to_arrow_schema

            arrow_schema = to_arrow_schema(self.schema, timezone="UTC")  # as client.spark.arrow
            if not self.rows:
                row: dict[str, Any] = {name: None for name in arrow_schema.names}
                row.update(topic="noop", brokerName="noop", queueId=partition.value,
                           queueOffset=0, body=b"")
                yield pa.RecordBatch.from_pylist([row], schema=arrow_schema)
                return
            # this partition's share of the rows, in batches of the rocketmq
            # source's size: one batch made, then given again (sliced at the end)
            share = self.rows // self.count + (partition.value < self.rows % self.count)
            n = min(share, batch_rows)
            if not n:
                return
            given = {"topic": pa.array(["noop"] * n, pa.string()),
                     "brokerName": pa.array(["noop"] * n, pa.string()),
                     "queueId": pa.array([partition.value] * n, pa.int32()),
                     "queueOffset": pa.array(range(n), pa.int64()),
                     "body": pa.array([bytes(self.body_size)] * n, pa.binary())}
            batch = pa.RecordBatch.from_arrays(
                [given[f.name] if f.name in given else pa.nulls(n, f.type)
                 for f in arrow_schema], schema=arrow_schema)
            for start in range(0, share, n):
                yield batch if share - start >= n else batch.slice(0, share - start)

    def whole(options: dict[str, str], name: str, default: int, low: int, high: int) -> int:
        raw = options.get(name.lower(), str(default))  # option names are case-insensitive
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"option {name} must be an integer, not {raw!r}") from None
        if not low <= value <= high:
            raise ValueError(f"option {name} must be {low}..{high}, not {value}")
        return value

    class NoopDataSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return NOOP_NAME

        def schema(self) -> str:
            return schema_ddl

        def reader(self, schema: Any) -> Any:
            options = {k.lower(): v for k, v in self.options.items()}
            return NoopReader(schema, whole(options, "partitions", DEFAULT_PARTITIONS, 1, 1024),
                              whole(options, "rows", 0, 0, 10**9),
                              whole(options, "bodySize", 1024, 0, 4 << 20))

    return NoopDataSource


__all__ = ["DEFAULT_PARTITIONS", "NOOP_NAME", "noop_source"]
