"""RocketMQ's official Python client 5.x (gRPC) against two real brokers with enableGrpc:
given one broker's gRPC endpoint, its Producer learns both from QueryRoute (each broker
registered its gRPC port with the name server) and sends normal messages and a FIFO group,
then every SEND_OK message is read back with our own SDK's pull consumer over remoting.

The client lives in its own venv (make rmq5: .venv-rmq5, or RMQ5_PYTHON naming another
interpreter that has it): the 4.x ``rocketmq`` wheel of the test extra also installs a
top-level ``rocketmq`` package. Without it this test skips and says why.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import trio

from client import PullConsumer, PullStatus
from client.admin import MQAdmin, MQAdminError
from protocol.message import MessageExt
from tests.integration.cluster import Cluster, free_port
from tests.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("rmq5_producer.py")


def rmq5_python() -> str | None:
    """The interpreter with rocketmq-python-client 5.x, or None."""
    given = os.environ.get("RMQ5_PYTHON") or str(ROOT / ".venv-rmq5" / "bin" / "python")
    if not Path(given).exists():
        return None
    probe = subprocess.run([given, "-c", "import rocketmq.v5"], capture_output=True, timeout=60)
    return given if probe.returncode == 0 else None


RMQ5 = rmq5_python()
pytestmark = pytest.mark.skipif(
    RMQ5 is None, reason="RocketMQ's official Python client 5.x is not installed: `make rmq5` "
    "makes .venv-rmq5 with it (needs PyPI), or set RMQ5_PYTHON to a Python that has it")

NORMAL, FIFO = 40, 12


async def read_all(ns_addr: str, topic: str, expected: int) -> list[MessageExt]:
    """Every message of ``topic``, pulled queue by queue from offset 0 to the end."""
    found: list[MessageExt] = []
    async with PullConsumer("grpc-readback", ns_addr) as consumer:
        for mq in sorted(await consumer.fetch_subscribe_message_queues(topic),
                         key=lambda q: q.queue_id):
            offset = 0
            while True:
                pulled = await consumer.pull(mq, "*", offset, 32)
                if pulled.pull_status is not PullStatus.FOUND:
                    break
                found.extend(pulled.msg_found_list)
                offset = pulled.next_begin_offset
    assert len(found) <= expected
    return found


async def test_official_5x_producer_sends_over_grpc_and_our_sdk_reads_back(
        cluster: Cluster) -> None:
    assert RMQ5 is not None
    ns = cluster.namesrv()
    grpc_port, other_grpc_port = free_port(1), free_port(1)
    a = cluster.broker("grpc-a", ns.addr, enableGrpc="true", grpcListenPort=grpc_port)
    b = cluster.broker("grpc-b", ns.addr, enableGrpc="true", grpcListenPort=other_grpc_port)
    topic = "GrpcInterop"
    async with MQAdmin(ns.addr) as admin:
        for broker in (a, b):
            await admin.create_topic(topic, broker_addr=broker.addr, read_queue_nums=4,
                                     write_queue_nums=4)

        async def both_routed() -> bool:
            try:
                route = await admin.topic_route(topic)
            except MQAdminError:
                return False
            return sorted(bd.grpc_ports.get(0, 0) for bd in route.broker_datas) == \
                sorted([grpc_port, other_grpc_port])
        await wait_until(both_routed, 15, "both brokers and their gRPC ports in the route")
    with trio.fail_after(120):
        done = await trio.run_process(
            [RMQ5, str(SCRIPT), f"127.0.0.1:{grpc_port}", topic, str(NORMAL),
             "--fifo-group", "order-7", "--fifo-count", str(FIFO)],
            capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result = json.loads(done.stdout)
    assert result["failed"] == []
    sent = result["sent"]
    assert len(sent) == NORMAL + FIFO
    by_id = {s["id"]: s for s in sent}
    assert len(by_id) == len(sent)

    found = await wait_until(
        lambda: _all_of(ns.addr, topic, len(sent)), 20, "every SEND_OK message read back")
    got = {m.uniq_key: m for m in found}
    assert set(got) == set(by_id)
    for msg_id, s in by_id.items():
        m = got[msg_id]
        assert m.body.decode() == s["body"]
        assert m.tags == "TagA"
        assert m.keys == f"key-{s['body'].rsplit('-', 1)[1]}"
        assert m.get_property("seq") == s["body"].rsplit("-", 1)[1]
        assert m.queue_offset == s["offset"]
    # the FIFO group's messages: one queue, in the order sent
    fifo = [got[s["id"]] for s in sent if s["group"]]
    assert len({m.queue_id for m in fifo}) == 1
    assert [m.queue_offset for m in fifo] == sorted(m.queue_offset for m in fifo)
    assert [m.body for m in fifo] == [f"rmq5-order-7-{i}".encode() for i in range(FIFO)]
    assert all(m.get_property("__SHARDINGKEY") == "order-7" for m in fifo)
    # normal messages were spread over both brokers (the client sent to each one's gRPC
    # endpoint, as QueryRoute named it) and over the queues by the servers
    normal = [got[s["id"]] for s in sent if not s["group"]]
    assert {m.store_host for m in normal} == {a.addr, b.addr}
    assert len({(m.store_host, m.queue_id) for m in normal}) > 2


async def _all_of(ns_addr: str, topic: str, expected: int) -> list[MessageExt] | None:
    found = await read_all(ns_addr, topic, expected)
    return found if len(found) == expected else None
