"""The HA wire: bytes only, sans-IO like protocol/frame.py.

Slave to master, first a hello (see ``encode_hello`` below), then reports.
A report: the slave's max commit-log offset.

    +---------------------+
    | offset (8, BE, i64) |
    +---------------------+

Master to slave, a transfer: commit-log bytes from a master physical offset;
size 0 is a heartbeat (12 bytes in all).

    +---------------------+------------------+----------------+
    | offset (8, BE, i64) | size (4, BE, i32)| data (size)    |
    +---------------------+------------------+----------------+

In controller mode (a slave says so in its hello: ``controllerMode``) the
master also sends its confirm offset (broker/store/ha/confirm.py) as a header
of size -1 and no data; only a decoder built with ``confirm=True`` takes it.

An epoch the master begins while a slave is connected (broker/store/ha/epochs.py:
a master starts its epoch when it starts taking writes, often after its slaves
said hello) goes to a slave that says so in its hello (``epochFrames``) as a
header of size -2 whose offset is the epoch's start, followed by the entry:

    +---------------------+------------------+---------------------+----------------------+
    | start (8, BE, i64)  | -2 (4, BE, i32)  | length (2, BE, u16) | JSON [epoch, start,  |
    |                     |                  |                     |  token, writer]      |
    +---------------------+------------------+---------------------+----------------------+

always before any byte at or past that start. Only a decoder built with
``epochs=True`` takes it (``TransferDecoder.take_epochs``).

``TransferDecoder.feed`` and ``ReportDecoder.feed`` take any split of the
stream and return every complete item they now hold. A negative offset, a
negative size or a size above the decoder's maximum raises a
HAProtocolError (a RemoteProtocolError); the decoder is then unusable, as the
stream is lost. The maximum bounds what a peer can make us buffer.
"""

from __future__ import annotations

import hmac
import json
import secrets
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.store.ha.epochs import MAX_EPOCHS, Epoch, LogView, Verdict, epochs_from_wire
from protocol.acl import ACCESS_KEY, SIGNATURE, sign_fields, verify
from protocol.errors import LocalProtocolError, RemoteProtocolError

REPORT = struct.Struct(">q")  # the slave's max commit-log offset
TRANSFER_HEADER = struct.Struct(">qi")  # master physical offset, data size (0 = heartbeat)
CONFIRM_SIZE = -1  # a transfer header of this size carries the confirm offset (controller mode)
CONTROLLER_MODE_FIELD = "controllerMode"  # a slave's hello: "true" to take confirm offsets
EPOCH_SIZE = -2  # a transfer header of this size is followed by an epoch entry
EPOCH_LENGTH = struct.Struct(">H")  # the entry's JSON length
EPOCH_FRAME_MAX = 512  # bytes of an entry's JSON (two 64-character ids and two numbers fit)
EPOCH_FRAMES_FIELD = "epochFrames"  # a slave's hello: "true" to take epoch frames

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


def encode_confirm(offset: int) -> bytes:
    """The master's confirm offset, for a slave in controller mode."""
    if offset < 0:
        raise LocalProtocolError(f"cannot send a negative confirm offset {offset}")
    return TRANSFER_HEADER.pack(offset, CONFIRM_SIZE)


def encode_epoch(epoch: Epoch) -> bytes:
    """An epoch frame: ``epoch`` begins at its start (sent before any byte there)."""
    body = json.dumps(epoch.to_wire(), separators=(",", ":")).encode()
    if len(body) > EPOCH_FRAME_MAX:
        raise LocalProtocolError(f"epoch entry of {len(body)} bytes exceeds {EPOCH_FRAME_MAX}")
    return TRANSFER_HEADER.pack(epoch.start, EPOCH_SIZE) + EPOCH_LENGTH.pack(len(body)) + body


def _decode_epoch(offset: int, body: bytes) -> Epoch:
    try:
        (epoch,) = epochs_from_wire([json.loads(body)])
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"bad epoch frame: {exc}") from None
    if epoch.start != offset:
        raise ValueError(f"epoch frame at offset {offset} names start {epoch.start}")
    return epoch


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
    """Master-to-slave frames -> [(offset, data)], data b"" for a heartbeat.
    With ``confirm``, confirm-offset frames are taken too: the latest is
    ``confirm_offset`` (they never go back). With ``epochs``, epoch frames are
    taken too: ``take_epochs`` hands over those decoded so far, in order (an
    entry comes before every byte it covers, so taking them before applying
    the frames ``feed`` returned keeps that order)."""

    __slots__ = ("max_size", "confirm", "confirm_offset", "epochs", "_epochs")

    def __init__(self, max_size: int = DEFAULT_MAX_TRANSFER_SIZE, confirm: bool = False,
                 epochs: bool = False) -> None:
        super().__init__()
        self.max_size = max_size
        self.confirm = confirm
        self.confirm_offset: int | None = None
        self.epochs = epochs
        self._epochs: list[Epoch] = []

    def take_epochs(self) -> list[Epoch]:
        """The epoch frames decoded since the last call, in order."""
        out, self._epochs = self._epochs, []
        return out

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
        """Every complete frame now held, in order, as (offset, data)."""
        return self._frames(data, join=False)

    def feed_joined(self, data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
        """``feed``, with frames that continue one another (each starting
        where the one before it ends) joined into one: the same bytes at the
        same offsets in fewer, larger pieces (a slave appends a receive's
        worth at once). Heartbeats stay apart."""
        return self._frames(data, join=True)

    def _frames(self, data: bytes | bytearray | memoryview,
                join: bool) -> list[tuple[int, bytes]]:
        self._start(data)
        buf = self._buf
        pos = self._pos
        end = len(buf)
        spans: list[tuple[int, int, int]] = []  # (offset, start, stop) in buf
        head = TRANSFER_HEADER.size
        while end - pos >= head:
            offset, size = TRANSFER_HEADER.unpack_from(buf, pos)
            if offset < 0:
                raise self._fail(f"transfer from a negative offset {offset}")
            if size == CONFIRM_SIZE and self.confirm:
                if self.confirm_offset is not None and offset < self.confirm_offset:
                    raise self._fail(f"confirm offset went back from {self.confirm_offset} "
                                     f"to {offset}")
                self.confirm_offset = offset
                pos += head
                continue
            if size == EPOCH_SIZE and self.epochs:
                if end - pos < head + EPOCH_LENGTH.size:
                    break
                (length,) = EPOCH_LENGTH.unpack_from(buf, pos + head)
                if length > EPOCH_FRAME_MAX:
                    raise self._fail(f"epoch frame of {length} bytes exceeds {EPOCH_FRAME_MAX}")
                stop = pos + head + EPOCH_LENGTH.size + length
                if stop > end:
                    break
                try:
                    epoch = _decode_epoch(offset, bytes(buf[stop - length:stop]))
                except ValueError as exc:
                    raise self._fail(str(exc)) from None
                if len(self._epochs) >= MAX_EPOCHS:
                    raise self._fail(f"more than {MAX_EPOCHS} epoch frames not taken")
                self._epochs.append(epoch)
                pos = stop
                continue
            if size < 0:
                raise self._fail(f"transfer of a negative size {size}")
            if size > self.max_size:
                raise self._fail(f"transfer of {size} bytes exceeds {self.max_size}")
            stop = pos + head + size
            if stop > end:
                break
            spans.append((offset, pos + head, stop))
            pos = stop
        out: list[tuple[int, bytes]] = []
        with memoryview(buf) as view:  # one copy of each byte, out of the buffer
            i, n = 0, len(spans)
            while i < n:
                offset, start, stop = spans[i]
                j = i + 1
                if join and stop > start:
                    reach = offset + stop - start
                    while j < n and spans[j][0] == reach and spans[j][2] > spans[j][1]:
                        reach += spans[j][2] - spans[j][1]
                        j += 1
                if j == i + 1:
                    out.append((offset, bytes(view[start:stop])))
                else:
                    out.append((offset, b"".join([view[a:b] for _, a, b in spans[i:j]])))
                i = j
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


# ---- the handshake: the slave's greeting, the master's challenge, the hello -----------
#
# A slave opens an HA connection with a greeting (5 bytes: magic "RMQC", the
# handshake version); the master answers with a challenge, fresh random bytes
# for this connection only:
#
#     +-------------+-------------+----------------------+
#     | magic "RMQC"| version (1) | challenge (16 bytes) |
#     +-------------+-------------+----------------------+
#
# The slave then sends its hello, before any report:
#
#     +-------------+-------------+---------------------+----------------------------+
#     | magic "RMQH"| version (1) | length (4, BE, u32) | JSON object (length bytes) |
#     +-------------+-------------+---------------------+----------------------------+
#
# The object's values are strings: brokerName, clusterName (the broker group the
# slave follows), timestamp (ms since the epoch, the slave's clock), nonce,
# challenge (the master's, in hex) and, when the slave has brokerAccessKey,
# AccessKey and Signature: RocketMQ's request signature (protocol/acl.py) over the
# other fields, so a master with aclEnable can check the account (an admin one).
# The signed challenge makes a hello good for the one connection it answers: a
# captured hello replayed on another connection (the same master, or after it
# restarted) is refused, and the master remembers nothing between connections
# (no nonce cache a flood of hellos could fill). The timestamp is still checked
# (``HELLO_MAX_SKEW_MS``); the nonce makes each hello distinct.
#
# Version 2 added what the master needs to judge the slave's log (epochs.py):
# brokerId and brokerAddr (the slave's remoting address), and its log view:
# storeId, minOffset, maxOffset, tail ("from:crc32", empty for an empty log) and
# epochs (a JSON list of [epoch, start, token, writer]). Version 3 added the
# greeting and the challenge. Version 4 added slaveChallenge: the slave's own
# challenge (16 random bytes in hex, fresh for each connection), which the
# master's answer signs (below). The master answers with one ANSWER frame
# before any transfer. A slave that takes epoch frames (see the top of this
# module) says epochFrames "true"; a master closes the connection of one that
# does not when it begins an epoch (its next hello's answer holds it).
#
# A side meeting another handshake version says so in its log and closes; a
# master also sends its own greeting bytes back (magic "RMQC", its version), so
# the slave's log names the master's version too.

HELLO_MAGIC = b"RMQH"
HELLO_VERSION = 4
HELLO_HEADER = struct.Struct(">4sBI")
HELLO_MAX_SIZE = 64 * 1024  # bytes of the JSON object (MAX_EPOCHS epochs fit)
HELLO_MAX_SKEW_MS = 60_000  # a hello older or newer than this is refused
_HELLO_FIELDS = ("brokerName", "clusterName", "timestamp", "nonce")
CHALLENGE_MAGIC = b"RMQC"
GREETING = CHALLENGE_MAGIC + bytes([HELLO_VERSION])  # a slave's first bytes
CHALLENGE = struct.Struct(">4sB16s")  # the master's answer to the greeting
CHALLENGE_FIELD = "challenge"
SLAVE_CHALLENGE_FIELD = "slaveChallenge"  # the slave's challenge, the answer signs it


class HandshakeVersionError(HAProtocolError):
    """The peer's greeting (or challenge) names another version of the HA
    handshake; a master answers it with ``GREETING`` (its own version) before
    closing, so the slave can say which version its master speaks."""


def new_challenge() -> str:
    """A challenge for one connection (hex of 16 random bytes): the master's to
    the hello, the slave's to the answer."""
    return secrets.token_hex(CHALLENGE.size - len(GREETING))


def encode_challenge(challenge: str) -> bytes:
    return CHALLENGE.pack(CHALLENGE_MAGIC, HELLO_VERSION, bytes.fromhex(challenge))


def _is_challenge(text: str) -> bool:
    return len(text) == 2 * (CHALLENGE.size - len(GREETING)) and all(
        c in "0123456789abcdef" for c in text)


def _version_problem(buf: bytes | bytearray, peer: str) -> HAProtocolError | None:
    """Why the first bytes ``peer`` ("slave": its greeting, "master": its
    challenge) sent are not this version's handshake, or None (yet)."""
    n = len(CHALLENGE_MAGIC)
    if len(buf) < n:
        return None
    magic = bytes(buf[:n])
    if peer == "slave" and magic == HELLO_MAGIC:
        return HAProtocolError(
            f"hello without the master's challenge (an older slave: this master speaks "
            f"HA handshake version {HELLO_VERSION}, upgrade the slave)")
    if magic != CHALLENGE_MAGIC:
        if peer == "slave":
            return HAProtocolError("no hello: the slave must start with the HA greeting and "
                                   "a signed hello naming its broker group (an older slave?)")
        return HAProtocolError("the master sent no challenge (an older master?)")
    if len(buf) > n and buf[n] != HELLO_VERSION:
        return HandshakeVersionError(
            f"HA handshake version {buf[n]} not understood (this {_SIDE[peer]} speaks "
            f"{HELLO_VERSION}: run the same version on master and slaves)")
    return None


_SIDE = {"slave": "master", "master": "slave"}  # who reads what ``peer`` sent


class GreetingDecoder:
    """The master's side: the slave's greeting; ``feed`` returns the bytes
    after it once complete, else None. HAProtocolError for anything else."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> bytes | None:
        self._buf += data
        problem = _version_problem(self._buf, "slave")
        if problem is not None:
            raise problem
        if len(self._buf) < len(GREETING):
            return None
        return bytes(self._buf[len(GREETING):])


class ChallengeDecoder:
    """The slave's side: the master's challenge; ``feed`` returns (challenge
    in hex, the bytes after it) once complete, else None."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> tuple[str, bytes] | None:
        self._buf += data
        problem = _version_problem(self._buf, "master")
        if problem is not None:
            raise problem
        if len(self._buf) < CHALLENGE.size:
            return None
        _magic, _version, challenge = CHALLENGE.unpack_from(self._buf)
        return challenge.hex(), bytes(self._buf[CHALLENGE.size:])


@dataclass(frozen=True)
class Hello:
    """What a slave says on connecting (see above); ``fields`` are the signed ones."""

    fields: Mapping[str, str]

    @property
    def broker_name(self) -> str:
        return self.fields["brokerName"]

    @property
    def cluster_name(self) -> str:
        return self.fields["clusterName"]

    @property
    def timestamp_ms(self) -> int:
        return int(self.fields["timestamp"])

    @property
    def access_key(self) -> str | None:
        return self.fields.get(ACCESS_KEY)

    @property
    def slave_challenge(self) -> str:
        """The slave's challenge to the master's answer ("" in none)."""
        return self.fields.get(SLAVE_CHALLENGE_FIELD, "")


def make_hello(broker_name: str, cluster_name: str, now_ms: int, nonce: str,
               access_key: str | None = None, secret_key: str | None = None,
               log: LogView | None = None, broker_id: int = 1,
               broker_addr: str = "", challenge: str = "",
               slave_challenge: str | None = None, controller_mode: bool = False,
               epoch_frames: bool = True) -> Hello:
    """A slave's hello answering ``challenge`` (the master's, in hex) and
    challenging the master's answer with ``slave_challenge`` (None: a fresh one,
    ``Hello.slave_challenge``); ``epoch_frames``: it takes epoch frames."""
    fields: dict[str, str] = {"brokerName": broker_name, "clusterName": cluster_name,
                              "timestamp": str(now_ms), "nonce": nonce,
                              "brokerId": str(broker_id), "brokerAddr": broker_addr,
                              CHALLENGE_FIELD: challenge,
                              SLAVE_CHALLENGE_FIELD: (new_challenge() if slave_challenge is None
                                                      else slave_challenge)}
    if log is not None:
        fields.update(log_view_fields(log))
    if controller_mode:
        fields[CONTROLLER_MODE_FIELD] = "true"
    if epoch_frames:
        fields[EPOCH_FRAMES_FIELD] = "true"
    if access_key:
        signed = sign_fields(fields, None, access_key, secret_key or "")
        fields = {k: str(v) for k, v in signed.items()}
    return Hello(fields)


def encode_hello(hello: Hello) -> bytes:
    payload = json.dumps(dict(hello.fields), separators=(",", ":")).encode("utf-8")
    if len(payload) > HELLO_MAX_SIZE:
        raise LocalProtocolError(f"hello of {len(payload)} bytes exceeds {HELLO_MAX_SIZE}")
    return HELLO_HEADER.pack(HELLO_MAGIC, HELLO_VERSION, len(payload)) + payload


class HelloDecoder:
    """The hello, from any split of the stream: ``feed`` returns (Hello, the bytes
    after it) once complete, else None. HAProtocolError for anything else."""

    __slots__ = ("_buf", "done")

    def __init__(self) -> None:
        self._buf = bytearray()
        self.done = False

    def feed(self, data: bytes | bytearray | memoryview) -> tuple[Hello, bytes] | None:
        if self.done:
            raise HAProtocolError("hello already decoded")
        self._buf += data
        buf = self._buf
        head = HELLO_HEADER.size
        if len(buf) >= len(HELLO_MAGIC) and bytes(buf[:len(HELLO_MAGIC)]) != HELLO_MAGIC:
            raise HAProtocolError("no hello: the slave must start with a signed hello "
                                  "naming its broker group (an older slave?)")
        if len(buf) > len(HELLO_MAGIC) and buf[len(HELLO_MAGIC)] != HELLO_VERSION:
            raise HAProtocolError(f"hello version {buf[len(HELLO_MAGIC)]} not understood "
                                  f"(this master speaks {HELLO_VERSION}: upgrade the slave, "
                                  "its hello must answer the master's challenge)")
        if len(buf) < head:
            return None
        _magic, _version, size = HELLO_HEADER.unpack_from(buf)
        if size > HELLO_MAX_SIZE:
            raise HAProtocolError(f"hello of {size} bytes exceeds {HELLO_MAX_SIZE}")
        if len(buf) < head + size:
            return None
        self.done = True
        rest = bytes(buf[head + size:])
        hello = decode_hello_payload(bytes(buf[head:head + size]))
        self._buf = bytearray()
        return hello, rest


def decode_hello_payload(payload: bytes) -> Hello:
    try:
        raw = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise HAProtocolError("hello is not a JSON object") from None
    if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise HAProtocolError("hello must be a JSON object of strings")
    missing = [f for f in _HELLO_FIELDS if not raw.get(f)]
    if missing:
        raise HAProtocolError(f"hello without {', '.join(missing)}")
    if not raw["timestamp"].isdigit() or len(raw["timestamp"]) > 18:
        raise HAProtocolError("hello timestamp must be milliseconds since the epoch")
    return Hello(raw)


@dataclass(frozen=True)
class HelloCheck:
    """The master's side: which broker group, which accounts (None: ACL off)."""

    broker_name: str
    cluster_name: str
    max_skew_ms: int = HELLO_MAX_SKEW_MS


def check_hello(hello: Hello, check: HelloCheck, now_ms: int,
                admin_secret: Callable[[str], str | None] | None,
                challenge: str) -> str | None:
    """Why ``hello`` is refused, or None. ``challenge`` is the one the master sent
    on this connection. ``admin_secret(access_key)`` is the secret of an admin
    account of the master's ACL, None for no such account; with ``admin_secret``
    None (no aclEnable) the signature is not required."""
    if hello.broker_name != check.broker_name or hello.cluster_name != check.cluster_name:
        return (f"hello for broker group {hello.cluster_name}/{hello.broker_name}, this master "
                f"is {check.cluster_name}/{check.broker_name}")
    if not hmac.compare_digest(hello.fields.get(CHALLENGE_FIELD, "").encode(),
                               challenge.encode()):
        return ("hello does not answer this connection's challenge (a replayed hello, or "
                "a slave of another version)")
    if not _is_challenge(hello.slave_challenge):
        return "hello without the slave's challenge (a slave of another version)"
    if abs(now_ms - hello.timestamp_ms) > check.max_skew_ms:
        return (f"hello timestamp {hello.timestamp_ms} is more than {check.max_skew_ms} ms from "
                f"the master's clock {now_ms} (a replay, or clocks apart)")
    if admin_secret is None:
        return None
    key = hello.access_key
    if not key:
        return "aclEnable: the hello must be signed (brokerAccessKey/brokerSecretKey)"
    secret = admin_secret(key)
    if secret is None:
        return f"accessKey={key} is not an admin account of this master's ACL"
    if not verify(hello.fields, None, secret):
        return f"hello signature check failed for accessKey={key}"
    return None


# ---- log views in a hello, and the master's answer -----------------------------------


def log_view_fields(log: LogView) -> dict[str, str]:
    tail = f"{log.tail[0]}:{log.tail[1]}" if log.tail is not None else ""
    return {"storeId": log.store_id, "minOffset": str(log.min_offset),
            "maxOffset": str(log.max_offset), "tail": tail,
            "epochs": json.dumps([e.to_wire() for e in log.epochs], separators=(",", ":"))}


def _offset(raw: str | None, what: str) -> int:
    if raw is None or not raw.isdigit() or len(raw) > 19 or int(raw) >= 2**63:
        raise HAProtocolError(f"hello {what} must be an offset")
    return int(raw)


def hello_log_view(hello: Hello) -> LogView:
    """The slave's log as its hello describes it; HAProtocolError when malformed."""
    f = hello.fields
    store_id = f.get("storeId", "")
    if not (store_id.isalnum() and 0 < len(store_id) <= 64):
        raise HAProtocolError("hello without a valid storeId")
    lo, hi = _offset(f.get("minOffset"), "minOffset"), _offset(f.get("maxOffset"), "maxOffset")
    if lo > hi:
        raise HAProtocolError("hello minOffset is past its maxOffset")
    tail: tuple[int, int] | None = None
    raw_tail = f.get("tail", "")
    if raw_tail:
        start, sep, crc = raw_tail.partition(":")
        if not sep or not crc.isdigit() or int(crc) >= 2**32:
            raise HAProtocolError("hello tail must be from:crc32")
        tail = (_offset(start, "tail"), int(crc))
        if not lo <= tail[0] < hi:
            raise HAProtocolError("hello tail is outside its log")
    try:
        epochs = epochs_from_wire(json.loads(f.get("epochs", "[]")))
    except (ValueError, RecursionError) as exc:
        raise HAProtocolError(f"hello epochs: {exc}") from None
    return LogView(store_id, epochs, lo, hi, tail)


def hello_broker_id(hello: Hello) -> int:
    raw = hello.fields.get("brokerId", "")
    if not raw.isdigit() or len(raw) > 9 or int(raw) == 0:
        raise HAProtocolError("hello brokerId must be a slave's (1 or more)")
    return int(raw)


# The master's answer, once, before any transfer:
#
#     +-------------+-------------+---------------------+---------------------+---------+-------+
#     | magic "RMQA"| version (1) | length (4, BE, u32) | proof length (2, BE)| answer  | proof |
#     +-------------+-------------+---------------------+---------------------+---------+-------+
#
# The answer, a JSON object: {"verdict": "accept" | "recover" | "diverged" |
# "master-behind" | "too-old", "reason": str, "storeId": str, "epochs": [...],
# "minOffset": int, "maxOffset": int}. "accept": transfers follow. "recover": the
# master is behind this slave and restores itself from it: the slave sends
# (transfers) and the master reports, over this connection. Anything else: the
# master closes.
#
# The proof (version 2 of the answer, HA handshake version 4), empty when the
# master does not sign: {"AccessKey": the hello's, "Signature": ...}, RocketMQ's
# signature (protocol/acl.py) with that account's secret over the fields
# {signedFor: ANSWER_SIGNED_FOR, slaveChallenge: the hello's} and, as its body,
# the answer's bytes exactly as sent. A slave with brokerAccessKey acts on an
# answer only once its proof checks (``check_answer``): signed for its own
# challenge, with its own account's secret. A fake master (without the secret)
# cannot make one, and an answer captured on another connection signs another
# challenge. The master signs when it knows the secret and has verified the
# hello with it (``answer_key``).

ANSWER_MAGIC = b"RMQA"
ANSWER_VERSION = 2
ANSWER_HEADER = struct.Struct(">4sBIH")
ANSWER_MAX_SIZE = 64 * 1024
ANSWER_PROOF_MAX_SIZE = 1024
ANSWER_SIGNED_FOR = "RMQA HA answer"  # no hello signs such a value: a signature is one or the other
SIGNED_FOR_FIELD = "signedFor"
RECOVER = "recover"
_VERDICTS = {v.value for v in Verdict} | {RECOVER}


@dataclass(frozen=True)
class Answer:
    verdict: str
    reason: str = ""
    store_id: str = ""
    epochs: tuple[Epoch, ...] = ()
    min_offset: int = 0
    max_offset: int = 0


@dataclass(frozen=True)
class AnswerKey:
    """How a master signs its answers on one connection: the hello's account
    and challenge (``answer_key``)."""

    slave_challenge: str
    access_key: str
    secret_key: str


@dataclass(frozen=True)
class AnswerFrame:
    """An answer as a slave received it: ``payload`` is the bytes signed,
    ``access_key`` and ``signature`` the proof ("" when unsigned)."""

    answer: Answer
    payload: bytes
    access_key: str = ""
    signature: str = ""


def _answer_fields(slave_challenge: str) -> dict[str, str]:
    return {SIGNED_FOR_FIELD: ANSWER_SIGNED_FOR, SLAVE_CHALLENGE_FIELD: slave_challenge}


def encode_answer(answer: Answer, key: AnswerKey | None = None) -> bytes:
    """The answer frame, signed with ``key`` (None: unsigned)."""
    payload = json.dumps({
        "verdict": answer.verdict, "reason": answer.reason, "storeId": answer.store_id,
        "epochs": [e.to_wire() for e in answer.epochs], "minOffset": answer.min_offset,
        "maxOffset": answer.max_offset}, separators=(",", ":")).encode()
    if len(payload) > ANSWER_MAX_SIZE:
        raise LocalProtocolError(f"answer of {len(payload)} bytes exceeds {ANSWER_MAX_SIZE}")
    proof = b""
    if key is not None:
        signed = sign_fields(_answer_fields(key.slave_challenge), payload, key.access_key,
                             key.secret_key)
        proof = json.dumps({ACCESS_KEY: signed[ACCESS_KEY], SIGNATURE: signed[SIGNATURE]},
                           separators=(",", ":")).encode()
        if len(proof) > ANSWER_PROOF_MAX_SIZE:
            raise LocalProtocolError(f"answer proof of {len(proof)} bytes exceeds "
                                     f"{ANSWER_PROOF_MAX_SIZE} (an access key that long?)")
    return ANSWER_HEADER.pack(ANSWER_MAGIC, ANSWER_VERSION, len(payload), len(proof)) \
        + payload + proof


def answer_key(hello: Hello, admin_secret: Callable[[str], str | None] | None,
               own_access_key: str = "", own_secret_key: str = "") -> AnswerKey | None:
    """The master's side: the key its answer to ``hello`` (accepted by
    ``check_hello``) is signed with, or None (unsigned). With aclEnable
    (``admin_secret``): the secret of the admin account that signed the hello.
    Without it: the master's own brokerAccessKey/brokerSecretKey, when the hello
    is signed with that account and its signature checks (the master never
    signs for a hello it has not verified). A hello without a signature gets
    an unsigned answer."""
    key = hello.access_key
    if not key:
        return None
    if admin_secret is not None:
        secret = admin_secret(key)
    elif own_access_key and key == own_access_key and verify(hello.fields, None,
                                                               own_secret_key):
        secret = own_secret_key
    else:
        secret = None
    if secret is None:
        return None
    return AnswerKey(hello.slave_challenge, key, secret)


def check_answer(frame: AnswerFrame, slave_challenge: str, access_key: str,
                 secret_key: str) -> str | None:
    """The slave's side: why its master's answer is not proven, or None.
    ``slave_challenge`` is the one this connection's hello sent; ``access_key``
    and ``secret_key`` the slave's brokerAccessKey/brokerSecretKey."""
    if not frame.signature:
        return (f"the master's answer is not signed (this slave has brokerAccessKey={access_key}: "
                "its master must have aclEnable with that admin account, or the same "
                "brokerAccessKey/brokerSecretKey; else it is not this group's master)")
    if frame.access_key != access_key:
        return (f"the master's answer is signed by accessKey={frame.access_key[:64]}, this slave's "
                f"hello by {access_key} (not this group's master)")
    fields: dict[str, str] = {**_answer_fields(slave_challenge), ACCESS_KEY: access_key,
                              SIGNATURE: frame.signature}
    if not verify(fields, frame.payload, secret_key):
        return (f"the master's answer signature check failed for accessKey={access_key} (a "
                "fake master, an answer replayed from another connection, or another secret)")
    return None


class AnswerDecoder:
    """The master's answer from any split of the stream: ``feed`` returns
    (AnswerFrame, the bytes after it) once complete, else None."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> tuple[AnswerFrame, bytes] | None:
        self._buf += data
        buf = self._buf
        head = ANSWER_HEADER.size
        if len(buf) >= len(ANSWER_MAGIC) and bytes(buf[:len(ANSWER_MAGIC)]) != ANSWER_MAGIC:
            raise HAProtocolError("the master sent no answer to the hello (an older master?)")
        if len(buf) > len(ANSWER_MAGIC) and buf[len(ANSWER_MAGIC)] != ANSWER_VERSION:
            raise HAProtocolError(f"master answer version {buf[len(ANSWER_MAGIC)]} not "
                                  f"understood (this slave reads {ANSWER_VERSION})")
        if len(buf) < head:
            return None
        _magic, _version, size, proof_size = ANSWER_HEADER.unpack_from(buf)
        if size > ANSWER_MAX_SIZE:
            raise HAProtocolError(f"master answer of {size} bytes exceeds {ANSWER_MAX_SIZE}")
        if proof_size > ANSWER_PROOF_MAX_SIZE:
            raise HAProtocolError(f"master answer proof of {proof_size} bytes exceeds "
                                  f"{ANSWER_PROOF_MAX_SIZE}")
        end = head + size + proof_size
        if len(buf) < end:
            return None
        rest = bytes(buf[end:])
        payload = bytes(buf[head:head + size])
        try:
            answer = _decode_answer(payload)
            key, signature = _decode_proof(bytes(buf[head + size:end]))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise HAProtocolError(f"master answer malformed: {exc}") from None
        self._buf = bytearray()
        return AnswerFrame(answer, payload, key, signature), rest


def _decode_answer(payload: bytes) -> Answer:
    raw = json.loads(payload)
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    verdict, reason = raw.get("verdict"), raw.get("reason", "")
    store_id = raw.get("storeId", "")
    lo, hi = raw.get("minOffset", 0), raw.get("maxOffset", 0)
    if not isinstance(verdict, str) or verdict not in _VERDICTS or not isinstance(reason, str) \
            or not isinstance(store_id, str):
        raise ValueError("bad verdict")
    if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**63
               for x in (lo, hi)):
        raise ValueError("bad offsets")
    epochs = tuple(epochs_from_wire(raw.get("epochs", [])))
    return Answer(verdict, reason[:2000], store_id[:64], epochs, lo, hi)


def _decode_proof(proof: bytes) -> tuple[str, str]:
    """(AccessKey, Signature) of an answer's proof, ("", "") for none."""
    if not proof:
        return "", ""
    raw = json.loads(proof)
    if not isinstance(raw, dict):
        raise ValueError("proof not an object")
    key, signature = raw.get(ACCESS_KEY), raw.get(SIGNATURE)
    if not isinstance(key, str) or not isinstance(signature, str) or not key or not signature:
        raise ValueError("proof without AccessKey and Signature")
    return key, signature
