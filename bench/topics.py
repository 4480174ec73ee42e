"""Topic-creation figures: admin creates per second at 1,000, 10,000 and 100,000
existing topics, and name-server route look-up latency meanwhile. Run from the
repository root:

    .venv/bin/python -m bench.topics [--topics 100000] [--measure 2000]

A name server and a broker run as separate processes on loopback
(tests/integration/cluster.py) with a temporary store. Topics are created
through the admin API (UPDATE_AND_CREATE_TOPIC, ``--concurrency`` in flight);
at each checkpoint ``--measure`` more are created and timed. A probe process
asks the name server for one topic's route every 2 ms the whole time (its own
process, so the creating client's event loop does not colour its figures).
Then the name server restarts (the broker registers its whole table again),
then the broker (loads every topic, registers the whole table): how long until
routes are back, and the look-ups meanwhile.

    .venv/bin/python -m bench.topics groups [--count 5000]

times the first heartbeats of new consumer groups (each creates its %RETRY%
topic) and how long until the name server lists every retry topic.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import trio

from client.admin import MQAdmin
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster

PROBE_TOPIC = "BenchLookupTopic"
PROBE_INTERVAL_S = 0.002
REGISTER_INTERVAL_MS = 3000  # so that a restarted name server hears from the broker soon


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


async def create_range(admin: MQAdmin, broker: str, start: int, stop: int,
                       concurrency: int) -> float:
    """Create topics start..stop-1 with ``concurrency`` in flight; seconds taken."""
    limit = trio.Semaphore(concurrency)
    failures: list[str] = []

    async def one(i: int) -> None:
        try:
            await admin.create_topic(f"BenchTopic-{i:07d}", broker_addr=broker,
                                     read_queue_nums=4, write_queue_nums=4)
        except Exception as exc:
            failures.append(f"{i}: {exc}")
        finally:
            limit.release()

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(start, stop):
            await limit.acquire()
            nursery.start_soon(one, i)
    elapsed = time.perf_counter() - t0
    if failures:
        raise RuntimeError(f"{len(failures)} creations failed, first: {failures[0]}")
    return elapsed


class Probe:
    """The look-up process: (wall time, latency ms) per GET_ROUTEINFO_BY_TOPIC."""

    def __init__(self, ns: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.topics", "probe", ns, PROBE_TOPIC],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def stop(self) -> list[tuple[float, float]]:
        out, _ = self.proc.communicate("", timeout=60)
        samples = []
        for line in out.splitlines():  # the probe's log lines go there too
            parts = line.split()
            if len(parts) == 3 and parts[0] == "sample":
                samples.append((float(parts[1]), float(parts[2])))
        return samples


def window(samples: list[tuple[float, float]], t0: float, t1: float) -> str:
    lat = [ms for t, ms in samples if t0 <= t <= t1]
    if not lat:
        return "no look-ups"
    return (f"{len(lat)} look-ups, p50 {statistics.median(lat):.2f} ms, "
            f"p99 {percentile(lat, 99):.2f} ms, max {max(lat):.2f} ms")


async def routed(ns: str) -> float:
    """When the first benchmark topic has a route again (wall time)."""
    async with MQAdmin(ns) as admin:
        deadline = time.monotonic() + 300
        while True:
            try:
                route = await admin.topic_route("BenchTopic-0000000")
                if route.queue_datas:
                    return time.time()
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("no route")
            await trio.sleep(0.05)


async def topic_count(admin: MQAdmin) -> int:
    return sum(1 for t in await admin.topic_list() if t.startswith("BenchTopic-"))


def run(topics: int, measure: int, concurrency: int, checkpoints: list[int]) -> None:
    with tempfile.TemporaryDirectory() as d:
        c = Cluster(Path(d))
        try:
            ns = c.namesrv()
            broker = c.broker("broker-a", ns.addr, registerBrokerIntervalMs=REGISTER_INTERVAL_MS)
            lines: list[str] = []
            marks: list[tuple[str, float, float]] = []

            async def main() -> None:
                async with MQAdmin(ns.addr) as admin:
                    await admin.create_topic(PROBE_TOPIC, broker_addr=broker.addr)
                    existing = 0
                    for target in checkpoints:
                        if target > existing:
                            secs = await create_range(admin, broker.addr, existing, target,
                                                      concurrency)
                            lines.append(f"filled {existing:,} -> {target:,} topics: "
                                         f"{(target - existing) / secs:,.0f} topics/s")
                            existing = target
                        t0 = time.time()
                        secs = await create_range(admin, broker.addr, existing,
                                                  existing + measure, concurrency)
                        t1 = time.time()
                        existing += measure
                        marks.append((f"at {target:,} existing topics", t0, t1))
                        lines.append(f"at {target:,} existing topics: {measure:,} created in "
                                     f"{secs:.2f} s = {measure / secs:,.0f} topics/s")
                    deadline = time.monotonic() + 120
                    while await topic_count(admin) < existing:
                        if time.monotonic() > deadline:
                            raise RuntimeError("the name server does not list every topic")
                        await trio.sleep(0.2)
                    lines.append(f"the name server lists all {existing:,} topics")

            probe = Probe(ns.addr)
            try:
                trio.run(main)
                # a name server restart: the broker registers its whole table again
                ns.stop()
                t0 = time.time()
                ns.start()
                t1 = trio.run(routed, ns.addr)
                marks.append(("name server restart (whole-table registration)", t0, t1 + 1))
                lines.append(f"name server restart: routes back after {t1 - t0:.2f} s "
                             f"(registerBrokerIntervalMs {REGISTER_INTERVAL_MS} ms)")
                time.sleep(1)
                # a broker restart: load every topic, register the whole table
                broker.stop()
                t0 = time.time()
                broker.start(timeout=300)
                t1 = time.time()
                lines.append(f"broker restart with {topics:,}+ topics: serving after "
                             f"{t1 - t0:.2f} s")
                t2 = trio.run(routed, ns.addr)
                marks.append(("broker restart (stop, load, whole-table registration)", t0, t2 + 1))
                lines.append(f"routes back {t2 - t0:.2f} s after the restart began")
                time.sleep(1)
            finally:
                samples = probe.stop()
            for line in lines:
                print(line)
            for name, a, b in marks:
                print(f"route look-ups {name}: {window(samples, a, b)}")
            print(f"route look-ups overall: {window(samples, 0, float('inf'))}")
        finally:
            c.close()


async def probe_main(ns: str, topic: str) -> None:
    samples: list[tuple[float, float]] = []
    stop = trio.Event()

    async def watch_stdin() -> None:
        await trio.to_thread.run_sync(sys.stdin.read)
        stop.set()

    async with RemotingClient() as client, trio.open_nursery() as nursery:
        nursery.start_soon(watch_stdin)
        while not stop.is_set():
            cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            t = time.time()
            t0 = time.perf_counter()
            try:
                resp = await client.invoke(ns, cmd, 5.0)
                ok = resp.code in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST)
            except Exception:
                ok = False
            if ok:
                samples.append((t, (time.perf_counter() - t0) * 1000))
            await trio.sleep(PROBE_INTERVAL_S)
        nursery.cancel_scope.cancel()
    sys.stdout.write("".join(f"sample {t:.6f} {ms:.3f}\n" for t, ms in samples))


@click.group(invoke_without_command=True)
@click.option("--topics", default=100_000, show_default=True,
              help="Largest number of existing topics measured at.")
@click.option("--measure", default=2000, show_default=True,
              help="Topics created and timed at each checkpoint.")
@click.option("--concurrency", default=64, show_default=True, help="Creations in flight.")
@click.pass_context
def main(ctx: click.Context, topics: int, measure: int, concurrency: int) -> None:
    """Topic creation rate and route look-up latency as the topic table grows."""
    if ctx.invoked_subcommand is None:
        checkpoints = [n for n in (1_000, 10_000, 100_000) if n < topics] + [topics]
        run(topics, measure, concurrency, sorted(set(checkpoints)))


def run_groups(count: int, concurrency: int) -> None:
    """First heartbeats of ``count`` new consumer groups (each creates its
    %RETRY% topic), then until the name server routes every retry topic."""
    with tempfile.TemporaryDirectory() as d:
        c = Cluster(Path(d))
        try:
            ns = c.namesrv()
            broker = c.broker("broker-a", ns.addr)

            async def main() -> None:
                limit = trio.Semaphore(concurrency)
                failures: list[str] = []
                busy = 0

                async def one(client: RemotingClient, i: int) -> None:
                    group = f"BenchGroup-{i:06d}"
                    body = pack_body({"clientID": f"client-{i}", "producerDataSet": [],
                                      "consumerDataSet": [{
                                          "groupName": group, "messageModel": "CLUSTERING",
                                          "consumeType": "CONSUME_PASSIVELY",
                                          "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                                          "subscriptionDataSet": [{"topic": PROBE_TOPIC,
                                                                   "subString": "*"}]}]})
                    nonlocal busy
                    try:
                        for attempt in range(20):  # SYSTEM_BUSY (the heartbeat lane): again
                            r = await client.invoke(broker.addr, RemotingCommand.request(
                                RequestCode.HEART_BEAT, body=body), 30)
                            if r.code != ResponseCode.SYSTEM_BUSY:
                                break
                            busy += 1
                            await trio.sleep(min(1.0, 0.05 * 2 ** attempt))
                        if r.code != ResponseCode.SUCCESS:
                            failures.append(f"{group}: {r.code} {r.remark}")
                    finally:
                        limit.release()

                async with MQAdmin(ns.addr) as admin, RemotingClient() as client:
                    await admin.create_topic(PROBE_TOPIC, broker_addr=broker.addr)
                    t0 = time.perf_counter()
                    async with trio.open_nursery() as nursery:
                        for i in range(count):
                            await limit.acquire()
                            nursery.start_soon(one, client, i)
                    t1 = time.perf_counter()
                    if failures:
                        raise RuntimeError(f"{len(failures)} heartbeats failed: {failures[0]}")
                    deadline = time.monotonic() + 300
                    while sum(1 for t in await admin.topic_list()
                              if t.startswith("%RETRY%BenchGroup-")) < count:
                        if time.monotonic() > deadline:
                            raise RuntimeError("retry topics not all routed")
                        await trio.sleep(0.1)
                    t2 = time.perf_counter()
                print(f"{count:,} new consumer groups' first heartbeats: {t1 - t0:.2f} s "
                      f"({count / (t1 - t0):,.0f}/s); every %RETRY% topic listed by the name "
                      f"server after {t2 - t0:.2f} s ({busy} SYSTEM_BUSY answers retried)")

            trio.run(main)
        finally:
            c.close()


@main.command()
@click.option("--count", default=5000, show_default=True, help="New consumer groups.")
@click.option("--concurrency", default=64, show_default=True, help="Heartbeats in flight.")
def groups(count: int, concurrency: int) -> None:
    """First heartbeats of COUNT new consumer groups (each creates its %RETRY% topic)."""
    run_groups(count, concurrency)


@main.command()
@click.argument("ns")
@click.argument("topic")
def probe(ns: str, topic: str) -> None:
    """Look up TOPIC's route every 2 ms until stdin closes; print time and ms per look-up."""
    trio.run(probe_main, ns, topic)


if __name__ == "__main__":
    main()
