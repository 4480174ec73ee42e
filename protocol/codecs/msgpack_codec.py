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

from protocol.codecs.base import GATHER_MIN, NotAMapError
from protocol.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from protocol.errors import RemoteProtocolError

# The first byte of every msgpack payload: a fixarray of seven elements.
FIRST_BYTE = 0x97
READ_SIZE = 256 * 1024

_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_BIN16 = struct.Struct(">BH")  # msgpack's bin 16 and bin 32 headers: type, length
_BIN32 = struct.Struct(">BI")
_UINT32_MAX = 2**32 - 1


def _unpackb(payload: bytes) -> Any:
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


class MsgpackBodyReader:
    """``BodyReader`` over msgpack's streaming Unpacker."""

    def __init__(self, stream: Any) -> None:
        self._reader = msgpack.Unpacker(stream, raw=False, strict_map_key=False,
                                        read_size=READ_SIZE, max_buffer_size=64 * 1024 * 1024)

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
        return self._call(self._reader.unpack)

    def skip(self) -> None:
        self._call(self._reader.skip)

    def at_end(self) -> bool:
        try:
            self._reader.skip()
        except msgpack.OutOfData:
            return True
        except (msgpack.UnpackException, ValueError, TypeError):
            return False
        return False


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
        try:
            obj = _unpackb(payload)
        except Exception as exc:  # msgpack raises several unrelated types
            raise RemoteProtocolError(f"undecodable msgpack: {exc}") from exc
        if not isinstance(obj, list) or len(obj) != 7:
            raise RemoteProtocolError("command must be a 7-element array")
        code, opaque, flag, remark, ext, body, version = obj
        if not (type(code) is int and type(opaque) is int and type(flag) is int):
            raise RemoteProtocolError("code, opaque and flag must be integers")
        if remark is not None and not isinstance(remark, str):
            raise RemoteProtocolError("remark must be a string or nil")
        if ext is None:
            ext = {}
        if not isinstance(ext, dict):
            raise RemoteProtocolError("ext_fields must be a map")
        if body is not None and not isinstance(body, bytes):
            raise RemoteProtocolError("body must be bytes or nil")
        if type(version) is not int:
            raise RemoteProtocolError("version must be an integer")
        return RemotingCommand(code, opaque, flag, remark, ext, body, version)

    def peek_request(self, payload: bytes) -> tuple[int, int] | None:
        try:
            obj = _unpackb(payload)
        except Exception:
            return None
        if isinstance(obj, list) and len(obj) >= 3:
            code, opaque, flag = obj[0], obj[1], obj[2]
            if type(code) is int and type(opaque) is int and type(flag) is int:
                if not flag & FLAG_RESPONSE and not flag & FLAG_ONEWAY:
                    return code, opaque
        return None

    def pack_body(self, obj: Any) -> bytes:
        body: bytes = msgpack.packb(obj, use_bin_type=True)
        return body

    def unpack_body(self, body: bytes | None) -> Any:
        if body is None:
            raise RemoteProtocolError("missing body")
        try:
            return _unpackb(body)
        except Exception as exc:
            raise RemoteProtocolError(f"undecodable body: {exc}") from exc

    def body_reader(self, stream: Any) -> MsgpackBodyReader:
        return MsgpackBodyReader(stream)


MSGPACK = MsgpackCodec()
