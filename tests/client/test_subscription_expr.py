"""Subscription expression parsing and tag matching."""

from __future__ import annotations

import pytest

from client.subscription import (
    SubscriptionData,
    build_subscription,
    parse_sub_expression,
    tag_codes,
    tag_matches,
)
from protocol.hashing import java_string_hash


@pytest.mark.parametrize("expr", [None, "", "   ", "*", " * "])
def test_all(expr: str | None) -> None:
    assert parse_sub_expression(expr) is None
    assert tag_codes(parse_sub_expression(expr)) is None


def test_tags() -> None:
    assert parse_sub_expression("TagA") == {"TagA"}
    assert parse_sub_expression(" TagA ||TagB|| TagA ") == {"TagA", "TagB"}
    assert parse_sub_expression("a || || b") == {"a", "b"}
    assert tag_codes(parse_sub_expression("a || b")) == {
        java_string_hash("a"),
        java_string_hash("b"),
    }


@pytest.mark.parametrize("expr", ["||", " || || "])
def test_no_tag_is_an_error(expr: str) -> None:
    with pytest.raises(ValueError):
        parse_sub_expression(expr)


def test_tag_matches() -> None:
    tags = parse_sub_expression("Aa || C")
    assert tag_matches(tags, "Aa") and tag_matches(tags, "C")
    assert not tag_matches(tags, "BB")  # same hash as "Aa", different tag
    assert not tag_matches(tags, None)
    assert tag_matches(None, None) and tag_matches(None, "x")


def test_subscription_data() -> None:
    sub = build_subscription("T", " Aa || C ")
    assert isinstance(sub, SubscriptionData)
    assert sub.sub_string == "Aa || C" and not sub.is_all
    assert sub.matches_code(java_string_hash("BB")) and not sub.matches_tag("BB")
    everything = build_subscription("T", "")
    assert everything.sub_string == "*" and everything.is_all
    assert everything.matches_code(123) and everything.matches_tag(None)
