"""Redis Streams, measured the way ``make bench`` measures this project.

    .venv/bin/python -m bench.redis_streams [--count N] [--single N] [--json PATH]

The issue this project's performance is held to compares it with Redis 7
Streams on the same machine. This starts ``redis-server`` (from PATH; on
Debian ``apt-get install redis-server``) twice on a free 127.0.0.1 port with a
temporary directory: ``appendonly yes`` with ``appendfsync everysec`` (the
counterpart of ASYNC_FLUSH), then ``appendfsync always`` (SYNC_FLUSH). Against
each, from one Python client over one connection (plain sockets, RESP2, no
client library):

    batched  XADD of 1 KiB bodies in pipelines of 100          msg/s, p99 per pipeline
    single   one XADD at a time                                 p50/p99 µs
    read     (everysec only) XREAD COUNT 32 from the start      msg/s

and prints one table, figure | value | command, with the rows named as
``make bench`` names its own. The servers are stopped and the directory
removed whatever happens.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from bench.all import free_port, number_text, render_table, stop_process, wait_until
from bench.stats import latency_us, per_second

STREAM = b"bench"
PIPELINE = 100
READ_COUNT = 32
BODY = b"x" * 1024
START_TIMEOUT = 30.0


class RespError(Exception):
    """Redis answered an error, or something that is not RESP."""


def encode_command(*args: bytes) -> bytes:
    """A RESP2 array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_reply(f: Any) -> Any:
    """One RESP2 reply from the buffered reader ``f``: bytes, int, None or a
    list of them. Raises RespError on an error reply or a broken stream."""
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise RespError("connection closed mid-reply")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RespError(rest.decode(errors="replace"))
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        if len(data) != n + 2:
            raise RespError("connection closed mid-reply")
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise RespError(f"not a RESP reply: {line[:40]!r}")


class Redis:
    """One blocking connection (TCP_NODELAY) speaking RESP2."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def pipeline(self, commands: Sequence[bytes]) -> list[Any]:
        """Send encoded ``commands`` at once; their replies, in order."""
        self.sock.sendall(b"".join(commands))
        return [read_reply(self.reader) for _ in commands]

    def call(self, *args: bytes) -> Any:
        return self.pipeline([encode_command(*args)])[0]

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def start_server(root: Path, fsync: str) -> tuple[subprocess.Popen[bytes], int]:
    """redis-server with an append-only file fsynced ``fsync`` (everysec/always)."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise click.ClickException("redis-server is not installed (Debian: apt-get install "
                                   "redis-server)")
    data = root / fsync
    data.mkdir(parents=True)
    port = free_port()
    with open(data / "redis.log", "ab") as log:
        proc = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
             "--appendonly", "yes", "--appendfsync", fsync, "--save", "",
             "--protected-mode", "yes"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def answers() -> bool:
        try:
            r = Redis(port)
        except OSError:
            return False
        try:
            return bool(r.call(b"PING") == b"PONG")
        except (OSError, RespError):
            return False
        finally:
            r.close()

    try:
        wait_until("redis-server answering", answers, START_TIMEOUT, lambda: proc.poll() is None)
    except BaseException:
        stop_process(proc)
        raise
    return proc, port


def batched(r: Redis, count: int) -> dict[str, Any]:
    """``count`` XADDs in pipelines of PIPELINE: msg/s, latency per pipeline."""
    xadd = encode_command(b"XADD", STREAM, b"*", b"body", BODY)
    lat: list[float] = []
    t0 = time.perf_counter()
    sent = 0
    while sent < count:
        n = min(PIPELINE, count - sent)
        s = time.perf_counter()
        r.pipeline([xadd] * n)
        lat.append(time.perf_counter() - s)
        sent += n
    elapsed = time.perf_counter() - t0
    return {"msgs_per_s": per_second(sent, elapsed), "count": sent, "latency_us": latency_us(lat)}


def single(r: Redis, count: int) -> dict[str, Any]:
    """``count`` XADDs, one in flight: latency per send."""
    xadd = encode_command(b"XADD", STREAM + b"-single", b"*", b"body", BODY)
    lat: list[float] = []
    t0 = time.perf_counter()
    for _ in range(count):
        s = time.perf_counter()
        r.pipeline([xadd])
        lat.append(time.perf_counter() - s)
    elapsed = time.perf_counter() - t0
    return {"msgs_per_s": per_second(count, elapsed), "count": count, "latency_us": latency_us(lat)}


def read_all(r: Redis, count: int) -> dict[str, Any]:
    """XREAD COUNT READ_COUNT from the stream's start until ``count`` entries."""
    last = b"0-0"
    got = 0
    t0 = time.perf_counter()
    while got < count:
        reply = r.call(b"XREAD", b"COUNT", b"%d" % READ_COUNT, b"STREAMS", STREAM, last)
        if not reply:
            break
        entries = reply[0][1]
        got += len(entries)
        last = entries[-1][0]
    elapsed = time.perf_counter() - t0
    return {"msgs_per_s": per_second(got, elapsed), "count": got}


def run(count: int, singles: int, tmp_dir: str | None) -> dict[str, Any]:
    results: dict[str, Any] = {}
    root = Path(tempfile.mkdtemp(prefix="mq-bench-redis-", dir=tmp_dir))
    try:
        for fsync in ("everysec", "always"):
            proc, port = start_server(root, fsync)
            try:
                r = Redis(port)
                try:
                    results[f"batched_{fsync}"] = batched(r, count)
                    results[f"single_{fsync}"] = single(r, singles)
                    if fsync == "everysec":
                        results["read"] = read_all(r, count)
                finally:
                    r.close()
            finally:
                stop_process(proc)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


def table_rows(results: dict[str, Any], count: int, singles: int) -> list[tuple[str, str, str]]:
    """The rows ``make bench`` has for this project, for Redis."""
    def rate(key: str) -> str:
        r = results.get(key)
        return number_text(r["msgs_per_s"]) if r else "n/a"

    def pct(key: str, a: str, b: str, scale: float = 1.0, digits: int = 0) -> str:
        r = results.get(key)
        if not r:
            return "n/a"
        lat = r["latency_us"]
        return f"{number_text(lat[a] / scale, digits)} / {number_text(lat[b] / scale, digits)}"

    batch = f"XADD 1 KiB × {count:,}, pipelines of {PIPELINE}"
    one = f"XADD 1 KiB × {singles:,}, one in flight"
    return [
        ("batched produce ASYNC msg/s", rate("batched_everysec"), f"{batch}, appendfsync everysec"),
        ("consume pull msg/s", rate("read"), f"XREAD COUNT {READ_COUNT} from the start"),
        ("batched produce SYNC msg/s", rate("batched_always"), f"{batch}, appendfsync always"),
        ("single send ASYNC p50/p99 µs", pct("single_everysec", "p50", "p99"),
         f"{one}, appendfsync everysec"),
        ("single send SYNC p50/p99 µs", pct("single_always", "p50", "p99"),
         f"{one}, appendfsync always"),
        ("batched produce ASYNC request p99/p99.9 ms",
         pct("batched_everysec", "p99", "p99.9", 1e3, 2), "per pipeline, everysec"),
        ("batched produce SYNC request p99/p99.9 ms",
         pct("batched_always", "p99", "p99.9", 1e3, 2), "per pipeline, always"),
    ]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--count", type=click.IntRange(min=1), default=200_000, show_default=True,
              help="Messages for the batched XADDs (and then read back).")
@click.option("--single", "singles", type=click.IntRange(min=1), default=20_000,
              show_default=True, help="Single XADDs, one in flight.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the raw results to this file.")
@click.option("--tmp-dir", default=None, help="Where the servers' files go.")
def main(count: int, singles: int, json_path: Path | None, tmp_dir: str | None) -> None:
    """Redis Streams figures, for the rows of make bench."""
    results = run(count, singles, tmp_dir)
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2))
    click.echo(render_table(table_rows(results, count, singles)))


if __name__ == "__main__":
    main()
