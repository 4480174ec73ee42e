"""GET_CONSUME_STATS carries consumeTps: the group's GROUP_GET_NUMS over the last minute."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.controller import BrokerController
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.route import TopicConfig
from tests.broker.fakes import FakeConn


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerController]:
    c = BrokerController(BrokerConfig(
        store_path_root_dir=str(tmp_path), listen_port=0, maped_file_size_commit_log=1 << 20,
        maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64, max_index_num=256))
    c._load()
    for topic in ("A", "B"):
        c.topic_config_manager.update(TopicConfig(topic, 1, 1))
        c.consumer_offset_manager.commit_offset("g", topic, 0, 0)
    try:
        yield c
    finally:
        c._persist_and_close()


def consume_tps(c: BrokerController, **fields: str) -> float:
    handler, _ = c._handler_table().lookup(RequestCode.GET_CONSUME_STATS)
    assert handler is not None
    response = handler(FakeConn(), RemotingCommand.request(  # type: ignore[arg-type]
        RequestCode.GET_CONSUME_STATS, {"consumerGroup": "g", **fields}))
    assert response is not None and response.code == ResponseCode.SUCCESS
    body = response.decode_body()
    assert len(body["offsetTable"]) == (1 if fields else 2)
    tps: float = body["consumeTps"]
    return tps


def test_consume_tps_is_the_minute_rate_of_the_group_pulls(broker: BrokerController) -> None:
    stats = broker.stats
    assert consume_tps(broker) == 0  # nothing pulled yet
    now = stats.last_tick  # the stats' own clock (monotonic seconds)
    for _ in range(7):  # a minute of 10 s ticks: 30 messages of A and 6 of B each
        stats.record_get("A", "g", 30, 3000)
        stats.record_get("B", "g", 6, 600)
        stats.record_get("A", "other", 100, 100)  # another group's pulls do not count
        now += 10
        stats.tick(now)
    assert consume_tps(broker) == pytest.approx(3.6)
    assert consume_tps(broker, topic="A") == pytest.approx(3.0)
