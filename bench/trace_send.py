"""Where a single send's time goes: the syscalls at the edges of each round trip.

    .venv/bin/python -m bench.trace_send [--flush SYNC_FLUSH] [-c 3000] [-o key=value ...]

Starts a fresh pair (a name server and a broker with ``--flush``, free
127.0.0.1 ports, a temporary store, as ``make bench``), sends 200 messages to
warm it, then runs ``mqbench producer -t BenchSingle -s 1024 -b 1 -w 1 -c N``
while ``perf record -a`` records the client's and the broker's sendto,
recvfrom, epoll_wait and io_submit calls, and splits each round trip into:

    request wake   the client's sendto of a request -> the broker's epoll_wait returns
    broker         that return -> the broker's sendto of the answer
    fsync          SYNC_FLUSH: of "broker", the broker's io_submit of the
                   fdatasync -> the epoll_wait that hears it ended
    answer wake    the answer's sendto -> the client's epoll_wait returns
    client         that return -> the client's sendto of the next request
    round trip     one request's sendto to the next one's: the sum of the
                   four parts above it

It prints each part's p50, p90 and mean in µs. The two wakes hold what waking
a process on another CPU costs (a VM exit on a guest without halt polling);
"broker" and "client" hold each side's own work for a send, Python and
syscalls, from the moment its loop wakes. Tracing adds a little to each
syscall, so the round trip runs somewhat longer than in mqbench alone.

Needs ``perf`` allowed to trace syscalls (root, or a perf_event_paranoid
that allows it): without, it says so and exits 2. ``-o key=value`` passes
broker options (e.g. ``-o busyPollMicros=1000``).
"""

from __future__ import annotations

import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from bench.all import Pair, mqbench_argv, wait_until

PARTS = ("request wake", "broker", "fsync", "answer wake", "client", "round trip")
ROUND_TRIP = ("request wake", "broker", "answer wake", "client")  # its parts, in order
EVENTS = ("syscalls:sys_enter_sendto", "syscalls:sys_exit_recvfrom",
          "syscalls:sys_exit_epoll_wait", "syscalls:sys_enter_io_submit")
CLIENT_TIMEOUT = 600.0  # s: the traced mqbench run
REQUEST_SLACK = 16  # bytes a request's frame may differ from the usual one's
_LINE = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<pid>\d+)\s+\[\d+\]\s+(?P<t>\d+\.\d+):\s+"
                   r"syscalls:sys_(?P<edge>enter|exit)_(?P<call>\w+):\s*(?P<rest>.*)$")
_FIELD = re.compile(r"(\w+): (0x[0-9a-f]+)")


@dataclass(frozen=True, slots=True)
class Event:
    """One traced syscall edge: ``kind`` is send (sendto's entry, with its
    fd and length), recv (recvfrom's return, ``value`` its result), wake
    (epoll_wait's return, ``value`` how many fds) or submit (io_submit's entry)."""

    pid: int
    t_us: float
    kind: str
    value: int = 0
    fd: int = -1


def _signed(hex_text: str) -> int:
    v = int(hex_text, 16)
    return v - (1 << 64) if v >= 1 << 63 else v


def parse(lines: Iterable[str]) -> list[Event]:
    """The events of ``perf script`` output, in its order; other lines are skipped."""
    kinds = {("enter", "sendto"): "send", ("exit", "recvfrom"): "recv",
             ("exit", "epoll_wait"): "wake", ("enter", "io_submit"): "submit"}
    events: list[Event] = []
    for line in lines:
        m = _LINE.match(line)
        if m is None:
            continue
        kind = kinds.get((m["edge"], m["call"]))
        if kind is None:
            continue
        pid, t_us, rest = int(m["pid"]), float(m["t"]) * 1e6, m["rest"]
        if kind == "send":
            fields = dict(_FIELD.findall(rest))
            events.append(Event(pid, t_us, kind, int(fields.get("len", "0x0"), 16),
                                int(fields.get("fd", "0x0"), 16)))
        elif kind in ("recv", "wake"):
            events.append(Event(pid, t_us, kind, _signed(rest.split()[0]) if rest else 0))
        else:
            events.append(Event(pid, t_us, kind))
    return events


def _usual_send(events: Sequence[Event], pid: int) -> tuple[int, int] | None:
    """The fd and length ``pid``'s sends most often have: the client's
    requests, the broker's answers."""
    shapes = Counter((e.fd, e.value) for e in events if e.pid == pid and e.kind == "send")
    if not shapes:
        return None
    return shapes.most_common(1)[0][0]


def segments(events: Sequence[Event], client: int, broker: int) -> dict[str, list[float]]:
    """Each round trip's parts (PARTS) in µs, from the events of one client
    sending one request at a time to one broker. A part is taken only when
    the events came in their order; anything else on either side (a heart
    beat, a route lookup, the broker's own traffic) is passed over."""
    parts: dict[str, list[float]] = {p: [] for p in PARTS}
    request, answer = _usual_send(events, client), _usual_send(events, broker)
    if request is None or answer is None:
        return parts
    fd, length = request
    answer_fd = answer[0]
    marks: dict[str, float] = {}
    for e in events:
        if e.pid == client:
            if e.kind == "send" and e.fd == fd and abs(e.value - length) <= REQUEST_SLACK:
                if "client recv" in marks:
                    parts["client"].append(e.t_us - marks["client wake"])
                    parts["round trip"].append(e.t_us - marks["request"])
                marks = {"request": e.t_us}
            elif e.kind == "wake" and e.value > 0 and "answer" in marks \
                    and "client wake" not in marks:
                marks["client wake"] = e.t_us
                parts["answer wake"].append(e.t_us - marks["answer"])
            elif e.kind == "recv" and e.value > 0 and "client wake" in marks \
                    and "client recv" not in marks:
                marks["client recv"] = e.t_us
        elif e.pid == broker and "request" in marks:
            if e.kind == "wake" and e.value > 0:
                if "broker wake" not in marks:
                    marks["broker wake"] = e.t_us
                    parts["request wake"].append(e.t_us - marks["request"])
                elif "submit" in marks and "fsync" not in marks:
                    marks["fsync"] = e.t_us
                    parts["fsync"].append(e.t_us - marks["submit"])
            elif e.kind == "recv" and e.value > 0 and "broker wake" in marks \
                    and "broker recv" not in marks:
                marks["broker recv"] = e.t_us
            elif e.kind == "submit" and "broker recv" in marks and "answer" not in marks:
                marks.setdefault("submit", e.t_us)
            elif e.kind == "send" and e.fd == answer_fd and "broker recv" in marks \
                    and "answer" not in marks:
                marks["answer"] = e.t_us
                parts["broker"].append(e.t_us - marks["broker wake"])
    return parts


def summary(parts: dict[str, list[float]]) -> list[tuple[str, int, float, float, float]]:
    """(part, count, p50, p90, mean) of each part that has values."""
    rows = []
    for name in PARTS:
        values = sorted(parts.get(name, []))
        if values:
            rows.append((name, len(values), values[len(values) // 2],
                         values[min(len(values) - 1, int(len(values) * 0.9))],
                         statistics.fmean(values)))
    return rows


def render(rows: Sequence[tuple[str, int, float, float, float]]) -> str:
    lines = [f"{'part':<14} {'count':>6} {'p50 µs':>8} {'p90 µs':>8} {'mean µs':>8}"]
    lines += [f"{n:<14} {c:>6} {p50:>8.0f} {p90:>8.0f} {mean:>8.0f}"
              for n, c, p50, p90, mean in rows]
    return "\n".join(lines)


def perf_problem() -> str | None:
    """Why perf cannot trace syscalls here, or None when it can."""
    perf = shutil.which("perf")
    if perf is None:
        return "perf is not installed (Debian: apt-get install linux-perf)"
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([perf, "record", "-q", "-o", str(Path(tmp) / "probe.data"),
                               "-e", EVENTS[0], "--", "true"], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"perf cannot trace syscalls here: {proc.stderr.strip()[-300:]}"
    return None


@click.command()
@click.option("--flush", type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]), default="ASYNC_FLUSH",
              show_default=True)
@click.option("-c", "--count", type=int, default=3000, show_default=True,
              help="Sends traced (one in flight).")
@click.option("-o", "--option", "options", multiple=True, help="A broker option, key=value.")
def main(flush: str, count: int, options: tuple[str, ...]) -> None:
    """Trace single sends and print where each round trip's time goes."""
    problem = perf_problem()
    if problem is not None:
        click.echo(problem, err=True)
        sys.exit(2)
    with tempfile.TemporaryDirectory(prefix="mq-trace-send-") as tmp:
        root = Path(tmp)
        pair = Pair(root / "pair", flush,
                    broker_options=[x for o in options for x in ("-o", o)])
        try:
            pair.start()
            bench = [*mqbench_argv(), "producer", "-n", pair.namesrv, "-t", "BenchSingle",
                     "-s", "1024", "-b", "1", "-w", "1"]
            subprocess.run([*bench, "-c", "200"], check=True, capture_output=True)
            data = root / "perf.data"
            record = subprocess.Popen(
                ["perf", "record", "-q", "-a", "-o", str(data),
                 *(x for e in EVENTS for x in ("-e", e))],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            client: subprocess.Popen[str] | None = None
            try:
                wait_until("perf recording", data.exists, 30, lambda: record.poll() is None)
                client = subprocess.Popen([*bench, "-c", str(count)], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)
                out, client_err = client.communicate(timeout=CLIENT_TIMEOUT)
            finally:
                if client is not None and client.poll() is None:
                    client.kill()
                    client.wait()
                record.send_signal(signal.SIGINT)
                _, err = record.communicate(timeout=60)
            if client.returncode != 0 or not data.exists():
                raise click.ClickException(f"tracing failed: {client_err[-500:]}{err[-500:]}")
            script = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True,
                                    text=True, check=True)
            parts = segments(parse(script.stdout.splitlines()), client.pid, pair.broker_pid)
        finally:
            pair.stop()
    click.echo(out.strip().splitlines()[-1] if out.strip() else "")
    click.echo(f"{flush}, {count} single sends traced ({', '.join(options) or 'no options'}):")
    click.echo(render(summary(parts)))


if __name__ == "__main__":
    main()
