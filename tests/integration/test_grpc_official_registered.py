"""RocketMQ 5 clients as tools see them, with RocketMQ's official Python client 5.x
over gRPC against a real broker (issue 52):

- a new group's first receive reads what was sent before it (the queue starts at 0 and
  its first message is in memory: RocketMQ 5's getInitOffset);
- its SimpleConsumer is a member of its group while it runs (GET_CONSUMER_CONNECTION_LIST,
  mqadmin consumerConnection), and leaves at shutdown (NotifyClientTermination);
- ``mqadmin updateTopic -a +message.type=FIFO`` survives a kill -9 of the broker: the
  route then says the topic takes FIFO messages only, so the official Producer refuses
  to send it a normal message while its FIFO messages are stored.

Same venv mechanism and skip as test_grpc_official_client.py.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import trio

from client import Message, Producer, SendStatus
from client.admin import MQAdmin, MQAdminError
from tests.integration.cluster import BIN, Cluster, json_lines
from tests.integration.test_grpc_official_client import RMQ5, pytestmark  # noqa: F401
from tests.integration.test_grpc_official_consumer import SCRIPT, TOPIC, grpc_broker
from tests.waits import wait_until

PRODUCER_SCRIPT = __file__.rsplit("/", 1)[0] + "/rmq5_producer.py"
GROUP = "grpc-registered-group"
FIFO_TOPIC = "GrpcFifoTopic"


def mqadmin(*args: str) -> str:
    out = subprocess.run([str(BIN / "mqadmin"), *args], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


async def members(ns: str) -> list[str]:
    async with MQAdmin(ns) as admin:
        try:
            rows = await admin.consumer_connection(GROUP)
        except MQAdminError:
            return []
    return [c["clientId"] for row in rows for c in row.get("connectionSet", [])]


async def test_official_consumer_is_registered_and_reads_from_the_start(
        cluster: Cluster) -> None:
    assert RMQ5 is not None
    ns, broker, port = await grpc_broker(cluster)
    async with Producer("before-first-pop", ns) as p:
        for i in range(6):
            r = await p.send(Message(TOPIC, b"early-%d" % i))
            assert r.send_status == SendStatus.SEND_OK
    received: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        proc = await trio.lowlevel.open_process(
            [RMQ5, SCRIPT, "consume", f"127.0.0.1:{port}", TOPIC, GROUP, "--batch", "8"],
            stdin=-1, stdout=-1, stderr=-1)  # subprocess.PIPE

        async def read_official() -> None:
            async for event in json_lines(proc.stdout):
                if "id" in event:
                    received.append(event)
        nursery.start_soon(read_official)
        await wait_until(lambda: len(received) >= 6, 60, "the early messages received")
        assert sorted(e["body"] for e in received) == [f"early-{i}" for i in range(6)]
        await wait_until(lambda: members(ns), 30, "the gRPC consumer in its group")
        [client_id] = await members(ns)
        shown = mqadmin("consumerConnection", "-n", ns, "-g", GROUP)
        assert client_id in shown
        assert proc.stdin is not None
        await proc.stdin.aclose()  # the script shuts its consumer down
        with trio.fail_after(30):
            await proc.wait()
    assert proc.returncode == 0

    async def gone() -> bool:
        return not await members(ns)
    await wait_until(gone, 30, "the consumer gone after its termination")


async def test_message_type_survives_kill_9_and_conflicting_sends_are_refused(
        cluster: Cluster) -> None:
    assert RMQ5 is not None
    ns, broker, port = await grpc_broker(cluster)
    out = mqadmin("updateTopic", "-n", ns, "-b", broker.addr, "-t", FIFO_TOPIC, "-r", "2",
                  "-w", "2", "-a", "+message.type=FIFO")
    assert "success" in out and "attributes={+message.type=FIFO}" in out
    refused = subprocess.run([str(BIN / "mqadmin"), "updateTopic", "-n", ns, "-b", broker.addr,
                              "-t", FIFO_TOPIC, "-a", "+message.type=ORDERED"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "not one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED" in refused.stderr
    broker.kill()
    broker.start()
    async with MQAdmin(ns) as admin:
        cfg = await admin.topic_config(broker.addr, FIFO_TOPIC)
    assert cfg.attributes == {"message.type": "FIFO"}
    with trio.fail_after(120):
        done = await trio.run_process(
            [RMQ5, PRODUCER_SCRIPT, f"127.0.0.1:{port}", FIFO_TOPIC, "1",
             "--fifo-group", "g1", "--fifo-count", "2"],
            capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result = json.loads(done.stdout)
    assert [m["group"] for m in result["sent"]] == ["g1", "g1"]
    # the official client checks the route's accept_message_types itself (validate
    # message type) before sending; the broker's own refusal of a raw send is
    # tests/broker/grpc/test_messaging.py's
    [failure] = result["failed"]
    assert "message_type:NORMAL, queue access type:FIFO" in failure
