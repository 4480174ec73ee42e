"""``mqbench``: throughput and latency of producers and consumers.

    mqbench producer -n 127.0.0.1:9876 -t BenchTopic -s 1024 -b 32 -c 200000 -w 8
    mqbench transaction -n 127.0.0.1:9876 -t BenchTxTopic -s 1024 -c 20000 -w 16 -p 1 --checks 20
    mqbench consumer -n 127.0.0.1:9876 -t BenchTopic -c 200000
    mqbench push -n 127.0.0.1:9876 -t BenchTopic -c 200000 -i 3
    mqbench latency -n 127.0.0.1:9876 -t LatencyTopic -r 2000 -d 10
    mqbench spark -n 127.0.0.1:9876 -t BenchTopic -r 3
    mqbench disk --dir .data/commitlog -s 1024 -c 2000 [--compare-zero-filled]
    mqbench machine -c 5000
    mqbench attack held-pulls -n 127.0.0.1:9876 -b 127.0.0.1:10911 --broker-pid PID -d 30
      (kinds: unread-pulls heartbeat-flood idle-conns held-pulls groups topics; bench/attacks.py)

Counts are bounded; every run stops by itself. ``--json`` (every mode but
attack) prints one JSON object per result line instead of text; the text is
rendered from the same dict (``throughput_result``, ``render_throughput``...).
Latencies in the dicts are in microseconds under ``latency_us``
(``{"p50", "p90", "p99", "p99.9"}``), the largest under ``latency_max_us``.

On a terminal (stdout a TTY, no ``--json``) producer, consumer, transaction and
latency show a progress line while they run (count and rate, rewritten in place
four times a second); producer, consumer, push, transaction and latency end
with a table (``result_table``: messages, msg/s, MB/s, latency p50 ... max)
above their one-line summary, which stays the last line.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click
import trio

from bench.attacks import attack
from bench.proc_cpu import tree_cpu_seconds
from bench.pywork import work_ns
from bench.stats import latency_max_us, latency_text, latency_us, per_second, percentiles
from client.admin_cli import (
    apply_tls_options,
    check_credentials,
    credential_options,
    namesrv_option,
    tls_options,
    tool_credentials,
)
from protocol.trio.busy_poll import ENV_BUSY_POLL_US, MAX_BUSY_POLL_US
from protocol.trio.logs import configure_logging

if TYPE_CHECKING:
    import subprocess

    from client import LocalTransactionState, Message, MessageExt

# mqbench latency: how long a new consumer may take to get its queues
WARM_UP_TIMEOUT_S = 30.0


# ---- result dicts (the --json objects) and their text ---------------------------------


def throughput_result(mode: str, count: int, nbytes: int, elapsed: float,
                      latencies: Sequence[float], *, per: str = "request",
                      **extra: Any) -> dict[str, Any]:
    """One result line as a dict: ``count`` messages (``nbytes`` of bodies) in
    ``elapsed`` seconds, ``latencies`` (seconds) one per ``per``."""
    return {
        "mode": mode,
        "count": count,
        "bytes": nbytes,
        "seconds": elapsed,
        "msgs_per_s": per_second(count, elapsed),
        "mb_per_s": per_second(nbytes, elapsed) / 1e6,
        "latency_per": per,
        "latency_us": latency_us(latencies),
        "latency_max_us": latency_max_us(latencies),
        **extra,
    }


def render_throughput(d: Mapping[str, Any], *, noun: str = "msgs", rate: str = "msg/s") -> str:
    """The text line of a ``throughput_result`` dict."""
    return (f"{d['mode']}: {d['count']} {noun} in {d['seconds']:.2f}s = "
            f"{d['msgs_per_s']:,.0f} {rate} ({d['mb_per_s']:.1f} MB/s); "
            f"latency per {d['latency_per']} {latency_text(d['latency_us'])}")


def report(kind: str, count: int, nbytes: int, elapsed: float, latencies: Sequence[float], *,
           noun: str = "msgs", rate: str = "msg/s", per: str = "request") -> str:
    return render_throughput(throughput_result(kind, count, nbytes, elapsed, latencies, per=per),
                             noun=noun, rate=rate)


def emit(result: Mapping[str, Any], text: str, as_json: bool, *, table: bool = False) -> None:
    """Print one result: its JSON object, or its text line (after its
    ``result_table`` with ``table``)."""
    if as_json:
        click.echo(json.dumps(result))
        return
    if table:
        click.echo(result_table([result]))
    click.echo(text)


# ---- the final table and the progress line -------------------------------------------

TABLE_LATENCIES = ("p50", "p90", "p99", "p99.9", "max")


def _table_cells(d: Mapping[str, Any]) -> list[str]:
    def num(key: str, fmt: str) -> str:
        v = d.get(key)
        return "-" if v is None else format(v, fmt)

    lat = dict(d.get("latency_us") or {})
    if "latency_max_us" in d:
        lat["max"] = d["latency_max_us"]
    return [str(d.get("mode", "")), num("count", ","), num("seconds", ".2f"),
            num("msgs_per_s", ",.0f"), num("mb_per_s", ".1f"),
            *("-" if lat.get(k) is None else f"{lat[k] / 1e3:.3f}" for k in TABLE_LATENCIES)]


def result_table(results: Sequence[Mapping[str, Any]]) -> str:
    """Results as an aligned table: messages, seconds, msg/s, MB/s and latency
    p50/p90/p99/p99.9/max in ms (``-`` where a result has no such figure), then
    what the latency measures."""
    header = ["mode", "messages", "seconds", "msg/s", "MB/s",
              *(f"{k} ms" for k in TABLE_LATENCIES)]
    rows = [header, *(_table_cells(d) for d in results)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
             for r in rows]
    pers = sorted({str(d["latency_per"]) for d in results if d.get("latency_per")})
    if pers:
        lines.append(f"latency per {', '.join(pers)}")
    return "\n".join(lines)


def progress_line(label: str, count: int, nbytes: int, elapsed: float,
                  total: int | None = None, rate_now: float | None = None) -> str:
    """One progress line: ``produce  12,000/200,000 msgs (6%)  9,850 msg/s  9.6 MB/s  1.2s``;
    the rate is ``rate_now`` (the last interval's) when given, else the average."""
    done = f"{count:,}"
    if total:
        done += f"/{total:,} msgs ({min(100.0, 100 * count / total):.0f}%)"
    else:
        done += " msgs"
    rate = per_second(count, elapsed) if rate_now is None else rate_now
    return (f"{label}  {done}  {rate:,.0f} msg/s  {per_second(nbytes, elapsed) / 1e6:.1f} MB/s  "
            f"{elapsed:.1f}s")


@dataclass
class ProgressMeter:
    """Progress lines from (time, count, bytes) readings: the rate over the last
    interval, the lines padded to hide the longer previous one."""

    label: str
    start: float
    total: int | None = None
    last_time: float = 0.0
    last_count: int = 0
    last_len: int = 0

    def __post_init__(self) -> None:
        self.last_time = self.start

    def update(self, now: float, count: int, nbytes: int) -> str:
        """The text to write (starting with a carriage return)."""
        dt = now - self.last_time
        rate_now = (count - self.last_count) / dt if dt > 0 else None
        self.last_time, self.last_count = now, count
        line = progress_line(self.label, count, nbytes, now - self.start, self.total, rate_now)
        text = "\r" + line.ljust(self.last_len)
        self.last_len = len(line)
        return text

    def clear(self) -> str:
        """The text that erases the current line."""
        text = "\r" + " " * self.last_len + "\r" if self.last_len else ""
        self.last_len = 0
        return text


PROGRESS_INTERVAL_S = 0.25


def progress_enabled(as_json: bool, out: IO[str] | None = None) -> bool:
    """Progress only for a person: stdout a terminal and no --json."""
    out = sys.stdout if out is None else out
    return not as_json and out.isatty()


async def show_progress(label: str, read: Callable[[], tuple[int, int]], total: int | None,
                        out: IO[str], interval: float = PROGRESS_INTERVAL_S) -> None:
    """Rewrite the progress line every ``interval`` until cancelled, then erase it."""
    meter = ProgressMeter(label, trio.current_time(), total)
    try:
        while True:
            await trio.sleep(interval)
            count, nbytes = read()
            out.write(meter.update(trio.current_time(), count, nbytes))
            out.flush()
    finally:
        out.write(meter.clear())
        out.flush()


T = TypeVar("T")


async def with_progress(body: Callable[[], Awaitable[T]], label: str,
                        read: Callable[[], tuple[int, int]], total: int | None,
                        enabled: bool, out: IO[str] | None = None) -> T:
    """``await body()`` with a progress line beside it when ``enabled``; the
    line goes away when the body ends."""
    if not enabled:
        return await body()
    stream = sys.stdout if out is None else out
    async with trio.open_nursery() as nursery:
        nursery.start_soon(show_progress, label, read, total, stream)
        try:
            return await body()
        finally:
            nursery.cancel_scope.cancel()


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print one JSON object per result line instead of text.")


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


def check_result(summary: CheckSummary, waited: float, check_wait: float,
                 rolled_back: int = 0) -> dict[str, Any]:
    """The check phase as a dict (delays in seconds; None when nothing was checked)."""
    delays: dict[str, float] | None = None
    if summary.delays:
        pct = percentiles(summary.delays, (50, 90))
        delays = {"min": summary.delays[0], "p50": pct[50], "p90": pct[90],
                  "max": summary.delays[-1]}
    return {"mode": "transaction_checks", "sent": summary.sent, "checked": summary.checked,
            "missed": summary.missed, "waited_s": waited, "check_wait_s": check_wait,
            "unknow_to_check_s": delays, "rolled_back": rolled_back}


def render_checks(d: Mapping[str, Any]) -> str:
    head = (f"checks: {d['checked']}/{d['sent']} UNKNOW transactions checked "
            f"(waited {d['waited_s']:.1f}s of --check-wait {d['check_wait_s']:g}s)")
    if d["unknow_to_check_s"]:
        t = d["unknow_to_check_s"]
        head += (f"; UNKNOW to check min={t['min']:.3f}s p50={t['p50']:.3f}s "
                 f"p90={t['p90']:.3f}s max={t['max']:.3f}s")
    line = f"{head}; {d['missed']} not checked in time"
    if d["rolled_back"]:
        line += f"; {d['rolled_back']} rolled back (half message not SEND_OK)"
    return line


def check_report(summary: CheckSummary, waited: float, check_wait: float) -> str:
    """One line for the check phase."""
    return render_checks(check_result(summary, waited, check_wait))


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
@credential_options
@tls_options
@click.option("--busy-poll-us", "busy_poll_us", type=click.IntRange(0, MAX_BUSY_POLL_US),
              default=None, envvar=ENV_BUSY_POLL_US, show_envvar=True,
              help="µs the clients keep polling after each request instead of sleeping "
                   "(lower latency for CPU; default 0, off).")
@click.pass_context
def cli(ctx: click.Context, access_key: str | None, secret_key: str | None, use_tls: bool,
        tls_ca: str | None, tls_cert: str | None, tls_key: str | None,
        busy_poll_us: int | None) -> None:
    """Benchmark producers and consumers against a running cluster."""
    ctx.obj = check_credentials(access_key, secret_key)
    apply_tls_options(use_tls, tls_ca, tls_cert, tls_key)  # members inherit ROCKETMQ_TLS_*
    if busy_poll_us is not None:  # client instances (and push members) read it
        os.environ[ENV_BUSY_POLL_US] = str(busy_poll_us)


def _spark_credentials(reader: Any) -> Any:
    """The Spark source's options accessKey/secretKey from mqbench's credentials."""
    cred = tool_credentials()
    if cred is None:
        return reader
    return reader.option("accessKey", cred.access_key).option("secretKey", cred.secret_key)


cli.add_command(attack)


@cli.command()
@namesrv_option("127.0.0.1:9876")
@click.option("-t", "--topic", default="BenchmarkTopic", show_default=True)
@click.option("-s", "--messageSize", "size", type=int, default=1024, show_default=True)
@click.option("-b", "--batchSize", "batch", type=int, default=1, show_default=True,
              help="Messages per send (1 = single sends).")
@click.option("-c", "--count", type=int, default=200_000, show_default=True, help="Messages in all.")
@click.option("-w", "--concurrency", type=int, default=16, show_default=True,
              help="Sends in flight at once.")
@click.option("-p", "--producers", type=int, default=1, show_default=True,
              help="Producer instances (one client instance, so one connection per broker, shared).")
@json_option
def producer(namesrv: str, topic: str, size: int, batch: int, count: int, concurrency: int,
             producers: int, as_json: bool) -> None:
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
        ps = [Producer(f"BENCH_PRODUCER_{i}", namesrv_addr=namesrv, credentials=tool_credentials())
              for i in range(producers)]
        for p in ps:
            await p.start()
        try:
            # warm up: routes and connections
            for p in ps:
                await p.send(Message(topic, body))
            async def run_workers() -> None:
                async with trio.open_nursery() as nursery:
                    for i in range(concurrency):
                        nursery.start_soon(worker, ps[i % producers], quota)

            t0 = time.perf_counter()
            await with_progress(run_workers, "produce", lambda: (sent, sent * size), count,
                                progress_enabled(as_json))
            return time.perf_counter() - t0
        finally:
            for p in ps:
                await p.shutdown()

    elapsed = trio.run(go)
    result = throughput_result("produce", sent, sent * size, elapsed, latencies, topic=topic,
                               size=size, batch=batch, concurrency=concurrency,
                               producers=producers)
    emit(result, render_throughput(result), as_json, table=True)


@cli.command()
@namesrv_option("127.0.0.1:9876")
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
@json_option
def transaction(namesrv: str, topic: str, size: int, count: int, concurrency: int,
                producers: int, checks: int, check_wait: float, as_json: bool) -> None:
    """Send COUNT transactions of SIZE bytes (every local transaction commits)
    and report transactions/s and latency; with --checks N, send N more whose
    local transaction is UNKNOW and report how long the broker took to check them."""
    for result in trio.run(_transaction_bench, namesrv, topic, size, count, concurrency,
                           producers, checks, check_wait, progress_enabled(as_json)):
        emit(result, render_transaction(result), as_json,
             table=result["mode"] == "transaction")


def render_transaction(d: Mapping[str, Any]) -> str:
    """The text line of a transaction command result (either phase)."""
    if d["mode"] == "transaction_checks":
        return render_checks(d)
    line = render_throughput(d, noun="committed", rate="tx/s")
    if d["rolled_back"]:
        line += f"; {d['rolled_back']} rolled back (half message not SEND_OK)"
    return line


async def _transaction_bench(namesrv: str, topic: str, size: int, count: int, concurrency: int,
                             producers: int, checks: int, check_wait: float,
                             progress: bool = False) -> list[dict[str, Any]]:
    """The transaction command's body: its results (throughput, then checks)."""
    from client import LocalTransactionState, Message, TransactionProducer

    commit, unknow = LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.UNKNOW
    body = b"x" * size
    listener = BenchTransactionListener()
    latencies: list[float] = []
    committed = not_committed = check_not_sent = 0
    results: list[dict[str, Any]] = []

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

    ps = [TransactionProducer(f"BENCH_TX_PRODUCER_{i}", namesrv, listener,
                              credentials=tool_credentials())
          for i in range(producers)]
    started: list[TransactionProducer] = []
    try:
        for p in ps:
            await p.start()
            started.append(p)
        # warm up: routes, connections, heartbeats
        for p in ps:
            await p.send_message_in_transaction(Message(topic, body), commit)
        elapsed = await with_progress(lambda: run_phase(ps, count, commit, True), "transaction",
                                      lambda: (committed, committed * size), count, progress)
        results.append(throughput_result(
            "transaction", committed, committed * size, elapsed, latencies,
            per="send_message_in_transaction", rolled_back=not_committed, topic=topic,
            size=size, concurrency=concurrency, producers=producers))
        if checks > 0:
            await run_phase(ps, checks, unknow, False)
            listener.sending_done()
            t0 = time.monotonic()
            with trio.move_on_after(check_wait):
                await listener.all_checked.wait()
            waited = time.monotonic() - t0
            summary = summarize_checks(listener.times.acked, listener.times.checked)
            results.append(check_result(summary, waited, check_wait, check_not_sent))
    finally:
        for p in started:
            await p.shutdown()
    return results


@cli.command()
@namesrv_option("127.0.0.1:9876")
@click.option("-t", "--topic", default="BenchmarkTopic", show_default=True)
@click.option("-g", "--group", default="BENCH_CONSUMER", show_default=True)
@click.option("-c", "--count", type=int, default=200_000, show_default=True,
              help="Stop after this many messages (or when every queue is drained).")
@click.option("-m", "--pullBatchSize", "pull_batch", type=int, default=32, show_default=True)
@click.option("--from-start/--from-group", default=True, show_default=True,
              help="Start at each queue's min offset, or at the group's committed offset.")
@json_option
def consumer(namesrv: str, topic: str, group: str, count: int, pull_batch: int,
             from_start: bool, as_json: bool) -> None:
    """Pull messages from every queue until COUNT or the end; report msg/s."""
    from client import MessageQueue, PullConsumer, PullStatus

    latencies: list[float] = []
    got = 0
    nbytes = 0

    async def go() -> float:
        nonlocal got, nbytes
        async with PullConsumer(group, namesrv_addr=namesrv,
                                credentials=tool_credentials()) as c:
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
                    nbytes += sum([len(m.body) for m in r.msg_found_list])
                    pos = r.next_begin_offset
                if not from_start:
                    await c.update_consume_offset(mq, pos)

            async def run_drains() -> None:
                async with trio.open_nursery() as nursery:
                    for mq in queues:
                        nursery.start_soon(drain, mq)

            t0 = time.perf_counter()
            await with_progress(run_drains, "consume", lambda: (got, nbytes), count,
                                progress_enabled(as_json))
            return time.perf_counter() - t0

    elapsed = trio.run(go)
    result = throughput_result("consume", got, nbytes, elapsed, latencies, per="pull",
                               topic=topic, pull_batch=pull_batch)
    emit(result, render_throughput(result), as_json, table=True)


@cli.command()
@namesrv_option("127.0.0.1:9876")
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
@json_option
def push(namesrv: str, topic: str, group: str | None, count: int, instances: int, batch: int,
         timeout: float, member: int | None, as_json: bool) -> None:
    """Consume COUNT messages with push consumers of one new group (clustering,
    from the first offset); report msg/s over all of them and the latency from
    each message's store timestamp to its listener call (store-to-listener: it
    includes the time a backlog waited before the consumers started)."""
    import subprocess
    import sys
    import uuid

    if member is not None:
        assert group is not None
        click.echo(json.dumps(_push_member(namesrv, topic, group, count, batch, timeout, member)))
        return
    group = group or f"BENCH_PUSH_{uuid.uuid4().hex[:8]}"
    member_env = dict(os.environ)  # the members sign with the same credentials
    cred = tool_credentials()
    if cred is not None:
        member_env.update(ROCKETMQ_ACCESS_KEY=cred.access_key,
                          ROCKETMQ_SECRET_KEY=cred.secret_key)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.mqbench", "push", "-n", namesrv, "-t", topic, "-g", group,
             "-c", str(count), "-b", str(batch), "--timeout", str(timeout), "--member", str(i)],
            stdout=subprocess.PIPE, text=True, env=member_env)
        for i in range(instances)
    ]
    members = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout + 30)
        members.append(parse_member_line(out))
    result = push_result(members, topic=topic, batch=batch)
    emit(result, render_push(result), as_json, table=True)


def parse_member_line(out: str) -> dict[str, Any]:
    """A push member's report: the last line of its output that is a JSON
    object (nothing consumed when there is none, e.g. the member crashed)."""
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if isinstance(d, dict):
                return d
    return {"got": 0, "bytes": 0, "first": 0.0, "last": 0.0, "store_to_listener_ms": []}


def push_result(members: Sequence[Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
    """All push members together: messages over the span from the first
    member's first listener call to the last one's last call; store-to-listener
    latency percentiles over every message."""
    total = sum(int(m["got"]) for m in members)
    active = [m for m in members if m["got"]]
    elapsed = (max(float(m["last"]) for m in active) - min(float(m["first"]) for m in active)
               if active else 0.0)
    samples = [v / 1e3 for m in members for v in m.get("store_to_listener_ms", [])]
    nbytes = sum(int(m.get("bytes", 0)) for m in members)
    return throughput_result("push", total, nbytes, elapsed, samples, per="store-to-listener",
                             consumers=len(members),
                             per_consumer=[int(m["got"]) for m in members], **extra)


def render_push(d: Mapping[str, Any]) -> str:
    per = ", ".join(str(n) for n in d["per_consumer"])
    return (f"push consume: {d['count']} msgs in {d['seconds']:.2f}s = {d['msgs_per_s']:,.0f} msg/s "
            f"({d['consumers']} consumers: {per}); latency store-to-listener (broker store "
            f"timestamp, ms resolution, a backlog's wait included) "
            f"{latency_text(d['latency_us'], digits=1)}")


def _push_member(namesrv: str, topic: str, group: str, count: int, batch: int, timeout: float,
                 member: int) -> dict[str, Any]:
    from client import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer

    got = 0
    nbytes = 0
    first = last = 0.0
    lat_ms: list[float] = []
    ok = ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def go() -> None:
        nonlocal got, first, last

        def listener(msgs: list, ctx: object) -> ConsumeConcurrentlyStatus:  # type: ignore[type-arg]
            nonlocal got, first, last, nbytes
            now = time.time()
            if not got:
                first = now
            got += len(msgs)
            last = now
            now_ms = now * 1e3
            # the broker's store timestamp (ms, same machine's clock); rounded
            # for the report after the run, not in the listener
            lat_ms.extend([now_ms - m.store_timestamp for m in msgs])
            nbytes += sum([len(m.body) for m in msgs])
            return ok

        c = PushConsumer(group, namesrv, instance_name=f"bench-{member}-{uuid_hex()}",
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                         consume_message_batch_max_size=batch, rebalance_interval=2.0,
                         credentials=tool_credentials())
        c.subscribe(topic, "*")
        c.register_message_listener(listener)
        async with c:
            deadline = trio.current_time() + timeout
            seen = -1
            without_queues = 0
            while trio.current_time() < deadline:
                await trio.sleep(2.0)
                if got and got == seen:
                    break  # idle for 2 s after consuming: the others have the rest
                seen = got
                holds = any(mq.topic == topic for mq in c.process_queue_table)
                without_queues = 0 if got or holds else without_queues + 1
                if without_queues >= 3:
                    break  # three rebalances left it no queue: the others hold them all

    trio.run(go)
    return {"got": got, "bytes": nbytes, "first": first, "last": last,
            "store_to_listener_ms": [round(v, 3) for v in lat_ms]}


def uuid_hex() -> str:
    import uuid

    return uuid.uuid4().hex[:6]


@cli.command()
@namesrv_option("127.0.0.1:9876")
@click.option("-t", "--topic", default="LatencyTopic", show_default=True)
@click.option("-r", "--rate", type=int, default=2000, show_default=True, help="Messages per second.")
@click.option("-d", "--duration", type=float, default=10.0, show_default=True, help="Seconds.")
@click.option("-s", "--messageSize", "size", type=int, default=1024, show_default=True)
@json_option
def latency(namesrv: str, topic: str, rate: int, duration: float, size: int,
            as_json: bool) -> None:
    """End-to-end latency, send to listener, at a steady RATE (one process:
    a producer and a push consumer of a new group).

    The group starts from the time it starts (CONSUME_FROM_TIMESTAMP): a new
    group would otherwise read the topic's history first (a broker answers
    offset 0 while a queue's first message is in memory, as RocketMQ's), and
    only this run's messages (property BENCH_RUN) count."""
    from client import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, Producer, PushConsumer

    samples: list[float] = []
    warmed: list[bool] = []
    ok = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    total = int(rate * duration)
    run = uuid_hex()

    def listener(msgs: list, ctx: object) -> ConsumeConcurrentlyStatus:  # type: ignore[type-arg]
        now = time.perf_counter()
        for m in msgs:
            if m.properties.get("BENCH_RUN") != run:
                continue  # an earlier run's, or anyone else's
            sent = m.properties.get("BENCH_T")
            if sent is not None:
                samples.append(now - float(sent))
            else:  # a warm-up message: the consumer has its queues
                warmed.append(True)
        return ok

    def warm_up() -> Message:
        return Message(topic, b"warm-up", properties={"BENCH_RUN": run})

    async def go() -> None:
        async with Producer("BENCH_LATENCY_PRODUCER", namesrv,
                            credentials=tool_credentials()) as p:
            # the topic exists (and has a route) before the consumer looks it up
            await p.send(warm_up())
            c = PushConsumer(f"BENCH_LATENCY_{run}", namesrv,
                             consume_from_where=ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
                             consume_timestamp=int(time.time() * 1000),
                             credentials=tool_credentials())
            c.subscribe(topic, "*")
            c.register_message_listener(listener)
            async with c:
                # warm-ups until one arrives: the consumer's rebalance is done
                with trio.move_on_after(WARM_UP_TIMEOUT_S):
                    while not warmed:
                        await p.send(warm_up())
                        await trio.sleep(0.2)
                if not warmed:
                    raise click.ClickException(
                        f"the consumer received no message within {WARM_UP_TIMEOUT_S:g}s "
                        f"of subscribing to {topic!r}")
                samples.clear()
                body = b"x" * size
                interval = 1.0 / rate

                async def timed() -> None:
                    start = trio.current_time()
                    for i in range(total):
                        target = start + i * interval
                        delay = target - trio.current_time()
                        if delay > 0:
                            await trio.sleep(delay)
                        msg = Message(topic, body, properties={"BENCH_RUN": run})
                        msg.put_user_property("BENCH_T", repr(time.perf_counter()))
                        await p.send_oneway(msg)
                    with trio.move_on_after(10):
                        while len(samples) < total:
                            await trio.sleep(0.05)

                await with_progress(timed, "latency", lambda: (len(samples), len(samples) * size),
                                    total, progress_enabled(as_json))

    trio.run(go)
    result = latency_result(samples, total, rate, duration, topic=topic, size=size)
    emit(result, render_latency(result), as_json, table=True)


def latency_result(samples: Sequence[float], sent: int, rate: int, duration: float,
                   **extra: Any) -> dict[str, Any]:
    """The latency command's result: ``samples`` (seconds, send to listener)."""
    return {"mode": "latency", "count": len(samples), "sent": sent, "rate": rate,
            "seconds": duration, "latency_per": "send-to-listener",
            "latency_us": latency_us(samples), "latency_max_us": latency_max_us(samples), **extra}


def render_latency(d: Mapping[str, Any]) -> str:
    return (f"end-to-end: {d['count']}/{d['sent']} msgs at {d['rate']}/s; "
            f"latency {latency_text(d['latency_us'], digits=2)}")


@cli.command()
@namesrv_option("127.0.0.1:9876")
@click.option("-t", "--topic", default="BenchmarkTopic", show_default=True)
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
@click.option("--mode", type=click.Choice(["batch", "stream"]), default="batch", show_default=True)
@click.option("-r", "--runs", type=int, default=2, show_default=True,
              help="Reads to time in one session (the first also starts Spark's Python workers).")
@click.option("--maxOffsetsPerTrigger", "max_per_trigger", type=int, default=None,
              help="Stream mode: read limit per micro-batch.")
@click.option("--checkpoint", default=None,
              help="Stream mode: checkpoint directory (default: a new temporary one).")
@click.option("--noop", is_flag=True,
              help="Batch mode: read a built-in Python data source that connects nowhere "
                   "(one row in each of 4 partitions, the rocketmq schema) instead of the "
                   "topic: what Spark's own Python data-source machinery costs a read.")
@click.option("--noop-rows", "noop_rows", type=click.IntRange(0, 10**9), default=0,
              show_default=True,
              help="With --noop: this many rows a read in all (bodies of --noop-body-size "
                   "bytes, in the rocketmq source's batch size) instead of one a partition: "
                   "what Spark alone costs to take them from a Python source.")
@click.option("--noop-body-size", "noop_body_size", type=click.IntRange(0, 4 << 20),
              default=1024, show_default=True, help="With --noop-rows: each row's body bytes.")
@json_option
def spark(namesrv: str, topic: str, master: str, mode: str, runs: int,
          max_per_trigger: int | None, checkpoint: str | None, noop: bool, noop_rows: int,
          noop_body_size: int, as_json: bool) -> None:
    """Read a whole topic with the Spark source; report msg/s (batch) or the
    wall time of availableNow runs from earliest into a no-op sink (stream).
    Each run is one read of the whole topic: no per-request latency applies;
    with more than one run, the run times' p50 is reported."""
    if noop and mode != "batch":
        raise click.UsageError("--noop reads in batch mode only")
    if noop_rows and not noop:
        raise click.UsageError("--noop-rows goes with --noop")
    from pyspark.sql import functions as F

    from client.spark import spark_session
    from client.spark.cds import mapped_archive
    from client.spark.noop import NOOP_NAME, noop_source

    session = spark_session("mqbench-spark", master, **{"spark.ui.enabled": "false"})
    session.sparkContext.setLogLevel("ERROR")
    sharing = mapped_archive(session) is not None
    me = os.getpid()
    if noop:
        session.dataSource.register(noop_source())
    done: list[dict[str, Any]] = []
    try:
        if mode == "batch":
            for run in range(1, runs + 1):
                cpu0 = tree_cpu_seconds(me)
                t0 = time.perf_counter()
                if noop:
                    df = (session.read.format(NOOP_NAME).option("rows", str(noop_rows))
                          .option("bodySize", str(noop_body_size)).load())
                else:
                    df = _spark_credentials(session.read.format("rocketmq")
                                            .option("namesrv", namesrv)
                                            .option("topic", topic)).load()
                row = df.agg(F.count("*"), F.sum(F.length("body"))).collect()[0]
                elapsed = time.perf_counter() - t0
                cpu1 = tree_cpu_seconds(me)
                result = spark_run_result("batch", run, row[0], row[1] or 0, elapsed,
                                          topic=NOOP_NAME if noop else topic,
                                          cpu_s=None if cpu0 is None or cpu1 is None
                                          else cpu1 - cpu0)
                done.append(result)
                emit(result, render_spark_run(result), as_json)
            summary = spark_summary(done, sharing)
            emit(summary, render_spark_summary(summary), as_json)
            return
        for run in range(1, runs + 1):
            with tempfile.TemporaryDirectory() as tmp:
                reader = _spark_credentials(
                    session.readStream.format("rocketmq").option("namesrv", namesrv)
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
                result = spark_run_result("stream", run, rows, None, elapsed, topic=topic,
                                          micro_batches=batches)
                done.append(result)
                emit(result, render_spark_run(result), as_json)
        summary = spark_summary(done, sharing)
        emit(summary, render_spark_summary(summary), as_json)
    finally:
        session.stop()


def spark_run_result(kind: str, run: int, count: int, nbytes: int | None, elapsed: float,
                     **extra: Any) -> dict[str, Any]:
    """One Spark read of the whole topic (``kind`` batch or stream)."""
    return {"mode": "spark", "kind": kind, "run": run, "count": count, "bytes": nbytes,
            "seconds": elapsed, "msgs_per_s": per_second(count, elapsed),
            "mb_per_s": None if nbytes is None else per_second(nbytes, elapsed) / 1e6,
            "latency_us": None, **extra}


def _cpu_us_per_msg(d: Mapping[str, Any]) -> float | None:
    """CPU µs a message of a Spark run's own processes (driver, JVM, Python workers)."""
    cpu, count = d.get("cpu_s"), d.get("count")
    return None if cpu is None or not count else cpu / count * 1e6


def render_spark_run(d: Mapping[str, Any]) -> str:
    if d["kind"] == "batch":
        cpu = d.get("cpu_s")
        return (f"spark batch run {d['run']}: {d['count']} msgs ({d['bytes'] / 1e6:.1f} MB of "
                f"bodies) in {d['seconds']:.2f}s = {d['msgs_per_s']:,.0f} msg/s"
                + ("" if cpu is None else f"; {cpu:.2f}s of CPU in the session's processes"))
    return (f"spark stream run {d['run']} (availableNow, from earliest): {d['count']} msgs "
            f"in {d['micro_batches']} micro-batches, {d['seconds']:.2f}s wall = "
            f"{d['msgs_per_s']:,.0f} msg/s")


def spark_summary(runs: Sequence[Mapping[str, Any]],
                  class_sharing: bool | None = None) -> dict[str, Any]:
    """The runs together: run time percentiles (seconds, when more than one
    run), the first run's msg/s (it also starts Spark's Python workers) and the
    later runs' nearest-rank median msg/s ("warm": of two runs, the faster;
    None with a single run), and the CPU µs a message the session's own
    processes spent in the first run and in that warm one (where /proc tells);
    whether the driver's JVM mapped a class-sharing archive (client.spark.cds)."""
    times = [float(r["seconds"]) for r in runs]
    warm = sorted(float(r["msgs_per_s"]) for r in runs[1:])
    warm_rate = percentiles(warm, (50,))[50] if warm else None
    # the CPU of the run whose rate is the warm figure
    warm_run = next((r for r in runs[1:] if float(r["msgs_per_s"]) == warm_rate), None)
    return {
        "mode": "spark_summary",
        "kind": runs[0]["kind"] if runs else None,
        "runs": len(runs),
        "run_seconds": ({"p50": percentiles(times, (50,))[50], "min": min(times),
                         "max": max(times)} if len(times) > 1 else None),
        "first_msgs_per_s": float(runs[0]["msgs_per_s"]) if runs else None,
        "first_seconds": float(runs[0]["seconds"]) if runs else None,
        # CPU of the driver, the JVM and the Python workers a message: first and warm reads
        "first_cpu_us_per_msg": _cpu_us_per_msg(runs[0]) if runs else None,
        "warm_cpu_us_per_msg": None if warm_run is None else _cpu_us_per_msg(warm_run),
        "warm_msgs_per_s": warm_rate,
        "jvm_class_sharing": class_sharing,
        "latency_us": None,
        "note": "no per-request latency applies: each run is one read of the whole topic",
    }


def render_spark_summary(d: Mapping[str, Any]) -> str:
    line = f"spark {d['kind']}: {d['runs']} runs"
    if d["run_seconds"]:
        t = d["run_seconds"]
        line += f", run time p50={t['p50']:.2f}s (min {t['min']:.2f}s, max {t['max']:.2f}s)"
    if d["warm_msgs_per_s"] is not None:
        line += (f"; warm {d['warm_msgs_per_s']:,.0f} msg/s (nearest-rank median of runs 2..), "
                 f"first {d['first_msgs_per_s']:,.0f} msg/s")
    sharing = d.get("jvm_class_sharing")
    if sharing is not None:
        line += f"; driver JVM class sharing {'on' if sharing else 'off'}"
    return line + "; no per-request latency applies (each run reads the whole topic)"


# ---- disk mode: fdatasync latency of the store's file system ---------------------------

DISK_DIR_CANDIDATES = (Path(".data/store/commitlog"), Path(".data/commitlog"))
DISK_FILE_PREFIX = ".mqbench-disk-"  # never a store file's name (those are digits)
_NO_FALLOCATE = {errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS}
_ZERO_CHUNK = 1 << 20
DISK_FREE_MARGIN = 64 << 20


class DiskBenchError(Exception):
    """The disk measurement cannot run (bad sizes, not enough free space)."""


def default_disk_dir(base: Path = Path(".")) -> Path:
    """Where ``mqbench disk`` measures without --dir: the local store's commit
    log directory if there is one, else ``.data``."""
    for candidate in DISK_DIR_CANDIDATES:
        if (base / candidate).is_dir():
            return base / candidate
    return base / ".data"


def mount_of(path: str, mounts: str) -> tuple[str, str] | None:
    """(mount point, file system type) holding the absolute ``path``, from the
    text of /proc/self/mounts: the longest mount point containing it (the
    later of equal ones)."""
    best: tuple[str, str] | None = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = point == "/" or path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, fields[2])
    return best


def _file_system(directory: Path) -> tuple[str | None, str | None]:
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return None, None
    found = mount_of(str(directory.resolve()), mounts)
    return found if found is not None else (None, None)


def _write_zeros(fd: int, size: int) -> None:
    zeros = bytes(min(_ZERO_CHUNK, size))
    pos = 0
    while pos < size:
        n = os.pwrite(fd, memoryview(zeros)[: min(len(zeros), size - pos)], pos)
        if n <= 0:
            raise OSError(errno.EIO, "short write while filling with zeros")
        pos += n


def _prepare(fd: int, file_size: int, zero_filled: bool) -> str:
    """Give the file its blocks: as the store does (posix_fallocate, zeros where
    unsupported, no sync), or zero-filled and fsynced (the comparison)."""
    if zero_filled:
        _write_zeros(fd, file_size)
        os.fsync(fd)
        return "zero-filled"
    try:
        os.posix_fallocate(fd, 0, file_size)
        return "fallocate"
    except OSError as exc:
        if exc.errno not in _NO_FALLOCATE:
            raise
    _write_zeros(fd, file_size)
    return "zeros (no fallocate)"


def measure_fdatasync(directory: Path, size: int = 1024, count: int = 2000,
                      file_size: int = 1 << 30, zero_filled: bool = False, *,
                      through_mapping: bool = False, prefill: int = 0) -> dict[str, Any]:
    """Time ``os.fdatasync`` the way the commit log uses it: a new file of
    ``file_size`` bytes in ``directory`` (created if missing) gets its blocks,
    is mapped, and ``count`` times ``size`` bytes are written at the next
    position with ``pwrite`` (``through_mapping``: through the mapping, as the
    store once did) and the file is fdatasynced, wrapping to the start at the
    end. ``prefill`` bytes are written the same way (and synced once) before
    the timed writes: a store that already holds data. The file is removed
    afterwards; nothing else in ``directory`` is touched. Raises
    DiskBenchError for impossible sizes or too little free space."""
    if size < 1 or count < 1 or file_size < size or not 0 <= prefill <= file_size - size:
        raise DiskBenchError(f"need 1 <= size <= file size and count >= 1 (size {size}, "
                             f"count {count}, file size {file_size})")
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if free < file_size + DISK_FREE_MARGIN:
        raise DiskBenchError(f"{directory}: {free} bytes free, the test file needs "
                             f"{file_size} (+{DISK_FREE_MARGIN} spare)")
    mount, fs_type = _file_system(directory)
    payload = bytes((i % 251) + 1 for i in range(size))  # no zero byte: real data
    samples: list[float] = []
    fd, name = tempfile.mkstemp(prefix=DISK_FILE_PREFIX, suffix=".tmp", dir=directory)
    try:
        t0 = time.perf_counter()
        preparation = _prepare(fd, file_size, zero_filled)
        prepare_s = time.perf_counter() - t0
        with mmap.mmap(fd, file_size) as mm:
            pos = 0
            chunk = payload * max(1, (1 << 20) // size)
            while pos < prefill:
                part = chunk[: prefill - pos]
                if through_mapping:
                    mm[pos : pos + len(part)] = part
                else:
                    os.pwrite(fd, part, pos)
                pos += len(part)
            if prefill:
                os.fdatasync(fd)
            t0 = time.perf_counter()
            for _ in range(count):
                if pos + size > file_size:
                    pos = 0
                if through_mapping:
                    mm[pos : pos + size] = payload
                else:
                    os.pwrite(fd, payload, pos)
                t = time.perf_counter()
                os.fdatasync(fd)
                samples.append(time.perf_counter() - t)
                pos += size
            elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        Path(name).unlink(missing_ok=True)
    return {
        "mode": "disk",
        "dir": str(directory),
        "mount": mount,
        "fs_type": fs_type,
        "preparation": preparation,
        "prepare_s": prepare_s,
        "write": "mmap" if through_mapping else "pwrite",
        "prefill": prefill,
        "file_size": file_size,
        "size": size,
        "count": len(samples),
        "seconds": elapsed,
        "latency_per": "fdatasync",
        "latency_us": latency_us(samples),
        "mean_us": sum(samples) / len(samples) * 1e6,
        "max_us": max(samples) * 1e6,
    }


def render_disk(d: Mapping[str, Any]) -> str:
    where = f"{d['dir']} ({d['fs_type'] or '?'} on {d['mount'] or '?'})"
    prefill = f" after {d['prefill'] / 2**20:g} MiB" if d.get("prefill") else ""
    return (f"disk: {d['count']} fdatasyncs after {d['size']}-byte {d.get('write', 'mmap')} "
            f"writes{prefill}, "
            f"{d['file_size'] / 2**20:g} MiB file ({d['preparation']}) in {where}: "
            f"latency per fdatasync {latency_text(d['latency_us'], unit='µs', digits=1)} "
            f"(mean {d['mean_us']:.1f}µs, max {d['max_us']:.1f}µs)")


@cli.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=None,
              help="Directory on the store's file system (default: ./.data/store/commitlog or "
                   "./.data/commitlog if present, else ./.data; created if missing).")
@click.option("-s", "--messageSize", "size", type=click.IntRange(min=1), default=1024,
              show_default=True, help="Bytes written before each fdatasync.")
@click.option("-c", "--count", type=click.IntRange(min=1), default=2000, show_default=True,
              help="fdatasyncs to time.")
@click.option("--file-size", "file_size", type=click.IntRange(min=1), default=1 << 30,
              show_default=True, help="Test file size (the commit log's file size by default).")
@click.option("--compare-zero-filled", "compare", is_flag=True,
              help="Also time a file filled with zeros (pwrite, fsync) instead of fallocated.")
@click.option("--through-mapping", is_flag=True,
              help="Write through the file's mapping instead of pwrite (the store's old way).")
@click.option("--prefill-mib", "prefill_mib", type=click.IntRange(min=0), default=0,
              show_default=True, help="MiB written (and synced) before the timed writes.")
@json_option
def disk(directory: Path | None, size: int, count: int, file_size: int, compare: bool,
         through_mapping: bool, prefill_mib: int, as_json: bool) -> None:
    """fdatasync latency of a file system the way the commit log syncs: a new
    fallocated file, mapped, SIZE bytes written with pwrite, then fdatasync,
    COUNT times. The test file is removed afterwards."""
    where = directory if directory is not None else default_disk_dir()
    try:
        for zero_filled in (False, True) if compare else (False,):
            result = measure_fdatasync(where, size, count, file_size, zero_filled,
                                       through_mapping=through_mapping,
                                       prefill=prefill_mib << 20)
            emit(result, render_disk(result), as_json)
    except (DiskBenchError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc


# ---- machine mode: what this machine gives Python right now ----------------------------

# the loopback echo peer: reads a frame's 4-byte length and the frame, answers
# ``reply`` bytes (a send's request and its short response)
_ECHO_PEER = r"""
import os, socket, struct, sys
reply = bytes(int(sys.argv[1]))
if len(sys.argv) > 2:
    os.sched_setaffinity(0, {int(sys.argv[2])})
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
print(srv.getsockname()[1], flush=True)
srv.settimeout(30)
conn, _ = srv.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b""
while True:
    while len(buf) < 4:
        data = conn.recv(65536)
        if not data:
            sys.exit(0)
        buf += data
    (n,) = struct.unpack(">I", buf[:4])
    while len(buf) < 4 + n:
        data = conn.recv(65536)
        if not data:
            sys.exit(0)
        buf += data
    buf = buf[4 + n:]
    conn.sendall(reply)
"""


def python_loop_ns(iterations: int = 2_000_000) -> float:
    """Nanoseconds per iteration of a fixed pure-Python loop (an int add, a
    dict store and a modulo): a yardstick of the interpreter's speed on this
    machine at this moment, to read the other figures against."""
    d: dict[int, int] = {}
    total = 0
    t0 = time.perf_counter()
    for i in range(iterations):
        total += i
        d[i & 1023] = total % 7
    return (time.perf_counter() - t0) / iterations * 1e9


def interpreter() -> str:
    """The running Python's version and the interpreter behind it (a venv's
    ``python`` is a link to the one it was made from), e.g. "3.11.2
    /usr/bin/python3.11": the same code runs at different speeds on different
    builds of one version."""
    return f"{platform.python_version()} {os.path.realpath(sys.executable)}"


def _peer_port(peer: subprocess.Popen[str]) -> int:
    """The port an echo peer printed; OSError when it exited without one."""
    assert peer.stdout is not None
    line = peer.stdout.readline()
    if not line.strip().isdigit():
        raise OSError(f"the echo peer did not start (exit code {peer.wait()})")
    return int(line)


@contextmanager
def _echo_peer(script: str, *args: str) -> Iterator[int]:
    """Run an echo peer ``script`` in another Python process; yields its port,
    kills it on the way out."""
    import subprocess

    peer = subprocess.Popen([sys.executable, "-c", script, *args],
                            stdout=subprocess.PIPE, text=True)
    try:
        yield _peer_port(peer)
    finally:
        peer.kill()
        peer.wait()


def loopback_rtt(count: int = 5000, request: int = 1100, reply: int = 120,
                 cpus: tuple[int, int] | None = None) -> list[float]:
    """Round trips (seconds) of a ``request``-byte framed message to an echo
    peer in another Python process over 127.0.0.1 answering ``reply`` bytes,
    blocking sockets, one at a time: the floor under a single send's latency
    here (two processes, a syscall each way, no event loop, no codec). With
    ``cpus`` (this process's CPU, the peer's), both are pinned for the run."""
    import socket
    import struct

    affinity = os.sched_getaffinity(0) if cpus is not None else None
    try:
        if cpus is not None:
            os.sched_setaffinity(0, {cpus[0]})
        with _echo_peer(_ECHO_PEER, str(reply), *(() if cpus is None else (str(cpus[1]),))) \
                as port, socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            frame = struct.pack(">I", request) + bytes(request)
            samples: list[float] = []
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(count):
                t = time.perf_counter()
                conn.sendall(frame)
                got = 0
                while got < reply:
                    data = conn.recv(65536)
                    if not data:
                        raise OSError("the echo peer closed the connection")
                    got += len(data)
                samples.append(time.perf_counter() - t)
        return samples
    finally:
        if affinity is not None:
            os.sched_setaffinity(0, affinity)


def pinned_loopback(count: int) -> dict[str, Any] | None:
    """``loopback_rtt`` with both processes on one CPU, then on two: the
    difference is what waking a process on another, idle CPU costs (on a VM,
    an interrupt to a halted vCPU), paid once each way by a single send
    whose client and broker run on different CPUs. None where this process
    may not use two CPUs or cannot set affinities."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if len(allowed) < 2:
        return None
    a, b = allowed[0], allowed[1]
    try:
        same, two = loopback_rtt(count, cpus=(a, a)), loopback_rtt(count, cpus=(a, b))
    except OSError:  # a CPU the kernel would not pin to (a cpuset changed meanwhile)
        return None
    return {"cpus": [a, b], "same_cpu_us": latency_us(same), "two_cpus_us": latency_us(two)}


# the trio echo peer: the same framing and answer as _ECHO_PEER, served by a
# trio task (one connection) as the broker serves its connections
_TRIO_ECHO_PEER = r"""
import socket, struct, sys, trio
reply = bytes(int(sys.argv[1]))
async def serve(stream):
    buf = b""
    while True:
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            data = await stream.receive_some(65536)
            if not data:
                raise SystemExit(0)
            buf += data
        buf = buf[4 + struct.unpack(">I", buf[:4])[0]:]
        await stream.send_all(reply)
async def main():
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    print(listeners[0].socket.getsockname()[1], flush=True)
    with trio.move_on_after(30):  # the client connects at once, or never
        stream = await listeners[0].accept()
    stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await serve(stream)
trio.run(main)
"""


def trio_loopback_rtt(count: int = 5000, request: int = 1100, reply: int = 120) -> list[float]:
    """``loopback_rtt`` with trio on both sides: a trio client here and a trio
    echo task in another process, no codec and no RPC layer. The floor under
    a single send for an event-loop client and server on this machine (an
    idle loop blocks in ``epoll_wait``; every frame wakes it)."""
    import socket
    import struct

    limit = 60 + count * 0.001  # a millisecond a round trip on top of a minute

    async def run(port: int) -> list[float]:
        frame = struct.pack(">I", request) + bytes(request)
        samples: list[float] = []
        with trio.fail_after(limit):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for _ in range(count):
                    t = time.perf_counter()
                    await stream.send_all(frame)
                    got = 0
                    while got < reply:
                        data = await stream.receive_some(65536)
                        if not data:
                            raise OSError("the trio echo peer closed the connection")
                        got += len(data)
                    samples.append(time.perf_counter() - t)
        return samples

    try:
        with _echo_peer(_TRIO_ECHO_PEER, str(reply)) as port:
            return trio.run(run, port)
    except trio.TooSlowError as exc:
        raise OSError(f"trio loopback round trips took over {limit:.0f} s") from exc


class _SendWork:
    """A fixed piece of a single send's own work: a SEND_MESSAGE request frame
    decoded and its header parsed, a response encoded, and 1 KiB written with
    ``pwrite`` to a scratch file. It runs many different functions and a
    syscall, as a request does; a tight loop would not show what a woken CPU
    has lost (on this project's VM a loop ran 1.1x slower after a sleep, this
    2.5x)."""

    def __init__(self, scratch: Path) -> None:
        from protocol.codecs.msgpack_codec import MSGPACK
        from protocol.command import RemotingCommand
        from protocol.headers import SendMessageRequestHeader

        self._codec, self._header = MSGPACK, SendMessageRequestHeader
        body = bytes(1024)
        header = SendMessageRequestHeader(producer_group="bench", topic="BenchTopic",
                                          queue_id=1, sys_flag=0, born_timestamp=1,
                                          flag=0, properties="UNIQ_KEY\x01AB01")
        self._frame = MSGPACK.encode(RemotingCommand(code=10, ext_fields=header.to_fields(),
                                                     body=body))
        self._body = body
        self._fd = os.open(scratch, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)

    def __call__(self) -> None:
        cmd = self._codec.decode(self._frame)
        h = self._header.from_fields(cmd.ext_fields)
        self._codec.encode(cmd.response(0, None, ext_fields={
            "msgId": "0" * 32, "queueId": str(h.queue_id), "queueOffset": "1"}))
        os.pwrite(self._fd, self._body, 0)

    def close(self) -> None:
        os.close(self._fd)


def wake_cost(rounds: int = 300, pause: float = 300e-6) -> dict[str, Any]:
    """How much slower the same work runs right after the thread slept
    ``pause`` seconds (an idle CPU: on a KVM guest without halt polling the
    vCPU halts) than right after itself. Each round times ``_SendWork`` once
    more just after running it, then once after the pause; the p50s and their
    ratio. A ratio well above 1 means every request that wakes an idle
    process pays it, on the client and on the broker, which is what busy
    polling (``busyPollMicros``, ``ROCKETMQ_BUSY_POLL_US``) avoids."""
    warm: list[float] = []
    woken: list[float] = []
    clock = time.perf_counter
    with tempfile.TemporaryDirectory(prefix="mqbench-wake-") as tmp:
        work = _SendWork(Path(tmp) / "scratch")
        try:
            for _ in range(rounds):
                work()
                t = clock()
                work()
                warm.append(clock() - t)
                time.sleep(pause)
                t = clock()
                work()
                woken.append(clock() - t)
        finally:
            work.close()
    hot, cold = percentiles(warm, (50,))[50] * 1e6, percentiles(woken, (50,))[50] * 1e6
    return {"rounds": rounds, "pause_us": pause * 1e6, "back_to_back_us": hot,
            "after_pause_us": cold, "ratio": cold / hot if hot > 0 else None}


def _sys_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def cpu_idle(sys_root: Path = Path("/sys")) -> dict[str, Any]:
    """How an idle CPU waits for work, from sysfs: the cpuidle driver and
    governor, and for the haltpoll driver (KVM guests) its guest_halt_poll_ns,
    how long an idle vCPU polls before it halts. Each is None where unknown."""
    idle = sys_root / "devices/system/cpu/cpuidle"
    poll = _sys_text(sys_root / "module/haltpoll/parameters/guest_halt_poll_ns")
    return {
        "driver": _sys_text(idle / "current_driver"),
        "governor": _sys_text(idle / "current_governor") or _sys_text(idle / "current_governor_ro"),
        "halt_poll_ns": int(poll) if poll is not None and poll.isdigit() else None,
    }


def idle_text(idle: Mapping[str, Any] | None) -> str:
    """``cpu_idle`` in a few words; with the haltpoll driver, whether an idle
    vCPU polls before it halts (woken from a halt, it pays a VM exit)."""
    if not idle or idle.get("driver") is None:
        return "no cpuidle driver seen"
    driver, poll = idle["driver"], idle.get("halt_poll_ns")
    if driver == "haltpoll" and poll is not None:
        return "haltpoll, halt poll off" if poll == 0 else f"haltpoll, halt poll {poll / 1000:g} µs"
    governor = idle.get("governor")
    return f"{driver} ({governor})" if governor else str(driver)


def machine_result(count: int) -> dict[str, Any]:
    samples = loopback_rtt(count)
    trio_samples = trio_loopback_rtt(count)
    idle = cpu_idle()
    return {
        "mode": "machine",
        "nproc": os.cpu_count(),
        "python": interpreter(),
        "python_loop_ns": python_loop_ns(),
        "python_work_ns": work_ns(),
        "count": len(samples),
        "latency_per": "loopback round trip",
        "latency_us": latency_us(samples),
        "max_us": max(samples) * 1e6,
        "trio_latency_us": latency_us(trio_samples),
        "pinned": pinned_loopback(min(count, 2000)),
        "wake": wake_cost(),
        "cpu_idle": idle,
        "cpu_idle_text": idle_text(idle),
    }


def render_machine(d: Mapping[str, Any]) -> str:
    python = f"Python {d['python']}; " if d.get("python") else ""
    work = (f"Python work (calls, objects, struct) {d['python_work_ns']:.0f} ns a step; "
            if d.get("python_work_ns") else "")
    text = (f"machine: {d['nproc']} CPUs; {python}Python loop {d['python_loop_ns']:.1f} ns per "
            f"iteration; {work}{d['count']} loopback round trips (1100 B framed request, 120 B "
            f"answer, blocking sockets, another Python process) "
            f"{latency_text(d['latency_us'], unit='µs', digits=1)} (max {d['max_us']:.1f}µs)")
    if d.get("trio_latency_us"):
        text += (f"; the same with trio on both sides "
                 f"{latency_text(d['trio_latency_us'], unit='µs', digits=1)}")
    pinned = d.get("pinned")
    if pinned:
        text += (f"; blocking round trip p50 with both processes on one CPU "
                 f"{pinned['same_cpu_us']['p50']:.1f}µs, on two "
                 f"{pinned['two_cpus_us']['p50']:.1f}µs")
    wake = d.get("wake")
    if wake:
        text += (f"; a send's codec work and a 1 KiB pwrite {wake['back_to_back_us']:.1f}µs back to "
                 f"back, {wake['after_pause_us']:.1f}µs right after a "
                 f"{wake['pause_us']:.0f}µs sleep ({wake['ratio']:.1f}x, p50s)")
    return text + f"; CPU idle: {d.get('cpu_idle_text') or idle_text(d.get('cpu_idle'))}"


@cli.command()
@click.option("-c", "--count", type=click.IntRange(min=1, max=1_000_000), default=5000,
              show_default=True, help="Loopback round trips to time.")
@json_option
def machine(count: int, as_json: bool) -> None:
    """What this machine gives Python right now, to read the other figures
    against: a fixed pure-Python loop's time per iteration, round trips to an
    echo process over 127.0.0.1 with blocking sockets and with trio on both
    sides (the floors under a single send), the blocking round trip with both
    processes pinned to one CPU and to two, how much slower the same Python
    work runs right after a 300 µs sleep than back to back, and how an idle
    CPU waits (cpuidle driver; a KVM guest's halt polling)."""
    try:
        result = machine_result(count)
    except OSError as exc:
        raise click.ClickException(f"loopback round trips failed: {exc}") from exc
    emit(result, render_machine(result), as_json)


def main() -> None:
    configure_logging("WARNING")
    cli()


if __name__ == "__main__":
    main()
