"""RocketMQ's remoting wire format, as its official clients speak it.

A frame (after the 4-byte big-endian total length, protocol/frame.py):

    +-----------------------------------+----------------+------+
    | type << 24 | header length (4 BE) | header         | body |
    +-----------------------------------+----------------+------+

``type`` 0 is a JSON header, 1 RocketMQ's binary header:

- JSON: ``{"code", "extFields", "flag", "language", "opaque", "remark",
  "serializeTypeCurrentRPC", "version"}`` (the order fastjson writes them in).
- Binary: i16 code, i8 language, i16 version, i32 opaque, i32 flag,
  i32 length + UTF-8 remark, i32 length + entries of (i16 length + key,
  i32 length + value); all big-endian.

Header values are strings on this wire. Requests may carry numbers and
booleans in ``extFields`` (the C++ client sends ``queueId`` as a JSON number
and booleans as "0"/"1"); they are kept as they came and the header classes
read them (protocol/headers.py). Everything this side writes into
``extFields`` is a string. Structured bodies are JSON in both header types.
"""

from __future__ import annotations

import codecs
import json
import json.scanner
import re
import struct
import sys
from typing import Any

from protocol.codecs.base import (
    BODY_ENTRY,
    GATHER_MIN,
    MAX_EXT_FIELDS,
    MAX_HEADER_BYTES,
    READ_SIZE,
    UNKNOWN_LENGTH,
    BodyLimit,
    NotAMapError,
    refusal,
)
from protocol.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from protocol.errors import LocalProtocolError, MalformedRequestError, RemoteProtocolError

JSON_TYPE = 0
BINARY_TYPE = 1
# RocketMQ's LanguageCode, by its byte in the binary header.
LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP",
             "GO", "PHP", "OMS", "RUST")
LANGUAGE = "PYTHON"
MAX_HEADER = 0xFFFFFF

_WORD = struct.Struct(">I")
_BIN_FIXED = struct.Struct(">hbhii")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT16_MIN, _INT16_MAX = -(2**15), 2**15 - 1
# an integer header value sent as text: ASCII digits, an optional sign (what
# Java's Integer.parseInt takes), nothing Python's int() takes beyond that ("1_0")
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,19}")
# a JSON escape of a UTF-16 surrogate: the header may hold a lone one, which is no text
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# A JSON header is an object of scalars and its extFields object: two
# containers. One with more arrays and objects than this is refused before
# json.loads builds any, so a header costs what its bytes cost (a 16 MiB
# header of "[[],[],...]" built 5.6 million lists: 850 MiB, 3.9 s).
MAX_JSON_CONTAINERS = 8
# and no more values than its extFields and a dozen other keys (so a 256 KiB
# header cannot hold 64 Ki numbers or strings either)
MAX_JSON_COMMAS = MAX_EXT_FIELDS + 32
# a JSON string, escapes included (what hides brackets that are not structure)
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _text_fields(ext: dict[str, Any]) -> dict[str, str]:
    """``ext`` with every value a string, as RocketMQ's clients read them
    (booleans "true"/"false"); None values are left out."""
    out: dict[str, str] = {}
    for key, value in ext.items():
        if value is None:
            continue
        if isinstance(value, str):
            out[key] = value
        elif value is True:
            out[key] = "true"
        elif value is False:
            out[key] = "false"
        elif type(value) is int:
            out[key] = str(value)
        else:
            raise TypeError(f"header field {key!r} holds a {type(value).__name__}")
    return out


def _header_int(value: Any, name: str, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if type(value) is int:
        number = value
    elif isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        number = int(value.strip())
    else:
        raise RemoteProtocolError(f"header {name!r} must be an integer")
    if not _INT32_MIN <= number <= _INT32_MAX:
        raise RemoteProtocolError(f"header {name!r} must be a 32-bit integer, got {number}")
    return number


def _request_fields(ext: Any, request: tuple[int, int] | None) -> dict[str, Any]:
    """A request's ``extFields`` as they came: strings, numbers and booleans;
    null values are dropped; arrays and objects are refused."""
    if ext is None:
        return {}
    if not isinstance(ext, dict):
        raise refusal("extFields must be an object", request)
    if len(ext) > MAX_EXT_FIELDS:
        raise refusal(f"extFields holds {len(ext)} entries, more than {MAX_EXT_FIELDS}", request)
    out: dict[str, Any] = {}
    for key, value in ext.items():
        if value is None:
            continue
        if not isinstance(value, (str, int, float)):
            raise refusal(
                f"extFields value of {key[:64]!r} must be a string, number or boolean", request)
        out[key] = value
    return out


class _Header:
    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "ext")

    def __init__(self, code: int, language: str, version: int, opaque: int, flag: int,
                 remark: str | None, ext: dict[str, Any]) -> None:
        self.code, self.language, self.version = code, language, version
        self.opaque, self.flag, self.remark, self.ext = opaque, flag, remark, ext


def _json_shape(raw: bytes, max_containers: int = MAX_JSON_CONTAINERS,
                max_commas: int = MAX_JSON_COMMAS) -> str | None:
    """Why ``raw`` is refused before json.loads looks at it: more arrays and
    objects, or more commas (values), outside its strings than allowed; None
    if it is not. Brackets and commas are counted first (at least those
    outside strings); only a text whose strings hold many of them is
    scanned string by string, which stops at the most strings it can hold
    (a key and a value per value)."""
    containers = raw.count(b"[") + raw.count(b"{")
    commas = raw.count(b",")
    if containers > max_containers or commas > max_commas:
        max_strings = 2 * (max_commas + 1 + max_containers)
        for n, string in enumerate(_JSON_STRING.finditer(raw)):
            if n >= max_strings:
                return f"more than {max_strings} strings"
            at, end = string.span()
            containers -= raw.count(b"[", at, end) + raw.count(b"{", at, end)
            commas -= raw.count(b",", at, end)
    if containers > max_containers:
        return f"more than {max_containers} arrays and objects"
    if commas > max_commas:
        return f"more than {max_commas + 1} values"
    return None


def _json_body_shape(raw: bytes, max_containers: int, max_commas: int) -> str | None:
    """``_json_shape`` for a body, counting brackets and commas in its strings
    too: a body has too many strings to scan them one by one (cutting them
    out with re.sub took 80 ms and 35 MiB for 1 MiB of them), and the few
    commas a body's strings hold (an SQL filter's) are far from the limits."""
    containers = raw.count(b"[") + raw.count(b"{")
    if containers > max_containers:
        return f"more than {max_containers} arrays and objects"
    if raw.count(b",") > max_commas:
        return f"more than {max_commas + 1} values"
    return None


def _json_header(raw: bytes) -> _Header:
    refused = _json_shape(raw)
    if refused is not None:
        raise RemoteProtocolError(f"undecodable JSON header: {refused}")
    try:
        text, utf8 = raw.decode("utf-8"), True
    except UnicodeDecodeError:
        # a string that is not UTF-8 does not hide the code and opaque
        text, utf8 = raw.decode("utf-8", "replace"), False
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        if not utf8:
            raise RemoteProtocolError("JSON header is not UTF-8") from None
        raise RemoteProtocolError(f"undecodable JSON header: {exc}") from None
    if not isinstance(obj, dict):
        raise RemoteProtocolError("JSON header must be an object")
    code = _header_int(obj.get("code"), "code")
    opaque = _header_int(obj.get("opaque"), "opaque")
    flag = _header_int(obj.get("flag"), "flag", 0)
    request = None if flag & (FLAG_RESPONSE | FLAG_ONEWAY) else (code, opaque)
    try:
        if not utf8:
            raise RemoteProtocolError("JSON header is not UTF-8")
        remark = obj.get("remark")
        if remark is not None and not isinstance(remark, str):
            raise RemoteProtocolError("header 'remark' must be a string")
        language = obj.get("language")
        h = _Header(
            code=code,
            language=language if isinstance(language, str) else "OTHER",
            version=_header_int(obj.get("version"), "version", 0),
            opaque=opaque,
            flag=flag,
            remark=remark,
            ext=_request_fields(obj.get("extFields"), request),
        )
        if _SURROGATE_ESCAPE.search(text):
            _check_text(h)
    except MalformedRequestError:
        raise
    except RemoteProtocolError as exc:
        raise refusal(str(exc), request) from None
    return h


def _check_text(h: _Header) -> None:
    """RemoteProtocolError when a string of ``h`` holds a lone surrogate (a JSON
    escape such as \\ud800 with no pair): it is no Unicode text and could not
    be written back."""
    strings = [("remark", h.remark), ("language", h.language)]
    for key, value in h.ext.items():
        strings += [("extFields key", key), (f"extFields value of {key[:64]!r}", value)]
    for what, value in strings:
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise RemoteProtocolError(
                    f"{ascii(what)[1:-1]} holds a lone UTF-16 surrogate, not Unicode text") from None


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"{what} is not UTF-8") from exc


# The fixed part of a binary header, field by field: (name, size).
_BIN_FIELDS = (("code", 2), ("language", 1), ("version", 2), ("opaque", 4), ("flag", 4),
               ("remark length", 4))


def _binary_header(raw: bytes) -> _Header:
    end = len(raw)
    request: tuple[int, int] | None = None
    if end >= _BIN_FIXED.size:
        code, language, version, opaque, flag = _BIN_FIXED.unpack_from(raw)
        request = None if flag & (FLAG_RESPONSE | FLAG_ONEWAY) else (code, opaque)
    if end < _BIN_FIXED.size + 4:
        at = 0
        for field_name, size in _BIN_FIELDS:  # noqa: B007 - the first that does not fit
            if end < at + size:
                break
            at += size
        raise refusal(
            f"binary header of {end} bytes is truncated in its {field_name} (byte {at})", request)
    try:
        return _binary_rest(raw, code, language, version, opaque, flag, request)
    except MalformedRequestError:
        raise
    except RemoteProtocolError as exc:
        raise refusal(str(exc), request) from None


def _binary_rest(raw: bytes, code: int, language: int, version: int, opaque: int, flag: int,
                 request: tuple[int, int] | None) -> _Header:
    """The binary header past its fixed fields."""
    end = len(raw)
    pos = _BIN_FIXED.size
    (remark_len,) = _I32.unpack_from(raw, pos)
    pos += 4
    if remark_len < 0 or pos + remark_len > end:
        raise RemoteProtocolError(
            f"remark length {remark_len} runs past the header ({end - pos} bytes left)")
    remark = _utf8(raw[pos:pos + remark_len], "remark") if remark_len else None
    pos += remark_len
    if pos + 4 > end:
        raise RemoteProtocolError(
            f"binary header of {end} bytes is truncated in its extFields length (byte {pos})")
    (ext_len,) = _I32.unpack_from(raw, pos)
    pos += 4
    if ext_len < 0 or pos + ext_len != end:
        raise RemoteProtocolError(
            f"extFields length {ext_len} does not match the {end - pos} bytes left in the header")
    ext: dict[str, Any] = {}
    while pos < end:
        if len(ext) >= MAX_EXT_FIELDS:
            raise refusal(f"extFields holds more than {MAX_EXT_FIELDS} entries", request)
        if pos + 2 > end:
            raise RemoteProtocolError(
                f"extFields entry {len(ext)} is truncated in its key length (byte {pos})")
        (key_len,) = _I16.unpack_from(raw, pos)
        pos += 2
        if key_len < 0 or pos + key_len > end:
            raise RemoteProtocolError(
                f"extFields key length {key_len} runs past the header ({end - pos} bytes left)")
        key = _utf8(raw[pos:pos + key_len], "extFields key")
        pos += key_len
        if pos + 4 > end:
            raise RemoteProtocolError(
                f"extFields entry {key[:64]!r} is truncated in its value length (byte {pos})")
        (value_len,) = _I32.unpack_from(raw, pos)
        pos += 4
        if value_len < 0 or pos + value_len > end:
            raise RemoteProtocolError(
                f"extFields value length {value_len} of {key[:64]!r} runs past the header "
                f"({end - pos} bytes left)")
        ext[key] = _utf8(raw[pos:pos + value_len], f"extFields value of {key[:64]!r}")
        pos += value_len
    name = LANGUAGES[language] if 0 <= language < len(LANGUAGES) else "OTHER"
    return _Header(code, name, version, opaque, flag, remark, ext)


def _header_length(payload: bytes) -> tuple[int, int]:
    """(serialization type, header length) of a payload of at least 4 bytes,
    refused when the type is unknown or the header is past MAX_HEADER_BYTES."""
    (word,) = _WORD.unpack_from(payload)
    stype, header_len = word >> 24, word & MAX_HEADER
    if stype not in (JSON_TYPE, BINARY_TYPE):
        raise RemoteProtocolError(f"unknown serialization type {stype}")
    if header_len > MAX_HEADER_BYTES:
        request = None  # a binary header's code and opaque are at fixed places
        if stype == BINARY_TYPE and len(payload) >= 4 + _BIN_FIXED.size:
            code, _, _, opaque, flag = _BIN_FIXED.unpack_from(payload, 4)
            request = None if flag & (FLAG_RESPONSE | FLAG_ONEWAY) else (code, opaque)
        raise refusal(
            f"header length {header_len} is above the limit of {MAX_HEADER_BYTES} bytes", request)
    return stype, header_len


def _split(payload: bytes) -> tuple[int, bytes, bytes | None]:
    """(serialization type, header bytes, body or None) of a frame payload."""
    if len(payload) < 4:
        raise RemoteProtocolError(f"frame of {len(payload)} bytes has no header length")
    stype, header_len = _header_length(payload)
    if 4 + header_len > len(payload):
        raise RemoteProtocolError(
            f"header length {header_len} runs past the frame ({len(payload) - 4} bytes after it)")
    body = payload[4 + header_len:]
    return stype, payload[4:4 + header_len], (body or None)


# JsonBodyReader reads a JSON body a value at a time with the standard
# library's own (C) scanner, never the whole of it at once: a value is scanned
# only once a pattern, run over at most the limit's bytes, has found where it
# ends: scalars, or arrays and objects nested at most two deep, and their
# brackets and commas have been counted against the limit.
_BODY_STRING = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_BODY_ATOM = r'(?:[^\[\]{}"]++|' + _BODY_STRING + ")"
_BODY_FLAT = r"(?:\{" + _BODY_ATOM + r"*+\}|\[" + _BODY_ATOM + r"*+\])"
_BODY_VALUE = re.compile(
    r"\{(?:" + _BODY_ATOM + "|" + _BODY_FLAT + r")*+\}|\[(?:" + _BODY_ATOM + "|" + _BODY_FLAT
    + r")*+\]|" + _BODY_STRING + r'|[^\[\]{}",\s]++')
_BODY_SPACE = re.compile(r"[ \t\n\r]*")
_scan_once: Any = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
# What one look of the reader may need past its position, beyond a value or
# a run of whitespace of the limit's length: the two characters the value
# pattern may take past the limit (a string's quotes, a container's
# brackets), the one after a number that the scanner peeks at, and the four
# of "null" after whitespace.
_SLACK = 8


class _Open:
    """An array or object being read."""

    __slots__ = ("close", "entries", "after_key", "is_object")

    def __init__(self, is_object: bool) -> None:
        self.is_object = is_object
        self.close = "}" if is_object else "]"
        self.entries = 0
        self.after_key = False


class JsonBodyReader:
    """``BodyReader`` over a JSON body, pulled a value at a time: maps and
    arrays opened by read_map_header / read_array_header are walked entry by
    entry (``more``), and each value (``unpack``) is found, bounded by
    ``limit``, before the scanner builds it.

    A body read from a stream is never held whole: the reader holds a window
    of its text, the part not read yet of what it has taken. When less than
    one look's worth is left (``limit.max_bytes`` and ``_SLACK`` characters:
    a value, or a run of whitespace, as long as the limit allows), it takes
    ``read_size`` more bytes and decodes them (UTF-8, a character split
    between two reads kept for the next). A value or a run of whitespace
    longer than the limit is refused where it starts, so no look goes further
    and the window stays under ``max_window`` characters (BODY_ENTRY, 256 KiB
    reads: 278,536; at most four bytes a character, 1.1 MB). Positions in
    errors count characters (bytes, for a UTF-8 error) from the body's start.
    """

    def __init__(self, stream: Any, limit: BodyLimit = BODY_ENTRY,
                 read_size: int = READ_SIZE) -> None:
        """``stream`` is a file-like object of the body's bytes (its ``read``
        may return fewer bytes than asked, b"" only at its end), or its text
        already read and decoded (a str, held whole). The first window is
        read here."""
        self._limit = limit
        self._read_size = read_size
        self._look = limit.max_bytes + _SLACK
        # the position past which a look needs more of the stream (past the
        # end of a whole text: never)
        self._ample = sys.maxsize
        self._pos = 0  # in the window
        self._base = 0  # characters of the body before the window
        self._open: list[_Open] = []
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._taken = 0  # bytes read from the stream
        self._stream: Any
        if isinstance(stream, str):
            self._text, self._stream = stream, None
        else:
            self._text, self._stream = "", stream
            self._need(self._look)

    @property
    def window(self) -> int:
        """Characters of the body held now."""
        return len(self._text)

    @property
    def max_window(self) -> int:
        """The most characters a reader of a stream holds at once: one look
        left of the last window, and one read."""
        return self._look + self._read_size

    def _read(self) -> str:
        """The text of the stream's next read ("" at its end, where the stream
        is let go)."""
        chunk = self._stream.read(self._read_size)
        pending = len(self._decoder.getstate()[0])  # bytes of a split character
        try:
            text: str = self._decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            at = self._taken - pending + exc.start
            raise RemoteProtocolError(
                f"undecodable body: not UTF-8 ({exc.reason}) at byte {at}") from None
        self._taken += len(chunk)
        if not chunk:
            self._stream = None
        return text

    def _need(self, n: int) -> None:
        """Hold at least ``n`` characters from the position on, or all the
        body has left: the window becomes its unread part and as many reads
        as that takes (each adds at most ``read_size`` characters, so the
        window stays under n + read_size)."""
        if self._stream is None or len(self._text) - self._pos >= n:
            return
        pieces = [self._text[self._pos:]]
        self._text = ""
        self._base += self._pos
        self._pos = 0
        held = len(pieces[0])
        while held < n and self._stream is not None:
            piece = self._read()
            pieces.append(piece)
            held += len(piece)
        self._text = "".join(pieces)
        self._ample = len(self._text) - self._look if self._stream is not None else sys.maxsize

    def _fail(self, what: str) -> RemoteProtocolError:
        self._need(1)
        if self._pos >= len(self._text):
            return RemoteProtocolError("undecodable body: truncated")
        return RemoteProtocolError(f"undecodable body: {what} at char {self._base + self._pos}")

    def _space(self) -> None:
        """Pass whitespace, at most the limit's bytes of it; at least _SLACK
        characters are held past it (unless the body ends sooner)."""
        if self._pos > self._ample:
            self._need(self._look)
        most, at = self._limit.max_bytes, self._pos
        end = _BODY_SPACE.match(self._text, at, at + most + 1).end()  # type: ignore[union-attr]
        if end - at > most:
            raise self._fail(f"more than {most} bytes of whitespace")
        self._pos = end

    def _start(self) -> bool:
        """Move to the next value; whether it is an object's key."""
        self._space()
        if not self._open:
            return False
        top = self._open[-1]
        if not top.is_object:
            return False
        if not top.after_key:
            top.after_key = True
            return True
        if self._text.startswith(":", self._pos):
            self._pos += 1
            self._space()
            top.after_key = False
            return False
        raise self._fail("expected ':'")

    def more(self) -> bool:
        top = self._open[-1]
        self._space()
        text, at = self._text, self._pos
        if text.startswith(top.close, at):
            self._pos += 1
            self._open.pop()
            return False
        if top.entries:
            if not text.startswith(",", at):
                raise self._fail(f"expected ',' or '{top.close}'")
            self._pos += 1
        top.entries += 1
        return True

    def _container(self, kind: str) -> bool:
        """Open the array or object that comes next (False if it is null)."""
        self._start()
        text, at = self._text, self._pos
        if text.startswith("null", at):
            self._pos += 4
            return False
        if not text.startswith(kind, at):
            if kind == "{":
                self.unpack_value()
                raise NotAMapError("expected a map")
            raise self._fail("expected an array")
        self._pos += 1
        self._open.append(_Open(kind == "{"))
        return True

    def read_map_header(self) -> int | None:
        return UNKNOWN_LENGTH if self._container("{") else None

    def read_array_header(self) -> int:
        if not self._container("["):
            raise RemoteProtocolError("undecodable body: expected an array")
        return UNKNOWN_LENGTH

    def unpack_value(self) -> Any:
        limit = self._limit
        if self._pos > self._ample:
            self._need(self._look)
        text, at = self._text, self._pos
        found = _BODY_VALUE.match(text, at, at + limit.max_bytes + 2)
        too_long = f"a value nested more than two deep or longer than {limit.max_bytes} bytes"
        if found is None:
            raise self._fail(too_long)
        end = found.end()
        if text[at] in "[{":
            containers = text.count("[", at, end) + text.count("{", at, end)
            if containers > limit.max_containers or text.count(",", at, end) >= limit.max_values:
                raise self._fail(f"more than {limit.max_containers} arrays and objects or "
                                 f"{limit.max_values} values in one value")
        elif text[at] != '"' and end - at > limit.max_bytes:
            # a scalar the pattern cut at the limit: the scanner would read on
            raise self._fail(too_long)
        try:
            value, self._pos = _scan_once(text, at)
        except StopIteration:
            raise self._fail("not JSON") from None
        except json.JSONDecodeError as exc:
            raise self._fail(f"not JSON ({exc.msg}, char {self._base + exc.pos})") from None
        except (ValueError, RecursionError) as exc:
            raise self._fail(f"not JSON ({exc})") from None
        return value

    def unpack(self) -> Any:
        key = self._start()
        value = self.unpack_value()
        if key and type(value) is not str:
            raise self._fail("an object's key must be a string")
        return value

    def skip(self) -> None:
        self.unpack()

    def at_end(self) -> bool:
        self._space()
        return not self._open and self._pos == len(self._text) and self._stream is None


class RocketMQCodec:
    """One header type of RocketMQ's format. Decoding takes either type (a
    frame says which it is) and the command keeps the codec of its frame, so
    its response leaves the same way."""

    def __init__(self, serialize_type: int) -> None:
        self.serialize_type = serialize_type
        self.name = "rocketmq-json" if serialize_type == JSON_TYPE else "rocketmq-binary"

    def __repr__(self) -> str:
        return f"<codec {self.name}>"

    # ---- commands ------------------------------------------------------------

    def encode(self, cmd: RemotingCommand) -> bytes:
        body = cmd.body
        return self._head(cmd) + body if body else self._head(cmd)

    def encode_parts(self, cmd: RemotingCommand) -> list[bytes]:
        body = cmd.body
        if type(body) is not bytes or len(body) < GATHER_MIN:
            return [self.encode(cmd)]
        return [self._head(cmd), body]

    def _head(self, cmd: RemotingCommand) -> bytes:
        """The payload up to the body: the header's length and type, the header."""
        binary = self.serialize_type == BINARY_TYPE
        lo, hi = (_INT16_MIN, _INT16_MAX) if binary else (_INT32_MIN, _INT32_MAX)
        if not (lo <= cmd.code <= hi and lo <= cmd.version <= hi
                and _INT32_MIN <= cmd.opaque <= _INT32_MAX and _INT32_MIN <= cmd.flag <= _INT32_MAX):
            self._out_of_range(cmd, lo, hi)
        ext = _text_fields(cmd.ext_fields)
        if not binary:
            header = self._json(cmd, ext)
        else:
            header = self._binary(cmd, ext)
        if len(header) > MAX_HEADER:
            raise LocalProtocolError(f"header of {len(header)} bytes exceeds {MAX_HEADER}")
        return _WORD.pack((self.serialize_type << 24) | len(header)) + header

    def _out_of_range(self, cmd: RemotingCommand, lo: int, hi: int) -> None:
        """LocalProtocolError naming the field of ``cmd`` this header cannot hold."""
        for name, value, low, high in (("code", cmd.code, lo, hi),
                                       ("version", cmd.version, lo, hi),
                                       ("opaque", cmd.opaque, _INT32_MIN, _INT32_MAX),
                                       ("flag", cmd.flag, _INT32_MIN, _INT32_MAX)):
            if not low <= value <= high:
                raise LocalProtocolError(
                    f"{self.name} header {name} {value!r} is not an integer in {low}..{high}")

    @staticmethod
    def _json(cmd: RemotingCommand, ext: dict[str, str]) -> bytes:
        obj: dict[str, Any] = {"code": cmd.code}
        if ext:
            obj["extFields"] = ext
        obj["flag"] = cmd.flag
        obj["language"] = cmd.language or LANGUAGE
        obj["opaque"] = cmd.opaque
        if cmd.remark is not None:
            obj["remark"] = cmd.remark
        obj["serializeTypeCurrentRPC"] = "JSON"
        obj["version"] = cmd.version
        return _dumps(obj).encode()

    @staticmethod
    def _binary(cmd: RemotingCommand, ext: dict[str, str]) -> bytes:
        language = cmd.language or LANGUAGE
        code = LANGUAGES.index(language) if language in LANGUAGES else LANGUAGES.index("OTHER")
        parts = [_BIN_FIXED.pack(cmd.code, code, cmd.version, cmd.opaque, cmd.flag)]
        remark = cmd.remark.encode() if cmd.remark else b""
        parts += [_I32.pack(len(remark)), remark]
        entries = []
        for key, value in ext.items():
            k, v = key.encode(), value.encode()
            if len(k) > _INT16_MAX:
                raise LocalProtocolError(
                    f"header field name of {len(k)} bytes exceeds {_INT16_MAX}")
            entries += [_I16.pack(len(k)), k, _I32.pack(len(v)), v]
        fields = b"".join(entries)
        parts += [_I32.pack(len(fields)), fields]
        return b"".join(parts)

    def decode(self, payload: bytes) -> RemotingCommand:
        stype, raw, body = _split(payload)
        return self._command(stype, raw, body)

    @staticmethod
    def _command(stype: int, raw: bytes, body: bytes | None) -> RemotingCommand:
        if stype == JSON_TYPE:
            h, codec = _json_header(raw), ROCKETMQ_JSON
        else:
            h, codec = _binary_header(raw), ROCKETMQ_BINARY
        return RemotingCommand(h.code, h.opaque, h.flag, h.remark, h.ext, body, h.version,
                               codec=codec, language=h.language)

    def decode_header(self, prefix: bytes) -> RemotingCommand | None:
        if len(prefix) < 4:
            return None
        stype, header_len = _header_length(prefix)
        if len(prefix) < 4 + header_len:
            return None
        return self._command(stype, prefix[4:4 + header_len], None)

    def peek_request(self, payload: bytes) -> tuple[int, int] | None:
        try:
            cmd = self.decode(payload)
        except MalformedRequestError as exc:
            return exc.code, exc.opaque
        except RemoteProtocolError:
            return None
        if cmd.flag & (FLAG_RESPONSE | FLAG_ONEWAY):
            return None
        return cmd.code, cmd.opaque

    # ---- bodies --------------------------------------------------------------

    def pack_body(self, obj: Any) -> bytes:
        return _dumps(obj).encode()

    def unpack_body(self, body: bytes | None, limit: BodyLimit | None = None) -> Any:
        if body is None:
            raise RemoteProtocolError("missing body")
        if limit is not None:
            if len(body) > limit.max_bytes:
                raise RemoteProtocolError(
                    f"undecodable body: {len(body)} bytes, more than {limit.max_bytes}")
            refused = _json_body_shape(body, limit.max_containers, limit.max_values)
            if refused is not None:
                raise RemoteProtocolError(f"undecodable body: {refused}")
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise RemoteProtocolError(f"undecodable body: {exc}") from exc

    def body_reader(self, stream: Any, limit: BodyLimit = BODY_ENTRY) -> JsonBodyReader:
        return JsonBodyReader(stream, limit)


ROCKETMQ_JSON = RocketMQCodec(JSON_TYPE)
ROCKETMQ_BINARY = RocketMQCodec(BINARY_TYPE)
