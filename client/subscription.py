"""Subscriptions on the client side: tag expressions (``*``, ``tagA || tagB``)
and SQL92 property filters, chosen with RocketMQ's ``MessageSelector``.

Tag parsing lives in ``protocol.filter`` so the broker (filtering consume-queue
entries by tag hash) and the client (re-filtering pulled messages by tag
string, since different tags can share a hash) apply the same rules; SQL92
expressions are compiled by ``protocol.filter_sql`` here too, so a bad one is
refused before it is sent (the broker evaluates them: the client does not
re-filter what an SQL92 pull returns). This module adds RocketMQ's
SubscriptionData and MessageSelector.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from protocol.filter import SUB_ALL, parse_sub_expression, tag_codes
from protocol.filter_sql import SQL92, TAG, SqlFilter, SqlParseError, compile_sql, is_tag_type

__all__ = [
    "SQL92",
    "SUB_ALL",
    "TAG",
    "MessageSelector",
    "SqlParseError",
    "SubscriptionData",
    "build_subscription",
    "parse_sub_expression",
    "subscription_of",
    "tag_codes",
    "tag_matches",
]


def tag_matches(tags: frozenset[str] | None, tag: str | None) -> bool:
    """Whether a message with ``tag`` is selected by the parsed ``tags`` (None = all)."""
    return tags is None or (tag is not None and tag in tags)


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """How a consumer selects messages of a topic (RocketMQ's MessageSelector):
    ``MessageSelector.by_tag("TagA || TagB")`` or
    ``MessageSelector.by_sql("a > 5 AND TAGS = 'TagA'")`` (the broker needs
    ``enablePropertyFilter=true`` for SQL92)."""

    expression_type: str
    expression: str

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        """An SQL92 expression over message properties (docs/filters.md)."""
        return cls(SQL92, sql)

    @classmethod
    def by_tag(cls, tag: str | None) -> MessageSelector:
        """A tag expression: ``*`` (or empty, or None) for every message, else
        ``tagA || tagB``."""
        return cls(TAG, tag or SUB_ALL)


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """A parsed subscription, as RocketMQ's SubscriptionData. For SQL92
    ``tags_set`` and ``code_set`` are None (no tag filtering on the client)
    and ``sql`` holds the compiled expression."""

    topic: str
    sub_string: str
    tags_set: frozenset[str] | None
    code_set: frozenset[int] | None
    expression_type: str = TAG
    sub_version: int = 0
    sql: SqlFilter | None = None

    @property
    def is_all(self) -> bool:
        return self.tags_set is None and self.sql is None

    def matches_tag(self, tag: str | None) -> bool:
        """Client side: the exact tag string."""
        return tag_matches(self.tags_set, tag)

    def matches_code(self, code: int) -> bool:
        """Broker side: a tag hash code from a consume-queue entry."""
        return self.code_set is None or code in self.code_set


@lru_cache(maxsize=1024)
def build_subscription(topic: str, expression: str | None,
                       expression_type: str = TAG) -> SubscriptionData:
    """Parse ``expression`` of ``expression_type`` for ``topic``. Raises
    ValueError for a tag expression that names no tag (e.g. ``"||"``), an
    SQL92 expression that does not compile (SqlParseError, saying where) or
    an unknown type."""
    if is_tag_type(expression_type):
        tags = parse_sub_expression(expression)
        codes = tag_codes(tags)
        sub_string = SUB_ALL if tags is None else (expression or "").strip()
        return SubscriptionData(topic, sub_string, tags,
                                None if codes is None else frozenset(codes))
    if expression_type != SQL92:
        raise ValueError(f"unknown expression type {expression_type!r} (TAG or SQL92)")
    if expression is None:
        raise ValueError("an SQL92 subscription needs an expression")
    return SubscriptionData(topic, expression, None, None, SQL92, sql=compile_sql(expression))


def subscription_of(topic: str,
                    selector: str | MessageSelector | None) -> SubscriptionData:
    """``build_subscription`` of a tag expression or a MessageSelector."""
    if isinstance(selector, MessageSelector):
        return build_subscription(topic, selector.expression, selector.expression_type)
    if selector is not None and not isinstance(selector, str):
        raise ValueError("a subscription is a tag expression or a MessageSelector, not "
                         f"{type(selector).__name__}")
    return build_subscription(topic, selector)
