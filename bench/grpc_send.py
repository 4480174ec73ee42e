"""The official RocketMQ Python client 5.x over gRPC next to our SDK over remoting, sending
to the same fresh broker, one send in flight each.

    .venv/bin/python -m bench.grpc_send [--count N] [--size BYTES]

Starts a name server and a broker with enableGrpc (separate processes, free 127.0.0.1
ports, a temporary store), creates a topic of 4 queues, then times COUNT sends of SIZE
bytes: the 5.x client's ``Producer.send`` (synchronous, in .venv-rmq5: make rmq5; started
and warmed up before its timer, tests/integration/rmq5_producer.py) and our SDK's
``Producer.send`` (awaited one by one, after one warm-up send). Prints one line each.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import click
import trio

from client import Message, Producer
from client.admin import MQAdmin
from tests.integration.cluster import Cluster, free_port
from tests.integration.test_grpc_official_client import RMQ5, SCRIPT

TOPIC = "BenchGrpc"


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def p50_us(latencies: list[float]) -> float:
    return statistics.median(latencies) * 1e6 if latencies else float("nan")


async def ours(ns_addr: str, count: int, size: int) -> tuple[float, list[float]]:
    """(seconds for ``count`` sends, each send's seconds)."""
    latencies: list[float] = []
    async with Producer("bench-grpc-sdk", ns_addr) as producer:
        await producer.send(Message(TOPIC, b"w" * size))
        started = time.perf_counter()
        for _ in range(count):
            t0 = time.perf_counter()
            await producer.send(Message(TOPIC, b"x" * size))
            latencies.append(time.perf_counter() - t0)
        return time.perf_counter() - started, latencies


@click.command()
@click.option("--count", default=5000, show_default=True)
@click.option("--size", default=1024, show_default=True)
def main(count: int, size: int) -> None:
    if RMQ5 is None:
        raise click.UsageError("no .venv-rmq5 with the official 5.x client: make rmq5")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp))
        try:
            ns = cluster.namesrv()
            grpc_port = free_port(1)
            broker = cluster.broker("bench-grpc", ns.addr, enableGrpc="true",
                                    grpcListenPort=grpc_port)

            async def setup() -> None:
                async with MQAdmin(ns.addr) as admin:
                    await admin.create_topic(TOPIC, broker_addr=broker.addr,
                                             read_queue_nums=4, write_queue_nums=4)
            trio.run(setup)
            assert broker.proc is not None
            cpu0 = cpu_seconds(broker.proc.pid)
            done = subprocess.run([RMQ5, str(SCRIPT), f"127.0.0.1:{grpc_port}", TOPIC,
                                   str(count), "--body-size", str(size)],
                                  capture_output=True, check=True, timeout=900)
            result = json.loads(done.stdout)
            if result["failed"]:
                raise click.ClickException(f"5.x sends failed: {result['failed'][:3]}")
            official = result["seconds"]
            official_p50 = p50_us(result.get("latencies", []))
            cpu1 = cpu_seconds(broker.proc.pid)
            sdk, sdk_latencies = trio.run(ours, ns.addr, count, size)
            cpu2 = cpu_seconds(broker.proc.pid)
        finally:
            cluster.close()
    click.echo(f"{count} sends of {size} B, one in flight:")
    click.echo(f"  official Python 5.x over gRPC  {count / official:9.0f} msg/s   p50 "
               f"{official_p50:6.0f} us   broker CPU {(cpu1 - cpu0) / count * 1e6:6.0f} us/msg "
               "(start-up and route look-ups too)")
    click.echo(f"  our SDK over remoting          {count / sdk:9.0f} msg/s   p50 "
               f"{p50_us(sdk_latencies):6.0f} us   broker CPU "
               f"{(cpu2 - cpu1) / count * 1e6:6.0f} us/msg")


if __name__ == "__main__":
    main()
