"""Tag subscription expressions: ``*`` (everything) or ``tagA || tagB``."""

from __future__ import annotations

from protocol.hashing import java_string_hash

SUB_ALL = "*"


def parse_sub_expression(expression: str | None) -> frozenset[str] | None:
    """The set of tags an expression selects, or None for every message.

    Raises ValueError for an expression that selects nothing (e.g. ``"||"``).
    """
    if expression is None:
        return None
    text = expression.strip()
    if not text or text == SUB_ALL:
        return None
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not tags:
        raise ValueError(f"subscription expression {expression!r} names no tag")
    if SUB_ALL in tags:
        return None
    return tags


def tag_codes(tags: frozenset[str] | None) -> set[int] | None:
    """Consume-queue tag hashes for a parsed expression (None = all)."""
    return None if tags is None else {java_string_hash(t) for t in tags}
