"""RouteInfoManager: the name server's route tables, in memory only.

Pure logic: no sockets, no clock. Times are passed in (seconds, any
monotonic origin) so the liveness scan is testable with a mock clock.
"""

from __future__ import annotations

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


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update: float
    data_version: DataVersion
    connection: object | None
    ha_server_addr: str | None  # None: the broker listens on no HA port (yet)


@dataclass(slots=True)
class RegisterBrokerResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass
class RouteInfoManager:
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[str, BrokerLiveInfo] = field(default_factory=dict)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

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
    ) -> RegisterBrokerResult:
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            broker_data = BrokerData(cluster, broker_name, {})
            self.broker_addr_table[broker_name] = broker_data
        # The same address may come back under a new id (slave promoted): drop the old id.
        for bid, addr in list(broker_data.broker_addrs.items()):
            if addr == broker_addr and bid != broker_id:
                del broker_data.broker_addrs[bid]
        first = broker_data.broker_addrs.get(broker_id) != broker_addr
        broker_data.broker_addrs[broker_id] = broker_addr

        prev = self.broker_live_table.get(broker_addr)
        changed = prev is None or prev.data_version != data_version
        if broker_id == MASTER_ID and (first or changed):
            self._update_queue_data(broker_name, topic_configs)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            now, data_version, connection, ha_server_addr
        )
        if prev is None:
            log.info("new broker registered", broker=broker_name, addr=broker_addr, id=broker_id)

        result = RegisterBrokerResult()
        if broker_id != MASTER_ID:
            master = broker_data.broker_addrs.get(MASTER_ID)
            if master is not None:
                live = self.broker_live_table.get(master)
                result.master_addr = master
                result.ha_server_addr = live.ha_server_addr if live else None
        return result

    def _update_queue_data(self, broker_name: str, topic_configs: dict[str, TopicConfig]) -> None:
        for topic, cfg in topic_configs.items():
            queues = self.topic_queue_table.setdefault(topic, {})
            queues[broker_name] = QueueData(
                broker_name, cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm, cfg.topic_sys_flag
            )
        # Topics the master no longer has lose this broker's queues.
        for topic in list(self.topic_queue_table):
            if topic not in topic_configs:
                self._remove_topic_of_broker(topic, broker_name)

    def _remove_topic_of_broker(self, topic: str, broker_name: str) -> None:
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return
        queues.pop(broker_name, None)
        if not queues:
            del self.topic_queue_table[topic]
            log.info("topic removed, no queue left", topic=topic)

    def unregister_broker(
        self, cluster: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> None:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None and broker_data.broker_addrs.get(broker_id) == broker_addr:
            del broker_data.broker_addrs[broker_id]
        log.info("broker unregistered", broker=broker_name, addr=broker_addr, id=broker_id)
        self._drop_empty_broker(broker_name, cluster)

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
        for topic in list(self.topic_queue_table):
            self._remove_topic_of_broker(topic, broker_name)

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
        queue_datas = [QueueData(**_qd(q)) for q in queues.values()]
        broker_datas = []
        for name in sorted(queues):
            bd = self.broker_addr_table.get(name)
            if bd is not None:
                broker_datas.append(BrokerData(bd.cluster, bd.broker_name, dict(bd.broker_addrs)))
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
        return sorted(self.topic_queue_table)

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        count = 0
        for queues in self.topic_queue_table.values():
            qd = queues.get(broker_name)
            if qd is not None:
                qd.perm &= ~PERM_WRITE
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
