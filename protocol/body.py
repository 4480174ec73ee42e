"""msgpack helpers for request and response bodies."""

from __future__ import annotations

import zlib
from typing import Any

import msgpack

from protocol.errors import RemoteProtocolError


def pack_body(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack_body(body: bytes | None) -> Any:
    """Decode a msgpack body. Raises RemoteProtocolError."""
    if body is None:
        raise RemoteProtocolError("missing body")
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:
        raise RemoteProtocolError(f"undecodable body: {exc}") from exc


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
