"""Pull bodies -> an Arrow batch of the ``rocketmq`` source schema, both ways:
``to_record_batch`` of ``decode_columns`` (record by record, the reference) and
``RecordScan`` (heads read for all records at once). The tests through the
``batch_of`` fixture run on both; the hypothesis tests hold them equal,
malformed records included. RecordScan's tests run with each walk of a body:
its Python loop, and records_kernel.walk_records as plain Python and compiled
(where deploy/speedups.py built it)."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client.spark import arrow
from client.spark.arrow import (
    SCHEMA,
    RecordScan,
    _plain_pairs,
    _Properties,
    _repeated,
    _topics,
    to_record_batch,
)
from protocol import records_kernel
from protocol.errors import CorruptRecordError
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


BatchOf = Callable[..., pa.RecordBatch]


def by_record(buf: bytes, stop_offset: int | None = None,
              tags: Iterable[str] | None = None) -> pa.RecordBatch:
    return to_record_batch(decode_columns(buf, stop_offset=stop_offset), BROKER, tags)


def by_scan(buf: bytes, stop_offset: int | None = None,
            tags: Iterable[str] | None = None) -> pa.RecordBatch:
    scan = RecordScan()
    scan.add(buf, stop_offset)
    return scan.to_batch(BROKER, tags)


@pytest.fixture(params=[by_record, by_scan], ids=["by_record", "scan"])
def batch_of(request: pytest.FixtureRequest) -> BatchOf:
    fn: BatchOf = request.param
    return fn


def test_schema_exact(batch_of: BatchOf) -> None:
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


def test_rows_match_decode_records(batch_of: BatchOf) -> None:
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


def test_msg_id_falls_back_to_the_offset_msg_id(batch_of: BatchOf) -> None:
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


def test_no_properties(batch_of: BatchOf) -> None:
    buf = record(0, None) + record(1, props_of(1)) + record(2, {})
    batch = batch_of(buf)
    r = rows(batch)
    for i in (0, 2):
        assert r[i]["properties"] == {}
        assert r[i]["keys"] is None and r[i]["tags"] is None
    assert r[1]["properties"] == props_of(1)
    assert batch.column("properties").null_count == 0
    assert r == [expected_row(m) for m in decode_records(buf)]


def test_property_columns_read_the_last_of_duplicates(batch_of: BatchOf) -> None:
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
    want = [expected_row(m) for m in decode_records(buf)]
    assert rows(by_record(buf)) == want
    assert rows(by_scan(buf)) == want


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


def test_tag_filter(batch_of: BatchOf) -> None:
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


def test_stop_offset(batch_of: BatchOf) -> None:
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


# ---- RecordScan against the reference ---------------------------------------------

WALKS = [pytest.param(None, id="loop"),
         pytest.param(records_kernel.walk_records, id="kernel-plain-python")]
if arrow.WALK_KERNEL is not None:
    WALKS.append(pytest.param(arrow.WALK_KERNEL, id="kernel-compiled"))
FIXTURE_SAFE = [HealthCheck.function_scoped_fixture]  # the walk is the same for every example


# how _cut takes its ranges: Arrow's take (None), or gather_ranges
CUTS = [pytest.param(None, id="take"),
        pytest.param(records_kernel.gather_ranges, id="gather-plain-python")]
if arrow.GATHER_KERNEL is not None:
    CUTS.append(pytest.param(arrow.GATHER_KERNEL, id="gather-compiled"))


@pytest.fixture(params=CUTS)
def cut(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> object:
    """_cut takes its ranges with this: take (None) or a gather_ranges."""
    monkeypatch.setattr(arrow, "GATHER_KERNEL", request.param)
    return request.param


@pytest.fixture(params=WALKS)
def walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> object:
    """RecordScan.add walks with this: its loop (None) or a walk_records."""
    monkeypatch.setattr(arrow, "WALK_KERNEL", request.param)
    return request.param


def scan_of(bodies: list[tuple[bytes, int | None]]) -> RecordScan:
    scan = RecordScan()
    for body, stop in bodies:
        scan.add(body, stop)
    return scan


def reference(bodies: list[tuple[bytes, int | None]],
              tags: Iterable[str] | None = None) -> pa.RecordBatch:
    cols = empty_columns()
    for body, stop in bodies:
        decode_columns(body, cols, stop_offset=stop)
    return to_record_batch(cols, BROKER, tags)


def outcome(build: Callable[[], pa.RecordBatch]) -> tuple[str, object]:
    """A batch's rows, or the exception's type (and a CorruptRecordError's text)."""
    try:
        batch = build()
    except CorruptRecordError as exc:
        return "corrupt", str(exc)
    except ValueError:  # pyarrow's ArrowInvalid for bad UTF-8: texts differ
        return "invalid", None
    batch.validate(full=True)
    assert batch.schema == SCHEMA
    return "rows", batch


def assert_same(bodies: list[tuple[bytes, int | None]],
                tags: Iterable[str] | None = None) -> tuple[str, object]:
    want = outcome(lambda: reference(bodies, tags))

    def scanned() -> pa.RecordBatch:
        return scan_of(bodies).to_batch(BROKER, tags)

    got = outcome(scanned)
    if want[0] == "rows":
        assert got[0] == "rows", got
        assert got[1].equals(want[1])  # type: ignore[attr-defined]
    elif want[0] == "corrupt" and len(bodies) > 1:
        # the scan may find a bad size in a later body before a bad head in an earlier one
        assert got[0] == "corrupt", got
    else:
        assert got == want
    return want


_INT64 = st.integers(-(2**63), 2**63 - 1)
_TEXT = st.lists(_PIECES, max_size=6).map("".join)


@st.composite
def records(draw: st.DrawFn, queue_offset: int, topic: str) -> bytes:
    body = draw(st.binary(max_size=40))
    sys_flag = draw(st.sampled_from([0, 0, 0, 2, FLAG_COMPRESSED]))
    if sys_flag & FLAG_COMPRESSED and draw(st.booleans()):
        body = zlib.compress(body)  # else: flagged but not zlib, served as stored
    return encode_record(
        topic=topic.encode(), queue_id=draw(st.integers(-(2**31), 2**31 - 1)), flag=0,
        body=body, properties=draw(_TEXT).encode(), sys_flag=sys_flag,
        born_timestamp=draw(_INT64), born_host=pack_host("10.0.0.7:40000"),
        store_timestamp=draw(_INT64), store_host=draw(st.binary(min_size=8, max_size=8)),
        reconsume_times=0, prepared_transaction_offset=0, queue_offset=queue_offset,
        physical_offset=draw(_INT64))


@st.composite
def pulls(draw: st.DrawFn) -> list[tuple[bytes, int | None]]:
    topics = draw(st.sampled_from([["T"], ["TopicTest"], ["ü"], [""], ["A", "B"], ["AB", "AC"]]))
    offset = draw(st.integers(0, 2**40))
    bodies = []
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 5))
        recs = [draw(records(offset + i, draw(st.sampled_from(topics)))) for i in range(n)]
        stop = draw(st.none() | st.integers(offset, offset + n))
        bodies.append((b"".join(recs), stop))
        offset += n
    return bodies


@pytest.mark.usefixtures("walk", "cut")
# 100 examples for each of the 11 walk/cut pairs: 1,100 pulls in all
@settings(max_examples=100, deadline=None, suppress_health_check=FIXTURE_SAFE)
@given(pulls(), st.none() | st.sets(st.sampled_from(["a", "ü", ""]), max_size=2))
def test_scan_equals_the_record_by_record_batch(bodies: list[tuple[bytes, int | None]],
                                                tags: set[str] | None) -> None:
    assert_same(bodies, tags)


@pytest.mark.usefixtures("walk")
@settings(max_examples=200, deadline=None, suppress_health_check=FIXTURE_SAFE)
@given(pulls(), st.data())
def test_scan_of_damaged_bodies_fails_or_reads_as_the_reference(
        bodies: list[tuple[bytes, int | None]], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(bodies) - 1))
    body, stop = bodies[i]
    how = data.draw(st.sampled_from(["flip", "cut", "grow"]))
    if how == "flip" and body:
        at = data.draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([body[at] ^ data.draw(st.integers(1, 255))]) + body[at + 1:]
    elif how == "cut" and body:
        body = body[:data.draw(st.integers(0, len(body) - 1))]
    else:
        body += data.draw(st.binary(min_size=1, max_size=100))
    bodies[i] = (body, stop)
    assert_same(bodies)


def added(body: bytes, stop: int | None, walk: Any) -> tuple[object, ...]:
    """What ``RecordScan.add(body, stop)`` leaves with ``walk``, or its error."""
    saved, arrow.WALK_KERNEL = arrow.WALK_KERNEL, walk
    try:
        scan = RecordScan()
        scan.add(body, stop)
    except CorruptRecordError as exc:
        return "corrupt", str(exc)
    finally:
        arrow.WALK_KERNEL = saved
    return len(scan), scan.size, scan._starts, scan._kept, scan._pulls


@settings(max_examples=400, deadline=None)
@given(pulls(), st.data())
def test_walk_kernel_takes_what_the_loop_takes(bodies: list[tuple[bytes, int | None]],
                                               data: st.DataObject) -> None:
    """walk_records (plain Python and compiled) against add's Python loop, on
    whole, cut, grown and flipped bodies and stops in and out of int64's range."""
    body, stop = bodies[0]
    how = data.draw(st.sampled_from(["whole", "flip", "cut", "grow"]))
    if how == "flip" and body:
        at = data.draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([body[at] ^ data.draw(st.integers(1, 255))]) + body[at + 1:]
    elif how == "cut" and body:
        body = body[:data.draw(st.integers(0, len(body) - 1))]
    elif how == "grow":
        body += data.draw(st.binary(min_size=1, max_size=100))
    if data.draw(st.booleans()):
        stop = data.draw(st.sampled_from([-(2**70), -(2**63), 2**63 - 1, 2**63, 2**70]))
    want = added(body, stop, None)
    for param in WALKS[1:]:
        assert added(body, stop, param.values[0]) == want, param.id


@st.composite
def ranges(draw: st.DrawFn) -> tuple[bytes, int, list[int], list[int]]:
    """Bytes, how many of them to cut from, and ascending ranges within those
    (empty ones, ones that touch, gaps of any size)."""
    data = draw(st.binary(max_size=300))
    size = draw(st.integers(0, len(data)))
    points = sorted(draw(st.lists(st.integers(0, size), max_size=40)))
    lo, hi = points[0::2], points[1::2]
    return data, size, lo[:len(hi)], hi


def cut_with(gather: Any, data: bytes, size: int, lo: list[int], hi: list[int]) -> pa.Array:
    saved, arrow.GATHER_KERNEL = arrow.GATHER_KERNEL, gather
    try:
        return arrow._cut(pa.py_buffer(data), size, np.array(lo, np.int64),
                          np.array(hi, np.int64))
    finally:
        arrow.GATHER_KERNEL = saved


@settings(max_examples=300, deadline=None)
@given(ranges())
def test_gather_cuts_what_take_cuts(case: tuple[bytes, int, list[int], list[int]]) -> None:
    """gather_ranges (plain Python and compiled) makes the array take makes."""
    data, size, lo, hi = case
    want = cut_with(None, data, size, lo, hi)
    assert want.to_pylist() == [data[a:b] for a, b in zip(lo, hi, strict=True)]
    for param in CUTS[1:]:
        got = cut_with(param.values[0], data, size, lo, hi)
        got.validate(full=True)
        assert got.equals(want), param.id


@pytest.mark.parametrize("gather", [p.values[0] for p in CUTS[1:]])
def test_gather_refuses_ranges_it_cannot_cut(gather: Any) -> None:
    data = np.frombuffer(b"0123456789", np.uint8)

    def run(size: int, lo: list[int], hi: list[int], room: int = 10,
            starts: int | None = None) -> int:
        out = memoryview(np.empty(room, np.uint8))
        offsets = np.empty(len(lo) + 1 if starts is None else starts, np.int32)
        return int(gather(data, size, np.array(lo, np.int64), np.array(hi, np.int64), out,
                          offsets))

    assert run(10, [0, 4], [2, 10]) == 8
    for size, lo, hi in ((10, [3, 2], [4, 5]),    # not ascending
                         (10, [0, 2], [5, 6]),    # overlapping
                         (10, [4], [3]),          # ends before it starts
                         (8, [0], [9]),           # past the bytes to cut from
                         (-1, [], []), (11, [], [])):  # not within the bytes given
        with pytest.raises(ValueError):
            run(size, lo, hi)
    with pytest.raises(ValueError, match="does not fit"):
        run(10, [0], [6], room=5)
    with pytest.raises(ValueError, match="offsets"):
        run(10, [0], [6], starts=1)
    with pytest.raises(ValueError, match="ends"):
        gather(data, 10, np.array([0, 1], np.int64), np.array([1], np.int64),
               memoryview(np.empty(5, np.uint8)), np.empty(3, np.int32))


@pytest.mark.usefixtures("walk")
def test_scan_sizes_of_a_record_that_do_not_fit() -> None:
    good = record(0, props_of(0))
    for bad in (good[:-1], good + b"\x00" * 10, b"\x00\x00\x00\x05" + good[4:],
                b"\x7f\xff\xff\xff" + good[4:], good + good[:40]):
        kind, text = assert_same([(bad, None)])
        assert kind == "corrupt", text
        with pytest.raises(CorruptRecordError):
            RecordScan().add(bad)


@pytest.mark.usefixtures("walk")
def test_scan_bad_head_fields_raise_the_reference_error() -> None:
    good = record(0, props_of(0)) + record(1, props_of(1))
    magic = good[:4] + b"\x00\x00\x00\x00" + good[8:]
    body_len = good[:84] + b"\x7f\x00\x00\x00" + good[88:]
    for bad in (magic, body_len):
        scan = RecordScan()
        scan.add(bad)  # its sizes fit: the heads are read in to_batch
        assert len(scan) == 2
        with pytest.raises(CorruptRecordError) as exc:
            scan.to_batch(BROKER)
        with pytest.raises(CorruptRecordError) as ref:
            reference([(bad, None)])
        assert str(exc.value) == str(ref.value)


@pytest.mark.usefixtures("walk")
def test_scan_stops_at_the_stop_offset_of_each_body() -> None:
    first = b"".join(record(i, props_of(i)) for i in range(0, 4))
    second = b"".join(record(i, props_of(i)) for i in range(4, 8))
    scan = scan_of([(first, 2), (second, 7), (b"", 9)])
    assert len(scan) == 5
    assert scan.size == 2 * len(record(0, props_of(0))) + 3 * len(record(4, props_of(4)))
    batch = scan.to_batch(BROKER)
    assert batch.column("queueOffset").to_pylist() == [0, 1, 4, 5, 6]
    assert batch.equals(reference([(first, 2), (second, 7)]))


@pytest.mark.usefixtures("walk")
def test_scan_with_compressed_bodies_and_several_topics() -> None:
    raw = b"a compressed body " * 20
    bodies: list[tuple[bytes, int | None]] = [
        (record(0, props_of(0)) + record(1, props_of(1), topic="Other"), None),
        (record(2, props_of(2), body=zlib.compress(raw), sys_flag=FLAG_COMPRESSED), None),
    ]
    batch = scan_of(bodies).to_batch(BROKER)
    assert batch.column("body").to_pylist() == [b"body-0", b"body-1", raw]
    assert batch.column("topic").to_pylist() == ["TopicTest", "Other", "TopicTest"]
    assert_same(bodies)


@pytest.mark.usefixtures("walk")
def test_scan_invalid_utf8_raises() -> None:
    bodies: list[tuple[bytes, int | None]] = [
        (record(0, props_of(0)) + record(1, None, properties=b"KEYS\x01\xff\xfe\x02"), None)]
    with pytest.raises(ValueError):
        scan_of(bodies).to_batch(BROKER)
    bad_topic = record(0, props_of(0), topic="ab")
    bad_topic = bad_topic.replace(b"\x02ab", b"\x02\xff\xfe", 1)
    assert assert_same([(bad_topic, None)])[0] == "corrupt"


@pytest.mark.usefixtures("walk")
def test_scan_zero_rows_and_many() -> None:
    batch = RecordScan().to_batch(BROKER)
    assert batch.num_rows == 0 and batch.schema == SCHEMA
    assert scan_of([(record(3, props_of(3)), 3)]).to_batch(BROKER, {"A"}).num_rows == 0
    bodies: list[tuple[bytes, int | None]] = [
        (b"".join(record(i, {f"k{j}": f"v{i}.{j}" for j in range(i % 5)} | props_of(i))
                  for i in range(start, start + 32)), None)
        for start in range(0, 320, 32)]
    scan = scan_of(bodies)
    assert len(scan) == 320 and scan.size == sum(len(b) for b, _ in bodies)
    assert scan.to_batch(BROKER).equals(reference(bodies))


@pytest.mark.usefixtures("walk")
def test_scan_reads_plain_bodies_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without compression, several topics or a bad record, no record-by-record
    fallback: the equality above is of two ways, not of one with itself."""
    bodies: list[tuple[bytes, int | None]] = [
        (record(0, props_of(0)) + record(1, {"TAGS": "x"}) + record(2, None, body=b""), 2),
        (record(3, props_of(3), store=-(2**62)), None)]
    want = reference(bodies)

    def no_fallback(*_: object) -> pa.RecordBatch:
        raise AssertionError("fell back to decode_columns")

    monkeypatch.setattr(RecordScan, "_by_record", no_fallback)
    assert scan_of(bodies).to_batch(BROKER).equals(want)
    assert scan_of(bodies).to_batch(BROKER, {"x"}).equals(reference(bodies, {"x"}))


# ---- property texts: cut at their separators, or split by the kernels --------------

def assert_same_split(texts: list[str]) -> _Properties:
    text = pa.array(texts, pa.string())
    got, want = _Properties(text), _Properties(text, by_kernels=True)
    assert got.map.equals(want.map)
    assert got.keys.equals(want.keys) and got.values.equals(want.values)
    assert got.rows.equals(want.rows)
    for name in ("TAGS", "KEYS", "UNIQ_KEY", "a", ""):
        assert got.value(name).equals(want.value(name))
    return got


_WORD = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
                max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", ""]) | _WORD,
                                   _WORD), max_size=4), max_size=8))
def test_whole_items_are_cut_at_their_separators(rows: list[list[tuple[str, str]]]) -> None:
    texts = ["".join(f"{k}\x01{v}\x02" for k, v in row) for row in rows]
    assert _plain_pairs(pa.array(texts, pa.string())) is not None
    assert_same_split(texts)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_PIECES, max_size=8).map("".join), max_size=8))
def test_any_texts_split_as_the_kernels_split_them(texts: list[str]) -> None:
    assert_same_split(texts)


def test_texts_that_are_not_whole_items_go_to_the_kernels() -> None:
    for texts in (["KEYS\x01v"], ["a\x01b\x01c\x02"], ["x\x02"], ["junk"], ["k\x01v\x02", "tail"],
                  ["\x02k\x01v\x02"], ["a\x01b\x01c\x02d\x02"]):
        assert _plain_pairs(pa.array(texts, pa.string())) is None, texts
        assert_same_split(texts)
    sliced = pa.array(["k\x01v\x02", "a\x01b\x02"], pa.string()).slice(1)
    assert _plain_pairs(sliced) is None
    got = _Properties(sliced)
    assert got.map.to_pylist() == [[("a", "b")]]
