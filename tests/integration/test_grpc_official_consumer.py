"""RocketMQ's official Python client 5.x consuming over gRPC (ReceiveMessage, AckMessage,
ChangeInvisibleDuration) from a real broker with enableGrpc: its SimpleConsumer receives
what its Producer sent with every field it checks, acks, changes the invisibility of one
message and receives it again with the next delivery attempt (the old handle's ack is
INVALID_RECEIPT_HANDLE), and a message never acked goes to %RETRY% and then the dead-letter
queue; our remoting SimpleConsumer and the official one in one group share the messages,
each seen once. Same venv mechanism and skip as test_grpc_official_client.py.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from broker.grpc.pb import definition_pb2 as pb
from client import Message, Producer, SendStatus
from client.admin import MQAdmin, MQAdminError
from client.simple_consumer import SimpleConsumer
from protocol.names import dlq_topic
from tests.integration.cluster import Cluster, Daemon, free_port, json_lines
from tests.integration.test_grpc_official_client import RMQ5, pytestmark  # noqa: F401
from tests.waits import routed, wait_until

SCRIPT = __file__.rsplit("/", 1)[0] + "/rmq5_consumer.py"
TOPIC = "GrpcPopTopic"
GROUP = "grpc-pop-group"


async def grpc_broker(cluster: Cluster, **props: object) -> tuple[str, Daemon, int]:
    ns = cluster.namesrv()
    port = free_port(1)
    broker = cluster.broker("grpc-pop", ns.addr, enableGrpc="true", grpcListenPort=port,
                            reviveInterval=100, **props)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2,
                                 write_queue_nums=2)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
    return ns.addr, broker, port


async def dlq_count(ns: str) -> int:
    async with MQAdmin(ns) as admin:
        try:
            return sum(q.max_offset for q in await admin.topic_status(dlq_topic(GROUP)))
        except MQAdminError:
            return 0


async def test_official_simple_consumer_receives_acks_changes_and_dead_letters(
        cluster: Cluster) -> None:
    assert RMQ5 is not None
    ns, broker, port = await grpc_broker(cluster, maxReconsumeTimes=1)
    with trio.fail_after(120):
        done = await trio.run_process(
            [RMQ5, SCRIPT, "scenario", f"127.0.0.1:{port}", TOPIC, GROUP, "--count", "5",
             "--never-for", "12"], capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]
    sent = next(x["sent"] for x in lines if "sent" in x)
    received = [x["received"] for x in lines if "received" in x]
    assert sorted(m["id"] for m in received) == sorted(sent)
    for m in received:
        i = m["body"].rsplit("-", 1)[1]
        assert m["tag"] == "TagA" and m["keys"] == [f"key-{i}"]
        assert m["properties"] == {"seq": i}
        assert m["attempt"] == 1 and not m["corrupted"] and m["topic"] == TOPIC
        assert m["born_host"] and m["born_timestamp"] > 0
    # the handle replaced by the change of invisibility: a clear INVALID_RECEIPT_HANDLE
    stale = next(x for x in lines if "stale_ack" in x)
    assert stale["stale_ack"] == pb.Code.INVALID_RECEIPT_HANDLE, stale
    assert "replaced" in stale["error"]
    assert next(x["handle_changed"] for x in lines if "handle_changed" in x)
    again = [x["again"] for x in lines if "again" in x]
    changed = [m for m in again if m["body"] == "body-0"]
    assert [m["attempt"] for m in changed] == [2]  # back once after 1 s, then acked
    assert changed[0]["topic"] == TOPIC and changed[0]["id"] in sent
    never = [m for m in again if m["body"] == "body-1"]
    assert [m["attempt"] for m in never] == [2]  # retryMaxTimes 1: then the DLQ
    assert not [m for m in again if m["body"] not in ("body-0", "body-1")]
    await wait_until(lambda: dlq_count(ns), 20, "the never-acked message dead-lettered")
    assert await dlq_count(ns) == 1


async def test_remoting_and_grpc_simple_consumers_share_a_group(cluster: Cluster) -> None:
    assert RMQ5 is not None
    ns, broker, port = await grpc_broker(cluster)
    count = 200
    official: list[dict[str, Any]] = []
    ours: list[bytes] = []
    async with SimpleConsumer(GROUP, ns, await_duration=1) as c:
        c.subscribe(TOPIC)
        async with trio.open_nursery() as nursery:
            proc = await trio.lowlevel.open_process(
                [RMQ5, SCRIPT, "consume", f"127.0.0.1:{port}", TOPIC, GROUP, "--batch", "8"],
                stdin=-1, stdout=-1, stderr=-1)  # subprocess.PIPE
            ready = trio.Event()

            async def read_official() -> None:
                async for event in json_lines(proc.stdout):
                    if event.get("ready"):
                        ready.set()
                    elif "id" in event:
                        assert event["acked"], event
                        official.append(event)
            nursery.start_soon(read_official)
            with trio.fail_after(30):
                await ready.wait()
            await c.receive(1, 30)  # our first pop on the group's queues
            async with Producer("grpc-pop-producer", ns) as p:
                for i in range(count):
                    r = await p.send(Message(TOPIC, b"mixed-%04d" % i))
                    assert r.send_status == SendStatus.SEND_OK

            async def ours_loop() -> None:
                while True:
                    for m in await c.receive(8, 30):
                        await c.ack(m)
                        ours.append(m.body)
            nursery.start_soon(ours_loop)
            await wait_until(lambda: len(ours) + len(official) >= count, 60,
                             "every message received by one consumer or the other")
            assert proc.stdin is not None
            await proc.stdin.aclose()
            with trio.fail_after(20):
                await proc.wait()
            nursery.cancel_scope.cancel()
    bodies = ours + [e["body"].encode() for e in official]
    assert sorted(bodies) == [b"mixed-%04d" % i for i in range(count)]  # each once
    assert ours and official  # both took part
    assert all(e["attempt"] == 1 for e in official)
