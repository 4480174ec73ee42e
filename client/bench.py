"""``mqbench``: throughput and latency of producers and consumers.

    mqbench producer -n 127.0.0.1:9876 -t BenchTopic -s 1024 -b 32 -c 200000 -w 8
    mqbench transaction -n 127.0.0.1:9876 -t BenchTxTopic -s 1024 -c 20000 -w 16 -p 1 --checks 20
    mqbench consumer -n 127.0.0.1:9876 -t BenchTopic -c 200000
    mqbench push -n 127.0.0.1:9876 -t BenchTopic -c 200000 -i 3
    mqbench latency -n 127.0.0.1:9876 -t LatencyTopic -r 2000 -d 10
    mqbench attack held-pulls -n 127.0.0.1:9876 -b 127.0.0.1:10911 --broker-pid PID -d 30
      (kinds: unread-pulls heartbeat-flood idle-conns held-pulls groups topics; client/bench_attacks.py)

Counts are bounded; every run stops by itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click
import trio

from client.bench_attacks import attack
from protocol.logs import configure_logging

if TYPE_CHECKING:
    from client import LocalTransactionState, Message, MessageExt

NAMESRV_HELP = 'Name server address list, "host:port;host:port".'


def percentiles(samples: Sequence[float], points: Sequence[float] = (50, 90, 99, 99.9)) -> dict[float, float]:
    """Nearest-rank percentiles of ``samples`` (seconds), as a dict point -> value."""
    if not samples:
        return {p: 0.0 for p in points}
    ordered = sorted(samples)
    n = len(ordered)
    return {p: ordered[min(n - 1, max(0, int(round(p / 100 * n + 0.5)) - 1))] for p in points}


def report(kind: str, count: int, nbytes: int, elapsed: float, latencies: Sequence[float], *,
           noun: str = "msgs", rate: str = "msg/s", per: str = "request") -> str:
    tps = count / elapsed if elapsed > 0 else 0.0
    mb = nbytes / elapsed / 1e6 if elapsed > 0 else 0.0
    pct = percentiles(latencies)
    lat = " ".join(f"p{p:g}={v * 1e3:.3f}ms" for p, v in pct.items())
    return (f"{kind}: {count} {noun} in {elapsed:.2f}s = {tps:,.0f} {rate} ({mb:.1f} MB/s); "
            f"latency per {per} {lat}")


# ---- transaction mode: pure parts ----------------------------------------------------


class CheckTimes:
    """When each UNKNOW transaction was acknowledged (its send_message_in_transaction
    returned) and when the broker's first check of it arrived, by UNIQ_KEY. Times
    are passed in (monotonic seconds)."""

    def __init__(self) -> None:
        self.acked: dict[str, float] = {}
        self.checked: dict[str, float] = {}
        self._unchecked: set[str] = set()

    def ack(self, key: str, now: float) -> None:
        self.acked[key] = now
        if key not in self.checked:
            self._unchecked.add(key)

    def check(self, key: str, now: float) -> bool:
        """Record a check; True for the first check of ``key``, False for a repeat."""
        if key in self.checked:
            return False
        self.checked[key] = now
        self._unchecked.discard(key)
        return True

    def unchecked(self) -> int:
        """Acknowledged transactions not checked yet."""
        return len(self._unchecked)


@dataclass(frozen=True, slots=True)
class CheckSummary:
    """The check phase: ``delays`` (seconds, sorted) from each acknowledged
    UNKNOW transaction to its first check; ``missed`` were never checked."""

    sent: int
    delays: list[float] = field(default_factory=list)

    @property
    def checked(self) -> int:
        return len(self.delays)

    @property
    def missed(self) -> int:
        return self.sent - self.checked


def summarize_checks(acked: Mapping[str, float], checked: Mapping[str, float]) -> CheckSummary:
    """Pair acknowledgement and check times by key. Checks of keys never
    acknowledged (e.g. a throughput-phase transaction whose commit was lost)
    are not counted."""
    delays = sorted(checked[key] - t for key, t in acked.items() if key in checked)
    return CheckSummary(sent=len(acked), delays=delays)


def check_report(summary: CheckSummary, waited: float, check_wait: float) -> str:
    """One line for the check phase."""
    head = (f"checks: {summary.checked}/{summary.sent} UNKNOW transactions checked "
            f"(waited {waited:.1f}s of --check-wait {check_wait:g}s)")
    if summary.delays:
        pct = percentiles(summary.delays, (50, 90))
        head += (f"; UNKNOW to check min={summary.delays[0]:.3f}s p50={pct[50]:.3f}s "
                 f"p90={pct[90]:.3f}s max={summary.delays[-1]:.3f}s")
    return f"{head}; {summary.missed} not checked in time"


# ---- transaction mode: the listener (runs on the event loop) ------------------------


class BenchTransactionListener:
    """Local transactions end in the state passed as ``arg`` (COMMIT_MESSAGE
    when none); a check records its first arrival in ``times`` and commits.
    ``all_checked`` is set once ``sending_done()`` was called and every
    acknowledged UNKNOW transaction has been checked."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        from client import LocalTransactionState

        self._states = LocalTransactionState
        self.clock = clock
        self.times = CheckTimes()
        self.all_checked = trio.Event()
        self._sending = True

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        if isinstance(arg, self._states):
            return arg
        return self._states.COMMIT_MESSAGE

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        key = msg.uniq_key or msg.msg_id
        if key and self.times.check(key, self.clock()):
            self._maybe_done()
        return self._states.COMMIT_MESSAGE

    def acked(self, key: str) -> None:
        self.times.ack(key, self.clock())

    def sending_done(self) -> None:
        self._sending = False
        self._maybe_done()

    def _maybe_done(self) -> None:
        if not self._sending and self.times.unchecked() == 0:
            self.all_checked.set()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Benchmark producers and consumers against a running cluster."""


cli.add_command(attack)


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
              help="Producer instances (one client instance, so one connection per broker, shared).")
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
@click.option("-t", "--topic", default="BenchTxTopic", show_default=True)
@click.option("-s", "--messageSize", "size", type=click.IntRange(min=0), default=1024,
              show_default=True)
@click.option("-c", "--count", type=click.IntRange(min=0), default=20_000, show_default=True,
              help="Committed transactions in all (throughput phase).")
@click.option("-w", "--concurrency", type=click.IntRange(min=1), default=16, show_default=True,
              help="Transactions in flight at once.")
@click.option("-p", "--producers", type=click.IntRange(min=1), default=1, show_default=True,
              help="TransactionProducers, groups BENCH_TX_PRODUCER_<i> (one client instance).")
@click.option("--checks", type=click.IntRange(min=0), default=0, show_default=True,
              help="Then send this many UNKNOW transactions and time the broker's checks.")
@click.option("--check-wait", "check_wait", type=click.FloatRange(min=0), default=120.0,
              show_default=True, help="Seconds to wait for the checks at most.")
def transaction(namesrv: str, topic: str, size: int, count: int, concurrency: int,
                producers: int, checks: int, check_wait: float) -> None:
    """Send COUNT transactions of SIZE bytes (every local transaction commits)
    and report transactions/s and latency; with --checks N, send N more whose
    local transaction is UNKNOW and report how long the broker took to check them."""
    for line in trio.run(_transaction_bench, namesrv, topic, size, count, concurrency,
                         producers, checks, check_wait):
        click.echo(line)


async def _transaction_bench(namesrv: str, topic: str, size: int, count: int, concurrency: int,
                             producers: int, checks: int, check_wait: float) -> list[str]:
    """The transaction command's body: its output lines."""
    from client import LocalTransactionState, Message, TransactionProducer

    commit, unknow = LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.UNKNOW
    body = b"x" * size
    listener = BenchTransactionListener()
    latencies: list[float] = []
    committed = not_committed = check_not_sent = 0
    lines: list[str] = []

    async def worker(p: TransactionProducer, quota: list[int], state: LocalTransactionState,
                     timed: bool) -> None:
        nonlocal committed, not_committed, check_not_sent
        while quota[0] > 0:
            quota[0] -= 1
            t0 = time.perf_counter()
            r = await p.send_message_in_transaction(Message(topic, body), state)
            if timed:
                latencies.append(time.perf_counter() - t0)
            if r.local_transaction_state is unknow:
                listener.acked(r.msg_id)
            elif timed and r.local_transaction_state is commit:
                committed += 1
            elif timed:
                not_committed += 1
            else:
                check_not_sent += 1

    async def run_phase(ps: list[TransactionProducer], n: int, state: LocalTransactionState,
                        timed: bool) -> float:
        quota = [n]
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(max(1, min(concurrency, n))):
                nursery.start_soon(worker, ps[i % len(ps)], quota, state, timed)
        return time.perf_counter() - t0

    ps = [TransactionProducer(f"BENCH_TX_PRODUCER_{i}", namesrv, listener)
          for i in range(producers)]
    started: list[TransactionProducer] = []
    try:
        for p in ps:
            await p.start()
            started.append(p)
        # warm up: routes, connections, heartbeats
        for p in ps:
            await p.send_message_in_transaction(Message(topic, body), commit)
        elapsed = await run_phase(ps, count, commit, True)
        line = report("transaction", committed, committed * size, elapsed, latencies,
                      noun="committed", rate="tx/s", per="send_message_in_transaction")
        if not_committed:
            line += f"; {not_committed} rolled back (half message not SEND_OK)"
        lines.append(line)
        if checks > 0:
            await run_phase(ps, checks, unknow, False)
            listener.sending_done()
            t0 = time.monotonic()
            with trio.move_on_after(check_wait):
                await listener.all_checked.wait()
            waited = time.monotonic() - t0
            summary = summarize_checks(listener.times.acked, listener.times.checked)
            line = check_report(summary, waited, check_wait)
            if check_not_sent:
                line += f"; {check_not_sent} rolled back (half message not SEND_OK)"
            lines.append(line)
    finally:
        for p in started:
            await p.shutdown()
    return lines


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
