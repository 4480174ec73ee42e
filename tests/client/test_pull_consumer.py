"""PullConsumer against the fake brokers: status mapping, tag re-filter, offsets."""

from __future__ import annotations

import zlib

import pytest

from client import MessageQueue, MQBrokerError, MQClientError, PullConsumer, PullStatus
from client.consumer_api import PULL_FLAG_SUBSCRIPTION
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.hashing import java_string_hash
from protocol.record import FLAG_COMPRESSED
from protocol.trio import RemotingConnection
from tests.client.fakes import FakeBroker, FakeCluster

TOPIC = FakeCluster.TOPIC
GROUP = "test_consumer_group"
MQ = MessageQueue(TOPIC, "broker-a", 1)


def consumer(cluster: FakeCluster) -> PullConsumer:
    return PullConsumer(GROUP, cluster.namesrv_addr)


async def test_fetch_subscribe_message_queues_sorted(cluster: FakeCluster) -> None:
    cluster.namesrv.set_route(TOPIC, [cluster.brokers[1], cluster.brokers[0]], queues=2)
    async with consumer(cluster) as c:
        queues = await c.fetch_subscribe_message_queues(TOPIC)
        assert queues == [
            MessageQueue(TOPIC, "broker-a", 0),
            MessageQueue(TOPIC, "broker-a", 1),
            MessageQueue(TOPIC, "broker-b", 0),
            MessageQueue(TOPIC, "broker-b", 1),
        ]
        with pytest.raises(MQClientError, match="does not exist"):
            await c.fetch_subscribe_message_queues("Nope")


async def test_pull_found_decodes_records(cluster: FakeCluster) -> None:
    broker = cluster.broker("broker-a")
    ids = [
        broker.put(TOPIC, 1, f"body{i}".encode(), tags="TagA", properties={"KEYS": f"k{i}"})[0]
        for i in range(5)
    ]
    async with consumer(cluster) as c:
        r = await c.pull(MQ, "*", 0, 3)
        assert r.pull_status is PullStatus.FOUND
        assert (r.next_begin_offset, r.min_offset, r.max_offset) == (3, 0, 5)
        assert [m.body for m in r.msg_found_list] == [b"body0", b"body1", b"body2"]
        m = r.msg_found_list[1]
        assert (m.topic, m.queue_id, m.queue_offset) == (TOPIC, 1, 1)
        assert m.tags == "TagA" and m.keys == "k1"
        assert m.msg_id == ids[1]
        assert m.store_host == broker.addr
        assert m.get_property("MIN_OFFSET") == "0" and m.get_property("MAX_OFFSET") == "5"
        r2 = await c.pull(MQ, "", r.next_begin_offset, 32)
        assert [m.queue_offset for m in r2.msg_found_list] == [3, 4]
        assert r2.next_begin_offset == 5
    (req, *_) = broker.requests_of(RequestCode.PULL_MESSAGE)
    h = req.ext_fields
    assert h["consumerGroup"] == GROUP
    assert (h["topic"], h["queueId"], h["queueOffset"], h["maxMsgNums"]) == (TOPIC, 1, 0, 3)
    # the subscription flag: the broker filters by the request's expression
    assert h["sysFlag"] == PULL_FLAG_SUBSCRIPTION and h["suspendTimeoutMillis"] == 0
    assert h["subscription"] == "*" and h["expressionType"] == "TAG"


async def test_pull_status_mapping(cluster: FakeCluster) -> None:
    broker = cluster.broker("broker-a")
    for _ in range(4):
        broker.put(TOPIC, 1, b"x", tags="TagA")
    broker.min_offsets[(TOPIC, 1)] = 10  # queue holds offsets 10..13
    async with consumer(cluster) as c:
        r = await c.pull(MQ, "*", 14, 32)
        assert (r.pull_status, r.next_begin_offset, r.msg_found_list) == (
            PullStatus.NO_NEW_MSG,
            14,
            [],
        )
        r = await c.pull(MQ, "*", 3, 32)
        assert (r.pull_status, r.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 10)
        r = await c.pull(MQ, "*", 99, 32)
        assert (r.pull_status, r.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 14)
        r = await c.pull(MQ, "TagB", 10, 32)
        assert (r.pull_status, r.next_begin_offset) == (PullStatus.NO_MATCHED_MSG, 14)
        assert (r.min_offset, r.max_offset) == (10, 14)
        empty = MessageQueue(TOPIC, "broker-b", 0)
        r = await c.pull(empty, "*", 0, 32)
        assert (r.pull_status, r.next_begin_offset) == (PullStatus.NO_NEW_MSG, 0)


async def test_pull_tag_refilter_drops_hash_collisions(cluster: FakeCluster) -> None:
    assert java_string_hash("Aa") == java_string_hash("BB")
    broker = cluster.broker("broker-a")
    for tag in ("Aa", "BB", "Aa", "C", None, "BB"):
        broker.put(TOPIC, 1, f"{tag}".encode(), tags=tag)
    async with consumer(cluster) as c:
        r = await c.pull(MQ, "Aa", 0, 32)
        assert r.pull_status is PullStatus.FOUND
        assert [m.tags for m in r.msg_found_list] == ["Aa", "Aa"]
        assert r.next_begin_offset == 6
        r = await c.pull(MQ, "C || BB", 0, 32)
        assert [m.tags for m in r.msg_found_list] == ["BB", "C", "BB"]
        r = await c.pull(MQ, "*", 0, 32)
        assert len(r.msg_found_list) == 6
    # The broker saw hash-equal tags: it returned the "BB" messages for "Aa".
    assert broker.requests_of(RequestCode.PULL_MESSAGE)[0].ext_fields["subscription"] == "Aa"


async def test_pull_uncompresses_compressed_bodies(cluster: FakeCluster) -> None:
    broker = cluster.broker("broker-a")
    broker.put(TOPIC, 1, zlib.compress(b"z" * 5000), sys_flag=FLAG_COMPRESSED)
    async with consumer(cluster) as c:
        r = await c.pull(MQ, "*", 0, 1)
    assert r.msg_found_list[0].body == b"z" * 5000


async def test_pull_error_response_names_code_and_remark(cluster: FakeCluster) -> None:
    cluster.broker("broker-a").pull_code = ResponseCode.NO_PERMISSION
    async with consumer(cluster) as c:
        with pytest.raises(MQBrokerError) as info:
            await c.pull(MQ, "*", 0, 1)
    assert info.value.response_code is ResponseCode.NO_PERMISSION
    assert info.value.addr == cluster.broker("broker-a").addr
    assert "NO_PERMISSION" in str(info.value) and f"pull from {MQ}" in str(info.value)


async def test_pull_argument_checks(cluster: FakeCluster) -> None:
    async with consumer(cluster) as c:
        with pytest.raises(MQClientError, match="offset"):
            await c.pull(MQ, "*", -1, 1)
        with pytest.raises(MQClientError, match="max_nums"):
            await c.pull(MQ, "*", 0, 0)
        with pytest.raises(MQClientError, match="no tag"):
            await c.pull(MQ, "||", 0, 1)
        with pytest.raises(MQClientError, match="not in any route"):
            await c.pull(MessageQueue(TOPIC, "broker-z", 0), "*", 0, 1)
    assert cluster.brokers[0].requests == []


async def test_pull_follows_suggested_broker(cluster: FakeCluster, nursery: object) -> None:
    master = cluster.broker("broker-a")
    slave = FakeBroker("broker-a")
    await slave.start(nursery)  # type: ignore[arg-type]
    cluster.namesrv.set_route(TOPIC, cluster.brokers, slaves={"broker-a": slave.addr})
    master.put(TOPIC, 1, b"m")
    slave.put(TOPIC, 1, b"s")
    master.suggest_which_broker_id = 1
    async with consumer(cluster) as c:
        r1 = await c.pull(MQ, "*", 0, 1)
        r2 = await c.pull(MQ, "*", 0, 1)
    assert [r1.msg_found_list[0].body, r2.msg_found_list[0].body] == [b"m", b"s"]


async def test_pull_timeout_is_bounded(cluster: FakeCluster) -> None:
    cluster.broker("broker-a").silent = True
    async with consumer(cluster) as c:
        with pytest.raises(MQClientError, match="pull from .* failed"):
            await c.pull(MQ, "*", 0, 1, timeout=0.2)


async def test_consume_offsets(cluster: FakeCluster) -> None:
    broker = cluster.broker("broker-a")
    for _ in range(7):
        broker.put(TOPIC, 1, b"x")
    broker.min_offsets[(TOPIC, 2)] = 5
    async with consumer(cluster) as c:
        assert await c.fetch_consume_offset(MQ) == -1
        await c.update_consume_offset(MQ, 4)
        assert broker.consumer_offsets[(GROUP, TOPIC, 1)] == 4
        assert await c.fetch_consume_offset(MQ) == 4
        assert await c.max_offset(MQ) == 7
        assert await c.min_offset(MQ) == 0
        mq2 = MessageQueue(TOPIC, "broker-a", 2)
        assert await c.min_offset(mq2) == 5
        assert await c.max_offset(mq2) == 5
        with pytest.raises(MQClientError, match="offset must be >= 0"):
            await c.update_consume_offset(MQ, -1)
    assert cluster.broker("broker-b").requests == []


async def test_offset_error_response(cluster: FakeCluster) -> None:
    def refuse(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "offset store broken")

    cluster.broker("broker-a").handlers.register(RequestCode.UPDATE_CONSUMER_OFFSET, refuse)
    async with consumer(cluster) as c:
        with pytest.raises(MQBrokerError, match="offset store broken"):
            await c.update_consume_offset(MQ, 1)


async def test_consumer_lifecycle(cluster: FakeCluster) -> None:
    c = consumer(cluster)
    with pytest.raises(MQClientError, match="not running"):
        await c.pull(MQ, "*", 0, 1)
    await c.start()
    with pytest.raises(MQClientError, match="started once"):
        await c.start()
    await c.shutdown()
    await c.shutdown()
    with pytest.raises(MQClientError, match="not running"):
        await c.max_offset(MQ)
    with pytest.raises(MQClientError, match="reserved"):
        PullConsumer("DEFAULT_CONSUMER")
