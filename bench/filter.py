"""Filtered pull figures: an SQL92 property filter against the tag filter on the
same data. Run from the repository root:

    .venv/bin/python -m bench.filter [--messages 100000] [--rounds 3]

A name server and a broker (``enablePropertyFilter=true``) run as separate
processes on loopback (tests/integration/cluster.py) with a temporary store.
``--messages`` messages go to a topic of ``--queues`` queues, each with the
properties ``i`` and ``mod`` (i % 100) and the tag ``hit`` when ``mod`` is 42
(1%), ``miss`` otherwise. Then pull consumers read every queue from 0 to its
end, one task per queue, with each selector in turn:

- ``tag``: ``hit`` (the broker skips by the consume queue's tags hash);
- ``sql``: ``mod = 42`` (the broker reads and evaluates every record);
- ``sql+tag``: ``TAGS = 'hit' AND mod = 42`` (the tags hash first, then the
  records of the hits only);
- ``all``: ``*`` (no filter: every message comes back).

For each: messages scanned per second (entries walked: every message of the
topic), matches per second (messages returned), and scanned per second of the
broker's CPU time (steadier than wall time on a busy machine). The best of
``--rounds`` rounds. The last line is the figures as JSON.
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
from client import Message, MessageSelector, Producer, PullConsumer
from client.admin import MQAdmin
from client.pull_result import PullStatus
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPIC = "BenchFilterTopic"
SELECTORS: dict[str, MessageSelector] = {
    "tag": MessageSelector.by_tag("hit"),
    "sql": MessageSelector.by_sql("mod = 42"),
    "sql+tag": MessageSelector.by_sql("TAGS = 'hit' AND mod = 42"),
    "all": MessageSelector.by_tag("*"),
}
BATCH = 500  # messages per send (their ids fit a response header)


@dataclass
class Figure:
    selector: str
    expression: str
    scanned: int
    matches: int
    seconds: float
    broker_cpu_seconds: float

    @property
    def scanned_per_s(self) -> float:
        return self.scanned / self.seconds

    @property
    def matches_per_s(self) -> float:
        return self.matches / self.seconds

    @property
    def scanned_per_cpu_s(self) -> float:
        return self.scanned / self.broker_cpu_seconds if self.broker_cpu_seconds else 0.0


async def produce(namesrv: str, messages: int) -> None:
    async with Producer("bench-filter-producer", namesrv) as producer:
        queues = sorted(await producer.fetch_publish_message_queues(TOPIC))
        for start in range(0, messages, BATCH):
            batch = [Message(TOPIC, f"body-{i}", tags="hit" if i % 100 == 42 else "miss",
                             properties={"i": str(i), "mod": str(i % 100)})
                     for i in range(start, min(messages, start + BATCH))]
            await producer.send_batch(batch, queues[(start // BATCH) % len(queues)])


async def read_all(namesrv: str, group: str, selector: MessageSelector) -> tuple[int, int]:
    """(entries scanned, messages returned) reading every queue to its end."""
    scanned = matched = 0
    async with PullConsumer(group, namesrv) as consumer:
        queues = await consumer.fetch_subscribe_message_queues(TOPIC)
        ends = {mq: await consumer.max_offset(mq) for mq in queues}

        async def one(mq: object) -> None:
            nonlocal scanned, matched
            offset, end = 0, ends[mq]  # type: ignore[index]
            while offset < end:
                r = await consumer.pull(mq, selector, offset, 32)  # type: ignore[arg-type]
                if r.pull_status not in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
                    raise RuntimeError(f"pull of {mq} at {offset}: {r.pull_status}")
                matched += len(r.msg_found_list)
                offset = r.next_begin_offset
            scanned += end

        async with trio.open_nursery() as nursery:
            for mq in queues:
                nursery.start_soon(one, mq)
    return scanned, matched


async def bench(messages: int, queues: int, rounds: int) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="bench-filter-") as tmp:
        cluster = Cluster(Path(tmp))
        try:
            ns = cluster.namesrv()
            broker = cluster.broker("broker-a", ns.addr, enablePropertyFilter="true")
            async with MQAdmin(ns.addr) as admin:
                await admin.create_topic(TOPIC, broker_addr=broker.addr,
                                         read_queue_nums=queues, write_queue_nums=queues)
                await wait_until(routed(admin, TOPIC), 10, "topic routed")
            t0 = time.perf_counter()
            await produce(ns.addr, messages)
            click.echo(f"produced {messages} messages in {time.perf_counter() - t0:.1f} s")
            assert broker.proc is not None
            pid = broker.proc.pid
            best: dict[str, Figure] = {}
            for r in range(rounds):
                for name, selector in SELECTORS.items():
                    cpu0 = cpu_seconds(pid) or 0.0
                    t0 = time.perf_counter()
                    scanned, matched = await read_all(ns.addr, f"bench-{name}-{r}".replace(
                        "+", "-"), selector)
                    elapsed = time.perf_counter() - t0
                    cpu = (cpu_seconds(pid) or 0.0) - cpu0
                    fig = Figure(name, selector.expression, scanned, matched, elapsed, cpu)
                    if name not in best or fig.seconds < best[name].seconds:
                        best[name] = fig
            return list(best.values())
        finally:
            cluster.close()


@click.command()
@click.option("--messages", default=100_000, show_default=True)
@click.option("--queues", default=4, show_default=True)
@click.option("--rounds", default=3, show_default=True)
def main(messages: int, queues: int, rounds: int) -> None:
    figures = trio.run(bench, messages, queues, rounds)
    click.echo(f"{'selector':<8} {'expression':<28} {'matches':>8} {'scanned/s':>10} "
               f"{'matches/s':>10} {'scanned/broker-cpu-s':>21}")
    for f in figures:
        click.echo(f"{f.selector:<8} {f.expression:<28} {f.matches:>8} {f.scanned_per_s:>10.0f} "
                   f"{f.matches_per_s:>10.0f} {f.scanned_per_cpu_s:>21.0f}")
    by = {f.selector: f for f in figures}
    ratio = by["sql"].scanned_per_s / by["tag"].scanned_per_s
    click.echo(f"sql / tag scan rate: {ratio:.2f}")
    click.echo(json.dumps({"filters": [{**asdict(f), "scanned_per_s": f.scanned_per_s,
                                        "matches_per_s": f.matches_per_s,
                                        "scanned_per_broker_cpu_s": f.scanned_per_cpu_s}
                                       for f in figures], "sql_over_tag": ratio}))


if __name__ == "__main__":
    main()
