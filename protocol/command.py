"""RemotingCommand: one request or response on the wire.

Encoded as a msgpack array inside one frame:

    [code, opaque, flag, remark, ext_fields, body, version]

``flag`` bit 0 = response, bit 1 = oneway. ``ext_fields`` is the header: a map
of str to scalar. ``body`` is bytes or nil.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import msgpack

from protocol.errors import RemoteProtocolError

PROTOCOL_VERSION = 1
FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2
# A remark is for people: never longer than this, whatever a handler put in it.
MAX_REMARK = 1024

_opaques = itertools.count(1)
_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def next_opaque() -> int:
    return next(_opaques) & 0x7FFFFFFF


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, Any] = field(default_factory=dict)
    body: bytes | None = None
    version: int = PROTOCOL_VERSION

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, Any] | None = None,
        body: bytes | None = None,
        oneway: bool = False,
    ) -> RemotingCommand:
        return cls(
            code=int(code),
            opaque=next_opaque(),
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
        )

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, Any] | None = None,
        body: bytes | None = None,
    ) -> RemotingCommand:
        """Build the response to this request (same opaque); the remark is capped."""
        if remark is not None and len(remark) > MAX_REMARK:
            remark = cap_remark(remark)
        return RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
        )

    def encode(self) -> bytes:
        """The msgpack payload (without the frame length)."""
        return _packb(
            [
                self.code,
                self.opaque,
                self.flag,
                self.remark,
                self.ext_fields,
                self.body,
                self.version,
            ]
        )

    @classmethod
    def decode(cls, payload: bytes) -> RemotingCommand:
        """Decode one frame payload. Raises RemoteProtocolError on bad input."""
        try:
            obj = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        except Exception as exc:  # msgpack raises several unrelated types
            raise RemoteProtocolError(f"undecodable msgpack: {exc}") from exc
        return cls.from_obj(obj)

    @classmethod
    def from_obj(cls, obj: Any) -> RemotingCommand:
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
        return cls(code, opaque, flag, remark, ext, body, version)


def cap_remark(remark: str) -> str:
    """``remark`` cut to MAX_REMARK characters, saying how much was cut."""
    if len(remark) <= MAX_REMARK:
        return remark
    tail = f"... ({len(remark)} characters)"
    return remark[: MAX_REMARK - len(tail)] + tail


def peek_opaque(payload: bytes) -> tuple[int, int] | None:
    """Best effort (code, opaque) of a payload that failed to decode fully."""
    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception:
        return None
    if isinstance(obj, list) and len(obj) >= 3:
        code, opaque, flag = obj[0], obj[1], obj[2]
        if type(code) is int and type(opaque) is int and type(flag) is int:
            if not flag & FLAG_RESPONSE and not flag & FLAG_ONEWAY:
                return code, opaque
    return None
