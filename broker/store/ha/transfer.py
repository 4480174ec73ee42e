"""The HA wire: bytes only, sans-IO like protocol/frame.py.

Slave to master, a report: the slave's max commit-log offset.

    +---------------------+
    | offset (8, BE, i64) |
    +---------------------+

Master to slave, a transfer: commit-log bytes from a master physical offset;
size 0 is a heartbeat (12 bytes in all).

    +---------------------+------------------+----------------+
    | offset (8, BE, i64) | size (4, BE, i32)| data (size)    |
    +---------------------+------------------+----------------+

``TransferDecoder.feed`` and ``ReportDecoder.feed`` take any split of the
stream and return every complete item they now hold. A negative offset, a
negative size or a size above the decoder's maximum raises a
HAProtocolError (a RemoteProtocolError); the decoder is then unusable, as the
stream is lost. The maximum bounds what a peer can make us buffer.
"""

from __future__ import annotations

import struct

from protocol.errors import LocalProtocolError, RemoteProtocolError

REPORT = struct.Struct(">q")  # the slave's max commit-log offset
TRANSFER_HEADER = struct.Struct(">qi")  # master physical offset, data size (0 = heartbeat)

# RocketMQ's slave reads into a 4 MiB buffer; a master sends haTransferBatchSize
# (32 KiB by default) at most, so a larger frame is a broken or hostile peer.
DEFAULT_MAX_TRANSFER_SIZE = 4 * 1024 * 1024
_INT32_MAX = 2**31 - 1


class HAProtocolError(RemoteProtocolError):
    """The HA peer sent something we cannot accept: close the connection."""


def encode_report(offset: int) -> bytes:
    """A report of ``offset``. Raises LocalProtocolError for a negative one."""
    if offset < 0:
        raise LocalProtocolError(f"cannot report a negative offset {offset}")
    return REPORT.pack(offset)


def encode_transfer(offset: int, data: bytes = b"") -> bytes:
    """A transfer frame (header and data); ``data`` empty makes a heartbeat."""
    if offset < 0:
        raise LocalProtocolError(f"cannot transfer from a negative offset {offset}")
    if len(data) > _INT32_MAX:
        raise LocalProtocolError(f"transfer of {len(data)} bytes does not fit its size field")
    return TRANSFER_HEADER.pack(offset, len(data)) + data


class _Decoder:
    __slots__ = ("_buf", "_pos", "_broken")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._broken: str | None = None

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a complete item."""
        return len(self._buf) - self._pos

    def _fail(self, reason: str) -> HAProtocolError:
        self._broken = reason
        return HAProtocolError(reason)

    def _start(self, data: bytes | bytearray | memoryview) -> None:
        if self._broken is not None:
            raise HAProtocolError(f"decoder already failed: {self._broken}")
        self._buf += data

    def _compact(self, pos: int) -> None:
        if pos == len(self._buf):
            self._buf.clear()
            pos = 0
        elif pos > 65536:
            del self._buf[:pos]
            pos = 0
        self._pos = pos


class TransferDecoder(_Decoder):
    """Master-to-slave frames -> [(offset, data)], data b"" for a heartbeat."""

    __slots__ = ("max_size",)

    def __init__(self, max_size: int = DEFAULT_MAX_TRANSFER_SIZE) -> None:
        super().__init__()
        self.max_size = max_size

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
        self._start(data)
        buf = self._buf
        pos = self._pos
        end = len(buf)
        out: list[tuple[int, bytes]] = []
        head = TRANSFER_HEADER.size
        while end - pos >= head:
            offset, size = TRANSFER_HEADER.unpack_from(buf, pos)
            if offset < 0:
                raise self._fail(f"transfer from a negative offset {offset}")
            if size < 0:
                raise self._fail(f"transfer of a negative size {size}")
            if size > self.max_size:
                raise self._fail(f"transfer of {size} bytes exceeds {self.max_size}")
            stop = pos + head + size
            if stop > end:
                break
            out.append((offset, bytes(buf[pos + head : stop])))
            pos = stop
        self._compact(pos)
        return out


class ReportDecoder(_Decoder):
    """Slave-to-master reports -> [offset]."""

    __slots__ = ()

    def feed(self, data: bytes | bytearray | memoryview) -> list[int]:
        self._start(data)
        buf = self._buf
        pos = self._pos
        end = len(buf)
        out: list[int] = []
        size = REPORT.size
        while end - pos >= size:
            (offset,) = REPORT.unpack_from(buf, pos)
            if offset < 0:
                raise self._fail(f"report of a negative offset {offset}")
            out.append(offset)
            pos += size
        self._compact(pos)
        return out
