"""``mqbench``: throughput and latency of producers and consumers.

    mqbench producer -n 127.0.0.1:9876 -t BenchTopic -s 1024 -b 32 -c 200000 -w 8
    mqbench consumer -n 127.0.0.1:9876 -t BenchTopic -c 200000
    mqbench push -n 127.0.0.1:9876 -t BenchTopic -c 200000 -i 3
    mqbench latency -n 127.0.0.1:9876 -t LatencyTopic -r 2000 -d 10

Counts are bounded; every run stops by itself.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import click
import trio

from protocol.logs import configure_logging

NAMESRV_HELP = 'Name server address list, "host:port;host:port".'


def percentiles(samples: Sequence[float], points: Sequence[float] = (50, 90, 99, 99.9)) -> dict[float, float]:
    """Nearest-rank percentiles of ``samples`` (seconds), as a dict point -> value."""
    if not samples:
        return {p: 0.0 for p in points}
    ordered = sorted(samples)
    n = len(ordered)
    return {p: ordered[min(n - 1, max(0, int(round(p / 100 * n + 0.5)) - 1))] for p in points}


def report(kind: str, count: int, nbytes: int, elapsed: float, latencies: Sequence[float]) -> str:
    tps = count / elapsed if elapsed > 0 else 0.0
    mb = nbytes / elapsed / 1e6 if elapsed > 0 else 0.0
    pct = percentiles(latencies)
    lat = " ".join(f"p{p:g}={v * 1e3:.3f}ms" for p, v in pct.items())
    return (f"{kind}: {count} msgs in {elapsed:.2f}s = {tps:,.0f} msg/s ({mb:.1f} MB/s); "
            f"latency per request {lat}")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Benchmark producers and consumers against a running cluster."""


@cli.command()
@click.option("-n", "--namesrvAddr", "namesrv", default="127.0.0.1:9876", show_default=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", default="BenchmarkTopic", show_default=True)
@click.option("-s", "--messageSize", "size", type=int, default=1024, show_default=True)
@click.option("-b", "--batchSize", "batch", type=int, default=1, show_default=True,
              help="Messages per send (1 = single sends).")
@click.option("-c", "--count", type=int, default=200_000, show_default=True, help="Messages in all.")
@click.option("-w", "--concurrency", type=int, default=16, show_default=True,
              help="Sends in flight at once.")
@click.option("-p", "--producers", type=int, default=1, show_default=True,
              help="Producer instances (separate connections).")
def producer(namesrv: str, topic: str, size: int, batch: int, count: int, concurrency: int,
             producers: int) -> None:
    """Send COUNT messages of SIZE bytes and report msg/s and latency."""
    from client import Message, Producer

    body = b"x" * size
    latencies: list[float] = []
    sent = 0

    async def worker(p: Producer, quota: list[int]) -> None:
        nonlocal sent
        while quota[0] > 0:
            n = min(batch, quota[0])
            quota[0] -= n
            t0 = time.perf_counter()
            if batch == 1:
                await p.send(Message(topic, body))
            else:
                await p.send_batch([Message(topic, body) for _ in range(n)])
            latencies.append(time.perf_counter() - t0)
            sent += n

    async def go() -> float:
        quota = [count]
        ps = [Producer(f"BENCH_PRODUCER_{i}", namesrv_addr=namesrv) for i in range(producers)]
        for p in ps:
            await p.start()
        try:
            # warm up: routes and connections
            for p in ps:
                await p.send(Message(topic, body))
            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(concurrency):
                    nursery.start_soon(worker, ps[i % producers], quota)
            return time.perf_counter() - t0
        finally:
            for p in ps:
                await p.shutdown()

    elapsed = trio.run(go)
    click.echo(report("produce", sent, sent * size, elapsed, latencies))


@cli.command()
@click.option("-n", "--namesrvAddr", "namesrv", default="127.0.0.1:9876", show_default=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", default="BenchmarkTopic", show_default=True)
@click.option("-g", "--group", default="BENCH_CONSUMER", show_default=True)
@click.option("-c", "--count", type=int, default=200_000, show_default=True,
              help="Stop after this many messages (or when every queue is drained).")
@click.option("-m", "--pullBatchSize", "pull_batch", type=int, default=32, show_default=True)
@click.option("--from-start/--from-group", default=True, show_default=True,
              help="Start at each queue's min offset, or at the group's committed offset.")
def consumer(namesrv: str, topic: str, group: str, count: int, pull_batch: int,
             from_start: bool) -> None:
    """Pull messages from every queue until COUNT or the end; report msg/s."""
    from client import MessageQueue, PullConsumer, PullStatus

    latencies: list[float] = []
    got = 0
    nbytes = 0

    async def go() -> float:
        nonlocal got, nbytes
        async with PullConsumer(group, namesrv_addr=namesrv) as c:
            queues = await c.fetch_subscribe_message_queues(topic)
            starts = {}
            for mq in queues:
                off = -1 if from_start else await c.fetch_consume_offset(mq)
                starts[mq] = off if off >= 0 else await c.min_offset(mq)

            async def drain(mq: MessageQueue) -> None:
                nonlocal got, nbytes
                pos = starts[mq]
                while got < count:
                    t0 = time.perf_counter()
                    r = await c.pull(mq, "*", pos, pull_batch)
                    latencies.append(time.perf_counter() - t0)
                    if r.pull_status != PullStatus.FOUND:
                        break
                    got += len(r.msg_found_list)
                    nbytes += sum(len(m.body) for m in r.msg_found_list)
                    pos = r.next_begin_offset
                if not from_start:
                    await c.update_consume_offset(mq, pos)

            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for mq in queues:
                    nursery.start_soon(drain, mq)
            return time.perf_counter() - t0

    elapsed = trio.run(go)
    click.echo(report("consume", got, nbytes, elapsed, latencies))


@cli.command()
@click.option("-n", "--namesrvAddr", "namesrv", default="127.0.0.1:9876", show_default=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", default="BenchmarkTopic", show_default=True)
@click.option("-g", "--group", default=None, help="Consumer group (default: a new one per run).")
@click.option("-c", "--count", type=int, default=200_000, show_default=True,
              help="Messages to consume in all.")
@click.option("-i", "--instances", type=int, default=1, show_default=True,
              help="Push consumers, each in its own process.")
@click.option("-b", "--batch", type=int, default=32, show_default=True,
              help="consume_message_batch_max_size (messages per listener call).")
@click.option("--timeout", type=float, default=120.0, show_default=True)
@click.option("--member", type=int, default=None, hidden=True)
def push(namesrv: str, topic: str, group: str | None, count: int, instances: int, batch: int,
         timeout: float, member: int | None) -> None:
    """Consume COUNT messages with push consumers of one new group (clustering,
    from the first offset); report msg/s over all of them."""
    import subprocess
    import sys
    import uuid

    if member is not None:
        assert group is not None
        first, last, got = _push_member(namesrv, topic, group, count, batch, timeout, member)
        click.echo(f"{got} {first!r} {last!r}")
        return
    group = group or f"BENCH_PUSH_{uuid.uuid4().hex[:8]}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "client.bench", "push", "-n", namesrv, "-t", topic, "-g", group,
             "-c", str(count), "-b", str(batch), "--timeout", str(timeout), "--member", str(i)],
            stdout=subprocess.PIPE, text=True)
        for i in range(instances)
    ]
    rows = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout + 30)
        fields = out.split()[-3:]
        rows.append((int(fields[0]), float(fields[1]), float(fields[2])))
    total = sum(r[0] for r in rows)
    active = [r for r in rows if r[0]]
    elapsed = max(r[2] for r in active) - min(r[1] for r in active) if active else 0.0
    per = ", ".join(str(r[0]) for r in rows)
    tps = total / elapsed if elapsed > 0 else 0.0
    click.echo(f"push consume: {total} msgs in {elapsed:.2f}s = {tps:,.0f} msg/s "
               f"({instances} consumers: {per})")


def _push_member(namesrv: str, topic: str, group: str, count: int, batch: int, timeout: float,
                 member: int) -> tuple[float, float, int]:
    from client import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer

    got = 0
    first = last = 0.0
    ok = ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def go() -> None:
        nonlocal got, first, last

        def listener(msgs: list, ctx: object) -> ConsumeConcurrentlyStatus:  # type: ignore[type-arg]
            nonlocal got, first, last
            now = time.time()
            if not got:
                first = now
            got += len(msgs)
            last = now
            return ok

        c = PushConsumer(group, namesrv, instance_name=f"bench-{member}-{uuid_hex()}",
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                         consume_message_batch_max_size=batch, rebalance_interval=2.0)
        c.subscribe(topic, "*")
        c.register_message_listener(listener)
        async with c:
            deadline = trio.current_time() + timeout
            seen = -1
            while trio.current_time() < deadline:
                await trio.sleep(2.0)
                if got and got == seen:
                    break  # idle for 2 s after consuming: the others have the rest
                seen = got

    trio.run(go)
    return first, last, got


def uuid_hex() -> str:
    import uuid

    return uuid.uuid4().hex[:6]


@cli.command()
@click.option("-n", "--namesrvAddr", "namesrv", default="127.0.0.1:9876", show_default=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", default="LatencyTopic", show_default=True)
@click.option("-r", "--rate", type=int, default=2000, show_default=True, help="Messages per second.")
@click.option("-d", "--duration", type=float, default=10.0, show_default=True, help="Seconds.")
@click.option("-s", "--messageSize", "size", type=int, default=1024, show_default=True)
def latency(namesrv: str, topic: str, rate: int, duration: float, size: int) -> None:
    """End-to-end latency, send to listener, at a steady RATE (one process:
    a producer and a push consumer of a new group)."""
    from client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer

    samples: list[float] = []
    ok = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    total = int(rate * duration)

    def listener(msgs: list, ctx: object) -> ConsumeConcurrentlyStatus:  # type: ignore[type-arg]
        now = time.perf_counter()
        for m in msgs:
            sent = m.properties.get("BENCH_T")
            if sent is not None:  # not the warm-up message
                samples.append(now - float(sent))
        return ok

    async def go() -> None:
        c = PushConsumer(f"BENCH_LATENCY_{uuid_hex()}", namesrv)
        c.subscribe(topic, "*")
        c.register_message_listener(listener)
        async with c, Producer("BENCH_LATENCY_PRODUCER", namesrv) as p:
            await p.send(Message(topic, b"warm-up"))  # routes, connections, topic
            await trio.sleep(1.0)
            samples.clear()
            body = b"x" * size
            interval = 1.0 / rate
            start = trio.current_time()
            for i in range(total):
                target = start + i * interval
                delay = target - trio.current_time()
                if delay > 0:
                    await trio.sleep(delay)
                msg = Message(topic, body)
                msg.put_user_property("BENCH_T", repr(time.perf_counter()))
                await p.send_oneway(msg)
            with trio.move_on_after(10):
                while len(samples) < total:
                    await trio.sleep(0.05)

    trio.run(go)
    pct = percentiles(samples)
    lat = " ".join(f"p{p:g}={v * 1e3:.2f}ms" for p, v in pct.items())
    click.echo(f"end-to-end: {len(samples)}/{total} msgs at {rate}/s; latency {lat}")


@cli.command()
@click.option("-n", "--namesrvAddr", "namesrv", default="127.0.0.1:9876", show_default=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", default="BenchmarkTopic", show_default=True)
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
@click.option("--mode", type=click.Choice(["batch", "stream"]), default="batch", show_default=True)
@click.option("-r", "--runs", type=int, default=2, show_default=True,
              help="Reads to time in one session (the first also starts Spark's Python workers).")
@click.option("--maxOffsetsPerTrigger", "max_per_trigger", type=int, default=None,
              help="Stream mode: read limit per micro-batch.")
@click.option("--checkpoint", default=None,
              help="Stream mode: checkpoint directory (default: a new temporary one).")
def spark(namesrv: str, topic: str, master: str, mode: str, runs: int,
          max_per_trigger: int | None, checkpoint: str | None) -> None:
    """Read a whole topic with the Spark source; report msg/s (batch) or the
    wall time of availableNow runs from earliest into a no-op sink (stream)."""
    import tempfile

    from pyspark.sql import functions as F

    from client.spark import spark_session

    session = spark_session("mqbench-spark", master, **{"spark.ui.enabled": "false"})
    session.sparkContext.setLogLevel("ERROR")
    try:
        if mode == "batch":
            for run in range(1, runs + 1):
                t0 = time.perf_counter()
                df = (session.read.format("rocketmq").option("namesrv", namesrv)
                      .option("topic", topic).load())
                row = df.agg(F.count("*"), F.sum(F.length("body"))).collect()[0]
                elapsed = time.perf_counter() - t0
                n, nbytes = row[0], row[1] or 0
                click.echo(f"spark batch run {run}: {n} msgs ({nbytes / 1e6:.1f} MB of bodies) "
                           f"in {elapsed:.2f}s = {n / elapsed:,.0f} msg/s")
            return
        for run in range(1, runs + 1):
            with tempfile.TemporaryDirectory() as tmp:
                reader = (session.readStream.format("rocketmq").option("namesrv", namesrv)
                          .option("topic", topic).option("startingOffsets", "earliest"))
                if max_per_trigger is not None:
                    reader = reader.option("maxOffsetsPerTrigger", str(max_per_trigger))
                t0 = time.perf_counter()
                query = (reader.load().writeStream.format("noop")
                         .option("checkpointLocation", checkpoint or f"{tmp}/checkpoint")
                         .trigger(availableNow=True).start())
                query.awaitTermination()
                elapsed = time.perf_counter() - t0
                rows = sum(p["numInputRows"] for p in query.recentProgress)
                batches = sum(1 for p in query.recentProgress if p["numInputRows"])
                click.echo(f"spark stream run {run} (availableNow, from earliest): {rows} msgs "
                           f"in {batches} micro-batches, {elapsed:.2f}s wall = "
                           f"{rows / elapsed:,.0f} msg/s")
    finally:
        session.stop()


def main() -> None:
    configure_logging("WARNING")
    cli()


if __name__ == "__main__":
    main()
