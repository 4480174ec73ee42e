"""RocketMQ's batch body (SEND_BATCH_MESSAGE): the messages one after another.

Each message (``MessageDecoder.encodeMessage`` in RocketMQ's clients):

    total size (i32) | magic code (i32, 0) | body CRC (i32, 0) | flag (i32)
    | body length (i32) | body | properties length (i16) | properties (UTF-8)

all big-endian; total size counts the whole entry. The header of the request
names the topic and queue of every message.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

from protocol.errors import RemoteProtocolError
from protocol.speedups import compiled

# an entry: TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODY length; body; properties length; properties
ENTRY_HEAD = struct.Struct(">iiiii")
PROPERTIES_LENGTH = struct.Struct(">h")
ENTRY_OVERHEAD = ENTRY_HEAD.size + PROPERTIES_LENGTH.size
MAX_PROPERTIES = 32767
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def encode_batch(items: Iterable[tuple[int, bytes, str]]) -> bytes:
    """The body of (flag, body, properties) messages. ValueError when
    properties are longer than 32,767 bytes, a flag is no 32-bit integer or an
    entry would pass 2 GiB."""
    parts: list[bytes] = []
    pack, pack_props = ENTRY_HEAD.pack, PROPERTIES_LENGTH.pack
    for flag, body, properties in items:
        props = properties.encode()
        if len(props) > MAX_PROPERTIES:
            raise ValueError(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES}")
        if not _INT32_MIN <= flag <= _INT32_MAX:
            raise ValueError(f"flag {flag} is not a 32-bit integer")
        size = ENTRY_OVERHEAD + len(body) + len(props)
        if size > _INT32_MAX:
            raise ValueError(f"batch entry of {size} bytes exceeds {_INT32_MAX}")
        parts += [pack(size, 0, 0, flag, len(body)), body, pack_props(len(props)), props]
    return b"".join(parts)


def decode_batch(data: bytes) -> list[tuple[int, bytes, str]]:
    """The (flag, body, properties) of each message of a batch body. Raises
    RemoteProtocolError, naming the entry, when the layout does not hold.

    Where ``protocol/batch_kernel.py`` is compiled (deploy/speedups.py), a
    ``bytes`` body is walked by it; it gives None for a bad layout, and the
    loop below then says what is wrong."""
    if _KERNEL is not None and type(data) is bytes:
        items: list[tuple[int, bytes, str]] | None = _KERNEL(data)
        if items is not None:
            return items
    return decode_batch_loop(data)


def decode_batch_loop(data: bytes) -> list[tuple[int, bytes, str]]:
    """``decode_batch`` in Python: the reference the compiled walk is compared with."""
    out: list[tuple[int, bytes, str]] = []
    append = out.append
    end = len(data)
    pos = 0
    unpack, unpack_props = ENTRY_HEAD.unpack_from, PROPERTIES_LENGTH.unpack_from
    fixed, overhead = ENTRY_HEAD.size, ENTRY_OVERHEAD
    while pos < end:
        left = end - pos
        if left < overhead:
            raise _bad(out, pos, f"{left} bytes left, shorter than an entry")
        size, _magic, _crc, flag, body_len = unpack(data, pos)
        if size < overhead or size > left:
            raise _bad(out, pos, f"total size {size} does not fit the {left} bytes left")
        if body_len < 0 or overhead + body_len > size:
            raise _bad(out, pos, f"body length {body_len} runs past the entry")
        at = pos + fixed + body_len
        (props_len,) = unpack_props(data, at)
        stop = pos + size
        if props_len < 0 or at + 2 + props_len != stop:
            raise _bad(out, pos, f"properties length {props_len} does not match the entry's "
                                 f"total size {size}")
        try:
            props = data[at + 2:stop].decode()
        except UnicodeDecodeError:
            raise _bad(out, pos, "properties are not UTF-8") from None
        append((flag, data[pos + fixed:at], props))
        pos = stop
    return out


def _bad(out: list[tuple[int, bytes, str]], pos: int, what: str) -> RemoteProtocolError:
    return RemoteProtocolError(f"batch entry {len(out)} (byte {pos}): {what}")


_KERNEL = compiled("protocol._batch_kernel_c", Path(__file__).with_name("batch_kernel.py"),
                   "decode_batch")
# batch_kernel.encode_messages compiled, or None: the producer runs its own loop
ENCODE_MESSAGES = compiled("protocol._batch_kernel_c",
                           Path(__file__).with_name("batch_kernel.py"), "encode_messages")
