"""decode_columns: the columnar record decoder agrees with decode_records."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import CorruptRecordError
from protocol.message import MessageExt, properties_to_string
from protocol.record import (
    BLANK_MAGIC_CODE,
    FLAG_COMPRESSED,
    FLAG_MULTI_TAGS,
    OFF_BODY_LEN,
    OFF_MAGIC,
    OFF_TOTAL_SIZE,
    RECORD_HEAD_SIZE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    RecordColumns,
    decode_columns,
    decode_records,
    empty_columns,
    encode_record,
    pack_host,
)

STORE_HOST = pack_host("10.1.2.3:10911")


def record(
    queue_offset: int,
    *,
    body: bytes = b"body",
    topic: bytes = b"TopicTest",
    props: dict[str, str] | None = None,
    queue_id: int = 3,
    physical_offset: int | None = None,
    sys_flag: int = 0,
    born_timestamp: int | None = None,
    store_timestamp: int | None = None,
    store_host: bytes = STORE_HOST,
    properties: bytes | None = None,
) -> bytes:
    return encode_record(
        topic=topic,
        queue_id=queue_id,
        flag=5,
        body=body,
        properties=(properties if properties is not None
                    else properties_to_string(props or {}).encode()),
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000 + queue_offset if born_timestamp is None else born_timestamp,
        born_host=pack_host("192.168.0.9:4321"),
        store_timestamp=(1_700_000_000_500 + queue_offset if store_timestamp is None
                         else store_timestamp),
        store_host=store_host,
        reconsume_times=2,
        prepared_transaction_offset=0,
        queue_offset=queue_offset,
        physical_offset=queue_offset * 1000 if physical_offset is None else physical_offset,
    )


def columns_consistent(cols: RecordColumns) -> bool:
    """Every column has one entry per record."""
    n = len(cols)
    return all(
        len(c) == n
        for c in (cols.queue_ids, cols.queue_offsets, cols.physical_offsets,
                  cols.born_timestamps, cols.store_timestamps, cols.store_hosts,
                  cols.bodies, cols.topics, cols.property_texts)
    )


def assert_row(cols: RecordColumns, i: int, msg: MessageExt, body: bytes | None = None) -> None:
    """Row ``i`` of ``cols`` matches ``msg`` (``body``: the expected body when
    it differs from the stored one, i.e. compressed)."""
    assert cols.queue_ids[i] == msg.queue_id
    assert cols.queue_offsets[i] == msg.queue_offset
    assert cols.physical_offsets[i] == msg.commit_log_offset
    assert cols.born_timestamps[i] == msg.born_timestamp
    assert cols.store_timestamps[i] == msg.store_timestamp
    assert cols.offset_msg_id(i) == msg.msg_id
    assert bytes(cols.bodies[i]) == (msg.body if body is None else body)
    assert cols.topics[i] == msg.topic
    assert cols.properties(i) == msg.properties


def assert_agrees(buf: bytes) -> RecordColumns:
    msgs = decode_records(buf)
    cols = decode_columns(buf)
    assert len(cols) == len(msgs)
    assert columns_consistent(cols)
    for i, msg in enumerate(msgs):
        assert_row(cols, i, msg)
    return cols


def test_agrees_with_decode_records_on_hand_built_records() -> None:
    records = [
        record(0, props={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"}),
        record(1, body=b"", props={}),
        record(2, body=bytes(range(256)) * 3, topic="Tôpic/ünïcode".encode()),
        record(3, topic=b"", props={"": "empty key", "v": ""}),
        record(4, topic=b"TopicTest", queue_id=0, props={"a": "x\x03y", "b": "ü"}),
        record(5, topic=b"Other", sys_flag=TRANSACTION_COMMIT_TYPE | FLAG_MULTI_TAGS,
               store_host=pack_host("255.255.255.255:65535"), born_timestamp=-1,
               store_timestamp=0, physical_offset=2**63 - 1),
        record(6, topic=b"TopicTest"),
    ]
    buf = b"".join(records)
    cols = assert_agrees(buf)
    assert cols.queue_offsets == list(range(7))
    assert cols.topics == ["TopicTest", "TopicTest", "Tôpic/ünïcode", "", "TopicTest",
                           "Other", "TopicTest"]
    assert cols.properties(1) == {} and bytes(cols.property_texts[1]) == b""
    assert cols.properties(3) == {"": "empty key", "v": ""}
    # bodies and property texts are views into the buffer, not copies
    assert isinstance(cols.bodies[0], memoryview) and cols.bodies[0].obj is buf
    assert isinstance(cols.property_texts[0], memoryview)


def test_empty_buffer_gives_empty_columns() -> None:
    cols = decode_columns(b"")
    assert len(cols) == 0 and columns_consistent(cols)
    assert cols == empty_columns()
    out = empty_columns()
    assert decode_columns(b"", out) is out and len(out) == 0


def test_empty_columns_are_independent() -> None:
    a, b = empty_columns(), empty_columns()
    a.queue_offsets.append(1)
    assert len(b) == 0


_text = st.text(st.characters(codec="utf-8"), max_size=12)
_prop_text = st.text(
    st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=12
)
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def _records(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    """One record, and its body uncompressed when it was stored compressed."""
    raw = draw(st.binary(max_size=300))
    compressed = draw(st.booleans())
    topic = draw(_text.filter(lambda t: len(t.encode()) <= 127))
    props = draw(st.dictionaries(_prop_text, _prop_text, max_size=5))
    sys_flag = draw(st.sampled_from([0, FLAG_MULTI_TAGS, TRANSACTION_PREPARED_TYPE,
                                     TRANSACTION_COMMIT_TYPE]))
    body = zlib.compress(raw) if compressed else raw
    rec = encode_record(
        topic=topic.encode(),
        queue_id=draw(_int32),
        flag=draw(_int32),
        body=body,
        properties=properties_to_string(props).encode(),
        sys_flag=sys_flag | (FLAG_COMPRESSED if compressed else 0),
        born_timestamp=draw(_int64),
        born_host=draw(st.binary(min_size=8, max_size=8)),
        store_timestamp=draw(_int64),
        store_host=draw(st.binary(min_size=8, max_size=8)),
        reconsume_times=draw(_int32),
        prepared_transaction_offset=draw(_int64),
        queue_offset=draw(_int64),
        physical_offset=draw(_int64),
    )
    return rec, raw if compressed else None


@settings(max_examples=200, deadline=None)
@given(st.lists(_records(), max_size=6), st.integers(0, 3))
def test_agrees_with_decode_records_property(
    items: list[tuple[bytes, bytes | None]], already: int
) -> None:
    buf = b"".join(rec for rec, _ in items)
    out = empty_columns()
    if already:
        decode_columns(b"".join(record(i) for i in range(already)), out)
    cols = decode_columns(buf, out)
    assert cols is out
    msgs = decode_records(buf)
    assert len(cols) == already + len(msgs) == already + len(items)
    assert columns_consistent(cols)
    for i, (msg, (_, raw)) in enumerate(zip(msgs, items, strict=True)):
        assert_row(cols, already + i, msg, raw)
        if raw is not None:
            assert bytes(cols.bodies[already + i]) == raw != msg.body


def test_appends_to_an_existing_out() -> None:
    first = b"".join(record(i, body=b"a%d" % i) for i in range(3))
    second = b"".join(record(i, body=b"b%d" % i, topic=b"T2") for i in range(3, 5))
    out = decode_columns(first)
    assert decode_columns(second, out) is out
    assert columns_consistent(out)
    assert out.queue_offsets == [0, 1, 2, 3, 4]
    assert [bytes(b) for b in out.bodies] == [b"a0", b"a1", b"a2", b"b3", b"b4"]
    assert out.topics == ["TopicTest"] * 3 + ["T2"] * 2
    msgs = decode_records(first) + decode_records(second)
    for i, msg in enumerate(msgs):
        assert_row(out, i, msg)


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        (None, [5, 6, 7, 8]),
        (100, [5, 6, 7, 8]),
        (9, [5, 6, 7, 8]),
        (8, [5, 6, 7]),
        (7, [5, 6]),
        (6, [5]),
        (5, []),
        (0, []),
    ],
)
def test_stop_offset(stop: int | None, expected: list[int]) -> None:
    buf = b"".join(record(i, body=b"m%d" % i) for i in range(5, 9))
    out = decode_columns(record(1, body=b"earlier"))
    decode_columns(buf, out, stop_offset=stop)
    assert columns_consistent(out)
    assert out.queue_offsets == [1, *expected]
    assert [bytes(b) for b in out.bodies[1:]] == [b"m%d" % i for i in expected]


def test_stop_offset_stops_at_the_first_record_at_or_past_it() -> None:
    # stop, not skip: a lower offset after the stopping record is not taken
    buf = record(5) + record(9) + record(6)
    assert decode_columns(buf, stop_offset=8).queue_offsets == [5]


def test_compressed_body_comes_back_uncompressed() -> None:
    raw = b"hello compressed world " * 50
    buf = (
        record(0, body=b"plain")
        + record(1, body=zlib.compress(raw), sys_flag=FLAG_COMPRESSED)
        + record(2, body=zlib.compress(b""), sys_flag=FLAG_COMPRESSED | FLAG_MULTI_TAGS)
    )
    cols = decode_columns(buf)
    assert [bytes(b) for b in cols.bodies] == [b"plain", raw, b""]
    msgs = decode_records(buf)
    assert msgs[1].body == zlib.compress(raw)  # decode_records leaves it as stored
    for i, msg in enumerate(msgs):
        assert_row(cols, i, msg, zlib.decompress(msg.body) if i else None)


def test_uncompressible_body_flagged_compressed_is_served_as_stored() -> None:
    cols = decode_columns(record(0, body=b"not zlib", sys_flag=FLAG_COMPRESSED))
    assert bytes(cols.bodies[0]) == b"not zlib"


def _patch(rec: bytes, offset: int, fmt: str, value: int) -> bytes:
    b = bytearray(rec)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


def _topic_pos(rec: bytes) -> int:
    (body_len,) = struct.unpack_from(">i", rec, OFF_BODY_LEN)
    return RECORD_HEAD_SIZE + body_len


def _props_len_pos(rec: bytes) -> int:
    p = _topic_pos(rec)
    return p + 1 + rec[p]


def _grow(rec: bytes, delta: int) -> bytes:
    """Claim ``delta`` more (or fewer) total bytes than the record has."""
    (total,) = struct.unpack_from(">i", rec, OFF_TOTAL_SIZE)
    return _patch(rec, OFF_TOTAL_SIZE, ">i", total + delta)


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "bad magic": lambda r: _patch(r, OFF_MAGIC, ">I", 0xDEADBEEF),
    "blank magic": lambda r: _patch(r, OFF_MAGIC, ">I", BLANK_MAGIC_CODE),
    "zeroed": lambda r: bytes(len(r)),
    "truncated head": lambda r: r[:40],
    "truncated tail": lambda r: r[:-1],
    "truncated body": lambda r: r[: RECORD_HEAD_SIZE + 2],
    "total too large": lambda r: _grow(r, 1),
    "total too small": lambda r: _grow(r, -1),
    "total tiny": lambda r: _patch(r, OFF_TOTAL_SIZE, ">i", 10),
    "total negative": lambda r: _patch(r, OFF_TOTAL_SIZE, ">i", -200),
    "body length negative": lambda r: _patch(r, OFF_BODY_LEN, ">i", -1),
    "body length too large": lambda r: _patch(r, OFF_BODY_LEN, ">i", len(r)),
    "body length off by one": lambda r: _patch(r, OFF_BODY_LEN, ">i", 4),
    "topic length too large": lambda r: _patch(r, _topic_pos(r), ">B", 200),
    "topic length off by one": lambda r: _patch(r, _topic_pos(r), ">B", 8),
    "properties length too large": lambda r: _patch(r, _props_len_pos(r), ">h", 100),
    "properties length too small": lambda r: _patch(r, _props_len_pos(r), ">h", 3),
    "properties length negative": lambda r: _patch(r, _props_len_pos(r), ">h", -1),
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_corrupt_record_raises_and_keeps_the_records_before(
    corrupt: Callable[[bytes], bytes],
) -> None:
    good = record(0, body=b"good0", props={"TAGS": "A"})
    original = record(1, body=b"body1", topic=b"TopicTest", props={"TAGS": "B"})
    bad = corrupt(original)
    # a truncated record ends the buffer; any other is followed by a good one
    tail = record(2, body=b"good2") if len(bad) == len(original) else b""
    buf = good + bad + tail
    with pytest.raises(CorruptRecordError):
        decode_records(buf)  # the reference decoder rejects it too
    out = decode_columns(record(7, body=b"before", topic=b"Earlier"))
    with pytest.raises(CorruptRecordError):
        decode_columns(buf, out)
    assert columns_consistent(out)
    assert out.queue_offsets == [7, 0]
    assert [bytes(b) for b in out.bodies] == [b"before", b"good0"]
    assert out.topics == ["Earlier", "TopicTest"]
    assert out.properties(1) == {"TAGS": "A"}


def test_corrupt_first_record_leaves_out_empty() -> None:
    out = empty_columns()
    with pytest.raises(CorruptRecordError):
        decode_columns(_patch(record(0), OFF_MAGIC, ">I", 0), out)
    assert len(out) == 0 and columns_consistent(out)


def test_invalid_utf8_topic_is_corrupt() -> None:
    buf = record(0) + record(1, topic=b"\xff\xfe")
    out = empty_columns()
    with pytest.raises(CorruptRecordError):
        decode_columns(buf, out)
    assert out.queue_offsets == [0] and columns_consistent(out)


def test_invalid_utf8_properties_are_left_to_the_reader() -> None:
    # documented: decode_columns does not check the properties' UTF-8
    buf = record(0, properties=b"TAGS\x01\xff\x02") + record(1)
    cols = decode_columns(buf)
    assert cols.queue_offsets == [0, 1]
    with pytest.raises(UnicodeDecodeError):
        cols.properties(0)



def _one_by_one(buf: bytes) -> list[MessageExt]:
    from protocol.record import decode_record

    out, pos = [], 0
    while pos < len(buf):
        msg = decode_record(buf, pos)
        out.append(msg)
        pos += msg.store_size
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(_records(), max_size=6))
def test_decode_records_agrees_with_decode_record_at_each_position(
    items: list[tuple[bytes, bytes | None]],
) -> None:
    buf = b"".join(rec for rec, _ in items)
    assert decode_records(buf) == _one_by_one(buf)
    assert decode_records(bytearray(buf)) == _one_by_one(buf)
    assert decode_records(memoryview(buf)) == _one_by_one(buf)


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_decode_records_and_decode_record_reject_the_same_corruptions(
    corrupt: Callable[[bytes], bytes],
) -> None:
    buf = record(0, body=b"good0") + corrupt(record(1, body=b"body1", props={"TAGS": "B"}))
    with pytest.raises(CorruptRecordError):
        _one_by_one(buf)
    with pytest.raises(CorruptRecordError):
        decode_records(buf)
