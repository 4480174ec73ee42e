"""One topic, three kinds of client: RocketMQ's official Python client 5.x sends over
gRPC (normal messages and a FIFO group), and two push consumers read it over remoting,
each in its own group: the official 4.x C++ client's and our SDK's. Each group gets every
SEND_OK message exactly once, with its tag.

Needs both official clients: the 5.x one in its own venv (``make rmq5``) and the 4.x
``rocketmq`` wheel in the project's; without either it skips and says why.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

from client import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from client.admin import MQAdmin
from protocol.message import MessageExt
from tests.integration.cluster import Cluster, free_port
from tests.integration.official_client import OfficialClient, load_error
from tests.integration.test_grpc_official_client import RMQ5, SCRIPT
from tests.waits import routed, wait_until

WHY_CPP = load_error()
pytestmark = [
    pytest.mark.skipif(RMQ5 is None, reason="RocketMQ's official Python client 5.x is not "
                       "installed: `make rmq5` makes .venv-rmq5 with it"),
    pytest.mark.skipif(WHY_CPP is not None, reason=f"the official 4.x client: {WHY_CPP}"),
]

TOPIC = "GrpcMixed"
NORMAL, FIFO = 30, 10


async def test_grpc_producer_read_by_cpp_and_sdk_push_consumers(cluster: Cluster,
                                                                tmp_path: Path) -> None:
    assert RMQ5 is not None
    ns = cluster.namesrv()
    grpc_port = free_port(1)
    broker = cluster.broker("grpc-mixed", ns.addr, enableGrpc="true", grpcListenPort=grpc_port)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=4,
                                 write_queue_nums=4)
        await wait_until(routed(admin, TOPIC), 15, "the topic routed")
    with trio.fail_after(120):
        done = await trio.run_process(
            [RMQ5, str(SCRIPT), f"127.0.0.1:{grpc_port}", TOPIC, str(NORMAL),
             "--fifo-group", "order-3", "--fifo-count", str(FIFO)],
            capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result = json.loads(done.stdout)
    assert result["failed"] == []
    bodies = {s["body"] for s in result["sent"]}
    assert len(bodies) == NORMAL + FIFO

    # both groups are new: they start at each queue's beginning (the queues are young)
    ours: list[MessageExt] = []

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        ours.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    sdk = PushConsumer("grpc-mixed-sdk", ns.addr,
                       consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    sdk.subscribe(TOPIC, "*")
    sdk.register_message_listener(listener)
    cpp = OfficialClient(["consume", "-n", ns.addr, "-g", "CID-grpc-mixed-cpp", "-t", TOPIC,
                          "-e", "*"], tmp_path / "cpp", timeout=180)
    try:
        cpp.wait_event("started", 60)
        async with sdk:
            def cpp_bodies() -> list[str]:
                return [r["body"] for r in cpp.records()]

            async def both_have_all() -> bool:
                return bodies <= set(cpp_bodies()) and \
                    bodies <= {m.body.decode() for m in ours}
            try:
                await wait_until(both_have_all, 60, "both groups received every message")
            except AssertionError as e:
                raise AssertionError(f"{e}: C++ {len(cpp_bodies())}, ours {len(ours)}\n"
                                     f"{cpp.diagnostics()}") from None
        cpp.write("stop")
        assert cpp.finish() == 0
    finally:
        cpp.close()

    cpp_counts = Counter(r["body"] for r in cpp.records())
    our_counts = Counter(m.body.decode() for m in ours)
    assert set(cpp_counts) == bodies and set(our_counts) == bodies
    assert max(cpp_counts.values()) == 1 and max(our_counts.values()) == 1
    assert {r["tags"] for r in cpp.records()} == {"TagA"}
    assert {m.tags for m in ours} == {"TagA"}
    assert all(r["topic"] == TOPIC for r in cpp.records())
