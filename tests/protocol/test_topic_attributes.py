"""Topic attributes (protocol/topic_attributes.py): RocketMQ 5's ``+key=value``
/ ``-key`` updates, the checks on them, the stored map's bounds, and the
message-type rule a gRPC send is held to. Pure."""

from __future__ import annotations

import pytest

from protocol.errors import RemoteProtocolError
from protocol.route import TopicConfig
from protocol.topic_attributes import (
    MAX_ATTRIBUTES,
    MESSAGE_TYPE,
    MESSAGE_TYPES,
    AttributeProblem,
    alter,
    checked_attributes,
    format_changes,
    parse_changes,
    topic_message_type,
    type_conflict,
)


@pytest.mark.parametrize(("text", "changes"), [
    (None, {}),
    ("", {}),
    ("+message.type=FIFO", {MESSAGE_TYPE: "FIFO"}),
    (" +a=1 , -b ", {"a": "1", "b": None}),
])
def test_parse_changes(text: str | None, changes: dict[str, str | None]) -> None:
    assert parse_changes(text) == changes
    assert parse_changes(format_changes(changes)) == changes


@pytest.mark.parametrize(("text", "why"), [
    ("message.type=FIFO", "+key=value"),
    ("+message.type", "+key=value"),
    ("-message.type=FIFO", "+key=value"),
    ("+message.type=", "no value"),
    ("+=x", "1..255"),
    ("+a=1,+a=2", "named twice"),
    ("+a=" + "x" * 300, "1..255"),
    ("+a=1," * 1000, "longer than"),
])
def test_bad_updates_are_refused_with_a_reason(text: str, why: str) -> None:
    with pytest.raises(AttributeProblem) as caught:
        parse_changes(text)
    assert why in str(caught.value)


def test_alter_sets_changes_and_removes_and_keeps_the_rest() -> None:
    assert alter({}, {MESSAGE_TYPE: "FIFO"}, create=True) == {MESSAGE_TYPE: "FIFO"}
    assert alter({MESSAGE_TYPE: "FIFO"}, {MESSAGE_TYPE: "DELAY"}, create=False) \
        == {MESSAGE_TYPE: "DELAY"}
    assert alter({MESSAGE_TYPE: "FIFO"}, {}, create=False) == {MESSAGE_TYPE: "FIFO"}
    assert alter({MESSAGE_TYPE: "FIFO"}, {MESSAGE_TYPE: None}, create=False) == {}
    for value in MESSAGE_TYPES:
        assert alter({}, {MESSAGE_TYPE: value}, create=True) == {MESSAGE_TYPE: value}


@pytest.mark.parametrize(("current", "changes", "create", "why"), [
    ({}, {MESSAGE_TYPE: "fifo"}, True, "not one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED"),
    ({}, {MESSAGE_TYPE: "BATCH"}, False, "not one of"),
    ({}, {"queue.type": "X"}, True, "unsupported attribute 'queue.type'"),
    ({}, {MESSAGE_TYPE: None}, True, "only an existing topic"),
    ({}, {MESSAGE_TYPE: None}, False, "does not have"),
])
def test_alter_refusals(current: dict[str, str], changes: dict[str, str | None],
                        create: bool, why: str) -> None:
    with pytest.raises(AttributeProblem, match=why):
        alter(current, changes, create=create)


def test_type_conflict_follows_rocketmq_5s_validator() -> None:
    assert type_conflict(None, "FIFO") is None  # no attribute: any type
    assert type_conflict("MIXED", "DELAY") is None
    assert type_conflict("FIFO", "FIFO") is None
    why = type_conflict("FIFO", "NORMAL")
    assert why == ("TopicMessageType validate failed, the expected type is FIFO, "
                   "but actual type is NORMAL")
    assert type_conflict("NORMAL", "DELAY") is not None
    assert topic_message_type({MESSAGE_TYPE: "FIFO"}) == "FIFO"
    assert topic_message_type({MESSAGE_TYPE: "junk"}) is None and topic_message_type({}) is None


def test_topic_config_carries_attributes_only_when_set() -> None:
    plain = TopicConfig("T", 4, 4)
    assert "attributes" not in plain.to_dict()  # unchanged for readers that predate them
    typed = TopicConfig("T", 4, 4, attributes={MESSAGE_TYPE: "FIFO"})
    assert typed.to_dict()["attributes"] == {MESSAGE_TYPE: "FIFO"}
    assert TopicConfig.from_dict(typed.to_dict()) == typed
    assert TopicConfig.from_dict(plain.to_dict()).attributes == {}


@pytest.mark.parametrize("raw", [
    ["message.type"],
    {"k": 1},
    {f"k{i}": "v" for i in range(MAX_ATTRIBUTES + 1)},
    {"k": "v" * 256},
])
def test_stored_attributes_are_bounded(raw: object) -> None:
    with pytest.raises(ValueError):
        checked_attributes(raw)
    with pytest.raises(RemoteProtocolError):
        TopicConfig.from_dict({"topicName": "T", "attributes": raw})
