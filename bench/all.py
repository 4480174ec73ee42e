"""``make bench``: every headline figure from one run, on fresh daemons.

    .venv/bin/python -m bench.all [--quick] [--json PATH] [--skip-spark] [--doc PATH]

Starts a name server and a broker (separate processes, free 127.0.0.1 ports,
a temporary store) with ASYNC_FLUSH, runs the mqbench commands below one after
another as subprocesses with ``--json``, stops the pair, does the same with a
fresh SYNC_FLUSH pair, times fdatasync in the SYNC pair's commit-log directory
(``mqbench disk``), and prints one table: figure | value | command. While
each step runs, the broker's resident set size is sampled (every 50 ms) and
its peak kept, for the memory rows. Before
the first pair and after the last, ``mqbench machine`` measures the machine
itself (a pure-Python loop, loopback round trips between two Python
processes), so the figures can be read against what the machine gave then.

    ASYNC_FLUSH  producer -t BenchTopic -s 1024 -b 32 -w 16 -c 200000   batched produce
                 consumer -t BenchTopic -c 200000 -m 32                  pull consume
                 producer -t BenchSingle -s 1024 -b 1 -w 1 -c 20000     single sync sends
                 push -t BenchTopic -c 200000 -i 1                       push consume
                 producer -t BenchTopic ... -c 800000                   to 1,000,000 for Spark
                 spark -t BenchTopic -r 3                                Spark batch reads
                 spark --noop -r 3                                       Spark's own part
                 spark --noop --noop-rows 1000000 -r 3                   ... of as many rows
    SYNC_FLUSH   producer (batched), producer (single), as above
    ASYNC_FLUSH and SYNC_FLUSH again, broker with busyPollMicros=1000:
                 --busy-poll-us 1000 producer (batched: ASYNC only; single), as above
    disk --dir <SYNC store>/commitlog -s 1024 -c 2000
    machine -c 5000                                  first and last

``--quick`` divides the counts by 10 (a smoke test). ``--json PATH`` writes
every raw result. ``--doc PATH`` (``make bench``: docs/benchmarks.md) also writes the
table into that page, between its markers (``bench/doc_table.py``). The daemons are
stopped (SIGTERM, then SIGKILL after a timeout) and the temporary directory removed
whatever happens.

    .venv/bin/python -m bench.all --baseline DIR|REV [--repeat 3] [--quick] [--skip-spark]

(``make bench BASELINE=REV``) compares this tree with an old one in the same run: each
benchmark (a pair's steps on a fresh pair, ``disk``, ``machine``) runs ``--repeat``
times from each tree, taking turns (old, new, old, new, ...), the old tree's daemons
and mqbench run with this interpreter and that tree first on PYTHONPATH
(``checkout_env``, as ``bench.acl_cost --baseline`` does). A revision is checked out
into a temporary worktree for the run (``bench/baseline.py``). The table gives each
figure's median and min–max on each side, new/old and the spread of the paired
ratios (``bench/compare.py``); a figure the old tree cannot give is "n/a (why)".
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import structlog
import trio

from bench import baseline, compare, doc_table
from bench.proc_cpu import cpu_seconds
from deploy import speedups
from protocol.trio.logs import configure_logging
from protocol.trio.memory import rss_bytes

log = structlog.get_logger("bench_all")

ASYNC, SYNC = "ASYNC_FLUSH", "SYNC_FLUSH"
# the pairs whose broker and client spin after each request (busyPollMicros,
# mqbench --busy-poll-us: protocol/trio/busy_poll.py), for the single sends
BUSY_POLL_US = 1000
ASYNC_BUSY, SYNC_BUSY = f"{ASYNC}+busyPoll", f"{SYNC}+busyPoll"
BATCHED_TOPIC = "BenchTopic"
SINGLE_TOPIC = "BenchSingle"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
STEP_TIMEOUT = 1800.0
MiB = 1 << 20
RSS_INTERVAL = 0.05


# ---- the plan (pure) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """One mqbench run: ``args`` after the subcommand, without -n and --json."""

    name: str
    flush: str  # the pair it runs against ("" for disk)
    command: str
    args: tuple[str, ...]
    options: tuple[str, ...] = ()  # mqbench's own, before the command

    def shown(self) -> str:
        return " ".join(("mqbench", *self.options, self.command, *self.args))


def plan(divisor: int = 1, skip_spark: bool = False, disk_file_size: int = 1 << 30
         ) -> dict[str, list[Step]]:
    """The steps of each pair and the disk step, counts divided by ``divisor``.
    The disk step's --dir is added at run time (the SYNC pair's store)."""

    def n(count: int) -> str:
        return str(max(1, count // divisor))

    def client_options(flush: str) -> tuple[str, ...]:
        return ("--busy-poll-us", str(BUSY_POLL_US)) if flush in (ASYNC_BUSY, SYNC_BUSY) else ()

    def batched(flush: str) -> Step:
        return Step("produce_batched", flush, "producer",
                    ("-t", BATCHED_TOPIC, "-s", "1024", "-b", "32", "-w", "16", "-c", n(200_000)),
                    client_options(flush))

    def single(flush: str) -> Step:
        return Step("produce_single", flush, "producer",
                    ("-t", SINGLE_TOPIC, "-s", "1024", "-b", "1", "-w", "1", "-c", n(20_000)),
                    client_options(flush))

    async_steps = [
        batched(ASYNC),
        Step("consume_pull", ASYNC, "consumer",
             ("-t", BATCHED_TOPIC, "-c", n(200_000), "-m", "32")),
        single(ASYNC),
        Step("push", ASYNC, "push", ("-t", BATCHED_TOPIC, "-c", n(200_000), "-i", "1")),
    ]
    if not skip_spark:
        # Spark reads 1,000,000 messages, as the figure is defined: the topic
        # holds 200,000 from the batched step, this adds the rest
        async_steps.append(Step("spark_fill", ASYNC, "producer", (
            "-t", BATCHED_TOPIC, "-s", "1024", "-b", "32", "-w", "16", "-c", n(800_000))))
        async_steps.append(Step("spark", ASYNC, "spark", ("-t", BATCHED_TOPIC, "-r", "3")))
        # the same reads of a source that connects nowhere, in a session of its
        # own: what Spark's Python data-source machinery alone costs a first read
        async_steps.append(Step("spark_noop", ASYNC, "spark", ("--noop", "-r", "3")))
        # and of as many rows as the topic holds, 1 KiB bodies: what Spark alone
        # costs to take them from a Python source, first read and warm
        async_steps.append(Step("spark_noop_rows", ASYNC, "spark",
                                ("--noop", "--noop-rows", n(1_000_000), "-r", "3")))
    disk = Step("disk", "", "disk", ("-s", "1024", "-c", n(2000), "--file-size",
                                     str(disk_file_size)))
    machine = [Step(name, "", "machine", ("-c", n(5000)))
               for name in ("machine_start", "machine_end")]
    return {ASYNC: async_steps, SYNC: [batched(SYNC), single(SYNC)],
            ASYNC_BUSY: [batched(ASYNC_BUSY), single(ASYNC_BUSY)], SYNC_BUSY: [single(SYNC_BUSY)],
            "disk": [disk],
            "machine": machine}


def parse_json_lines(out: str) -> list[dict[str, Any]]:
    """The JSON objects among ``out``'s lines (other lines are ignored)."""
    found = []
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict):
            found.append(d)
    return found


# ---- the table (pure) ------------------------------------------------------------------


def _step(results: Mapping[str, Any], name: str, flush: str) -> dict[str, Any] | None:
    """The entry of step ``name`` on the ``flush`` pair, if it ran."""
    for step in results.get("steps", []):
        if step["name"] == name and step["flush"] == flush:
            return step
    return None


def find(results: Mapping[str, Any], name: str, flush: str, mode: str | None = None
         ) -> tuple[dict[str, Any] | None, str]:
    """The first result of ``mode`` (any when None) of step ``name`` on the
    ``flush`` pair, and the step's command as shown (or why there is none)."""
    step = _step(results, name, flush)
    if step is None:
        return None, "not run"
    for r in step.get("results", []):
        if mode is None or r.get("mode") == mode:
            return r, step["command"]
    return None, f"{step['command']}  [{step.get('error') or 'no result'}]"


def step_peak_rss(results: Mapping[str, Any], name: str, flush: str = ASYNC) -> int | None:
    """The broker's peak RSS (bytes) sampled during step ``name``, if any."""
    step = _step(results, name, flush)
    peak = step.get("broker_rss_peak_bytes") if step is not None else None
    return int(peak) if peak else None


def step_cpu_us_per_msg(results: Mapping[str, Any], name: str, flush: str) -> float | None:
    """The broker's CPU time (user + system) during step ``name`` per message
    the step moved, in µs, if both were measured."""
    step = _step(results, name, flush)
    r, _ = find(results, name, flush)
    cpu = step.get("broker_cpu_s") if step is not None else None
    count = r.get("count") if r is not None else None
    if cpu is None or not count:
        return None
    return float(cpu) / float(count) * 1e6


def number_text(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def _lat(r: Mapping[str, Any] | None, key: str) -> float | None:
    if r is None or not r.get("latency_us"):
        return None
    v = r["latency_us"].get(key)
    return None if v is None else float(v)


def table_rows(results: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, value, command) rows from the raw results (``run``'s dict)."""
    rows: list[tuple[str, str, str]] = []

    def rate_row(figure: str, name: str, flush: str) -> None:
        r, cmd = find(results, name, flush)
        rows.append((figure, number_text(r["msgs_per_s"] if r else None), cmd))

    def pct_row(figure: str, r: Mapping[str, Any] | None, cmd: str, a: str, b: str,
                scale: float = 1.0, digits: int = 0) -> None:
        va, vb = _lat(r, a), _lat(r, b)
        value = ("n/a" if va is None or vb is None
                 else f"{number_text(va / scale, digits)} / {number_text(vb / scale, digits)}")
        rows.append((figure, value, cmd))

    rate_row("batched produce ASYNC msg/s", "produce_batched", ASYNC)
    rate_row("consume pull msg/s", "consume_pull", ASYNC)
    rate_row("batched produce SYNC msg/s", "produce_batched", SYNC)
    r, cmd = find(results, "produce_batched", ASYNC_BUSY)
    rows.append((f"batched produce ASYNC msg/s, busy poll {BUSY_POLL_US} µs",
                 number_text(r["msgs_per_s"] if r else None),
                 f"{cmd}, broker busyPollMicros={BUSY_POLL_US}" if r is not None else cmd))
    single_async, cmd = find(results, "produce_single", ASYNC)
    pct_row("single send ASYNC p50/p99 µs", single_async, cmd, "p50", "p99")
    single_sync, cmd = find(results, "produce_single", SYNC)
    pct_row("single send SYNC p50/p99 µs", single_sync, cmd, "p50", "p99")
    for key, label in ((ASYNC_BUSY, "ASYNC"), (SYNC_BUSY, "SYNC")):
        r, cmd = find(results, "produce_single", key)
        pct_row(f"single send {label} p50/p99 µs, busy poll {BUSY_POLL_US} µs", r,
                f"{cmd}, broker busyPollMicros={BUSY_POLL_US}" if r is not None else cmd,
                "p50", "p99")
    disk, disk_cmd = find(results, "disk", "")
    pct_row("fdatasync p50/p99 µs", disk, disk_cmd, "p50", "p99")
    sync_p50, disk_p50 = _lat(single_sync, "p50"), _lat(disk, "p50")
    ratio = (f"{sync_p50 / disk_p50:.2f}" if sync_p50 is not None and disk_p50 else "n/a")
    rows.append(("SYNC single p50 / fdatasync p50", ratio, "the two rows above"))
    for flush, label in ((ASYNC, "ASYNC"), (SYNC, "SYNC")):
        r, cmd = find(results, "produce_batched", flush)
        pct_row(f"batched produce {label} request p99/p99.9 ms", r, cmd, "p99", "p99.9",
                scale=1e3, digits=2)
    rate_row("push consume msg/s", "push", ASYNC)
    pull_rss, push_rss = step_peak_rss(results, "consume_pull"), step_peak_rss(results, "push")
    rows.append(("broker peak RSS MiB, pull / push consume",
                 "n/a" if pull_rss is None or push_rss is None
                 else f"{number_text(pull_rss / MiB)} / {number_text(push_rss / MiB)}",
                 "sampled every 50 ms during the two steps above (1 GiB commit-log files)"))
    cpu = [step_cpu_us_per_msg(results, name, flush) for name, flush in (
        ("produce_batched", ASYNC), ("produce_batched", SYNC), ("consume_pull", ASYNC),
        ("push", ASYNC))]
    rows.append(("broker CPU µs/msg: batched ASYNC / SYNC, pull, push",
                 " / ".join(number_text(c, 1) for c in cpu),
                 "user + system time of the broker process during those steps"))
    summary, cmd = find(results, "spark", ASYNC, "spark_summary")
    if summary is None and cmd == "not run":
        rows.append(("Spark warm/first msg/s", "skipped", "--skip-spark"))
        rows.append(("Spark CPU µs/msg: Spark's processes first / warm; broker", "skipped",
                     "--skip-spark"))
        rows.append(("Spark first read s: rocketmq / a no-op Python source", "skipped",
                     "--skip-spark"))
    else:
        warm = summary.get("warm_msgs_per_s") if summary else None
        first = summary.get("first_msgs_per_s") if summary else None
        value = "n/a" if first is None else f"{number_text(warm)} / {number_text(first)}"
        sharing = summary.get("jvm_class_sharing") if summary else None
        rows.append(("Spark warm/first msg/s", value, cmd if sharing is None else
                     f"{cmd} (driver JVM class sharing {'on' if sharing else 'off'})"))
        spark_step = _step(results, "spark", ASYNC)
        broker_cpu = spark_step.get("broker_cpu_s") if spark_step is not None else None
        read = sum(int(r.get("count") or 0) for r in (spark_step or {}).get("results", [])
                   if r.get("mode") == "spark")
        first_cpu = summary.get("first_cpu_us_per_msg") if summary else None
        warm_cpu = summary.get("warm_cpu_us_per_msg") if summary else None
        rows.append(("Spark CPU µs/msg: Spark's processes first / warm; broker",
                     "n/a" if first_cpu is None or warm_cpu is None
                     else f"{number_text(first_cpu, 1)} / {number_text(warm_cpu, 1)}; "
                          + ("n/a" if broker_cpu is None or not read
                             else number_text(broker_cpu / read * 1e6, 1)),
                     "the driver, its JVM and Python workers during each read (/proc); "
                     "the broker over all the reads"))
        noop, noop_cmd = find(results, "spark_noop", ASYNC, "spark_summary")
        ours_s = summary.get("first_seconds") if summary else None
        noop_s = noop.get("first_seconds") if noop else None
        rows.append(("Spark first read s: rocketmq / a no-op Python source",
                     "n/a" if ours_s is None or noop_s is None
                     else f"{number_text(ours_s, 2)} / {number_text(noop_s, 2)}",
                     f"{cmd}; {noop_cmd} (a session of its own)"))
        same, same_cmd = find(results, "spark_noop_rows", ASYNC, "spark_summary")
        same_warm = same.get("warm_msgs_per_s") if same else None
        same_first = same.get("first_msgs_per_s") if same else None
        rows.append(("Spark warm/first msg/s of a no-op source of as many rows",
                     "n/a" if same_warm is None or same_first is None
                     else f"{number_text(same_warm)} / {number_text(same_first)}",
                     f"{same_cmd} (1 KiB bodies, a session of its own: Spark's own cost, "
                     "the most any Python source could give)"))
    start, cmd = find(results, "machine_start", "")
    end, _ = find(results, "machine_end", "")

    def both(key: Callable[[Mapping[str, Any] | None], float | None], digits: int) -> str:
        a, b = key(start), key(end)
        return "n/a" if a is None or b is None else f"{number_text(a, digits)} / {number_text(b, digits)}"

    rows.append(("machine: Python (version, interpreter)",
                 str(start.get("python") or "n/a") if start is not None else "n/a", cmd))
    rows.append(("broker: compiled loops in use", speedups.in_use_text(
        results.get("compiled_loops")), "deploy/speedups.py (make speedups; "
        "ROCKETMQ_NO_SPEEDUPS=1 runs the Python loops)"))
    rows.append(("machine: Python loop ns/iteration, start / end",
                 both(lambda r: None if r is None else r.get("python_loop_ns"), 1), cmd))
    rows.append(("machine: Python work ns/step (calls, objects, struct), start / end",
                 both(lambda r: None if r is None else r.get("python_work_ns"), 0), cmd))
    rows.append(("machine: loopback round trip p50 µs, start / end",
                 both(lambda r: _lat(r, "p50"), 1), cmd))
    rows.append(("machine: trio loopback round trip p50 µs, start / end",
                 both(lambda r: None if r is None or not r.get("trio_latency_us")
                      else float(r["trio_latency_us"]["p50"]), 1), cmd))
    pinned = start.get("pinned") if start is not None else None
    rows.append(("machine: loopback p50 µs, both on one CPU / on two, start",
                 "n/a" if not pinned else
                 f"{number_text(pinned['same_cpu_us']['p50'], 1)} / "
                 f"{number_text(pinned['two_cpus_us']['p50'], 1)}", cmd))
    rows.append(("machine: send work after a 300 µs sleep / back to back, start / end",
                 both(lambda r: None if r is None or not r.get("wake")
                      else r["wake"].get("ratio"), 1), cmd))
    single_p50, loop_p50 = _lat(single_async, "p50"), _lat(start, "p50")
    rows.append(("single send ASYNC p50 / loopback p50",
                 f"{single_p50 / loop_p50:.1f}" if single_p50 and loop_p50 else "n/a",
                 "the rows above"))
    idle = start.get("cpu_idle_text") if start is not None else None
    rows.append(("machine: CPU idle, start", idle or "n/a",
                 f"{cmd} (cpuidle driver; a KVM guest's guest_halt_poll_ns)"))
    return rows


def render_table(rows: Sequence[tuple[str, str, str]]) -> str:
    """Rows as aligned text: figure | value | command."""
    head = ("figure", "value", "command")
    w0 = max(len(r[0]) for r in (head, *rows))
    w1 = max(len(r[1]) for r in (head, *rows))
    lines = [f"{head[0]:<{w0}} | {head[1]:>{w1}} | {head[2]}",
             f"{'-' * w0}-|-{'-' * w1}-|-{'-' * 7}"]
    lines += [f"{a:<{w0}} | {b:>{w1}} | {c}" for a, b, c in rows]
    return "\n".join(lines)


# ---- the figures a comparison reads (pure) ---------------------------------------------

Reader = Callable[[Mapping[str, Any]], float | None]


@dataclass(frozen=True, slots=True)
class Figure:
    """One number ``--baseline`` compares: read from one run's results (``run``'s dict)
    by ``read``; it comes from step ``step`` on the ``flush`` pair, which belongs to
    the plan's ``benchmark`` (a pair's key, "disk" or "machine")."""

    label: str
    benchmark: str
    step: str
    flush: str
    better: str  # compare.HIGHER or compare.LOWER
    read: Reader


def _result_value(name: str, flush: str, key: str, mode: str | None = None,
                  scale: float = 1.0) -> Reader:
    def read(results: Mapping[str, Any]) -> float | None:
        r, _ = find(results, name, flush, mode)
        v = None if r is None else r.get(key)
        return float(v) / scale if isinstance(v, int | float) else None
    return read


def _percentile(name: str, flush: str, point: str, key: str = "latency_us",
                scale: float = 1.0) -> Reader:
    def read(results: Mapping[str, Any]) -> float | None:
        r, _ = find(results, name, flush)
        table = None if r is None else r.get(key)
        v = table.get(point) if isinstance(table, Mapping) else None
        return float(v) / scale if isinstance(v, int | float) else None
    return read


def _peak_rss_mib(name: str, flush: str) -> Reader:
    def read(results: Mapping[str, Any]) -> float | None:
        peak = step_peak_rss(results, name, flush)
        return None if peak is None else peak / MiB
    return read


def _cpu_us_per_msg(name: str, flush: str) -> Reader:
    def read(results: Mapping[str, Any]) -> float | None:
        return step_cpu_us_per_msg(results, name, flush)
    return read


def _pair_figures(key: str, label: str, busy: str = "", batched: bool = True,
                  request: bool = True, cpu: bool = True) -> list[Figure]:
    """The batched and single-send figures of the pair ``key``."""
    H, L = compare.HIGHER, compare.LOWER
    figures = []
    if batched:
        figures.append(Figure(f"batched produce {label} msg/s{busy}", key, "produce_batched",
                              key, H, _result_value("produce_batched", key, "msgs_per_s")))
    if request:
        figures.append(Figure(f"batched produce {label} request p99 ms{busy}", key,
                              "produce_batched", key, L,
                              _percentile("produce_batched", key, "p99", scale=1e3)))
    if cpu:
        figures.append(Figure(f"broker CPU µs/msg, batched {label}{busy}", key,
                              "produce_batched", key, L,
                              _cpu_us_per_msg("produce_batched", key)))
    return figures + [
        Figure(f"single send {label} p{p} µs{busy}", key, "produce_single", key, L,
               _percentile("produce_single", key, f"p{p}")) for p in (50, 99)]


def comparison_figures() -> list[Figure]:
    """Every figure ``--baseline`` compares, in the order of the table."""
    busy = f", busy poll {BUSY_POLL_US} µs"
    H, L = compare.HIGHER, compare.LOWER
    return [
        *_pair_figures(ASYNC, "ASYNC"),
        Figure("consume pull msg/s", ASYNC, "consume_pull", ASYNC, H,
               _result_value("consume_pull", ASYNC, "msgs_per_s")),
        Figure("push consume msg/s", ASYNC, "push", ASYNC, H,
               _result_value("push", ASYNC, "msgs_per_s")),
        Figure("broker CPU µs/msg, pull", ASYNC, "consume_pull", ASYNC, L,
               _cpu_us_per_msg("consume_pull", ASYNC)),
        Figure("broker CPU µs/msg, push", ASYNC, "push", ASYNC, L,
               _cpu_us_per_msg("push", ASYNC)),
        Figure("broker peak RSS MiB, pull consume", ASYNC, "consume_pull", ASYNC, L,
               _peak_rss_mib("consume_pull", ASYNC)),
        Figure("broker peak RSS MiB, push consume", ASYNC, "push", ASYNC, L,
               _peak_rss_mib("push", ASYNC)),
        Figure("Spark warm msg/s", ASYNC, "spark", ASYNC, H,
               _result_value("spark", ASYNC, "warm_msgs_per_s", "spark_summary")),
        Figure("Spark first msg/s", ASYNC, "spark", ASYNC, H,
               _result_value("spark", ASYNC, "first_msgs_per_s", "spark_summary")),
        Figure("Spark first read s", ASYNC, "spark", ASYNC, L,
               _result_value("spark", ASYNC, "first_seconds", "spark_summary")),
        *_pair_figures(SYNC, "SYNC"),
        *_pair_figures(ASYNC_BUSY, "ASYNC", busy, request=False, cpu=False),
        *_pair_figures(SYNC_BUSY, "SYNC", busy, batched=False, request=False, cpu=False),
        Figure("fdatasync p50 µs", "disk", "disk", "", L, _percentile("disk", "", "p50")),
        Figure("fdatasync p99 µs", "disk", "disk", "", L, _percentile("disk", "", "p99")),
        Figure("machine: Python loop ns/iteration", "machine", "machine_start", "", L,
               _result_value("machine_start", "", "python_loop_ns")),
        Figure("machine: Python work ns/step", "machine", "machine_start", "", L,
               _result_value("machine_start", "", "python_work_ns")),
        Figure("machine: loopback round trip p50 µs", "machine", "machine_start", "", L,
               _percentile("machine_start", "", "p50")),
        Figure("machine: trio loopback round trip p50 µs", "machine", "machine_start", "", L,
               _percentile("machine_start", "", "p50", key="trio_latency_us")),
    ]


def failure_text(step: Mapping[str, Any]) -> str:
    """Why a step gave no result: its error and the last line of its stderr."""
    said = [line.strip() for line in str(step.get("stderr") or "").splitlines() if line.strip()]
    error = str(step.get("error") or "no result")
    return f"{error}: {said[-1]}" if said else error


def figure_value(results: Mapping[str, Any], figure: Figure) -> tuple[float | None, str]:
    """``figure``'s value in one run's ``results``, or None and why there is none."""
    value = figure.read(results)
    if value is not None:
        return value, ""
    step = _step(results, figure.step, figure.flush)
    if step is None:
        return None, "not run"
    if "error" in step:
        return None, failure_text(step)
    return None, "not in its output"


def comparison_rows(runs: Mapping[str, Sequence[Mapping[str, Any]]], repeat: int,
                    skip_spark: bool = False) -> list[compare.Row]:
    """One row per figure from each side's runs (``runs[side][repeat]``: a ``run``-like
    dict of that repeat's steps); the Spark figures left out with ``skip_spark``."""
    rows = []
    for figure in comparison_figures():
        if skip_spark and figure.step.startswith("spark"):
            continue
        samples = {side: compare.Samples() for side in compare.SIDES}
        for side in compare.SIDES:
            for rep, results in enumerate(runs.get(side, ())):
                samples[side].add(rep, *figure_value(results, figure))
        rows.append(compare.compare_row(figure.label, figure.better, samples[compare.OLD],
                                        samples[compare.NEW], repeat))
    return rows


# ---- daemons ---------------------------------------------------------------------------


def free_port() -> int:
    """A port free on 127.0.0.1 a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, condition: Callable[[], bool], timeout: float,
               alive: Callable[[], bool] = lambda: True) -> None:
    """Poll ``condition`` until true; TimeoutError after ``timeout`` seconds,
    RuntimeError as soon as ``alive`` turns false."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while not condition():
        if not alive():
            raise RuntimeError(f"{what}: the process exited")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:g}s")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def route_has(namesrv: str, broker_addr: str, **admin_kwargs: Any) -> bool:
    """Whether the name server routes TBW102 (auto-created topics) to ``broker_addr``
    (``admin_kwargs``: MQAdmin's credentials and TLS options, if the pair needs them)."""
    from client.admin import MQAdmin

    async def go() -> bool:
        async with MQAdmin(namesrv, timeout=3.0, **admin_kwargs) as admin:
            route = await admin.topic_route("TBW102")
        return any(broker_addr in bd.broker_addrs.values() for bd in route.broker_datas)

    try:
        return trio.run(go)
    except Exception:
        return False


def stop_process(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> int | None:
    """SIGTERM and wait; SIGKILL after ``timeout``. Returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("did not stop in time, killing", pid=proc.pid, timeout=timeout)
            proc.kill()
    return proc.wait()


def checkout_env(checkout: Path | None) -> dict[str, Any]:
    """Popen's keywords running ``python -m ...`` from ``checkout`` (its modules
    first on sys.path) instead of this one; none for None."""
    if checkout is None:
        return {}
    return {"cwd": str(checkout), "env": {**os.environ, "PYTHONPATH": str(checkout)}}


@dataclass
class Pair:
    """A name server and a broker with ``flush``, each its own process, store
    and logs under ``root``; ``namesrv_args`` and ``broker_options`` are added to
    their command lines, ``admin_kwargs`` to the MQAdmin that waits for the route;
    ``checkout``: another checkout of the project to run the daemons from (its
    directory and PYTHONPATH; None: the one this runs from)."""

    root: Path
    flush: str
    namesrv_args: list[str] = field(default_factory=list)
    broker_options: list[str] = field(default_factory=list)
    admin_kwargs: dict[str, Any] = field(default_factory=dict)
    checkout: Path | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    namesrv_port: int = 0
    broker_port: int = 0

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_pid(self) -> int:
        """The broker's process id (once started)."""
        return self.procs[-1].pid

    @property
    def store(self) -> Path:
        return self.root / "store"

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with open(self.root / f"{name}.log", "ab") as out:
            # its log files beside its output, never in ~/logs
            args = [*args, "--log-dir", str(self.root / "logs" / name)]
            proc = subprocess.Popen([sys.executable, "-m", *args], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    **checkout_env(self.checkout))
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = START_TIMEOUT) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.namesrv_port = free_port()
        ns = self._spawn("namesrv", ["namesrv.cli", "--port", str(self.namesrv_port),
                                     "--log-level", "WARNING", *self.namesrv_args])
        wait_until("name server listening", lambda: accepts(self.namesrv_port), timeout,
                   lambda: ns.poll() is None)
        self.broker_port = free_port()
        ha_port = free_port()
        while ha_port == self.broker_port:
            ha_port = free_port()
        broker = self._spawn("broker", [
            "broker.cli", "-n", self.namesrv, "-o", f"listenPort={self.broker_port}",
            "-o", f"haListenPort={ha_port}", "-o", f"storePathRootDir={self.store}",
            "-o", f"flushDiskType={self.flush}", "--log-level", "WARNING",
            *self.broker_options])

        def alive() -> bool:
            return broker.poll() is None

        wait_until("broker listening", lambda: accepts(self.broker_port), timeout, alive)
        addr = f"127.0.0.1:{self.broker_port}"
        wait_until("broker registered with the name server",
                   lambda: route_has(self.namesrv, addr, **self.admin_kwargs), timeout, alive)
        log.info("pair started", flush=self.flush, namesrv=self.namesrv, broker=addr)

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the broker first: it unregisters
            stop_process(proc)
        self.procs.clear()

    def log_tail(self, chars: int = 2000) -> str:
        parts = []
        for name in ("namesrv", "broker"):
            path = self.root / f"{name}.log"
            if path.exists():
                parts.append(f"--- {name}.log ---\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)


# ---- running ---------------------------------------------------------------------------


def mqbench_argv() -> list[str]:
    script = Path(sys.executable).parent / "mqbench"
    return [str(script)] if script.exists() else [sys.executable, "-m", "bench.mqbench"]


def run_step(step: Step, namesrv: str | None, extra: Sequence[str] = (),
             timeout: float = STEP_TIMEOUT, checkout: Path | None = None) -> dict[str, Any]:
    """Run one mqbench command with --json; its results and how it went.
    ``checkout``: another checkout whose mqbench runs (``checkout_env``)."""
    args = [*step.options, step.command, *step.args, *extra]
    shown = " ".join((step.shown(), *extra))
    program = mqbench_argv() if checkout is None else [sys.executable, "-m", "bench.mqbench"]
    argv = [*program, *args, *(("-n", namesrv) if namesrv else ()), "--json"]
    log.info("running", flush=step.flush or None, command=shown)
    t0 = time.monotonic()
    entry: dict[str, Any] = {"name": step.name, "flush": step.flush, "command": shown,
                             "argv": argv}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              **checkout_env(checkout))
    except subprocess.TimeoutExpired:
        entry.update(results=[], returncode=None, error=f"timed out after {timeout:g}s")
        return entry
    entry.update(results=parse_json_lines(proc.stdout), returncode=proc.returncode,
                 seconds=time.monotonic() - t0)
    if proc.returncode != 0 or not entry["results"]:
        entry["error"] = f"exit {proc.returncode}"
        entry["stderr"] = proc.stderr[-4000:]
        log.error("mqbench failed", command=shown, returncode=proc.returncode,
                  stderr=proc.stderr[-2000:])
    return entry


class PeakRss:
    """The peak resident set size of process ``pid`` while the ``with``
    block runs, sampled every ``interval`` s by a thread (None if never read)."""

    def __init__(self, pid: int, interval: float = RSS_INTERVAL) -> None:
        self.pid = pid
        self.interval = interval
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)

    def _look(self) -> None:
        rss = rss_bytes(self.pid)
        if rss is not None and (self.peak is None or rss > self.peak):
            self.peak = rss

    def _sample(self) -> None:
        self._look()
        while not self._stop.wait(self.interval):
            self._look()

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._look()  # one last look, after the step


def run_pair(root: Path, key: str, steps: Sequence[Step], checkout: Path | None = None
             ) -> tuple[list[dict[str, Any]], Path]:
    """Start a fresh pair, run ``steps`` against it, stop it. Returns the
    step results and the pair's commit-log directory (kept until ``root`` goes).
    ``key``: the flush type, with ``+busyPoll`` for a broker that spins;
    ``checkout``: another checkout to run the daemons and mqbench from."""
    flush, _, variant = key.partition("+")
    options = ["-o", f"busyPollMicros={BUSY_POLL_US}"] if variant == "busyPoll" else []
    pair = Pair(root / key.lower().replace("+", "-"), flush, broker_options=options,
                checkout=checkout)
    done: list[dict[str, Any]] = []
    try:
        try:
            pair.start()
        except Exception:
            log.error("the pair did not start", flush=key, tail=pair.log_tail())
            raise
        for step in steps:
            cpu_before = cpu_seconds(pair.broker_pid)
            with PeakRss(pair.broker_pid) as rss:
                entry = run_step(step, pair.namesrv, checkout=checkout)
            cpu_after = cpu_seconds(pair.broker_pid)
            entry["broker_rss_peak_bytes"] = rss.peak
            if cpu_before is not None and cpu_after is not None:
                entry["broker_cpu_s"] = cpu_after - cpu_before
            done.append(entry)
            if "error" in entry:
                log.error("daemon logs", tail=pair.log_tail())
    finally:
        pair.stop()
    return done, pair.store / "commitlog"


def run(divisor: int, skip_spark: bool, tmp_dir: str | None) -> dict[str, Any]:
    """The whole benchmark; the raw results."""
    steps = plan(divisor, skip_spark, disk_file_size=(1 << 30) if divisor == 1 else 64 << 20)
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                               "divisor": divisor, "skip_spark": skip_spark, "steps": [],
                               # the daemons start from this tree with this environment
                               "compiled_loops": speedups.in_use()}
    root = Path(tempfile.mkdtemp(prefix="mq-bench-all-", dir=tmp_dir))
    try:
        results["steps"].append(run_step(steps["machine"][0], None))
        done, _ = run_pair(root, ASYNC, steps[ASYNC])
        results["steps"] += done
        done, commitlog = run_pair(root, SYNC, steps[SYNC])
        results["steps"] += done
        for key in (ASYNC_BUSY, SYNC_BUSY):
            done, _ = run_pair(root, key, steps[key])
            results["steps"] += done
        disk = steps["disk"][0]
        entry = run_step(disk, None, ("--dir", str(commitlog)))
        entry["command"] = entry["command"].replace(str(commitlog), "<SYNC store>/commitlog")
        results["steps"].append(entry)
        results["steps"].append(run_step(steps["machine"][1], None))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


# ---- this tree against a baseline, taking turns -----------------------------------------

# what ``--baseline`` runs for each side in turn: each pair's steps on a fresh pair,
# the disk's fdatasync, the machine's own figures
COMPARED = (ASYNC, SYNC, ASYNC_BUSY, SYNC_BUSY, "disk", "machine")
# where this module's checkout is: the new side of a comparison
HERE = Path(__file__).resolve().parent.parent
PREPARE_TIMEOUT = 900.0
DEFAULT_REPEAT = 3
# the baseline's packages compiled ahead (PYTHONDONTWRITEBYTECODE would have every
# process of the old side compile them from source, as ``make bytecode`` avoids here)
PACKAGES = ("protocol", "acl", "namesrv", "broker", "controller", "client", "dashboard",
            "deploy", "bench")
_IN_USE = "import json; from deploy import speedups; print(json.dumps(speedups.in_use()))"
# what a side's turns start: each must be the checkout's own (a module it lacks would be
# found elsewhere on the path, e.g. in the tree the interpreter's editable install names)
ENTRY_MODULES = ("bench.mqbench", "namesrv.cli", "broker.cli")
_ORIGINS = """
import importlib.util, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    out[name] = None if spec is None else spec.origin
print(json.dumps(out))
"""


def turn_steps(benchmark: str, steps: Mapping[str, Sequence[Step]]) -> Sequence[Step]:
    """The steps one turn of ``benchmark`` runs (of the machine's two, the first)."""
    return steps[benchmark][:1] if benchmark == "machine" else steps[benchmark]


def failed_entries(benchmark: str, steps: Mapping[str, Sequence[Step]], error: str
                   ) -> list[dict[str, Any]]:
    """An entry for each step of a turn of ``benchmark`` that could not run."""
    return [{"name": s.name, "flush": s.flush, "command": s.shown(), "results": [],
             "error": error} for s in turn_steps(benchmark, steps)]


def foreign_modules(checkout: Path, modules: Sequence[str] = ENTRY_MODULES) -> str | None:
    """Why ``checkout`` cannot run its side (modules of ``modules`` it does not hold
    itself, where they would come from instead), or None."""
    try:
        proc = subprocess.run([sys.executable, "-c", _ORIGINS, *modules], capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL,
                              **checkout_env(checkout))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not look for its modules: {exc}"
    found = parse_json_lines(proc.stdout)
    if proc.returncode != 0 or not found:
        return f"could not look for its modules: exit {proc.returncode}"
    root = checkout.resolve()
    wrong = []
    for name in modules:
        origin = found[-1].get(name)
        if not origin or not Path(origin).resolve().is_relative_to(root):
            wrong.append(f"{name} ({origin or 'none at all'})")
    return None if not wrong else "not its own: " + ", ".join(wrong)


def run_turn(root: Path, benchmark: str, steps: Mapping[str, Sequence[Step]],
             checkout: Path) -> list[dict[str, Any]]:
    """One benchmark of ``COMPARED`` run once from ``checkout``: its step entries. A
    pair that fails gives an entry with the error for each of its steps."""
    if benchmark == "disk":
        return [run_step(steps["disk"][0], None, ("--dir", str(root / "disk")),
                         checkout=checkout)]
    if benchmark == "machine":
        return [run_step(s, None, checkout=checkout) for s in turn_steps(benchmark, steps)]
    try:
        done, _ = run_pair(root, benchmark, steps[benchmark], checkout)
    except Exception as exc:  # an old tree's daemons may not take today's options
        return failed_entries(benchmark, steps, f"the pair failed: {exc}")
    return done


def run_compare(checkouts: Mapping[str, Path], divisor: int, skip_spark: bool, repeat: int,
                tmp_dir: str | None, unable: Mapping[str, str] | None = None
                ) -> dict[str, Any]:
    """Every benchmark of ``COMPARED``, ``repeat`` times for each side of ``checkouts``
    (compare.OLD and compare.NEW) in turn; the raw results, ``runs[side][repeat]``
    holding that repeat's steps as ``run`` does. A side in ``unable`` runs nothing: its
    steps get that reason as their error."""
    unable = unable or {}
    steps = plan(divisor, skip_spark, disk_file_size=(1 << 30) if divisor == 1 else 64 << 20)
    out: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "divisor": divisor,
        "skip_spark": skip_spark, "repeat": repeat, "load_before": load_average(),
        "checkouts": {side: str(path) for side, path in checkouts.items()},
        "runs": {side: [{"steps": []} for _ in range(repeat)] for side in checkouts}}
    root = Path(tempfile.mkdtemp(prefix="mq-bench-compare-", dir=tmp_dir))
    try:
        for turn in compare.schedule(COMPARED, repeat, tuple(checkouts)):
            where = root / f"{turn.side}-{turn.repeat}-{turn.benchmark.lower().replace('+', '-')}"
            log.info("turn", benchmark=turn.benchmark, repeat=turn.repeat, side=turn.side)
            if turn.side in unable:
                out["runs"][turn.side][turn.repeat]["steps"] += failed_entries(
                    turn.benchmark, steps, unable[turn.side])
                continue
            try:
                entries = run_turn(where, turn.benchmark, steps, checkouts[turn.side])
            finally:
                shutil.rmtree(where, ignore_errors=True)  # 1 GiB commit-log files each
            out["runs"][turn.side][turn.repeat]["steps"] += entries
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out["load_after"] = load_average()
    return out


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def compiled_loops(checkout: Path) -> dict[str, bool] | None:
    """``deploy.speedups.in_use()`` as ``checkout``'s daemons would find it (None where
    that checkout cannot say)."""
    try:
        proc = subprocess.run([sys.executable, "-c", _IN_USE], capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL, **checkout_env(checkout))
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = parse_json_lines(proc.stdout)
    if proc.returncode != 0 or not found:
        return None
    return {str(k): bool(v) for k, v in found[-1].items()}


def prepare_baseline(checkout: Path, build_loops: bool) -> None:
    """Make a fresh checkout of an old tree run as this one does: its packages' bytecode
    written, and its compiled loops built (``build_loops``: where this tree has some in
    use). Failures are logged; the old side then runs as it can."""
    commands = [[sys.executable, "-m", "compileall", "-q",
                 *(p for p in PACKAGES if (checkout / p).is_dir())]]
    if build_loops:
        commands.append([sys.executable, "-m", "deploy.speedups"])
    for argv in commands:
        log.info("preparing the baseline", command=" ".join(argv[1:]), checkout=str(checkout))
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=PREPARE_TIMEOUT,
                                  stdin=subprocess.DEVNULL, **checkout_env(checkout))
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.error("preparing the baseline failed", command=" ".join(argv[1:]),
                      error=str(exc))
            continue
        if proc.returncode != 0:
            log.error("preparing the baseline failed", command=" ".join(argv[1:]),
                      returncode=proc.returncode, output=(proc.stdout + proc.stderr)[-2000:])


def loops_count(state: Mapping[str, bool] | None) -> int | None:
    """How many of the compiled loops a side runs (None: it cannot say)."""
    return None if state is None else sum(state.values())


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def tree_label(checkout: Path) -> str:
    """``checkout``'s path and commit, "+ changes" if its work tree differs from it."""
    try:
        sha = baseline.git(checkout, "rev-parse", "--short=12", "HEAD")
        dirty = baseline.git(checkout, "status", "--porcelain", "--untracked-files=no")
    except baseline.BaselineError:
        return str(checkout)
    return f"{checkout} ({sha}{' + uncommitted changes' if dirty else ''})"


def comparison_text(result: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """The table with what was compared and how above it."""
    runs_text = "1 run" if result["repeat"] == 1 else f"{result['repeat']} runs"
    how = [f"{runs_text} of each benchmark per side, alternating old, new"]
    if result["divisor"] != 1:
        how.append(f"counts divided by {result['divisor']} (a smoke test)")
    if result["skip_spark"]:
        how.append("without Spark")
    runs = result["runs"]
    rows = comparison_rows(runs, result["repeat"], result["skip_spark"])
    return "\n".join([
        *(f"{side}: {labels[side]}" for side in compare.SIDES),
        f"{'; '.join(how)}; started {result['started']}; load average "
        f"{result['load_before']} before, {result['load_after']} after", "",
        compare.render(rows)])


def compare_main(spec: str, repeat: int, divisor: int, skip_spark: bool,
                 tmp_dir: str | None, json_path: Path | None) -> None:
    """``--baseline``: this tree against ``spec`` (a checkout or a git revision).
    SIGTERM ends it as Ctrl-C does: the daemons stopped, the temporary worktree removed."""
    signal.signal(signal.SIGTERM, _terminated)
    try:
        with baseline.checked_out(spec, HERE, tmp_dir) as old:
            new_loops = compiled_loops(HERE)
            if old.temporary:
                # as make bench builds this tree's loops first: the old tree's too
                prepare_baseline(old.path, build_loops=bool(new_loops and all(
                    new_loops.values())))
            old_loops = compiled_loops(old.path)
            labels = {
                compare.OLD: f"{old.label}, {old.path}; compiled loops "
                             f"{speedups.in_use_text(old_loops)}",
                compare.NEW: f"this tree, {tree_label(HERE)}; compiled loops "
                             f"{speedups.in_use_text(new_loops)}"}
            foreign = foreign_modules(old.path)
            if foreign is not None:
                log.error("the baseline cannot run its side", baseline=old.label,
                          why=foreign)
            result = run_compare({compare.OLD: old.path, compare.NEW: HERE}, divisor,
                                 skip_spark, repeat, tmp_dir,
                                 unable={} if foreign is None else {compare.OLD: foreign})
    except baseline.BaselineError as exc:
        raise click.ClickException(str(exc)) from exc
    result["labels"] = labels
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    click.echo(comparison_text(result, labels))
    if loops_count(old_loops) != loops_count(new_loops):
        click.echo("\nThe two sides ran different numbers of compiled loops (above): the "
                   "broker's rates and CPU figures differ by that too.")
    failed = sorted({s["command"] for r in result["runs"][compare.NEW] for s in r["steps"]
                     if "error" in s})
    if failed:  # the baseline's failures are rows of the table, this tree's are errors
        raise click.ClickException("failed on this tree: " + "; ".join(failed))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--quick", is_flag=True, help="Counts divided by 10 (a smoke test).")
@click.option("--divisor", type=click.IntRange(min=1), default=None, hidden=True,
              help="Counts divided by this (overrides --quick).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write every raw result to this file.")
@click.option("--skip-spark", is_flag=True, help="No Spark batch read.")
@click.option("--tmp-dir", default=None,
              help="Where the temporary stores go (default: the system's temp directory); "
                   "the fdatasync figure is of this file system.")
@click.option("--doc", "doc_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also write the table into this markdown page, between its "
                                 "<!-- bench:begin --> and <!-- bench:end --> markers.")
@click.option("--baseline", "baseline_spec", default=None, metavar="DIR|REV",
              help="Also run every benchmark from this old tree, taking turns with this one, "
                   "and print new/old ratios: another checkout, or a git revision (checked "
                   "out into a temporary worktree for the run).")
@click.option("--repeat", type=click.IntRange(min=1), default=None,
              help=f"With --baseline: runs of each benchmark per side [default: "
                   f"{DEFAULT_REPEAT}].")
@click.option("--log-level", default="INFO", show_default=True)
def main(quick: bool, divisor: int | None, json_path: Path | None, skip_spark: bool,
         tmp_dir: str | None, doc_path: Path | None, baseline_spec: str | None,
         repeat: int | None, log_level: str) -> None:
    """Start fresh daemons, run every mqbench mode, print one table."""
    if baseline_spec is None and repeat is not None:
        raise click.UsageError("--repeat goes with --baseline")
    if baseline_spec is not None and doc_path is not None:
        raise click.UsageError("--doc takes one tree's figures, not a comparison's: "
                               "leave out --baseline or --doc")
    configure_logging(log_level)
    if baseline_spec is not None:
        compare_main(baseline_spec, repeat or DEFAULT_REPEAT, divisor or (10 if quick else 1),
                     skip_spark, tmp_dir, json_path)
        return
    results = run(divisor or (10 if quick else 1), skip_spark, tmp_dir)
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2) + "\n")
    rows = table_rows(results)
    click.echo(render_table(rows))
    failed = [s["command"] for s in results["steps"] if "error" in s]
    if failed:
        raise click.ClickException("failed: " + "; ".join(failed))
    if doc_path is not None:
        doc_table.write_doc(doc_path, doc_table.section(
            rows, results["started"], results["divisor"], results["skip_spark"]))
        click.echo(f"written into {doc_path}")


if __name__ == "__main__":
    main()
