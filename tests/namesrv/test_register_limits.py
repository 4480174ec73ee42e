"""A REGISTER_BROKER body is read within limits: whatever a topic's entry or an
unknown key's value holds, the name server builds a few containers of it and
refuses it (protocol/codecs BODY_ENTRY), while a registration of many real
topics still parses. The attack bodies are zlib-compressed, as a broker's are,
so millions of empty arrays fit in a small frame; memory is read with
tracemalloc (which sees every object msgpack and json build).
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.processor import Inflating, RegisterBody, parse_register_steps
from protocol.codecs import MSGPACK, ROCKETMQ_JSON, Codec
from protocol.codecs.base import READ_SIZE, UNKNOWN_LENGTH
from protocol.codecs.rocketmq import JsonBodyReader
from protocol.errors import RemoteProtocolError
from protocol.route import TopicConfig
from tests.protocol.test_decode_limits import peak_of

MiB = 1024 * 1024
MAX_INFLATED = 64 * MiB  # the name server's max_register_body_size
ARRAYS = 2_000_000  # empty arrays in an attack value


def parse(body: bytes, codec: Codec, chunk: int = 1000) -> tuple[RegisterBody, int]:
    """``body`` (compressed) parsed as the name server does; (what it read,
    how many steps it took)."""
    out = RegisterBody()
    steps = 0
    for _ in parse_register_steps(Inflating(zlib.compress(body, 1), MAX_INFLATED), out, 1024,
                                  chunk, codec):
        steps += 1
    return out, steps


def msgpack_value(shape: str) -> bytes:
    """A msgpack value of about ARRAYS empty arrays: one long array of them
    ("wide"), or arrays of 128 arrays of 128 arrays (each within msgpack's
    array length limit, "bushy")."""
    if shape == "wide":
        return b"\xdd" + struct.pack(">I", ARRAYS) + b"\x90" * ARRAYS
    inner = b"\xdc" + struct.pack(">H", 128) + b"\x90" * 128
    middle = b"\xdc" + struct.pack(">H", 128) + inner * 128
    n = ARRAYS // (128 * 128)
    return b"\xdc" + struct.pack(">H", n) + middle * n


def msgpack_body(where: str, value: bytes) -> bytes:
    """A register body whose topic "T" (where="topic") or unknown key
    "filterServerList" (where="unknown") is ``value``."""
    version = msgpack.packb({"timestamp": 1, "counter": 1})
    if where == "topic":
        return (b"\x82" + msgpack.packb("dataVersion") + version + msgpack.packb("topicConfigTable")
                + b"\x81" + msgpack.packb("T") + value)
    return (b"\x83" + msgpack.packb("dataVersion") + version + msgpack.packb("filterServerList")
            + value + msgpack.packb("topicConfigTable") + b"\x80")


def json_body(where: str) -> bytes:
    value = "[" + "[]," * (ARRAYS - 1) + "[]]"
    if where == "topic":
        text = '{"dataVersion":{"timestamp":1,"counter":1},"topicConfigTable":{"T":' + value + "}}"
    else:
        text = ('{"dataVersion":{"timestamp":1,"counter":1},"filterServerList":' + value
                + ',"topicConfigTable":{}}')
    return text.encode()


@pytest.mark.parametrize("shape", ["wide", "bushy"])
@pytest.mark.parametrize("where", ["topic", "unknown"])
def test_a_msgpack_value_of_millions_of_arrays_is_refused_within_bounded_memory(
        where: str, shape: str) -> None:
    body = msgpack_body(where, msgpack_value(shape))
    result, peak = peak_of(lambda: parse(body, MSGPACK))
    # the stream's buffer (256 KiB reads) and a few containers; unbounded, 2
    # million lists held about 130 MiB
    assert peak < 4 * MiB, f"parsing held {peak} bytes"
    assert isinstance(result, RemoteProtocolError), result
    assert "exceeds max_array_len" in str(result) or "arrays and maps" in str(result), result


@pytest.mark.parametrize("where", ["topic", "unknown"])
def test_a_json_value_of_millions_of_arrays_is_refused_within_bounded_memory(where: str) -> None:
    body = json_body(where)
    result, peak = peak_of(lambda: parse(body, ROCKETMQ_JSON))
    # a window of the text (under 272 Ki characters), the read that refills
    # it and their join: 0.9 MB of the 6 MB. The whole text, read before the
    # reader streamed, held 4 times its size at once; json.loads of it built
    # 2 million lists, about 130 MiB
    assert peak < 2 * MiB, f"parsing {len(body)} bytes held {peak} bytes"
    assert isinstance(result, RemoteProtocolError), result
    assert "nested more than two deep or longer than 16384 bytes" in str(result), result


def test_a_json_entry_of_a_thousand_arrays_among_real_topics_is_refused() -> None:
    """A JSON entry within the bytes and depth a value may take, but holding
    too many containers, is refused before it is built."""
    table = {f"T{i}": TopicConfig(f"T{i}", 4, 4).to_dict() for i in range(2000)}
    text = json.dumps({"topicConfigTable": table})
    bad = '"Bad":[' + ",".join(["[]"] * 1000) + "]"
    body = (text[:-2] + "," + bad + "}}").encode()
    with pytest.raises(RemoteProtocolError, match="more than 16 arrays and objects"):
        parse(body, ROCKETMQ_JSON)


@pytest.mark.parametrize("codec", [MSGPACK, ROCKETMQ_JSON], ids=lambda c: c.name)
def test_a_registration_of_twenty_thousand_real_topics_still_parses(codec: Codec) -> None:
    names = [f"TopicTest_{i}" for i in range(20_000)]
    deleted = [f"Gone_{i}" for i in range(3_000)]
    body = codec.pack_body({
        "dataVersion": {"timestamp": 5, "counter": 7},
        "topicConfigTable": {n: TopicConfig(n, 8, 8).to_dict() for n in names},
        "deletedTopics": deleted,
        "filterServerList": ["127.0.0.1:9000"],
    })
    out, steps = parse(body, codec)
    assert list(out.topics) == names
    assert out.topics["TopicTest_19999"] == TopicConfig("TopicTest_19999", 8, 8)
    assert out.deleted == deleted
    assert (out.version.timestamp, out.version.counter) == (5, 7)
    # read in steps: every 1000 topics, every 1000 deleted names, and once
    # more per READ_SIZE read (some of those fall together)
    reads = len(body) // READ_SIZE + 1
    assert 19 + 2 < steps <= 19 + 2 + reads, (steps, reads)


@pytest.mark.parametrize("codec", [MSGPACK, ROCKETMQ_JSON], ids=lambda c: c.name)
def test_deleted_topics_must_be_a_list_of_names(codec: Codec) -> None:
    for deleted in ("T", ["ok", 5], ["bad name!"]):
        body = codec.pack_body({"topicConfigTable": {}, "deletedTopics": deleted})
        with pytest.raises(RemoteProtocolError, match="deletedTopics must be a list"):
            parse(body, codec)


def test_json_is_read_value_by_value_whatever_its_layout() -> None:
    """Whitespace, escapes, an attributes map (as RocketMQ 5 sends) and null
    read as json.loads would; a value nested three deep is refused."""
    table = {f"T{i}": dict(TopicConfig(f"T{i}", 4, 4).to_dict(), topicFilterType='SINGLE"\\é',
                           attributes={"a": "1", "b": "2"}) for i in range(50)}
    body = {"dataVersion": {"timestamp": 1, "counter": 2}, "baseDataVersion": None,
            "topicConfigTable": table, "extra": [1, "x", None, True, 1.5, {"k": 2}]}
    for text in (json.dumps(body, indent=2), json.dumps(body, separators=(",", ":"))):
        out, _ = parse(text.encode(), ROCKETMQ_JSON)
        assert list(out.topics) == list(table)
        assert out.topics["T7"].topic_filter_type == 'SINGLE"\\é'
        assert out.version.counter == 2
    deep = json.dumps({"topicConfigTable": {}, "extra": [[[1]]]}).encode()
    with pytest.raises(RemoteProtocolError, match="nested more than two deep"):
        parse(deep, ROCKETMQ_JSON)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, indent=st.sampled_from([None, 1]))
def test_the_json_reader_reads_what_json_loads_reads_or_refuses(value: Any,
                                                                indent: int | None) -> None:
    text = json.dumps({"k": value, "after": 1}, indent=indent, ensure_ascii=indent is None)
    reader = JsonBodyReader(text)
    assert reader.read_map_header() == UNKNOWN_LENGTH and reader.more()
    assert reader.unpack() == "k"
    try:
        got = reader.unpack()
    except RemoteProtocolError as exc:
        assert "nested more than two deep" in str(exc) or "arrays and objects" in str(exc)
        return
    assert got == value
    assert reader.more() and reader.unpack() == "after" and reader.unpack() == 1
    assert not reader.more() and reader.at_end()


class Counted:
    """A stream read through, counting the bytes it gave; and a codec whose
    body readers count the values they read (keys too)."""

    def __init__(self, stream: Inflating, codec: Codec) -> None:
        self._stream = stream
        self._codec = codec
        self.name = codec.name
        self.taken = self.values = 0

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size) or b""
        self.taken += len(data)
        return data

    def body_reader(self, stream: Any) -> Any:
        reader = self._codec.body_reader(stream)
        unpack = reader.unpack

        def counted() -> Any:
            self.values += 1
            return unpack()

        reader.unpack = counted  # type: ignore[method-assign]
        return reader


def steps_of(body: bytes, codec: Codec) -> tuple[list[tuple[int, int]], RegisterBody | Exception]:
    """(bytes read (inflated), values read) in each step of the parse of
    ``body`` (compressed, as the name server gets it), and what it gave."""
    counted = Counted(Inflating(zlib.compress(body, 1), MAX_INFLATED), codec)
    out = RegisterBody()
    steps: list[tuple[int, int]] = []
    last = (0, 0)

    def step() -> None:
        nonlocal last
        now = (counted.taken, counted.values)
        steps.append((now[0] - last[0], now[1] - last[1]))
        last = now

    try:
        for _ in parse_register_steps(counted, out, 1024, 1000, counted):  # type: ignore[arg-type]
            step()
        result: RegisterBody | Exception = out
    except RemoteProtocolError as exc:
        result = exc
    step()
    return steps, result


@pytest.mark.parametrize("codec", [MSGPACK, ROCKETMQ_JSON], ids=lambda c: c.name)
def test_a_body_of_long_values_is_read_a_read_size_a_step(codec: Codec) -> None:
    """A thousand values of 16 KiB, within every limit, are 16 MiB: read in
    one step (a chunk of entries), they held the loop for 160 ms (JSON). A
    step now reads one READ_SIZE and scans about as much."""
    body = codec.pack_body({f"k{i}": "x" * 16_000 for i in range(256)} | {"topicConfigTable": {}})
    steps, result = steps_of(body, codec)
    assert isinstance(result, RegisterBody), result
    assert sum(read for read, _ in steps) == len(body)
    assert len(steps) >= len(body) // READ_SIZE
    assert max(read for read, _ in steps) <= 2 * READ_SIZE, steps
    # a key and its value of 16,000 characters: 2 * READ_SIZE is 32 of them
    assert max(values for _, values in steps) <= 2 * (2 * READ_SIZE // 16_000 + 1), steps


def test_a_json_value_or_whitespace_past_the_limit_is_refused_within_one_read() -> None:
    """A JSON body is read as a stream, not whole: a value or a run of
    whitespace of 8 MiB is refused where it starts, within the first read."""
    for filler, what in ((b'"' + b"x" * 8 * MiB + b'"', "longer than 16384 bytes at char 27"),
                         (b" " * 8 * MiB + b"1", "whitespace at char 27")):
        body = b'{"topicConfigTable":{},"k":' + filler + b"}"
        steps, result = steps_of(body, ROCKETMQ_JSON)
        assert isinstance(result, RemoteProtocolError) and what in str(result), result
        assert sum(read for read, _ in steps) <= READ_SIZE, steps


@pytest.mark.parametrize("codec", [MSGPACK, ROCKETMQ_JSON], ids=lambda c: c.name)
def test_a_body_of_many_small_unknown_keys_is_read_in_steps(codec: Codec) -> None:
    body = codec.pack_body({f"k{i}": i for i in range(5000)} | {"topicConfigTable": {}})
    out, steps = parse(body, codec)
    assert out.topics == {}
    # a step every 1000 keys (and, for JSON, per 256 KiB of text read)
    assert steps >= 5
