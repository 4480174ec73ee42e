"""Subscription expressions (``*``, ``tagA || tagB``) on the client side.

Parsing lives in ``protocol.filter`` so the broker (filtering consume-queue
entries by tag hash) and the client (re-filtering pulled messages by tag
string, since different tags can share a hash) apply the same rules; this
module re-exports it and adds RocketMQ's SubscriptionData.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from protocol.filter import SUB_ALL, parse_sub_expression, tag_codes

__all__ = [
    "SUB_ALL",
    "SubscriptionData",
    "build_subscription",
    "parse_sub_expression",
    "tag_codes",
    "tag_matches",
]


def tag_matches(tags: frozenset[str] | None, tag: str | None) -> bool:
    """Whether a message with ``tag`` is selected by the parsed ``tags`` (None = all)."""
    return tags is None or (tag is not None and tag in tags)


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """A parsed TAG subscription, as RocketMQ's SubscriptionData."""

    topic: str
    sub_string: str
    tags_set: frozenset[str] | None
    code_set: frozenset[int] | None

    @property
    def is_all(self) -> bool:
        return self.tags_set is None

    def matches_tag(self, tag: str | None) -> bool:
        """Client side: the exact tag string."""
        return tag_matches(self.tags_set, tag)

    def matches_code(self, code: int) -> bool:
        """Broker side: a tag hash code from a consume-queue entry."""
        return self.code_set is None or code in self.code_set


@lru_cache(maxsize=1024)
def build_subscription(topic: str, expression: str | None) -> SubscriptionData:
    """Parse ``expression`` for ``topic``. Raises ValueError for an expression
    that names no tag (e.g. ``"||"``)."""
    tags = parse_sub_expression(expression)
    codes = tag_codes(tags)
    sub_string = SUB_ALL if tags is None else (expression or "").strip()
    return SubscriptionData(topic, sub_string, tags, None if codes is None else frozenset(codes))
