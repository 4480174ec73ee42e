"""A replica group on loopback for the chaos checker, and the faults it takes.

A name server, a master and one or two slaves, each a real process started
by tests/integration/cluster.py, every port free. The master's listeners
bind 127.0.0.1 (bindAddress) while it registers brokerIP1 = 127.0.0.2: its
remoting and HA ports are reached at 127.0.0.2 through ``TcpProxy``s of this
process, and it reaches the name server through one too. Clients and slaves
never reach the master but through the proxies, so switching them cuts it off.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog
import trio

from bench.chaos.proxy import Mode, TcpProxy
from tests.integration.cluster import Cluster, Daemon

PROXY_HOST = "127.0.0.2"  # what the master advertises: the proxies listen there
BIND_HOST = "127.0.0.1"  # what the master binds
START_TIMEOUT = 60.0  # a daemon (re)starting on a loaded machine


MASTER_SLAVE, CONTROLLER = "master-slave", "controller"


@dataclass
class GroupConfig:
    slaves: int = 1
    broker_role: str = "SYNC_MASTER"
    flush_disk_type: str = "SYNC_FLUSH"
    # any other broker keys, for every broker of the group
    broker_props: dict[str, object] = field(default_factory=dict)
    # controller mode (bench/chaos/controller_group.py): three replicas, a master elected
    mode: str = MASTER_SLAVE
    controllers: int = 0  # 0: the controller inside the name server; else mqcontroller processes
    etcd: bool = False  # the mqcontrollers keep their state on a real etcd (else a file)
    heartbeat_ms: int = 10_000  # brokerHeartbeatTimeout (controller) and the brokers' own


class Group(Protocol):
    """What the faults and the runner need of a group (ReplicaGroup, ControllerGroup)."""

    @property
    def namesrv_addr(self) -> str: ...

    @property
    def master_addr(self) -> str: ...

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None: ...

    async def topic_ready(self, topic: str) -> None:
        """Until ``topic`` (created on the master) is where sends and pulls need it."""

    async def current_master(self) -> Daemon: ...

    async def current_slaves(self) -> list[Daemon]: ...

    def store_of(self, d: Daemon) -> Path: ...

    def partition(self, d: Daemon, mode: Mode) -> None:
        """Every proxy in front of ``d`` and of its own connections to ``mode``."""

    async def controller_leader(self) -> Daemon: ...

    async def settle(self) -> None:
        """After a heal: until the group is whole again (a no-op where nothing waits)."""

    def close(self) -> None: ...


class ReplicaGroup:
    """Build with ``await nursery.start(group.run)``: the daemons are up and the
    proxies serve until the nursery is cancelled; ``close()`` stops the daemons."""

    def __init__(self, root: Path, config: GroupConfig, cluster: Cluster | None = None) -> None:
        """``cluster``: start the daemons there (a test's, which checks their logs)."""
        if not 1 <= config.slaves <= 2:
            raise ValueError("a replica group here has one or two slaves")
        self.cluster = cluster if cluster is not None else Cluster(root)
        self.root, self.config = self.cluster.root, config
        self.ns: Daemon | None = None
        self.master: Daemon | None = None
        self.slaves: list[Daemon] = []
        self.proxies: list[TcpProxy] = []
        self.log = structlog.get_logger("chaos.group")

    @property
    def namesrv_addr(self) -> str:
        assert self.ns is not None
        return self.ns.addr

    @property
    def master_addr(self) -> str:
        """The master's registered address: its remoting port's proxy."""
        assert self.master is not None
        return f"{PROXY_HOST}:{self.master.port}"

    def master_store(self) -> Path:
        return self.root / "store-broker-a"

    # ---- what the faults ask (the master never moves here) ----

    async def topic_ready(self, topic: str) -> None:
        return None

    async def current_master(self) -> Daemon:
        assert self.master is not None
        return self.master

    async def current_slaves(self) -> list[Daemon]:
        return list(self.slaves)

    def store_of(self, d: Daemon) -> Path:
        return self.master_store() if d is self.master else self.root / f"store-{d.name}"

    def partition(self, d: Daemon, mode: Mode) -> None:
        if d is not self.master:
            raise ValueError("only the master has proxies in front of it here")
        self.set_proxies(mode)

    async def controller_leader(self) -> Daemon:
        raise ValueError("a master/slave group has no controller (--mode controller)")

    async def settle(self) -> None:
        return None

    def _props(self) -> dict[str, object]:
        return {"brokerClusterName": "ChaosCluster", "flushDiskType": self.config.flush_disk_type,
                **self.config.broker_props}

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self.ns = await trio.to_thread.run_sync(self.cluster.namesrv)
            ns_proxy = TcpProxy("master->namesrv", BIND_HOST, 0, BIND_HOST, self.ns.port)
            await nursery.start(ns_proxy.run)
            self.master = self.cluster.broker(
                "broker-a", f"{BIND_HOST}:{ns_proxy.listen_port}", start=False,
                brokerIP1=PROXY_HOST, bindAddress=BIND_HOST,
                brokerRole=self.config.broker_role, **self._props())
            remoting = TcpProxy("remoting", PROXY_HOST, self.master.port, BIND_HOST,
                                self.master.port)
            ha = TcpProxy("ha", PROXY_HOST, self.master.port + 1, BIND_HOST, self.master.port + 1)
            for p in (remoting, ha):
                await nursery.start(p.run)
            self.proxies = [remoting, ha, ns_proxy]
            await self.start(self.master)
            for i in range(1, self.config.slaves + 1):
                slave = self.cluster.broker(
                    f"broker-a-s{i}", self.ns.addr, start=False, brokerName="broker-a",
                    brokerId=i, brokerRole="SLAVE", **self._props())
                await self.start(slave)
                self.slaves.append(slave)
            self.log.info("replica group up", namesrv=self.ns.addr, master=self.master_addr,
                          slaves=[s.addr for s in self.slaves])
            task_status.started()

    @staticmethod
    async def start(d: Daemon) -> None:
        await trio.to_thread.run_sync(lambda: d.start(START_TIMEOUT))

    @staticmethod
    async def kill(d: Daemon) -> None:
        await trio.to_thread.run_sync(d.kill)

    def set_proxies(self, mode: Mode) -> None:
        for p in self.proxies:
            p.set_mode(mode)

    def close(self) -> None:
        for d in self.cluster.daemons:
            if d.proc is not None and d.proc.poll() is None:
                d.thaw()  # a frozen daemon takes no SIGTERM
        self.cluster.close()


class Fault(Protocol):
    """One fault: ``inject`` makes it happen, ``heal`` undoes it (both return
    once done; they raise when they could not). Each finds its target when
    injected (in controller mode the master moves) and heals that one."""

    name: str

    async def inject(self) -> None: ...

    async def heal(self) -> None: ...


class _OnTarget:
    def __init__(self, group: Group) -> None:
        self.group = group
        self.target: Daemon | None = None

    def _target(self) -> Daemon:
        assert self.target is not None, "healed before injected"
        return self.target


class KillMaster(_OnTarget):
    """kill -9 of the current master; heal: restart it on its store."""

    name = "kill-master"

    async def inject(self) -> None:
        self.target = await self.group.current_master()
        await ReplicaGroup.kill(self.target)

    async def heal(self) -> None:
        await ReplicaGroup.start(self._target())
        await self.group.settle()


class KillSlave(_OnTarget):
    """kill -9 of the first slave of the current master; heal: restart it on its store."""

    name = "kill-slave"

    async def inject(self) -> None:
        self.target = (await self.group.current_slaves())[0]
        await ReplicaGroup.kill(self.target)

    async def heal(self) -> None:
        await ReplicaGroup.start(self._target())
        await self.group.settle()


class StopMaster(_OnTarget):
    """SIGSTOP of the current master; heal: SIGCONT."""

    name = "stop-master"

    async def inject(self) -> None:
        self.target = await self.group.current_master()
        self.target.freeze()

    async def heal(self) -> None:
        self._target().thaw()
        await self.group.settle()


class PartitionMaster(_OnTarget):
    """The current master cut off from clients, slaves, the name server (and the
    controllers): every proxy in front of it (and its own to the name server and
    controllers) blackholes (or drops) connections; heal: they pass again."""

    name = "partition-master"

    def __init__(self, group: Group, mode: Mode = Mode.BLACKHOLE) -> None:
        super().__init__(group)
        self.mode = mode

    async def inject(self) -> None:
        self.target = await self.group.current_master()
        self.group.partition(self.target, self.mode)

    async def heal(self) -> None:
        self.group.partition(self._target(), Mode.PASS)
        await self.group.settle()


class WipeMaster(_OnTarget):
    """kill -9 of the current master and its store deleted while it is down; heal:
    restart it on an empty store (what a replaced disk looks like)."""

    name = "wipe-master"

    async def inject(self) -> None:
        self.target = await self.group.current_master()
        await ReplicaGroup.kill(self.target)
        await trio.to_thread.run_sync(shutil.rmtree, self.group.store_of(self.target))

    async def heal(self) -> None:
        await ReplicaGroup.start(self._target())
        await self.group.settle()


class KillControllerLeader(_OnTarget):
    """kill -9 of the leading controller (an mqcontroller, or the name server the
    controller runs in); heal: restart it on its store. Controller mode only."""

    name = "kill-controller-leader"

    async def inject(self) -> None:
        self.target = await self.group.controller_leader()
        await ReplicaGroup.kill(self.target)

    async def heal(self) -> None:
        await ReplicaGroup.start(self._target())
        await self.group.settle()


FaultType = type[KillMaster | KillSlave | StopMaster | PartitionMaster | WipeMaster
                 | KillControllerLeader]
FAULTS: dict[str, FaultType] = {
    f.name: f for f in (KillMaster, KillSlave, StopMaster, PartitionMaster, WipeMaster,
                        KillControllerLeader)}
# faults a master/slave group (no controller) cannot take
CONTROLLER_ONLY = frozenset({KillControllerLeader.name})


def make_fault(name: str, group: Group, partition_mode: Mode = Mode.BLACKHOLE) -> Fault:
    if name == PartitionMaster.name:
        return PartitionMaster(group, partition_mode)
    return FAULTS[name](group)
