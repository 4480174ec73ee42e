"""Transactions over gRPC with RocketMQ's official Python client 5.x against a real broker
with enableGrpc (one broker for the module, quick checks): a committed transaction's
message is delivered and a rolled-back one's is not; transactions a producer left without
ending are checked, and the checks are answered (RecoverOrphanedTransactionCommand on its
Telemetry stream, EndTransaction from the check) by a producer of the topic started after
the first one exited. Same venv mechanism and skip as test_grpc_official_client.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from client.admin import MQAdmin
from tests.integration.cluster import Cluster, Daemon, free_port, json_lines
from tests.integration.test_grpc_official_client import RMQ5, pytestmark  # noqa: F401
from tests.integration.test_transactions import delivered, runtime
from tests.waits import routed, wait_until

SCRIPT = __file__.rsplit("/", 1)[0] + "/rmq5_transaction.py"
ENDED_TOPIC = "GrpcTxEnded"
ORPHAN_TOPIC = "GrpcTxOrphan"
QUEUES = 2
# a half message is checked 1 s after its birth, every 300 ms, and kept through many
# checks while no producer of its topic is connected
CHECKS = {"transactionCheckInterval": 300, "transactionTimeOut": 1000,
          "transactionCheckMax": 200}


@pytest.fixture(scope="module")
def tx_broker(module_cluster: Cluster) -> tuple[str, Daemon, int]:
    async def setup() -> tuple[str, Daemon, int]:
        ns = module_cluster.namesrv()
        port = free_port(1)
        broker = module_cluster.broker("grpc-tx", ns.addr, enableGrpc="true",
                                       grpcListenPort=port, **CHECKS)
        async with MQAdmin(ns.addr) as admin:
            for topic in (ENDED_TOPIC, ORPHAN_TOPIC):
                await admin.create_topic(topic, broker_addr=broker.addr,
                                         read_queue_nums=QUEUES, write_queue_nums=QUEUES)
                await wait_until(routed(admin, topic), 10, "topic routed")
        return ns.addr, broker, port

    return trio.run(setup)


async def run_script(port: int, topic: str, mode: str, *bodies: str) -> list[dict[str, Any]]:
    assert RMQ5 is not None
    with trio.fail_after(60):
        done = await trio.run_process([RMQ5, SCRIPT, f"127.0.0.1:{port}", topic, mode, *bodies],
                                      capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]


def test_commit_is_delivered_and_rollback_is_not(tx_broker: tuple[str, Daemon, int]) -> None:
    ns, broker, port = tx_broker

    async def main() -> None:
        before = await runtime(ns, broker.addr)
        sent = await run_script(port, ENDED_TOPIC, "end", "commit-1", "rollback-1", "commit-2")
        assert [s["body"] for s in sent] == ["commit-1", "rollback-1", "commit-2"]
        for s in sent:
            assert s.get("end") == 20000, s
            assert len(s["transaction_id"]) == 32 and s["id"]
        # each end was answered before the next transaction began: all is stored now
        assert sorted(await delivered(broker.addr, ENDED_TOPIC, QUEUES)) == \
            [b"commit-1", b"commit-2"]
        after = await runtime(ns, broker.addr)
        assert after["transactionCommitted"] - before["transactionCommitted"] == 2
        assert after["transactionRolledBack"] - before["transactionRolledBack"] == 1

    trio.run(main)


def test_check_answered_after_the_producer_restarts(tx_broker: tuple[str, Daemon, int]
                                                    ) -> None:
    ns, broker, port = tx_broker

    async def main() -> None:
        assert RMQ5 is not None
        left = await run_script(port, ORPHAN_TOPIC, "orphan", "commit-orphan",
                                "rollback-orphan")
        ids = {s["body"]: s["id"] for s in left if "body" in s}
        assert set(ids) == {"commit-orphan", "rollback-orphan"}
        assert await delivered(broker.addr, ORPHAN_TOPIC, QUEUES) == []
        checked: list[dict[str, Any]] = []
        async with trio.open_nursery() as nursery:
            proc = await trio.lowlevel.open_process(
                [RMQ5, SCRIPT, f"127.0.0.1:{port}", ORPHAN_TOPIC, "check"],
                stdin=-1, stdout=-1, stderr=-1)  # subprocess.PIPE

            async def read() -> None:
                async for event in json_lines(proc.stdout):
                    checked.append(event)
            nursery.start_soon(read)

            async def ended() -> bool:
                info = await runtime(ns, broker.addr)
                return info["transactionPending"] == 0 and \
                    await delivered(broker.addr, ORPHAN_TOPIC, QUEUES) == [b"commit-orphan"]
            try:
                await wait_until(ended, 30, "the orphaned transactions ended by checks")
            finally:
                assert proc.stdin is not None
                await proc.stdin.aclose()
                with trio.fail_after(30):
                    await proc.wait()
        assert proc.returncode == 0, checked
        answers = {(c["checked"], c["id"], c["topic"], c["commit"])
                   for c in checked if "checked" in c}
        assert answers == {("commit-orphan", ids["commit-orphan"], ORPHAN_TOPIC, True),
                           ("rollback-orphan", ids["rollback-orphan"], ORPHAN_TOPIC, False)}
        info = await runtime(ns, broker.addr)
        assert info["transactionChecks"] >= 2 and info["transactionDiscarded"] == 0

    trio.run(main)
