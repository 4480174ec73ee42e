"""Decoding costs what the bytes cost (protocol/codecs): whatever a frame
holds, a codec builds a bounded number of objects before it takes the frame
or refuses it with RemoteProtocolError.

The attack frames are made by repeating a small structure hypothesis draws
(an empty array, a map of arrays, ...) until the frame is large, and putting
the result in one place of a command: the remark, extFields, a value of
extFields, the body, the version, or the JSON header itself; or they make a
request's structured body (a heart-beat's, which the ACL decodes before it
checks the signature). Memory is read with tracemalloc (which sees every
Python object msgpack and json build).
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from protocol.client_data import ConsumerData, HeartbeatData, SubscriptionData
from protocol.codecs import MSGPACK, ROCKETMQ_BINARY, ROCKETMQ_JSON, Codec
from protocol.codecs.base import MAX_EXT_FIELDS, MAX_HEADER_BYTES, REQUEST_BODY
from protocol.codecs.msgpack_codec import SMALL_FRAME, _Reader, _small_command
from protocol.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from protocol.errors import MalformedRequestError, RemoteProtocolError

KiB = 1024
MiB = 1024 * KiB

SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False)
           | st.text(max_size=4) | st.binary(max_size=4))
SHAPES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8)
JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=4)
JSON_SHAPES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                           max_leaves=8)


def peak_of(fn: Callable[[], Any]) -> tuple[Any, int]:
    """(what ``fn`` returned or raised, the most bytes it held at once)."""
    tracemalloc.start()
    try:
        try:
            result: Any = fn()
        except RemoteProtocolError as exc:
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def repeated(packed: bytes, size: int) -> bytes:
    """A msgpack array of copies of ``packed``, about ``size`` bytes."""
    n = max(1, size // len(packed))
    return b"\xdd" + struct.pack(">I", n) + packed * n


def command_with(slot: int, filler: bytes, flag: int = 0) -> bytes:
    """A msgpack command whose element ``slot`` (0..6) is ``filler``."""
    parts = [msgpack.packb(v, use_bin_type=True)
             for v in (10, 77, flag, None, {"topic": "T"}, b"body", 1)]
    parts[slot] = filler
    return b"\x97" + b"".join(parts)


def assert_bounded(codec: Codec, payload: bytes, bound: int) -> Any:
    result, peak = peak_of(lambda: codec.decode(payload))
    assert isinstance(result, RemotingCommand | RemoteProtocolError), result
    assert peak <= bound, f"decoding {len(payload)} bytes held {peak} bytes (bound {bound})"
    return result


# ---- msgpack ------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(shape=SHAPES, slot=st.integers(0, 6), inside_ext=st.booleans(),
       size=st.sampled_from([SMALL_FRAME // 2, SMALL_FRAME, 2 * SMALL_FRAME, 1 * MiB]))
@example(shape=[], slot=3, inside_ext=False, size=1 * MiB)  # the finding: 0x90 x N in the remark
@example(shape=[], slot=4, inside_ext=True, size=1 * MiB)   # ... in extFields
def test_msgpack_decode_holds_a_bounded_amount(shape: Any, slot: int, inside_ext: bool,
                                               size: int) -> None:
    filler = repeated(msgpack.packb(shape, use_bin_type=True), size)
    if inside_ext:  # the copies as the value of an extFields entry
        filler = b"\x81\xa1k" + filler
        slot = 4
    payload = command_with(slot, filler)
    # what the frame itself takes, the body cut out of it, and at most one
    # small object per byte of a frame of up to SMALL_FRAME bytes
    result = assert_bounded(MSGPACK, payload, 2 * len(payload) + 100 * SMALL_FRAME)
    if slot >= 3 and isinstance(result, RemoteProtocolError):
        # code, opaque and flag were read: the refusal can be answered
        assert isinstance(result, MalformedRequestError) or "undecodable" in str(result)


@settings(max_examples=300, deadline=None)
@given(code=st.integers(-(2**31), 2**31 - 1), opaque=st.integers(0, 2**31 - 1),
       flag=st.integers(0, 3), remark=st.none() | st.text(max_size=30),
       ext=st.dictionaries(st.text(max_size=8), SCALARS, max_size=6),
       body=st.none() | st.binary(max_size=64), cut=st.integers(0, 200),
       noise=st.binary(max_size=4))
def test_msgpack_fast_path_and_reader_agree(code: int, opaque: int, flag: int, remark: str | None,
                                            ext: dict[str, Any], body: bytes | None, cut: int,
                                            noise: bytes) -> None:
    """The fast paths (a small frame's, a large frame's) take exactly what the
    bounded reader takes."""
    cmd = RemotingCommand(code, opaque, flag, remark, ext, body)
    payload = cmd.encode()
    assert _Reader(payload).command() == cmd == MSGPACK.decode(payload)
    assert _Reader(payload).quick() == cmd
    assert MSGPACK.peek_request(payload) == (None if flag else (code, opaque))
    broken = payload[:cut] + noise + payload[cut + len(noise):]
    fast = _small_command(broken)
    try:
        slow: RemotingCommand | None = _Reader(broken).command()
    except RemoteProtocolError:
        slow = None
    quick = _Reader(broken).quick()  # a large frame's fast path
    for taken in (fast, quick):
        if taken is not None:  # (as bytes: a NaN is not equal to itself)
            assert slow is not None and taken.encode() == slow.encode()


def test_msgpack_refusals_name_the_request() -> None:
    big_remark = command_with(3, msgpack.packb("x" * (MAX_HEADER_BYTES + 1)))
    for payload, message in [
        (command_with(3, repeated(b"\x90", 16 * MiB)), "remark too large or not a scalar"),
        (command_with(4, b"\xdf" + struct.pack(">I", MAX_EXT_FIELDS + 1)),
         f"ext_fields holds {MAX_EXT_FIELDS + 1} entries"),
        (command_with(4, b"\x81\xa1k\x90"), "ext_fields value of 'k' must be a scalar"),
        (command_with(4, b"\x81\x01\xa1v"), "ext_fields keys must be strings, not int"),
        (command_with(4, b"\x81\x80\xa1v"), "ext_fields keys must be strings, not dict"),
        (command_with(5, b"\x90"), "body must be bytes or nil"),
        (big_remark, f"longer than {MAX_HEADER_BYTES} bytes"),
    ]:
        with pytest.raises(MalformedRequestError, match=message) as info:
            MSGPACK.decode(payload)
        assert (info.value.code, info.value.opaque) == (10, 77)
        assert MSGPACK.peek_request(payload) == (10, 77)
    # a response or a oneway request is never answered
    for flag in (FLAG_RESPONSE, FLAG_ONEWAY):
        payload = command_with(3, b"\x91\x90", flag=flag)
        with pytest.raises(RemoteProtocolError) as refused:
            MSGPACK.decode(payload)
        assert not isinstance(refused.value, MalformedRequestError)
        assert MSGPACK.peek_request(payload) is None


def test_msgpack_header_longer_than_the_limit_is_refused_unread() -> None:
    """Many small extFields values adding up past MAX_HEADER_BYTES: refused
    once the header passes the limit, before the body."""
    ext = {f"k{i}": "v" * 2000 for i in range(MAX_EXT_FIELDS)}
    payload = RemotingCommand(10, 77, 0, None, ext, b"b" * MiB).encode()
    with pytest.raises(MalformedRequestError, match=f"longer than {MAX_HEADER_BYTES}"):
        MSGPACK.decode(payload)


def test_msgpack_large_body_is_taken() -> None:
    cmd = RemotingCommand(10, 77, 0, "r", {"topic": "T", "n": 5}, b"\x90" * (4 * MiB))
    payload = cmd.encode()
    got, peak = peak_of(lambda: MSGPACK.decode(payload))
    assert got == cmd
    assert peak < 4 * MiB + 1 * MiB  # the body once, and little else


# ---- RocketMQ JSON and binary ----------------------------------------------------

def json_payload(header: str | bytes, body: bytes = b"") -> bytes:
    raw = header.encode() if isinstance(header, str) else header
    return struct.pack(">I", len(raw)) + raw + body


JSON_SLOTS = [
    "{filler}",
    '{{"code":10,"opaque":77,"remark":{filler}}}',
    '{{"code":10,"opaque":77,"extFields":{filler}}}',
    '{{"code":10,"opaque":77,"extFields":{{"topic":{filler}}}}}',
    '{{"code":10,"opaque":77,"other":{filler},"flag":0}}',
]


@settings(max_examples=80, deadline=None)
@given(shape=JSON_SHAPES, slot=st.sampled_from(JSON_SLOTS),
       size=st.sampled_from([4 * KiB, 100 * KiB, MAX_HEADER_BYTES - 100, 1 * MiB]),
       as_object=st.booleans())
@example(shape=[], slot="{filler}", size=1 * MiB, as_object=False)  # the finding: [[],[],...]
@example(shape=[], slot=JSON_SLOTS[2], size=MAX_HEADER_BYTES - 100, as_object=False)
@example(shape=1, slot=JSON_SLOTS[3], size=MAX_HEADER_BYTES - 100, as_object=False)
def test_json_header_decode_holds_a_bounded_amount(shape: Any, slot: str, size: int,
                                                   as_object: bool) -> None:
    one = json.dumps(shape)
    n = max(1, size // (len(one) + 1))
    if as_object:
        filler = "{" + ",".join(f'"{i}":{one}' for i in range(n)) + "}"
    else:
        filler = "[" + ",".join([one] * n) + "]"
    payload = json_payload(slot.format(filler=filler), b"body")
    # the header's text a few times over (bytes, str, the strings in it)
    assert_bounded(ROCKETMQ_JSON, payload, 8 * min(len(payload), MAX_HEADER_BYTES) + 256 * KiB)


def test_json_header_refusals() -> None:
    deep = json_payload("[" * 100 + "]" * 100)
    wide = json_payload('{"code":10,"opaque":77,"x":[' + ",".join(["1"] * 5000) + "]}")
    long = json_payload('{"code":10,"opaque":77,"remark":"' + "x" * MAX_HEADER_BYTES + '"}')
    many = json_payload(json.dumps({"code": 10, "opaque": 77, "extFields": {
        str(i): "v" for i in range(MAX_EXT_FIELDS + 1)}}))
    strings = json_payload('{"code":10,"opaque":77,"x":"' + '\\",",' * 5000 + '"}')
    for payload, message in [(deep, "more than 8 arrays and objects"),
                             (strings, "undecodable JSON header: more than"),
                             (wide, "undecodable JSON header: more than"),
                             (long, f"above the limit of {MAX_HEADER_BYTES} bytes"),
                             (many, f"extFields holds {MAX_EXT_FIELDS + 1} entries")]:
        with pytest.raises(RemoteProtocolError, match=message):
            ROCKETMQ_JSON.decode(payload)


def test_json_brackets_and_commas_inside_strings_are_no_structure() -> None:
    """A header whose strings hold brackets, commas and escaped quotes (a
    message property holding JSON) is read as it was before."""
    text = '[{"a":"\\"],[{"}, 1, 2]' * 300
    header = {"code": 10, "opaque": 77, "flag": 0,
              "extFields": {"topic": "T", "properties": text}, "remark": "{[,]}" * 100}
    cmd = ROCKETMQ_JSON.decode(json_payload(json.dumps(header)))
    assert cmd.ext_fields["properties"] == text and cmd.remark == "{[,]}" * 100


def test_json_header_holding_the_largest_properties_is_taken() -> None:
    """A send whose properties reach the store's 32767 bytes, each pair
    separated by \\u0001 and \\u0002 (six bytes each in JSON), fits."""
    props = "\u0002".join(f"k{i}\u0001v" for i in range(32767 // 6))[:32767]
    header = json.dumps({"code": 310, "opaque": 77, "flag": 0,
                         "extFields": {"a": "group", "b": "Topic", "i": props}})
    assert len(header) > 64 * KiB
    cmd = ROCKETMQ_JSON.decode(json_payload(header, b"body"))
    assert cmd.ext_fields["i"] == props and cmd.body == b"body"


def binary_header(entries: list[tuple[bytes, bytes]], remark: bytes = b"") -> bytes:
    fields = b"".join(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
                      for k, v in entries)
    return (struct.pack(">hbhii", 10, 0, 0, 77, 0) + struct.pack(">i", len(remark)) + remark
            + struct.pack(">i", len(fields)) + fields)


def test_binary_header_bounds() -> None:
    many = binary_header([(b"k%d" % i, b"") for i in range(MAX_EXT_FIELDS + 1)])
    payload = struct.pack(">I", (1 << 24) | len(many)) + many
    with pytest.raises(MalformedRequestError, match=f"more than {MAX_EXT_FIELDS} entries"):
        ROCKETMQ_BINARY.decode(payload)
    assert ROCKETMQ_BINARY.peek_request(payload) == (10, 77)
    long = binary_header([], remark=b"r" * MAX_HEADER_BYTES)
    with pytest.raises(MalformedRequestError, match="above the limit") as info:
        ROCKETMQ_BINARY.decode(struct.pack(">I", (1 << 24) | len(long)) + long)
    assert (info.value.code, info.value.opaque) == (10, 77)  # answered, not closed
    fine = binary_header([(b"k%d" % i, b"v") for i in range(MAX_EXT_FIELDS)])
    cmd = ROCKETMQ_BINARY.decode(struct.pack(">I", (1 << 24) | len(fine)) + fine + b"body")
    assert len(cmd.ext_fields) == MAX_EXT_FIELDS and cmd.body == b"body"


# ---- structured request bodies (RemotingCommand.decode_body) ---------------------

def json_body(shape: Any, n: int) -> bytes:
    return ("[" + ",".join([json.dumps(shape)] * n) + "]").encode()


@settings(max_examples=60, deadline=None)
@given(shape=SHAPES, json_shape=JSON_SHAPES, nested=st.integers(0, 1000),
       size=st.sampled_from([64 * KiB, REQUEST_BODY.max_bytes - 64, 2 * REQUEST_BODY.max_bytes]))
@example(shape=[], json_shape=[], nested=0, size=REQUEST_BODY.max_bytes - 64)  # [[],[],...]
@example(shape="ab", json_shape="ab", nested=1000, size=REQUEST_BODY.max_bytes - 64)
@example(shape=None, json_shape=None, nested=1000, size=64 * KiB)
def test_request_body_decode_holds_a_bounded_amount(shape: Any, json_shape: Any, nested: int,
                                                    size: int) -> None:
    packed = msgpack.packb(shape, use_bin_type=True)
    per = max(1, min(REQUEST_BODY.max_array - 1, size // len(packed)))
    if nested:  # arrays nested ``nested`` deep, each holding copies: none is complete
        level = b"\xdc" + struct.pack(">H", per + 1) + packed * per
        body = (level * nested)[:size]
    else:
        body = repeated(packed, size)
    bodies: list[tuple[Codec, bytes]] = [(MSGPACK, body),
                                         (ROCKETMQ_JSON, json_body(json_shape, size // 4))]
    for codec, raw in bodies:
        cmd = RemotingCommand(code=34, opaque=1, body=raw, codec=codec)
        result, peak = peak_of(cmd.decode_body)
        # a few times the body's bytes at most, whatever is in them
        assert peak <= 24 * REQUEST_BODY.max_bytes, (codec.name, len(raw), peak)
        if isinstance(result, RemoteProtocolError):
            assert "undecodable body" in str(result)


def test_request_body_within_the_limits_is_read() -> None:
    """A heart-beat of 8 consumer groups of 100 subscriptions each."""
    hb = HeartbeatData("10.0.0.1@1", ["p"], [
        ConsumerData(f"group{g}", subscriptions=[
            SubscriptionData(f"Topic{t}", "TagA || TagB", tags_set=["TagA", "TagB"])
            for t in range(100)]) for g in range(8)])
    for codec in (MSGPACK, ROCKETMQ_JSON):
        cmd = RemotingCommand(code=34, opaque=1, body=codec.pack_body(hb.to_dict()), codec=codec)
        assert HeartbeatData.from_wire(cmd.decode_body()) == hb


def test_response_body_is_not_limited() -> None:
    """A response's body (a client reading its server's answer) is read whole."""
    table = {"offsets": list(range(REQUEST_BODY.max_values + 10))}
    for codec in (MSGPACK, ROCKETMQ_JSON):
        body = codec.pack_body(table)
        assert RemotingCommand(code=0, flag=FLAG_RESPONSE, body=body,
                               codec=codec).decode_body() == table
        with pytest.raises(RemoteProtocolError, match="undecodable body"):
            RemotingCommand(code=17, body=body, codec=codec).decode_body()
