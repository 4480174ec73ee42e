"""gRPC over HTTP/2, the part with no I/O: message framing, deadlines, status.

A gRPC request or response body is a run of length-prefixed messages: one
byte of compression flag (0: as is, 1: compressed with the stream's
``grpc-encoding``), a 4-byte big-endian length, then that many bytes.
``MessageDecoder`` takes the body in whatever pieces HTTP/2 delivers and gives
back whole messages; a declared length over its bound, a flag other than 0 or
1, or a compressed message on a stream that named no encoding is a
``GrpcError`` (the call ends with that status, nothing of it is read further).

The call's status travels in the trailers (``grpc-status``, ``grpc-message``
percent-encoded), always after the response headers and a body, possibly
empty: never the "trailers-only" form.
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import TypeVar
from urllib.parse import quote, unquote

from google.protobuf.message import Message

HEADER = struct.Struct(">BI")
# the largest message a call takes by default (the broker's own bound: grpcMaxInboundMessageSize)
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# encodings a compressed message may be in (grpc-encoding); identity means none
ENCODINGS = ("identity", "gzip", "deflate")


class StatusCode(enum.IntEnum):
    """gRPC's status codes (the ones this server answers with among them)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class GrpcError(Exception):
    """A call ends with ``code`` (not OK) and ``message``."""

    def __init__(self, code: StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def _decompress(encoding: str, data: bytes, limit: int) -> bytes:
    """``data`` inflated, refusing to make more than ``limit`` bytes."""
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise GrpcError(StatusCode.INTERNAL, f"a {encoding} message does not inflate: {exc}") \
            from None
    if len(out) > limit:
        raise GrpcError(StatusCode.RESOURCE_EXHAUSTED,
                        f"a {encoding} message inflates past the limit of {limit} bytes")
    if not inflater.eof:
        raise GrpcError(StatusCode.INTERNAL, f"a {encoding} message is cut short")
    return out


class MessageDecoder:
    """Whole messages out of a body fed in pieces.

    ``encoding`` is the request's ``grpc-encoding`` (None or "identity": a
    message flagged compressed is an error). ``max_bytes`` bounds a message's
    declared length and its inflated size."""

    def __init__(self, max_bytes: int = MAX_MESSAGE_BYTES, encoding: str | None = None) -> None:
        if encoding is not None and encoding not in ENCODINGS:
            raise GrpcError(StatusCode.UNIMPLEMENTED,
                            f"grpc-encoding {encoding!r} is not supported "
                            f"(supported: {', '.join(ENCODINGS)})")
        self.max_bytes = max_bytes
        self.encoding = None if encoding == "identity" else encoding
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The messages ``data`` completes, in order."""
        buf = self._buf
        buf += data
        out: list[bytes] = []
        while len(buf) >= HEADER.size:
            flag, length = HEADER.unpack_from(buf)
            if flag not in (0, 1):
                raise GrpcError(StatusCode.INTERNAL, f"bad compression flag {flag} (0 or 1)")
            if length > self.max_bytes:
                raise GrpcError(StatusCode.RESOURCE_EXHAUSTED,
                                f"a message of {length} bytes is larger than the limit of "
                                f"{self.max_bytes}")
            end = HEADER.size + length
            if len(buf) < end:
                break
            payload = bytes(buf[HEADER.size:end])
            del buf[:end]
            if flag == 1:
                if self.encoding is None:
                    raise GrpcError(StatusCode.INTERNAL,
                                    "a compressed message on a stream with no grpc-encoding")
                payload = _decompress(self.encoding, payload, self.max_bytes)
            out.append(payload)
        return out

    def finish(self) -> None:
        """The body ended: a partial message left over is an error."""
        if self._buf:
            raise GrpcError(StatusCode.INTERNAL,
                            f"the request body ended inside a message ({len(self._buf)} bytes "
                            "left over)")


def encode_message(payload: bytes) -> bytes:
    """One uncompressed message, framed."""
    return HEADER.pack(0, len(payload)) + payload


_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_timeout(value: str) -> float:
    """A ``grpc-timeout`` header in seconds: at most 8 digits and a unit (H M S m u n).
    Raises GrpcError (INTERNAL, as gRPC answers a malformed one) for anything else."""
    digits, unit = value[:-1], value[-1:]
    if not (0 < len(digits) <= 8 and digits.isascii() and digits.isdigit()) \
            or unit not in _TIMEOUT_UNITS:
        raise GrpcError(StatusCode.INTERNAL, f"bad grpc-timeout {value[:20]!r}")
    return int(digits) * _TIMEOUT_UNITS[unit]


def status_trailers(code: StatusCode, message: str = "") -> list[tuple[bytes, bytes]]:
    """The trailers that end a call: ``grpc-status`` and, when there is one,
    ``grpc-message`` percent-encoded (gRPC's own escaping: printable ASCII but
    '%' as is)."""
    headers = [(b"grpc-status", str(int(code)).encode())]
    if message:
        headers.append((b"grpc-message", quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")
                        .encode("ascii")))
    return headers


def decode_message_header(value: str) -> str:
    """A ``grpc-message`` as the peer meant it (the inverse of ``status_trailers``)."""
    return unquote(value)


M = TypeVar("M", bound=Message)


def parse_request(message_type: type[M], payload: bytes) -> M:
    """A request's message; GrpcError INVALID_ARGUMENT when the bytes are not one."""
    message = message_type()
    try:
        message.ParseFromString(payload)
    except Exception as exc:  # DecodeError and friends: a bad request, not our failure
        raise GrpcError(StatusCode.INVALID_ARGUMENT,
                        f"the request is no {message_type.__name__}: {exc}") from None
    return message


__all__ = [
    "ENCODINGS", "HEADER", "MAX_MESSAGE_BYTES", "GrpcError", "MessageDecoder", "StatusCode",
    "decode_message_header", "encode_message", "parse_request", "parse_timeout",
    "status_trailers",
]
