"""Length-prefixed frames: 4-byte big-endian unsigned length N, then N bytes.

    +----------------+---------------------------+
    | length (4, BE) | payload (length bytes)    |
    +----------------+---------------------------+

Sans-IO, like h11: ``FrameDecoder.feed(data)`` takes any split of the byte
stream and returns every complete payload it now holds.
"""

from __future__ import annotations

import struct

from protocol.errors import FrameTooLargeError, LocalProtocolError

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
FRAME_HEADER = struct.Struct(">I")
_HEADER_SIZE = FRAME_HEADER.size


def encode_frame(payload: bytes, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> bytes:
    """Prefix ``payload`` with its length. Raises LocalProtocolError if too large."""
    if len(payload) > max_frame_size:
        raise LocalProtocolError(f"frame of {len(payload)} bytes exceeds {max_frame_size}")
    return FRAME_HEADER.pack(len(payload)) + payload


class FrameDecoder:
    """Incremental frame decoder.

    Raises FrameTooLargeError as soon as a header declares a length above
    ``max_frame_size``; the decoder is then unusable (the stream is lost).
    """

    __slots__ = ("_buf", "_pos", "max_frame_size", "_broken")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.max_frame_size = max_frame_size
        self._broken = False

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a complete frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        if self._broken:
            raise FrameTooLargeError("decoder already saw an oversize frame")
        buf = self._buf
        buf += data
        pos = self._pos
        end = len(buf)
        frames: list[bytes] = []
        unpack_from = FRAME_HEADER.unpack_from
        while end - pos >= _HEADER_SIZE:
            (length,) = unpack_from(buf, pos)
            if length > self.max_frame_size:
                self._broken = True
                raise FrameTooLargeError(
                    f"declared frame length {length} exceeds {self.max_frame_size}"
                )
            stop = pos + _HEADER_SIZE + length
            if stop > end:
                break
            with memoryview(buf) as view:  # one copy (a bytearray slice would be two)
                frames.append(bytes(view[pos + _HEADER_SIZE : stop]))
            pos = stop
        if pos == end:
            buf.clear()
            pos = 0
        elif pos > 65536:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return frames
