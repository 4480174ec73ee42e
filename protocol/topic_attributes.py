"""Topic attributes (RocketMQ 5): ``mqadmin updateTopic -a`` and the one the
broker acts on, ``message.type``.

An update names its changes as RocketMQ's AttributeParser reads them:
comma-separated ``+key=value`` (add or change) and ``-key`` (remove), e.g.
``+message.type=FIFO``. ``alter`` applies them to a topic's attributes as
RocketMQ's TopicConfigManager does: only known keys, only allowed values, a
new topic cannot remove a key, an existing one cannot remove a key it does not
have; attributes an update does not name are kept.

``message.type`` (RocketMQ's TopicMessageType): NORMAL, FIFO, DELAY,
TRANSACTION or MIXED. ``type_conflict`` is RocketMQ 5's
DefaultTopicMessageTypeValidator with one difference: a topic without the
attribute takes every type (RocketMQ reads it as UNSPECIFIED and refuses all
sends while enableTopicMessageTypeCheck is on); MIXED takes every type.

Pure: text and maps in, maps or reasons out; a bad update raises
``AttributeProblem`` (a ValueError) saying what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping

MESSAGE_TYPE = "message.type"
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
# key -> allowed values (RocketMQ's TopicAttributes.ALL, the ones served here)
SUPPORTED: dict[str, tuple[str, ...]] = {MESSAGE_TYPE: MESSAGE_TYPES}
MAX_ATTRIBUTES = 64
MAX_TEXT = 255  # a key's or a value's length
MAX_UPDATE_TEXT = 4096  # the request header's ``attributes``


class AttributeProblem(ValueError):
    """An update that cannot be applied; the message says why."""


def parse_changes(text: str | None) -> dict[str, str | None]:
    """``+k=v,-k2`` -> {k: v, k2: None}; empty or None: no change."""
    if text is None or not text.strip():
        return {}
    if len(text) > MAX_UPDATE_TEXT:
        raise AttributeProblem(f"attributes: longer than {MAX_UPDATE_TEXT} characters")
    out: dict[str, str | None] = {}
    for part in text.split(","):
        item = part.strip()
        if item.startswith("+") and "=" in item:
            key, value = item[1:].split("=", 1)
            key, value = key.strip(), value.strip()
            if not value:
                raise AttributeProblem(f"attribute {item!r}: no value after '='")
        elif item.startswith("-") and "=" not in item:
            key, value = item[1:].strip(), None
        else:
            raise AttributeProblem(f"attribute {item[:64]!r}: write +key=value to set a key, "
                                   "-key to remove it")
        if not key or len(key) > MAX_TEXT or (value is not None and len(value) > MAX_TEXT):
            raise AttributeProblem(f"attribute {item[:64]!r}: key and value are 1..{MAX_TEXT} "
                                   "characters")
        if key in out:
            raise AttributeProblem(f"attribute {key!r} is named twice")
        out[key] = value
    return out


def format_changes(changes: Mapping[str, str | None]) -> str:
    """The inverse of ``parse_changes`` (what a client sends)."""
    return ",".join(f"+{k}={v}" if v is not None else f"-{k}" for k, v in changes.items())


def alter(current: Mapping[str, str], changes: Mapping[str, str | None], *,
          create: bool) -> dict[str, str]:
    """``current`` with ``changes`` applied (``create``: the topic is new);
    raises AttributeProblem naming the first change refused."""
    out = dict(current)
    for key, value in changes.items():
        allowed = SUPPORTED.get(key)
        if allowed is None:
            raise AttributeProblem(f"unsupported attribute {key[:64]!r}: supported are "
                                   f"{', '.join(sorted(SUPPORTED))}")
        if value is None:
            if create:
                raise AttributeProblem(f"only an existing topic's attribute can be removed "
                                       f"(-{key})")
            if key not in out:
                raise AttributeProblem(f"attempt to remove attribute {key!r}, which the "
                                       "topic does not have")
            del out[key]
        elif value not in allowed:
            raise AttributeProblem(f"attribute {key}={value[:64]!r} is not one of "
                                   f"{', '.join(allowed)}")
        else:
            out[key] = value
    return out


def checked_attributes(raw: object, where: str = "attributes") -> dict[str, str]:
    """A stored or received attribute map, bounded (a ValueError says what is wrong)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be a map, not {type(raw).__name__}")
    if len(raw) > MAX_ATTRIBUTES:
        raise ValueError(f"{where}: more than {MAX_ATTRIBUTES} entries")
    out: dict[str, str] = {}
    for k, v in raw.items():
        if not (isinstance(k, str) and isinstance(v, str)) or len(k) > MAX_TEXT \
                or len(v) > MAX_TEXT:
            raise ValueError(f"{where}: keys and values are strings of at most "
                             f"{MAX_TEXT} characters")
        out[k] = v
    return out


def topic_message_type(attributes: Mapping[str, str]) -> str | None:
    """The topic's ``message.type`` (None: not set, every type taken)."""
    value = attributes.get(MESSAGE_TYPE)
    return value if value in MESSAGE_TYPES else None


def type_conflict(topic_type: str | None, message_type: str) -> str | None:
    """Why a message of ``message_type`` may not go to a topic of
    ``topic_type`` (None: it may); see the module's doc."""
    if topic_type is None or topic_type == "MIXED" or topic_type == message_type:
        return None
    return (f"TopicMessageType validate failed, the expected type is {topic_type}, "
            f"but actual type is {message_type}")


__all__ = [
    "MAX_ATTRIBUTES", "MAX_TEXT", "MAX_UPDATE_TEXT", "MESSAGE_TYPE", "MESSAGE_TYPES",
    "SUPPORTED", "AttributeProblem", "alter", "checked_attributes", "format_changes",
    "parse_changes", "topic_message_type", "type_conflict",
]
