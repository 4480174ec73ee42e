"""Producer against the fake name server and brokers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from client import (
    Message,
    MessageQueue,
    MQBrokerError,
    MQClientError,
    Producer,
    PullConsumer,
    SendResult,
    SendStatus,
)
from client import producer as producer_module
from client.hooks import SendMessageContext
from client.instance import MQClientInstance
from client.validators import encode_properties
from protocol import batch_kernel
from protocol.batch import ENCODE_MESSAGES, decode_batch, encode_batch
from protocol.codes import RequestCode, ResponseCode
from protocol.command import FLAG_ONEWAY
from protocol.message import PROPERTY_UNIQ_KEY, string_to_properties
from protocol.record import decode_msg_id
from tests.client.fakes import FakeBroker, FakeCluster, closed_port_addr
from tests.waits import wait_until

TOPIC = FakeCluster.TOPIC


def make_producer(cluster: FakeCluster, **options: object) -> Producer:
    return Producer("test_producer_group", cluster.namesrv_addr, **options)  # type: ignore[arg-type]


def sends(broker: FakeBroker) -> list:
    return broker.requests_of(RequestCode.SEND_MESSAGE)


async def test_send_round_robin_over_all_brokers(cluster: FakeCluster) -> None:
    async with make_producer(cluster) as producer:
        results = [await producer.send(Message(TOPIC, b"m%d" % i)) for i in range(16)]
    queues = sorted(MessageQueue(TOPIC, b.name, q) for b in cluster.brokers for q in range(4))
    positions = [queues.index(r.message_queue) for r in results]
    # Each send takes the next queue in [a0..a3, b0..b3], wrapping around.
    assert all((b - a) % 8 == 1 for a, b in zip(positions, positions[1:], strict=False))
    assert sorted(positions) == sorted(list(range(8)) * 2)
    assert all(r.send_status is SendStatus.SEND_OK for r in results)
    assert len(sends(cluster.brokers[0])) == len(sends(cluster.brokers[1])) == 8


async def test_send_header_uniq_key_and_ids(cluster: FakeCluster) -> None:
    msg = Message(TOPIC, b"hello", tags="TagA", keys=["k1", "k2"], flag=7)
    before = int(time.time() * 1000)
    async with make_producer(cluster) as producer:
        result = await producer.send(msg)
    (req,) = sends(cluster.broker(result.message_queue.broker_name))
    h = req.ext_fields
    assert h["producerGroup"] == "test_producer_group"
    assert h["topic"] == TOPIC
    assert h["queueId"] == result.message_queue.queue_id
    assert h["sysFlag"] == 0
    assert h["flag"] == 7
    assert before <= h["bornTimestamp"] <= int(time.time() * 1000)
    assert h["defaultTopic"] == "TBW102"
    assert h["defaultTopicQueueNums"] == 4
    assert req.body == b"hello"
    props = string_to_properties(h["properties"])
    assert props["TAGS"] == "TagA"
    assert props["KEYS"] == "k1 k2"
    uniq = props[PROPERTY_UNIQ_KEY]
    assert len(uniq) == 32
    assert msg.properties[PROPERTY_UNIQ_KEY] == uniq == result.msg_id
    # offset_msg_id is the broker's: store host + commit-log offset.
    assert result.offset_msg_id is not None
    store_addr, phys = decode_msg_id(result.offset_msg_id)
    assert store_addr == cluster.broker(result.message_queue.broker_name).addr
    assert phys == 0
    assert result.queue_offset == 0


async def test_retry_topic_sends_carry_reconsume_times_in_the_header(cluster: FakeCluster) -> None:
    """As RocketMQ's producer: a message to a %RETRY% topic has its
    RECONSUME_TIME and MAX_RECONSUME_TIMES properties sent as the header's
    reconsumeTimes/maxReconsumeTimes (the broker moves it to the DLQ at the
    limit); the caller's message keeps them."""
    retry = "%RETRY%cg"
    cluster.namesrv.set_route(retry, cluster.brokers)
    msg = Message(retry, b"again", properties={"RECONSUME_TIME": "3", "MAX_RECONSUME_TIMES": "5",
                                               "ORIGIN_MESSAGE_ID": "X"})
    plain = Message(TOPIC, b"plain", properties={"RECONSUME_TIME": "3"})
    async with make_producer(cluster) as producer:
        result = await producer.send(msg)
        other = await producer.send(plain)
        for bad in ("-1", "x", "99999999999"):
            with pytest.raises(MQClientError, match="RECONSUME_TIME must be a count"):
                await producer.send(Message(retry, b"bad", properties={"RECONSUME_TIME": bad}))
    (req,) = sends(cluster.broker(result.message_queue.broker_name))[:1]
    h = req.ext_fields
    assert (h["topic"], h["reconsumeTimes"], h["maxReconsumeTimes"]) == (retry, 3, 5)
    assert string_to_properties(h["properties"]) == {
        "ORIGIN_MESSAGE_ID": "X", PROPERTY_UNIQ_KEY: result.msg_id}
    assert msg.properties["RECONSUME_TIME"] == "3" and msg.properties["MAX_RECONSUME_TIMES"] == "5"
    # another topic: properties as they are, no reconsume times in the header
    req = next(r for r in sends(cluster.broker(other.message_queue.broker_name))
               if r.ext_fields["topic"] == TOPIC)
    assert req.ext_fields["reconsumeTimes"] == 0 and "maxReconsumeTimes" not in req.ext_fields
    assert string_to_properties(req.ext_fields["properties"])["RECONSUME_TIME"] == "3"


async def test_existing_uniq_key_is_kept(cluster: FakeCluster) -> None:
    msg = Message(TOPIC, b"x", properties={PROPERTY_UNIQ_KEY: "MY-ID"})
    async with make_producer(cluster) as producer:
        result = await producer.send(msg)
    assert result.msg_id == "MY-ID"


async def test_send_to_explicit_queue(cluster: FakeCluster) -> None:
    mq = MessageQueue(TOPIC, "broker-b", 3)
    async with make_producer(cluster) as producer:
        for _ in range(3):
            result = await producer.send(Message(TOPIC, b"x"), mq)
            assert result.message_queue == mq
        with pytest.raises(MQClientError, match="not the queue's topic"):
            await producer.send(Message("Other", b"x"), mq)
    assert [r.ext_fields["queueId"] for r in sends(cluster.broker("broker-b"))] == [3, 3, 3]
    assert sends(cluster.broker("broker-a")) == []


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ResponseCode.SUCCESS, SendStatus.SEND_OK),
        (ResponseCode.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_DISK_TIMEOUT),
        (ResponseCode.FLUSH_SLAVE_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT),
        (ResponseCode.SLAVE_NOT_AVAILABLE, SendStatus.SLAVE_NOT_AVAILABLE),
    ],
)
async def test_send_status_mapping(
    cluster: FakeCluster, code: ResponseCode, status: SendStatus
) -> None:
    for b in cluster.brokers:
        b.send_code = code
    async with make_producer(cluster) as producer:
        result = await producer.send(Message(TOPIC, b"x"))
    assert result.send_status is status
    # Stored: no retry.
    assert sum(len(sends(b)) for b in cluster.brokers) == 1


@pytest.mark.parametrize(
    "code",
    [
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.NO_PERMISSION,
        ResponseCode.TOPIC_NOT_EXIST,
    ],
)
async def test_retry_on_another_broker_after_error_code(
    cluster: FakeCluster, code: ResponseCode
) -> None:
    busy, good = cluster.brokers
    busy.send_code = code
    async with make_producer(cluster) as producer:
        results = [await producer.send(Message(TOPIC, b"x")) for _ in range(8)]
    assert {r.message_queue.broker_name for r in results} == {good.name}
    # Round robin reached the refusing broker; every refusal was retried on the other one.
    assert 1 <= len(sends(busy)) <= 8
    assert len(sends(good)) == 8


async def test_retry_on_another_broker_when_port_closed(cluster: FakeCluster) -> None:
    good = cluster.broker("broker-b")
    cluster.namesrv.set_route(TOPIC, [("broker-a", closed_port_addr()), good])
    async with make_producer(cluster) as producer:
        results = [await producer.send(Message(TOPIC, b"x")) for _ in range(8)]
    assert {r.message_queue.broker_name for r in results} == {"broker-b"}
    assert len(sends(good)) == 8


async def test_an_unreachable_master_makes_the_route_refresh_before_the_retry(
        cluster: FakeCluster) -> None:
    """A failover: the route names a dead master; the name server already routes the
    broker name to its successor. With the periodic refresh 30 s away, the failed
    attempt fetches the route, and the retry (same send) reaches the new master."""
    new = cluster.broker("broker-b")
    cluster.namesrv.set_route(TOPIC, [("broker-a", closed_port_addr())])
    async with make_producer(cluster, poll_name_server_interval=30.0) as producer:
        await producer.fetch_publish_message_queues(TOPIC)
        cluster.namesrv.set_route(TOPIC, [("broker-a", new.addr)])
        r = await producer.send(Message(TOPIC, b"x"))
    assert r.send_status == SendStatus.SEND_OK
    assert r.message_queue.broker_name == "broker-a"
    assert len(sends(new)) == 1


async def test_a_broker_error_does_not_refresh_the_route(cluster: FakeCluster) -> None:
    """Only an unreachable broker makes a send fetch the route; a broker's answer
    (busy, refused) is retried on the route in hand."""
    busy = cluster.broker("broker-a")
    busy.send_code = ResponseCode.SYSTEM_BUSY
    cluster.namesrv.set_route(TOPIC, [busy])
    async with make_producer(cluster, poll_name_server_interval=30.0) as producer:
        await producer.fetch_publish_message_queues(TOPIC)
        before = len(cluster.namesrv.route_requests)
        with pytest.raises(MQBrokerError):
            await producer.send(Message(TOPIC, b"x"))
        assert len(cluster.namesrv.route_requests) == before


async def test_all_attempts_fail_raises_broker_error(cluster: FakeCluster) -> None:
    for b in cluster.brokers:
        b.send_code = ResponseCode.SYSTEM_BUSY
        b.send_remark = "too busy, try later"
    async with make_producer(cluster, retry_times_when_send_failed=2) as producer:
        with pytest.raises(MQBrokerError) as info:
            await producer.send(Message(TOPIC, b"x"))
    err = info.value
    assert err.response_code is ResponseCode.SYSTEM_BUSY
    assert err.remark == "too busy, try later"
    assert "SYSTEM_BUSY" in str(err) and "too busy, try later" in str(err)
    assert "3 attempt" in str(err)
    assert sum(len(sends(b)) for b in cluster.brokers) == 3
    # Attempts alternate brokers.
    assert len(sends(cluster.brokers[0])) in (1, 2)


async def test_non_retryable_code_raises_at_once(cluster: FakeCluster) -> None:
    for b in cluster.brokers:
        b.send_code = ResponseCode.MESSAGE_ILLEGAL
        b.send_remark = "the message is illegal"
    async with make_producer(cluster) as producer:
        with pytest.raises(MQBrokerError, match="MESSAGE_ILLEGAL") as info:
            await producer.send(Message(TOPIC, b"x"))
    assert info.value.response_code is ResponseCode.MESSAGE_ILLEGAL
    assert sum(len(sends(b)) for b in cluster.brokers) == 1


async def test_connection_failures_everywhere_raise_client_error(cluster: FakeCluster) -> None:
    cluster.namesrv.set_route(
        TOPIC, [("broker-a", closed_port_addr()), ("broker-b", closed_port_addr())]
    )
    async with make_producer(cluster) as producer:
        with pytest.raises(MQClientError, match="failed after 3 attempt") as info:
            await producer.send(Message(TOPIC, b"x"))
    assert not isinstance(info.value, MQBrokerError)


async def test_send_timeout_is_bounded(cluster: FakeCluster) -> None:
    for b in cluster.brokers:
        b.silent = True
    async with make_producer(cluster, send_msg_timeout=0.3) as producer:
        t0 = trio.current_time()
        with pytest.raises(MQClientError, match="timed out"):
            await producer.send(Message(TOPIC, b"x"))
        assert trio.current_time() - t0 < 1.5


async def test_tbw102_fallback_for_new_topic(cluster: FakeCluster) -> None:
    a, b = cluster.brokers
    cluster.namesrv.set_route("TBW102", [a], queues=8)
    tbw = cluster.namesrv.set_route("TBW102", [a, b], queues=8)
    tbw.queue_datas[1].read_queue_nums = tbw.queue_datas[1].write_queue_nums = 2
    tbw.queue_datas[0].perm = 7
    async with make_producer(cluster) as producer:
        queues = await producer.fetch_publish_message_queues("NewTopic")
        # min(defaultTopicQueueNums=4, TBW102's queue count) per broker.
        assert queues == [MessageQueue("NewTopic", "broker-a", i) for i in range(4)] + [
            MessageQueue("NewTopic", "broker-b", i) for i in range(2)
        ]
        result = await producer.send(Message("NewTopic", b"x"))
        assert result.message_queue.topic == "NewTopic"
    assert cluster.namesrv.route_requests[:2] == ["NewTopic", "TBW102"]
    req = (sends(a) + sends(b))[0]
    assert req.ext_fields["topic"] == "NewTopic"
    assert req.ext_fields["defaultTopic"] == "TBW102"
    # The fallback is for publishing only.
    async with PullConsumer("test_consumer_group", cluster.namesrv_addr) as consumer:
        with pytest.raises(MQClientError, match="does not exist"):
            await consumer.fetch_subscribe_message_queues("NewTopic")


async def test_no_route_and_no_tbw102(cluster: FakeCluster) -> None:
    async with make_producer(cluster) as producer:
        with pytest.raises(MQClientError, match="no route info of topic Nowhere"):
            await producer.send(Message("Nowhere", b"x"))


@pytest.mark.parametrize(
    ("msg", "match"),
    [
        (Message("bad topic!", b"x"), "illegal characters"),
        (Message("", b"x"), "blank"),
        (Message("t" * 128, b"x"), "longer than 127"),
        (Message("TBW102", b"x"), "reserved"),
        (Message(TOPIC, b""), "length is zero"),
        (Message(TOPIC, b"x" * 1025), "exceeds the maximum 1024"),
        (Message(TOPIC, b"x", properties={"k": "a\x01b"}), "may not contain"),
    ],
)
async def test_client_side_validation(cluster: FakeCluster, msg: Message, match: str) -> None:
    async with make_producer(cluster, max_message_size=1024) as producer:
        with pytest.raises(MQClientError, match=match):
            await producer.send(msg)
        with pytest.raises(MQClientError, match=match):
            await producer.send_oneway(msg)
        with pytest.raises(MQClientError, match=match):
            await producer.send_async(msg)
        with pytest.raises(MQClientError, match=match):
            await producer.send_batch([msg])
    assert all(b.requests == [] for b in cluster.brokers)
    assert cluster.namesrv.route_requests == []


async def test_non_positive_timeout_is_refused(cluster: FakeCluster) -> None:
    async with make_producer(cluster) as producer:
        for bad in (0, -1.0):
            with pytest.raises(MQClientError, match="timeout must be positive"):
                await producer.send(Message(TOPIC, b"x"), timeout=bad)
            with pytest.raises(MQClientError, match="timeout must be positive"):
                await producer.send_async(Message(TOPIC, b"x"), timeout=bad)
    assert all(b.requests == [] for b in cluster.brokers)


def test_bad_producer_settings() -> None:
    with pytest.raises(MQClientError, match="illegal characters"):
        Producer("bad group")
    with pytest.raises(MQClientError, match="reserved"):
        Producer("DEFAULT_PRODUCER")
    with pytest.raises(MQClientError, match="send_msg_timeout"):
        Producer("g", send_msg_timeout=0)


async def test_bad_namesrv_addr() -> None:
    with pytest.raises(MQClientError, match="bad name server address"):
        await Producer("g", "nohost").start()


async def test_send_batch_encoding(cluster: FakeCluster) -> None:
    msgs = [Message(TOPIC, f"body{i}".encode(), tags=f"T{i}", flag=i) for i in range(5)]
    async with make_producer(cluster) as producer:
        result = await producer.send_batch(msgs)
    broker = cluster.broker(result.message_queue.broker_name)
    (req,) = broker.requests_of(RequestCode.SEND_BATCH_MESSAGE)
    assert req.ext_fields["batch"] is True
    assert req.ext_fields["topic"] == TOPIC
    assert req.ext_fields["queueId"] == result.message_queue.queue_id
    items = decode_batch(req.body)
    assert [(f, body) for f, body, _ in items] == [(i, f"body{i}".encode()) for i in range(5)]
    props = [string_to_properties(p) for _, _, p in items]
    assert [p["TAGS"] for p in props] == [f"T{i}" for i in range(5)]
    uniq = [p[PROPERTY_UNIQ_KEY] for p in props]
    assert len(set(uniq)) == 5
    assert result.msg_id == ",".join(uniq)
    assert result.offset_msg_id is not None and len(result.offset_msg_id.split(",")) == 5
    assert result.queue_offset == 0
    assert len(broker.queues[(TOPIC, result.message_queue.queue_id)]) == 5


async def test_send_batch_properties_texts(cluster: FakeCluster) -> None:
    """Plain messages get a new id each (their text written directly), a
    message keeps its own UNIQ_KEY; every entry carries its message's
    properties as encode_properties writes them."""
    msgs = [Message(TOPIC, b"plain"), Message(TOPIC, b"own", properties={PROPERTY_UNIQ_KEY: "MINE"}),
            Message(TOPIC, b"tagged", tags="TagA", keys="k1"), Message(TOPIC, b"plain2"),
            Message(TOPIC, b"empty-id", properties={PROPERTY_UNIQ_KEY: ""})]
    async with make_producer(cluster) as producer:
        result = await producer.send_batch(msgs)
    (req,) = cluster.broker(result.message_queue.broker_name).requests_of(
        RequestCode.SEND_BATCH_MESSAGE)
    texts = [text for _, _, text in decode_batch(req.body)]
    assert texts == [encode_properties(m.properties) for m in msgs]
    uniq = [m.properties[PROPERTY_UNIQ_KEY] for m in msgs]
    assert uniq[1] == "MINE" and result.msg_id == ",".join(uniq)
    new = [u for i, u in enumerate(uniq) if i != 1]
    assert len(set(new)) == 4 and all(len(u) == 32 and int(u, 16) >= 0 for u in new)
    assert string_to_properties(texts[2]) == {"TAGS": "TagA", "KEYS": "k1",
                                              PROPERTY_UNIQ_KEY: uniq[2]}


async def test_send_batch_rules(cluster: FakeCluster) -> None:
    async with make_producer(cluster, max_message_size=1000) as producer:
        with pytest.raises(MQClientError, match="at least one"):
            await producer.send_batch([])
        with pytest.raises(MQClientError, match="same"):
            await producer.send_batch([Message(TOPIC, b"x"), Message("Other", b"x")])
        delayed = Message(TOPIC, b"x")
        delayed.delay_time_level = 3
        with pytest.raises(MQClientError, match="delay"):
            await producer.send_batch([delayed])
        with pytest.raises(MQClientError, match="encoded batch"):
            await producer.send_batch([Message(TOPIC, b"x" * 600), Message(TOPIC, b"y" * 600)])
    assert all(b.requests == [] for b in cluster.brokers)


class Seeing:
    """A send hook noting each batch's messages as (flag, body, properties)."""

    def __init__(self, seen: list[list[tuple[int, bytes, dict[str, str]]]]) -> None:
        self.seen = seen

    def hook_name(self) -> str:
        return "Seeing"

    def send_message_before(self, ctx: SendMessageContext) -> None:
        assert ctx.batch
        self.seen.append([(m.flag, m.body, m.properties) for m in ctx.messages])

    def send_message_after(self, ctx: SendMessageContext) -> None:
        pass


async def test_send_encoded_batch(cluster: FakeCluster) -> None:
    """A body the caller encoded goes as it is; a hook sees its messages decoded."""
    entries = [(i, b"body%d" % i, encode_properties({"TAGS": f"T{i}", PROPERTY_UNIQ_KEY: f"k{i}"}))
               for i in range(3)]
    body = encode_batch(entries)
    seen: list[list[tuple[int, bytes, dict[str, str]]]] = []
    async with make_producer(cluster) as producer:
        result = await (await producer.send_encoded_batch_async(TOPIC, body, msg_id="k0,k1,k2")).wait()
        assert result.msg_id == "k0,k1,k2"
        producer.register_send_message_hook(Seeing(seen))
        await (await producer.send_encoded_batch_async(TOPIC, body)).wait()
    reqs = [r for b in cluster.brokers for r in b.requests_of(RequestCode.SEND_BATCH_MESSAGE)]
    assert [r.body for r in reqs] == [body, body]
    assert all(r.ext_fields["batch"] is True and r.ext_fields["topic"] == TOPIC for r in reqs)
    assert seen == [[(f, b, string_to_properties(t)) for f, b, t in entries]]


async def test_send_encoded_batch_rules(cluster: FakeCluster) -> None:
    async with make_producer(cluster, max_message_size=100) as producer:
        with pytest.raises(MQClientError, match="at least one"):
            await producer.send_encoded_batch_async(TOPIC, b"")
        with pytest.raises(MQClientError, match="over the maximum 100"):
            await producer.send_encoded_batch_async(TOPIC, b"x" * 101)
        with pytest.raises(MQClientError, match="bytes, not str"):
            await producer.send_encoded_batch_async(TOPIC, "text")  # type: ignore[arg-type]
        with pytest.raises(MQClientError, match="retry group"):
            await producer.send_encoded_batch_async("%RETRY%g", b"x")
        with pytest.raises(MQClientError):
            await producer.send_encoded_batch_async("bad topic!", b"x")
        producer.register_send_message_hook(Seeing([]))
        with pytest.raises(MQClientError, match="malformed"):
            await producer.send_encoded_batch_async(TOPIC, b"\0\0\0\x05junk")
    assert all(b.requests == [] for b in cluster.brokers)


async def test_send_batch_retries_on_another_broker(cluster: FakeCluster) -> None:
    cluster.brokers[0].send_code = ResponseCode.SYSTEM_BUSY
    async with make_producer(cluster) as producer:
        for _ in range(4):
            result = await producer.send_batch([Message(TOPIC, b"a"), Message(TOPIC, b"b")])
            assert result.message_queue.broker_name == "broker-b"


async def test_send_oneway(cluster: FakeCluster) -> None:
    async with make_producer(cluster) as producer:
        for i in range(4):
            await producer.send_oneway(Message(TOPIC, b"o%d" % i))
        await wait_until(lambda: sum(len(sends(b)) for b in cluster.brokers) == 4, 5,
                         "4 oneway sends at the brokers")
    reqs = sends(cluster.brokers[0]) + sends(cluster.brokers[1])
    assert all(r.flag & FLAG_ONEWAY for r in reqs)
    assert sorted(r.body for r in reqs) == [b"o0", b"o1", b"o2", b"o3"]


async def test_send_async_many_in_flight_from_one_task(cluster: FakeCluster) -> None:
    done: list[tuple[SendResult | None, BaseException | None]] = []
    async with make_producer(cluster, async_send_workers=16) as producer:
        futures = [
            await producer.send_async(Message(TOPIC, b"a%d" % i), lambda r, e: done.append((r, e)))
            for i in range(2000)
        ]
        results = [await f.wait() for f in futures]
    assert len(done) == 2000 and all(e is None for _, e in done)
    assert all(r.send_status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == 2000
    stored = sum(len(q) for b in cluster.brokers for q in b.queues.values())
    assert stored == 2000


async def test_cancelled_send_async_is_not_queued(cluster: FakeCluster) -> None:
    calls: list[object] = []
    async with make_producer(cluster) as producer:
        with trio.CancelScope() as scope:
            scope.cancel()
            await producer.send_async(Message(TOPIC, b"never"), lambda r, e: calls.append(e))
        assert scope.cancelled_caught
        await producer.send(Message(TOPIC, b"after"))
    bodies = [r.body for b in cluster.brokers for r in sends(b)]
    assert bodies == [b"after"]
    assert calls == []


async def test_send_async_failure_goes_to_callback_and_future(cluster: FakeCluster) -> None:
    for b in cluster.brokers:
        b.send_code = ResponseCode.SYSTEM_BUSY
    seen: list[BaseException | None] = []
    async with make_producer(cluster) as producer:
        fut = await producer.send_async(Message(TOPIC, b"x"), lambda r, e: seen.append(e))
        with pytest.raises(MQBrokerError, match="SYSTEM_BUSY"):
            await fut.wait()
    assert fut.done()
    assert isinstance(fut.exception(), MQBrokerError)
    assert len(seen) == 1 and isinstance(seen[0], MQBrokerError)


async def test_send_batch_async(cluster: FakeCluster) -> None:
    async with make_producer(cluster) as producer:
        futures = [
            await producer.send_batch_async([Message(TOPIC, b"x%d" % j) for j in range(32)])
            for _ in range(20)
        ]
        results = [await f.wait() for f in futures]
    assert all(len(r.msg_id.split(",")) == 32 for r in results)
    assert sum(len(q) for b in cluster.brokers for q in b.queues.values()) == 640


async def test_shutdown_drains_queued_async_sends(cluster: FakeCluster) -> None:
    producer = make_producer(cluster, async_send_workers=2)
    await producer.start()
    futures = [await producer.send_async(Message(TOPIC, b"x")) for _ in range(50)]
    await producer.shutdown()
    assert all(f.done() for f in futures)
    assert all(f.exception() is None for f in futures)


async def test_shutdown_with_unresponsive_broker_is_bounded(cluster: FakeCluster) -> None:
    for b in cluster.brokers:
        b.silent = True
    producer = make_producer(cluster, async_send_workers=2, send_msg_timeout=0.3)
    await producer.start()
    futures = [await producer.send_async(Message(TOPIC, b"x")) for _ in range(20)]
    t0 = trio.current_time()
    await producer.shutdown()
    assert trio.current_time() - t0 < 2.0
    assert all(f.done() and isinstance(f.exception(), MQClientError) for f in futures)


async def test_lifecycle_errors(cluster: FakeCluster) -> None:
    producer = make_producer(cluster)
    with pytest.raises(MQClientError, match="not running"):
        await producer.send(Message(TOPIC, b"x"))
    await producer.start()
    with pytest.raises(MQClientError, match="started once"):
        await producer.start()
    await producer.shutdown()
    await producer.shutdown()  # idempotent
    with pytest.raises(MQClientError, match="not running"):
        await producer.send(Message(TOPIC, b"x"))
    with pytest.raises(MQClientError, match="not running"):
        await producer.send_async(Message(TOPIC, b"x"))


async def test_producers_share_one_client_instance(cluster: FakeCluster) -> None:
    p1 = make_producer(cluster)
    p2 = Producer("other_group", cluster.namesrv_addr)
    await p1.start()
    await p2.start()
    assert p1._instance is p2._instance
    instance = p1._instance
    assert isinstance(instance, MQClientInstance)
    await p1.send(Message(TOPIC, b"x"))
    await p2.send(Message(TOPIC, b"x"))
    # One route lookup for both.
    assert cluster.namesrv.route_requests == [TOPIC]
    await p1.shutdown()
    assert instance.running
    await p2.shutdown()
    assert not instance.running
    p3 = make_producer(cluster)
    await p3.start()
    assert p3._instance is not instance
    await p3.shutdown()


_PROP_VALUES = st.sampled_from(["", "v", "ü€", "a b", "k\x01v"])  # the last is refused
_BATCH_MESSAGES = st.lists(st.tuples(
    st.sampled_from([0, 1, -(2**31), 2**31 - 1, 2**31, -(2**31) - 1]),
    st.sampled_from([b"b", b"body" * 50, bytearray(b"ba"), memoryview(b"mv")]),
    st.dictionaries(st.sampled_from(["TAGS", "KEYS", PROPERTY_UNIQ_KEY, "WAIT", "k"]),
                    _PROP_VALUES, max_size=3)), min_size=1, max_size=6)


# how _prepare_batch lays out a batch: protocol.batch_kernel.encode_messages
# compiled (where deploy/speedups built it), the same source as plain Python,
# and no kernel (the producer's own loop)
ENCODERS: list[Any] = [pytest.param(batch_kernel.encode_messages, id="kernel-plain-python"),
                       pytest.param(None, id="loop")]
if ENCODE_MESSAGES is not None:
    ENCODERS.append(pytest.param(ENCODE_MESSAGES, id="kernel-compiled"))


@contextmanager
def encoder(kernel: Any) -> Iterator[None]:
    with mock.patch.object(producer_module, "ENCODE_MESSAGES", kernel):
        yield


@pytest.mark.parametrize("kernel", ENCODERS)
@settings(max_examples=150, deadline=None)
@given(parts=_BATCH_MESSAGES)
def test_prepare_batch_lays_out_what_encode_batch_makes(
        kernel: Any, parts: list[tuple[int, bytes, dict[str, str]]]) -> None:
    """The producer lays out the batch body as it checks each message; the
    body is encode_batch's of (flag, body, encode_properties(properties)) of
    the messages as sent (their UNIQ_KEYs set), or the same refusal: the first
    message whose properties cannot be encoded, else encode_batch's."""
    producer = Producer("pg", max_message_size=100_000)
    msgs = [Message(TOPIC, body, flag=flag, properties=dict(props))
            for flag, body, props in parts]
    try:
        with encoder(kernel):
            prepared = producer._prepare_batch(msgs)
    except MQClientError as exc:
        try:  # the refusal of the first message that cannot be encoded
            items = [(m.flag, bytes(m.body), encode_properties(m.properties)) for m in msgs]
        except MQClientError as refused:
            assert str(exc) == str(refused)
            return
        with pytest.raises(ValueError) as want:
            encode_batch(items)
        assert str(exc) == f"a message of the batch cannot be sent: {want.value}"
        return
    assert prepared.body == encode_batch(
        [(m.flag, bytes(m.body), encode_properties(m.properties)) for m in msgs])
    assert prepared.msg_id == ",".join(m.properties[PROPERTY_UNIQ_KEY] for m in msgs)


@pytest.mark.parametrize("kernel", ENCODERS)
def test_prepare_batch_refusals_keep_their_order_and_words(kernel: Any) -> None:
    producer = Producer("pg")
    long_props = {"k": "x" * 32_800}
    cases = [
        ([Message(TOPIC, b"a", flag=2**31)], "flag 2147483648 is not a 32-bit integer"),
        ([Message(TOPIC, b"a"), Message(TOPIC, b"b", properties=long_props)],
         "longer than 32767 bytes"),
        # a message-level refusal comes first, wherever the entry it follows failed
        ([Message(TOPIC, b"a", flag=2**31), Message("Other", b"b")], "must be the same"),
        ([Message(TOPIC, b"a", flag=-(2**31) - 1), Message(TOPIC, b"")], "length is zero"),
        ([Message(TOPIC, b"a"), Message(TOPIC, b"b", properties={"DELAY": "3"})],
         "delay levels are not supported"),
        ([Message(TOPIC, b"a"), Message(TOPIC, b"b", properties={"TIMER_DELAY_MS": "5000"})],
         "timer messages .* are not supported for batching"),
        ([Message(TOPIC, b"a"), Message(TOPIC, b"b", properties={"k": "v\x02"})],
         "may not contain"),
    ]
    with encoder(kernel):
        for msgs, words in cases:
            with pytest.raises(MQClientError, match=words):
                producer._prepare_batch(msgs)
        with pytest.raises(TypeError):  # as encode_batch: not a number at all
            producer._prepare_batch([Message(TOPIC, b"a", flag="7")])  # type: ignore[arg-type]


class _OwnMessage(Message):
    """A subclass: the kernel leaves it to the loop."""


@pytest.mark.parametrize("kernel", ENCODERS)
def test_prepare_batch_kernel_giving_up_midway_changes_nothing(kernel: Any) -> None:
    """Where the kernel gives up after setting the UNIQ_KEYs of the messages
    before (here a subclass, a body changed to a bytearray, a message whose
    id was set by hand), the loop keeps those ids: the body, the ids and the
    messages come out as the loop alone makes them."""
    def batch() -> list[Message]:
        tail = Message(TOPIC, b"late")
        tail.body = bytearray(b"changed")  # type: ignore[assignment]
        return [Message(TOPIC, b"a"), Message(TOPIC, b"b", tags="T", keys=["k1", "k2"]),
                Message(TOPIC, b"c", properties={PROPERTY_UNIQ_KEY: "OWN"}),
                _OwnMessage(TOPIC, b"d"), Message(TOPIC, b"e"), tail]

    ids = [f"ID{i:030d}" for i in range(6)]
    want_msgs, got_msgs = batch(), batch()
    want_ids, got_ids = list(ids), list(ids)
    want = producer_module._encode_messages(want_msgs, TOPIC, 1 << 20, want_ids)
    if kernel is not None:
        assert kernel(got_msgs, TOPIC, 1 << 20, got_ids, Message, PROPERTY_UNIQ_KEY,
                      "DELAY", encode_properties) is None
    got = producer_module._encode_messages(got_msgs, TOPIC, 1 << 20, got_ids)
    assert got == want
    assert got_ids == want_ids == ids[:2] + ["OWN"] + ids[3:]
    assert [m.properties for m in got_msgs] == [m.properties for m in want_msgs]
    assert decode_batch(got)[1] == (0, b"b", encode_properties(want_msgs[1].properties))


@pytest.mark.parametrize("kernel", [p for p in ENCODERS if p.values[0] is not None])
def test_encode_messages_kernel_on_the_usual_batch(kernel: Any) -> None:
    """Messages without properties (written by the kernel without a text made)
    and with them: the loop's bytes, ids and properties; a wrong id list,
    a non-ASCII id or a message past ``max_body`` is given up on."""
    def batch() -> list[Message]:
        return [Message(TOPIC, b"x" * 1024, flag=i - 2) if i % 3 else
                Message(TOPIC, b"y" * i, tags=f"t{i}", keys="ü") for i in range(1, 40)]

    ids = [f"{i:032X}" for i in range(39)]
    want_msgs, got_msgs = batch(), batch()
    want_ids, got_ids = list(ids), list(ids)
    got = kernel(got_msgs, TOPIC, 1 << 20, got_ids, Message, PROPERTY_UNIQ_KEY, "DELAY",
                 encode_properties)
    assert got == producer_module._encode_messages(want_msgs, TOPIC, 1 << 20, want_ids)
    assert got_ids == want_ids
    assert [m.properties for m in got_msgs] == [m.properties for m in want_msgs]
    args = (PROPERTY_UNIQ_KEY, "DELAY", encode_properties)
    assert kernel(batch(), TOPIC, 1 << 20, ids[:-1], Message, *args) is None
    assert kernel(batch(), TOPIC, 1 << 20, ["é"] * 39, Message, *args) is None
    assert kernel(batch(), TOPIC, 1023, list(ids), Message, *args) is None
    assert kernel([], TOPIC, 1 << 20, [], Message, *args) == b""


async def test_a_refreshed_route_without_writable_queues_fails_as_a_send(
        cluster: FakeCluster) -> None:
    """A failover: the master is gone from the route before a new one registers.
    The retries keep the queues tried so far; the send fails with MQClientError,
    never IndexError."""
    from client.publish_info import TopicPublishInfo

    cluster.namesrv.set_route(TOPIC, [("broker-a", closed_port_addr())])
    async with make_producer(cluster) as producer:
        async def no_queues(self: MQClientInstance, topic: str, *_: Any) -> TopicPublishInfo:
            return TopicPublishInfo(topic, [])

        with mock.patch.object(MQClientInstance, "publish_info",
                               lambda self, topic: TopicPublishInfo(topic, [])), \
                mock.patch.object(MQClientInstance, "find_publish_info", no_queues):
            with pytest.raises(MQClientError, match="no writable queue"):
                await producer.send(Message(TOPIC, b"x"))
        real = MQClientInstance.publish_info
        calls: list[int] = []

        def emptied(self: MQClientInstance, topic: str) -> TopicPublishInfo | None:
            calls.append(1)
            return real(self, topic) if len(calls) == 1 else TopicPublishInfo(topic, [])

        with mock.patch.object(MQClientInstance, "publish_info", emptied):
            with pytest.raises(MQClientError, match="failed after 3 attempt") as info:
                await producer.send(Message(TOPIC, b"x"))
        assert not isinstance(info.value, MQBrokerError)
        assert len(calls) >= 3
