"""What controller mode costs in produce throughput, against plain SYNC_MASTER.

    .venv/bin/python -m bench.controller_cost [--seconds S] [--rounds R]
        [--controller min|all|both] [--json]

Groups of three brokers side by side on 127.0.0.1 (free ports, temporary
stores, ASYNC_FLUSH), each with its own name server:

    plain       a SYNC_MASTER and two SLAVEs (brokerId 0, 1, 2): a send is answered
                once one slave holds it (docs/replication.md)
    ctrl-min    three replicas in controller mode, the controller inside the name
                server, minInSyncReplicas=2, allAckInSyncStateSet=false: a send is
                answered once two members (the master and one slave) hold it, the
                same durability as plain (``--controller min``)
    ctrl-all    the same with allAckInSyncStateSet=true: a send is answered once
                every SyncStateSet member (all three) holds it (``--controller all``)

``--controller both`` (the default) starts all three groups. Then R rounds, each
running the same batched load against every group in turn (alternating, so all see
the same machine): one producer, batches of 32 messages of 1 KiB, 16 batches in
flight, for S seconds. Prints each round's messages per second, the medians and
each controller group's median over plain's, and the CPU time the group's three
brokers used per message acknowledged (from /proc; it moves less with the
machine's other load than the rates do). Short by default (3 rounds of 5 s).
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


async def start_controller(cluster: Cluster, all_ack: bool) -> tuple[str, str]:
    """(name server, elected master) of three replicas in controller mode
    (minInSyncReplicas=2, allAckInSyncStateSet ``all_ack``), once all three are in
    the SyncStateSet."""
    ns = cluster.namesrv(enableControllerInNamesrv="true",
                         controllerStorePath=cluster.root / "controller-store")
    props = {**replica_props(ns.addr, 10_000), **COMMON, "brokerName": "ctrl",
             "allAckInSyncStateSet": "true" if all_ack else "false"}
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


async def load(ns: str, seconds: float) -> tuple[int, float]:
    """Messages acknowledged (SEND_OK) over ``seconds`` of batched sends, and the
    seconds they took."""
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
    return acked, elapsed


def cpu_seconds(cluster: Cluster) -> float | None:
    """CPU time (user + system) the group's brokers used so far; None where
    /proc does not tell it."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for d in cluster.daemons:
        if d.proc is None or d.name.startswith(("namesrv", "controller")):
            continue
        try:
            stat = Path(f"/proc/{d.proc.pid}/stat").read_text()
        except OSError:
            return None
        fields = stat.rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / tick


# the groups a run starts, by --controller: (name, allAckInSyncStateSet or None: plain)
SETUPS: dict[str, list[tuple[str, bool | None]]] = {
    "min": [("plain", None), ("ctrl-min", False)],
    "all": [("plain", None), ("ctrl-all", True)],
    "both": [("plain", None), ("ctrl-min", False), ("ctrl-all", True)],
}
ROWS = {
    "plain": "plain SYNC_MASTER + 2 slaves (one slave acks)",
    "ctrl-min": "controller, minInSyncReplicas=2, allAck=false",
    "ctrl-all": "controller, allAckInSyncStateSet=true (all 3)",
}


async def measure(root: Path, seconds: float, rounds: int,
                  setups: list[tuple[str, bool | None]]
                  ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each group's messages per second by round, and the CPU its three brokers
    used per message (microseconds; rounds /proc could not measure left out)."""
    clusters = {name: Cluster(root / name) for name, _ in setups}
    for c in clusters.values():
        c.root.mkdir()
    try:
        name_servers: dict[str, str] = {}
        for name, all_ack in setups:
            cluster = clusters[name]
            if all_ack is None:
                ns, master = await trio.to_thread.run_sync(start_plain, cluster)
            else:
                ns, master = await start_controller(cluster, all_ack)
            await make_topic(ns, master)
            name_servers[name] = ns
        out: dict[str, list[float]] = {name: [] for name, _ in setups}
        cpu: dict[str, list[float]] = {name: [] for name, _ in setups}
        for r in range(rounds):
            for name, _ in setups:
                before = cpu_seconds(clusters[name])
                acked, elapsed = await load(name_servers[name], seconds)
                after = cpu_seconds(clusters[name])
                out[name].append(acked / elapsed)
                per_msg = ""
                if before is not None and after is not None and acked:
                    cpu[name].append((after - before) * 1e6 / acked)
                    per_msg = f", brokers' CPU {cpu[name][-1]:5.1f} us/msg"
                click.echo(f"round {r + 1} {name:<10} {acked / elapsed:9.0f} msg/s{per_msg} "
                           f"(load {os.getloadavg()[0]:.1f})", err=True)
        return out, cpu
    finally:
        for c in clusters.values():
            await trio.to_thread.run_sync(c.close)


@click.command()
@click.option("--seconds", default=5.0, show_default=True, type=click.FloatRange(1, 600),
              help="Load per round and setup.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 100))
@click.option("--controller", "which", default="both", show_default=True,
              type=click.Choice(sorted(SETUPS)),
              help="Controller groups against plain: min (allAckInSyncStateSet=false, "
                   "minInSyncReplicas=2: plain's durability), all (allAckInSyncStateSet"
                   "=true), both.")
@click.option("--json", "as_json", is_flag=True, help="The figures as one JSON line.")
def main(seconds: float, rounds: int, which: str, as_json: bool) -> None:
    """Batched produce on plain SYNC_MASTER and on controller mode, alternating."""
    setups = SETUPS[which]
    with tempfile.TemporaryDirectory(prefix="controller-cost-") as d:
        runs, cpu = trio.run(measure, Path(d), seconds, rounds, setups)
    medians = {name: statistics.median(rates) for name, rates in runs.items()}
    cpu_medians = {name: statistics.median(us) for name, us in cpu.items() if us}
    plain = medians["plain"]
    ratios = {name: m / plain for name, m in medians.items() if name != "plain"}
    load1 = os.getloadavg()[0]
    if as_json:
        click.echo(json.dumps({"runs": runs, "medians": medians, "ratios": ratios,
                               "cpu_us_per_msg": cpu, "cpu_medians": cpu_medians,
                               "load1": load1}))
        return
    click.echo(f"batched produce ({BATCH} x {SIZE} B, {IN_FLIGHT} in flight, {seconds:g} s x "
               f"{rounds} rounds, median)")
    for name, m in medians.items():
        us = f"   brokers' CPU {cpu_medians[name]:5.1f} us/msg" if name in cpu_medians else ""
        click.echo(f"{ROWS[name]:<48} {m:9.0f} msg/s{us}")
    for name, ratio in ratios.items():
        click.echo(f"{name + ' / plain':<48} {ratio:9.2f}")
    click.echo(f"(load average after: {load1:.2f})")


if __name__ == "__main__":
    main()
