"""What controller mode costs in produce throughput, against plain SYNC_MASTER.

    .venv/bin/python -m bench.controller_cost [--seconds S] [--rounds R] [--json]

Two groups of three brokers side by side on 127.0.0.1 (free ports, temporary
stores, ASYNC_FLUSH), each with its own name server:

    plain       a SYNC_MASTER and two SLAVEs (brokerId 0, 1, 2): a send is answered
                as SYNC_MASTER answers (docs/replication.md)
    controller  three replicas in controller mode, the controller inside the name
                server, minInSyncReplicas=2, allAckInSyncStateSet=true: a send is
                answered once every SyncStateSet member (all three) holds it

Then R rounds, each running the same batched load against plain, then controller
(alternating, so both see the same machine): one producer, batches of 32 messages
of 1 KiB, 16 batches in flight, for S seconds. Prints each round's messages per
second, the medians and controller/plain. Short by default (3 rounds of 5 s).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import click
import trio

from client import Message, Producer, SendStatus
from client.admin import MQAdmin
from client.admin_controller import ControllerAdmin
from tests.integration.cluster import Cluster
from tests.integration.failover import replica_props
from tests.waits import routed, wait_until

TOPIC = "CostTopic"
SIZE = 1024
BATCH = 32
IN_FLIGHT = 16
COMMON: dict[str, object] = {"flushDiskType": "ASYNC_FLUSH", "brokerIP1": "127.0.0.1"}


def start_plain(cluster: Cluster) -> tuple[str, str]:
    """(name server, master) of a SYNC_MASTER with two slaves."""
    ns = cluster.namesrv()
    master = cluster.broker("plain-0", ns.addr, True, brokerName="plain", brokerRole="SYNC_MASTER",
                            **COMMON)
    for i in (1, 2):
        cluster.broker(f"plain-{i}", ns.addr, True, brokerName="plain", brokerId=i,
                       brokerRole="SLAVE", **COMMON)
    return ns.addr, master.addr


async def start_controller(cluster: Cluster) -> tuple[str, str]:
    """(name server, elected master) of three replicas in controller mode, once all
    three are in the SyncStateSet."""
    ns = cluster.namesrv(enableControllerInNamesrv="true",
                         controllerStorePath=cluster.root / "controller-store")
    props = {**replica_props(ns.addr, 10_000), **COMMON, "brokerName": "ctrl"}
    brokers = {d.addr for d in (cluster.broker(f"ctrl-{i}", ns.addr, True, **props)
                                for i in range(3))}
    async with ControllerAdmin() as ctl:
        async def whole() -> str | None:
            table = (await ctl.sync_state_data(ns.addr, ["ctrl"])).replicas_info_table
            info = table.get("ctrl")
            if info is None or info.master_address not in brokers:
                return None
            if {r.broker_address for r in info.in_sync_replicas} != brokers:
                return None
            return info.master_address

        master = await wait_until(whole, 120, "a master and all three in sync", interval=0.2)
    return ns.addr, master


async def make_topic(ns: str, master: str) -> None:
    async with MQAdmin(ns) as admin:
        await admin.create_topic(TOPIC, broker_addr=master, read_queue_nums=4,
                                 write_queue_nums=4)
        await wait_until(routed(admin, TOPIC), 30, "topic routed")


async def load(ns: str, seconds: float) -> float:
    """Messages per second acknowledged (SEND_OK) over ``seconds`` of batched sends."""
    body = os.urandom(SIZE // 2).hex().encode()
    acked = 0
    async with Producer(f"cost-{time.monotonic_ns()}", ns) as p:
        await p.send_batch([Message(TOPIC, body) for _ in range(BATCH)])  # routes, connections
        deadline = trio.current_time() + seconds
        begun = time.monotonic()

        async def worker() -> None:
            nonlocal acked
            while trio.current_time() < deadline:
                r = await p.send_batch([Message(TOPIC, body) for _ in range(BATCH)])
                if r.send_status is SendStatus.SEND_OK:
                    acked += BATCH

        async with trio.open_nursery() as nursery:
            for _ in range(IN_FLIGHT):
                nursery.start_soon(worker)
        elapsed = time.monotonic() - begun
    return acked / elapsed


async def measure(root: Path, seconds: float, rounds: int) -> dict[str, list[float]]:
    plain_cluster, ctrl_cluster = Cluster(root / "plain"), Cluster(root / "controller")
    for c in (plain_cluster, ctrl_cluster):
        c.root.mkdir()
    try:
        plain_ns, plain_master = await trio.to_thread.run_sync(start_plain, plain_cluster)
        ctrl_ns, ctrl_master = await start_controller(ctrl_cluster)
        await make_topic(plain_ns, plain_master)
        await make_topic(ctrl_ns, ctrl_master)
        out: dict[str, list[float]] = {"plain": [], "controller": []}
        for r in range(rounds):
            for name, ns in (("plain", plain_ns), ("controller", ctrl_ns)):
                rate = await load(ns, seconds)
                out[name].append(rate)
                click.echo(f"round {r + 1} {name:<10} {rate:9.0f} msg/s", err=True)
        return out
    finally:
        await trio.to_thread.run_sync(plain_cluster.close)
        await trio.to_thread.run_sync(ctrl_cluster.close)


@click.command()
@click.option("--seconds", default=5.0, show_default=True, type=click.FloatRange(1, 600),
              help="Load per round and setup.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 100))
@click.option("--json", "as_json", is_flag=True, help="The figures as one JSON line.")
def main(seconds: float, rounds: int, as_json: bool) -> None:
    """Batched produce on plain SYNC_MASTER and on controller mode, alternating."""
    with tempfile.TemporaryDirectory(prefix="controller-cost-") as d:
        runs = trio.run(measure, Path(d), seconds, rounds)
    plain, ctrl = statistics.median(runs["plain"]), statistics.median(runs["controller"])
    load1 = os.getloadavg()[0]
    if as_json:
        click.echo(json.dumps({"runs": runs, "plain": plain, "controller": ctrl,
                               "ratio": ctrl / plain, "load1": load1}))
        return
    click.echo(f"batched produce ({BATCH} x {SIZE} B, {IN_FLIGHT} in flight, {seconds:g} s x "
               f"{rounds} rounds, median)")
    click.echo(f"plain SYNC_MASTER + 2 slaves        {plain:9.0f} msg/s")
    click.echo(f"controller mode, 3 replicas, all-ack {ctrl:9.0f} msg/s")
    click.echo(f"controller / plain                  {ctrl / plain:9.2f}")
    click.echo(f"(load average after: {load1:.2f})")


if __name__ == "__main__":
    main()
