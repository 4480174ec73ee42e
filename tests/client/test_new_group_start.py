"""Where a consumer of a group with no offset starts: it follows the broker's
answer to QUERY_CONSUMER_OFFSET, as RocketMQ's RebalancePushImpl does (an
offset, 0 included: there; QUERY_NOT_FOUND: ``consume_from_where``, a retry
topic from 0). Lite pull here (the push consumer shares the code, see
tests/integration/test_push_consumer.py for both answers from a real broker)."""

from __future__ import annotations

import pytest
import trio

from client import ConsumeFromWhere, LitePullConsumer, MessageExt, MessageQueue
from protocol.codes import RequestCode
from tests.client.fakes import FakeCluster

TOPIC = FakeCluster.TOPIC
GROUP = "fresh"


async def polled(cluster: FakeCluster, mq: MessageQueue,
                 where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
                 ) -> list[bytes]:
    """What a new lite-pull consumer of ``mq`` polls, up to and with ``later``,
    a message put once it pulls."""
    broker = cluster.broker(mq.broker_name)
    broker.requests.clear()
    consumer = LitePullConsumer(GROUP, cluster.namesrv_addr, consume_from_where=where,
                                auto_commit=False)
    consumer.set_assignment([mq])
    got: list[MessageExt] = []
    async with consumer:
        with trio.fail_after(10):
            while not broker.requests_of(RequestCode.PULL_MESSAGE):
                await trio.sleep(0.01)
        broker.put(mq.topic, mq.queue_id, b"later")
        with trio.fail_after(10):
            while not got or got[-1].body != b"later":
                got += await consumer.poll(0.5)
    return [m.body for m in got]


@pytest.mark.parametrize(("answer", "want"), [
    (0, [b"m0", b"m1", b"m2"]),  # the broker's 0: from the queue's start
    (2, [b"m2"]),  # any offset it answers
    (None, []),  # QUERY_NOT_FOUND: CONSUME_FROM_LAST_OFFSET starts at the max offset
])
async def test_last_offset_follows_the_brokers_answer(cluster: FakeCluster, answer: int | None,
                                                      want: list[bytes]) -> None:
    broker = cluster.brokers[0]
    for i in range(3):
        broker.put(TOPIC, 1, b"m%d" % i)
    broker.new_group_offset = answer
    assert await polled(cluster, MessageQueue(TOPIC, broker.name, 1)) == want + [b"later"]


async def test_retry_topic_and_first_offset_start_at_0_when_not_found(
        cluster: FakeCluster) -> None:
    broker = cluster.brokers[0]
    retry = "%RETRY%" + GROUP
    cluster.namesrv.set_route(retry, [broker])
    for topic in (retry, TOPIC):
        for i in range(2):
            broker.put(topic, 0, b"m%d" % i)
    both = [b"m0", b"m1", b"later"]
    assert await polled(cluster, MessageQueue(retry, broker.name, 0)) == both
    assert await polled(cluster, MessageQueue(TOPIC, broker.name, 0),
                        ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) == both
