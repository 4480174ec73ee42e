"""The official RocketMQ C++ client next to our SDK, on the same fresh daemons.

    .venv/bin/python -m bench.official [--count N] [--size BYTES] [--json PATH|-]

Starts a name server and a broker (separate processes, free 127.0.0.1 ports, a
temporary store, ASYNC_FLUSH), creates one topic of 4 queues, then measures:

    produce  official C++   Producer.send_sync, one thread, one send in flight
    produce  our SDK        Producer.send, one send in flight (mqbench producer -b 1 -w 1)
    consume  official C++   PushConsumer (clustering, 1 message per callback)
    consume  our SDK        PushConsumer (clustering, 1 message per listener call)

COUNT messages of SIZE bytes each (default 20,000 of 1 KiB). Both producers
write to the topic (after one warm-up send each, not timed); each consumer
then reads COUNT messages of it from offset 0 in a new group of its own
(the C++ one's offsets are set to 0 before it starts: a new group starts at 0
only while a queue's first message counts as in memory, see
docs/compatibility.md, which a large COUNT can pass) and is timed from its first message to its COUNT-th
(as ``mqbench push``). The "with start-up" column adds the client's start
(and a producer's warm-up send; a consumer's rebalance and first pulls).

The C++ client (PyPI ``rocketmq``, librocketmq bundled, behind a ctypes
wrapper whose callbacks run Python) runs in child processes of this script
(``--child``), its log under the temporary directory; our SDK runs in this
process. Prints one table; ``--json PATH`` (``-`` for stdout) writes the
figures. The daemons are stopped and the temporary directory removed whatever
happens.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import structlog
import trio

from bench.all import accepts, free_port, route_has, stop_process, wait_until
from protocol.trio.logs import configure_logging

log = structlog.get_logger("bench_official")

TOPIC = "OfficialBench"
QUEUES = 4
START_TIMEOUT = 60.0
REPO = Path(__file__).resolve().parents[1]


# ---- the C++ client's side (child processes) -------------------------------------------


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _child_exit(code: int) -> None:
    """Leave without running the C library's destructors at interpreter exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def child_produce(namesrv: str, topic: str, count: int, size: int) -> None:
    from rocketmq.client import Message, Producer, SendStatus

    w0 = time.perf_counter()
    producer = Producer("PID-official-bench", timeout=10_000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    body = "x" * size

    def msg() -> Any:
        m = Message(topic)
        m.set_body(body)
        return m

    producer.send_sync(msg())  # warm up: route and connection
    failed = 0
    t0 = time.perf_counter()
    for _ in range(count):
        if producer.send_sync(msg()).status != SendStatus.OK:
            failed += 1
    elapsed = time.perf_counter() - t0
    wall = time.perf_counter() - w0
    producer.shutdown()
    _emit({"count": count, "failed": failed, "seconds": elapsed, "wall": wall})


def child_consume(namesrv: str, topic: str, group: str, count: int) -> None:
    from rocketmq.client import PushConsumer

    lock = threading.Lock()
    done = threading.Event()
    state = {"got": 0, "first": 0.0, "last": 0.0}

    def on_message(msg: Any) -> None:
        now = time.perf_counter()
        with lock:
            if state["got"] >= count:
                return
            if not state["got"]:
                state["first"] = now
            state["got"] += 1
            state["last"] = now
            if state["got"] >= count:
                done.set()

    w0 = time.perf_counter()
    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.set_instance_name(f"bench-{os.getpid()}")
    consumer.subscribe(topic, on_message, "*")
    consumer.start()
    done.wait()
    consumer.shutdown()
    _emit({"count": state["got"], "seconds": state["last"] - state["first"],
           "wall": state["last"] - w0})


def step_timeout(count: int) -> float:
    """Seconds one step may take at most (a child is killed after them)."""
    return 60.0 + count / 50


def run_child(argv: list[str], home: Path, timeout: float) -> dict[str, Any]:
    """Run ``--child`` in a process of its own (it exits by itself after
    ``timeout`` s, and is killed a little later); its JSON result."""
    home.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "bench.official", *argv]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "HOME": str(home)},
                              capture_output=True, text=True, timeout=timeout + 10,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(argv)}: timed out after {timeout:g}s") from None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}, no result\n"
                       f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def load_error() -> str | None:
    """Why ``rocketmq.client`` cannot be imported (checked in a child process), or None."""
    proc = subprocess.run([sys.executable, "-c", "import rocketmq.client"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {proc.returncode}"


# ---- our SDK's side (this process) ---------------------------------------------------------


async def sdk_produce(namesrv: str, topic: str, count: int, size: int) -> dict[str, Any]:
    from client import Message, Producer, SendStatus

    body = b"x" * size
    w0 = time.perf_counter()
    async with Producer("PID-sdk-bench", namesrv) as producer:
        await producer.send(Message(topic, body))  # warm up
        failed = 0
        t0 = time.perf_counter()
        for _ in range(count):
            r = await producer.send(Message(topic, body))
            if r.send_status != SendStatus.SEND_OK:
                failed += 1
        elapsed = time.perf_counter() - t0
        wall = time.perf_counter() - w0
    return {"count": count, "failed": failed, "seconds": elapsed, "wall": wall}


async def sdk_consume(namesrv: str, topic: str, group: str, count: int, timeout: float
                      ) -> dict[str, Any]:
    from client import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer

    state = {"got": 0, "first": 0.0, "last": 0.0}
    done = trio.Event()
    ok = ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        now = time.perf_counter()
        for _ in msgs:
            if state["got"] >= count:
                break
            if not state["got"]:
                state["first"] = now
            state["got"] += 1
            state["last"] = now
        if state["got"] >= count:
            done.set()
        return ok

    w0 = time.perf_counter()
    consumer = PushConsumer(group, namesrv, instance_name=f"bench-sdk-{os.getpid()}",
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    async with consumer:
        with trio.fail_after(timeout):
            await done.wait()
    return {"count": state["got"], "seconds": state["last"] - state["first"],
            "wall": state["last"] - w0}


async def create_topic(namesrv: str, broker_addr: str, topic: str) -> None:
    from client.admin import MQAdmin

    async with MQAdmin(namesrv) as admin:
        await admin.create_topic(topic, broker_addr=broker_addr, read_queue_nums=QUEUES,
                                 write_queue_nums=QUEUES)
        with trio.fail_after(START_TIMEOUT):
            while True:
                try:
                    await admin.topic_route(topic)
                    return
                except Exception:
                    await trio.sleep(0.1)


async def offsets_to_zero(namesrv: str, topic: str, group: str) -> None:
    """Commit offset 0 of every queue for ``group``: a C++ push consumer of a new
    group starts at the queues' end once their first messages no longer count
    as in memory (accessMessageInMemoryMaxRatio; a large COUNT), and it has no
    CONSUME_FROM_FIRST_OFFSET setting in this wrapper."""
    from client.admin import MQAdmin

    async with MQAdmin(namesrv) as admin:
        await admin.reset_offset_by_time(group, topic, 0)


# ---- daemons ----------------------------------------------------------------------------


@dataclass
class Daemons:
    root: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    namesrv: str = ""
    broker: str = ""

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with open(self.root / f"{name}.log", "ab") as out:
            # its log files beside its output, never in ~/logs
            args = [*args, "--log-dir", str(self.root / "logs" / name)]
            proc = subprocess.Popen([sys.executable, "-m", *args], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        ns_port = free_port()
        ns = self._spawn("namesrv", ["namesrv.cli", "--port", str(ns_port),
                                     "--log-level", "WARNING"])
        wait_until("name server listening", lambda: accepts(ns_port), START_TIMEOUT,
                   lambda: ns.poll() is None)
        self.namesrv = f"127.0.0.1:{ns_port}"
        port = free_port()
        ha_port = free_port()
        while ha_port == port:
            ha_port = free_port()
        broker = self._spawn("broker", [
            "broker.cli", "-n", self.namesrv, "-o", f"listenPort={port}",
            "-o", f"haListenPort={ha_port}", "-o", f"storePathRootDir={self.root / 'store'}",
            "-o", "flushDiskType=ASYNC_FLUSH",
            # small store files: the benchmark writes a few MiB
            "-o", f"mapedFileSizeCommitLog={64 << 20}",
            "-o", f"mapedFileSizeConsumeQueue={200_000 * 20}",
            "--log-level", "WARNING"])

        def alive() -> bool:
            return broker.poll() is None

        wait_until("broker listening", lambda: accepts(port), START_TIMEOUT, alive)
        self.broker = f"127.0.0.1:{port}"
        wait_until("broker registered", lambda: route_has(self.namesrv, self.broker),
                   START_TIMEOUT, alive)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc)
        self.procs.clear()

    def log_tail(self, chars: int = 2000) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.read_text(errors='replace')[-chars:]}"
                         for p in sorted(self.root.glob("*.log")))


# ---- the run ----------------------------------------------------------------------------

FIGURES = (
    ("produce_cpp", "send_sync {size} B, official C++ client"),
    ("produce_sdk", "send {size} B, our SDK"),
    ("consume_cpp", "push consume, official C++ client"),
    ("consume_sdk", "push consume, our SDK"),
)


def run(count: int, size: int, tmp_dir: str | None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="mq-bench-official-", dir=tmp_dir))
    daemons = Daemons(root)
    raw: dict[str, dict[str, Any]] = {}
    try:
        daemons.start()
        ns = daemons.namesrv
        log.info("daemons started", namesrv=ns, broker=daemons.broker)
        trio.run(create_topic, ns, daemons.broker, TOPIC)
        home = root / "cpp-home"
        timeout = step_timeout(count)
        log.info("producing", client="official C++", count=count, size=size)
        raw["produce_cpp"] = run_child(["--child", "produce", "-n", ns, "--count", str(count),
                                        "--size", str(size)], home, timeout)
        log.info("producing", client="our SDK", count=count, size=size)
        raw["produce_sdk"] = trio.run(sdk_produce, ns, TOPIC, count, size)
        group = "CID-official-bench"
        trio.run(offsets_to_zero, ns, TOPIC, group)
        log.info("consuming", client="official C++", count=count)
        raw["consume_cpp"] = run_child(["--child", "consume", "-n", ns, "--group", group,
                                        "--count", str(count)], home, timeout)
        log.info("consuming", client="our SDK", count=count)
        raw["consume_sdk"] = trio.run(sdk_consume, ns, TOPIC, "CID-sdk-bench", count, timeout)
    except BaseException:
        log.error("benchmark failed", daemon_logs=daemons.log_tail())
        raise
    finally:
        daemons.stop()
        shutil.rmtree(root, ignore_errors=True)
    results = []
    for name, figure in FIGURES:
        r = raw[name]
        seconds = float(r["seconds"])
        results.append({"name": name, "figure": figure.format(size=size),
                        "count": int(r["count"]), "failed": int(r.get("failed", 0)),
                        "seconds": seconds, "wall_seconds": float(r["wall"]),
                        "msgs_per_s": int(r["count"]) / seconds if seconds > 0 else 0.0})
    return {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "count": count, "size": size,
            "topic_queues": QUEUES, "results": results}


def render_table(results: Sequence[dict[str, Any]]) -> str:
    head = ("figure", "msg/s", "seconds", "with start-up", "messages")
    rows = [(r["figure"], f"{r['msgs_per_s']:,.0f}", f"{r['seconds']:.3f}",
             f"{r['wall_seconds']:.3f}", f"{r['count']:,}") for r in results]
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]
    lines = [" | ".join(f"{c:<{widths[i]}}" if i == 0 else f"{c:>{widths[i]}}"
                        for i, c in enumerate(row)) for row in (head, *rows)]
    lines.insert(1, "-|-".join("-" * w for w in widths))
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--count", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Messages per figure.")
@click.option("-s", "--size", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Body size in bytes.")
@click.option("--json", "json_path", default=None,
              help="Write the figures as JSON to this file ('-': stdout, after the table).")
@click.option("--tmp-dir", default=None, help="Where the temporary store goes.")
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--child", type=click.Choice(["produce", "consume"]), default=None, hidden=True)
@click.option("-n", "--namesrv", default=None, hidden=True)
@click.option("--group", default=None, hidden=True)
def main(count: int, size: int, json_path: str | None, tmp_dir: str | None, log_level: str,
         child: str | None, namesrv: str | None, group: str | None) -> None:
    """Send and consume COUNT messages with the official C++ client and with our SDK."""
    if child is not None:
        assert namesrv is not None
        watchdog = threading.Timer(step_timeout(count), _child_exit, (3,))
        watchdog.daemon = True
        watchdog.start()
        if child == "produce":
            child_produce(namesrv, TOPIC, count, size)
        else:
            assert group is not None
            child_consume(namesrv, TOPIC, group, count)
        _child_exit(0)
    configure_logging(log_level)
    why = load_error()
    if why is not None:
        raise click.ClickException(f"the official RocketMQ client (PyPI rocketmq) cannot load: {why}")
    results = run(count, size, tmp_dir)
    table = render_table(results["results"])
    click.echo(f"official C++ client (PyPI rocketmq, librocketmq 2.0) vs our SDK: {count:,} "
               f"messages of {size:,} B, one broker, {QUEUES} queues, ASYNC_FLUSH")
    click.echo(table)
    if json_path == "-":
        click.echo(json.dumps(results, indent=2))
    elif json_path:
        Path(json_path).write_text(json.dumps(results, indent=2) + "\n")
    failed = [r["name"] for r in results["results"] if r["failed"]]
    if failed:
        raise click.ClickException(f"failed sends in: {', '.join(failed)}")


if __name__ == "__main__":
    main()
