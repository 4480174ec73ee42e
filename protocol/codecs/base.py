"""What every wire codec provides (no codec imports another one).

A codec turns a ``RemotingCommand`` into the payload of one frame (what
follows the 4-byte length, protocol/frame.py) and back, and packs the
structured bodies (heart-beats, routes, lock sets, ...) of the commands that
travel in it. A connection picks its codec from its first frame
(``protocol.codecs.detect``); a response leaves in its request's codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from protocol.errors import MalformedRequestError, RemoteProtocolError

if TYPE_CHECKING:
    from protocol.command import RemotingCommand


# A body at least this long leaves as its own piece of the frame (encode_parts);
# a shorter one is copied into the frame, which costs less than another piece
# (in one process: 16 KiB bodies 8.0 against 8.7 us, 38 KiB 11.3 against 10.2).
GATHER_MIN = 32 * 1024

# What a codec decodes of a frame before its body (the header: code, opaque,
# flag, remark, extFields) is bounded, whatever the frame size, so that a
# frame costs about what its bytes cost (no container is built per byte).
#
# The longest header: that of a send whose properties reach the store's limit
# of 32767 bytes (MAX_PROPERTIES_BYTES), written in JSON, where each of the
# property separators (\u0001, \u0002) takes six bytes: under 200 KiB. Every
# other header of RocketMQ's is a few hundred bytes.
MAX_HEADER_BYTES = 256 * 1024
# extFields entries: the largest request header has about twenty, plus the
# ACL's four (AccessKey, Signature, SecurityToken, ...) and a client's extras.
MAX_EXT_FIELDS = 256


@dataclass(frozen=True, slots=True)
class BodyLimit:
    """What a structured body may hold before it is decoded: its bytes, its
    arrays and maps (objects), and their elements and entries together."""

    max_bytes: int
    max_containers: int
    max_values: int
    # the longest array: msgpack allocates an array's declared length before
    # its elements arrive (1,000 nested headers of 128 Ki elements, 5 KB,
    # cost 150 ms and 65 MiB)
    max_array: int


# The structured body of a request a daemon decodes in its event loop
# (RemotingCommand.decode_body: a heart-beat, which the ACL reads before the
# signature is checked, a lock batch, a subscription group). A consumer with
# a thousand subscriptions sends about 250 KiB, 3,000 maps and arrays and
# 12,000 values, and no array longer than its subscriptions or a lock
# batch's queues; four to ten times that is allowed. Bounded so, a body of
# any content takes at most about 20 MiB and 40 ms (its worst: 1 MiB of
# two-character msgpack strings left in arrays nested 1,000 deep, which no
# count sees before they are complete).
REQUEST_BODY = BodyLimit(max_bytes=1024 * 1024, max_containers=32 * 1024,
                         max_values=128 * 1024, max_array=4096)


# One value of a body read entry by entry (BodyReader: a name server's
# REGISTER_BROKER body, of any number of topics): a topic's config is one map
# of seven scalars (RocketMQ 5 adds an attributes map of a few entries), a
# dataVersion two or three scalars, a filterServerList a few addresses, a
# topic name at most 127 characters. Sixteen times that is allowed. Bounded
# so, a value of any content is refused after a few dozen containers and a
# few KiB (a topic entry of 16 million empty arrays, inflated from 16 KiB of
# zlib, used to build them all: GBs).
BODY_ENTRY = BodyLimit(max_bytes=16 * 1024, max_containers=16, max_values=256, max_array=256)

# The bytes a body reader takes from its stream at a time (a name server
# inflates a compressed REGISTER_BROKER body that much at a time, and takes a
# step after each such read).
READ_SIZE = 256 * 1024


def refusal(message: str, request: tuple[int, int] | None) -> RemoteProtocolError:
    """The error of a frame refused after its code and opaque were read:
    answerable (MalformedRequestError) if it is a request that expects an
    answer (``request`` is its code and opaque), else a plain one."""
    if request is None:
        return RemoteProtocolError(message)
    return MalformedRequestError(message, request[0], request[1])


# What a BodyReader's read_map_header or read_array_header answers when the
# count is not known before the entries are read (JSON's): ``more`` then says,
# before each entry, whether there is one.
UNKNOWN_LENGTH = -1


class NotAMapError(RemoteProtocolError):
    """A body reader found another value where a map was expected."""


class BodyReader(Protocol):
    """Reads one structured body an entry at a time (a name server takes a
    100,000-topic registration this way). Raises RemoteProtocolError on
    malformed or truncated input."""

    def read_map_header(self) -> int | None:
        """The number of entries of the map that comes next (or
        UNKNOWN_LENGTH); None if the value is nil; NotAMapError if it is
        anything else."""

    def more(self) -> bool:
        """Whether the map or array most recently opened with UNKNOWN_LENGTH
        holds another entry (read it next); False once it is closed."""

    def unpack(self) -> Any:
        """The next whole value, within ``BODY_ENTRY`` (refused past it, before
        it is built whole)."""

    def read_array_header(self) -> int:
        """The number of elements of the array that comes next (or
        UNKNOWN_LENGTH), its elements then read one by one;
        RemoteProtocolError if it is no array."""

    def skip(self) -> None:
        """Pass the next value (read within ``BODY_ENTRY``, as ``unpack``)."""

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
        """The command in a frame payload; RemoteProtocolError on bad input,
        MalformedRequestError (a RemoteProtocolError) when the refused frame
        is a request whose code and opaque could be read, so the refusal can
        be answered. Bounded: the header (MAX_HEADER_BYTES, MAX_EXT_FIELDS)
        is checked before the body is looked at, and no more than a few
        containers are built whatever the bytes."""

    def decode_header(self, prefix: bytes) -> RemotingCommand | None:
        """The command whose frame payload starts with ``prefix`` (the body may
        not be in yet), without its body (None) and version (the default):
        None while ``prefix`` is too short to hold the whole header.
        RemoteProtocolError (MalformedRequestError when answerable) as
        ``decode`` refuses the header, and when it runs past MAX_HEADER_BYTES:
        a connection not yet trusted is judged on its header before its body
        is read (protocol/trio/preauth.py)."""

    def peek_request(self, payload: bytes) -> tuple[int, int] | None:
        """(code, opaque) of a request payload (one that expects an answer),
        whether ``decode`` takes it or refuses it, when they can be read;
        None otherwise. Costs one ``decode``."""

    def pack_body(self, obj: Any) -> bytes:
        """A structured body."""

    def unpack_body(self, body: bytes | None, limit: BodyLimit | None = None) -> Any:
        """A structured body back; RemoteProtocolError if missing or
        undecodable, or past ``limit`` (checked before or while it is built,
        never after)."""

    def body_reader(self, stream: Any, limit: BodyLimit = BODY_ENTRY) -> BodyReader:
        """A reader of one structured body from a file-like ``stream``, each
        value of it within ``limit``."""
