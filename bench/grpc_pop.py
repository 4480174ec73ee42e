"""ReceiveMessage + AckMessage over gRPC: how fast RocketMQ's official Python client 5.x
consumes messages that are already there.

    .venv/bin/python -m bench.grpc_pop [--count N] [--size BYTES]

Starts a name server and a broker with enableGrpc (separate processes, free 127.0.0.1
ports, a temporary store) and a topic of 4 queues; the official SimpleConsumer
(tests/integration/rmq5_consumer.py ``consume``, in .venv-rmq5: make rmq5) makes its first
receive, then our SDK sends COUNT messages of SIZE bytes over remoting (faster than the
consumer takes them) while the consumer receives (32 at a time) and acks each one. Timed
from the first send to the COUNT-th ack; the broker's CPU over the same span, the sends'
included. Prints one line.
"""

from __future__ import annotations

import json
import queue
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import click
import trio

from bench.grpc_send import cpu_seconds
from client import Message, Producer
from client.admin import MQAdmin
from tests.integration.cluster import Cluster, free_port
from tests.integration.test_grpc_official_client import RMQ5

TOPIC = "BenchGrpcPop"
GROUP = "bench-grpc-pop"
CONSUMER = Path(__file__).resolve().parent.parent / "tests" / "integration" / "rmq5_consumer.py"
READY_S = 60.0
# the whole run is given up after this long plus a second per 50 messages
GIVE_UP_S = 60.0


def lines(stream: object) -> queue.Queue[str]:
    """The lines of ``stream`` as a reader thread gets them ("" at its end)."""
    out: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:  # type: ignore[attr-defined]
            out.put(line)
        out.put("")
    threading.Thread(target=read, daemon=True).start()
    return out


async def fill(ns_addr: str, count: int, size: int) -> None:
    async with Producer("bench-grpc-pop-fill", ns_addr) as producer:
        for _ in range(count):
            await producer.send(Message(TOPIC, b"x" * size))


def measure(count: int, size: int) -> tuple[float, float]:
    """(seconds, broker CPU seconds) for ``count`` messages received and acked."""
    assert RMQ5 is not None
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp))
        consumer: subprocess.Popen[str] | None = None
        try:
            ns = cluster.namesrv()
            grpc_port = free_port(1)
            broker = cluster.broker("bench-grpc-pop", ns.addr, enableGrpc="true",
                                    grpcListenPort=grpc_port)
            assert broker.proc is not None

            async def setup() -> None:
                async with MQAdmin(ns.addr) as admin:
                    await admin.create_topic(TOPIC, broker_addr=broker.addr,
                                             read_queue_nums=4, write_queue_nums=4)
            trio.run(setup)
            consumer = subprocess.Popen(
                [RMQ5, str(CONSUMER), "consume", f"127.0.0.1:{grpc_port}", TOPIC, GROUP],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert consumer.stdout is not None and consumer.stdin is not None
            got = lines(consumer.stdout)

            def next_line(deadline: float) -> str:
                try:
                    line = got.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise click.ClickException("the 5.x consumer is too slow: given up") from None
                if not line:
                    raise click.ClickException("the 5.x consumer ended early")
                return line

            ready_by = time.monotonic() + READY_S
            while not json.loads(next_line(ready_by)).get("ready"):
                pass
            started = time.perf_counter()
            cpu0 = cpu_seconds(broker.proc.pid)
            trio.run(fill, ns.addr, count, size)
            done_by = time.monotonic() + GIVE_UP_S + count / 50
            acked = 0
            while acked < count:
                if json.loads(next_line(done_by)).get("acked"):
                    acked += 1
            seconds = time.perf_counter() - started
            cpu = cpu_seconds(broker.proc.pid) - cpu0
            consumer.stdin.close()
            consumer.wait(timeout=30)
            return seconds, cpu
        finally:
            if consumer is not None and consumer.poll() is None:
                consumer.kill()
                consumer.wait()
            cluster.close()


@click.command()
@click.option("--count", default=3000, show_default=True)
@click.option("--size", default=1024, show_default=True)
def main(count: int, size: int) -> None:
    if RMQ5 is None:
        raise click.UsageError("no .venv-rmq5 with the official 5.x client: make rmq5")
    seconds, cpu = measure(count, size)
    click.echo(f"{count} messages of {size} B received and acked by the official Python 5.x "
               f"over gRPC: {count / seconds:.0f} msg/s, broker CPU {cpu / count * 1e6:.0f} "
               "us/msg (our SDK's sends over remoting included)")


if __name__ == "__main__":
    main()
