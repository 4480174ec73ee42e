"""A push consumer drops a queue whose pull task has stopped pulling and takes it
again (RocketMQ's ProcessQueue.isPullExpired, dropped in
updateProcessQueueTableInRebalance for CONSUME_PASSIVELY consumers).

The consumer runs for real (its rebalance, pull tasks, consume workers and
offset store) against an in-memory broker API and client instance; virtual
time (MockClock) plays the minutes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing

from client.consumer_core import ConsumerState
from client.consumer_types import ConsumeConcurrentlyStatus, ConsumeFromWhere
from client.errors import MQBrokerError, MQClientError
from client.lite_pull_consumer import LitePullConsumer
from client.offset_store import RemoteBrokerOffsetStore
from client.process_queue import PULL_MAX_IDLE_TIME, ProcessQueue
from client.pull_result import PullResult, PullStatus
from client.push_consumer import PushConsumer
from client.service import ServiceNursery
from protocol.codes import ResponseCode
from protocol.message import MessageExt, MessageQueue

GROUP = "expiry-group"
TOPIC = "ExpiryTopic"
STUCK = MessageQueue(TOPIC, "broker-a", 0)  # its second pull never returns
LIVE = MessageQueue(TOPIC, "broker-a", 1)  # long polls, 15 s each, as usual
PAUSED = MessageQueue(TOPIC, "broker-a", 2)  # flow-controlled: its listener is slow
REBALANCE_INTERVAL = 20.0


class FakeInstance:
    """The client instance as a consumer sees it: one route, nothing else."""

    client_id = "127.0.0.1@expiry"
    request_timeout = 3.0

    def __init__(self, queues: list[MessageQueue]) -> None:
        self.queues = queues
        self.failure_refreshes: list[tuple[float, str, float]] = []  # (now, topic, deadline)

    async def refresh_route_after_failure(self, topic: str, deadline: float) -> None:
        self.failure_refreshes.append((trio.current_time(), topic, deadline))

    def subscribe_queues(self, topic: str) -> list[MessageQueue] | None:
        return list(self.queues) if topic == TOPIC else None

    async def update_topic_route(self, topic: str) -> None:
        return None

    async def send_heartbeat_to_all_brokers(self) -> None:
        return None

    def rebalance_immediately(self) -> None:
        return None

    async def unregister_consumer(self, group: str) -> None:
        return None

    async def release(self) -> None:
        return None


class FakeBrokerApi:
    """ConsumerAPI's calls the push consumer makes, answered from memory; every
    pull and offset commit recorded with its (virtual) time."""

    group = GROUP

    def __init__(self, instance: FakeInstance) -> None:
        self.instance = instance
        self.stored: dict[MessageQueue, int] = {}  # messages in each queue
        self.committed: dict[MessageQueue, int] = {}  # the broker's consumer offsets
        self.hang_at: dict[MessageQueue, int] = {}  # a pull at this offset never returns (once)
        self.events: list[tuple[float, str, MessageQueue, int]] = []
        self.in_flight: Counter[MessageQueue] = Counter()
        self.most_in_flight: Counter[MessageQueue] = Counter()
        self.cancelled: list[tuple[float, MessageQueue]] = []
        self.fail_with: dict[MessageQueue, list[Exception]] = {}  # next pulls raise these

    def admin_addr(self, mq: MessageQueue) -> str:
        return "127.0.0.1:10911"

    async def update_consume_offset(self, mq: MessageQueue, offset: int,
                                    timeout: float | None = None) -> str:
        self.committed[mq] = offset
        self.events.append((trio.current_time(), "commit", mq, offset))
        return self.admin_addr(mq)

    async def fetch_consume_offset(self, mq: MessageQueue) -> int:
        return self.committed.get(mq, -1)

    async def max_offset(self, mq: MessageQueue) -> int:
        return self.stored.get(mq, 0)

    async def consumer_ids(self, topic: str) -> list[str]:
        return [self.instance.client_id]

    async def pull(self, mq: MessageQueue, sub: Any, offset: int, max_nums: int, *,
                   timeout: float, sys_flag: int = 0, commit_offset: int = 0,
                   suspend_timeout_millis: int = 0) -> PullResult:
        self.events.append((trio.current_time(), "pull", mq, offset))
        failures = self.fail_with.get(mq)
        if failures:
            raise failures.pop(0)
        self.in_flight[mq] += 1
        self.most_in_flight[mq] = max(self.most_in_flight[mq], self.in_flight[mq])
        try:
            if self.hang_at.get(mq) == offset:
                del self.hang_at[mq]
                await trio.sleep_forever()  # a pull that is never answered nor timed out
            hi = self.stored.get(mq, 0)
            if offset < hi:
                msgs = [MessageExt(mq.topic, b"m%d" % o, {}, queue_id=mq.queue_id, queue_offset=o)
                        for o in range(offset, min(hi, offset + max_nums))]
                return PullResult(PullStatus.FOUND, offset + len(msgs), 0, hi, msgs)
            await trio.sleep(suspend_timeout_millis / 1000)  # the broker holds it: nothing new
            return PullResult(PullStatus.NO_NEW_MSG, offset, 0, hi)
        except trio.Cancelled:
            self.cancelled.append((trio.current_time(), mq))
            raise
        finally:
            self.in_flight[mq] -= 1

    def pulls(self, mq: MessageQueue) -> list[tuple[float, int]]:
        return [(t, o) for t, what, q, o in self.events if what == "pull" and q == mq]

    def commits(self, mq: MessageQueue) -> list[tuple[float, int]]:
        return [(t, o) for t, what, q, o in self.events if what == "commit" and q == mq]


class Harness:
    """A started PushConsumer wired to the fakes, rebalanced every 20 s as the
    client instance does (no periodic offset persistence: an offset reaches the
    fake broker only when a queue is dropped)."""

    def __init__(self, consumer: PushConsumer, queues: list[MessageQueue]) -> None:
        self.consumer = consumer
        self.instance = FakeInstance(queues)
        self.api = FakeBrokerApi(self.instance)
        self.consumed: list[tuple[int, int]] = []  # (queue id, offset)
        self.slow = trio.Event()  # the PAUSED queue's listener waits for it
        self.drops: list[tuple[float, MessageQueue, str]] = []
        consumer.subscribe(TOPIC, "*")
        consumer.register_message_listener(self.listener)
        consumer._start_core = self._start_core  # type: ignore[method-assign]
        real_drop = consumer._drop_queue

        async def drop(mq: MessageQueue, why: str) -> bool:
            self.drops.append((trio.current_time(), mq, why))
            return await real_drop(mq, why)

        consumer._drop_queue = drop  # type: ignore[method-assign]

    async def listener(self, msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            if m.queue_id == PAUSED.queue_id:
                await self.slow.wait()
            self.consumed.append((m.queue_id, m.queue_offset))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def _start_core(self) -> None:
        c = self.consumer
        c._instance = self.instance  # type: ignore[assignment]
        c._api = self.api  # type: ignore[assignment]
        c._offset_store = RemoteBrokerOffsetStore(self.api)  # type: ignore[arg-type]
        c._service = ServiceNursery("test-consumer")
        await c._service.start()
        c._state = ConsumerState.RUNNING
        await c.do_rebalance()

    async def rebalance_loop(self) -> None:
        while True:
            await trio.sleep(REBALANCE_INTERVAL)
            await self.consumer.do_rebalance()


def consumer(**options: Any) -> PushConsumer:
    return PushConsumer(GROUP, "127.0.0.1:9876",
                        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                        pull_batch_size=4, pull_threshold_for_queue=2, **options)


@pytest.mark.parametrize("max_idle", [None, 30.0])
async def test_stuck_pull_task_is_dropped_committed_and_taken_again(
    autojump_clock: trio.testing.MockClock, max_idle: float | None,
) -> None:
    idle = PULL_MAX_IDLE_TIME if max_idle is None else max_idle
    options = {} if max_idle is None else {"pull_max_idle_s": max_idle}
    h = Harness(consumer(**options), [STUCK, LIVE, PAUSED])
    api = h.api
    api.stored = {STUCK: 5, LIVE: 5, PAUSED: 10}
    api.hang_at[STUCK] = 5  # after its first five messages, STUCK's pull never comes back
    async with trio.open_nursery() as nursery:
        t0 = trio.current_time()
        await h.consumer.start()
        nursery.start_soon(h.rebalance_loop)
        table = h.consumer.process_queue_table
        first = dict(table)
        assert set(first) == {STUCK, LIVE, PAUSED}

        # the stuck queue is dropped at the first rebalance after `idle` s without a pull
        await trio.sleep(idle + REBALANCE_INTERVAL + 1)
        hung_at = api.pulls(STUCK)[1][0]
        expected = t0 + REBALANCE_INTERVAL * (int(idle // REBALANCE_INTERVAL) + 1)
        assert [(t, mq, why) for t, mq, why in h.drops] == [(expected, STUCK, "pull expired")]
        assert expected - hung_at > idle
        # its stuck pull was cancelled, its offset (the five consumed) committed,
        # then it was taken again from that offset with a new process queue and task
        assert api.cancelled == [(expected, STUCK)]
        assert api.commits(STUCK) == [(expected, 5)]
        commit_index = api.events.index((expected, "commit", STUCK, 5))
        retaken = [e for e in api.events[commit_index:] if e[1] == "pull" and e[2] == STUCK]
        assert retaken and retaken[0] == (expected, "pull", STUCK, 5)
        assert table[STUCK] is not first[STUCK] and not table[STUCK].dropped
        assert first[STUCK].dropped
        assert set(h.consumer._pull_tasks) == {STUCK, LIVE, PAUSED}

        # the queue pulls again: new messages come through it
        api.stored[STUCK] = 8
        # ... while LIVE (long polling) and PAUSED (flow-controlled all along) are never
        # dropped, however long it runs
        await trio.sleep(10 * idle)
        assert [mq for _, mq, _ in h.drops] == [STUCK]
        assert table[LIVE] is first[LIVE] and table[PAUSED] is first[PAUSED]
        assert api.commits(LIVE) == [] and api.commits(PAUSED) == []
        assert len(api.pulls(LIVE)) >= 10 * idle // 15
        assert len(api.pulls(PAUSED)) == 1  # paused since its first batch: not pulling, alive
        assert sorted(o for q, o in h.consumed if q == STUCK.queue_id) == list(range(8))
        assert sorted(o for q, o in h.consumed if q == LIVE.queue_id) == list(range(5))

        h.slow.set()  # PAUSED's listener catches up: its queue pulls the rest
        await trio.sleep(60)
        assert sorted(o for q, o in h.consumed if q == PAUSED.queue_id) == list(range(10))
        assert [mq for _, mq, _ in h.drops] == [STUCK]
        # never two pull tasks on one queue, the cancelled one included
        assert max(api.most_in_flight.values()) == 1

        await h.consumer.shutdown()
        nursery.cancel_scope.cancel()
    assert h.consumer._pull_tasks == {}
    assert sum(api.in_flight.values()) == 0  # no pull task outlived the consumer
    assert api.committed == {STUCK: 8, LIVE: 5, PAUSED: 10}


async def test_a_queue_whose_drop_waits_is_not_pulled_twice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While a dropped queue's cancelled task has not ended, the queue is not
    taken again: the stuck task ends first (here it shields its cleanup for 0.5 s)."""
    h = Harness(consumer(), [STUCK])
    api = h.api
    api.stored = {STUCK: 3}
    api.hang_at[STUCK] = 3
    real_pull = api.pull

    async def slow_to_stop(*args: Any, **kw: Any) -> PullResult:
        try:
            return await real_pull(*args, **kw)
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.5)

    api.pull = slow_to_stop  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        await h.consumer.start()
        nursery.start_soon(h.rebalance_loop)
        await trio.sleep(PULL_MAX_IDLE_TIME + 2 * REBALANCE_INTERVAL)
        [(dropped_at, _, _)] = h.drops
        [(commit_at, offset)] = api.commits(STUCK)
        assert offset == 3 and commit_at == pytest.approx(dropped_at + 0.5)
        assert max(api.most_in_flight.values()) == 1
        await h.consumer.shutdown()
        nursery.cancel_scope.cancel()


def test_pull_expired_is_pure() -> None:
    pq = ProcessQueue(now=1000.0)
    assert not pq.pull_expired(1000.0 + PULL_MAX_IDLE_TIME)
    assert pq.pull_expired(1000.0 + PULL_MAX_IDLE_TIME + 0.001)
    assert not pq.pull_expired(1030.0, max_idle=30.0)
    assert pq.pull_expired(1030.5, max_idle=30.0)


def test_only_push_consumers_drop_expired_queues() -> None:
    pq = ProcessQueue(now=0.0)
    late = PULL_MAX_IDLE_TIME + 1
    push = PushConsumer(GROUP, "127.0.0.1:9876")
    assert push.pull_max_idle_s == PULL_MAX_IDLE_TIME
    assert push._pull_expired(pq, late)
    lite = LitePullConsumer(GROUP, "127.0.0.1:9876")  # CONSUME_ACTIVELY, as RocketMQ
    assert not lite._pull_expired(pq, late)
    pq.dropped = True  # already being released: the rebalance finishes that instead
    assert not push._pull_expired(pq, late)


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), "120", True, None])
def test_pull_max_idle_must_be_a_positive_number(bad: Any) -> None:
    with pytest.raises(MQClientError, match="pull_max_idle_s"):
        PushConsumer(GROUP, "127.0.0.1:9876", pull_max_idle_s=bad)


async def test_a_pull_that_cannot_reach_its_broker_refreshes_the_route(
        autojump_clock: trio.testing.MockClock) -> None:
    """A failover: the master a queue was pulled from is gone. The failed pull asks
    the client instance for the topic's route at once (the instance limits it to
    once a second), not at the next periodic refresh; a broker's answer does not."""
    h = Harness(consumer(), [LIVE])
    api = h.api
    api.stored = {LIVE: 3}
    api.fail_with[LIVE] = [MQClientError("connection lost"), MQClientError("refused"),
                           MQBrokerError(ResponseCode.SYSTEM_BUSY, "busy")]
    async with trio.open_nursery() as nursery:
        t0 = trio.current_time()
        await h.consumer.start()
        await trio.sleep(30)
        # two unreachable-broker failures, 3 s apart (the pull's back-off), each with
        # the instance's request timeout as its bound; the busy answer none
        assert [(t - t0, topic, d - t) for t, topic, d in h.instance.failure_refreshes] == [
            (0.0, TOPIC, 3.0), (3.0, TOPIC, 3.0)]
        assert sorted(o for q, o in h.consumed if q == LIVE.queue_id) == [0, 1, 2]
        await h.consumer.shutdown()
        nursery.cancel_scope.cancel()
