"""A controller-mode group for the chaos checker (``--mode controller``).

Three brokers of one broker name in controller mode (SYNC_MASTER acks,
minInSyncReplicas=2, allAckInSyncStateSet=true, the keys of
tests/integration/failover.py), a name server and the controller: inside the
name server (enableControllerInNamesrv), or one ``mqcontroller`` on a file
store, or several ``mqcontroller``s on a real etcd. Which broker is the master
is the controller's choice and moves with every failover: faults ask the
controller for the current master (``current_master``) when injected.

As in ReplicaGroup, every broker binds 127.0.0.1 and advertises 127.0.0.2:
its remoting and HA ports are reached through ``TcpProxy``s of this process,
and it reaches the name server and each controller through proxies of its own,
so ``partition`` cuts any one broker off from everyone.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import structlog
import trio

from bench.chaos.group import BIND_HOST, PROXY_HOST, START_TIMEOUT, GroupConfig, ReplicaGroup
from bench.chaos.proxy import Mode, TcpProxy
from client.admin import MQAdmin, MQAdminError
from client.admin_controller import ControllerAdmin
from protocol.controller import ReplicasInfo
from tests.controller.etcd_server import ETCD, EtcdCluster, make_cluster
from tests.integration.cluster import Cluster, Daemon
from tests.integration.failover import replica_props
from tests.waits import wait_until

BROKER_NAME = "broker-c"
REPLICAS = 3
SETTLE_TIMEOUT = 120.0  # a healed group: a master, and all three in its SyncStateSet


class ControllerGroupError(Exception):
    """The group cannot be built as asked (a bad combination, no etcd)."""


class ControllerGroup:
    """Build with ``await nursery.start(group.run)``: the daemons are up, a master
    is elected with all three replicas in its SyncStateSet, and the proxies serve
    until the nursery is cancelled; ``close()`` stops the daemons (and etcd)."""

    def __init__(self, root: Path, config: GroupConfig, cluster: Cluster | None = None) -> None:
        if config.controllers < 0 or config.controllers > 5:
            raise ControllerGroupError("--controllers: 0 (inside the name server) to 5")
        if config.controllers > 1 and not config.etcd:
            raise ControllerGroupError("more than one mqcontroller needs --etcd (a shared state)")
        if config.etcd and config.controllers == 0:
            raise ControllerGroupError("--etcd needs mqcontroller processes (--controllers N)")
        if config.etcd and ETCD is None:
            raise ControllerGroupError("--etcd: no etcd binary on PATH (make etcd)")
        if config.heartbeat_ms < 100:
            raise ControllerGroupError("the heart-beat timeout is 100 ms at least")
        self.cluster = cluster if cluster is not None else Cluster(root)
        self.root, self.config = self.cluster.root, config
        self.ns: Daemon | None = None
        self.controllers: list[Daemon] = []  # empty: the controller is in the name server
        self.brokers: list[Daemon] = []
        self.etcd: EtcdCluster | None = None
        self.proxies: dict[str, list[TcpProxy]] = {}  # a broker's name -> its proxies
        self._first_master: Daemon | None = None
        # one prefix for every controller of the group: one state, one leader
        self.etcd_prefix = f"/chaos/{os.getpid()}/{time.time_ns()}"
        self.masters: list[str] = []  # each master the group settled with, in order
        self.log = structlog.get_logger("chaos.controller_group")

    # ---- addresses ----

    @property
    def namesrv_addr(self) -> str:
        assert self.ns is not None
        return self.ns.addr

    @property
    def master_addr(self) -> str:
        """The master elected when the group came up (where the topic is created)."""
        assert self._first_master is not None
        return self.advertised(self._first_master)

    @staticmethod
    def advertised(d: Daemon) -> str:
        return f"{PROXY_HOST}:{d.port}"

    def controller_addrs(self) -> list[str]:
        return [c.addr for c in self.controllers] if self.controllers else [self.namesrv_addr]

    def store_of(self, d: Daemon) -> Path:
        return self.root / f"store-{d.name}"

    # ---- start ----

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        cfg = self.config
        hb = cfg.heartbeat_ms
        async with trio.open_nursery() as nursery:
            if cfg.etcd:
                self.etcd = make_cluster(self.root / "etcd", 1)
                await trio.to_thread.run_sync(self.etcd.start)
            if cfg.controllers == 0:
                self.ns = await trio.to_thread.run_sync(lambda: self.cluster.namesrv(
                    enableControllerInNamesrv="true", brokerHeartbeatTimeout=hb,
                    controllerStorePath=self.root / "controller-store"))
            else:
                self.ns = await trio.to_thread.run_sync(self.cluster.namesrv)
                for _ in range(cfg.controllers):
                    self.controllers.append(
                        await trio.to_thread.run_sync(self._start_controller))
            for i in range(REPLICAS):
                await self._add_broker(nursery, f"replica-{i}")
            for b in self.brokers:
                await ReplicaGroup.start(b)
            await self.settle()
            self._first_master = await self.current_master()
            self.log.info("controller group up", namesrv=self.namesrv_addr,
                          controllers=self.controller_addrs(),
                          master=self.advertised(self._first_master))
            task_status.started()

    def _start_controller(self) -> Daemon:
        cfg = self.config
        props: dict[str, object] = {"brokerHeartbeatTimeout": cfg.heartbeat_ms,
                                    "scanNotActiveBrokerInterval": 200}
        if cfg.etcd:
            assert self.etcd is not None
            props.update(controllerType="etcd", etcdEndpoints=self.etcd.endpoints,
                         etcdKeyPrefix=self.etcd_prefix,
                         etcdLeaseTtlSeconds=2, etcdRequestTimeoutMs=1000)
            return self.cluster.controller(None, "controller started", **props)
        return self.cluster.controller(None, "controller leads", **props)  # alone: it leads

    async def _add_broker(self, nursery: trio.Nursery, name: str) -> None:
        """A broker (not started), with proxies to the name server and the controllers
        and in front of its remoting and HA ports."""
        assert self.ns is not None
        upstream: list[TcpProxy] = []
        ns_proxy = TcpProxy(f"{name}->namesrv", BIND_HOST, 0, BIND_HOST, self.ns.port)
        await nursery.start(ns_proxy.run)
        upstream.append(ns_proxy)
        if self.controllers:
            for c in self.controllers:
                p = TcpProxy(f"{name}->controller-{c.port}", BIND_HOST, 0, BIND_HOST, c.port)
                await nursery.start(p.run)
                upstream.append(p)
            controller_addr = ";".join(f"{BIND_HOST}:{p.listen_port}" for p in upstream[1:])
        else:
            controller_addr = f"{BIND_HOST}:{ns_proxy.listen_port}"
        props = {**replica_props(controller_addr, self.config.heartbeat_ms),
                 "brokerName": BROKER_NAME, "brokerIP1": PROXY_HOST, "bindAddress": BIND_HOST,
                 "brokerClusterName": "ChaosCluster",
                 "flushDiskType": self.config.flush_disk_type, **self.config.broker_props}
        d = self.cluster.broker(name, f"{BIND_HOST}:{ns_proxy.listen_port}", start=False,
                                **props)
        front = [TcpProxy(f"{name}-remoting", PROXY_HOST, d.port, BIND_HOST, d.port),
                 TcpProxy(f"{name}-ha", PROXY_HOST, d.port + 1, BIND_HOST, d.port + 1)]
        for p in front:
            await nursery.start(p.run)
        self.proxies[name] = [*front, *upstream]
        self.brokers.append(d)

    # ---- what the controller says ----

    async def replicas_info(self) -> ReplicasInfo | None:
        """The leading controller's view of the group; None while none answers."""
        async with ControllerAdmin() as ctl:
            for addr in self.controller_addrs():
                try:
                    table = (await ctl.sync_state_data(addr, [BROKER_NAME])).replicas_info_table
                except (MQAdminError, OSError):
                    continue  # down, or not the leader
                info = table.get(BROKER_NAME)
                if info is not None:
                    return info
        return None

    def _by_advertised(self, addr: str | None) -> Daemon | None:
        return next((d for d in self.brokers if self.advertised(d) == addr), None)

    async def _whole(self) -> ReplicasInfo | None:
        info = await self.replicas_info()
        everyone = {self.advertised(d) for d in self.brokers}
        if info is None or info.master_address not in everyone:
            return None
        if {r.broker_address for r in info.in_sync_replicas} != everyone:
            return None
        if not self.masters or self.masters[-1] != info.master_address:
            self.masters.append(info.master_address)
        return info

    async def settle(self) -> None:
        await wait_until(self._whole, SETTLE_TIMEOUT,
                         "a master, and all three replicas in its SyncStateSet", interval=0.2)

    async def current_master(self) -> Daemon:
        async def master() -> Daemon | None:
            info = await self.replicas_info()
            return None if info is None else self._by_advertised(info.master_address)

        return await wait_until(master, SETTLE_TIMEOUT, "the controller names a master",
                                interval=0.2)

    async def current_slaves(self) -> list[Daemon]:
        m = await self.current_master()
        return [d for d in self.brokers if d is not m]

    async def controller_leader(self) -> Daemon:
        if not self.controllers:
            assert self.ns is not None
            return self.ns  # the controller is inside the name server

        async def leader() -> Daemon | None:
            async with ControllerAdmin() as ctl:
                for c in self.controllers:
                    if c.proc is None or c.proc.poll() is not None:
                        continue
                    try:
                        if (await ctl.metadata(c.addr)).get("isLeader") is True:
                            return c
                    except (MQAdminError, OSError):
                        continue
            return None

        return await wait_until(leader, SETTLE_TIMEOUT, "a controller leads", interval=0.2)

    async def topic_ready(self, topic: str) -> None:
        """The slaves copy topics from the master (syncBrokerMetadataPeriod): until
        every replica has it, a failover could elect one that refuses sends to it."""
        async with MQAdmin(self.namesrv_addr) as admin:
            async def everywhere() -> bool:
                for d in self.brokers:
                    try:
                        await admin.topic_config(self.advertised(d), topic)
                    except (MQAdminError, OSError):
                        return False
                return True

            await wait_until(everywhere, START_TIMEOUT, f"{topic} on every replica")

    # ---- faults ----

    def partition(self, d: Daemon, mode: Mode) -> None:
        for p in self.proxies[d.name]:
            p.set_mode(mode)

    def all_proxies(self) -> list[TcpProxy]:
        return [p for ps in self.proxies.values() for p in ps]

    def close(self) -> None:
        for d in self.cluster.daemons:
            if d.proc is not None and d.proc.poll() is None:
                d.thaw()  # a frozen daemon takes no SIGTERM
        try:
            self.cluster.close()
        finally:
            if self.etcd is not None:
                self.etcd.stop()
