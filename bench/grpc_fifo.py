"""FIFO groups over gRPC with the official client: RocketMQ's Python client 5.x sends
messages over 20 message groups, its SimpleConsumer receives them through a FIFO group
(consumeMessageOrderly) while the broker is killed (SIGKILL) midway and started again,
and every message group's messages arrive in send order. Run from the repository root
(needs `make rmq5`):

    .venv/bin/python -m bench.grpc_fifo [--messages 10000] [--groups 20] [--kill/--no-kill]

A name server and a broker with enableGrpc run as separate processes on loopback
(tests/integration/cluster.py). The official Producer (tests/integration/rmq5_producer.py,
in .venv-rmq5) sends ``--messages`` messages one by one, message ``i`` in message group
``fifo<i % groups>``; then the official SimpleConsumer (rmq5_consumer.py ``consume``)
receives and acks each message at once; with ``--kill`` the broker is killed once half
are received and started again on the same store and ports.

Checked per message group, over the consumer's deliveries in the order it got them:
``skipped``: a message delivered before an earlier one of its group had been (the goal:
0); ``bad_repeats``: a message delivered again after an ack of it had succeeded (an
orderly batch comes again only for its un-acked messages: 0); ``passed``: a message delivered, not acked and delivered again later, while a
later message of its group came in a receive between the two (orderly: its queue
stays blocked until the batch comes again: 0); ``attempt_resets``: a
message delivered again with an attempt not above its previous one (0); ``missing``:
sent and never received (0). ``redelivered``: deliveries of a message seen before (the
un-acked batch in flight when the broker died, after its invisible time). The last line
is the figures as JSON.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
import trio

from bench.grpc_pop_goal import PRODUCER, official_consumer, rmq5_python
from client.admin import MQAdmin
from protocol.subscription_group import SubscriptionGroupConfig
from tests.integration.cluster import Cluster, free_port
from tests.waits import routed, wait_until

TOPIC = "GrpcFifoTopic"
GROUP = "grpc-fifo-group"
FIFO_PREFIX = "fifo"


@dataclass
class Delivery:
    group: str  # the message group
    index: int  # the producer's index: increasing within a message group
    attempt: int
    acked: bool
    batch: int  # which receive of the consumer got it


@dataclass
class FifoGoal:
    messages: int
    groups: int
    killed: bool
    sent_ok: int = 0
    send_failed: int = 0
    deliveries: int = 0
    received: int = 0  # distinct messages
    redelivered: int = 0
    skipped: int = 0
    passed: int = 0
    bad_repeats: int = 0
    attempt_resets: int = 0
    missing: int = 0
    ack_failed: int = 0
    receive_errors: int = 0
    send_seconds: float = 0.0
    consume_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)  # the first few, for a failing run


def parse_body(body: str) -> tuple[str, int]:
    """(message group, producer index) of a body ``rmq5-<group>-<i>``."""
    head, index = body.rsplit("-", 1)
    return head.split("-", 1)[1], int(index)


def check_order(goal: FifoGoal, sent: dict[str, list[int]], got: list[Delivery]) -> None:
    """Fill the order figures from the deliveries in the order the consumer got them."""
    position = {g: {i: n for n, i in enumerate(indexes)} for g, indexes in sent.items()}
    high: dict[str, int] = {}  # per message group: the highest position delivered
    acked: set[tuple[str, int]] = set()
    last_attempt: dict[tuple[str, int], int] = {}
    for d in got:
        key = (d.group, d.index)
        pos = position.get(d.group, {}).get(d.index)
        if pos is None:
            goal.problems.append(f"unknown message {key}")
            continue
        top = high.get(d.group, -1)
        if pos > top + 1:
            goal.skipped += 1
            goal.problems.append(f"{key} delivered before position {top + 1} of its group")
        if key in last_attempt:
            goal.redelivered += 1
            if key in acked:
                goal.bad_repeats += 1
                goal.problems.append(f"{key} delivered again after a good ack")
            if d.attempt <= last_attempt[key]:
                goal.attempt_resets += 1
                goal.problems.append(f"{key} attempt {d.attempt} after {last_attempt[key]}")
        last_attempt[key] = d.attempt
        high[d.group] = max(top, pos)
        if d.acked:
            acked.add(key)
    check_passing(goal, position, got)
    goal.received = len(last_attempt)
    goal.missing = sum(len(v) for v in sent.values()) - goal.received
    goal.deliveries = len(got)
    del goal.problems[10:]


def check_passing(goal: FifoGoal, position: dict[str, dict[int, int]],
                  got: list[Delivery]) -> None:
    """Count later messages of a group delivered while an earlier one was out
    un-acked: between an un-acked delivery and that message's next delivery
    (one never delivered again had its ack taken: its answer was lost)."""
    by_group: dict[str, list[Delivery]] = {}
    for d in got:
        by_group.setdefault(d.group, []).append(d)
    for group, ds in by_group.items():
        pos = position.get(group, {})
        for n, d in enumerate(ds):
            if d.acked:
                continue
            again = next((m for m in range(n + 1, len(ds)) if ds[m].index == d.index), None)
            if again is None:
                continue
            for later in ds[n + 1:again]:
                if later.batch > d.batch and pos.get(later.index, -1) > pos.get(d.index, -1):
                    goal.passed += 1
                    goal.problems.append(f"{(group, later.index)} passed un-acked "
                                         f"{(group, d.index)}")
                    break


async def run_fifo(cluster: Cluster, rmq5: str, messages: int, groups: int = 20,
                   kill: bool = True, invisible_s: int = 6, settle_s: float = 60.0,
                   orderly: bool = True) -> FifoGoal:
    """One run on ``cluster`` (empty): the figures (``orderly`` False: a plain group,
    for contrast)."""
    goal = FifoGoal(messages, groups, kill)
    ns = cluster.namesrv()
    port = free_port(1)
    broker = cluster.broker("grpc-fifo", ns.addr, enableGrpc="true", grpcListenPort=port)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=8,
                                 write_queue_nums=8)
        await admin.update_subscription_group(broker.addr, SubscriptionGroupConfig(
            GROUP, consume_message_orderly=orderly).to_dict())
        await wait_until(routed(admin, TOPIC), 15, "topic routed")
    endpoint = f"127.0.0.1:{port}"
    done = await trio.run_process(
        [rmq5, str(PRODUCER), endpoint, TOPIC, "0", "--fifo-group", FIFO_PREFIX,
         "--fifo-count", str(messages), "--fifo-groups", str(groups)],
        capture_stdout=True, capture_stderr=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the producer failed: {done.stderr.decode()[-2000:]}")
    result = json.loads(done.stdout)
    sent: dict[str, list[int]] = {}
    for s in result["sent"]:
        group, index = parse_body(s["body"])
        sent.setdefault(group, []).append(index)
    goal.sent_ok, goal.send_failed = len(result["sent"]), len(result["failed"])
    got: list[Delivery] = []
    distinct: set[tuple[str, int]] = set()
    half = trio.Event()

    def on_message(event: dict[str, Any]) -> None:
        group, index = parse_body(event["body"])
        got.append(Delivery(group, index, event["attempt"], event["acked"], event["batch"]))
        distinct.add((group, index))
        if len(distinct) >= goal.sent_ok // 2:
            half.set()

    started = time.perf_counter()
    async with official_consumer(rmq5, endpoint, TOPIC, GROUP, invisible_s, goal, on_message):
        if kill:
            await half.wait()
            broker.kill()
            await trio.to_thread.run_sync(broker.start)
        with trio.move_on_after(settle_s):
            await wait_until(lambda: len(distinct) >= goal.sent_ok, settle_s,
                             "every sent message received")
        goal.consume_seconds = round(time.perf_counter() - started, 2)
    goal.send_seconds = round(result["fifo_seconds"], 2)
    check_order(goal, sent, got)
    return goal


async def bench(messages: int, groups: int, kill: bool, settle: float,
                orderly: bool, invisible: int) -> list[FifoGoal]:
    rmq5 = rmq5_python()
    if rmq5 is None:
        raise click.ClickException("the official 5.x client is not installed: `make rmq5`")
    out: list[FifoGoal] = []
    with tempfile.TemporaryDirectory(prefix="grpc-fifo-") as tmp:
        cluster = Cluster(Path(tmp))
        try:
            out.append(await run_fifo(cluster, rmq5, messages, groups, kill,
                                      invisible_s=invisible, settle_s=settle,
                                      orderly=orderly))
        finally:
            cluster.close()
    g = out[-1]
    print(f"{'kill -9 midway' if kill else 'no kill'}: sent_ok {g.sent_ok} over {groups} "
          f"message groups, received {g.received} ({g.deliveries} deliveries, "
          f"{g.redelivered} again), skipped {g.skipped}, passed {g.passed}, "
          f"bad repeats {g.bad_repeats}, "
          f"attempt resets {g.attempt_resets}, missing {g.missing}; consumed in "
          f"{g.consume_seconds} s")
    return out


@click.command()
@click.option("--messages", default=10_000, show_default=True)
@click.option("--groups", default=20, show_default=True, help="message groups")
@click.option("--kill/--no-kill", default=True, show_default=True,
              help="kill -9 the broker once half the messages are received")
@click.option("--settle", default=120.0, show_default=True,
              help="seconds to wait for the last messages after the restart")
@click.option("--plain", is_flag=True,
              help="a plain (not orderly) group, to see what the figures catch")
@click.option("--invisible", default=6, show_default=True,
              help="the consumer's invisible duration (s)")
def main(messages: int, groups: int, kill: bool, settle: float, plain: bool,
         invisible: int) -> None:
    goals = trio.run(bench, messages, groups, kill, settle, not plain, invisible)
    print(json.dumps([asdict(g) for g in goals]))


if __name__ == "__main__":
    main()
