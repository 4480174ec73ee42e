"""msgpack helpers for request and response bodies."""

from __future__ import annotations

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
