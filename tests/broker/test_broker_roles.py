"""brokerRole decides what a broker does: a SLAVE refuses sends (before any
topic is created) and serves reads; the schedule service runs only on a
master; no HA address is advertised until something listens on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import BrokerConfig, BrokerRole
from broker.controller import BrokerController
from broker.pull_processor import FLAG_SUBSCRIPTION
from broker.schedule_service import ScheduleMessageService
from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager
from protocol.batch import encode_batch
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    GetMaxOffsetRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from protocol.route import TopicConfig
from tests.broker.fakes import FakeConn, call
from tests.broker.store.helpers import inner

SLAVE_REMARK = "the broker[broker-a] is a slave, sending message is forbidden"


def config(root: Path, role: BrokerRole = BrokerRole.SLAVE, broker_id: int = 1) -> BrokerConfig:
    return BrokerConfig(
        store_path_root_dir=str(root), broker_role=role, broker_id=broker_id, listen_port=0,
        maped_file_size_commit_log=1 << 20, maped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64, max_index_num=256,
    )


@pytest.fixture
def slave(tmp_path: Path) -> Iterator[BrokerController]:
    c = BrokerController(config(tmp_path))
    c._load()
    # what replication will bring: a topic and two of its messages
    c.topic_config_manager.update(TopicConfig("T", 1, 1))
    for body in (b"one", b"two"):
        c.message_store.put_message(inner("T", 0, body))
    try:
        yield c
    finally:
        c._persist_and_close()


def test_slave_refuses_sends(slave: BrokerController) -> None:
    before = slave.message_store.get_max_phy_offset()
    for code, body in ((RequestCode.SEND_MESSAGE, b"x"),
                       (RequestCode.SEND_BATCH_MESSAGE, encode_batch([(0, b"x", "")]))):
        for topic in ("T", "NewTopic"):
            fields = SendMessageRequestHeader(producer_group="p", topic=topic, queue_id=0).to_fields()
            r = call(slave, code, fields, body)
            assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, SLAVE_REMARK)
    back = ConsumerSendMsgBackRequestHeader(offset=0, group="g", delay_level=0).to_fields()
    r = call(slave, RequestCode.CONSUMER_SEND_MSG_BACK, back)
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, SLAVE_REMARK)
    assert slave.topic_config_manager.get("NewTopic") is None  # nothing auto-created
    assert slave.topic_config_manager.get("%RETRY%g") is None
    assert slave.message_store.get_max_phy_offset() == before


def test_slave_serves_reads(slave: BrokerController) -> None:
    pull = PullMessageRequestHeader(consumer_group="g", topic="T", queue_id=0, queue_offset=0,
                                    max_msg_nums=32, sys_flag=FLAG_SUBSCRIPTION).to_fields()
    r = call(slave, RequestCode.PULL_MESSAGE, pull)
    assert r.code == ResponseCode.SUCCESS and r.body
    r = call(slave, RequestCode.GET_MAX_OFFSET,
             GetMaxOffsetRequestHeader(topic="T", queue_id=0).to_fields())
    assert (r.code, r.ext_fields["offset"]) == (ResponseCode.SUCCESS, 2)
    update = UpdateConsumerOffsetRequestHeader(consumer_group="g", topic="T", queue_id=0,
                                               commit_offset=1).to_fields()
    assert call(slave, RequestCode.UPDATE_CONSUMER_OFFSET, update).code == ResponseCode.SUCCESS
    query = QueryConsumerOffsetRequestHeader(consumer_group="g", topic="T", queue_id=0).to_fields()
    r = call(slave, RequestCode.QUERY_CONSUMER_OFFSET, query)
    assert (r.code, r.ext_fields["offset"]) == (ResponseCode.SUCCESS, 1)
    assert call(slave, RequestCode.GET_ALL_TOPIC_CONFIG, {}).code == ResponseCode.SUCCESS


@pytest.mark.parametrize(("role", "code"), [
    (BrokerRole.ASYNC_MASTER, ResponseCode.SUCCESS),
    # stored, but no slave holds it: the producer is told so
    (BrokerRole.SYNC_MASTER, ResponseCode.SLAVE_NOT_AVAILABLE),
])
def test_master_still_takes_sends(tmp_path: Path, role: BrokerRole, code: int) -> None:
    c = BrokerController(config(tmp_path, role, 0))
    c._load()
    try:
        fields = SendMessageRequestHeader(producer_group="p", topic="T", queue_id=0).to_fields()
        assert call(c, RequestCode.SEND_MESSAGE, fields, b"x").code == code
    finally:
        c._persist_and_close()


@pytest.mark.parametrize(("role", "broker_id", "runs"), [
    (BrokerRole.ASYNC_MASTER, 0, True), (BrokerRole.SYNC_MASTER, 0, True),
    (BrokerRole.SLAVE, 1, False),
])
async def test_schedule_service_only_on_a_master(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, role: BrokerRole, broker_id: int, runs: bool
) -> None:
    started: list[ScheduleMessageService] = []

    async def run(self: ScheduleMessageService, task_status: Any = trio.TASK_STATUS_IGNORED
                  ) -> None:
        started.append(self)
        task_status.started()
        await trio.sleep_forever()

    monkeypatch.setattr(ScheduleMessageService, "run", run)
    c = BrokerController(config(tmp_path, role, broker_id))
    async with trio.open_nursery() as nursery:
        with trio.fail_after(20):
            await nursery.start(c.run)
        assert c.started
        assert started == ([c.schedule_service] if runs else [])
        c.request_shutdown()


def test_no_ha_address_until_the_ha_service_listens(tmp_path: Path) -> None:
    c = BrokerController(config(tmp_path, BrokerRole.ASYNC_MASTER, 0))
    assert c.ha_server_addr is None
    c.ha_listen_port = 10912  # what the HA service sets once it listens
    assert c.ha_server_addr == "127.0.0.1:10912"


def test_name_server_takes_registrations_without_an_ha_address() -> None:
    routes = RouteInfoManager()
    table = NamesrvProcessor(routes, lambda: 0.0).handler_table()

    def register(addr: str, broker_id: int, ha: str | None) -> RegisterBrokerResponseHeader:
        fields = RegisterBrokerRequestHeader(
            broker_name="broker-a", broker_addr=addr, cluster_name="C", broker_id=broker_id,
            ha_server_addr=ha).to_fields()
        assert ("haServerAddr" in fields) == (ha is not None)
        handler, _ = table.lookup(RequestCode.REGISTER_BROKER)
        assert handler is not None
        body = pack_body({"topicConfigTable": {"T": {"topicName": "T"}}})
        r = handler(FakeConn(), RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body))
        assert r is not None and r.code == ResponseCode.SUCCESS, r
        return RegisterBrokerResponseHeader.from_fields(r.ext_fields)

    assert register("127.0.0.1:10911", 0, None) == RegisterBrokerResponseHeader()
    # a slave learns its master's address; no HA address while the master has none
    assert register("127.0.0.1:10921", 1, None) == RegisterBrokerResponseHeader(
        None, "127.0.0.1:10911")
    register("127.0.0.1:10911", 0, "127.0.0.1:10912")
    assert register("127.0.0.1:10921", 1, None) == RegisterBrokerResponseHeader(
        "127.0.0.1:10912", "127.0.0.1:10911")
    assert routes.broker_addr_table["broker-a"].broker_addrs == {
        0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}
