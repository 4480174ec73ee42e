"""Subscription expression parsing and tag matching."""

from __future__ import annotations

import pytest

from client.errors import MQClientError
from client.subscription import (
    MessageSelector,
    SqlParseError,
    SubscriptionData,
    build_subscription,
    parse_sub_expression,
    subscription_of,
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


# ---------------------------------------------------------------- MessageSelector


def test_selectors() -> None:
    sql = subscription_of("T", MessageSelector.by_sql("a > 5 AND TAGS = 'x'"))
    assert (sql.expression_type, sql.sub_string) == ("SQL92", "a > 5 AND TAGS = 'x'")
    # the broker evaluates it: the client keeps every message it is sent
    assert sql.tags_set is None and sql.code_set is None and not sql.is_all
    assert sql.matches_tag("anything") and sql.sql is not None
    assert sql.sql.matches_properties({"a": "6", "TAGS": "x"})
    tag = subscription_of("T", MessageSelector.by_tag("A || B"))
    assert tag == build_subscription("T", "A || B") and tag.expression_type == "TAG"
    assert subscription_of("T", MessageSelector.by_tag(None)).is_all
    assert subscription_of("T", "A") == build_subscription("T", "A")


def test_bad_selectors() -> None:
    with pytest.raises(SqlParseError, match="column 7"):
        subscription_of("T", MessageSelector.by_sql("a > 5 b"))
    with pytest.raises(ValueError, match="unknown expression type"):
        subscription_of("T", MessageSelector("XPATH", "//a"))
    with pytest.raises(ValueError, match="MessageSelector"):
        subscription_of("T", 5)  # type: ignore[arg-type]


def test_consumers_send_the_type_and_version() -> None:
    from client.consumer_api import pull_request
    from client.lite_pull_consumer import LitePullConsumer
    from protocol.headers import PullMessageRequestHeader
    from protocol.message import MessageQueue

    c = LitePullConsumer("g", "127.0.0.1:1")
    with pytest.raises(MQClientError, match="column 4"):
        c.subscribe("T", MessageSelector.by_sql("a ="))
    c.subscribe("T", MessageSelector.by_sql("a = 1"))
    c.subscribe("U", "*")
    subs = {s["topic"]: s for s in c.consumer_data()["subscriptionDataSet"]}
    assert subs["T"]["expressionType"] == "SQL92" and subs["T"]["subString"] == "a = 1"
    assert subs["U"]["expressionType"] == "TAG"
    assert subs["T"]["subVersion"] > 1_600_000_000_000  # made now, in ms (RocketMQ's)
    cmd = pull_request("g", MessageQueue("T", "b", 0), c.subscriptions["T"], 0, 32)
    h = PullMessageRequestHeader.from_fields(cmd.ext_fields)
    assert (h.expression_type, h.subscription, h.sub_version) == (
        "SQL92", "a = 1", subs["T"]["subVersion"])
