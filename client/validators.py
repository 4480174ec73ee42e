"""Client-side checks of group names, topics and messages (RocketMQ's Validators).

Pure functions; every failure is an ``MQClientError`` raised before anything
is sent.
"""

from __future__ import annotations

import re

from client.errors import MQClientError
from protocol.message import Message, properties_to_string
from protocol.record import MAX_PROPERTIES_BYTES

VALID_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
AUTO_CREATE_TOPIC_KEY = "TBW102"
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
_BYTES_TYPES = (bytes, bytearray, memoryview)


def check_topic(topic: str) -> None:
    """Raise MQClientError unless ``topic`` is a valid name to send to."""
    if not isinstance(topic, str) or not topic:
        raise MQClientError("the specified topic is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise MQClientError(f"the specified topic is longer than {TOPIC_MAX_LENGTH} characters")
    if not VALID_NAME.match(topic):
        raise MQClientError(
            f"the specified topic {topic!r} contains illegal characters "
            f"(allowed: {VALID_NAME.pattern})"
        )
    if topic == AUTO_CREATE_TOPIC_KEY:
        raise MQClientError(f"the topic {topic} is reserved for auto-creating topics")


def check_group(group: str, reserved: str | None = None) -> None:
    """Raise MQClientError unless ``group`` is a valid producer/consumer group name."""
    if not isinstance(group, str) or not group:
        raise MQClientError("the specified group is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise MQClientError(f"the specified group is longer than {GROUP_MAX_LENGTH} characters")
    if not VALID_NAME.match(group):
        raise MQClientError(
            f"the specified group {group!r} contains illegal characters "
            f"(allowed: {VALID_NAME.pattern})"
        )
    if reserved is not None and group == reserved:
        raise MQClientError(f"the group name {group} is reserved, please specify another one")


def check_body(msg: Message, max_message_size: int) -> None:
    body = msg.body
    if not isinstance(body, _BYTES_TYPES):
        raise MQClientError("the message body must be bytes")
    if not body:
        raise MQClientError("the message body length is zero")
    if len(body) > max_message_size:
        raise MQClientError(
            f"the message body size {len(body)} exceeds the maximum {max_message_size}"
        )


def encode_properties(props: dict[str, str]) -> str:
    """``properties_to_string`` with the checks the record format needs.

    Raises MQClientError for a key or value holding ``\\x01``/``\\x02`` or an
    encoding over 32767 bytes.
    """
    n = len(props)
    if not n:
        return ""
    try:
        # Same text as properties_to_string, without a Python-level loop.
        text = "\x02".join(map("\x01".join, props.items())) + "\x02"
    except TypeError:  # a non-str key or value: let the generic encoder str() it
        text = properties_to_string(props)
    if text.count("\x01") != n or text.count("\x02") != n:
        raise MQClientError("message property names and values may not contain \\x01 or \\x02")
    if len(text) > MAX_PROPERTIES_BYTES // 4 and len(text.encode()) > MAX_PROPERTIES_BYTES:
        raise MQClientError(f"message properties are longer than {MAX_PROPERTIES_BYTES} bytes")
    return text


class TopicChecker:
    """``check_topic`` with a bounded cache of names already found valid."""

    __slots__ = ("_ok", "_limit")

    def __init__(self, limit: int = 4096) -> None:
        self._ok: set[str] = set()
        self._limit = limit

    def check(self, topic: str) -> None:
        if topic in self._ok:
            return
        check_topic(topic)
        if len(self._ok) >= self._limit:
            self._ok.clear()
        self._ok.add(topic)
