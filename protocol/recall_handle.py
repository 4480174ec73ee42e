"""Recall handles (RocketMQ 5.3's RecallMessageHandle.HandleV1), shared by broker and client.

A handle is URL-safe base64 of ``"v1 <topic> <brokerName> <timestamp> <messageId>"``:
the timer message's topic, the broker holding it, its delivery time (ms) and its
unique key. A send of a timer message answers one; RECALL_MESSAGE (and gRPC
RecallMessage) takes it back. A client holding only the unique key builds a
handle with timestamp 0 (the broker then looks the key up in every slot).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

VERSION_1 = "v1"
MAX_HANDLE_CHARS = 1024


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp_ms: int
    message_id: str

    def encode(self) -> str:
        text = " ".join((VERSION_1, self.topic, self.broker_name, str(self.timestamp_ms),
                         self.message_id))
        return base64.urlsafe_b64encode(text.encode()).decode()


def build_handle(topic: str, broker_name: str, timestamp_ms: int, message_id: str) -> str:
    return RecallHandle(topic, broker_name, timestamp_ms, message_id).encode()


def parse_handle(handle: str) -> RecallHandle:
    """A handle's fields. Raises ValueError saying what is wrong."""
    if not handle or len(handle) > MAX_HANDLE_CHARS:
        raise ValueError(f"a recall handle is 1..{MAX_HANDLE_CHARS} characters")
    try:
        padded = handle + "=" * (-len(handle) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode()
    except (binascii.Error, UnicodeError, ValueError) as exc:
        raise ValueError("the recall handle is not URL-safe base64 text") from exc
    parts = text.split(" ")
    if len(parts) != 5 or parts[0] != VERSION_1:
        raise ValueError("the recall handle is not 'v1 topic brokerName timestamp messageId'")
    _, topic, broker, ts, message_id = parts
    if not (ts.isascii() and ts.isdigit() and len(ts) <= 18):
        raise ValueError(f"the recall handle's timestamp {ts[:20]!r} is not a number")
    if not topic or not broker or not message_id:
        raise ValueError("the recall handle has an empty field")
    return RecallHandle(topic, broker, int(ts), message_id)


__all__ = ["RecallHandle", "build_handle", "parse_handle"]
