"""The pure pieces of mqadmin's group and KV commands (client/admin_groups.py) and the
reset body a broker sends consumers (protocol/client_data.py ResetOffsetBody)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from client.admin_cli import cli
from client.admin_groups import merged_group_config, new_group_config, order_conf_problem
from protocol.client_data import MAX_QUEUES_PER_RESET, ResetOffsetBody
from protocol.errors import RemoteProtocolError
from protocol.message import MessageQueue
from protocol.subscription_group import SubscriptionGroupConfig


def test_a_new_group_starts_from_rocketmqs_tool_defaults() -> None:
    cfg = merged_group_config("g", None, {"retryMaxTimes": 3})
    assert cfg == SubscriptionGroupConfig("g", consume_from_min_enable=False,
                                          consume_broadcast_enable=False, retry_max_times=3)
    assert str(cfg) == (
        "SubscriptionGroupConfig [groupName=g, consumeEnable=true, consumeFromMinEnable=false, "
        "consumeBroadcastEnable=false, retryQueueNums=1, retryMaxTimes=3, brokerId=0, "
        "whichBrokerWhenConsumeSlowly=1, notifyConsumerIdsChangedEnable=true, "
        "consumeMessageOrderly=false]")
    assert new_group_config("g")["consumeEnable"] is True


def test_an_existing_group_keeps_what_is_not_given() -> None:
    current = SubscriptionGroupConfig("g", retry_max_times=7, consume_broadcast_enable=True,
                                      broker_id=1).to_dict()
    cfg = merged_group_config("g", current, {"consumeEnable": False})
    assert (cfg.consume_enable, cfg.retry_max_times, cfg.consume_broadcast_enable,
            cfg.broker_id) == (False, 7, True, 1)
    # the broker's stored name wins over anything in the table, values are checked
    assert merged_group_config("g", {**current, "groupName": "other"}, {}).group_name == "g"
    with pytest.raises(click.BadParameter, match="retryQueueNums"):
        merged_group_config("g", {**current, "retryQueueNums": "many"}, {})


@pytest.mark.parametrize("conf, problem", [
    ("broker-a:4", None),
    ("broker-a:4;broker-b:8", None),
    (" broker-a : 4 ; broker-b:1 ", None),
    ("broker-a", "is not brokerName:queueNums"),
    ("broker-a:0", "is not brokerName:queueNums"),
    ("broker-a:x", "is not brokerName:queueNums"),
    (":4", "is not brokerName:queueNums"),
    ("broker-a:4;", "is not brokerName:queueNums"),
    ("broker-a:4;broker-a:2", "given twice"),
])
def test_order_conf(conf: str, problem: str | None) -> None:
    got = order_conf_problem(conf)
    assert got is None if problem is None else problem in (got or "")


def test_reset_offset_body_round_trip_and_checks() -> None:
    body = ResetOffsetBody({MessageQueue("T", "b", 1): 9, MessageQueue("T", "b", 0): 4})
    wire = body.to_dict()
    assert [e["queueId"] for e in wire["offsetTable"]] == [0, 1]
    assert ResetOffsetBody.from_wire(wire) == body
    for bad, where in (([], "must be a map"),
                       ({"offsetTable": [{"topic": "T", "brokerName": "b", "queueId": 0}]},
                        "offset"),
                       ({"offsetTable": [{"topic": "T", "brokerName": "b", "queueId": 0,
                                          "offset": -1}]}, "offset"),
                       ({"offsetTable": [{"topic": "a b", "brokerName": "b", "queueId": 0,
                                          "offset": 1}]}, "topic"),
                       ({"offsetTable": [{}] * (MAX_QUEUES_PER_RESET + 1)}, "at most")):
        with pytest.raises(RemoteProtocolError, match=where):
            ResetOffsetBody.from_wire(bad)


def test_every_command_is_on_the_mqadmin_page() -> None:
    """docs/mqadmin.md lists every registered mqadmin command (a new one needs its line)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "mqadmin.md").read_text()
    assert [c for c in sorted(cli.commands) if f"`{c}`" not in doc] == []
