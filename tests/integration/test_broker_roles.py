"""Real brokers: one broker per store directory; a SLAVE refuses sends and
serves reads; keys without effect here are noted once."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.pull_processor import FLAG_SUBSCRIPTION
from broker.store import DefaultMessageStore, PutMessageStatus, StoreConfig
from client import Message, Producer, PullConsumer, PullStatus, SendStatus
from client.admin import MQAdmin
from protocol.batch import encode_batch
from protocol.body import unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    GetMaxOffsetRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from protocol.record import decode_records
from protocol.route import MASTER_ID
from protocol.trio.client import RemotingClient
from tests.broker.store.helpers import inner
from tests.integration.cluster import Cluster, free_port
from tests.waits import routed, wait_until

TOPIC = "RoleTopic"
NOTICE = "config key accepted, no effect here"


async def test_second_broker_on_a_store_directory_is_refused(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    first = cluster.broker("broker-a", ns.addr)
    store = cluster.root / "store-broker-a"
    second = cluster.broker("broker-a-again", ns.addr, start=False, brokerName="broker-a",
                            storePathRootDir=store)
    with pytest.raises(RuntimeError, match="exited"):
        second.start()
    assert second.proc is not None and second.proc.returncode not in (0, None)
    assert first.proc is not None
    log = second.log_text()
    assert f"the store directory {store} is locked by the process with pid {first.proc.pid}" in log
    assert "broker started" not in log
    assert "broker cannot start" in log  # one line saying what to fix, no traceback

    # the first broker never noticed
    assert first.proc.poll() is None
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=first.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
    async with Producer("lock-producer", ns.addr) as producer:
        r = await producer.send(Message(TOPIC, b"still serving"))
        assert r.send_status is SendStatus.SEND_OK
    async with PullConsumer("lock-consumer", ns.addr) as consumer:
        (mq,) = await consumer.fetch_subscribe_message_queues(TOPIC)
        pulled = await consumer.pull(mq, "*", 0, 32)
        assert pulled.pull_status is PullStatus.FOUND
        assert [m.body for m in pulled.msg_found_list] == [b"still serving"]
    assert first.stop() == 0
    # once the first is gone the directory is free again
    second.start()
    assert second.stop() == 0


def seed_store(root: Path, bodies: list[bytes]) -> None:
    """What replication will bring a slave: records in its own store."""
    cfg = BrokerConfig(store_path_root_dir=str(root), maped_file_size_commit_log=64 * 1024 * 1024,
                       maped_file_size_consume_queue=200_000 * 20, max_hash_slot_num=50_000,
                       max_index_num=200_000)
    store = DefaultMessageStore(StoreConfig.from_broker(cfg))
    assert store.load()
    store.start()
    for body in bodies:
        assert store.put_message(inner(TOPIC, 0, body)).put_message_status is PutMessageStatus.PUT_OK
    store.shutdown()


async def test_slave_refuses_sends_and_serves_reads(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    master = cluster.broker("broker-a", ns.addr, sendMessageThreadPoolNums=16,
                            pullMessageThreadPoolNums=16, flushCommitLogLeastPages=4)
    seed_store(cluster.root / "store-broker-a-s", [b"r0", b"r1", b"r2"])
    # a log its master never wrote: pointed at no master, so that neither refuses
    # the other (tests/integration/test_ha_lineage.py has what happens then)
    slave = cluster.broker("broker-a-s", ns.addr, brokerName="broker-a", brokerId=1,
                           brokerRole="SLAVE", haMasterAddress=f"127.0.0.1:{free_port(1)}")
    async with MQAdmin(ns.addr) as admin:
        for addr in (master.addr, slave.addr):  # admin writes reach a slave too
            await admin.create_topic(TOPIC, broker_addr=addr, read_queue_nums=1,
                                     write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
        route = await admin.topic_route(TOPIC)
        (data,) = route.broker_datas
        assert data.broker_addrs == {MASTER_ID: master.addr, 1: slave.addr}

    # a producer's sends go to the master
    async with Producer("role-producer", ns.addr) as producer:
        r = await producer.send(Message(TOPIC, b"to the master"))
        assert r.send_status is SendStatus.SEND_OK

    remark = "the broker[broker-a] is a slave, sending message is forbidden"
    async with RemotingClient() as rc:
        async def ask(code: int, fields: dict[str, object], body: bytes | None = None
                      ) -> RemotingCommand:
            return await rc.invoke(slave.addr, RemotingCommand.request(code, fields, body), 10)

        send = SendMessageRequestHeader(producer_group="p", topic=TOPIC, queue_id=0).to_fields()
        for code, body in ((RequestCode.SEND_MESSAGE, b"x"),
                           (RequestCode.SEND_BATCH_MESSAGE, encode_batch([(0, b"x", "")]))):
            r = await ask(code, send, body)
            assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, remark)
        back = ConsumerSendMsgBackRequestHeader(offset=0, group="g", delay_level=0).to_fields()
        r = await ask(RequestCode.CONSUMER_SEND_MSG_BACK, back)
        assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, remark)

        # pulls, offsets and admin reads are served
        pull = PullMessageRequestHeader(consumer_group="g", topic=TOPIC, queue_id=0,
                                        queue_offset=0, max_msg_nums=32,
                                        sys_flag=FLAG_SUBSCRIPTION).to_fields()
        r = await ask(RequestCode.PULL_MESSAGE, pull)
        assert r.code == ResponseCode.SUCCESS and r.body is not None
        assert [m.body for m in decode_records(r.body, verify_crc=True)] == [b"r0", b"r1", b"r2"]
        r = await ask(RequestCode.GET_MAX_OFFSET,
                      GetMaxOffsetRequestHeader(topic=TOPIC, queue_id=0).to_fields())
        assert (r.code, r.ext_fields["offset"]) == (ResponseCode.SUCCESS, 3)
        update = UpdateConsumerOffsetRequestHeader(consumer_group="g", topic=TOPIC, queue_id=0,
                                                   commit_offset=2).to_fields()
        assert (await ask(RequestCode.UPDATE_CONSUMER_OFFSET, update)).code == ResponseCode.SUCCESS
        query = QueryConsumerOffsetRequestHeader(consumer_group="g", topic=TOPIC,
                                                 queue_id=0).to_fields()
        r = await ask(RequestCode.QUERY_CONSUMER_OFFSET, query)
        assert (r.code, r.ext_fields["offset"]) == (ResponseCode.SUCCESS, 2)
        r = await ask(RequestCode.GET_ALL_TOPIC_CONFIG, {})
        assert r.code == ResponseCode.SUCCESS and r.body is not None
        assert TOPIC in unpack_body(r.body)["topicConfigTable"]

    assert "role=SLAVE" in slave.log_text() and "role=ASYNC_MASTER" in master.log_text()
    # each key without effect here: one notice, naming it
    text = master.log_text()
    for key in ("sendMessageThreadPoolNums", "pullMessageThreadPoolNums",
                "flushCommitLogLeastPages"):
        assert len([ln for ln in text.splitlines() if NOTICE in ln and f"key={key}" in ln]) == 1
    assert NOTICE not in slave.log_text()
