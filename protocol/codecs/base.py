"""What every wire codec provides (no codec imports another one).

A codec turns a ``RemotingCommand`` into the payload of one frame (what
follows the 4-byte length, protocol/frame.py) and back, and packs the
structured bodies (heart-beats, routes, lock sets, ...) of the commands that
travel in it. A connection picks its codec from its first frame
(``protocol.codecs.detect``); a response leaves in its request's codec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from protocol.errors import RemoteProtocolError

if TYPE_CHECKING:
    from protocol.command import RemotingCommand


# A body at least this long leaves as its own piece of the frame (encode_parts);
# a shorter one is copied into the frame, which costs less than another piece
# (in one process: 16 KiB bodies 8.0 against 8.7 us, 38 KiB 11.3 against 10.2).
GATHER_MIN = 32 * 1024


class NotAMapError(RemoteProtocolError):
    """A body reader found another value where a map was expected."""


class BodyReader(Protocol):
    """Reads one structured body an entry at a time (a name server takes a
    100,000-topic registration this way). Raises RemoteProtocolError on
    malformed or truncated input."""

    def read_map_header(self) -> int | None:
        """The number of entries of the map that comes next; None if the
        value is nil; NotAMapError if it is anything else."""

    def unpack(self) -> Any:
        """The next whole value."""

    def skip(self) -> None:
        """Pass the next value."""

    def at_end(self) -> bool:
        """Whether the body holds nothing more."""


class Codec(Protocol):
    """One wire format: header encoding and structured-body encoding."""

    name: str

    def encode(self, cmd: RemotingCommand) -> bytes:
        """The frame payload of ``cmd``. Raises ProtocolError, TypeError,
        ValueError or OverflowError when ``cmd`` cannot be encoded."""

    def encode_parts(self, cmd: RemotingCommand) -> list[bytes]:
        """``encode(cmd)`` as pieces to send one after another: a ``bytes``
        body of ``GATHER_MIN`` bytes or more is a piece of its own, not copied
        (a 256 KiB pull response was copied twice more to make its frame).
        Raises what ``encode`` raises."""

    def decode(self, payload: bytes) -> RemotingCommand:
        """The command in a frame payload; RemoteProtocolError on bad input."""

    def peek_request(self, payload: bytes) -> tuple[int, int] | None:
        """(code, opaque) of a request payload that ``decode`` refused, when
        they can still be read, so the refusal can be answered."""

    def pack_body(self, obj: Any) -> bytes:
        """A structured body."""

    def unpack_body(self, body: bytes | None) -> Any:
        """A structured body back; RemoteProtocolError if missing or undecodable."""

    def body_reader(self, stream: Any) -> BodyReader:
        """A reader of one structured body from a file-like ``stream``."""
