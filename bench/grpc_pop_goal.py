"""Issue 52's goal figure: RocketMQ's official Python client 5.x sends and consumes
messages over gRPC through one broker (SYNC_FLUSH) with none lost, and the same with a
kill -9 of the broker midway. Run from the repository root (needs `make rmq5`):

    .venv/bin/python -m bench.grpc_pop_goal [--messages 10000] [--kill/--no-kill]

A name server and a broker with enableGrpc run as separate processes on loopback
(tests/integration/cluster.py). The official SimpleConsumer (tests/integration/
rmq5_consumer.py, in .venv-rmq5) receives and acks from the start; the official Producer
(rmq5_producer.py) sends ``--messages`` messages one by one. With ``--kill`` the broker is
killed (SIGKILL) once the consumer has acked half of them, and started again on the same
store and ports; a send that fails meanwhile is tried again (for up to 30 s, a new
message each time: a try the broker stored but could not acknowledge is an extra message,
allowed), acks that fail are counted (their messages come back after the invisible time).

Counted: ``sent_ok`` (sends the broker acknowledged), ``received`` (distinct message ids
the consumer got), ``lost`` (acknowledged sends never received: the goal is 0),
``redelivered`` (ids received more than once: at least once allows them). The run waits
up to ``--settle`` seconds after the producer ends for the last messages (those in flight
when the broker died come back after their invisible time). The last line is the figures
as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import click
import trio

from client.admin import MQAdmin
from tests.integration.cluster import Cluster, free_port, json_lines
from tests.waits import routed, wait_until

ROOT = Path(__file__).resolve().parents[1]
PRODUCER = ROOT / "tests" / "integration" / "rmq5_producer.py"
CONSUMER = ROOT / "tests" / "integration" / "rmq5_consumer.py"
TOPIC = "GrpcGoalTopic"
GROUP = "grpc-goal-group"


def rmq5_python() -> str | None:
    """The interpreter with rocketmq-python-client 5.x (RMQ5_PYTHON or .venv-rmq5), or None."""
    given = os.environ.get("RMQ5_PYTHON") or str(ROOT / ".venv-rmq5" / "bin" / "python")
    if not Path(given).exists():
        return None
    probe = subprocess.run([given, "-c", "import rocketmq.v5"], capture_output=True, timeout=60)
    return given if probe.returncode == 0 else None


class ConsumerCounts(Protocol):
    """Where ``official_consumer`` counts the consumer's failed acks and receives."""

    ack_failed: int
    receive_errors: int


@asynccontextmanager
async def official_consumer(rmq5: str, endpoint: str, topic: str, group: str,
                            invisible_s: int, counts: ConsumerCounts,
                            on_message: Callable[[dict[str, Any]], None]
                            ) -> AsyncIterator[None]:
    """The official SimpleConsumer (``rmq5_consumer.py consume``, in ``rmq5``) receiving
    and acking ``topic`` as ``group`` in its own process while the block runs: each
    message it reports goes to ``on_message``, failed acks and receives are counted into
    ``counts``. The block starts once its first receive is under way (within 60 s: the
    group starts at the queues' ends); at its end the consumer's input is closed and it
    has 30 s to stop before it is killed."""
    ready = trio.Event()
    consumer = await trio.lowlevel.open_process(
        [rmq5, str(CONSUMER), "consume", endpoint, topic, group, "--invisible",
         str(invisible_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL)
    try:
        async with trio.open_nursery() as nursery:
            async def read_consumer() -> None:
                async for event in json_lines(consumer.stdout):
                    if event.get("ready"):
                        ready.set()
                    elif "id" in event:
                        on_message(event)
                    elif "ack_error" in event:
                        counts.ack_failed += 1
                    elif "receive_error" in event:
                        counts.receive_errors += 1
            nursery.start_soon(read_consumer)
            with trio.fail_after(60):
                await ready.wait()
            yield
            assert consumer.stdin is not None
            await consumer.stdin.aclose()
            with trio.move_on_after(30):
                await consumer.wait()
            nursery.cancel_scope.cancel()
    finally:
        if consumer.returncode is None:
            consumer.kill()


@dataclass
class Goal:
    messages: int
    killed: bool
    sent_ok: int = 0
    send_failed: int = 0
    send_retried: int = 0  # failed tries sent again (while the broker was down)
    received: int = 0
    lost: int = 0
    redelivered: int = 0
    ack_failed: int = 0
    receive_errors: int = 0
    send_seconds: float = 0.0
    seconds: float = 0.0
    lost_ids: list[str] = field(default_factory=list)
    send_errors: list[str] = field(default_factory=list)  # the first few failed sends


async def run_goal(cluster: Cluster, rmq5: str, messages: int, kill: bool,
                   settle_s: float = 60.0, invisible_s: int = 5) -> Goal:
    """One run on ``cluster`` (empty): the figures."""
    goal = Goal(messages, kill)
    ns = cluster.namesrv()
    port = free_port(1)
    broker = cluster.broker("grpc-goal", ns.addr, enableGrpc="true", grpcListenPort=port,
                            flushDiskType="SYNC_FLUSH", reviveInterval=200)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=4,
                                 write_queue_nums=4)
        await wait_until(routed(admin, TOPIC), 15, "topic routed")
    endpoint = f"127.0.0.1:{port}"
    seen: Counter[str] = Counter()
    half = trio.Event()

    def on_message(event: dict[str, Any]) -> None:
        seen[event["id"]] += 1
        if len(seen) >= messages // 2:
            half.set()

    started = time.perf_counter()
    async with official_consumer(rmq5, endpoint, TOPIC, GROUP, invisible_s, goal, on_message):
        async with trio.open_nursery() as nursery:
            async def killer() -> None:
                await half.wait()
                broker.kill()
                await trio.to_thread.run_sync(broker.start)
            if kill:
                nursery.start_soon(killer)
            done = await trio.run_process(
                [rmq5, str(PRODUCER), endpoint, TOPIC, str(messages), "--retry-for", "30"],
                capture_stdout=True, capture_stderr=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"the producer failed: {done.stderr.decode()[-2000:]}")
            result = json.loads(done.stdout)
            sent = {s["id"] for s in result["sent"]}
            goal.sent_ok, goal.send_failed = len(sent), len(result["failed"])
            goal.send_retried = result["retried"]
            goal.send_errors = [f[:200] for f in result["failed"][:3]]
            goal.send_seconds = round(result["seconds"], 2)
            with trio.move_on_after(settle_s):
                await wait_until(lambda: sent <= seen.keys(), settle_s,
                                 "every acknowledged message received")
            nursery.cancel_scope.cancel()
    goal.seconds = round(time.perf_counter() - started, 2)
    lost = sorted(sent - seen.keys())
    goal.received = len(seen)
    goal.lost, goal.lost_ids = len(lost), lost[:20]
    goal.redelivered = sum(1 for n in seen.values() if n > 1)
    return goal


async def bench(messages: int, kill: bool, settle: float) -> list[Goal]:
    rmq5 = rmq5_python()
    if rmq5 is None:
        raise click.ClickException("the official 5.x client is not installed: `make rmq5`")
    out: list[Goal] = []
    for killing in ([False, True] if kill else [False]):
        with tempfile.TemporaryDirectory(prefix="grpc-goal-") as tmp:
            cluster = Cluster(Path(tmp))
            try:
                out.append(await run_goal(cluster, rmq5, messages, killing, settle))
            finally:
                cluster.close()
        g = out[-1]
        print(f"{'kill -9 midway' if killing else 'no kill'}: sent_ok {g.sent_ok} "
              f"(failed {g.send_failed}, tries again {g.send_retried}), received {g.received}, lost {g.lost}, "
              f"redelivered {g.redelivered}, {g.seconds} s (sends {g.send_seconds} s)")
    return out


@click.command()
@click.option("--messages", default=10_000, show_default=True)
@click.option("--kill/--no-kill", default=True, show_default=True,
              help="also run with a kill -9 of the broker midway")
@click.option("--settle", default=90.0, show_default=True,
              help="seconds to wait for the last messages after the producer ends")
def main(messages: int, kill: bool, settle: float) -> None:
    goals = trio.run(bench, messages, kill, settle)
    print(json.dumps([asdict(g) for g in goals]))


if __name__ == "__main__":
    main()
