"""How fast a new connection is served while many idle connections are open.

    .venv/bin/python -m bench.accept [--idle 2000] [--probes 200] [--bursts 1] [--settle]

Starts a name server (``python -m namesrv.cli``, a free 127.0.0.1 port, its
logs in a temporary directory), opens ``--idle`` connections to it from
127.0.0.2 .. 127.0.0.251 (loopback is 127.0.0.0/8; many source addresses, so
that a per-address limit does not refuse them) that never send a byte, then
times ``--probes`` new connections one after another from 127.0.0.1: connect,
send GET_ROUTEINFO_BY_TOPIC, read the answer. Prints p50/p90/p99/max in ms.

Without ``--settle`` the probes start as soon as the idle connections are
open on the client's side, while the server may still be accepting them (the
attack of issue row 16: a burst of connections, then a legitimate client);
with ``--settle`` they start once a probe is answered in under 50 ms.
``--bursts B`` opens the idle connections in B bursts, each followed by
probes/B probes, so that more than one probe meets a queue of accepts.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import trio

from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.frame import FRAME_HEADER, encode_frame
from tests.integration.cluster import free_port, wait_port

SOURCES = [f"127.0.0.{i}" for i in range(2, 252)]


async def open_idle(port: int, n: int, first: int = 0) -> list[trio.socket.SocketType]:
    socks = []
    for i in range(first, first + n):
        sock = trio.socket.socket()
        await sock.bind((SOURCES[i % len(SOURCES)], 0))
        await sock.connect(("127.0.0.1", port))
        socks.append(sock)
    return socks


async def probe(port: int) -> float:
    """Seconds from connect to a whole answer of one request on a new connection."""
    frame = encode_frame(RemotingCommand.request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "BenchAcceptNoSuchTopic"}).encode())
    start = time.perf_counter()
    sock = trio.socket.socket()
    try:
        await sock.connect(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await sock.send(frame)
        got = b""
        while len(got) < 4 or len(got) < 4 + FRAME_HEADER.unpack(got[:4])[0]:
            chunk = await sock.recv(65536)
            if not chunk:
                raise RuntimeError("the name server closed the probe connection")
            got += chunk
        return time.perf_counter() - start
    finally:
        sock.close()


async def run(port: int, idle: int, probes: int, bursts: int, settle: bool) -> list[float]:
    socks: list[trio.socket.SocketType] = []
    times: list[float] = []
    try:
        for b in range(bursts):
            socks += await open_idle(port, idle * (b + 1) // bursts - len(socks), len(socks))
            if settle:
                with trio.fail_after(60):
                    while await probe(port) > 0.05:
                        await trio.sleep(0.1)
            times += [await probe(port) for _ in range(probes * (b + 1) // bursts - len(times))]
        return times
    finally:
        for s in socks:
            s.close()


def pct(sorted_ms: list[float], p: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(len(sorted_ms) * p / 100))]


@click.command()
@click.option("--idle", default=2000, show_default=True, help="Idle connections to open first.")
@click.option("--probes", default=200, show_default=True, help="New connections timed.")
@click.option("--bursts", default=1, show_default=True, type=click.IntRange(min=1),
              help="Open the idle connections in this many bursts, probes after each.")
@click.option("--settle", is_flag=True, help="Wait until the server has caught up first.")
def main(idle: int, probes: int, bursts: int, settle: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-accept-") as tmp:
        port = free_port(1)
        with open(Path(tmp) / "namesrv.log", "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "namesrv.cli", "--port", str(port), "--log-level",
                 "WARNING", "--log-dir", str(Path(tmp) / "logs")],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_port(port, 30, proc=proc)
            times = trio.run(run, port, idle, probes, bursts, settle)
        finally:
            proc.terminate()
            proc.wait(20)
    ms = sorted(t * 1000 for t in times)
    click.echo(f"idle={idle} probes={probes} bursts={bursts} settle={settle}: p50={statistics.median(ms):.1f} "
               f"p90={pct(ms, 90):.1f} p99={pct(ms, 99):.1f} max={ms[-1]:.1f} ms")


if __name__ == "__main__":
    main()
