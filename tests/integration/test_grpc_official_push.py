"""RocketMQ's official Python client 5.x PushConsumer over gRPC (QueryAssignment,
ReceiveMessage with auto_renew, AckMessage, ChangeInvisibleDuration) against a real broker
with enableGrpc, one consumer process for three behaviours at once (its start-up is the
slow part):

- plain messages: each consumed exactly once, at the first attempt, and acked;
- messages its listener fails: received again with growing attempts (the customized
  back-off from messageDelayLevel), then, past the group's retryMaxTimes, in %DLQ%<group>
  (read back with our admin SDK by key);
- a message whose listener runs longer than the invisible duration: not redelivered,
  because the broker renews its invisibility, and its ack (with the handle first given)
  succeeds;
- meanwhile a second consumer, of a FIFO group (consumeMessageOrderly) on another topic, is
  told fifo (one assignment per queue): its listener fails a message at every local attempt
  (the client's own 17, 1 s apart, the message kept invisible by renewals), then the client
  forwards it with ForwardMessageToDeadLetterQueue into that group's %DLQ%.

Quiet is shown by state, not by sleeping: every queue of the topic and of the group's retry
topic committed to its end (all acked or dead-lettered) and the DLQ holding the failed
messages. Same venv mechanism and skip as test_grpc_official_client.py.
"""

from __future__ import annotations

from typing import Any

import trio

from client import Message, Producer, SendStatus
from client.admin import MQAdmin, MQAdminError
from protocol.names import dlq_topic, retry_topic
from tests.integration.cluster import Cluster, free_port, json_lines
from tests.integration.test_grpc_official_client import RMQ5, pytestmark  # noqa: F401
from tests.waits import routed, wait_until

SCRIPT = __file__.rsplit("/", 1)[0] + "/rmq5_push_consumer.py"
TOPIC = "GrpcPushTopic"
GROUP = "grpc-push-group"
FIFO_TOPIC = "GrpcPushFifoTopic"
FIFO_GROUP = "grpc-push-fifo-group"
PLAIN, FAILING = 20, 2
SLOW_S = 5  # the listener's time on a slow message: more than twice the invisible duration


async def lag(admin: MQAdmin) -> int | None:
    """Messages of the topic and the retry topic not yet acked (None: not known yet)."""
    try:
        rows = await admin.consume_stats(GROUP)
    except MQAdminError:
        return None
    topics = {r["topic"] for r in rows}
    if TOPIC not in topics or retry_topic(GROUP) not in topics:
        return None
    return sum(r["lag"] for r in rows)


async def dlq_count(admin: MQAdmin, group: str = GROUP) -> int:
    try:
        return sum(q.max_offset for q in await admin.topic_status(dlq_topic(group)))
    except MQAdminError:
        return 0


class PushProcess:
    """One official PushConsumer process: the listener's calls as they come."""

    def __init__(self, port: int, topic: str, group: str) -> None:
        self.args = [RMQ5, SCRIPT, f"127.0.0.1:{port}", topic, group, "--slow-s", str(SLOW_S)]
        self.events: list[dict[str, Any]] = []
        self.settings: dict[str, Any] = {}
        self.ready = trio.Event()
        self.proc: trio.Process | None = None

    async def run(self, nursery: trio.Nursery) -> None:
        self.proc = await trio.lowlevel.open_process(
            [str(a) for a in self.args], stdin=-1, stdout=-1, stderr=-1)  # subprocess.PIPE
        nursery.start_soon(self._read)

    async def _read(self) -> None:
        assert self.proc is not None
        async for event in json_lines(self.proc.stdout):
            if event.get("ready"):
                self.ready.set()
            elif "body" in event:
                self.events.append(event)
            else:
                self.settings.update(event)

    async def stop(self) -> int:
        assert self.proc is not None and self.proc.stdin is not None
        await self.proc.stdin.aclose()
        with trio.fail_after(30):
            return await self.proc.wait()

    def seen(self) -> dict[str, list[tuple[int, str]]]:
        out: dict[str, list[tuple[int, str]]] = {}
        for e in self.events:
            out.setdefault(e["body"], []).append((e["attempt"], e["result"]))
        return out


async def test_official_push_consumer_consumes_retries_dead_letters_and_is_renewed(
        cluster: Cluster) -> None:
    assert RMQ5 is not None
    ns = cluster.namesrv()
    port = free_port(1)
    # the auto-created group retries twice (3 attempts); each back-off 1 s; a receive is
    # invisible 2 s and renewed (by 2 s) when 1 s is left
    broker = cluster.broker("grpc-push", ns.addr, enableGrpc="true", grpcListenPort=port,
                            reviveInterval=100, maxReconsumeTimes=2,
                            messageDelayLevel="1s 1s 1s", defaultInvisibleTimeMills=2000,
                            renewAheadTimeMillis=1000, renewSliceTimeMillis=2000,
                            renewSchedulePeriodMillis=200)
    async with MQAdmin(ns.addr) as admin:
        for topic in (TOPIC, FIFO_TOPIC):
            await admin.create_topic(topic, broker_addr=broker.addr, read_queue_nums=2,
                                     write_queue_nums=2)
            await wait_until(routed(admin, topic), 10, "topic routed")
        await admin.update_subscription_group(broker.addr, {
            "groupName": FIFO_GROUP, "retryMaxTimes": 2, "consumeMessageOrderly": True})
        normal = PushProcess(port, TOPIC, GROUP)
        fifo = PushProcess(port, FIFO_TOPIC, FIFO_GROUP)
        async with trio.open_nursery() as nursery:
            await normal.run(nursery)
            await fifo.run(nursery)
            with trio.fail_after(30):
                await normal.ready.wait()
                await fifo.ready.wait()
            async with Producer("grpc-push-producer", ns.addr) as p:
                bodies = ([(TOPIC, f"plain-{i}") for i in range(PLAIN)]
                          + [(TOPIC, f"fail-{i}") for i in range(FAILING)] + [(TOPIC, "slow-0")]
                          + [(FIFO_TOPIC, "fail-fifo"), (FIFO_TOPIC, "plain-fifo")])
                for topic, body in bodies:
                    r = await p.send(Message(topic, body.encode(), keys=body))
                    assert r.send_status == SendStatus.SEND_OK
            await wait_until(lambda: _settled(admin), 40, "every message acked or dead-lettered")
            await wait_until(lambda: dlq_count(admin, FIFO_GROUP), 40,
                             "the FIFO consumer's failed message forwarded to its DLQ")
            assert await normal.stop() == 0
            assert await fifo.stop() == 0
            nursery.cancel_scope.cancel()
        dead = [m.body for m in await admin.query_by_key(dlq_topic(GROUP), "fail-0")
                + await admin.query_by_key(dlq_topic(GROUP), "fail-1")]
        assert sorted(dead) == [b"fail-0", b"fail-1"]
        assert await dlq_count(admin) == FAILING
        (forwarded,) = await admin.query_by_key(dlq_topic(FIFO_GROUP), "fail-fifo")
        assert forwarded.body == b"fail-fifo" and await dlq_count(admin, FIFO_GROUP) == 1
    assert normal.settings == {"fifo": False}
    seen = normal.seen()
    for i in range(PLAIN):  # each once, at the first attempt
        assert seen[f"plain-{i}"] == [(1, "SUCCESS")]
    for i in range(FAILING):  # again and again, then the DLQ: retryMaxTimes 2 + 1 attempts
        assert seen[f"fail-{i}"] == [(1, "FAILURE"), (2, "FAILURE"), (3, "FAILURE")]
    # 5 s of consumption over 2 s of invisibility: renewed, never delivered again
    assert seen["slow-0"] == [(1, "SUCCESS")]
    assert set(seen) == {f"plain-{i}" for i in range(PLAIN)} | \
        {f"fail-{i}" for i in range(FAILING)} | {"slow-0"}
    # the FIFO consumer: its local attempts all at delivery attempt 1 (never redelivered),
    # then forwarded; the other message consumed once
    assert fifo.settings == {"fifo": True}
    ordered = fifo.seen()
    assert ordered["plain-fifo"] == [(1, "SUCCESS")]
    assert ordered["fail-fifo"] == [(1, "FAILURE")] * 17


async def _settled(admin: MQAdmin) -> bool:
    return await lag(admin) == 0 and await dlq_count(admin) == FAILING
