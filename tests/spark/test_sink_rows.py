"""The sink's pure parts: options, columns, rows -> messages, keys, queues, batches."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.spark.offsets import OptionError
from client.spark.sink_rows import (
    ArrowRows,
    Batcher,
    OutRow,
    RowConverter,
    SinkRowError,
    SinkSchemaError,
    check_columns,
    describe,
    parse_sink_options,
    parse_unique_key,
    plain,
    queue_for_sharding_key,
    sorted_queues,
    unique_key,
    write_id,
)
from protocol.batch import decode_batch, encode_batch
from protocol.delay_levels import delay_level, parse_delay_levels
from protocol.message import (
    Message,
    MessageQueue,
    properties_to_string,
    string_to_properties,
)
from protocol.record import MAX_PROPERTIES_BYTES

WRITE = "0123456789abcdef0123456789abcdef"


def options(**extra: str) -> dict[str, str]:
    return {"namesrv": "127.0.0.1:9876", "topic": "Orders", **extra}


def test_options_defaults_and_limits() -> None:
    o = parse_sink_options(options())
    assert (o.namesrv, o.topic, o.producer_group, o.batch_size, o.max_in_flight,
            o.send_timeout_ms, o.retries) == ("127.0.0.1:9876", "Orders", "spark-rocketmq-sink",
                                              256, 8, 3000, 2)
    assert dict(o.delay_levels)[1] == 1000 and dict(o.delay_levels)[18] == 7_200_000
    o = parse_sink_options({"NAMESRV": "h:1", "BatchSize": "10", "maxInFlight": "2",
                            "producerGroup": "g1", "sendTimeoutMs": "500"})
    assert (o.topic, o.batch_size, o.max_in_flight, o.producer_group, o.send_timeout_ms) == (
        None, 10, 2, "g1", 500)
    assert parse_sink_options({"topic": "T"}, env_namesrv="e:9876").namesrv == "e:9876"
    for bad, match in [({"namesrv": ""}, "'namesrv' is required"),
                       ({"topic": "bad topic"}, "option 'topic'"),
                       ({"batchSize": "0"}, "batchSize must be a positive integer"),
                       ({"batchSize": "20000"}, "at most 10000"),
                       ({"maxInFlight": "x"}, "maxInFlight must be a positive integer"),
                       ({"producerGroup": "a b"}, "producerGroup"),
                       ({"retries": "-1"}, "retries"),
                       ({"messageDelayLevel": "1s 5x"}, "messageDelayLevel"),
                       ({"startingOffsets": "earliest"}, "for reads"),
                       ({"accessKey": "ak"}, "go together"),
                       ({"tlsCaPath": "/ca.pem"}, "useTls=true")]:
        with pytest.raises(OptionError, match=match):
            parse_sink_options({**options(), **bad})
    with_tls = parse_sink_options(options(useTls="true", tlsCaPath="/ca.pem", accessKey="a",
                                          secretKey="s"))
    assert with_tls.use_tls and with_tls.tls_ca_path == "/ca.pem" and with_tls.access_key == "a"
    assert "s" not in repr(with_tls).split("access_key")[1].split("use_tls")[0].replace(
        "secret_key", "")  # the secret stays out of reprs (and logs)
    assert with_tls.cache_key() != parse_sink_options(options()).cache_key()


def test_columns_checked_from_the_schema() -> None:
    cols = check_columns([("body", "binary"), ("TAGS", "string"), ("keys", "array<string>"),
                          ("properties", "map<string,string>"), ("queueId", "int")], "T")
    assert cols.names == ("body", "tags", "keys", "properties", "queueId")
    assert not cols.body_is_string
    with pytest.raises(SinkSchemaError, match=r"column\(s\) 'value', 'offset'; it takes body"):
        check_columns([("body", "string"), ("value", "string"), ("offset", "bigint")], "T")
    with pytest.raises(SinkSchemaError, match="needs a 'body' column"):
        check_columns([("tags", "string")], "T")
    with pytest.raises(SinkSchemaError, match="'topic' column or the 'topic' option"):
        check_columns([("body", "string")], None)
    assert check_columns([("body", "string"), ("topic", "string")], None).body_is_string
    with pytest.raises(SinkSchemaError, match="'body' is int"):
        check_columns([("body", "int")], "T")
    with pytest.raises(SinkSchemaError, match="not both"):
        check_columns([("body", "string"), ("queueId", "int"), ("shardingKey", "string")], "T")
    with pytest.raises(SinkSchemaError, match="given twice"):
        check_columns([("body", "string"), ("Body", "binary")], "T")


def test_unique_keys_are_deterministic_and_distinct() -> None:
    assert write_id("01234567-89AB-cdef-0123-456789abcdef") == WRITE
    with pytest.raises(ValueError):
        write_id("not-a-uuid")
    key = unique_key(WRITE, 7, 3, 12)
    assert key == f"{WRITE}-7-3-12" == unique_key(WRITE, 7, 3, 12)
    assert parse_unique_key(key) == (WRITE, 7, 3, 12)
    assert parse_unique_key("7F0000010F2C18B4AAC2470D6A3B0000") is None  # a producer's id
    seen = {unique_key(WRITE, b, p, r) for b in range(3) for p in range(12) for r in range(12)}
    assert len(seen) == 3 * 12 * 12  # 1-12 and 11-2 do not collide


def test_sharding_key_as_javas_select_by_hash() -> None:
    queues = [MessageQueue("T", "b", q) for q in range(4)]
    # "abc".hashCode() == 96354 -> 96354 % 4 == 2; "polygenelubricants".hashCode() is
    # Integer.MIN_VALUE: Java's remainder 0 for 4, abs() 0
    assert queue_for_sharding_key("abc", queues).queue_id == 2
    assert queue_for_sharding_key("polygenelubricants", queues).queue_id == 0
    # "user-0".hashCode() is -836031826: Java's -836031826 % 3 is -1, abs() 1 (Python's
    # floored % would give 2)
    three = queues[:3]
    assert queue_for_sharding_key("user-0", three).queue_id == 1
    with pytest.raises(ValueError):
        queue_for_sharding_key("x", [])
    mixed = [MessageQueue("T", "b", 1), MessageQueue("T", "a", 1), MessageQueue("T", "a", 0)]
    assert [(q.broker_name, q.queue_id) for q in sorted_queues(mixed)] == [
        ("a", 0), ("a", 1), ("b", 1)]


def converter(**extra: str) -> RowConverter:
    opts = parse_sink_options(options(**extra))
    cols = check_columns([(n, t) for n, t in [
        ("body", "binary"), ("topic", "string"), ("tags", "string"), ("keys", "array<string>"),
        ("properties", "map<string,string>"), ("deliverTimeMs", "bigint"),
        ("delayLevel", "int")]], opts.topic)
    return RowConverter(cols, opts, WRITE, batch_id=4, partition_id=2, max_body=100)


def test_row_to_message() -> None:
    c = converter()
    out = c.convert(9, {"body": b"hi", "topic": None, "tags": "A", "keys": ["k1", None, "k2"],
                        "properties": [("color", "red"), ("none", None)]}, now_ms=0)
    m = out.message
    assert m.topic == "Orders" and m.body == b"hi" and m.tags == "A" and m.keys == "k1 k2"
    assert m.properties["color"] == "red" and "none" not in m.properties
    assert m.properties["UNIQ_KEY"] == f"{WRITE}-4-2-9" and not out.delayed
    assert out.size == 2 + sum(len(k) + len(v) + 2 for k, v in m.properties.items()) + 22
    assert c.convert(0, {"body": "text", "topic": "Other"}, 0).message.topic == "Other"
    assert c.convert(0, {"body": b"x", "keys": "a b"}, 0).message.keys == "a b"


def test_delays() -> None:
    c = converter()
    assert c.convert(0, {"body": b"x", "delayLevel": 3}, 0).message.delay_time_level == 3
    # deliverTimeMs: a timer message, due at that very time (not rounded to a level)
    at = c.convert(0, {"body": b"x", "deliverTimeMs": 10_000 + 6_001}, now_ms=10_000)
    assert at.delayed and at.message.deliver_time_ms == 16_001
    assert "DELAY" not in at.message.properties
    due = c.convert(0, {"body": b"x", "deliverTimeMs": 5}, now_ms=10_000)
    assert not due.delayed and "DELAY" not in due.message.properties
    assert due.message.deliver_time_ms is None
    with pytest.raises(ValueError, match="64-bit"):
        c.convert(0, {"body": b"x", "deliverTimeMs": 2**63}, now_ms=10_000)
    levels = parse_delay_levels("1s 1m 1h 2d")
    assert levels == {1: 1000, 2: 60_000, 3: 3_600_000, 4: 172_800_000}
    assert delay_level(10**12, 0, levels) == 4 and delay_level(1, 0, levels) == 1


@pytest.mark.parametrize("row, match", [
    ({"body": None}, "its body is null"),
    ({"body": b""}, "its body is empty"),
    ({"body": b"x" * 101}, "101 bytes, over the maximum 100"),
    ({"body": b"x", "topic": "a/b"}, "bad topic"),
    ({"body": b"x", "topic": "x" * 200}, "bad topic"),
    ({"body": b"x", "properties": {"UNIQ_KEY": "mine"}}, "'UNIQ_KEY' is reserved"),
    ({"body": b"x", "properties": {"TAGS": "t"}}, "'TAGS' is reserved"),
    ({"body": b"x", "properties": {"a": "b\x01"}}, "may not contain"),
    ({"body": b"x", "properties": {"": "v"}}, "name is empty"),
    ({"body": b"x", "properties": {"big": "v" * 40_000}}, "over the maximum 32767"),
    ({"body": b"x", "tags": "a\x02"}, "tags may not contain"),
    ({"body": b"x", "delayLevel": -1}, "delayLevel -1"),
    ({"body": b"x", "delayLevel": 2, "deliverTimeMs": 5}, "both delayLevel and deliverTimeMs"),
    ({"body": b"x", "deliverTimeMs": -5}, "negative"),
])
def test_bad_rows_name_partition_and_index(row: dict[str, object], match: str) -> None:
    with pytest.raises(SinkRowError, match=r"row 17 of partition 2 cannot be sent: .*" + match):
        converter().convert(17, row, now_ms=0)


def test_topic_needed_per_row_without_option() -> None:
    opts = parse_sink_options({"namesrv": "h:1"})
    cols = check_columns([("body", "string"), ("topic", "string")], None)
    c = RowConverter(cols, opts, WRITE, 0, 5)
    with pytest.raises(SinkRowError, match="row 3 of partition 5 .*topic is null"):
        c.convert(3, {"body": "x", "topic": None}, 0)


def row(i: int, size: int = 10, delayed: bool = False) -> OutRow:
    return OutRow(i, Message("T", b"x"), None, None, delayed, size)


def test_batcher_by_count_bytes_destination_and_delay() -> None:
    b = Batcher(batch_size=3, max_bytes=35)
    a, q = ("T", None), ("T", MessageQueue("T", "b", 1))
    assert b.add(a, row(0)) == [] and b.add(q, row(1)) == [] and b.add(a, row(2)) == []
    ready = b.add(a, row(3))
    assert [(d, [r.index for r in rows]) for d, rows in ready] == [(a, [0, 2, 3])]
    assert b.add(q, row(4, size=20)) == []
    ready = b.add(q, row(5, size=10))  # 10 + 20 + 10 > 35: the open batch goes first
    assert [[r.index for r in rows] for _, rows in ready] == [[1, 4]]
    assert [[r.index for r in rows] for _, rows in b.add(a, row(6, delayed=True))] == [[6]]
    assert len(b) == 1
    assert [(d, [r.index for r in rows]) for d, rows in b.drain()] == [(q, [5])]
    assert b.drain() == [] and len(b) == 0
    big = Batcher(batch_size=10, max_bytes=5)  # one row over the limit still goes alone
    assert big.add(a, row(0)) == [] and [len(r) for _, r in big.add(a, row(1))] == [1]


def test_describe_names_rows_partition_and_queue() -> None:
    assert describe(("T", None), 4, 6, 3) == "rows 4..9 (6) of partition 3 to T"
    assert describe(("T", MessageQueue("T", "b", 1)), 4, 1, 0) == \
        "row 4 of partition 0 to T b:1"


def arrow_rows(batch_size: int = 3, max_bytes: int = 10_000,
               cols: tuple[str, ...] = ("body", "tags", "keys"),
               keys_type: str = "array<string>") -> tuple[ArrowRows, RowConverter]:
    opts = parse_sink_options(options())
    types = {"body": "binary", "tags": "string", "keys": keys_type}
    columns = check_columns([(c, types[c]) for c in cols], opts.topic)
    assert plain(columns, opts)
    conv = RowConverter(columns, opts, WRITE, batch_id=1, partition_id=2, max_body=100)
    return ArrowRows(conv, batch_size, max_bytes), conv


def entries(ready: list[tuple[int, int, bytes]]) -> list[tuple[int, bytes, dict[str, str]]]:
    """The (flag, body, properties) of every message of the ready batches, each
    batch's row count checked against its body."""
    out = []
    for _, count, body in ready:
        items = decode_batch(body)
        assert len(items) == count
        out += [(flag, data, string_to_properties(text)) for flag, data, text in items]
    return out


def as_entry(m: Message) -> tuple[int, bytes, dict[str, str]]:
    return m.flag, m.body, m.properties


def test_arrow_rows_encode_what_the_converter_makes() -> None:
    fast, conv = arrow_rows(batch_size=3)
    bodies: list[object] = [b"a", b"b", b"c", b"d"]
    tags = ["x", None, "z", ""]
    keys: list[object] = [["k1", "k2"], None, [], ["", None, "k4"]]
    ready = fast.add(10, pa.array(bodies, pa.binary()), pa.array(tags, pa.string()),
                     pa.array(keys, pa.list_(pa.string())))
    assert [(first, count) for first, count, _ in ready] == [(10, 3)]
    ready += fast.add(14, pa.array([b"e"]), pa.array(["t"]), pa.array([None], pa.list_(pa.string())))
    ready += fast.drain()
    assert [(first, count) for first, count, _ in ready] == [(10, 3), (13, 2)]
    rows = [{"body": b, "tags": t, "keys": k} for b, t, k in
            zip([*bodies, b"e"], [*tags, "t"], [*keys, None], strict=True)]
    want = [conv.convert(i, r, 0).message for i, r in enumerate(rows, 10)]
    assert entries(ready) == [as_entry(m) for m in want]
    # the bytes too: the properties in the converter's order (TAGS, KEYS, UNIQ_KEY)
    assert b"".join(body for _, _, body in ready) == encode_batch(
        (m.flag, m.body, properties_to_string(m.properties)) for m in want)
    assert entries(ready)[0][2]["UNIQ_KEY"] == f"{WRITE}-1-2-10"
    assert fast.drain() == []


def test_arrow_rows_take_string_bodies_and_string_keys() -> None:
    fast, conv = arrow_rows(keys_type="string", batch_size=10)
    ready = fast.add(0, pa.array(["héllo", "b"]), None, pa.array(["a b", None])) + fast.drain()
    rows: list[dict[str, object]] = [{"body": "héllo", "keys": "a b"}, {"body": "b", "keys": None}]
    want = [conv.convert(i, r, 0).message for i, r in enumerate(rows)]
    assert entries(ready) == [as_entry(m) for m in want]


def test_arrow_rows_batches_stay_under_max_bytes() -> None:
    fast, conv = arrow_rows(batch_size=100, max_bytes=300, cols=("body",))
    one = conv.convert(0, {"body": b"x" * 50}, 0).size  # a row's bytes in a batch entry
    ready = fast.add(0, pa.array([b"x" * 50] * 10)) + fast.drain()
    per = 300 // one
    assert [count for _, count, _ in ready] == [per] * (10 // per) + ([10 % per] if 10 % per else [])
    assert [first for first, _, _ in ready] == list(range(0, 10, per))
    assert all(len(body) <= 300 for _, _, body in ready)


def test_arrow_rows_batches_span_arrow_batches() -> None:
    fast, _ = arrow_rows(batch_size=4, cols=("body",))
    ready = []
    first = 0
    for size in (3, 3, 1, 5):  # 12 rows in four Arrow batches: three batches of 4
        ready += fast.add(first, pa.array([b"r%d" % i for i in range(first, first + size)]))
        first += size
    ready += fast.drain()
    assert [(first, count) for first, count, _ in ready] == [(0, 4), (4, 4), (8, 4)]
    assert [body for _, body, _ in entries(ready)] == [b"r%d" % i for i in range(12)]


def test_arrow_rows_send_a_row_over_max_bytes_alone() -> None:
    fast, conv = arrow_rows(batch_size=10, max_bytes=150, cols=("body",))
    small, big = (conv.convert(0, {"body": b"x" * n}, 0).size for n in (1, 100))
    assert 2 * small <= 150 < big
    ready = fast.add(0, pa.array([b"a", b"b", b"x" * 100, b"c", b"d"])) + fast.drain()
    assert [(first, count) for first, count, _ in ready] == [(0, 2), (2, 1), (3, 2)]


@pytest.mark.parametrize("bodies, match", [
    ([b"ok", None], "row 6 of partition 2 cannot be sent: its body is null"),
    ([b"ok", b"ok", b""], "row 7 of partition 2 cannot be sent: its body is empty"),
    ([b"x" * 101], "row 5 of partition 2 .*101 bytes, over the maximum 100"),
])
def test_arrow_rows_refuse_bad_bodies(bodies: list[object], match: str) -> None:
    fast, _ = arrow_rows()
    with pytest.raises(SinkRowError, match=match):
        fast.add(5, pa.array(bodies, pa.binary()))


def test_arrow_rows_check_tags_and_keys() -> None:
    fast, _ = arrow_rows()
    with pytest.raises(SinkRowError, match="row 1 of partition 2 .*tags may not contain"):
        fast.add(0, pa.array([b"a", b"b"]), pa.array(["ok", "bad\x01"]))
    with pytest.raises(SinkRowError, match="row 2 of partition 2 .*a key may not contain"):
        fast.add(0, pa.array([b"a", b"b", b"c"]), None,
                 pa.array([["k"], None, ["ok", "x\x02"]], pa.list_(pa.string())))
    strings, _ = arrow_rows(keys_type="string")
    with pytest.raises(SinkRowError, match="row 3 of partition 2 .*keys may not contain"):
        strings.add(2, pa.array([b"a", b"b"]), None, pa.array(["ok", "\x01"]))
    long_tag = "t" * (MAX_PROPERTIES_BYTES - 10)
    with pytest.raises(SinkRowError, match="row 0 of partition 2 .*properties take"):
        strings.add(0, pa.array([b"a"]), pa.array([long_tag]))


def test_plain_takes_body_tags_and_keys_to_the_topic_option() -> None:
    opts = parse_sink_options(options())
    assert not plain(check_columns([("body", "binary"), ("queueId", "int")], "T"), opts)
    per_row_topic = check_columns([("body", "binary"), ("topic", "string")], None)
    assert not plain(per_row_topic, parse_sink_options({"namesrv": "h"}))


_TEXT = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]),
                max_size=8)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.binary(min_size=1, max_size=40), st.none() | _TEXT,
                               st.none() | st.lists(st.none() | _TEXT, max_size=3)),
                     min_size=1, max_size=30),
       cuts=st.lists(st.integers(1, 30), max_size=4),
       batch_size=st.integers(1, 8), max_bytes=st.integers(60, 600))
def test_arrow_rows_match_the_converter_for_any_rows(
        rows: list[tuple[bytes, str | None, list[str | None] | None]], cuts: list[int],
        batch_size: int, max_bytes: int) -> None:
    """However the rows are split into Arrow batches and cut into requests, the
    requests hold the converter's messages, in order, each request within its limits."""
    fast, conv = arrow_rows(batch_size=batch_size, max_bytes=max_bytes)
    ready: list[tuple[int, int, bytes]] = []
    at = 0
    for size in [*cuts, len(rows)]:
        part = rows[at:at + size]
        if part:
            ready += fast.add(at, pa.array([b for b, _, _ in part], pa.binary()),
                              pa.array([t for _, t, _ in part], pa.string()),
                              pa.array([k for _, _, k in part], pa.list_(pa.string())))
        at += len(part)
    ready += fast.drain()
    want = [conv.convert(i, {"body": b, "tags": t, "keys": k}, 0).message
            for i, (b, t, k) in enumerate(rows)]
    assert entries(ready) == [as_entry(m) for m in want]
    assert [first for first, _, _ in ready] == \
        [sum(count for _, count, _ in ready[:i]) for i in range(len(ready))]
    for _, count, body in ready:
        assert count <= batch_size and (count == 1 or len(body) <= max_bytes)
