"""Client-side checks of names, bodies and properties."""

from __future__ import annotations

import pytest

from client.errors import MQClientError
from client.validators import TopicChecker, check_group, check_topic, encode_properties
from protocol.message import properties_to_string, string_to_properties


@pytest.mark.parametrize(
    "props",
    [
        {},
        {"UNIQ_KEY": "ABC"},
        {"TAGS": "TagA", "KEYS": "k1 k2", "x": "", "ü": "€"},
    ],
)
def test_encode_properties_matches_protocol_encoding(props: dict[str, str]) -> None:
    text = encode_properties(props)
    assert text == properties_to_string(props)
    assert string_to_properties(text) == props


def test_encode_properties_non_str_value_is_stringified() -> None:
    assert encode_properties({"n": 5}) == "n\x015\x02"  # type: ignore[dict-item]


@pytest.mark.parametrize("bad", [{"a\x01": "b"}, {"a": "b\x02"}, {"a": "\x01"}])
def test_encode_properties_rejects_separators(bad: dict[str, str]) -> None:
    with pytest.raises(MQClientError, match="may not contain"):
        encode_properties(bad)


def test_encode_properties_size_limit() -> None:
    with pytest.raises(MQClientError, match="32767"):
        encode_properties({"big": "x" * 40000})
    with pytest.raises(MQClientError, match="32767"):
        encode_properties({"big": "€" * 11000})  # 33000 bytes in UTF-8


def test_topic_and_group_names() -> None:
    for ok in ("T", "a-b_c|%1", "x" * 127):
        check_topic(ok)
    for bad in ("", "a b", "a/b", "x" * 128, "TBW102"):
        with pytest.raises(MQClientError):
            check_topic(bad)
    check_group("g-1")
    with pytest.raises(MQClientError):
        check_group("g 1")


def test_topic_checker_caches_valid_names_only() -> None:
    checker = TopicChecker(limit=2)
    for topic in ("a", "b", "c", "a"):
        checker.check(topic)
    with pytest.raises(MQClientError):
        checker.check("bad topic")
    with pytest.raises(MQClientError):
        checker.check("bad topic")
