"""Body helpers: structured bodies in the default codec (msgpack), and zlib.

A handler answering a request packs its body with ``cmd.encode_body`` (the
request's codec); these are for commands a client of the project builds."""

from __future__ import annotations

import zlib
from typing import Any

from protocol.command import default_codec
from protocol.errors import RemoteProtocolError


def pack_body(obj: Any) -> bytes:
    return default_codec().pack_body(obj)


def unpack_body(body: bytes | None) -> Any:
    """Decode a body of the default codec. Raises RemoteProtocolError."""
    return default_codec().unpack_body(body)


def compress_body(body: bytes) -> bytes:
    """zlib (RocketMQ's compressed register body); see ``decompress_body``."""
    return zlib.compress(body, 1)


def decompress_body(body: bytes, max_size: int) -> bytes:
    """Inflate a compressed body, refusing more than ``max_size`` bytes out
    (a small body must not inflate without bound). Raises RemoteProtocolError."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, max_size)
    except zlib.error as exc:
        raise RemoteProtocolError(f"undecodable compressed body: {exc}") from exc
    if inflater.unconsumed_tail:
        raise RemoteProtocolError(f"compressed body inflates past {max_size} bytes")
    if not inflater.eof:
        raise RemoteProtocolError("compressed body is truncated")
    return out
