"""The HA wire codecs: byte-by-byte and random splits, round trips, bad frames."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.store.ha.transfer import (
    DEFAULT_MAX_TRANSFER_SIZE,
    REPORT,
    TRANSFER_HEADER,
    HAProtocolError,
    ReportDecoder,
    TransferDecoder,
    encode_report,
    encode_transfer,
)
from protocol.errors import LocalProtocolError, RemoteProtocolError

FRAMES = [(0, b""), (0, b"a"), (1, bytes(range(256)) * 3), (2**62, b""), (12345, b"x" * 70_000)]


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    parts, pos = [], 0
    for c in cuts:
        parts.append(stream[pos : pos + c])
        pos += c
    parts.append(stream[pos:])
    return parts


def test_wire_layout_is_rocketmqs() -> None:
    assert REPORT.size == 8 and TRANSFER_HEADER.size == 12
    assert encode_report(258) == b"\0" * 6 + b"\x01\x02"
    assert encode_transfer(1, b"ab") == struct.pack(">qi", 1, 2) + b"ab"
    assert len(encode_transfer(77)) == 12  # a heartbeat


def test_transfers_fed_one_byte_at_a_time() -> None:
    stream = b"".join(encode_transfer(o, d) for o, d in FRAMES)
    dec = TransferDecoder()
    out: list[tuple[int, bytes]] = []
    for i in range(len(stream)):
        out.extend(dec.feed(stream[i : i + 1]))
    assert out == FRAMES and dec.buffered == 0


def test_reports_fed_one_byte_at_a_time() -> None:
    offsets = [0, 1, 255, 2**40, 2**63 - 1]
    stream = b"".join(map(encode_report, offsets))
    dec = ReportDecoder()
    out: list[int] = []
    for i in range(len(stream)):
        out.extend(dec.feed(stream[i : i + 1]))
    assert out == offsets and dec.buffered == 0


frames_st = st.lists(
    st.tuples(st.integers(0, 2**63 - 1), st.binary(max_size=300)), max_size=12
)
cuts_st = st.lists(st.integers(0, 60), max_size=40)


@given(frames_st, cuts_st)
def test_transfers_any_split(frames: list[tuple[int, bytes]], cuts: list[int]) -> None:
    stream = b"".join(encode_transfer(o, d) for o, d in frames)
    dec = TransferDecoder(max_size=300)
    out = [f for part in split(stream, cuts) for f in dec.feed(part)]
    assert out == frames and dec.buffered == 0


@given(st.lists(st.integers(0, 2**63 - 1), max_size=20), cuts_st)
def test_reports_any_split(offsets: list[int], cuts: list[int]) -> None:
    stream = b"".join(map(encode_report, offsets))
    dec = ReportDecoder()
    out = [o for part in split(stream, cuts) for o in dec.feed(part)]
    assert out == offsets and dec.buffered == 0


def test_joined_frames_continue_one_another() -> None:
    frames = [(100, b"ab"), (102, b"cde"), (105, b""), (105, b"f"), (106, b"g"), (200, b"h"),
              (201, b"i")]
    dec = TransferDecoder()
    stream = b"".join(encode_transfer(o, d) for o, d in frames)
    # a heartbeat stays apart and ends a run; a gap starts a new one
    assert dec.feed_joined(stream) == [(100, b"abcde"), (105, b""), (105, b"fg"), (200, b"hi")]
    assert dec.buffered == 0


def _rejoined(pieces: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Frames with data joined where each starts at the end of the one before."""
    out: list[tuple[int, bytes]] = []
    for offset, data in pieces:
        if out and data and out[-1][1] and out[-1][0] + len(out[-1][1]) == offset:
            out[-1] = (out[-1][0], out[-1][1] + data)
        else:
            out.append((offset, data))
    return out


@given(st.lists(st.tuples(st.sampled_from([0, 1, 5]), st.binary(max_size=40)), max_size=12),
       cuts_st)
def test_joined_frames_hold_the_same_bytes_at_the_same_offsets(
        steps: list[tuple[int, bytes]], cuts: list[int]) -> None:
    frames, offset = [], 0
    for gap, data in steps:  # mostly contiguous, some gaps
        offset += gap if gap != 1 else 0
        frames.append((offset, data))
        offset += len(data)
    stream = b"".join(encode_transfer(o, d) for o, d in frames)
    dec = TransferDecoder(max_size=300)
    got = [f for part in split(stream, cuts) for f in dec.feed_joined(part)]
    assert all(isinstance(d, bytes) for _, d in got)
    assert _rejoined(got) == _rejoined(frames) and dec.buffered == 0


def test_a_partial_frame_waits_for_the_rest() -> None:
    dec = TransferDecoder()
    frame = encode_transfer(100, b"0123456789")
    assert dec.feed(frame[:11]) == [] and dec.buffered == 11
    assert dec.feed(frame[11:15]) == [] and dec.buffered == 15
    assert dec.feed(frame[15:] + encode_transfer(110)[:3]) == [(100, b"0123456789")]
    assert dec.buffered == 3
    assert dec.feed(encode_transfer(110)[3:]) == [(110, b"")]


def test_many_frames_in_one_feed_and_a_large_stream() -> None:
    frames = [(i * 1000, bytes([i % 256]) * 1000) for i in range(300)]
    dec = TransferDecoder()
    stream = b"".join(encode_transfer(o, d) for o, d in frames)
    out = []
    for part in split(stream, [70_001] * 5):  # leftovers past 64 KiB are compacted
        out.extend(dec.feed(part))
    assert out == frames and dec.buffered == 0


@pytest.mark.parametrize("header, reason", [
    (struct.pack(">qi", -1, 0), "negative offset"),
    (struct.pack(">qi", 0, -5), "negative size"),
    (struct.pack(">qi", 0, 1025), "exceeds 1024"),
    (struct.pack(">qi", -(2**63), 2**31 - 1), "negative offset"),
])
def test_bad_transfer_headers_are_refused(header: bytes, reason: str) -> None:
    dec = TransferDecoder(max_size=1024)
    ok = encode_transfer(7, b"fine")
    assert dec.feed(ok) == [(7, b"fine")]
    with pytest.raises(HAProtocolError, match=reason):
        dec.feed(header[:5])
        dec.feed(header[5:])
    # the stream is lost: the decoder stays refused
    with pytest.raises(HAProtocolError, match="already failed"):
        dec.feed(ok)


def test_an_oversize_frame_is_refused_on_its_header_alone() -> None:
    dec = TransferDecoder()
    with pytest.raises(RemoteProtocolError):  # no buffering of the announced data
        dec.feed(struct.pack(">qi", 0, DEFAULT_MAX_TRANSFER_SIZE + 1))
    assert issubclass(HAProtocolError, RemoteProtocolError)


def test_a_negative_report_is_refused() -> None:
    dec = ReportDecoder()
    assert dec.feed(encode_report(5) + struct.pack(">q", -1)[:4]) == [5]
    with pytest.raises(HAProtocolError, match="negative offset"):
        dec.feed(struct.pack(">q", -1)[4:])
    with pytest.raises(HAProtocolError):
        dec.feed(encode_report(6))


@given(st.binary(max_size=200), cuts_st)
def test_garbage_either_decodes_or_is_refused(garbage: bytes, cuts: list[int]) -> None:
    for dec in (TransferDecoder(max_size=64), ReportDecoder()):
        try:
            for part in split(garbage, cuts):
                for item in dec.feed(part):  # type: ignore[attr-defined]
                    if isinstance(item, tuple):
                        assert item[0] >= 0 and 0 <= len(item[1]) <= 64
                    else:
                        assert item >= 0
        except HAProtocolError:
            pass
        assert dec.buffered <= len(garbage)


def test_encoders_refuse_what_the_wire_cannot_carry() -> None:
    with pytest.raises(LocalProtocolError):
        encode_report(-1)
    with pytest.raises(LocalProtocolError):
        encode_transfer(-1, b"x")
