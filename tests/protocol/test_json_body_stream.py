"""The JSON body reader over a stream (protocol/codecs/rocketmq.py
JsonBodyReader) reads what it reads over the whole text, whatever the
chunking, while holding only a window of it: the unread rest of its last
reads, never more than ``max_window`` characters.

The reference is the same reader given the whole text at once (a str), as
the name server read a REGISTER_BROKER body before. Bodies are JSON
documents hypothesis draws (any whitespace, escapes, characters of one to
four UTF-8 bytes), some cut or with a byte put in or taken out; the stream
hands them out in pieces of drawn sizes, so a read ends inside a string, an
escape, a number, a multi-byte character or a run of whitespace.
"""

from __future__ import annotations

import io
import itertools
import json
import zlib
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from namesrv.processor import Inflating
from protocol.codecs.base import BODY_ENTRY, READ_SIZE, UNKNOWN_LENGTH, BodyLimit
from protocol.codecs.rocketmq import JsonBodyReader
from protocol.errors import RemoteProtocolError

KiB = 1024
# a limit small enough for hypothesis's values to cross it: values and runs
# of whitespace past it, and windows of a few dozen characters
SMALL = BodyLimit(max_bytes=64, max_containers=6, max_values=16, max_array=16)


class Pieces:
    """``data`` read as a stream that hands out pieces of the given sizes in
    turn (never more than asked), counting what it gave."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self._data = data
        self._sizes = itertools.cycle(sizes)
        self.taken = 0

    def read(self, size: int = -1) -> bytes:
        n = next(self._sizes)
        if size >= 0:
            n = min(n, size)
        piece = self._data[self.taken:self.taken + n]
        self.taken += len(piece)
        return piece


def transcript(reader: JsonBodyReader, ops: list[str], bound: int | None = None) -> list[Any]:
    """Walk the body with ``reader``, taking each value as ``ops`` says for
    its depth (a map, an array, a value, a skip; the last for any deeper),
    and list what it read: headers, keys, values, closes, and the end or the
    error it stopped at. With ``bound``, the window is checked against it
    after every call."""
    out: list[Any] = []

    def held() -> None:
        if bound is not None:
            assert reader.window <= bound, (reader.window, bound)

    def walk(depth: int) -> None:
        op = ops[min(depth, len(ops) - 1)]
        if op in ("map", "array"):
            n = reader.read_map_header() if op == "map" else reader.read_array_header()
            out.append((op, n))
            held()
            if n is None:
                return
            assert n == UNKNOWN_LENGTH
            while reader.more():
                held()
                if op == "map":
                    out.append(("key", reader.unpack()))
                    held()
                walk(depth + 1)
            out.append("close")
        elif op == "skip":
            reader.skip()
            out.append("skipped")
        else:
            out.append(("value", reader.unpack()))
        held()

    try:
        walk(0)
        out.append(("end", reader.at_end()))
    except RemoteProtocolError as exc:
        out.append((type(exc).__name__, str(exc)))
    held()
    return out


def whole(body: bytes, ops: list[str], limit: BodyLimit) -> list[Any]:
    """What the reader reads of ``body`` given its whole text (a byte that is
    no UTF-8 kept as a lone surrogate, so the walk goes on past it)."""
    return transcript(JsonBodyReader(body.decode(errors="surrogateescape"), limit), ops)


def streamed(body: bytes, ops: list[str], limit: BodyLimit, read_size: int,
             sizes: list[int]) -> tuple[list[Any], JsonBodyReader | None]:
    try:
        reader = JsonBodyReader(Pieces(body, sizes), limit, read_size)
    except RemoteProtocolError as exc:  # the first window is read at once
        return [(type(exc).__name__, str(exc))], None
    return transcript(reader, ops, reader.max_window), reader


def utf8_problem(body: bytes) -> str | None:
    """The error a reader gives for ``body``'s first byte that is no UTF-8."""
    try:
        body.decode()
    except UnicodeDecodeError as exc:
        return f"undecodable body: not UTF-8 ({exc.reason}) at byte {exc.start}"
    return None


def same(a: list[Any], b: list[Any]) -> bool:
    return repr(a) == repr(b)  # NaN reads as NaN on both sides


TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from('"\\/\b\f\n\r\t é€😀'),
               max_size=16)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=10)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A JSON document (most often an object) in any layout, sometimes cut
    or with a byte put in or taken out."""
    value = draw(st.dictionaries(TEXT, VALUES, max_size=8) if draw(st.integers(0, 3))
                 else VALUES)
    indent = draw(st.sampled_from([None, 0, 1, 3]))
    # runs of whitespace up to past SMALL's limit: a value after a long one
    # may start near the window's end
    space = st.text(" \t\n\r", max_size=80)
    separators = draw(st.sampled_from([None, (",", ":")]) | st.tuples(
        space.map(lambda s: "," + s), st.tuples(space, space).map(lambda s: s[0] + ":" + s[1])))
    text = json.dumps(value, indent=indent, separators=separators,
                      ensure_ascii=draw(st.booleans()))
    body = draw(space) + text + draw(space)
    raw = body.encode()
    change = draw(st.sampled_from(["none", "none", "cut", "insert", "delete"]))
    if change == "none" or not raw:
        return raw
    at = draw(st.integers(0, len(raw) - 1))
    if change == "cut":
        return raw[:at]
    if change == "delete":
        return raw[:at] + raw[at + 1:]
    return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at:]


# how to take a value at each depth: a map at the top, most often
OPS = st.tuples(st.sampled_from(["map", "map", "map", "array", "unpack", "skip"]),
                st.lists(st.sampled_from(["map", "array", "unpack", "unpack", "skip"]),
                         max_size=4)).map(lambda drawn: [drawn[0], *drawn[1]])


@settings(max_examples=300, deadline=None)
@given(body=bodies(), ops=OPS, limit=st.sampled_from([SMALL, BODY_ENTRY]), read_size=st.integers(1, 64),
       sizes=st.lists(st.integers(1, 64), min_size=1, max_size=8))
@example(body='{"k":"é😀€","n":12345678,"e":"\\u00e9\\ud83d\\ude00"}'.encode(),
         ops=["map", "unpack"], limit=SMALL, read_size=1, sizes=[1])
@example(body=b'{"a":1,"b":' + b" " * 100 + b"2}", ops=["map", "unpack"], limit=SMALL,
         read_size=7, sizes=[3])
@example(body=b'{"a":"\xc3"}', ops=["map", "unpack"], limit=SMALL, read_size=1, sizes=[1])
@example(body=b'{"a":' + b" " * 60 + b'"' + b"x" * 40 + b'","b":' + b"\n" * 64 + b"12345678901}",
         ops=["map", "unpack"], limit=SMALL, read_size=1, sizes=[1])  # a value after whitespace
def test_a_streamed_body_reads_as_its_whole_text(body: bytes, ops: list[str], limit: BodyLimit,
                                                 read_size: int, sizes: list[int]) -> None:
    """Read in any pieces, a body gives the same headers, keys, values, end
    and errors (with the same positions) as its whole text, and the window
    stays within max_window after every call. A byte that is no UTF-8 stops
    the stream where its window reaches it: what was read before is what the
    whole text gave, and the error names that byte."""
    expected = whole(body, ops, limit)
    got, reader = streamed(body, ops, limit, read_size, sizes)
    problem = utf8_problem(body)
    if problem is not None and got[-1] == ("RemoteProtocolError", problem):
        assert same(got[:-1], expected[:len(got) - 1]), (got, expected)
    else:
        assert same(got, expected), (got, expected)
    if reader is not None:
        assert reader.max_window == limit.max_bytes + 8 + read_size


def test_a_large_body_is_read_through_a_bounded_window() -> None:
    """4 MiB of topics read with the name server's limit and read size: the
    window never passes max_window (about 272 KiB), a sixteenth of the text."""
    table = {f"T{i}": {"topicName": f"T{i}", "perm": 6, "readQueueNums": 8, "filter": "é" * 20}
             for i in range(40_000)}
    body = json.dumps({"topicConfigTable": table, "dataVersion": {"counter": 1}},
                      ensure_ascii=False).encode()
    assert len(body) > 4 * 1024 * KiB
    stream = Pieces(body, [READ_SIZE])
    reader = JsonBodyReader(stream)
    assert reader.max_window == BODY_ENTRY.max_bytes + 8 + READ_SIZE
    got = transcript(reader, ["map", "map", "unpack"], reader.max_window)
    assert got[-1] == ("end", True)
    keys = [item[1] for item in got if item[0] == "key"]
    assert keys == ["topicConfigTable", *table, "dataVersion", "counter"]
    assert got[4] == ("value", table["T0"])
    assert stream.taken == len(body)


def test_a_value_longer_than_the_window_is_refused_where_it_starts() -> None:
    """A string, a number and a run of whitespace each longer than the limit
    (and the window) are refused by the per-value limit, after reading no
    more than one window of the stream."""
    for filler in (b'"' + b"x" * 100_000 + b'"', b"1." + b"5" * 100_000, b" " * 100_000 + b"1"):
        body = b'{"ok":1,"big":' + filler + b"}"
        stream = Pieces(body, [1000])
        reader = JsonBodyReader(stream, SMALL, read_size=1000)
        got = transcript(reader, ["map", "unpack"], reader.max_window)
        what = "whitespace" if filler[0] == 32 else "longer than 64 bytes"
        assert got[-1][0] == "RemoteProtocolError" and what in got[-1][1], got
        assert got[-1][1].endswith("at char 14"), got  # where the value starts
        assert got[:3] == [("map", UNKNOWN_LENGTH), ("key", "ok"), ("value", 1)]
        assert stream.taken <= reader.max_window
        assert same(got, whole(body, ["map", "unpack"], SMALL))


def test_a_number_longer_than_the_limit_is_refused_not_scanned_on() -> None:
    """The scanner reads a number past the pattern's cut (a float of 100,000
    digits parses): the reader refuses a scalar past the limit before
    scanning it, over a stream or a whole text alike."""
    for text in ('{"n":' + "9" * 65 + "}", '{"n":1.' + "5" * 100_000 + "}"):
        reader = JsonBodyReader(text, SMALL)
        assert reader.read_map_header() == UNKNOWN_LENGTH and reader.more()
        assert reader.unpack() == "n"
        try:
            reader.unpack()
        except RemoteProtocolError as exc:
            assert "longer than 64 bytes at char 5" in str(exc)
        else:
            raise AssertionError(f"{text[:20]}... read")
    reader = JsonBodyReader('{"n":' + "9" * 64 + "}", SMALL)  # at the limit: read
    assert reader.read_map_header() == UNKNOWN_LENGTH and reader.more()
    assert reader.unpack() == "n" and reader.unpack() == int("9" * 64)


def test_a_character_split_between_reads_is_decoded_whole() -> None:
    """Characters of two, three and four bytes cut at every byte between two
    reads; a character cut by the body's end, or a byte that is no UTF-8, is
    refused naming its byte."""
    text = '{"k":"aé€😀b","é€😀":["😀",1]}'
    body = text.encode()
    for cut in range(1, len(body)):
        stream = Pieces(body, [cut, len(body)])
        reader = JsonBodyReader(stream, SMALL, read_size=len(body))
        assert transcript(reader, ["map", "unpack"]) == [
            ("map", UNKNOWN_LENGTH), ("key", "k"), ("value", "aé€😀b"), ("key", "é€😀"),
            ("value", ["😀", 1]), "close", ("end", True)]
    for bad, at in ((body[:-3] + b"\xf0\x9f", len(body) - 3), (b'{"k":"\xff"}', 6),
                    (b'{"k":"\xe2\x82x"}', 6)):
        for size in (1, 2, 5, 64):
            got, _ = streamed(bad, ["map", "unpack"], SMALL, size, [size])
            assert got[-1] == ("RemoteProtocolError", utf8_problem(bad)), got
            assert got[-1][1].endswith(f"at byte {at}"), got


def test_an_inflating_stream_reads_as_plain_bytes() -> None:
    """The name server's stream (namesrv Inflating) hands out what zlib gives;
    the reader reads it as it reads the plain bytes."""
    body = json.dumps({"t": {f"T{i}": {"p": i, "s": "é" * (i % 7)} for i in range(3000)},
                       "x": {"a": [1, 2]}}).encode()
    plain = transcript(JsonBodyReader(io.BytesIO(body), BODY_ENTRY, 1000), ["map", "map", "unpack"])
    reader = JsonBodyReader(Inflating(zlib.compress(body), len(body)), BODY_ENTRY, 1000)
    assert transcript(reader, ["map", "map", "unpack"], reader.max_window) == plain
    assert plain[-1] == ("end", True)
