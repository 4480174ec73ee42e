"""The client instance's and consumers' background loops survive their own bugs."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from client.consumer_core import ConsumerState
from client.consumer_types import ConsumeOrderlyStatus, MessageModel
from client.instance import MQClientInstance
from client.process_queue import ProcessQueue
from client.push_consumer import PushConsumer
from protocol.message import MessageExt, MessageQueue
from tests.broker.test_guarded_service import FakeLog
from tests.client.fakes import closed_port_addr


class BrokenConsumer:
    """A consumer whose every callback the instance drives raises."""

    group = "broken-group"

    def __init__(self) -> None:
        self.calls = {"data": 0, "topics": 0, "rebalance": 0, "persist": 0}

    def consumer_data(self) -> dict[str, Any]:
        self.calls["data"] += 1
        raise TypeError("consumer_data bug")

    def subscribed_topics(self) -> set[str]:
        self.calls["topics"] += 1
        raise AttributeError("subscriptions bug")

    async def do_rebalance(self) -> None:
        self.calls["rebalance"] += 1
        raise ZeroDivisionError("allocation bug")

    async def persist_consumer_offset(self) -> None:
        self.calls["persist"] += 1
        raise LookupError("offset store bug")


async def test_instance_loops_survive_failing_iterations(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inst = MQClientInstance(
        closed_port_addr(), poll_name_server_interval=10, heartbeat_broker_interval=10,
        rebalance_interval=10, persist_consumer_offset_interval=5,
    )
    logs: list[FakeLog] = []
    for guard in (inst._refresh_guard, inst._heartbeat_guard, inst._rebalance_guard,
                  inst._persist_guard):
        guard.log = FakeLog()
        logs.append(guard.log)
    consumer = BrokenConsumer()
    await inst.start()
    try:
        inst.register_consumer(consumer)  # type: ignore[arg-type]
        for _ in range(20):
            inst.rebalance_immediately()  # a flood of NOTIFY_CONSUMER_IDS_CHANGED
            await trio.sleep(0.01)
        await trio.sleep(300)
        assert inst.running and inst._service.running
        # every loop kept going through its failures
        assert consumer.calls["topics"] >= 10  # route refresh
        assert consumer.calls["data"] >= 10  # heartbeats
        assert consumer.calls["rebalance"] >= 10
        assert consumer.calls["persist"] >= 20
        # each failure logged once with its traceback, the repeats rate-limited
        for log in logs:
            assert log.lines and "exc_info" in log.lines[0][2]
            assert len(log.lines) <= 6
    finally:
        await inst.shutdown()


def message(offset: int) -> MessageExt:
    return MessageExt(topic="T", body=b"m%d" % offset, properties={}, queue_offset=offset)


async def test_orderly_consume_round_failing_is_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    consumer = PushConsumer("g", closed_port_addr(), message_model=MessageModel.BROADCASTING)
    seen: list[bytes] = []

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
        seen.extend(m.body for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS

    consumer.register_message_listener(listener, orderly=True)
    consumer._guard.log = log = FakeLog()
    consumer._state = ConsumerState.RUNNING
    fails = {"n": 2}
    real_reset = consumer._reset_retry_topic

    def reset(msgs: Any) -> None:
        if fails["n"]:
            fails["n"] -= 1
            raise RuntimeError("bug in one round")
        real_reset(msgs)

    consumer._reset_retry_topic = reset  # type: ignore[method-assign]
    pq = ProcessQueue()
    assert pq.put_messages([message(0), message(1), message(2)])
    with trio.fail_after(10):
        await consumer._consume_orderly(MessageQueue("T", "b", 0), pq)
    assert seen == [b"m0", b"m1", b"m2"]  # in order, none lost to the failing rounds
    assert consumer._guard.failures == 2 and len(log.lines) == 1
    assert not pq.consuming_flag and pq.msg_count == 0
