"""Names that enter from the wire: the one place they are validated.

RocketMQ's rules: topics and groups use the characters ``[%|a-zA-Z0-9_-]``; a
topic is at most 127 characters, its ``%RETRY%``/``%DLQ%`` prefix included; a
group at most 255. Broker and cluster names are also topics on their broker,
so they follow the topic rules. Addresses are ``host:port``.

Every ``*_problem`` function returns None for a valid name or the reason it is
not; every ``check_*`` raises ``InvalidNameError`` (a ValueError) with that
reason. Reasons never hold more than a short, escaped prefix of the name, so a
megabyte of garbage never echoes back into a log line or a remark.
"""

from __future__ import annotations

import re
from functools import lru_cache

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
HOST_MAX_LENGTH = 253
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
# System topics the broker writes itself (RocketMQ's TopicValidator names).
RMQ_SYS_SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
RMQ_SYS_BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
RMQ_SYS_WHEEL_TIMER = "rmq_sys_wheel_timer"  # timer messages wait here (RocketMQ 5)
# the broker's own topics (TopicValidator): no producer sends to them
SYSTEM_TOPICS = frozenset({
    AUTO_CREATE_TOPIC_KEY_TOPIC, SELF_TEST_TOPIC, RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_SYS_TRACE_TOPIC, OFFSET_MOVED_EVENT, RMQ_SYS_WHEEL_TIMER,
})
# the broker's own topics a producer may send to (TopicValidator's system topics
# outside NOT_ALLOWED_SEND_TOPIC_SET that exist here): trace clients write the trace topic
SEND_ALLOWED_SYSTEM_TOPICS = frozenset({RMQ_SYS_TRACE_TOPIC})
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")
VALID_CHARS = "[%|a-zA-Z0-9_-]"
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")
SHOWN_PREFIX = 48


class InvalidNameError(ValueError):
    """A topic, group, broker, cluster name or address breaks the rules."""


def shown(value: object, limit: int = SHOWN_PREFIX) -> str:
    """A bounded, printable rendering of client data for logs and remarks."""
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    text = repr(value)
    if len(text) <= limit + 2:
        return text
    # escapes (\U0001f600) make a repr longer than its string: cut the repr
    return f"{text[:limit + 1]}'... ({len(value)} characters)"


def _name_problem(what: str, name: object, max_length: int) -> str | None:
    if not isinstance(name, str):
        return f"the {what} must be a string, not {type(name).__name__}"
    if not name:
        return f"the {what} is empty"
    if len(name) > max_length:
        return f"the {what} {shown(name)} is longer than {max_length} characters"
    if VALID_NAME.fullmatch(name) is None:
        return f"the {what} {shown(name)} contains characters other than {VALID_CHARS}"
    return None


@lru_cache(maxsize=8192)
def _cached_topic_problem(topic: str) -> str | None:
    return _name_problem("topic name", topic, TOPIC_MAX_LENGTH)


def topic_problem(topic: object) -> str | None:
    if isinstance(topic, str) and len(topic) <= TOPIC_MAX_LENGTH:
        return _cached_topic_problem(topic)
    return _name_problem("topic name", topic, TOPIC_MAX_LENGTH)


@lru_cache(maxsize=8192)
def _cached_group_problem(group: str) -> str | None:
    return _name_problem("group name", group, GROUP_MAX_LENGTH)


def group_problem(group: object) -> str | None:
    if isinstance(group, str) and len(group) <= GROUP_MAX_LENGTH:
        return _cached_group_problem(group)
    return _name_problem("group name", group, GROUP_MAX_LENGTH)


def broker_name_problem(name: object) -> str | None:
    return _name_problem("broker name", name, TOPIC_MAX_LENGTH)


def cluster_name_problem(name: object) -> str | None:
    return _name_problem("cluster name", name, TOPIC_MAX_LENGTH)


def addr_problem(addr: object) -> str | None:
    """``host:port`` with a host name, IPv4 or bracketed IPv6 address, port 0..65535."""
    if not isinstance(addr, str):
        return f"the address must be a string, not {type(addr).__name__}"
    host, sep, port = addr.rpartition(":")
    if not sep or not host or len(host) > HOST_MAX_LENGTH or _HOST.fullmatch(host) is None:
        return f"the address {shown(addr)} is not host:port"
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and int(port) <= 65535):
        return f"the address {shown(addr)} has no valid port"
    return None


def _checked(problem: str | None, name: object) -> str:
    if problem is not None:
        raise InvalidNameError(problem)
    assert isinstance(name, str)
    return name


def check_topic(topic: object) -> str:
    return _checked(topic_problem(topic), topic)


def check_group(group: object) -> str:
    return _checked(group_problem(group), group)


def check_broker_name(name: object) -> str:
    return _checked(broker_name_problem(name), name)


def check_cluster_name(name: object) -> str:
    return _checked(cluster_name_problem(name), name)


def check_addr(addr: object) -> str:
    return _checked(addr_problem(addr), addr)


def is_system_topic(topic: str) -> bool:
    """One of the broker's own topics (SYSTEM_TOPICS or the ``rmq_sys_`` prefix)."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``; InvalidNameError when the group cannot have one."""
    return _derived_topic(RETRY_GROUP_TOPIC_PREFIX, group)


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``; InvalidNameError when the group cannot have one."""
    return _derived_topic(DLQ_GROUP_TOPIC_PREFIX, group)


def _derived_topic(prefix: str, group: str) -> str:
    check_group(group)
    topic = prefix + group
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidNameError(
            f"the group name {shown(group)} is too long for its {prefix} topic: a group with "
            f"retries or a dead-letter queue may have at most "
            f"{TOPIC_MAX_LENGTH - len(prefix)} characters"
        )
    return topic
