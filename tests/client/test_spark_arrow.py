"""to_record_batch: RecordColumns -> an Arrow batch of the ``rocketmq`` source schema."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.spark.arrow import SCHEMA, _repeated, _topics, to_record_batch
from protocol.message import MessageExt, properties_to_string
from protocol.record import (
    FLAG_COMPRESSED,
    RecordColumns,
    decode_columns,
    decode_records,
    empty_columns,
    encode_record,
    pack_host,
)

BROKER = "broker-a"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def record(
    queue_offset: int,
    props: dict[str, str] | None,
    *,
    body: bytes | None = None,
    topic: str = "TopicTest",
    queue_id: int = 1,
    sys_flag: int = 0,
    born: int | None = None,
    store: int | None = None,
    properties: bytes | None = None,
) -> bytes:
    return encode_record(
        topic=topic.encode(),
        queue_id=queue_id,
        flag=0,
        body=b"body-%d" % queue_offset if body is None else body,
        properties=(properties if properties is not None
                    else properties_to_string(props or {}).encode()),
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_123 + queue_offset if born is None else born,
        born_host=pack_host("10.0.0.7:40000"),
        store_timestamp=1_700_000_000_999 + 7 * queue_offset if store is None else store,
        store_host=pack_host("10.0.0.1:10911"),
        reconsume_times=0,
        prepared_transaction_offset=0,
        queue_offset=queue_offset,
        physical_offset=1000 + 300 * queue_offset,
    )


def props_of(i: int, tag: str | None = "TagA") -> dict[str, str]:
    p = {"UNIQ_KEY": f"C0A8000100002A9F0000000000{i:06d}", "KEYS": f"key{i} other{i}",
         "WAIT": "true"}
    if tag is not None:
        p["TAGS"] = tag
    return p


def millis(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def expected_row(msg: MessageExt, broker: str = BROKER) -> dict[str, object]:
    return {
        "topic": msg.topic,
        "brokerName": broker,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "msgId": msg.uniq_key if msg.uniq_key is not None else msg.msg_id,
        "keys": msg.keys,
        "tags": msg.tags,
        "body": msg.body,
        "bornTimestamp": millis(msg.born_timestamp),
        "storeTimestamp": millis(msg.store_timestamp),
        "properties": msg.properties,
    }


def rows(batch: pa.RecordBatch) -> list[dict[str, object]]:
    out = batch.to_pylist()
    for row in out:  # map<string,string> comes back as a list of pairs
        row["properties"] = dict(row["properties"])
    return out


def batch_of(buf: bytes, stop_offset: int | None = None, **kw: object) -> pa.RecordBatch:
    return to_record_batch(decode_columns(buf, stop_offset=stop_offset), BROKER, **kw)  # type: ignore[arg-type]


def test_schema_exact() -> None:
    batch = batch_of(record(0, props_of(0)))
    assert batch.schema == SCHEMA
    assert batch.schema.names == [
        "topic", "brokerName", "queueId", "queueOffset", "msgId", "keys", "tags", "body",
        "bornTimestamp", "storeTimestamp", "properties",
    ]
    assert SCHEMA.field("bornTimestamp").type == pa.timestamp("us", tz="UTC")
    assert SCHEMA.field("properties").type == pa.map_(pa.string(), pa.string())
    assert SCHEMA.field("queueId").type == pa.int32()
    assert SCHEMA.field("queueOffset").type == pa.int64()
    assert SCHEMA.field("body").type == pa.binary()
    batch.validate(full=True)


def test_rows_match_decode_records() -> None:
    buf = b"".join([
        record(0, props_of(0)),
        record(1, props_of(1, "TagB"), body=b"", topic="Other", queue_id=3),
        record(2, props_of(2) | {"ünï": "cödé", "empty": ""}, body=bytes(range(256))),
        record(3, props_of(3), born=0, store=-1),  # the epoch and just before
        record(4, props_of(4), body=b"\x00" * 1000, born=1_700_000_000_001),
    ])
    batch = batch_of(buf)
    assert batch.num_rows == 5 and batch.schema == SCHEMA
    assert rows(batch) == [expected_row(m) for m in decode_records(buf)]
    born = batch.column("bornTimestamp").to_pylist()
    assert born[4] == datetime(2023, 11, 14, 22, 13, 20, 1000, tzinfo=UTC)
    assert born[3] == EPOCH
    assert batch.column("storeTimestamp").to_pylist()[3] == EPOCH - timedelta(milliseconds=1)


def test_columns_from_several_buffers_and_compressed_body() -> None:
    raw = b"a compressed body " * 20
    first = record(0, props_of(0)) + record(1, props_of(1))
    second = record(2, props_of(2), body=zlib.compress(raw), sys_flag=FLAG_COMPRESSED)
    cols = decode_columns(first)
    decode_columns(second, cols)
    batch = to_record_batch(cols, "broker-z")
    assert batch.column("body").to_pylist() == [b"body-0", b"body-1", raw]
    assert batch.column("brokerName").to_pylist() == ["broker-z"] * 3
    assert batch.column("queueOffset").to_pylist() == [0, 1, 2]


def test_msg_id_falls_back_to_the_offset_msg_id() -> None:
    no_uniq = {"TAGS": "TagA", "KEYS": "k"}
    buf = record(0, props_of(0)) + record(1, no_uniq) + record(2, props_of(2))
    msgs = decode_records(buf)
    batch = batch_of(buf)
    assert batch.column("msgId").to_pylist() == [
        props_of(0)["UNIQ_KEY"], msgs[1].msg_id, props_of(2)["UNIQ_KEY"],
    ]
    assert len(msgs[1].msg_id) == 32
    assert rows(batch) == [expected_row(m) for m in msgs]
    # every row without UNIQ_KEY
    batch = batch_of(record(5, no_uniq) + record(6, None))
    assert batch.column("msgId").to_pylist() == [m.msg_id for m in
                                                 decode_records(record(5, no_uniq) + record(6, None))]


def test_no_properties() -> None:
    buf = record(0, None) + record(1, props_of(1)) + record(2, {})
    batch = batch_of(buf)
    r = rows(batch)
    for i in (0, 2):
        assert r[i]["properties"] == {}
        assert r[i]["keys"] is None and r[i]["tags"] is None
    assert r[1]["properties"] == props_of(1)
    assert batch.column("properties").null_count == 0
    assert r == [expected_row(m) for m in decode_records(buf)]


def test_property_columns_read_the_last_of_duplicates() -> None:
    texts = [b"TAGS\x01a\x02TAGS\x01b\x02UNIQ_KEY\x01u0\x02", None,
             b"KEYS\x01k\x02XTAGS\x01no\x02", b"UNIQ_KEY\x01x\x02UNIQ_KEY\x01y\x02KEYS",
             b"TAGS\x01\x02", b""]
    buf = b"".join(record(i, props_of(i), properties=t) for i, t in enumerate(texts))
    msgs = decode_records(buf)
    batch = batch_of(buf)
    assert rows(batch) == [expected_row(m) for m in msgs]
    assert batch.column("tags").to_pylist() == ["b", "TagA", None, None, "", None]
    assert batch.column("msgId").to_pylist()[3] == "y"


_PIECES = st.sampled_from(["TAGS\x01", "KEYS\x01", "UNIQ_KEY\x01", "\x02", "\x01", "a", "ü",
                           "XTAGS\x01", ""])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_PIECES, max_size=8).map("".join), min_size=1, max_size=6))
def test_property_columns_are_what_message_ext_reads(texts: list[str]) -> None:
    buf = b"".join(record(i, None, properties=t.encode()) for i, t in enumerate(texts))
    assert rows(batch_of(buf)) == [expected_row(m) for m in decode_records(buf)]


@pytest.mark.parametrize("value", ["TopicTest", "", "ünï-cödé", "x" * 300])
@pytest.mark.parametrize("n", [0, 1, 5, 8192])
def test_repeated_strings_are_built_from_buffers(value: str, n: int) -> None:
    got = _repeated(value, n)
    got.validate(full=True)
    assert got.type == pa.string() and got.to_pylist() == [value] * n
    topics = [value] * n
    assert _topics(topics).to_pylist() == topics
    mixed = topics + ["Other"]
    assert _topics(mixed).to_pylist() == mixed


def test_tag_filter() -> None:
    buf = b"".join([
        record(0, props_of(0, "A")),
        record(1, props_of(1, "B")),
        record(2, props_of(2, None)),
        record(3, props_of(3, "A")),
        record(4, props_of(4, "AA")),
    ])
    assert batch_of(buf, tags={"A"}).column("queueOffset").to_pylist() == [0, 3]
    assert batch_of(buf, tags=["B", "A"]).column("queueOffset").to_pylist() == [0, 1, 3]
    assert batch_of(buf, tags=frozenset()).num_rows == 0
    assert batch_of(buf, tags=None).num_rows == 5
    kept = batch_of(buf, tags={"A"})
    assert kept.schema == SCHEMA
    msgs = decode_records(buf)
    assert rows(kept) == [expected_row(msgs[0]), expected_row(msgs[3])]


def test_stop_offset() -> None:
    buf = b"".join(record(i, props_of(i, "A" if i % 2 else "B")) for i in range(10, 16))
    assert batch_of(buf, stop_offset=13).column("queueOffset").to_pylist() == [10, 11, 12]
    assert batch_of(buf, stop_offset=16).num_rows == 6
    assert batch_of(buf, stop_offset=15).column("queueOffset").to_pylist() == [10, 11, 12, 13, 14]
    assert batch_of(buf, stop_offset=10).num_rows == 0
    both = batch_of(buf, tags={"A"}, stop_offset=15)
    assert both.column("queueOffset").to_pylist() == [11, 13]
    assert rows(batch_of(buf, stop_offset=12)) == [expected_row(m) for m in decode_records(buf)[:2]]


def test_invalid_utf8_in_properties_raises() -> None:
    buf = record(0, props_of(0)) + record(1, None, properties=b"KEYS\x01\xff\xfe\x02")
    cols = decode_columns(buf)  # not checked by the decoder
    assert len(cols) == 2
    with pytest.raises(ValueError):
        to_record_batch(cols, BROKER)


def test_zero_rows() -> None:
    batch = to_record_batch(empty_columns(), BROKER)
    assert batch.num_rows == 0 and batch.schema == SCHEMA
    assert to_record_batch(decode_columns(b"", stop_offset=5), BROKER, tags={"A"}).num_rows == 0
    batch.validate(full=True)


def test_many_rows_properties_line_up() -> None:
    # rows with 0..4 properties each: the map offsets must stay aligned
    buf = b"".join(
        record(i, {f"k{j}": f"v{i}.{j}" for j in range(i % 5)}) for i in range(200)
    )
    cols: RecordColumns = decode_columns(buf)
    batch = to_record_batch(cols, BROKER)
    assert [dict(p) for p in batch.column("properties").to_pylist()] == [
        cols.properties(i) for i in range(200)
    ]
    assert rows(batch) == [expected_row(m) for m in decode_records(buf)]
