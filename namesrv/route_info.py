"""RouteInfoManager: the name server's route tables, in memory only.

Pure logic: no sockets, no clock. Times are passed in (seconds, any
monotonic origin) so the liveness scan is testable with a mock clock.

A registration is applied by ``register_steps``, a generator that yields
between chunks of topics: the processor drives it to the end at once for a
small registration, and with a checkpoint after each step for a large one, so
route look-ups are served while 100,000 topics register. A registration
superseded while it is applied (the broker registered again, its connection
closed, it expired) stops at its next step.

A broker's registration belongs to the connection it came over. While that
connection is open and the registration has not expired, another connection
may neither register the same address, nor the same broker name and id at
another address, nor the broker name in another cluster, nor unregister it
(``registration_conflict``): a forged REGISTER_BROKER cannot replace a live
broker's topics. The real broker registers again once its old connection
closed (the registration went with it) or its registration expired.

One exception, controller mode (RocketMQ's #6316): registrations carry the
masterEpoch of the role the broker holds. A brokerId 0 registration with a
higher masterEpoch than the live master's of that broker name replaces it (the
old master's registration is dropped from the route: it was cut off from the
controller, which elected another); the stale master's next registrations are
refused while the higher epoch holds the name. A registration without an epoch
(not in controller mode), or a master held without one, conflicts as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import structlog

from protocol.route import (
    MASTER_ID,
    PERM_WRITE,
    BrokerData,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicRouteData,
)

log = structlog.get_logger("namesrv.route")

# A broker's data version while its topics are being applied: equal to no version a
# broker sends, so an incremental registration meanwhile needs the whole table.
APPLYING = DataVersion(-1, -1)
# Topics applied (or checked for removal, x8) per step of a registration.
DEFAULT_CHUNK = 128
# A broker gone from a table with more topics than this has its queue data removed
# in steps (``removal_steps``) when ``deferred_removal`` is on, else at once.
INLINE_REMOVAL_TOPICS = 2048


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update: float
    data_version: DataVersion
    connection: object | None
    ha_server_addr: str | None  # None: the broker listens on no HA port (yet)
    grpc_port: int | None = None  # its gRPC port (enableGrpc), None: none
    master_epoch: int | None = None  # controller mode: the epoch of its role, else None


@dataclass(slots=True)
class RegisterBrokerResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None
    refused: str | None = None  # a live registration of another connection conflicts
    need_full: bool = False  # an incremental registration not applied
    superseded: bool = False  # stopped while applied: the broker's registration changed


@dataclass(slots=True)
class Registration:
    """One REGISTER_BROKER, decoded and checked: what the name server applies.
    ``incremental``: ``topics`` are the changes since ``base_version`` and
    ``deleted`` the topics gone; else ``topics`` is the whole table."""

    cluster: str
    broker_addr: str
    broker_name: str
    broker_id: int
    ha_server_addr: str | None
    topics: dict[str, TopicConfig]
    data_version: DataVersion
    incremental: bool = False
    base_version: DataVersion | None = None
    deleted: list[str] = field(default_factory=list)
    grpc_port: int | None = None
    master_epoch: int | None = None  # controller mode (RegisterBrokerRequestHeader)


def same_connection(a: object | None, b: object | None) -> bool:
    """Whether ``a`` and ``b`` are one connection: the same object, or the
    same peer endpoint (two open TCP connections to one server never share
    the peer's host and port)."""
    if a is b:
        return True
    peer = getattr(a, "remote_addr", None)
    return isinstance(peer, str) and peer not in ("", "?") and peer == getattr(
        b, "remote_addr", None)


def supersedes(epoch: int | None, held: int | None) -> bool:
    """Whether a master registering with masterEpoch ``epoch`` replaces a live
    master registered with ``held``: both in controller mode, and newer."""
    return epoch is not None and held is not None and epoch > held


def drain(steps: Generator[None, None, Any]) -> Any:
    """Run a step generator to its end at once; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


@dataclass
class RouteInfoManager:
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[str, BrokerLiveInfo] = field(default_factory=dict)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    # seconds after which a silent registration no longer blocks another connection
    # (brokerChannelExpiredTime)
    channel_expired_s: float = 120.0
    # brokers gone whose queue data is still to be removed: name -> topics to look at
    # (only with deferred_removal: the name server's edge runs removal_steps)
    pending_removals: dict[str, list[str]] = field(default_factory=dict)
    deferred_removal: bool = False
    on_pending_removal: Callable[[], None] = lambda: None

    # ---- registration ----------------------------------------------------------

    def register_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str | None,
        topic_configs: dict[str, TopicConfig],
        data_version: DataVersion,
        connection: object | None,
        now: float,
        grpc_port: int | None = None,
        master_epoch: int | None = None,
    ) -> RegisterBrokerResult:
        """A whole-table registration, applied at once."""
        reg = Registration(cluster, broker_addr, broker_name, broker_id, ha_server_addr,
                           topic_configs, data_version, grpc_port=grpc_port,
                           master_epoch=master_epoch)
        result: RegisterBrokerResult = drain(self.register_steps(reg, connection, now))
        return result

    def _live_elsewhere(self, addr: str, connection: object | None,
                        now: float) -> BrokerLiveInfo | None:
        """The registration of ``addr`` when it belongs to another connection
        that is still open and has not expired."""
        live = self.broker_live_table.get(addr)
        if live is None or live.connection is None or same_connection(live.connection, connection):
            return None
        if getattr(live.connection, "closed", False):
            return None
        if now - live.last_update > self.channel_expired_s:
            return None
        return live

    def registration_conflict(self, cluster: str, broker_addr: str, broker_name: str,
                              broker_id: int, connection: object | None,
                              now: float, master_epoch: int | None = None) -> str | None:
        """Why ``connection`` may not register this broker now, or None.
        ``master_epoch``: controller mode, see ``supersedes``."""
        if self._live_elsewhere(broker_addr, connection, now) is not None:
            return (f"the address {broker_addr} is registered by another live connection "
                    f"(broker {self._name_at(broker_addr)})")
        data = self.broker_addr_table.get(broker_name)
        if data is None:
            return None
        held = data.broker_addrs.get(broker_id)
        held_live = (self._live_elsewhere(held, connection, now)
                     if held is not None and held != broker_addr else None)
        if held_live is not None:
            if broker_id == MASTER_ID and supersedes(master_epoch, held_live.master_epoch):
                pass  # a newer master: it replaces the held one (register_steps)
            elif broker_id == MASTER_ID and master_epoch is not None \
                    and held_live.master_epoch is not None:
                return (f"broker {broker_name} id 0 is held at {held} with masterEpoch "
                        f"{held_live.master_epoch}: a master of masterEpoch {master_epoch} "
                        "is stale")
            else:
                return (f"broker {broker_name} id {broker_id} is registered at {held} by "
                        "another live connection")
        if data.cluster != cluster:
            for addr in data.broker_addrs.values():
                if self._live_elsewhere(addr, connection, now) is not None:
                    return (f"broker {broker_name} is registered in cluster {data.cluster} by "
                            "another live connection")
        return None

    def _name_at(self, addr: str) -> str:
        for name, data in self.broker_addr_table.items():
            if addr in data.broker_addrs.values():
                return name
        return "?"

    def takes_incremental(self, broker_addr: str, base: DataVersion | None,
                          connection: object | None) -> bool:
        """Whether an incremental registration over ``base`` applies: this
        connection's live registration of the address holds exactly ``base``."""
        live = self.broker_live_table.get(broker_addr)
        return (live is not None and base is not None
                and same_connection(live.connection, connection)
                and live.data_version is not APPLYING and live.data_version == base)

    def register_steps(self, reg: Registration, connection: object | None, now: float,
                       chunk: int = DEFAULT_CHUNK
                       ) -> Generator[None, None, RegisterBrokerResult]:
        """Apply ``reg``, yielding between chunks of ``chunk`` topics."""
        refused = self.registration_conflict(reg.cluster, reg.broker_addr, reg.broker_name,
                                             reg.broker_id, connection, now, reg.master_epoch)
        if refused is not None:
            return RegisterBrokerResult(refused=refused)
        if reg.incremental and not self.takes_incremental(reg.broker_addr, reg.base_version,
                                                          connection):
            return RegisterBrokerResult(need_full=True)
        broker_addr, broker_name, broker_id = reg.broker_addr, reg.broker_name, reg.broker_id
        self.cluster_addr_table.setdefault(reg.cluster, set()).add(broker_name)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            broker_data = BrokerData(reg.cluster, broker_name, {})
            self.broker_addr_table[broker_name] = broker_data
        # The same address may come back under a new id (slave promoted): drop the old id.
        for bid, addr in list(broker_data.broker_addrs.items()):
            if addr == broker_addr and bid != broker_id:
                del broker_data.broker_addrs[bid]
        held = broker_data.broker_addrs.get(broker_id)
        first = held != broker_addr
        broker_data.broker_addrs[broker_id] = broker_addr
        if broker_id == MASTER_ID and held is not None and first:
            self._demote(broker_name, held, reg)

        prev = self.broker_live_table.get(broker_addr)
        changed = prev is None or prev.data_version != reg.data_version
        live = BrokerLiveInfo(now, reg.data_version, connection, reg.ha_server_addr,
                              reg.grpc_port, reg.master_epoch)
        self.broker_live_table[broker_addr] = live
        if prev is None:
            log.info("new broker registered", broker=broker_name, addr=broker_addr, id=broker_id)
        if broker_id == MASTER_ID and (reg.incremental or first or changed):
            # the master's table decides its queue data now (its full apply removes the rest)
            self.pending_removals.pop(broker_name, None)
            live.data_version = APPLYING
            yield from self._apply_topics(reg, live, chunk)
            if self.broker_live_table.get(broker_addr) is not live:
                return RegisterBrokerResult(superseded=True)
            live.data_version = reg.data_version

        result = RegisterBrokerResult()
        if broker_id != MASTER_ID:
            master = broker_data.broker_addrs.get(MASTER_ID)
            if master is not None:
                master_live = self.broker_live_table.get(master)
                result.master_addr = master
                result.ha_server_addr = master_live.ha_server_addr if master_live else None
        return result

    def _demote(self, broker_name: str, old: str, reg: Registration) -> None:
        """The master at ``old`` was replaced by ``reg``'s: drop its registration
        (its next one is refused while ``reg``'s epoch holds the name, unless it
        comes back as a slave)."""
        old_live = self.broker_live_table.get(old)
        if old_live is None:
            return
        if supersedes(reg.master_epoch, old_live.master_epoch):
            log.warning("master replaced by a higher masterEpoch", broker=broker_name,
                        old_addr=old, old_epoch=old_live.master_epoch,
                        addr=reg.broker_addr, epoch=reg.master_epoch)
        else:  # its registration had expired or its connection closed: as before
            return
        self.broker_live_table.pop(old, None)
        self.filter_server_table.pop(old, None)

    def _apply_topics(self, reg: Registration, live: BrokerLiveInfo,
                      chunk: int) -> Generator[None, None, None]:
        """The queue data of ``reg``'s topics, then the removal of this
        broker's topics it no longer has; stops when ``live`` is replaced."""
        name = reg.broker_name
        chunk = max(1, chunk)

        def current() -> bool:
            return self.broker_live_table.get(reg.broker_addr) is live

        items = iter(reg.topics.items())  # reg.topics does not change meanwhile
        count = len(reg.topics)
        for start in range(0, count, chunk):
            if start:
                yield
                if not current():
                    return
            for topic, cfg in itertools.islice(items, chunk):
                queues = self.topic_queue_table.get(topic)
                if queues is None:
                    queues = self.topic_queue_table[topic] = {}
                queues[name] = QueueData(name, cfg.read_queue_nums, cfg.write_queue_nums,
                                         cfg.perm, cfg.topic_sys_flag)
        # Topics the master no longer has lose this broker's queues.
        if reg.incremental:
            gone = reg.deleted
            step = chunk
        else:
            gone = list(self.topic_queue_table)
            step = chunk * 8
        removed = 0
        for start in range(0, len(gone), step):
            if count or start:
                yield
                if not current():
                    break
            for topic in gone[start:start + step]:
                if topic not in reg.topics:
                    removed += self._remove_topic_of_broker(topic, name)
        if removed:
            log.info("topics removed, no queue left", broker=name, count=removed)

    def _remove_topic_of_broker(self, topic: str, broker_name: str) -> bool:
        """Drop the broker's queues of ``topic``; True when no queue is left."""
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return False
        queues.pop(broker_name, None)
        if not queues:
            del self.topic_queue_table[topic]
            return True
        return False

    def unregister_broker(
        self, cluster: str, broker_addr: str, broker_name: str, broker_id: int,
        connection: object | None = None, now: float | None = None,
    ) -> str | None:
        """Remove the registration; with ``now`` given, refused (the reason
        returned) while it belongs to another live connection."""
        if now is not None and self._live_elsewhere(broker_addr, connection, now) is not None:
            return f"the address {broker_addr} is registered by another live connection"
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None and broker_data.broker_addrs.get(broker_id) == broker_addr:
            del broker_data.broker_addrs[broker_id]
        log.info("broker unregistered", broker=broker_name, addr=broker_addr, id=broker_id)
        self._drop_empty_broker(broker_name, cluster)
        return None

    def _drop_empty_broker(self, broker_name: str, cluster: str | None) -> None:
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None or broker_data.broker_addrs:
            return
        del self.broker_addr_table[broker_name]
        clusters = [cluster] if cluster else list(self.cluster_addr_table)
        for c in clusters:
            names = self.cluster_addr_table.get(c)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[c]
        if self.deferred_removal and len(self.topic_queue_table) > INLINE_REMOVAL_TOPICS:
            # not routed any more (no broker data); its queue data goes in steps
            self.pending_removals[broker_name] = list(self.topic_queue_table)
            self.on_pending_removal()
            return
        removed = 0
        for topic, queues in list(self.topic_queue_table.items()):
            if broker_name in queues:
                removed += self._remove_topic_of_broker(topic, broker_name)
        if removed:
            log.info("topics removed, no queue left", broker=broker_name, count=removed)

    def removal_steps(self, chunk: int = DEFAULT_CHUNK * 8) -> Generator[None, None, None]:
        """Remove the queue data of the brokers in ``pending_removals``,
        yielding every ``chunk`` topics. A master of the same name registering
        meanwhile takes its queue data over (and the removal stops)."""
        for name in list(self.pending_removals):
            topics = self.pending_removals.get(name)
            removed = 0
            for start in range(0, len(topics or ()), chunk):
                if self.pending_removals.get(name) is not topics:
                    break
                assert topics is not None
                for topic in topics[start:start + chunk]:
                    queues = self.topic_queue_table.get(topic)
                    if queues is not None and name in queues:
                        removed += self._remove_topic_of_broker(topic, name)
                yield
            if self.pending_removals.get(name) is topics:
                del self.pending_removals[name]
            if removed:
                log.info("topics removed, no queue left", broker=name, count=removed)

    def _destroy_addr(self, broker_addr: str) -> None:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        for name, data in list(self.broker_addr_table.items()):
            for bid, addr in list(data.broker_addrs.items()):
                if addr == broker_addr:
                    del data.broker_addrs[bid]
                    self._drop_empty_broker(name, data.cluster)

    # ---- liveness --------------------------------------------------------------

    def scan_not_active_broker(self, now: float, expired_after: float) -> list[str]:
        """Drop brokers whose last registration is older than ``expired_after`` s."""
        gone = [
            addr
            for addr, live in self.broker_live_table.items()
            if now - live.last_update > expired_after
        ]
        for addr in gone:
            log.warning("broker expired, removing", addr=addr, silent_for=expired_after)
            self._destroy_addr(addr)
        return gone

    def on_connection_destroyed(self, connection: object) -> list[str]:
        """A broker's connection closed: drop every broker registered over it."""
        gone = [a for a, live in self.broker_live_table.items() if live.connection is connection]
        for addr in gone:
            log.info("broker connection closed, removing", addr=addr)
            self._destroy_addr(addr)
        return gone

    # ---- queries ---------------------------------------------------------------

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        queue_datas = [QueueData(**_qd(q)) for q in queues.values()
                       if q.broker_name in self.broker_addr_table]
        broker_datas = []
        for name in sorted(queues):
            bd = self.broker_addr_table.get(name)
            if bd is not None:
                grpc_ports = {}
                for bid, addr in bd.broker_addrs.items():
                    live = self.broker_live_table.get(addr)
                    if live is not None and live.grpc_port is not None:
                        grpc_ports[bid] = live.grpc_port
                broker_datas.append(BrokerData(bd.cluster, bd.broker_name, dict(bd.broker_addrs),
                                               grpc_ports))
        if not broker_datas:
            return None
        return TopicRouteData(
            queue_datas=sorted(queue_datas, key=lambda q: q.broker_name), broker_datas=broker_datas
        )

    def get_all_cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {n: b.to_dict() for n, b in self.broker_addr_table.items()},
            "clusterAddrTable": {c: sorted(ns) for c, ns in self.cluster_addr_table.items()},
        }

    def get_all_topic_list(self) -> list[str]:
        if not self.pending_removals:
            return sorted(self.topic_queue_table)
        brokers = self.broker_addr_table
        return sorted(t for t, queues in self.topic_queue_table.items()
                      if any(b in brokers for b in queues))

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        count = 0
        for queues in self.topic_queue_table.values():
            qd = queues.get(broker_name)
            if qd is not None:
                qd.perm &= ~PERM_WRITE
                count += 1
        return count

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        """The inverse of ``wipe_write_perm_of_broker`` (RocketMQ's
        addWritePermOfBroker): write permission back on every topic's queue data of
        the broker; returns how many topics the broker serves."""
        count = 0
        for queues in self.topic_queue_table.values():
            qd = queues.get(broker_name)
            if qd is not None:
                qd.perm |= PERM_WRITE
                count += 1
        return count

    def delete_topic(self, topic: str) -> None:
        self.topic_queue_table.pop(topic, None)


def _qd(q: QueueData) -> dict[str, Any]:
    return {
        "broker_name": q.broker_name,
        "read_queue_nums": q.read_queue_nums,
        "write_queue_nums": q.write_queue_nums,
        "perm": q.perm,
        "topic_sys_flag": q.topic_sys_flag,
    }
