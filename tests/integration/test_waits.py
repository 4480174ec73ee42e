"""tests.waits' quiet condition against real brokers: it never holds while a
message is still on its way (here: a message retried for ever), so a test that
waits on it before asserting an absence cannot pass too early."""

from __future__ import annotations

import pytest

from client import ConsumeConcurrentlyStatus, ConsumeFromWhere, MessageExt, PushConsumer
from client.admin import MQAdmin
from tests.integration.cluster import Cluster
from tests.integration.test_push_consumer import LEVELS, TOPIC, produce, two_brokers
from tests.waits import consumed_all, wait_until


async def test_consumed_all_never_holds_while_a_message_is_retried(cluster: Cluster) -> None:
    ns, brokers = await two_brokers(cluster, queues=2, messageDelayLevel=LEVELS)
    group = "never-quiet"
    calls: list[int] = []

    def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        calls.append(msgs[0].reconsume_times)
        return ConsumeConcurrentlyStatus.RECONSUME_LATER  # back in 1 s, for ever

    c = PushConsumer(group, ns.addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                     max_reconsume_times=16)
    c.subscribe(TOPIC, "*")
    c.register_message_listener(listener)
    async with c, MQAdmin(ns.addr) as admin:
        await produce(ns, [b"again"], batch=1)
        await wait_until(lambda: len(calls) >= 2, 20, "a first retry")
        # looks every 10 ms for 3 s: across sends back, delays and re-puts
        with pytest.raises(AssertionError, match="still waiting"):
            await wait_until(consumed_all(admin, group, [c], [b.addr for b in brokers]), 3,
                             "quiet", interval=0.01)
        assert len(calls) >= 4 and calls == list(range(len(calls)))  # it went on retrying
