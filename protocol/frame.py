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
# the shortest unfinished tail of a fed chunk kept as a view of the chunk
_VIEW_MIN = 64 * 1024


def encode_frame(payload: bytes, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> bytes:
    """Prefix ``payload`` with its length. Raises LocalProtocolError if too large."""
    if len(payload) > max_frame_size:
        raise LocalProtocolError(f"frame of {len(payload)} bytes exceeds {max_frame_size}")
    return FRAME_HEADER.pack(len(payload)) + payload


def frame_parts(parts: list[bytes], max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
                ) -> list[bytes | memoryview]:
    """``encode_frame`` of the pieces of one payload (``Codec.encode_parts``),
    still in pieces: the length goes in front of the first. Raises
    LocalProtocolError if too large."""
    size = sum(map(len, parts))
    if size > max_frame_size:
        raise LocalProtocolError(f"frame of {size} bytes exceeds {max_frame_size}")
    return [FRAME_HEADER.pack(size) + parts[0], *parts[1:]]


def unsent(pieces: list[bytes | memoryview], sent: int) -> list[bytes | memoryview]:
    """What is left of ``pieces`` once their first ``sent`` bytes went out (a
    piece cut short becomes a view of its rest)."""
    for i, piece in enumerate(pieces):
        n = len(piece)
        if sent < n:
            rest = pieces[i:]
            if sent:
                rest[0] = memoryview(piece)[sent:]
            return rest
        sent -= n
    return []


class FrameDecoder:
    """Incremental frame decoder.

    Raises FrameTooLargeError as soon as a header declares a length above
    ``max_frame_size``; the decoder is then unusable (the stream is lost).

    Each payload is copied once: a frame that lies within one fed chunk is
    cut out of it; one that spans chunks is joined from its pieces when its
    last byte arrives. A chunk's unfinished tail is kept as a view of the
    chunk when the chunk is ``bytes`` and the tail is at least 64 KiB and at
    least half of it (so what is held stays under twice ``buffered``), and
    copied otherwise.
    """

    __slots__ = ("_parts", "_held", "_need", "max_frame_size", "_broken")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._parts: list[bytes | memoryview] = []  # an unfinished frame, header first
        self._held = 0  # their bytes
        self._need = 0  # that frame's whole size (header included) once its header is in
        self.max_frame_size = max_frame_size
        self._broken = False

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a complete frame."""
        return self._held

    @property
    def missing(self) -> int:
        """Bytes still to come of the frame held in part (of its length
        prefix, if that is not whole yet); 0 if none is held."""
        if not self._held:
            return 0
        if not self._need:
            return _HEADER_SIZE - self._held
        return self._need - self._held

    @property
    def declared(self) -> int | None:
        """The payload length the frame held in part declares, once its
        length prefix is in; None when no frame, or not all of its prefix,
        is held."""
        if not self._need:
            return None
        return self._need - _HEADER_SIZE

    def head(self, limit: int) -> bytes:
        """The payload bytes received so far of the frame held in part (after
        its length prefix), at most ``limit`` of them: what a header can be
        read from before the body is in."""
        want = limit + _HEADER_SIZE
        pieces: list[bytes | memoryview] = []
        got = 0
        for part in self._parts:
            if got >= want:
                break
            piece = part[:want - got]
            pieces.append(piece)
            got += len(piece)
        return b"".join(pieces)[_HEADER_SIZE:]

    def drop(self) -> None:
        """Forget the frame held in part and take no more bytes (``feed``
        raises): the connection reads no further frames."""
        self._parts.clear()
        self._held = self._need = 0
        self._broken = True

    def _frame_size(self, header: bytes | memoryview) -> int:
        (length,) = FRAME_HEADER.unpack_from(header)
        if length > self.max_frame_size:
            raise self._oversize(length)
        return _HEADER_SIZE + length

    def _oversize(self, length: int) -> FrameTooLargeError:
        self._broken = True
        return FrameTooLargeError(f"declared frame length {length} exceeds {self.max_frame_size}")

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        if self._broken:
            raise FrameTooLargeError("decoder already saw an oversize frame, or was dropped")
        frames: list[bytes] = []
        end = len(data)
        if not end:
            return frames
        view = memoryview(data)
        pos = 0
        if self._held:  # go on with the unfinished frame
            parts = self._parts
            if not self._need:  # its header was cut
                pos = min(_HEADER_SIZE - self._held, end)
                parts.append(bytes(view[:pos]))
                self._held += pos
                if self._held < _HEADER_SIZE:
                    return frames
                header = b"".join(parts)
                parts[:] = [header]
                self._need = self._frame_size(header)
            take = min(self._need - self._held, end - pos)
            if take:
                parts.append(view[pos:pos + take])
                self._held += take
                pos += take
            if self._held < self._need:
                if type(data) is not bytes:  # the caller may reuse its buffer
                    parts[-1] = bytes(parts[-1])
                return frames
            parts[0] = parts[0][_HEADER_SIZE:]
            frames.append(b"".join(parts))
            parts.clear()
            self._held = self._need = 0
        unpack_from = FRAME_HEADER.unpack_from
        while end - pos >= _HEADER_SIZE:
            (length,) = unpack_from(view, pos)
            if length > self.max_frame_size:
                raise self._oversize(length)
            stop = pos + _HEADER_SIZE + length
            if stop > end:
                break
            frames.append(bytes(view[pos + _HEADER_SIZE:stop]))
            pos = stop
        if pos < end:  # the start of an unfinished frame
            rest = end - pos
            piece: bytes | memoryview
            if type(data) is bytes and rest >= _VIEW_MIN and 2 * rest >= end:
                piece = view[pos:]
            else:
                piece = bytes(view[pos:])
            self._parts.append(piece)
            self._held = rest
            if rest >= _HEADER_SIZE:
                self._need = self._frame_size(piece)
        return frames
