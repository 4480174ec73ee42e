"""ClientMetrics: exact counts in a fresh registry against the fake cluster; no
registry call at all when a client has no metrics."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry

from client import (
    ClientMetrics,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    LitePullConsumer,
    Message,
    MessageModel,
    MessageQueue,
    MQBrokerError,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from client.transaction import LocalTransactionState
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.message import MessageExt
from protocol.trio import RemotingConnection
from tests.client.fakes import FakeCluster, closed_port_addr

TOPIC = FakeCluster.TOPIC
NS = "rocketmq_client"


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    got = registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def msg_ext(topic: str = TOPIC, body: bytes = b"x") -> MessageExt:
    return MessageExt(topic=topic, body=body, properties={})


async def test_sends_by_topic_and_status_and_latency(cluster: FakeCluster) -> None:
    registry = CollectorRegistry()
    metrics = ClientMetrics(registry)
    async with Producer("metrics_producer", cluster.namesrv_addr, metrics=metrics,
                        retry_times_when_send_failed=0) as producer:
        for i in range(5):
            await producer.send(Message(TOPIC, b"m%d" % i))
        await producer.send_batch([Message(TOPIC, b"b1"), Message(TOPIC, b"b2")])
        fut = await producer.send_async(Message(TOPIC, b"async"))
        await fut.wait()
        await producer.send_oneway(Message(TOPIC, b"oneway"))
        for b in cluster.brokers:
            b.send_code = ResponseCode.FLUSH_DISK_TIMEOUT
        await producer.send(Message(TOPIC, b"slow disk"))
        for b in cluster.brokers:
            b.send_code = ResponseCode.MESSAGE_ILLEGAL
        with pytest.raises(MQBrokerError):
            await producer.send(Message(TOPIC, b"refused"))
    assert value(registry, f"{NS}_sends_total", topic=TOPIC, status="SEND_OK") == 7
    assert value(registry, f"{NS}_sends_total", topic=TOPIC, status="ONEWAY") == 1
    assert value(registry, f"{NS}_sends_total", topic=TOPIC, status="FLUSH_DISK_TIMEOUT") == 1
    assert value(registry, f"{NS}_sends_total", topic=TOPIC, status="FAILED") == 1
    # every send but the oneway one has a latency
    assert value(registry, f"{NS}_send_latency_seconds_count", topic=TOPIC) == 9
    assert value(registry, f"{NS}_send_latency_seconds_sum", topic=TOPIC) > 0
    assert value(registry, f"{NS}_send_latency_seconds_bucket", topic=TOPIC, le="+Inf") == 9


async def test_transaction_producer_counts_its_half_messages(cluster: FakeCluster) -> None:
    registry = CollectorRegistry()

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            return LocalTransactionState.UNKNOW

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.UNKNOW

    async with TransactionProducer("metrics_tx", cluster.namesrv_addr, Listener(),
                                   metrics=ClientMetrics(registry)) as producer:
        await producer.send_message_in_transaction(Message(TOPIC, b"half"), None)
    assert value(registry, f"{NS}_sends_total", topic=TOPIC, status="SEND_OK") == 1


async def test_no_metrics_means_no_registry_call(cluster: FakeCluster,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import prometheus_client.metrics as pm

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("a metric was touched without metrics=")

    for cls in (pm.Counter, pm.Histogram):
        monkeypatch.setattr(cls, "labels", boom)
        monkeypatch.setattr(cls, "inc", boom, raising=False)
        monkeypatch.setattr(cls, "observe", boom, raising=False)
    async with Producer("plain_producer", cluster.namesrv_addr) as producer:
        await producer.send(Message(TOPIC, b"m"))
        await producer.send_oneway(Message(TOPIC, b"m"))
    consumer = PushConsumer("plain_group", closed_port_addr())
    consumer.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    assert consumer._metrics is None
    assert await consumer._call_listener([msg_ext()], None) is ConsumeConcurrentlyStatus.CONSUME_SUCCESS


async def test_listener_answers_latency_and_failures(autojump_clock: trio.testing.MockClock
                                                     ) -> None:
    """Each listener call: messages by answer, one latency sample, failures by reason
    (the listener takes 0.25 virtual seconds)."""
    registry = CollectorRegistry()
    consumer = PushConsumer("cg", closed_port_addr(), metrics=ClientMetrics(registry))
    answers: list[Any] = [ConsumeConcurrentlyStatus.CONSUME_SUCCESS,
                          ConsumeConcurrentlyStatus.RECONSUME_LATER, "bad", RuntimeError("boom"),
                          ConsumeConcurrentlyStatus.CONSUME_SUCCESS]

    async def listener(msgs: list[MessageExt], ctx: Any) -> Any:
        await trio.sleep(0.25)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    consumer.register_message_listener(listener)
    await consumer._call_listener([msg_ext(), msg_ext()], None)  # 2 messages succeed
    await consumer._call_listener([msg_ext()], None)
    await consumer._call_listener([msg_ext()], None)
    assert await consumer._call_listener([msg_ext()], None) is None  # exception -> None
    await consumer._call_listener([msg_ext("Other")], None)

    def consumed(status: str, topic: str = TOPIC) -> float:
        return value(registry, f"{NS}_consumed_messages_total", group="cg", topic=topic,
                     status=status)

    def failures(reason: str) -> float:
        return value(registry, f"{NS}_consume_failures_total", group="cg", topic=TOPIC,
                     reason=reason)

    assert consumed("CONSUME_SUCCESS") == 2 and consumed("CONSUME_SUCCESS", "Other") == 1
    assert consumed("RECONSUME_LATER") == 1 and failures("RECONSUME_LATER") == 1
    assert consumed("INVALID") == 1 and failures("INVALID") == 1
    assert consumed("EXCEPTION") == 1 and failures("EXCEPTION") == 1
    assert failures("CONSUME_SUCCESS") == 0
    latency = f"{NS}_consume_latency_seconds"
    assert value(registry, f"{latency}_count", group="cg", topic=TOPIC) == 4
    assert value(registry, f"{latency}_sum", group="cg", topic=TOPIC) == pytest.approx(4 * 0.25)
    assert value(registry, f"{latency}_bucket", group="cg", topic=TOPIC, le="0.1") == 0


async def test_orderly_suspend_is_a_failure() -> None:
    registry = CollectorRegistry()
    consumer = PushConsumer("og", closed_port_addr(), metrics=ClientMetrics(registry),
                            message_model=MessageModel.BROADCASTING)
    answers = [ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT, ConsumeOrderlyStatus.SUCCESS]
    consumer.register_message_listener(lambda msgs, ctx: answers.pop(0), orderly=True)
    await consumer._call_listener([msg_ext()], None)
    await consumer._call_listener([msg_ext(), msg_ext()], None)
    assert value(registry, f"{NS}_consume_failures_total", group="og", topic=TOPIC,
                 reason="SUSPEND_CURRENT_QUEUE_A_MOMENT") == 1
    assert value(registry, f"{NS}_consumed_messages_total", group="og", topic=TOPIC,
                 status="SUCCESS") == 2


def _consumer_handlers(cluster: FakeCluster, client_ids: list[str]) -> None:
    """Heart-beats and the group's consumer list on the fake brokers (a push consumer's rebalance)."""

    def heartbeat(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        body = cmd.decode_body()
        if isinstance(body, dict) and body.get("clientID") and body["clientID"] not in client_ids:
            client_ids.append(body["clientID"])
        return cmd.response(ResponseCode.SUCCESS)

    def consumer_list(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=pack_body({"consumerIdList": client_ids}))

    for b in cluster.brokers:
        b.handlers.register(RequestCode.HEART_BEAT, heartbeat)
        b.handlers.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumer_list)
        b.handlers.register(RequestCode.UNREGISTER_CLIENT,
                            lambda conn, cmd: cmd.response(ResponseCode.SUCCESS))


async def test_push_consumer_end_to_end(cluster: FakeCluster) -> None:
    """A push consumer on the fake cluster: every stored message counted once, the
    failed ones as failures (sent back, the fake answers the send-back with an error
    so they are retried locally and succeed)."""
    _consumer_handlers(cluster, [])
    for b in cluster.brokers:
        for q in range(4):
            for i in range(3):
                b.put(TOPIC, q, b"%s-%d-%d" % (b.name.encode(), q, i))
    registry = CollectorRegistry()
    seen: list[bytes] = []
    done = trio.Event()
    failed_once: set[bytes] = set()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        m = msgs[0]
        if m.body.endswith(b"-0") and m.body not in failed_once:
            failed_once.add(m.body)
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        seen.append(m.body)
        if len(seen) == 24:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("push_metrics", cluster.namesrv_addr, metrics=ClientMetrics(registry),
                            rebalance_interval=0.2)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listener)
    from client.consumer_types import ConsumeFromWhere
    consumer.consume_from_where = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    async with consumer:
        with trio.fail_after(20):
            await done.wait()
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 24
    labels = {"group": "push_metrics", "topic": TOPIC}
    assert value(registry, f"{NS}_consumed_messages_total", status="CONSUME_SUCCESS", **labels) == 24
    assert value(registry, f"{NS}_consume_failures_total", reason="RECONSUME_LATER", **labels) == 8
    assert value(registry, f"{NS}_consume_latency_seconds_count", **labels) == 32


async def test_lite_pull_consumer_counts_polled_messages(cluster: FakeCluster) -> None:
    broker = cluster.brokers[0]
    for i in range(5):
        broker.put(TOPIC, 0, b"m%d" % i)
    registry = CollectorRegistry()
    consumer = LitePullConsumer("lite_metrics", cluster.namesrv_addr,
                                metrics=ClientMetrics(registry))
    mq = MessageQueue(TOPIC, broker.name, 0)
    consumer.set_assignment([mq])
    got: list[MessageExt] = []
    async with consumer:
        await consumer.seek(mq, 0)
        with trio.fail_after(10):
            while len(got) < 5:
                got += await consumer.poll(1.0)
    assert value(registry, f"{NS}_consumed_messages_total", group="lite_metrics", topic=TOPIC,
                 status="POLLED") == 5
    assert registry.get_sample_value(f"{NS}_consume_failures_total",
                                     {"group": "lite_metrics", "topic": TOPIC,
                                      "reason": "POLLED"}) is None


def test_one_metrics_object_per_registry_and_namespace() -> None:
    registry = CollectorRegistry()
    ClientMetrics(registry)
    with pytest.raises(ValueError):
        ClientMetrics(registry)  # prometheus_client refuses duplicate series
    ClientMetrics(registry, namespace="other_app")
