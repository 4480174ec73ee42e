"""SQL92 property filters against real daemons: a broker without
``enablePropertyFilter`` refuses them clearly (consumers do not start, pulls
are answered SYSTEM_ERROR); with it, push, lite-pull and pull consumers read
100,000 messages of which 1% match and get exactly the matching ones.

Each queue ends with a sentinel message the filter selects: a consumer that
has it has had every earlier entry of that queue filtered, so "nothing else
arrives" is a positive condition, not a wait."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    LitePullConsumer,
    Message,
    MessageExt,
    MessageSelector,
    MQBrokerError,
    MQClientError,
    Producer,
    PullConsumer,
    PushConsumer,
)
from client.admin import MQAdmin
from client.pull_result import PullStatus
from protocol.codes import ResponseCode
from tests.integration.cluster import Cluster, Daemon
from tests.waits import routed, wait_until

TOPIC = "SqlTopic"
QUEUES = 4
TOTAL = 100_000
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
# 1% of the messages, and the sentinels (no ``i``: the BETWEEN is NULL, OR decides)
SQL = "(mod = 42 AND i BETWEEN 0 AND 99999) OR last = TRUE"
WANTED = {str(i).encode() for i in range(TOTAL) if i % 100 == 42}
SENTINELS = {f"last-{q}".encode() for q in range(QUEUES)}
REFUSED = "The broker does not support consumer to filter message by SQL92"


async def start(cluster: Cluster, **props: object) -> tuple[Daemon, Daemon]:
    ns = cluster.namesrv()
    b = cluster.broker("broker-a", ns.addr, True, **props)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=b.addr, read_queue_nums=QUEUES,
                                 write_queue_nums=QUEUES)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
    return ns, b


async def produce(ns: Daemon) -> None:
    """TOTAL messages spread over the queues, then one sentinel per queue."""
    async with Producer("sql-producer", ns.addr) as producer:
        queues = sorted(await producer.fetch_publish_message_queues(TOPIC))
        assert len(queues) == QUEUES
        batch = 500  # the batch's message ids fit a response header
        for start_at in range(0, TOTAL, batch):
            mq = queues[(start_at // batch) % QUEUES]
            await producer.send_batch(
                [Message(TOPIC, str(i), properties={"i": str(i), "mod": str(i % 100)})
                 for i in range(start_at, start_at + batch)], mq)
        for q, mq in enumerate(queues):
            await producer.send(Message(TOPIC, f"last-{q}", properties={"last": "true"}), mq)


async def test_refused_without_enable_property_filter(cluster: Cluster) -> None:
    ns, broker = await start(cluster)
    async with Producer("sql-producer", ns.addr) as producer:
        await producer.send(Message(TOPIC, "x", properties={"a": "2"}))
    # a bad expression is refused before anything is sent, saying where
    c = PushConsumer("sql-off-push", ns.addr, consume_from_where=FIRST)
    with pytest.raises(MQClientError, match="column 4"):
        c.subscribe(TOPIC, MessageSelector.by_sql("a >"))
    # a good one: the broker says it does not filter by SQL92, and start fails
    c.subscribe(TOPIC, MessageSelector.by_sql("a > 1"))
    c.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    with pytest.raises(MQBrokerError) as err:
        await c.start()
    assert (err.value.response_code, err.value.remark) == (ResponseCode.SYSTEM_ERROR, REFUSED)
    assert not c.running
    lite = LitePullConsumer("sql-off-lite", ns.addr)
    lite.subscribe(TOPIC, MessageSelector.by_sql("a > 1"))
    with pytest.raises(MQBrokerError, match="filter message by SQL92"):
        await lite.start()
    async with PullConsumer("sql-off-pull", ns.addr) as pull:
        mqs = await pull.fetch_subscribe_message_queues(TOPIC)
        with pytest.raises(MQBrokerError) as err:
            await pull.pull(mqs[0], MessageSelector.by_sql("a > 1"), 0, 32)
        assert (err.value.response_code, err.value.remark) == (ResponseCode.SYSTEM_ERROR,
                                                               REFUSED)
        # tags are as ever
        found = [m for mq in mqs
                 for m in (await pull.pull(mq, MessageSelector.by_tag("*"), 0, 32)).msg_found_list]
        assert [m.body for m in found] == [b"x"]
    assert broker.stop() == 0


async def read_pulling(ns: Daemon) -> Counter[bytes]:
    got: Counter[bytes] = Counter()
    selector = MessageSelector.by_sql(SQL)
    async with PullConsumer("sql-pull", ns.addr) as c:
        for mq in await c.fetch_subscribe_message_queues(TOPIC):
            end = await c.max_offset(mq)
            offset = 0
            while offset < end:
                r = await c.pull(mq, selector, offset, 32)
                assert r.pull_status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG), r
                got.update(m.body for m in r.msg_found_list)
                assert r.next_begin_offset > offset
                offset = r.next_begin_offset
    return got


async def read_pushed(ns: Daemon) -> Counter[bytes]:
    got: Counter[bytes] = Counter()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        got.update(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def all_sentinels() -> bool:
        return SENTINELS <= set(got)

    c = PushConsumer("sql-push", ns.addr, consume_from_where=FIRST)
    c.subscribe(TOPIC, MessageSelector.by_sql(SQL))
    c.register_message_listener(listener)
    async with c:
        await wait_until(all_sentinels, 120, "every sentinel pushed")
    return got


async def read_polled(ns: Daemon) -> Counter[bytes]:
    got: Counter[bytes] = Counter()
    async with LitePullConsumer("sql-lite", ns.addr, consume_from_where=FIRST) as c:
        c.subscribe(TOPIC, MessageSelector.by_sql(SQL))
        with trio.fail_after(120):
            while not SENTINELS <= set(got):
                got.update(m.body for m in await c.poll(timeout=1.0))
    return got


async def test_push_lite_pull_and_pull_get_exactly_the_matches(cluster: Cluster) -> None:
    ns, broker = await start(cluster, enablePropertyFilter="true")
    await produce(ns)
    want = Counter(WANTED | SENTINELS)
    assert len(WANTED) == TOTAL // 100
    results: dict[str, Counter[bytes]] = {}

    async def run(read: Callable[[Daemon], Awaitable[Counter[bytes]]]) -> None:
        results[read.__name__] = await read(ns)

    async with trio.open_nursery() as nursery:  # three groups, each reading everything
        for read in (read_pulling, read_pushed, read_polled):
            nursery.start_soon(run, read)
    for name, got in results.items():
        assert got == want, (name, len(got), sorted(set(got) - set(want))[:5],
                             sorted(set(want) - set(got))[:5])
    assert len(results) == 3
    # the consumers' pulls were filtered on the broker: it sent the matches only
    async with MQAdmin(ns.addr) as admin:
        rows = await admin.consume_stats("sql-push", TOPIC)
        assert sum(r["consumerOffset"] for r in rows) == TOTAL + QUEUES
    assert broker.stop() == 0

