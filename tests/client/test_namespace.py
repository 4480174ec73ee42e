"""ClientConfig.namespace (RocketMQ 4.5+'s setNamespace) in the SDK: names wrapped on the
way out, unwrapped in what the user sees. Against the fake name server and brokers."""

from __future__ import annotations

import pytest

from client import Message, MQClientError, Producer, PushConsumer
from client.config import ClientConfig
from protocol.codes import RequestCode
from protocol.message import MessageExt
from tests.client.fakes import FakeCluster


def test_namespace_checked() -> None:
    assert ClientConfig(namespace="app1").namespace == "app1"
    with pytest.raises(MQClientError, match="namespace"):
        ClientConfig(namespace="a%b")


async def test_producer_sends_the_namespaced_topic(cluster: FakeCluster) -> None:
    cluster.namesrv.set_route("app1%TopicTest", cluster.brokers)
    config = ClientConfig(namesrv_addr=cluster.namesrv_addr, namespace="app1")
    async with Producer("pg", config=config) as producer:
        assert producer.group == "app1%pg"
        msg = Message("TopicTest", b"hello")
        result = await producer.send(msg)
        assert msg.topic == "TopicTest"  # the user's message is left as given
        assert result.message_queue.topic == "TopicTest"
        queues = await producer.fetch_publish_message_queues("TopicTest")
        assert {q.topic for q in queues} == {"TopicTest"}
        result = await producer.send(Message("TopicTest", b"to a queue"), queues[0])
        assert result.message_queue == queues[0]
        batch = await producer.send_batch([Message("TopicTest", b"a"), Message("TopicTest", b"b")])
        assert batch.message_queue.topic == "TopicTest"
    sent = [cmd for b in cluster.brokers
            for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE)
            for cmd in b.requests_of(code)]
    assert len(sent) == 3
    assert {cmd.ext_fields["topic"] for cmd in sent} == {"app1%TopicTest"}
    assert {cmd.ext_fields["producerGroup"] for cmd in sent} == {"app1%pg"}


def test_consumer_wraps_group_and_subscriptions_and_shows_plain_topics() -> None:
    config = ClientConfig(namesrv_addr="127.0.0.1:9876", namespace="app1")
    consumer = PushConsumer("cg", config=config)
    consumer.subscribe("TopicTest", "*")
    assert consumer.group == "app1%cg"
    assert consumer.retry_topic == "%RETRY%app1%cg"
    assert set(consumer.subscriptions) == {"app1%TopicTest"}
    assert consumer.subscriptions["app1%TopicTest"].topic == "app1%TopicTest"
    pulled = MessageExt(topic="app1%TopicTest", body=b"x", properties={})
    retried = MessageExt(topic="%RETRY%app1%cg", body=b"y",
                         properties={"RETRY_TOPIC": "app1%TopicTest"})
    consumer._reset_retry_topic([pulled, retried])
    assert (pulled.topic, retried.topic) == ("TopicTest", "TopicTest")
    consumer.unsubscribe("TopicTest")
    assert not consumer.subscriptions
