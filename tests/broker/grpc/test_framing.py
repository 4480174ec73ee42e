"""gRPC message framing, deadlines and status trailers, without sockets."""

from __future__ import annotations

import gzip
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.grpc.framing import (
    GrpcError,
    MessageDecoder,
    StatusCode,
    decode_message_header,
    encode_message,
    parse_timeout,
    status_trailers,
)


def frame(payload: bytes, flag: int = 0) -> bytes:
    return struct.pack(">BI", flag, len(payload)) + payload


def test_messages_fed_one_byte_at_a_time() -> None:
    payloads = [b"", b"a", b"hello" * 100, bytes(range(256))]
    wire = b"".join(encode_message(p) for p in payloads)
    decoder = MessageDecoder()
    out: list[bytes] = []
    for i in range(len(wire)):
        out += decoder.feed(wire[i:i + 1])
    decoder.finish()
    assert out == payloads


@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(0, 3000), max_size=6))
def test_any_split_gives_the_same_messages(payloads: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(encode_message(p) for p in payloads)
    points = sorted({min(c, len(wire)) for c in cuts} | {0, len(wire)})
    decoder = MessageDecoder()
    out: list[bytes] = []
    for a, b in zip(points, points[1:], strict=False):
        out += decoder.feed(wire[a:b])
    decoder.finish()
    assert out == payloads


def test_oversized_declared_length_refused_before_its_bytes_arrive() -> None:
    decoder = MessageDecoder(max_bytes=100)
    assert decoder.feed(encode_message(b"x" * 100)) == [b"x" * 100]
    with pytest.raises(GrpcError) as err:
        decoder.feed(struct.pack(">BI", 0, 101))  # the header alone
    assert err.value.code is StatusCode.RESOURCE_EXHAUSTED
    assert "101 bytes" in err.value.message


@pytest.mark.parametrize("flag", [2, 7, 255])
def test_bad_compression_flag(flag: int) -> None:
    with pytest.raises(GrpcError) as err:
        MessageDecoder().feed(frame(b"abc", flag))
    assert err.value.code is StatusCode.INTERNAL
    assert f"bad compression flag {flag}" in err.value.message


def test_compressed_message_needs_an_encoding() -> None:
    with pytest.raises(GrpcError, match="no grpc-encoding"):
        MessageDecoder().feed(frame(gzip.compress(b"abc"), 1))
    with pytest.raises(GrpcError, match="no grpc-encoding"):
        MessageDecoder(encoding="identity").feed(frame(gzip.compress(b"abc"), 1))


def test_gzip_message_inflated_and_bounded() -> None:
    decoder = MessageDecoder(max_bytes=1000, encoding="gzip")
    assert decoder.feed(frame(gzip.compress(b"abc" * 10), 1)) == [b"abc" * 10]
    bomb = gzip.compress(b"\0" * 100_000)  # small on the wire, large inflated
    assert len(bomb) < 1000
    with pytest.raises(GrpcError) as err:
        decoder.feed(frame(bomb, 1))
    assert err.value.code is StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(GrpcError, match="does not inflate"):
        MessageDecoder(encoding="gzip").feed(frame(b"not gzip", 1))
    with pytest.raises(GrpcError, match="cut short"):
        MessageDecoder(encoding="gzip").feed(frame(gzip.compress(b"abc" * 100)[:-12], 1))


def test_unknown_encoding_refused() -> None:
    with pytest.raises(GrpcError) as err:
        MessageDecoder(encoding="snappy")
    assert err.value.code is StatusCode.UNIMPLEMENTED


def test_body_ending_inside_a_message() -> None:
    decoder = MessageDecoder()
    assert decoder.feed(encode_message(b"abcdef")[:7]) == []
    with pytest.raises(GrpcError, match="ended inside a message"):
        decoder.finish()


@pytest.mark.parametrize("value,seconds", [
    ("1H", 3600.0), ("2M", 120.0), ("3S", 3.0), ("100m", 0.1), ("250u", 0.00025),
    ("99999999n", 0.099999999),
])
def test_grpc_timeout(value: str, seconds: float) -> None:
    assert parse_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "S", "10", "123456789S", "1x", "-1S", "1.5S", "١S"])
def test_bad_grpc_timeout(value: str) -> None:
    with pytest.raises(GrpcError, match="bad grpc-timeout"):
        parse_timeout(value)


def test_status_trailers_percent_encode_the_message() -> None:
    headers = dict(status_trailers(StatusCode.UNIMPLEMENTED, "not yet: 100% \u00e9\nnext"))
    assert headers[b"grpc-status"] == b"12"
    raw = headers[b"grpc-message"]
    assert raw.isascii() and b"\n" not in raw
    assert decode_message_header(raw.decode()) == "not yet: 100% \u00e9\nnext"
    assert dict(status_trailers(StatusCode.OK)) == {b"grpc-status": b"0"}
