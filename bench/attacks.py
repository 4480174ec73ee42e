"""``mqbench attack <kind>``: re-runnable measurements of hostile and broken clients.

    mqbench attack unread-pulls    -n NS -b BROKER --broker-pid PID -d 30
    mqbench attack heartbeat-flood -n NS -b BROKER --broker-pid PID -d 30
    mqbench attack idle-conns      -n NS -b BROKER --broker-pid PID -d 30 -c 2000 -m 200
    mqbench attack held-pulls      -n NS -b BROKER --broker-pid PID -d 30 -H 5000
    mqbench attack groups          -n NS -b BROKER --broker-pid PID -d 30 -g 10000
    mqbench attack topics          -n NS -b BROKER --broker-pid PID -d 30 -t 10000

Every kind is measured the same way. The probe topic (``--probe-topic``, 4
queues) is created on the broker; a *probe* process of its own (a plain
``client.Producer``, so the attacker's event loop does not colour its figures)
sends one ``--probe-size`` message at a time to queue 0 at ``--probe-rate``
for exactly the attack's window of ``-d`` seconds, and reports sends ok and
failed (a timeout is a failure, never a latency) and p50/p99/max latency. The
attack runs in this process in that window (a kind that finishes sooner, such
as ``groups``, says when); with ``--broker-pid`` the broker's VmRSS is sampled
every 0.2 s from start to the end of a ``--settle`` time after the attack's
connections are closed. Output: a header line, ``attack <kind>:`` counter
lines, a ``probe:`` line and a ``broker RSS:`` line.

Every loop is bounded in count and in time and stops by itself. Names made
per run (groups, topics) carry a run id, so a re-run makes new ones.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import termios
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click
import trio

from bench.stats import percentiles
from client.consumer_api import PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND
from protocol.body import pack_body, unpack_body
from protocol.client_data import ConsumerData, HeartbeatData, SubscriptionData
from protocol.codes import RequestCode, ResponseCode, code_name
from protocol.command import RemotingCommand
from protocol.frame import DEFAULT_MAX_FRAME_SIZE, FRAME_HEADER, FrameDecoder, encode_frame
from protocol.headers import (
    GetMaxOffsetRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from protocol.names import RETRY_GROUP_TOPIC_PREFIX
from protocol.trio.client import RemotingClient, split_addr
from protocol.trio.errors import RemotingError

if TYPE_CHECKING:
    from client.admin import MQAdmin

KiB = 1024
MiB = 1024 * KiB
RSS_EVERY_S = 0.2
AT_ONCE_S = 1.0  # a connection closed, or a pull answered, this soon: "at once"
CONNECT_TIMEOUT_S = 5.0
READY_TIMEOUT_S = 60.0  # the probe's producer is up and its first send went through
FINISH_TIMEOUT_S = 60.0  # closing and verifying after the window
REQUEST_TIMEOUT_S = 10.0
RECEIVE_CHUNK = 256 * KiB
FRAMES_PER_WRITE = 64
MAX_REQUESTS = 100_000_000  # a bound on any flood besides its time

NAMESRV_HELP = 'Name server address list, "host:port;host:port".'


# ---- pure parts ------------------------------------------------------------------------


def parse_status_kib(status: str, key: str = "VmRSS") -> int | None:
    """A ``kB`` field (``VmRSS``, ``RssAnon``, ...) of the text of
    /proc/PID/status, in KiB; None when absent (as for a zombie)."""
    head = key + ":"
    for line in status.splitlines():
        if line.startswith(head):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1])
    return None


@dataclass(slots=True)
class Series:
    """Samples of one figure (KiB); times are seconds into the window."""

    start: int | None = None
    peak: int = 0
    peak_at: float = 0.0
    at_stop: int | None = None  # when the attack's window ended
    last: int | None = None

    def add(self, kib: int, at: float) -> None:
        if self.start is None:
            self.start = kib
        if kib > self.peak:
            self.peak, self.peak_at = kib, at
        self.last = kib

    def text(self) -> str:
        start = self.start or 0

        def delta(kib: int | None) -> str:
            kib = start if kib is None else kib
            return f"{mib(kib)} ({(kib - start) / 1024:+.1f})"

        return (f"start {mib(start)}, peak {delta(self.peak)} at {self.peak_at:.1f}s, "
                f"at the window's end {delta(self.at_stop)}, end {delta(self.last)}")


@dataclass(slots=True)
class RssTrack:
    """The broker's VmRSS, and the anonymous part of it (RssAnon: what it
    allocated, without the store's mapped file pages that every write adds)."""

    rss: Series = field(default_factory=Series)
    anon: Series = field(default_factory=Series)
    samples: int = 0
    gone_at: float | None = None  # the process was not there any more

    def add(self, status: str | None, at: float) -> None:
        rss = None if status is None else parse_status_kib(status, "VmRSS")
        if rss is None:
            if self.gone_at is None:
                self.gone_at = at
            return
        self.rss.add(rss, at)
        anon = parse_status_kib(status or "", "RssAnon")
        if anon is not None:
            self.anon.add(anon, at)
        self.samples += 1

    def stopped(self) -> None:
        self.rss.at_stop = self.rss.last
        self.anon.at_stop = self.anon.last


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def rss_report(track: RssTrack | None, settle: float) -> str:
    """The ``broker RSS:`` line."""
    if track is None:
        return "broker RSS: not sampled (give --broker-pid)"
    if track.rss.start is None:
        return "broker RSS: no sample (the process was not there)"
    line = f"broker RSS: {track.rss.text()} after a {settle:g}s settle"
    if track.anon.start is not None:
        line += f"; anonymous (RssAnon): {track.anon.text()}"
    line += f" ({track.samples} samples every {RSS_EVERY_S:g}s)"
    if track.gone_at is not None:
        line += f"; THE BROKER PROCESS WAS GONE {track.gone_at:.1f}s into the window"
    return line


def latency_summary(latencies: Sequence[float]) -> tuple[float, float, float]:
    """(p50, p99, max) in seconds, nearest rank; zeros for no samples."""
    if not latencies:
        return 0.0, 0.0, 0.0
    pct = percentiles(latencies, (50, 99))
    return pct[50], pct[99], max(latencies)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}ms"


def latency_text(latencies: Sequence[float]) -> str:
    p50, p99, top = latency_summary(latencies)
    return f"p50={ms(p50)} p99={ms(p99)} max={ms(top)}"


def counts_text(counts: Mapping[str, int]) -> str:
    """``A 3, B 1``: most first, then by name; ``none`` for nothing."""
    items = sorted(((k, v) for k, v in counts.items() if v), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{k} {v:,}" for k, v in items) or "none"


@dataclass(slots=True)
class ProbeResult:
    ok: int = 0
    failed: int = 0
    elapsed: float = 0.0
    rate: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds, sends ok only
    sent_at: list[float] = field(default_factory=list)  # when each of them started (window s)
    errors: dict[str, int] = field(default_factory=dict)  # failure kind -> count
    error: str | None = None  # the probe itself failed

    def to_json(self) -> str:
        return json.dumps({"ok": self.ok, "failed": self.failed, "elapsed": self.elapsed,
                           "rate": self.rate, "errors": self.errors,
                           "latencies": [round(x, 6) for x in self.latencies],
                           "sent_at": [round(x, 3) for x in self.sent_at]})

    @classmethod
    def from_json(cls, text: str) -> ProbeResult:
        d = json.loads(text)
        return cls(ok=int(d["ok"]), failed=int(d["failed"]), elapsed=float(d["elapsed"]),
                   rate=int(d["rate"]), latencies=[float(x) for x in d["latencies"]],
                   sent_at=[float(x) for x in d.get("sent_at", [])],
                   errors={str(k): int(v) for k, v in d["errors"].items()})


SLOW_SEND_S = 0.1


def probe_report(r: ProbeResult) -> str:
    """The ``probe:`` line: sends ok and failed, latency of the ones ok, and
    when the slowest and those over ``SLOW_SEND_S`` started."""
    if r.error is not None:
        return f"probe: FAILED: {r.error}"
    planned = int(r.elapsed * r.rate)
    line = (f"probe: {r.ok:,} sends ok, {r.failed:,} failed in {r.elapsed:.1f}s at {r.rate}/s "
            f"({planned:,} planned); latency {latency_text(r.latencies)}")
    if r.latencies and len(r.sent_at) == len(r.latencies):
        worst = max(range(len(r.latencies)), key=r.latencies.__getitem__)
        slow = [at for at, lat in zip(r.sent_at, r.latencies, strict=True) if lat > SLOW_SEND_S]
        line += f" (the slowest sent at {r.sent_at[worst]:.1f}s)"
        if slow:
            line += (f"; {len(slow):,} over {SLOW_SEND_S * 1e3:g}ms, sent from {min(slow):.1f}s "
                     f"to {max(slow):.1f}s")
    if r.errors:
        line += f"; failures: {counts_text(r.errors)}"
    return line


def failure_kind(exc: BaseException) -> str:
    """What a failed send is counted as: the broker's response code, ``timeout``,
    ``connect``, or the exception's type."""
    code = getattr(exc, "response_code", None)
    if isinstance(code, int):
        return code_name(int(code), True)
    seen: BaseException | None = exc
    for _ in range(10):  # a cause chain is short; never loop on a cycle
        if seen is None:
            break
        name = type(seen).__name__
        if "Timeout" in name or "TooSlow" in name:
            return "timeout"
        if "Connect" in name:
            return "connect"
        seen = seen.__cause__ or seen.__context__
    text = str(exc).lower()
    if "timeout" in text or "timed out" in text or "no response" in text:
        return "timeout"
    return type(exc).__name__


def heartbeat_body(client_id: str, *, consumer_group: str | None = None,
                   topic: str | None = None, producer_group: str | None = None) -> bytes:
    """A HEART_BEAT body as a client instance sends it: a producer group and/or
    one clustering push consumer subscribed to ``topic`` with ``*``."""
    consumers = []
    if consumer_group is not None:
        subs = [SubscriptionData(topic)] if topic else []
        consumers.append(ConsumerData(consumer_group, subscriptions=subs))
    hb = HeartbeatData(client_id, [producer_group] if producer_group else [], consumers)
    return pack_body(hb.to_dict())


def block_rates(done_at: Sequence[float], block: int = 1000) -> list[float]:
    """Completions per second of each full block of ``block`` completions;
    ``done_at`` are completion times (seconds from the start), ascending."""
    rates = []
    begin = 0.0
    for end_index in range(block - 1, len(done_at), block):
        end = done_at[end_index]
        rates.append(block / (end - begin) if end > begin else math.inf)
        begin = end
    return rates


def rates_text(rates: Sequence[float], block: int) -> str:
    if not rates:
        return f"(fewer than {block:,} created)"
    return ", ".join(f"{(i + 1) * block:,}: {r:,.0f}/s" for i, r in enumerate(rates))


def spread_text(values: Sequence[float]) -> str:
    """``min/median/max`` of seconds, or empty."""
    if not values:
        return ""
    ordered = sorted(values)
    return f"{ordered[0]:.1f}/{ordered[len(ordered) // 2]:.1f}/{ordered[-1]:.1f}s"


@dataclass(slots=True)
class ConnRecord:
    """One attacking connection; times are seconds into the attack."""

    slow: bool
    connected: float | None = None
    closed: float | None = None
    connect_error: str | None = None


def conns_report(records: Iterable[ConnRecord], at_once: float = AT_ONCE_S) -> dict[str, Any]:
    """What became of connections: opened, connect failures, refused at once
    (closed within ``at_once`` of connecting), closed later (and after how
    long), still open."""
    opened = failed = refused = open_ = 0
    later: list[float] = []
    errors: Counter[str] = Counter()
    for r in records:
        if r.connected is None:
            failed += 1
            errors[r.connect_error or "?"] += 1
            continue
        opened += 1
        if r.closed is None:
            open_ += 1
        elif r.closed - r.connected < at_once:
            refused += 1
        else:
            later.append(r.closed - r.connected)
    return {"opened": opened, "connect_failed": failed, "connect_errors": dict(errors),
            "refused_at_once": refused, "closed_later": len(later), "closed_after": later,
            "open": open_}


def conns_line(what: str, tried: int, rep: Mapping[str, Any]) -> str:
    line = (f"{what}: {tried:,} tried, {rep['opened']:,} opened, {rep['connect_failed']:,} "
            f"connect failures, {rep['refused_at_once']:,} refused at once (closed within "
            f"{AT_ONCE_S:g}s), {rep['closed_later']:,} closed later")
    if rep["closed_after"]:
        line += f" (after {spread_text(rep['closed_after'])} min/median/max)"
    line += f", {rep['open']:,} still open at the end"
    if rep["connect_errors"]:
        line += f"; connect errors: {counts_text(rep['connect_errors'])}"
    return line


def pull_frames(group: str, topic: str, queue_id: int, end: int, batch: int,
                sys_flag: int = PULL_FLAG_SUBSCRIPTION) -> list[bytes]:
    """Framed PULL_MESSAGE requests for offsets 0, batch, 2*batch, ... below
    ``end - batch + 1`` (every pull finds ``batch`` messages; at least one).
    They carry their subscription (``*``): a group that never sent a heart-beat
    has no other."""
    last = max(0, end - batch)
    return [
        encode_frame(RemotingCommand.request(
            RequestCode.PULL_MESSAGE,
            PullMessageRequestHeader(group, topic, queue_id, offset, batch,
                                     sys_flag=sys_flag).to_fields()).encode())
        for offset in range(0, last + 1, batch)
    ]


def chunks_of(frames: Sequence[bytes], n: int) -> list[tuple[bytes, int]]:
    """Frames joined ``n`` at a time: (bytes, how many frames)."""
    return [(b"".join(frames[i:i + n]), len(frames[i:i + n])) for i in range(0, len(frames), n)]


# ---- small I/O helpers -------------------------------------------------------------------


class LineReader:
    """Lines from a trio receive stream."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream: trio.abc.ReceiveStream = stream
        self.buf = bytearray()

    async def line(self) -> str | None:
        """The next line without its newline; None at the end of the stream."""
        while True:  # bounded: every turn reads more or returns
            i = self.buf.find(b"\n")
            if i >= 0:
                out = bytes(self.buf[:i])
                del self.buf[:i + 1]
                return out.decode(errors="replace")
            if len(self.buf) > 64 * MiB:
                raise ValueError("line too long")
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.buf += data


async def open_stream(addr: str) -> trio.SocketStream:
    host, port = split_addr(addr)
    with trio.fail_after(CONNECT_TIMEOUT_S):
        stream = await trio.open_tcp_stream(host, port)
    stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, True)
    return stream


def unread_bytes(stream: trio.SocketStream) -> int | None:
    """Bytes waiting in the socket's receive buffer (Linux FIONREAD)."""
    try:
        raw = fcntl.ioctl(stream.socket.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return None
    return int(struct.unpack("i", raw)[0])


async def queue_max_offset(rc: RemotingClient, addr: str, topic: str, queue_id: int) -> int:
    h = GetMaxOffsetRequestHeader(topic, queue_id)
    r = await rc.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, h.to_fields()),
                        REQUEST_TIMEOUT_S)
    if r.code != ResponseCode.SUCCESS:
        raise click.ClickException(f"GET_MAX_OFFSET {topic}/{queue_id}: "
                                   f"{code_name(r.code, True)} {r.remark or ''}")
    return OffsetResponseHeader.from_fields(r.ext_fields).offset


async def routed_broker_name(admin: MQAdmin, topic: str, broker_addr: str,
                             timeout: float = 30.0) -> str:
    """The name of the broker at ``broker_addr`` once the name server routes ``topic`` to it."""
    from client.admin import MQAdminError

    last = "no route yet"
    with trio.move_on_after(timeout):
        while True:  # bounded by the move_on_after
            try:
                route = await admin.topic_route(topic)
                for bd in route.broker_datas:
                    if broker_addr in bd.broker_addrs.values():
                        return bd.broker_name
                last = f"routed to {[bd.broker_addrs for bd in route.broker_datas]}"
            except MQAdminError as exc:
                last = str(exc)
            await trio.sleep(0.2)
    raise click.ClickException(f"topic {topic} not routed to {broker_addr} within {timeout:g}s: "
                               f"{last}")


async def create_routed_topic(s: Settings, topic: str, queues: int) -> str:
    """Create ``topic`` on the broker; the broker's name once it is routed."""
    from client.admin import MQAdmin

    async with MQAdmin(s.namesrv) as admin:
        await admin.create_topic(topic, broker_addr=s.broker, read_queue_nums=queues,
                                 write_queue_nums=queues)
        return await routed_broker_name(admin, topic, s.broker)


async def fetch_table(addr: str, code: int, key: str) -> dict[str, Any]:
    """One of the broker's tables (GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""
    async with RemotingClient() as rc:
        r = await rc.invoke(addr, RemotingCommand.request(code), 60)
    if r.code != ResponseCode.SUCCESS:
        raise click.ClickException(f"{code_name(code, False)}: {code_name(r.code, True)}")
    table = unpack_body(r.body).get(key)
    return table if isinstance(table, dict) else {}


# ---- the probe: its own process --------------------------------------------------------------


@dataclass(slots=True)
class Settings:
    namesrv: str
    broker: str
    broker_pid: int | None = None
    duration: float = 30.0
    settle: float = 10.0
    probe_topic: str = "AttackProbe"
    probe_rate: int = 200
    probe_size: int = 1024
    probe_timeout: float = 3.0


async def probe_run(namesrv: str, topic: str, broker_name: str, rate: int, size: int,
                    timeout: float, max_seconds: float, commands: LineReader,
                    out: Callable[[str], None]) -> None:
    """The probe process's body: ready, then sends from ``go`` to ``stop`` (or
    the end of ``commands``, or ``max_seconds``); its result as one JSON line."""
    from client import Message, MessageQueue, MQClientError, Producer, SendStatus

    mq = MessageQueue(topic, broker_name, 0)
    body = b"x" * size
    result = ProbeResult(rate=rate)
    errors: Counter[str] = Counter()
    async with Producer("AttackProbeProducer", namesrv, send_msg_timeout=timeout,
                        retry_times_when_send_failed=0) as p:
        last = "not tried"
        with trio.move_on_after(READY_TIMEOUT_S):
            while True:  # bounded by the move_on_after
                try:
                    await p.send(Message(topic, b"probe warm-up"), mq)
                    last = ""
                    break
                except MQClientError as exc:
                    last = str(exc)
                    await trio.sleep(0.5)
        if last:
            out(json.dumps({"error": f"the probe's first send failed: {last}"[:500]}))
            return
        out(json.dumps({"ready": True}))
        if await commands.line() != "go":
            return
        interval = 1.0 / rate
        started = trio.current_time()

        async def sender() -> None:
            nxt = started
            while True:  # bounded by the cancel scope (stop, max_seconds)
                now = trio.current_time()
                if nxt > now:
                    await trio.sleep_until(nxt)
                at = trio.current_time() - started
                t0 = time.perf_counter()
                kind = None
                with trio.move_on_after(timeout + 1.0) as cs:
                    try:
                        r = await p.send(Message(topic, body), mq, timeout=timeout)
                        if r.send_status is not SendStatus.SEND_OK:
                            kind = r.send_status.name
                    except MQClientError as exc:
                        kind = failure_kind(exc)
                if cs.cancelled_caught:
                    kind = "timeout"
                if kind is None:
                    result.latencies.append(time.perf_counter() - t0)
                    result.sent_at.append(at)
                    result.ok += 1
                else:
                    result.failed += 1
                    errors[kind] += 1
                nxt += interval
                if nxt < trio.current_time() - interval:  # behind: no burst to catch up
                    nxt = trio.current_time()

        with trio.move_on_after(max_seconds):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender)
                await commands.line()  # "stop", or the parent is gone
                nursery.cancel_scope.cancel()
        result.elapsed = trio.current_time() - started
        result.errors = dict(errors)
    out(result.to_json())


class ProbeProcess:
    """The probe as a child process: ``start`` (ready), ``go``, ``stop_at``, ``result``."""

    def __init__(self, proc: trio.Process, stderr: Any) -> None:
        self.proc = proc
        self.stderr = stderr
        assert proc.stdout is not None and proc.stdin is not None
        self.lines = LineReader(proc.stdout)
        self.stdin = proc.stdin

    @classmethod
    async def start(cls, s: Settings, broker_name: str) -> ProbeProcess:
        args = [sys.executable, "-m", "bench.attacks", "-n", s.namesrv,
                "-t", s.probe_topic, "--broker-name", broker_name, "--rate", str(s.probe_rate),
                "--size", str(s.probe_size), "--timeout", str(s.probe_timeout),
                "--max-seconds", str(s.duration + 60)]
        stderr = tempfile.TemporaryFile()
        proc = await trio.lowlevel.open_process(args, stdin=subprocess.PIPE,
                                                stdout=subprocess.PIPE, stderr=stderr)
        probe = cls(proc, stderr)
        try:
            with trio.move_on_after(READY_TIMEOUT_S + 30):
                line = await probe.lines.line()
                try:
                    msg = json.loads(line) if line else {"error": "the probe exited"}
                except ValueError:
                    msg = {"error": f"unexpected output {(line or '')[:200]!r}"}
                if isinstance(msg, dict) and msg.get("ready"):
                    return probe
                raise click.ClickException(f"probe: {msg}; {probe.stderr_tail()}")
            raise click.ClickException(f"probe not ready: {probe.stderr_tail()}")
        except BaseException:
            await probe.close()
            raise

    def stderr_tail(self, n: int = 1500) -> str:
        try:
            self.stderr.seek(0)
            return self.stderr.read().decode(errors="replace")[-n:].strip()
        except (OSError, ValueError):
            return ""

    async def go(self) -> None:
        await self.stdin.send_all(b"go\n")

    async def stop_at(self, deadline: float) -> None:
        """Tell the probe to stop at ``deadline`` (the window's end)."""
        await trio.sleep_until(deadline)
        try:
            await self.stdin.send_all(b"stop\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def result(self) -> ProbeResult:
        with trio.move_on_after(30):
            line = await self.lines.line()
            if line:
                try:
                    return ProbeResult.from_json(line)
                except (ValueError, KeyError) as exc:
                    return ProbeResult(error=f"bad result {line[:200]!r}: {exc}")
        return ProbeResult(error=f"no result from the probe; {self.stderr_tail()}")

    async def close(self) -> None:
        """The probe exits by itself once it has reported; killed if it does not."""
        with trio.CancelScope(shield=True):
            await self.stdin.aclose()  # a probe not told "go" ends at the end of its input
            with trio.move_on_after(5):
                await self.proc.wait()
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            await self.lines.stream.aclose()
            self.stderr.close()


# ---- the harness ---------------------------------------------------------------------------


@dataclass(slots=True)
class Env:
    s: Settings
    broker_name: str
    run_id: str
    stack: contextlib.AsyncExitStack[Any]


class Attack:
    """One kind. ``prepare`` runs before the window (it may open connections
    into ``env.stack``, closed after the window), ``run`` in it (cancelled at
    its end; it may return sooner), ``finish`` after it (bounded)."""

    kind = ""

    def __init__(self) -> None:
        self.started = 0.0
        self.returned: float | None = None  # seconds into the window, when run returned
        self.window = 0.0  # the window's length (-d)
        self.failure: str | None = None

    def now(self) -> float:
        return trio.current_time() - self.started

    def span(self) -> float:
        """Seconds the attack ran: until run returned, or the whole window."""
        return self.returned if self.returned is not None else self.window

    async def prepare(self, env: Env) -> None:
        pass

    async def run(self, env: Env) -> None:
        raise NotImplementedError

    async def finish(self, env: Env) -> None:
        pass

    def lines(self) -> list[str]:
        raise NotImplementedError

    def report(self) -> list[str]:
        out = [f"attack {self.kind}: {line}" for line in self.lines()]
        if self.failure is not None:
            out.append(f"attack {self.kind}: FAILED: {self.failure}")
        return out


async def sample_rss(pid: int, track: RssTrack, t0: float) -> None:
    while True:  # cancelled by the harness
        track.add(read_status(pid), trio.current_time() - t0)
        await trio.sleep(RSS_EVERY_S)


def read_status(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return f.read()
    except OSError:
        return None


async def run_attack(s: Settings, attack: Attack, out: Callable[[str], None]) -> None:
    """Set up, run the attack and the probe for ``s.duration``, settle, report."""
    out(f"attack {attack.kind}: {s.duration:g}s against broker {s.broker} (name server "
        f"{s.namesrv}), nproc {os.cpu_count()}; probe: one {s.probe_size} B message at a time to "
        f"{s.probe_topic} queue 0 at {s.probe_rate}/s, {s.probe_timeout:g}s timeout")
    if s.broker_pid is not None and parse_status_kib(read_status(s.broker_pid) or "") is None:
        raise click.ClickException(f"no process {s.broker_pid} (--broker-pid)")
    broker_name = await create_routed_topic(s, s.probe_topic, 4)
    track = RssTrack() if s.broker_pid is not None else None
    result = ProbeResult(error="not run")
    async with trio.open_nursery() as nursery:
        async with contextlib.AsyncExitStack() as stack:
            env = Env(s, broker_name, uuid.uuid4().hex[:8], stack)
            await attack.prepare(env)
            probe = await ProbeProcess.start(s, broker_name)
            try:
                t_window = trio.current_time()
                if track is not None and s.broker_pid is not None:  # from the window's start
                    nursery.start_soon(sample_rss, s.broker_pid, track, t_window)
                await probe.go()

                async def window_end() -> None:  # the probe's window is the attack's
                    await probe.stop_at(t_window + s.duration)
                    if track is not None:
                        track.stopped()

                async with trio.open_nursery() as window:
                    window.start_soon(window_end)
                    await run_window(attack, env, t_window, s.duration)
                result = await probe.result()
            finally:
                await probe.close()
            with trio.move_on_after(FINISH_TIMEOUT_S) as cs:
                try:
                    await attack.finish(env)
                except Exception as exc:
                    attack.failure = attack.failure or f"after the window: {exc}"[:500]
            if cs.cancelled_caught:
                attack.failure = attack.failure or "finishing took too long"
        # the attack's connections are closed: let the broker settle
        if track is not None and s.broker_pid is not None:
            await trio.sleep(s.settle)
            track.add(read_status(s.broker_pid), trio.current_time() - t_window)
        nursery.cancel_scope.cancel()
    for line in attack.report():
        out(line)
    out(probe_report(result))
    out(rss_report(track, s.settle))


async def run_window(attack: Attack, env: Env, t0: float, duration: float) -> None:
    """Run the attack from ``t0`` for ``duration`` seconds (it may return sooner)."""
    attack.started = t0
    with trio.move_on_at(t0 + duration):
        try:
            await attack.run(env)
        except Exception as exc:  # reported; the probe's and RSS figures still count
            attack.failure = f"{type(exc).__name__}: {exc}"[:500]
        attack.returned = trio.current_time() - t0
        await trio.sleep_until(t0 + duration)
    attack.window = duration


# ---- 1. unread pulls ---------------------------------------------------------------------------


class UnreadPulls(Attack):
    """One connection writes PULL_MESSAGE requests (each answered with ``batch``
    messages of a pre-filled queue) as fast as it can and never reads."""

    kind = "unread-pulls"

    def __init__(self, topic: str, fill: int, batch: int) -> None:
        super().__init__()
        self.topic, self.fill, self.batch = topic, fill, batch
        self.filled = 0
        self.pulls = 0
        self.nbytes = 0
        self.last_progress = 0.0
        self.closed_at: float | None = None
        self.close_error = ""
        self.unread: int | None = None
        self.stream: trio.SocketStream | None = None

    async def prepare(self, env: Env) -> None:
        from client import Message, MessageQueue, Producer

        broker_name = await create_routed_topic(env.s, self.topic, 1)
        async with RemotingClient() as rc:
            have = await queue_max_offset(rc, env.s.broker, self.topic, 0)
            if have < self.fill:
                mq = MessageQueue(self.topic, broker_name, 0)
                body = b"f" * KiB
                async with Producer("AttackFillProducer", env.s.namesrv) as p:
                    with trio.fail_after(300):
                        while have < self.fill:  # bounded: each turn adds up to 32
                            n = min(32, self.fill - have)
                            await p.send_batch([Message(self.topic, body) for _ in range(n)], mq)
                            have += n
            self.filled = await queue_max_offset(rc, env.s.broker, self.topic, 0)

    async def run(self, env: Env) -> None:
        frames = pull_frames("AttackUnreadGroup", self.topic, 0, self.filled, self.batch)
        chunks = chunks_of(frames, FRAMES_PER_WRITE)
        self.stream = stream = await open_stream(env.s.broker)
        while self.pulls < MAX_REQUESTS:
            for data, n in chunks:
                try:
                    await stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    self.closed_at = self.now()
                    self.close_error = str(exc) or type(exc).__name__
                    return
                self.pulls += n
                self.nbytes += len(data)
                self.last_progress = self.now()

    async def finish(self, env: Env) -> None:
        if self.stream is not None:
            self.unread = unread_bytes(self.stream)
            await self.stream.aclose()

    def lines(self) -> list[str]:
        end = self.span()
        line = (f"{self.pulls:,} pulls written ({self.nbytes / 1e6:.1f} MB) on one connection, "
                f"answers never read; each asks {self.batch} of the {self.filled:,} 1 KiB "
                f"messages of {self.topic} queue 0")
        stop = self.closed_at if self.closed_at is not None else end
        if stop - self.last_progress > 1.0:
            line += (f"; writes blocked from {self.last_progress:.1f}s on (the broker stopped "
                     f"reading)")
        if self.closed_at is not None:
            line += f"; the broker closed the connection at {self.closed_at:.1f}s ({self.close_error})"
        else:
            line += "; the connection was still open at the end of the window"
        if self.unread is not None:
            line += f"; {self.unread / 1e6:.1f} MB of answers sat unread in our receive buffer"
        return [line]


# ---- 2. heartbeat flood ------------------------------------------------------------------------


class HeartbeatFlood(Attack):
    """One connection writes HEART_BEAT requests as fast as it can (at most
    ``window`` unanswered) and reads the answers."""

    kind = "heartbeat-flood"

    def __init__(self, unanswered: int) -> None:
        super().__init__()
        self.max_unanswered = unanswered
        self.sent = 0
        self.requests = 0  # requests the broker sent us (NOTIFY_CONSUMER_IDS_CHANGED)
        self.answered = 0
        self.codes: Counter[str] = Counter()
        self.closed_at: float | None = None
        self._room: trio.Event | None = None

    async def run(self, env: Env) -> None:
        body = heartbeat_body("127.0.0.1@attack-heartbeat-flood",
                              consumer_group="AttackFloodConsumer", topic=env.s.probe_topic,
                              producer_group="AttackFloodProducer")
        frames = [encode_frame(RemotingCommand.request(RequestCode.HEART_BEAT, {}, body).encode())
                  for _ in range(1024)]
        chunks = chunks_of(frames, FRAMES_PER_WRITE)
        stream = await open_stream(env.s.broker)
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(self._read, stream, nursery.cancel_scope)
            await self._write(stream, chunks)
            nursery.cancel_scope.cancel()

    async def _write(self, stream: trio.SocketStream, chunks: list[tuple[bytes, int]]) -> None:
        while self.sent < MAX_REQUESTS:
            for data, n in chunks:
                while self.sent - self.answered + n > self.max_unanswered:  # until answers come
                    self._room = trio.Event()
                    await self._room.wait()
                try:
                    await stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self._closed()
                    return
                self.sent += n

    async def _read(self, stream: trio.SocketStream, scope: trio.CancelScope) -> None:
        decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
        while True:  # ends when the broker closes, or by the window's end
            try:
                data = await stream.receive_some(RECEIVE_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            if not data:
                self._closed()
                scope.cancel()
                return
            for payload in decoder.feed(data):
                cmd = RemotingCommand.decode(payload)
                if not cmd.is_response:
                    self.requests += 1
                    continue
                self.codes[code_name(cmd.code, True)] += 1
                self.answered += 1
            if self._room is not None:
                self._room.set()

    def _closed(self) -> None:
        if self.closed_at is None:
            self.closed_at = self.now()

    def lines(self) -> list[str]:
        span = self.span()
        busy = self.codes.get("SYSTEM_BUSY", 0)
        share = f" ({busy / self.answered:.0%} busy)" if self.answered else ""
        line = (f"{self.sent:,} heartbeats written, {self.answered:,} answered "
                f"({self.answered / span if span > 0 else 0:,.0f}/s, at most "
                f"{self.max_unanswered} unanswered): {counts_text(self.codes)}{share}")
        if self.requests:
            line += f"; {self.requests:,} requests from the broker (not answered)"
        if self.closed_at is not None:
            line += f"; the broker closed the connection at {self.closed_at:.1f}s"
        else:
            line += "; the connection was still open at the end of the window"
        return [line]


# ---- 3. idle and slow-frame connections ---------------------------------------------------------


class IdleConns(Attack):
    """``slow`` connections that announce a 1 MiB frame and send one byte a
    second (opened first), then ``idle`` connections that send nothing."""

    kind = "idle-conns"
    FRAME = 1 * MiB

    def __init__(self, idle: int, slow: int, concurrency: int) -> None:
        super().__init__()
        self.idle, self.slow, self.concurrency = idle, slow, concurrency
        self.records: list[ConnRecord] = []
        self.opening_took: float | None = None

    async def run(self, env: Env) -> None:
        host, port = split_addr(env.s.broker)
        limit = trio.CapacityLimiter(self.concurrency)
        async with trio.open_nursery() as nursery:
            for slow, count in ((True, self.slow), (False, self.idle)):
                done = trio.Event()
                left = [count]
                for _ in range(count):
                    rec = ConnRecord(slow)
                    self.records.append(rec)
                    nursery.start_soon(self._conn, rec, host, port, limit, left, done)
                if count:
                    await done.wait()  # every connect of this kind tried: then the next kind
            self.opening_took = self.now()

    async def _conn(self, rec: ConnRecord, host: str, port: int, limit: trio.CapacityLimiter,
                    left: list[int], done: trio.Event) -> None:
        try:
            async with limit:
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    stream = await trio.open_tcp_stream(host, port)
        except (OSError, trio.TooSlowError) as exc:
            rec.connect_error = "timeout" if isinstance(exc, trio.TooSlowError) else (
                type(exc).__name__)
            return
        else:
            rec.connected = self.now()
        finally:
            left[0] -= 1
            if left[0] == 0:
                done.set()
        async with stream, trio.open_nursery() as nursery:
            if rec.slow:
                nursery.start_soon(self._trickle, stream, rec, nursery.cancel_scope)
            await self._until_closed(stream, rec)
            nursery.cancel_scope.cancel()

    async def _until_closed(self, stream: trio.SocketStream, rec: ConnRecord) -> None:
        while True:  # ends when the broker closes (or by the window's end)
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            if not data:
                if rec.closed is None:
                    rec.closed = self.now()
                return

    async def _trickle(self, stream: trio.SocketStream, rec: ConnRecord,
                       scope: trio.CancelScope) -> None:
        try:
            await stream.send_all(FRAME_HEADER.pack(self.FRAME))
            for _ in range(self.FRAME):  # bounded: one byte a second, the window ends first
                await trio.sleep(1.0)
                await stream.send_all(b"x")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            if rec.closed is None:
                rec.closed = self.now()
            scope.cancel()

    def lines(self) -> list[str]:
        slow = [r for r in self.records if r.slow]
        idle = [r for r in self.records if not r.slow]
        out = [conns_line(f"slow-frame connections (a {self.FRAME // MiB} MiB frame announced, "
                          "then 1 byte/s; opened first)", self.slow, conns_report(slow)),
               conns_line("idle connections (nothing sent)", self.idle, conns_report(idle))]
        if self.opening_took is not None:
            out.append(f"every connect tried within {self.opening_took:.1f}s "
                       f"({self.concurrency} at a time)")
        return out


# ---- 4. held pulls -----------------------------------------------------------------------------


class HeldPulls(Attack):
    """``holds`` long-polling pulls on queue 0 of the probe topic for a tag that
    matches nothing, ``per_conn`` on a connection; each is pulled again when
    answered (after a short pause when answered at once, so it never spins)."""

    kind = "held-pulls"

    def __init__(self, holds: int, per_conn: int, suspend_ms: int, tag: str) -> None:
        super().__init__()
        self.holds, self.per_conn, self.suspend_ms, self.tag = holds, per_conn, suspend_ms, tag
        self.clients: list[RemotingClient] = []
        self.start_offset = 0
        self.sent = 0
        self.first: Counter[str] = Counter()  # what became of each hold's first pull
        self.at_once = 0
        self.held_answered = 0
        self.pending = 0
        self.codes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    async def prepare(self, env: Env) -> None:
        # clients only: each connects on its first pull (an idle connection
        # opened now could be closed by the broker before the window)
        n = max(1, math.ceil(self.holds / self.per_conn))
        for _ in range(n):
            self.clients.append(await env.stack.enter_async_context(RemotingClient()))
        async with RemotingClient() as rc:
            self.start_offset = await queue_max_offset(rc, env.s.broker, env.s.probe_topic, 0)

    async def run(self, env: Env) -> None:
        async with trio.open_nursery() as nursery:
            for i in range(self.holds):
                nursery.start_soon(self._hold, env, self.clients[i // self.per_conn])

    async def _hold(self, env: Env, rc: RemotingClient) -> None:

        offset = self.start_offset
        first = True
        for _ in range(MAX_REQUESTS):  # bounded, and by the window's end
            h = PullMessageRequestHeader(
                "AttackHoldGroup", env.s.probe_topic, 0, offset, 32,
                sys_flag=PULL_FLAG_SUSPEND | PULL_FLAG_SUBSCRIPTION,
                suspend_timeout_millis=self.suspend_ms, subscription=self.tag)
            t0 = trio.current_time()
            self.sent += 1
            self.pending += 1
            try:  # cancelled at the window's end: still pending (held)
                r = await rc.invoke(env.s.broker, RemotingCommand.request(
                    RequestCode.PULL_MESSAGE, h.to_fields()), self.suspend_ms / 1000 + 30)
            except RemotingError as exc:
                self.pending -= 1
                self.errors[failure_kind(exc)] += 1
                if first:
                    self.first["failed"] += 1
                    first = False
                await trio.sleep(1.0)
                continue
            self.pending -= 1
            self.codes[code_name(r.code, True)] += 1
            at_once = trio.current_time() - t0 < AT_ONCE_S
            if at_once:
                self.at_once += 1
            else:
                self.held_answered += 1
            if first:
                self.first["answered at once" if at_once else "held, then answered"] += 1
                first = False
            with contextlib.suppress(Exception):
                offset = PullMessageResponseHeader.from_fields(r.ext_fields).next_begin_offset
            if at_once:
                await trio.sleep(0.05)

    def lines(self) -> list[str]:
        first = dict(self.first)
        first["held to the end"] = min(self.holds, self.sent) - sum(self.first.values())
        line = (f"{self.holds:,} long-polling pulls (tag {self.tag!r}, suspend "
                f"{self.suspend_ms} ms) on the probe topic's queue 0 over {len(self.clients)} "
                f"connections ({self.per_conn} each at most), each pulled again when answered; "
                f"first pulls: {counts_text(first)}; in all {self.sent:,} pulls: "
                f"{self.at_once:,} answered at once (within {AT_ONCE_S:g}s), "
                f"{self.held_answered:,} answered after being held, {self.pending:,} still held "
                f"at the end; answers: {counts_text(self.codes)}")
        if self.errors:
            line += f"; errors: {counts_text(self.errors)}"
        return [line]


# ---- 5. new consumer groups --------------------------------------------------------------------


class Groups(Attack):
    """``groups`` new consumer groups (one clustering consumer each, its own
    client id) send one HEART_BEAT each; SYSTEM_BUSY is retried after a
    back-off (0.05 s, doubling up to 1 s) until the window ends."""

    kind = "groups"

    def __init__(self, groups: int, concurrency: int, conns: int) -> None:
        super().__init__()
        self.groups, self.concurrency, self.conns = groups, concurrency, conns
        self.clients: list[RemotingClient] = []
        self.prefix = ""
        self.next = 0
        self.ok = 0
        self.busy = 0
        self.codes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.gave_up: Counter[str] = Counter()
        self.all_ok_at: float | None = None
        self.latencies: list[float] = []  # first heartbeat to SUCCESS, per group
        self.verified: list[str] = []

    async def prepare(self, env: Env) -> None:
        self.prefix = f"AttackGroup_{env.run_id}_"
        for _ in range(self.conns):  # each connects on its first heartbeat
            self.clients.append(await env.stack.enter_async_context(RemotingClient()))

    async def run(self, env: Env) -> None:
        async with trio.open_nursery() as nursery:
            for w in range(min(self.concurrency, self.groups)):
                nursery.start_soon(self._worker, env, self.clients[w % len(self.clients)])
        if self.ok == self.groups:
            self.all_ok_at = self.now()

    async def _worker(self, env: Env, rc: RemotingClient) -> None:
        while self.next < self.groups:  # bounded: each turn takes a group
            i = self.next
            self.next += 1
            await self._one(env, rc, i)

    async def _one(self, env: Env, rc: RemotingClient, i: int) -> None:
        group = f"{self.prefix}{i}"
        body = heartbeat_body(f"127.0.0.1@{group}", consumer_group=group, topic=env.s.probe_topic)
        backoff = 0.05
        t0 = trio.current_time()
        for _ in range(MAX_REQUESTS):  # bounded, and by the window's end
            try:
                r = await rc.invoke(env.s.broker, RemotingCommand.request(
                    RequestCode.HEART_BEAT, {}, body), REQUEST_TIMEOUT_S)
            except RemotingError as exc:
                self.errors[failure_kind(exc)] += 1
                await trio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            name = code_name(r.code, True)
            self.codes[name] += 1
            if r.code == ResponseCode.SUCCESS:
                self.ok += 1
                self.latencies.append(trio.current_time() - t0)
                return
            if r.code != ResponseCode.SYSTEM_BUSY:
                self.gave_up[name] += 1
                return
            self.busy += 1
            await trio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def finish(self, env: Env) -> None:
        from client.admin import MQAdmin

        groups = await fetch_table(env.s.broker, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
                                   "subscriptionGroupTable")
        topics = await fetch_table(env.s.broker, RequestCode.GET_ALL_TOPIC_CONFIG,
                                   "topicConfigTable")
        retry_prefix = RETRY_GROUP_TOPIC_PREFIX + self.prefix
        ours = sum(1 for g in groups if g.startswith(self.prefix))
        retry = sum(1 for t in topics if t.startswith(retry_prefix))
        all_retry = sum(1 for t in topics if t.startswith(RETRY_GROUP_TOPIC_PREFIX))
        self.verified.append(
            f"the broker holds {ours:,} of this run's subscription groups and {retry:,} of "
            f"their %RETRY% topics ({all_retry:,} %RETRY% topics, {len(topics):,} topics and "
            f"{len(groups):,} groups in all)")
        t0 = trio.current_time()
        listed = 0
        async with MQAdmin(env.s.namesrv, timeout=30) as admin:
            with trio.move_on_after(30):
                while True:  # bounded by the move_on_after
                    names = await admin.topic_list()
                    listed = sum(1 for t in names if t.startswith(retry_prefix))
                    if listed >= retry:
                        break
                    await trio.sleep(0.5)
        self.verified.append(f"the name server lists {listed:,} of those %RETRY% topics "
                             f"(looked for {trio.current_time() - t0:.1f}s)")

    def lines(self) -> list[str]:
        p50, p99, top = latency_summary(self.latencies)
        line = (f"{self.groups:,} new groups ({self.prefix}*), one heartbeat each, "
                f"{self.concurrency} in flight over {len(self.clients)} connections: "
                f"{self.ok:,} answered SUCCESS")
        if self.all_ok_at is not None:
            line += f", all of them {self.all_ok_at:.1f}s after the start"
        else:
            line += f", {self.groups - self.ok:,} not (window over or given up)"
        line += (f"; {self.busy:,} SYSTEM_BUSY answers retried; first heartbeat to SUCCESS "
                 f"p50={ms(p50)} p99={ms(p99)} max={ms(top)}; answers: {counts_text(self.codes)}")
        if self.errors:
            line += f"; errors: {counts_text(self.errors)}"
        if self.gave_up:
            line += f"; given up on: {counts_text(self.gave_up)}"
        return [line, *self.verified]


# ---- 6. topics ---------------------------------------------------------------------------------


class Topics(Attack):
    """``topics`` new topics through the admin API, ``concurrency`` in flight;
    route look-ups of the probe topic every ``interval`` meanwhile."""

    kind = "topics"

    def __init__(self, topics: int, concurrency: int, interval: float, block: int) -> None:
        super().__init__()
        self.topics, self.concurrency, self.interval, self.block = (
            topics, concurrency, interval, block)
        self.prefix = ""
        self.done_at: list[float] = []
        self.failures: Counter[str] = Counter()
        self.created_by: float | None = None
        self.lookups: list[tuple[float, float]] = []  # (at, latency)
        self.lookup_errors: Counter[str] = Counter()
        self.listed: str = ""
        self.admin: MQAdmin | None = None
        self.lookup_admin: MQAdmin | None = None

    async def prepare(self, env: Env) -> None:
        from client.admin import MQAdmin

        self.prefix = f"AttackTopic_{env.run_id}_"
        self.admin = await env.stack.enter_async_context(MQAdmin(env.s.namesrv, timeout=30))
        self.lookup_admin = await env.stack.enter_async_context(MQAdmin(env.s.namesrv))

    async def run(self, env: Env) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._lookups, env)
            await self._create_all(env)
            self.created_by = self.now()
            # look-ups go on to the window's end: the broker is still registering

    async def _create_all(self, env: Env) -> None:
        limit = trio.Semaphore(self.concurrency)
        async with trio.open_nursery() as nursery:
            for i in range(self.topics):
                await limit.acquire()
                nursery.start_soon(self._create, env, f"{self.prefix}{i}", limit)

    async def _create(self, env: Env, topic: str, limit: trio.Semaphore) -> None:
        from client.admin import MQAdminError

        assert self.admin is not None
        try:
            await self.admin.create_topic(topic, broker_addr=env.s.broker, read_queue_nums=4,
                                          write_queue_nums=4)
            self.done_at.append(self.now())
        except MQAdminError as exc:
            self.failures[failure_kind(exc)] += 1
        finally:
            limit.release()

    async def _lookups(self, env: Env) -> None:
        from client.admin import MQAdminError

        assert self.lookup_admin is not None
        nxt = trio.current_time()
        for _ in range(MAX_REQUESTS):  # bounded, and by the window's end
            await trio.sleep_until(nxt)
            t0 = time.perf_counter()
            try:
                await self.lookup_admin.topic_route(env.s.probe_topic)
                self.lookups.append((self.now(), time.perf_counter() - t0))
            except MQAdminError as exc:
                self.lookup_errors[failure_kind(exc)] += 1
            nxt = max(nxt + self.interval, trio.current_time())

    async def finish(self, env: Env) -> None:
        assert self.admin is not None
        t0 = trio.current_time()
        listed = 0
        with trio.move_on_after(30):
            while True:  # bounded by the move_on_after
                names = await self.admin.topic_list()
                listed = sum(1 for t in names if t.startswith(self.prefix))
                if listed >= len(self.done_at):
                    break
                await trio.sleep(0.5)
        self.listed = (f"the name server lists {listed:,} of them "
                       f"(looked for {trio.current_time() - t0:.1f}s after the window)")

    def lines(self) -> list[str]:
        n = len(self.done_at)
        span = self.done_at[-1] if self.done_at else 0.0
        head = (f"{n:,}/{self.topics:,} topics created ({self.prefix}*, 4 queues) with "
                f"{self.concurrency} in flight in {span:.1f}s ({n / span if span else 0:,.0f}/s), "
                f"{sum(self.failures.values()):,} failed")
        if self.failures:
            head += f" ({counts_text(self.failures)})"
        if self.created_by is None:
            head += "; the window ended before the last one"
        rates = f"creations/s per {self.block:,}: {rates_text(block_rates(self.done_at, self.block), self.block)}"
        end = self.created_by if self.created_by is not None else math.inf
        during = [lat for at, lat in self.lookups if at <= end]
        after = [lat for at, lat in self.lookups if at > end]
        look = (f"route look-ups of the probe topic every {self.interval * 1e3:g}ms: "
                f"{len(during):,} while creating, {latency_text(during)}")
        if after:
            look += f"; {len(after):,} after the last creation, {latency_text(after)}"
        if self.lookup_errors:
            look += f"; failed: {counts_text(self.lookup_errors)}"
        return [head, rates, look] + ([self.listed] if self.listed else [])


# ---- the commands ------------------------------------------------------------------------------


def common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("-n", "--namesrvAddr", "namesrv", default="127.0.0.1:9876",
                     show_default=True, help=NAMESRV_HELP),
        click.option("-b", "--broker", "broker", required=True, help="The broker's address."),
        click.option("--broker-pid", type=click.IntRange(min=1), default=None,
                     help="Sample this process's VmRSS (the broker's) every 0.2 s."),
        click.option("-d", "--duration", type=click.FloatRange(0.5, 3600), default=30.0,
                     show_default=True, help="Seconds the attack (and the probe) run."),
        click.option("--settle", type=click.FloatRange(0, 600), default=10.0, show_default=True,
                     help="Seconds after the attack before the last RSS sample."),
        click.option("--probe-topic", default="AttackProbe", show_default=True),
        click.option("--probe-rate", type=click.IntRange(1, 10_000), default=200,
                     show_default=True, help="Probe sends per second (one at a time)."),
        click.option("--probe-timeout", type=click.FloatRange(0.1, 60), default=3.0,
                     show_default=True, help="Seconds before a probe send is a failure."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def settings(kw: dict[str, Any]) -> Settings:
    return Settings(namesrv=kw.pop("namesrv"), broker=kw.pop("broker"),
                    broker_pid=kw.pop("broker_pid"), duration=kw.pop("duration"),
                    settle=kw.pop("settle"), probe_topic=kw.pop("probe_topic"),
                    probe_rate=kw.pop("probe_rate"), probe_timeout=kw.pop("probe_timeout"))


def execute(s: Settings, a: Attack) -> None:
    from client.admin import MQAdminError
    from client.errors import MQClientError

    try:
        trio.run(run_attack, s, a, click.echo)
    except BaseException as exc:
        leaf = exc
        while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
            leaf = leaf.exceptions[0]
        if isinstance(leaf, click.ClickException):
            raise leaf from None
        if isinstance(leaf, (MQClientError, MQAdminError, RemotingError, OSError,
                             trio.TooSlowError)):
            raise click.ClickException(f"{type(leaf).__name__}: {leaf}") from exc
        raise


@click.group("attack", context_settings={"help_option_names": ["-h", "--help"]})
def attack() -> None:
    """Hostile and broken clients against a running name server and broker,
    with a probe client's latency and the broker's RSS meanwhile."""


@attack.command("unread-pulls")
@common_options
@click.option("--fill-topic", default="AttackPullFill", show_default=True,
              help="A one-queue topic filled with --fill 1 KiB messages (once).")
@click.option("--fill", type=click.IntRange(1, 1_000_000), default=10_000, show_default=True)
@click.option("--batch", type=click.IntRange(1, 32), default=32, show_default=True,
              help="Messages each pull asks for.")
def unread_pulls(fill_topic: str, fill: int, batch: int, **kw: Any) -> None:
    """One connection writes pulls as fast as it can and never reads an answer."""
    execute(settings(kw), UnreadPulls(fill_topic, fill, batch))


@attack.command("heartbeat-flood")
@common_options
@click.option("--window", type=click.IntRange(1, 100_000), default=1000, show_default=True,
              help="Heartbeats written and not answered yet, at most.")
def heartbeat_flood(window: int, **kw: Any) -> None:
    """One connection writes HEART_BEAT requests as fast as it can and reads the answers."""
    execute(settings(kw), HeartbeatFlood(window))


@attack.command("idle-conns")
@common_options
@click.option("-c", "--conns", type=click.IntRange(0, 60_000), default=2000, show_default=True,
              help="Idle connections.")
@click.option("-m", "--slow", type=click.IntRange(0, 60_000), default=200, show_default=True,
              help="Connections that announce a 1 MiB frame and send a byte a second.")
@click.option("--connect-concurrency", type=click.IntRange(1, 10_000), default=64,
              show_default=True)
def idle_conns(conns: int, slow: int, connect_concurrency: int, **kw: Any) -> None:
    """Many connections that send nothing, and some that send a frame a byte a second."""
    execute(settings(kw), IdleConns(conns, slow, connect_concurrency))


@attack.command("held-pulls")
@common_options
@click.option("-H", "--holds", type=click.IntRange(1, 1_000_000), default=5000,
              show_default=True, help="Long-polling pulls held at once.")
@click.option("--per-conn", type=click.IntRange(1, 1_000_000), default=1000, show_default=True,
              help="Pulls per connection (the broker's maxHeldPullsPerConnection is 1,024).")
@click.option("--suspend-ms", type=click.IntRange(1, 3_600_000), default=30_000,
              show_default=True, help="The pulls' suspend time (the broker caps it).")
@click.option("--tag", default="AttackNoSuchTag", show_default=True,
              help="The pulls' subscription: a tag the probe's messages never have.")
def held_pulls(holds: int, per_conn: int, suspend_ms: int, tag: str, **kw: Any) -> None:
    """Long-polling pulls on the probe's queue for a tag nothing has."""
    execute(settings(kw), HeldPulls(holds, per_conn, suspend_ms, tag))


@attack.command("groups")
@common_options
@click.option("-g", "--groups", type=click.IntRange(1, 1_000_000), default=10_000,
              show_default=True)
@click.option("-w", "--concurrency", type=click.IntRange(1, 10_000), default=64,
              show_default=True, help="Heartbeats in flight.")
@click.option("--conns", type=click.IntRange(1, 1000), default=4, show_default=True)
def groups(groups: int, concurrency: int, conns: int, **kw: Any) -> None:
    """New consumer groups, one heartbeat each; then count their %RETRY% topics."""
    execute(settings(kw), Groups(groups, concurrency, conns))


@attack.command("topics")
@common_options
@click.option("-t", "--topics", type=click.IntRange(1, 1_000_000), default=10_000,
              show_default=True)
@click.option("-w", "--concurrency", type=click.IntRange(1, 1000), default=16,
              show_default=True, help="Creations in flight.")
@click.option("--lookup-interval", type=click.FloatRange(0.001, 10), default=0.01,
              show_default=True, help="Seconds between route look-ups.")
@click.option("--per", type=click.IntRange(1, 1_000_000), default=1000, show_default=True,
              help="Report creations/s per this many topics.")
def topics(topics: int, concurrency: int, lookup_interval: float, per: int,
           **kw: Any) -> None:
    """New topics through the admin API; route look-up latency meanwhile."""
    execute(settings(kw), Topics(topics, concurrency, lookup_interval, per))


# ---- the probe process's entry point -----------------------------------------------------------


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-n", "--namesrvAddr", "namesrv", required=True)
@click.option("-t", "--topic", required=True)
@click.option("--broker-name", required=True)
@click.option("--rate", type=click.IntRange(1, 10_000), default=200)
@click.option("--size", type=click.IntRange(0, 4 * MiB), default=1024)
@click.option("--timeout", type=click.FloatRange(0.1, 60), default=3.0)
@click.option("--max-seconds", type=click.FloatRange(1, 7200), default=120.0)
def probe_main(namesrv: str, topic: str, broker_name: str, rate: int, size: int, timeout: float,
               max_seconds: float) -> None:
    """The probe (started by ``mqbench attack``): JSON lines on stdout; reads
    ``go`` and ``stop`` lines on stdin."""

    def out(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    async def main() -> None:
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        async with stdin:
            await probe_run(namesrv, topic, broker_name, rate, size, timeout, max_seconds,
                            LineReader(stdin), out)

    trio.run(main)


if __name__ == "__main__":
    from protocol.trio.logs import configure_logging

    configure_logging("WARNING")
    probe_main()
