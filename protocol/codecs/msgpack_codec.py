"""The project's own wire format: a RemotingCommand as one msgpack array.

    [code, opaque, flag, remark, ext_fields, body, version]

``flag`` bit 0 = response, bit 1 = oneway. ``ext_fields`` is the header: a map
of str to scalar. ``body`` is bytes or nil. Structured bodies are msgpack maps
with RocketMQ's camelCase keys.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from protocol.codecs.base import (
    BODY_ENTRY,
    GATHER_MIN,
    MAX_EXT_FIELDS,
    MAX_HEADER_BYTES,
    READ_SIZE,
    BodyLimit,
    NotAMapError,
    refusal,
)
from protocol.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from protocol.errors import MalformedRequestError, RemoteProtocolError
from protocol.names import shown

# The first byte of every msgpack payload: a fixarray of seven elements.
FIRST_BYTE = 0x97

_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_BIN16 = struct.Struct(">BH")  # msgpack's bin 16 and bin 32 headers: type, length
_BIN32 = struct.Struct(">BI")
_UINT32_MAX = 2**32 - 1


# the first chunk of a payload the header reader takes; more (up to
# MAX_HEADER_BYTES) if the header is longer
_FIRST_FEED = 4096
# msgpack's nil, and its bin 8, 16 and 32 headers by the size of their length
_NIL = 0xC0
_BIN_LENGTH = {0xC4: 1, 0xC5: 2, 0xC6: 4}
_SCALARS = (str, int, float, bool, bytes, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)
_KEY_TYPES = frozenset((str,))  # ext_fields is RocketMQ's map of strings to values
# A frame up to this size is unpacked whole by msgpack's C unpacker, with its
# limits; it builds at most one object per byte (64 Ki empty arrays: 4 MiB,
# about 3 ms), and is the fast path of small requests (3 us against 10 us
# element by element). A larger frame is read by _Reader.
SMALL_FRAME = 64 * 1024


def _unpack_small(payload: bytes) -> Any:
    return msgpack.unpackb(payload, raw=False, strict_map_key=False, max_array_len=7,
                           max_map_len=MAX_EXT_FIELDS, max_str_len=SMALL_FRAME,
                           max_bin_len=SMALL_FRAME, max_ext_len=0)


def _small_command(payload: bytes) -> RemotingCommand | None:
    """The command of a small frame, unpacked whole; None if anything about
    it is wrong (_Reader then says what)."""
    try:
        obj = _unpack_small(payload)
    except Exception:  # msgpack raises several unrelated types
        return None
    if type(obj) is not list or len(obj) != 7:
        return None
    code, opaque, flag, remark, ext, body, version = obj
    if not (type(code) is int and type(opaque) is int and type(flag) is int
            and type(version) is int):
        return None
    if remark is not None and type(remark) is not str:
        return None
    if body is not None and type(body) is not bytes:
        return None
    if ext is None:
        ext = {}
    elif type(ext) is not dict:
        return None
    elif ext and not (_KEY_TYPES.issuperset(map(type, ext))
                      and _SCALAR_TYPES.issuperset(map(type, ext.values()))):
        return None
    return RemotingCommand(code, opaque, flag, remark, ext, body, version)


def _unpackb(payload: bytes) -> Any:
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


class _Budget:
    """Counts the arrays and maps msgpack builds, and their elements, and
    stops it (ValueError) past a BodyLimit. msgpack calls it as each one is
    complete; no array or map may hold more than the values allowed."""

    __slots__ = ("containers", "values", "limit")

    def __init__(self, limit: BodyLimit) -> None:
        self.containers = 0
        self.values = 0
        self.limit = limit

    def took(self, obj: Any) -> Any:
        self.containers += 1
        self.values += len(obj)
        if self.containers > self.limit.max_containers or self.values > self.limit.max_values:
            raise ValueError(f"more than {self.limit.max_containers} arrays and maps or "
                             f"{self.limit.max_values} values")
        return obj


def _unpack_limited(body: bytes, limit: BodyLimit) -> Any:
    if len(body) > limit.max_bytes:
        raise ValueError(f"{len(body)} bytes, more than {limit.max_bytes}")
    budget = _Budget(limit)
    return msgpack.unpackb(body, raw=False, strict_map_key=False, max_array_len=limit.max_array,
                           max_map_len=limit.max_values, max_str_len=len(body),
                           max_bin_len=len(body), max_ext_len=len(body),
                           list_hook=budget.took, object_hook=budget.took)


class _NeedMore(Exception):
    """The header reader of a payload's prefix ran out of bytes."""


class _Reader:
    """Reads one command payload an element at a time, with msgpack's limits
    set so that nothing but scalars is built: the array of seven and the
    ext_fields map are read as headers, any other array or map that holds
    anything is refused before it is built. The part before the body is
    bounded (MAX_HEADER_BYTES, MAX_EXT_FIELDS); the body is cut out of the
    payload as is (one copy), never fed to the unpacker."""

    __slots__ = ("_payload", "_u", "_fed", "_request", "_prefix")

    def __init__(self, payload: bytes, prefix: bool = False) -> None:
        """``prefix``: ``payload`` is the start of a payload; running out of
        it before the header ends raises _NeedMore (head() only)."""
        self._payload = payload
        self._prefix = prefix
        self._u = msgpack.Unpacker(
            None, raw=False, strict_map_key=False, max_buffer_size=MAX_HEADER_BYTES,
            max_str_len=MAX_HEADER_BYTES, max_bin_len=MAX_HEADER_BYTES, max_array_len=0,
            max_map_len=0, max_ext_len=0)
        self._fed = min(len(payload), _FIRST_FEED)
        self._u.feed(memoryview(payload)[:self._fed])
        # (code, opaque) once read, if it is a request that expects an answer
        self._request: tuple[int, int] | None = None

    def _refuse(self, message: str) -> RemoteProtocolError:
        return refusal(message, self._request)

    def _next(self, read: Any, what: str) -> Any:
        """``read()`` of the unpacker, fed more of the header if it needs it."""
        u = self._u
        while True:
            try:
                return read()
            except msgpack.OutOfData:
                total = len(self._payload)
                if self._fed >= total:
                    if self._prefix:
                        raise _NeedMore from None
                    raise RemoteProtocolError(
                        f"undecodable msgpack: truncated in its {what}") from None
                if self._fed >= MAX_HEADER_BYTES:
                    raise self._refuse(
                        f"the header (all but the body) is longer than {MAX_HEADER_BYTES} "
                        f"bytes, in its {what}") from None
                more = min(total, MAX_HEADER_BYTES, 8 * self._fed)
                u.feed(memoryview(self._payload)[self._fed:more])
                self._fed = more
            except ValueError as exc:  # a limit, bad UTF-8, an unknown byte
                text = str(exc)
                if "exceeds max_" in text:  # answered: the request is readable
                    raise self._refuse(f"{what} too large or not a scalar: {text}") from None
                raise RemoteProtocolError(f"undecodable msgpack in its {what}: {text}") from None
            except TypeError as exc:  # an unhashable (empty) array as a key
                raise self._refuse(f"undecodable msgpack in its {what}: {exc}") from None

    def quick(self) -> RemotingCommand | None:
        """``command()`` without its care, for a well-formed frame whose header
        lies in the first chunk fed (a large send's): the same reads, with the
        same limits, straight; None at the first thing amiss."""
        u = self._u
        payload = self._payload
        try:
            if u.read_array_header() != 7:
                return None
            code, opaque, flag, remark = u.unpack(), u.unpack(), u.unpack(), u.unpack()
            if not (type(code) is int and type(opaque) is int and type(flag) is int
                    and (remark is None or type(remark) is str)):
                return None
            kind = payload[u.tell()]
            if kind & 0xF0 != 0x80 and kind not in (0xDE, 0xDF):
                return None
            entries = u.read_map_header()
            if entries > MAX_EXT_FIELDS:
                return None
            unpack = u.unpack
            ext = {unpack(): unpack() for _ in range(entries)}
            if len(ext) != entries or not _KEY_TYPES.issuperset(map(type, ext)) \
                    or not _SCALAR_TYPES.issuperset(map(type, ext.values())):
                return None
            body, end = self._body(u.tell())
            version = msgpack.unpackb(memoryview(payload)[end:], max_str_len=0, max_bin_len=0,
                                      max_array_len=0, max_map_len=0, max_ext_len=0)
        except Exception:  # msgpack's several types, ours
            return None
        if type(version) is not int:
            return None
        return RemotingCommand(code, opaque, flag, remark, ext, body, version)

    def head(self) -> RemotingCommand:
        """The command up to its body: code, opaque, flag, remark and
        ext_fields (body None, version the default)."""
        u = self._u
        if not self._payload or self._payload[0] & 0xF0 != 0x90 and self._payload[0] not in (
                0xDC, 0xDD):
            raise RemoteProtocolError("command must be a 7-element array")
        if self._next(u.read_array_header, "command array") != 7:
            raise RemoteProtocolError("command must be a 7-element array")
        code = self._next(u.unpack, "code")
        opaque = self._next(u.unpack, "opaque")
        flag = self._next(u.unpack, "flag")
        if not (type(code) is int and type(opaque) is int and type(flag) is int):
            raise RemoteProtocolError("code, opaque and flag must be integers")
        if not flag & (FLAG_RESPONSE | FLAG_ONEWAY):
            self._request = (code, opaque)
        remark = self._next(u.unpack, "remark")
        if remark is not None and not isinstance(remark, str):
            raise self._refuse("remark must be a string or nil")
        return RemotingCommand(code, opaque, flag, remark, self._ext_fields())

    def command(self) -> RemotingCommand:
        cmd = self.head()
        cmd.body, end = self._body(self._u.tell())
        try:
            version = msgpack.unpackb(memoryview(self._payload)[end:], max_str_len=0,
                                      max_bin_len=0, max_array_len=0, max_map_len=0,
                                      max_ext_len=0)
        except (ValueError, msgpack.UnpackException) as exc:
            raise RemoteProtocolError(f"undecodable msgpack in its version: {exc}") from None
        if type(version) is not int:
            raise self._refuse("version must be an integer")
        cmd.version = version
        return cmd

    def _ext_fields(self) -> dict[str, Any]:
        u = self._u
        at = u.tell()
        kind = self._payload[at] if at < len(self._payload) else -1
        if kind == -1 and self._prefix:
            raise _NeedMore
        if kind == _NIL:
            self._next(u.skip, "ext_fields")
            return {}
        if kind & 0xF0 != 0x80 and kind not in (0xDE, 0xDF):
            if kind == -1:
                raise RemoteProtocolError("undecodable msgpack: truncated in its ext_fields")
            raise self._refuse("ext_fields must be a map")
        entries = self._next(u.read_map_header, "ext_fields")
        if entries > MAX_EXT_FIELDS:
            raise self._refuse(f"ext_fields holds {entries} entries, more than {MAX_EXT_FIELDS}")
        ext: dict[str, Any] = {}
        for _ in range(entries):
            key = self._next(u.unpack, "ext_fields")
            if type(key) not in _KEY_TYPES:  # (a map as a key could not even be one)
                raise self._refuse(f"ext_fields keys must be strings, not {type(key).__name__}")
            value = self._next(u.unpack, f"ext_fields value of {shown(str(key), 64)}")
            if type(value) not in _SCALAR_TYPES:
                raise self._refuse(f"ext_fields value of {shown(str(key), 64)} must be a "
                                   "scalar")
            ext[key] = value
        return ext

    def _body(self, at: int) -> tuple[bytes | None, int]:
        """The body at ``at`` (cut from the payload) and where it ends."""
        payload = self._payload
        if at >= len(payload):
            raise RemoteProtocolError("undecodable msgpack: truncated in its body")
        kind = payload[at]
        if kind == _NIL:
            return None, at + 1
        width = _BIN_LENGTH.get(kind)
        if width is None:
            raise self._refuse("body must be bytes or nil")
        start = at + 1 + width
        size = int.from_bytes(payload[at + 1:start], "big")
        end = start + size
        if start > len(payload) or end > len(payload):
            raise RemoteProtocolError("undecodable msgpack: truncated in its body")
        return payload[start:end], end


class MsgpackBodyReader:
    """``BodyReader`` over msgpack's streaming Unpacker. Each value is read
    within ``BODY_ENTRY``: msgpack's limits refuse a long array, map or string
    before it is allocated, and a budget (reset per value) refuses a value past
    its arrays and maps as each one is complete. Map and array headers
    (read_map_header, read_array_header) are not limited: a register body's
    topic table is read that way, an entry at a time."""

    def __init__(self, stream: Any, limit: BodyLimit = BODY_ENTRY) -> None:
        self._budget = _Budget(limit)
        took = self._budget.took
        self._reader = msgpack.Unpacker(
            stream, raw=False, strict_map_key=False, read_size=READ_SIZE,
            max_buffer_size=64 * 1024 * 1024, max_array_len=limit.max_array,
            max_map_len=limit.max_values, max_str_len=limit.max_bytes,
            max_bin_len=limit.max_bytes, max_ext_len=0, list_hook=took, object_hook=took)

    def _call(self, fn: Any) -> Any:
        try:
            return fn()
        except msgpack.OutOfData as exc:
            raise RemoteProtocolError("undecodable body: truncated") from exc
        except (msgpack.UnpackException, ValueError, TypeError) as exc:
            raise RemoteProtocolError(f"undecodable body: {exc}") from exc

    def read_map_header(self) -> int | None:
        try:
            n: int = self._reader.read_map_header()
            return n
        except msgpack.OutOfData as exc:
            raise RemoteProtocolError("undecodable body: truncated") from exc
        except ValueError:
            pass
        if self._call(self._reader.unpack) is not None:
            raise NotAMapError("expected a map")
        return None

    def unpack(self) -> Any:
        self._budget.containers = self._budget.values = 0
        return self._call(self._reader.unpack)

    def read_array_header(self) -> int:
        n: int = self._call(self._reader.read_array_header)
        return n

    def more(self) -> bool:
        raise RemoteProtocolError("msgpack maps and arrays have known lengths")

    def skip(self) -> None:
        # msgpack's own skip ignores its limits (a declared length of 16
        # million is walked): read the value within them, and drop it
        self.unpack()

    def at_end(self) -> bool:
        # one more byte, not one more value: a value after the body may be
        # anything, and skipping it would walk it whole
        return not self._call(lambda: self._reader.read_bytes(1))


class MsgpackCodec:
    name = "msgpack"

    def encode(self, cmd: RemotingCommand) -> bytes:
        return _packb([cmd.code, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields, cmd.body,
                       cmd.version])

    def encode_parts(self, cmd: RemotingCommand) -> list[bytes]:
        body = cmd.body
        if type(body) is not bytes or not GATHER_MIN <= len(body) <= _UINT32_MAX:
            return [self.encode(cmd)]
        # the first five elements as an array of five, made an array of seven;
        # then the body's bin header (as msgpack writes it), the body, the version
        n = len(body)
        fields = _packb([cmd.code, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields])
        head = _BIN16.pack(0xC5, n) if n <= 0xFFFF else _BIN32.pack(0xC6, n)
        return [b"\x97" + fields[1:] + head, body, _packb(cmd.version)]

    def decode(self, payload: bytes) -> RemotingCommand:
        if len(payload) <= SMALL_FRAME:
            cmd = _small_command(payload)
            if cmd is not None:
                return cmd
        else:
            cmd = _Reader(payload).quick()
            if cmd is not None:
                return cmd
        # refused, or a header past the first chunk: the bounded reader, element
        # by element, says what is wrong (and the request to answer when it can)
        return _Reader(payload).command()

    def decode_header(self, prefix: bytes) -> RemotingCommand | None:
        if not prefix:
            return None
        try:
            return _Reader(prefix, prefix=True).head()
        except _NeedMore:
            return None

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

    def pack_body(self, obj: Any) -> bytes:
        body: bytes = msgpack.packb(obj, use_bin_type=True)
        return body

    def unpack_body(self, body: bytes | None, limit: BodyLimit | None = None) -> Any:
        if body is None:
            raise RemoteProtocolError("missing body")
        try:
            if limit is None:
                return _unpackb(body)
            return _unpack_limited(body, limit)
        except Exception as exc:
            raise RemoteProtocolError(f"undecodable body: {exc}") from exc

    def body_reader(self, stream: Any, limit: BodyLimit = BODY_ENTRY) -> MsgpackBodyReader:
        return MsgpackBodyReader(stream, limit)


MSGPACK = MsgpackCodec()
