"""POP figures: SimpleConsumer receive + ack next to the pull consumer, in one
run on the same data. Run from the repository root:

    .venv/bin/python -m bench.pop [--messages 20000] [--queues 4] [--tasks 4]

A name server and a broker run as separate processes on loopback
(tests/integration/cluster.py) with a temporary store; ``--messages`` 100-byte
messages go to a topic of ``--queues`` queues. Then:

- ``pull``: one PullConsumer task per queue pulls 32 at a time from 0 to the
  end and stores the group's offset after each pull (its "ack");
- ``pop``: ``--tasks`` SimpleConsumer tasks receive 32 at a time (invisible
  30 s) and ack every message (the acks of one receive concurrently), until
  every message was acked.
- ``pop-batch``: the same with one ``ack_batch`` per receive
  (BATCH_ACK_MESSAGE) instead of one ack per message (another group).

For each: messages per second and per second of the broker's CPU time. The
last line is the figures as JSON.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click
import trio

from bench.proc_cpu import cpu_seconds
from client import Message, Producer, PullConsumer, SimpleConsumer
from client.admin import MQAdmin
from client.pull_result import PullStatus
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPIC = "BenchPopTopic"
BATCH = 256


@dataclass
class Figure:
    mode: str
    messages: int
    seconds: float
    broker_cpu_seconds: float

    @property
    def per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def per_cpu_s(self) -> float:
        return self.messages / self.broker_cpu_seconds if self.broker_cpu_seconds else 0.0


async def produce(namesrv: str, messages: int) -> None:
    async with Producer("bench-pop-producer", namesrv) as producer:
        queues = sorted(await producer.fetch_publish_message_queues(TOPIC))
        for start in range(0, messages, BATCH):
            batch = [Message(TOPIC, b"%09d" % i + b"x" * 91)
                     for i in range(start, min(messages, start + BATCH))]
            await producer.send_batch(batch, queues[(start // BATCH) % len(queues)])


async def pull_all(namesrv: str) -> int:
    done = 0
    async with PullConsumer("bench-pull", namesrv) as consumer:
        queues = await consumer.fetch_subscribe_message_queues(TOPIC)

        async def one(mq: object) -> None:
            nonlocal done
            offset, end = 0, await consumer.max_offset(mq)  # type: ignore[arg-type]
            while offset < end:
                r = await consumer.pull(mq, "*", offset, 32)  # type: ignore[arg-type]
                if r.pull_status is not PullStatus.FOUND:
                    raise RuntimeError(f"pull of {mq} at {offset}: {r.pull_status}")
                done += len(r.msg_found_list)
                offset = r.next_begin_offset
                await consumer.update_consume_offset(mq, offset)  # type: ignore[arg-type]

        async with trio.open_nursery() as nursery:
            for mq in queues:
                nursery.start_soon(one, mq)
    return done


async def pop_all(namesrv: str, messages: int, tasks: int, batch: bool = False) -> int:
    acked: set[bytes] = set()
    async with SimpleConsumer("bench-pop-batch" if batch else "bench-pop", namesrv,
                              init_mode="MIN", await_duration=1) as consumer:
        consumer.subscribe(TOPIC)

        async def one() -> None:
            while len(acked) < messages:
                got = await consumer.receive(32, 30)
                if batch and got:
                    refused = await consumer.ack_batch(got)
                    if refused:
                        raise RuntimeError(f"batch ack refused: {refused[0][1]}")
                else:
                    async with trio.open_nursery() as nursery:
                        for m in got:
                            nursery.start_soon(consumer.ack, m)
                acked.update(m.body[:9] for m in got)

        async with trio.open_nursery() as nursery:
            for _ in range(tasks):
                nursery.start_soon(one)
    return len(acked)


async def bench(messages: int, queues: int, tasks: int) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="bench-pop-") as tmp:
        cluster = Cluster(Path(tmp))
        try:
            ns = cluster.namesrv()
            broker = cluster.broker("broker-a", ns.addr)
            async with MQAdmin(ns.addr) as admin:
                await admin.create_topic(TOPIC, broker_addr=broker.addr,
                                         read_queue_nums=queues, write_queue_nums=queues)
                await wait_until(routed(admin, TOPIC), 10, "topic routed")
            await produce(ns.addr, messages)
            assert broker.proc is not None
            pid = broker.proc.pid
            figures = []
            for mode in ("pull", "pop", "pop-batch"):
                cpu0 = cpu_seconds(pid) or 0.0
                t0 = time.perf_counter()
                if mode == "pull":
                    n = await pull_all(ns.addr)
                else:
                    n = await pop_all(ns.addr, messages, tasks, batch=mode == "pop-batch")
                elapsed = time.perf_counter() - t0
                figures.append(Figure(mode, n, elapsed, (cpu_seconds(pid) or 0.0) - cpu0))
            return figures
        finally:
            cluster.close()


@click.command()
@click.option("--messages", default=20_000, show_default=True)
@click.option("--queues", default=4, show_default=True)
@click.option("--tasks", default=4, show_default=True)
def main(messages: int, queues: int, tasks: int) -> None:
    figures = trio.run(bench, messages, queues, tasks)
    click.echo(f"{'mode':<9} {'messages':>9} {'seconds':>8} {'msgs/s':>9} {'msgs/broker-cpu-s':>18}")
    for f in figures:
        click.echo(f"{f.mode:<9} {f.messages:>9} {f.seconds:>8.2f} {f.per_s:>9.0f} "
                   f"{f.per_cpu_s:>18.0f}")
    click.echo(json.dumps({"pop": [{**asdict(f), "per_s": f.per_s, "per_broker_cpu_s": f.per_cpu_s}
                                   for f in figures]}))


if __name__ == "__main__":
    main()
