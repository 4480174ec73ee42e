"""SlaveSynchronize's parsing: a master's tables are checked before they replace a slave's."""

from __future__ import annotations

from typing import Any

import pytest

from broker.slave_synchronize import (
    parse_delay_offsets,
    parse_groups,
    parse_offsets,
    parse_topics,
)
from protocol.errors import RemoteProtocolError
from protocol.route import DataVersion, TopicConfig


def test_tables_round_trip() -> None:
    cfg = TopicConfig("T", 4, 4)
    topics, version = parse_topics(
        {"topicConfigTable": {"T": cfg.to_dict()}, "dataVersion": {"timestamp": 5, "counter": 2}},
        1024)
    assert topics == {"T": cfg} and version == DataVersion(5, 2)
    assert parse_offsets({"offsetTable": {"T@g": {"0": 7, "3": 9}}}) == {"T@g": {0: 7, 3: 9}}
    assert parse_delay_offsets({"offsetTable": {"1": 4, "18": 0}}) == {1: 4, 18: 0}
    groups, gv = parse_groups({"subscriptionGroupTable": {"g": {"groupName": "g"}},
                               "dataVersion": {"timestamp": 1, "counter": 1}})
    assert list(groups) == ["g"] and gv == DataVersion(1, 1)


@pytest.mark.parametrize("parse,body", [
    (lambda b: parse_topics(b, 1024), {"topicConfigTable": {"a/../b": {"topicName": "a/../b"}}}),
    (lambda b: parse_topics(b, 1024), {"topicConfigTable": {"T": {"topicName": "T",
                                                                  "writeQueueNums": 2**31 - 1}}}),
    (lambda b: parse_topics(b, 1024), {"topicConfigTable": {"T": {"topicName": "U"}}}),
    (lambda b: parse_topics(b, 1024), ["not", "a", "map"]),
    (parse_offsets, {"offsetTable": {"no-separator": {"0": 1}}}),
    (parse_offsets, {"offsetTable": {"T@g\x00": {"0": 1}}}),
    (parse_offsets, {"offsetTable": {"T@g": {"0": -1}}}),
    (parse_offsets, {"offsetTable": {"T@g": {"x": 1}}}),
    (parse_delay_offsets, {"offsetTable": {"0": 1}}),
    (parse_delay_offsets, {"offsetTable": {"1": "x"}}),
    (parse_groups, {"subscriptionGroupTable": {"g": {"groupName": "h"}}}),
    (parse_groups, {"subscriptionGroupTable": {"a b": {"groupName": "a b"}}}),
])
def test_bad_master_tables_are_refused(parse: Any, body: Any) -> None:
    with pytest.raises(RemoteProtocolError):
        parse(body)
