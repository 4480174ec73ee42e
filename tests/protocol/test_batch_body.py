"""RocketMQ's batch body (SEND_BATCH_MESSAGE): round trips, a golden batch, malformed layouts."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.batch import ENTRY_OVERHEAD, MAX_PROPERTIES, decode_batch, encode_batch
from protocol.errors import RemoteProtocolError

# One message of a batch, as RocketMQ's MessageDecoder.encodeMessage writes it, packed
# here field by field: total size, magic code, body CRC, flag, body length + body,
# properties length (i16) + properties.


def entry(flag: int, body: bytes, props: bytes, *, size: int | None = None,
          body_len: int | None = None, props_len: int | None = None,
          magic: int = 0, crc: int = 0) -> bytes:
    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
    return (struct.pack(">i", total if size is None else size)
            + struct.pack(">i", magic)
            + struct.pack(">i", crc)
            + struct.pack(">i", flag)
            + struct.pack(">i", len(body) if body_len is None else body_len) + body
            + struct.pack(">h", len(props) if props_len is None else props_len) + props)


# Two messages a Java producer batches for topic TopicTest: "Hello" with a tag and a
# unique key, then "Wörld" (UTF-8 body) with a key, a non-ASCII property and flag 7.
GOLDEN = (
    b"\x00\x00\x00\x4f"  # total size 79 = 22 + 5 + 52
    b"\x00\x00\x00\x00"  # magic code (not checked)
    b"\x00\x00\x00\x00"  # body CRC (not checked)
    b"\x00\x00\x00\x00"  # flag 0
    b"\x00\x00\x00\x05" b"Hello"
    b"\x00\x34"  # properties length 52
    b"TAGS\x01TagA\x02UNIQ_KEY\x017F000001A1B2C3D4E5F60000000A0001\x02"
    b"\x00\x00\x00\x36"  # total size 54 = 22 + 6 + 26
    b"\x00\x00\x00\x00"
    b"\x00\x00\x00\x00"
    b"\x00\x00\x00\x07"  # flag 7
    b"\x00\x00\x00\x06" b"W\xc3\xb6rld"
    b"\x00\x1a"  # properties length 26
    b"KEYS\x01order-1\x02city\x01Z\xc3\xbcrich\x02"
)
GOLDEN_ITEMS = [
    (0, b"Hello", "TAGS\x01TagA\x02UNIQ_KEY\x017F000001A1B2C3D4E5F60000000A0001\x02"),
    (7, "Wörld".encode(), "KEYS\x01order-1\x02city\x01Zürich\x02"),
]


def test_golden_batch_decodes() -> None:
    assert decode_batch(GOLDEN) == GOLDEN_ITEMS


def test_golden_batch_is_what_we_encode() -> None:
    assert encode_batch(GOLDEN_ITEMS) == GOLDEN


def test_golden_matches_the_entry_helper() -> None:
    assert GOLDEN == b"".join(entry(f, b, p.encode()) for f, b, p in GOLDEN_ITEMS)


def test_magic_code_and_crc_are_not_checked() -> None:
    # RocketMQ's broker reads past them too: clients write zeros
    data = entry(1, b"x", b"", magic=-626843481, crc=12345)
    assert decode_batch(data) == [(1, b"x", "")]


def test_empty_body_and_empty_batch() -> None:
    assert decode_batch(b"") == []
    assert encode_batch([]) == b""
    assert decode_batch(encode_batch([(0, b"", "")])) == [(0, b"", "")]
    assert len(encode_batch([(0, b"", "")])) == ENTRY_OVERHEAD


_props = st.text(st.characters(codec="utf-8"), max_size=40)
_items = st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64), _props),
                  max_size=8)


@settings(max_examples=200, deadline=None)
@given(_items)
def test_round_trip(items: list[tuple[int, bytes, str]]) -> None:
    data = encode_batch(items)
    assert decode_batch(data) == items
    assert len(data) == sum(ENTRY_OVERHEAD + len(b) + len(p.encode()) for _, b, p in items)


@settings(max_examples=300, deadline=None)
@given(_items, st.data())
def test_any_cut_or_corruption_raises_only_protocol_errors(
        items: list[tuple[int, bytes, str]], data: st.DataObject) -> None:
    blob = bytearray(encode_batch(items))
    if blob:
        for _ in range(data.draw(st.integers(0, 4))):
            at = data.draw(st.integers(0, len(blob) - 1))
            blob[at] = data.draw(st.integers(0, 255))
        blob = blob[:data.draw(st.integers(0, len(blob)))]
    try:
        out = decode_batch(bytes(blob))
    except RemoteProtocolError:
        return
    assert all(isinstance(f, int) and isinstance(b, bytes) and isinstance(p, str)
               for f, b, p in out)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_only_protocol_errors(data: bytes) -> None:
    try:
        decode_batch(data)
    except RemoteProtocolError:
        pass


def test_encode_refuses_what_the_layout_cannot_hold() -> None:
    with pytest.raises(ValueError, match="properties of 32768 bytes exceed 32767"):
        encode_batch([(0, b"x", "p" * (MAX_PROPERTIES + 1))])
    assert decode_batch(encode_batch([(0, b"x", "p" * MAX_PROPERTIES)]))[0][2] == "p" * 32767
    with pytest.raises(ValueError, match="flag 2147483648 is not a 32-bit integer"):
        encode_batch([(2**31, b"x", "")])
    with pytest.raises(ValueError):
        encode_batch([(0, b"x", "\ud800")])  # a lone surrogate is no UTF-8


GOOD = entry(3, b"body", b"TAGS\x01a\x02")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(entry(0, b"body", b"", size=ENTRY_OVERHEAD - 1),
                     r"batch entry 0 \(byte 0\): total size 21 does not fit the 26 bytes left",
                     id="total-size-below-fixed-part"),
        pytest.param(entry(0, b"", b"", size=0), r"total size 0 does not fit",
                     id="total-size-zero"),
        pytest.param(entry(0, b"", b"", size=-5), r"total size -5 does not fit",
                     id="total-size-negative"),
        pytest.param(entry(0, b"body", b"", size=27),
                     r"total size 27 does not fit the 26 bytes left", id="total-size-one-past"),
        pytest.param(GOOD + entry(0, b"abc", b"", size=1000),
                     r"batch entry 1 \(byte 33\): total size 1000 does not fit the 25 bytes left",
                     id="total-size-past-second"),
        pytest.param(entry(0, b"body", b"", body_len=5),
                     r"batch entry 0 \(byte 0\): body length 5 runs past the entry",
                     id="body-length-one-past"),
        pytest.param(entry(0, b"body", b"", body_len=-1), r"body length -1 runs past the entry",
                     id="body-length-negative"),
        pytest.param(entry(0, b"body", b"xy", body_len=9), r"body length 9 runs past the entry",
                     id="body-length-over-properties"),
        pytest.param(entry(0, b"body", b"ab", props_len=1),
                     r"properties length 1 does not match the entry's total size 28",
                     id="properties-length-short"),
        pytest.param(entry(0, b"body", b"ab", props_len=3), r"properties length 3 does not match",
                     id="properties-length-long"),
        pytest.param(entry(0, b"body", b"ab", props_len=-1),
                     r"properties length -1 does not match", id="properties-length-negative"),
        # a shorter body length moves where the properties length is read: still refused
        pytest.param(entry(0, b"body", b"ab", body_len=3), r"properties length \d+ does not match",
                     id="body-length-short"),
        pytest.param(entry(0, b"body", b"TAGS\x01\xff\xfe"),
                     r"batch entry 0 \(byte 0\): properties are not UTF-8", id="properties-not-utf8"),
        pytest.param(GOOD + entry(0, b"", b"\xc3"),
                     r"batch entry 1 \(byte 33\): properties are not UTF-8",
                     id="second-properties-truncated-utf8"),
        pytest.param(GOOD + b"\x00",
                     r"batch entry 1 \(byte 33\): 1 bytes left, shorter than an entry",
                     id="trailing-byte"),
        pytest.param(GOOD + b"\x00" * 21, r"21 bytes left, shorter than an entry",
                     id="trailing-21-bytes"),
        pytest.param(GOOD + b"\x00" * 22,
                     r"batch entry 1 \(byte 33\): total size 0 does not fit the 22 bytes left",
                     id="trailing-zeros"),
        pytest.param(GOOD + b"garbage-garbage-garbage-garbage",
                     r"batch entry 1 \(byte 33\): total size 1734439522 does not fit the 31 bytes",
                     id="trailing-text"),
        pytest.param(b"\x00\x00\x00",
                     r"batch entry 0 \(byte 0\): 3 bytes left, shorter than an entry",
                     id="three-bytes"),
    ],
)
def test_malformed_layouts(data: bytes, message: str) -> None:
    with pytest.raises(RemoteProtocolError, match=message):
        decode_batch(data)
