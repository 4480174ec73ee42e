"""RemotingCommand: one request or response on the wire.

How a command becomes bytes is its codec's business (protocol/codecs/): the
project's msgpack array by default, or RocketMQ's remoting format for the
commands of a connection that spoke it first. ``flag`` bit 0 = response,
bit 1 = oneway. ``ext_fields`` is the header: a map of str to scalar. ``body``
is bytes or None.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from protocol.codecs.base import Codec

PROTOCOL_VERSION = 1
FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2
# A remark is for people: never longer than this, whatever a handler put in it.
MAX_REMARK = 1024

_opaques = itertools.count(1)


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
    # the codec it travels in (None: the default, msgpack) and, for RocketMQ's
    # format, the language its sender named
    codec: Codec | None = field(default=None, repr=False, compare=False)
    language: str | None = field(default=None, repr=False, compare=False)

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
            codec=self.codec,
        )

    @property
    def wire_codec(self) -> Codec:
        """The codec this command travels in."""
        return self.codec if self.codec is not None else default_codec()

    def encode_body(self, obj: Any) -> bytes:
        """A structured body for this command (or its response), in its codec."""
        return self.wire_codec.pack_body(obj)

    def decode_body(self) -> Any:
        """This command's structured body. A request's is decoded within
        REQUEST_BODY's limits (what a daemon reads in its event loop, perhaps
        before the ACL has checked its signature); a response's as it is.
        Raises RemoteProtocolError."""
        if self.flag & FLAG_RESPONSE:
            return self.wire_codec.unpack_body(self.body)
        from protocol.codecs.base import REQUEST_BODY

        return self.wire_codec.unpack_body(self.body, REQUEST_BODY)

    def encode(self) -> bytes:
        """The frame payload (without the frame length), in this command's codec."""
        return self.wire_codec.encode(self)

    def encode_parts(self) -> list[bytes]:
        """``encode()`` as pieces to send in order (a large body is one, uncopied)."""
        return self.wire_codec.encode_parts(self)

    @classmethod
    def decode(cls, payload: bytes) -> RemotingCommand:
        """Decode one msgpack frame payload. Raises RemoteProtocolError on bad input."""
        return default_codec().decode(payload)


_default: Codec | None = None


def default_codec() -> Codec:
    """The project's own codec (msgpack), imported on first use: the codec
    modules import this one."""
    global _default
    if _default is None:
        from protocol.codecs.msgpack_codec import MSGPACK

        _default = MSGPACK
    return _default


def cap_remark(remark: str) -> str:
    """``remark`` cut to MAX_REMARK characters, saying how much was cut."""
    if len(remark) <= MAX_REMARK:
        return remark
    tail = f"... ({len(remark)} characters)"
    return remark[: MAX_REMARK - len(tail)] + tail


def peek_opaque(payload: bytes) -> tuple[int, int] | None:
    """Best effort (code, opaque) of a msgpack request payload that failed to decode."""
    return default_codec().peek_request(payload)
