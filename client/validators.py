"""Client-side checks of group names, topics and messages (RocketMQ's Validators).

Pure functions; every failure is an ``MQClientError`` raised before anything
is sent.
"""

from __future__ import annotations

from client.errors import MQClientError
from protocol import names
from protocol.message import Message, properties_to_string
from protocol.record import MAX_PROPERTIES_BYTES

AUTO_CREATE_TOPIC_KEY = "TBW102"
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
_BYTES_TYPES = (bytes, bytearray, memoryview)


def _check_name(kind: str, name: object, max_length: int) -> None:
    """RocketMQ's client wording over protocol.names' rules."""
    if not isinstance(name, str) or not name:
        raise MQClientError(f"the specified {kind} is blank")
    if len(name) > max_length:
        raise MQClientError(f"the specified {kind} is longer than {max_length} characters")
    if names.VALID_NAME.fullmatch(name) is None:
        raise MQClientError(
            f"the specified {kind} {names.shown(name)} contains illegal characters "
            f"(allowed: {names.VALID_CHARS})"
        )


def check_topic(topic: str) -> None:
    """Raise MQClientError unless ``topic`` is a valid name to send to."""
    if names.topic_problem(topic) is not None:
        _check_name("topic", topic, names.TOPIC_MAX_LENGTH)
    if topic == AUTO_CREATE_TOPIC_KEY:
        raise MQClientError(f"the topic {topic} is reserved for auto-creating topics")


def check_group(group: str, reserved: str | None = None) -> None:
    """Raise MQClientError unless ``group`` is a valid producer/consumer group name."""
    if names.group_problem(group) is not None:
        _check_name("group", group, names.GROUP_MAX_LENGTH)
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
