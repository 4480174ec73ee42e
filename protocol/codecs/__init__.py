"""The wire codecs and how a connection's first frame picks one.

Three codecs share the same ports and the same 4-byte length prefix
(protocol/frame.py): the project's msgpack format, and RocketMQ's remoting
format with a JSON or a binary header (what official RocketMQ clients send).
A msgpack payload starts with 0x97 (an array of seven); a RocketMQ payload
starts with its serialization type, 0 (JSON) or 1 (binary).
"""

from __future__ import annotations

from protocol.codecs.base import BodyReader, Codec
from protocol.codecs.msgpack_codec import MSGPACK
from protocol.codecs.rocketmq import BINARY_TYPE, JSON_TYPE, ROCKETMQ_BINARY, ROCKETMQ_JSON

CODECS: dict[str, Codec] = {c.name: c for c in (MSGPACK, ROCKETMQ_JSON, ROCKETMQ_BINARY)}


def detect(payload: bytes) -> Codec:
    """The codec of a connection whose first frame payload is ``payload``.
    Anything that is not RocketMQ's format is read as msgpack, whose decoder
    then refuses what is neither."""
    first = payload[0] if payload else -1
    if first == JSON_TYPE:
        return ROCKETMQ_JSON
    if first == BINARY_TYPE:
        return ROCKETMQ_BINARY
    return MSGPACK


__all__ = ["CODECS", "MSGPACK", "ROCKETMQ_BINARY", "ROCKETMQ_JSON", "BodyReader", "Codec",
           "detect"]
