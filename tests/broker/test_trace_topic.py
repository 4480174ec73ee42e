"""The broker's part of message trace: traceTopicEnable makes the trace topic, the
trace topic takes sends (the one system topic that does), and every send response
carries regionId and traceOn as RocketMQ's (MSG_REGION, TRACE_ON)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.controller import BrokerController
from broker.topic_config_manager import TopicConfigManager
from broker.topic_validator import check_user_topic
from protocol.codes import RequestCode, ResponseCode
from protocol.names import RMQ_SYS_TRACE_TOPIC
from protocol.route import PERM_RW, TopicConfig
from tests.broker.test_send_v2 import send, stored, v2_fields


def config(tmp_path: Path, **kw: Any) -> BrokerConfig:
    return BrokerConfig(store_path_root_dir=str(tmp_path), listen_port=0,
                        maped_file_size_commit_log=1 << 20, maped_file_size_consume_queue=100 * 20,
                        max_hash_slot_num=64, max_index_num=256, **kw)


def test_trace_topic_made_only_when_enabled(tmp_path: Path) -> None:
    assert TopicConfigManager(config(tmp_path)).get(RMQ_SYS_TRACE_TOPIC) is None
    topics = TopicConfigManager(config(tmp_path, trace_topic_enable=True))
    assert topics.get(RMQ_SYS_TRACE_TOPIC) == TopicConfig(RMQ_SYS_TRACE_TOPIC, 1, 1, PERM_RW)
    assert RMQ_SYS_TRACE_TOPIC in topics.to_wire()["topicConfigTable"]  # registered
    custom = TopicConfigManager(config(tmp_path, trace_topic_enable=True,
                                       msg_trace_topic_name="MyTrace"))
    assert custom.get("MyTrace") == TopicConfig("MyTrace", 1, 1)
    assert custom.get(RMQ_SYS_TRACE_TOPIC) is None


def test_trace_config_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="msgTraceTopicName"):
        config(tmp_path, msg_trace_topic_name="bad name").validate()
    with pytest.raises(ConfigError, match="regionId"):
        config(tmp_path, region_id="a\x01b").validate()


def test_trace_topic_is_the_system_topic_producers_may_send_to() -> None:
    assert check_user_topic(RMQ_SYS_TRACE_TOPIC) is None
    for topic in ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_TRACE_DATA_R1"):
        assert "reserved" in (check_user_topic(topic) or "")


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[BrokerController]:
    c = BrokerController(config(tmp_path, trace_topic_enable=True, region_id="RegionX",
                                trace_on=False))
    c._load()
    try:
        yield c
    finally:
        c._persist_and_close()


def test_send_to_trace_topic_and_response_fields(traced: BrokerController) -> None:
    body = "Pub\x011\x01R\x01pg\x01T\x01ID\x01null\x01null\x01h\x011\x011\x010\x01\x01true\x02"
    r = send(traced, RequestCode.SEND_MESSAGE_V2,
             v2_fields(b=RMQ_SYS_TRACE_TOPIC, e="0", i="KEYS\x01ID\x02"), body.encode())
    assert r is not None
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert (r.ext_fields["MSG_REGION"], r.ext_fields["TRACE_ON"]) == ("RegionX", "false")
    [msg] = stored(traced, RMQ_SYS_TRACE_TOPIC, 0)
    assert msg.body.decode() == body and msg.keys == "ID"
    # what the broker's own system topics are stays refused
    r = send(traced, RequestCode.SEND_MESSAGE_V2, v2_fields(b="SCHEDULE_TOPIC_XXXX"), b"x")
    assert r is not None and r.code == ResponseCode.MESSAGE_ILLEGAL


def test_default_response_fields(tmp_path: Path) -> None:
    c = BrokerController(config(tmp_path))
    c._load()
    try:
        c.topic_config_manager.update(TopicConfig("T", 2, 2))
        r = send(c, RequestCode.SEND_MESSAGE_V2, v2_fields(), b"hello")
        assert r is not None and r.code == ResponseCode.SUCCESS
        assert (r.ext_fields["MSG_REGION"], r.ext_fields["TRACE_ON"]) == ("DefaultRegion", "true")
    finally:
        c._persist_and_close()
