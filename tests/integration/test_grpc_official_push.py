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
  succeeds.

Quiet is shown by state, not by sleeping: every queue of the topic and of the group's retry
topic committed to its end (all acked or dead-lettered) and the DLQ holding the failed
messages. Same venv mechanism and skip as test_grpc_official_client.py.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from client import Message, Producer, SendStatus
from client.admin import MQAdmin, MQAdminError
from protocol.names import dlq_topic, retry_topic
from tests.integration.cluster import Cluster, free_port
from tests.integration.test_grpc_official_client import RMQ5, pytestmark  # noqa: F401
from tests.waits import routed, wait_until

SCRIPT = __file__.rsplit("/", 1)[0] + "/rmq5_push_consumer.py"
TOPIC = "GrpcPushTopic"
GROUP = "grpc-push-group"
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


async def dlq_count(admin: MQAdmin) -> int:
    try:
        return sum(q.max_offset for q in await admin.topic_status(dlq_topic(GROUP)))
    except MQAdminError:
        return 0


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
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2,
                                 write_queue_nums=2)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
        events: list[dict[str, Any]] = []
        settings: dict[str, Any] = {}
        async with trio.open_nursery() as nursery:
            proc = await trio.lowlevel.open_process(
                [RMQ5, SCRIPT, f"127.0.0.1:{port}", TOPIC, GROUP, "--slow-s", str(SLOW_S)],
                stdin=-1, stdout=-1, stderr=-1)  # subprocess.PIPE
            ready = trio.Event()

            async def read_events() -> None:
                assert proc.stdout is not None
                buf = b""
                async for chunk in proc.stdout:
                    buf += chunk
                    *whole, buf = buf.split(b"\n")
                    for line in whole:
                        event = json.loads(line)
                        if event.get("ready"):
                            ready.set()
                        elif "body" in event:
                            events.append(event)
                        else:
                            settings.update(event)
            nursery.start_soon(read_events)
            with trio.fail_after(30):
                await ready.wait()
            async with Producer("grpc-push-producer", ns.addr) as p:
                bodies = ([f"plain-{i}" for i in range(PLAIN)]
                          + [f"fail-{i}" for i in range(FAILING)] + ["slow-0"])
                for body in bodies:
                    r = await p.send(Message(TOPIC, body.encode(), keys=body))
                    assert r.send_status == SendStatus.SEND_OK
            await wait_until(lambda: dlq_count(admin), 40, "the failing messages dead-lettered")
            await wait_until(lambda: _settled(admin), 30, "every message acked or dead-lettered")
            assert proc.stdin is not None
            await proc.stdin.aclose()
            with trio.fail_after(30):
                await proc.wait()
            nursery.cancel_scope.cancel()
        dead = [m.body for m in await admin.query_by_key(dlq_topic(GROUP), "fail-0")
                + await admin.query_by_key(dlq_topic(GROUP), "fail-1")]
        assert sorted(dead) == [b"fail-0", b"fail-1"]
        assert await dlq_count(admin) == FAILING
    assert proc.returncode == 0
    assert settings == {"fifo": False}
    seen: dict[str, list[tuple[int, str]]] = {}
    for e in events:
        seen.setdefault(e["body"], []).append((e["attempt"], e["result"]))
    for i in range(PLAIN):  # each once, at the first attempt
        assert seen[f"plain-{i}"] == [(1, "SUCCESS")]
    for i in range(FAILING):  # again and again, then the DLQ: retryMaxTimes 2 + 1 attempts
        assert seen[f"fail-{i}"] == [(1, "FAILURE"), (2, "FAILURE"), (3, "FAILURE")]
    # 5 s of consumption over 2 s of invisibility: renewed, never delivered again
    assert seen["slow-0"] == [(1, "SUCCESS")]
    assert set(seen) == {f"plain-{i}" for i in range(PLAIN)} | \
        {f"fail-{i}" for i in range(FAILING)} | {"slow-0"}


async def _settled(admin: MQAdmin) -> bool:
    return await lag(admin) == 0 and await dlq_count(admin) == FAILING
