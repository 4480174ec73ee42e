"""Automatic failover with real daemons: a name server, an ``mqcontroller`` and three
broker processes of one broker name in controller mode (SYNC_MASTER acks,
minInSyncReplicas=2, allAckInSyncStateSet=true). Used by test_failover.py and by
``python -m tests.integration.failover --heartbeat-ms 1000 --runs 3`` (figures:
write unavailability, from the master's kill -9 to the first SEND_OK on the new
master)."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import trio

from client import Message, Producer, PullConsumer, PullStatus, SendStatus
from client.admin import MQAdmin, MQAdminError
from client.admin_controller import ControllerAdmin
from client.errors import MQClientError
from protocol.controller import ReplicasInfo
from tests.integration.cluster import Cluster, Daemon
from tests.waits import routed, wait_until

BROKER_NAME = "broker-f"
TOPIC = "FailoverTopic"


@dataclass
class Figures:
    acked_before: int = 0
    acked_after: int = 0
    unavailable_s: float = 0.0  # kill -9 -> first SEND_OK on the new master
    elected_s: float = 0.0  # kill -9 -> the controller names a new master
    errors_while_down: int = 0
    notes: list[str] = field(default_factory=list)


def replica_props(controller: str, heartbeat_ms: int) -> dict[str, object]:
    """The keys of a replica of BROKER_NAME in controller mode."""
    return {
        "brokerName": BROKER_NAME, "enableControllerMode": "true",
        "controllerAddr": controller, "brokerRole": "SYNC_MASTER",
        "minInSyncReplicas": 2, "allAckInSyncStateSet": "true",
        "controllerHeartBeatTimeoutMills": heartbeat_ms,
        "brokerHeartbeatInterval": max(100, heartbeat_ms // 5),
        "syncBrokerMetadataPeriod": 1000, "haMaxTimeSlaveNotCatchup": 15000,
        "brokerIP1": "127.0.0.1", "slaveSyncInterval": 1000,
    }


def start_replicas(cluster: Cluster, ns: str, controller: str, heartbeat_ms: int
                   ) -> list[Daemon]:
    props = replica_props(controller, heartbeat_ms)
    return [cluster.broker(f"replica-{i}", ns, True, **props) for i in range(3)]


async def replicas_info(ctl: ControllerAdmin, controller: str) -> ReplicasInfo | None:
    try:
        table = (await ctl.sync_state_data(controller, [BROKER_NAME])).replicas_info_table
    except MQAdminError:
        return None
    return table.get(BROKER_NAME)


def in_sync(info: ReplicasInfo | None) -> set[str]:
    return set() if info is None else {r.broker_address for r in info.in_sync_replicas}


async def send_all(producer: Producer, count: int, tag: str, acked: set[bytes]) -> None:
    for i in range(count):
        body = f"{tag}-{i}".encode()
        r = await producer.send(Message(TOPIC, body))
        assert r.send_status == SendStatus.SEND_OK, r
        acked.add(body)


async def pulled_bodies(ns: str, group: str) -> set[bytes]:
    out: set[bytes] = set()
    async with PullConsumer(group, ns) as consumer:
        for mq in await consumer.fetch_subscribe_message_queues(TOPIC):
            offset = 0
            while True:
                r = await consumer.pull(mq, "*", offset, 32)
                if r.pull_status != PullStatus.FOUND:
                    break
                out.update(m.body for m in r.msg_found_list)
                offset = r.next_begin_offset
    return out


@dataclass
class Group:
    """The replica group of one broker name, up with all three in the SyncStateSet."""
    ns: Daemon
    controller: str
    replicas: list[Daemon]
    master: Daemon
    epoch: int  # the master's epoch

    @property
    def by_addr(self) -> dict[str, Daemon]:
        return {d.addr: d for d in self.replicas}


async def start_group(cluster: Cluster, ctl: ControllerAdmin, heartbeat_ms: int,
                      topic: str = TOPIC, queues: int = 2) -> Group:
    """A name server, an ``mqcontroller`` and three replicas; waits for a master with
    all three in its SyncStateSet, then creates ``topic`` on the master and waits for
    its route and its copy on every replica."""
    ns = cluster.namesrv()
    ctl_daemon = cluster.controller(brokerHeartbeatTimeout=heartbeat_ms,
                                    scanNotActiveBrokerInterval=200)
    controller = ctl_daemon.addr
    replicas = start_replicas(cluster, ns.addr, controller, heartbeat_ms)
    everyone = {d.addr for d in replicas}

    async def all_in_sync() -> ReplicasInfo | None:
        info = await replicas_info(ctl, controller)
        if info is not None and info.master_address in everyone \
                and in_sync(info) == everyone:
            return info
        return None

    info = await wait_until(all_in_sync, 60, "a master, and all three in its SyncStateSet")
    master = next(d for d in replicas if d.addr == info.master_address)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(topic, broker_addr=master.addr, read_queue_nums=queues,
                                 write_queue_nums=queues)
        await wait_until(routed(admin, topic), 20, "topic routed")

        async def everywhere() -> bool:  # the slaves copied the topic from the master
            for d in replicas:
                try:
                    await admin.topic_config(d.addr, topic)
                except MQAdminError:
                    return False
            return True

        await wait_until(everywhere, 30, "the topic on every replica")
    return Group(ns, controller, replicas, master, info.master_epoch)


async def new_master(ctl: ControllerAdmin, group: Group) -> ReplicasInfo | None:
    """The controller's view once it named a master other than ``group.master``."""
    i = await replicas_info(ctl, group.controller)
    if i is not None and i.master_address not in (None, group.master.addr) \
            and i.master_epoch > group.epoch:
        return i
    return None


async def failover(cluster: Cluster, heartbeat_ms: int = 1500, count: int = 50,
                   check_rejoin: bool = True) -> Figures:
    figures = Figures()
    acked: set[bytes] = set()
    async with contextlib.AsyncExitStack() as stack:
        ctl = await stack.enter_async_context(ControllerAdmin())
        group = await start_group(cluster, ctl, heartbeat_ms)
        ns, controller, by_addr = group.ns, group.controller, group.by_addr
        everyone = set(by_addr)
        old_master = group.master
        admin = await stack.enter_async_context(MQAdmin(ns.addr))
        async with Producer("failover-producer", ns.addr, retry_times_when_send_failed=2,
                            send_msg_timeout=3.0, poll_name_server_interval=0.5) as producer:
            await send_all(producer, count, "before", acked)
            figures.acked_before = len(acked)

            # the master dies: no shutdown, no unregistration
            old_master.kill()
            killed_at = time.monotonic()

            elected: list[float] = []

            async def watch_election() -> None:
                await wait_until(lambda: new_master(ctl, group), 120, "a new master elected",
                                 interval=0.05)
                elected.append(time.monotonic() - killed_at)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch_election)
                # sends go on through the same producer: the first SEND_OK after the
                # kill is on the new master
                with trio.fail_after(180):
                    while True:
                        body = f"during-{figures.errors_while_down}".encode()
                        try:
                            r = await producer.send(Message(TOPIC, body))
                        except MQClientError:  # MQBrokerError included
                            figures.errors_while_down += 1
                            await trio.sleep(0.05)
                            continue
                        assert r.send_status == SendStatus.SEND_OK, r
                        acked.add(body)
                        figures.unavailable_s = time.monotonic() - killed_at
                        break
            figures.elected_s = elected[0]
            info = await new_master(ctl, group)
            assert info is not None and info.master_address is not None
            new = by_addr[info.master_address]
            # the name servers route to it as the master (brokerId 0)
            route = await admin.topic_route(TOPIC)
            masters = {bd.broker_addrs.get(0) for bd in route.broker_datas}
            assert masters == {new.addr}, route
            await send_all(producer, count, "after", acked)
            figures.acked_after = len(acked) - figures.acked_before

        # every acknowledged message is read from the new master
        got = await pulled_bodies(ns.addr, "failover-check")
        missing = acked - got
        assert not missing, f"{len(missing)} acknowledged messages lost: {sorted(missing)[:5]}"

        if check_rejoin:
            # the old master comes back: a slave of the new one, back in the SyncStateSet
            old_master.start()

            async def rejoined() -> ReplicasInfo | None:
                i = await replicas_info(ctl, controller)
                if i is not None and i.master_address == new.addr and in_sync(i) == everyone:
                    return i
                return None

            await wait_until(rejoined, 90, "the old master back in the SyncStateSet")
            epochs = await ctl.broker_epoch(old_master.addr)
            assert epochs.max_offset > 0 and epochs.epoch_list
            assert epochs.epoch_list[-1].epoch >= info.master_epoch
            cluster_info = await admin.cluster_info()
            addrs = cluster_info["brokerAddrTable"][BROKER_NAME].broker_addrs
            assert addrs.get(0) == new.addr, addrs
    return figures


async def _measure(heartbeat_ms: int, runs: int) -> None:
    for run in range(runs):
        with tempfile.TemporaryDirectory() as root:
            cluster = Cluster(Path(root))
            try:
                f = await failover(cluster, heartbeat_ms, count=20, check_rejoin=False)
            finally:
                cluster.close()
        print(f"heartbeat timeout {heartbeat_ms} ms, run {run + 1}: write unavailable "
              f"{f.unavailable_s:.2f} s (new master named after {f.elected_s:.2f} s, "
              f"{f.errors_while_down} failed sends)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    trio.run(_measure, args.heartbeat_ms, args.runs)


if __name__ == "__main__":
    main()
