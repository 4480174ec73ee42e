"""Namespaces: one cluster shared by apps whose topics and groups may have the same names
(RocketMQ 4.5+'s ``setNamespace``, RocketMQ 5's ``x-mq-namespace``).

A namespaced name is the namespace, ``%``, then the name (RocketMQ's NamespaceUtil):

- ``TopicA`` in ``app1`` is ``app1%TopicA``; a group ``GID`` is ``app1%GID``;
- a retry or dead-letter topic keeps its prefix in front:
  ``%RETRY%GID`` is ``%RETRY%app1%GID``, ``%DLQ%GID`` is ``%DLQ%app1%GID``;
- system topics (``TBW102``, ``rmq_sys_*``, the schedule and transaction topics,
  RMQ_SYS_TRACE_TOPIC) and system groups (``CID_RMQ_SYS_*``) are shared by all and never
  wrapped;
- a name already in the namespace is left as is (wrapping twice changes nothing);
- an empty namespace or an empty name changes nothing.

``unwrap`` is the way back for what a user sees (a message's topic, a route's topics):
a name in the namespace loses it (its retry/DLQ prefix kept); any other name is
returned as it is. Pure functions, no I/O; the broker's gRPC edge and the SDK share them.
"""

from __future__ import annotations

import re

from protocol.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_system_topic

SEPARATOR = "%"
# RocketMQ's MixAll.CID_SYS_RMQ_TRANS and its other system groups start with this
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
# a namespace: RocketMQ 5 proxy's and the 4.x client's rule (no '%': it separates)
NAMESPACE_MAX_LENGTH = 64
_VALID_NAMESPACE = re.compile(r"[a-zA-Z0-9_-]+")


def namespace_problem(namespace: str) -> str | None:
    """Why ``namespace`` cannot be used (None: it can; "" is no namespace)."""
    if not namespace:
        return None
    if len(namespace) > NAMESPACE_MAX_LENGTH:
        return f"a namespace is at most {NAMESPACE_MAX_LENGTH} characters"
    if not _VALID_NAMESPACE.fullmatch(namespace):
        return "a namespace is made of the characters [a-zA-Z0-9_-]"
    return None


def is_system_resource(name: str) -> bool:
    """A topic or group every namespace shares (never wrapped)."""
    return is_system_topic(name) or name.startswith(SYSTEM_GROUP_PREFIX)


def _split_prefix(name: str) -> tuple[str, str]:
    """(``%RETRY%`` / ``%DLQ%`` / "", the rest)."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if name.startswith(prefix):
            return prefix, name[len(prefix):]
    return "", name


def in_namespace(name: str, namespace: str) -> bool:
    """Whether ``name`` (its retry/DLQ prefix aside) is already in ``namespace``."""
    if not namespace or not name or is_system_resource(name):
        return False
    return _split_prefix(name)[1].startswith(namespace + SEPARATOR)


def wrap(namespace: str, name: str) -> str:
    """``name`` as the namespaced name the broker stores (see the module's rules)."""
    if not namespace or not name or is_system_resource(name) or in_namespace(name, namespace):
        return name
    prefix, rest = _split_prefix(name)
    if is_system_resource(rest):
        return name
    return f"{prefix}{namespace}{SEPARATOR}{rest}"


def unwrap(namespace: str, name: str) -> str:
    """``name`` as the app in ``namespace`` knows it: the namespace removed when it
    is there (a retry/DLQ prefix kept), else ``name`` unchanged."""
    if not namespace or not in_namespace(name, namespace):
        return name
    prefix, rest = _split_prefix(name)
    return prefix + rest[len(namespace) + len(SEPARATOR):]


__all__ = ["NAMESPACE_MAX_LENGTH", "SEPARATOR", "in_namespace", "is_system_resource",
           "namespace_problem", "unwrap", "wrap"]
