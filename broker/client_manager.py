"""Producers and consumers known to the broker, and queue locks for orderly consumption.

Pure tables (times passed in, seconds on any monotonic clock): the
ClientService (broker/service/clients.py) and the housekeeping task drive them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import structlog

log = structlog.get_logger("broker.clients")

REBALANCE_LOCK_MAX_LIVE_TIME = 60.0


@dataclass(slots=True)
class ClientChannelInfo:
    client_id: str
    conn: Any
    last_update: float


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    clients: dict[str, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted(self.clients)

    def update_subscriptions(self, subs: list[Any]) -> None:
        """A heart-beat's subscriptions (RocketMQ's updateSubscription): a new
        topic is added, a known one replaced unless the heart-beat's
        ``subVersion`` is older than the one held, a topic the heart-beat no
        longer names is dropped (pulls without their own subscription use
        these: broker/pull_processor.py)."""
        seen = set()
        for sub in subs:
            if not isinstance(sub, dict) or not isinstance(sub.get("topic"), str):
                continue
            topic = sub["topic"]
            seen.add(topic)
            old = self.subscriptions.get(topic)
            if old is None or _sub_version(sub) >= _sub_version(old):
                self.subscriptions[topic] = sub
        for topic in [t for t in self.subscriptions if t not in seen]:
            del self.subscriptions[topic]


def _sub_version(sub: dict[str, Any]) -> int:
    version = sub.get("subVersion", 0)
    return version if type(version) is int else 0


class ClientGroups:
    """Group -> members, for consumers (with subscriptions) or producers."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.groups: dict[str, ConsumerGroupInfo] = {}

    def register(self, group: str, client_id: str, conn: Any, now: float,
                 info: dict[str, Any] | None = None) -> bool:
        """Record a heartbeat; True when the group's membership changed."""
        g = self.groups.setdefault(group, ConsumerGroupInfo(group))
        if info:
            g.consume_type = str(info.get("consumeType", g.consume_type))
            g.message_model = str(info.get("messageModel", g.message_model))
            g.consume_from_where = str(info.get("consumeFromWhere", g.consume_from_where))
            g.update_subscriptions(info.get("subscriptionDataSet") or [])
        old = g.clients.get(client_id)
        g.clients[client_id] = ClientChannelInfo(client_id, conn, now)
        if old is None:
            log.info(f"new {self.kind} registered", group=group, client_id=client_id)
            return True
        return False

    def unregister(self, group: str, client_id: str) -> bool:
        g = self.groups.get(group)
        if g is None or g.clients.pop(client_id, None) is None:
            return False
        if not g.clients:
            del self.groups[group]
        log.info(f"{self.kind} unregistered", group=group, client_id=client_id)
        return True

    def scan_not_active(self, now: float, expired_after: float) -> set[str]:
        """Drop members silent for ``expired_after`` s; returns the changed groups."""
        changed = set()
        for group, g in list(self.groups.items()):
            for cid, ch in list(g.clients.items()):
                if now - ch.last_update > expired_after:
                    log.warning(f"{self.kind} expired", group=group, client_id=cid)
                    del g.clients[cid]
                    changed.add(group)
            if not g.clients:
                del self.groups[group]
        return changed

    def connection_closed(self, conn: Any) -> set[str]:
        changed = set()
        for group, g in list(self.groups.items()):
            for cid, ch in list(g.clients.items()):
                if ch.conn is conn:
                    del g.clients[cid]
                    changed.add(group)
            if not g.clients:
                del self.groups[group]
        return changed

    def client_ids(self, group: str) -> list[str]:
        g = self.groups.get(group)
        return g.client_ids() if g else []

    def connections(self, group: str) -> list[Any]:
        g = self.groups.get(group)
        return [ch.conn for ch in g.clients.values()] if g else []


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update: float


class RebalanceLockManager:
    """Queue locks for orderly consumption; a lock not renewed for 60 s expires."""

    def __init__(self, max_live_time: float = REBALANCE_LOCK_MAX_LIVE_TIME) -> None:
        self.max_live_time = max_live_time
        self.table: dict[str, dict[tuple[str, str, int], LockEntry]] = {}

    def try_lock_batch(self, group: str, mqs: list[tuple[str, str, int]], client_id: str,
                       now: float) -> list[tuple[str, str, int]]:
        """Lock (or renew) what is free or already ours; returns the queues we hold."""
        locks = self.table.setdefault(group, {})
        held = []
        for mq in mqs:
            entry = locks.get(mq)
            if entry is None or entry.client_id == client_id or now - entry.last_update > self.max_live_time:
                locks[mq] = LockEntry(client_id, now)
                held.append(mq)
        return held

    def unlock_batch(self, group: str, mqs: list[tuple[str, str, int]], client_id: str) -> None:
        locks = self.table.get(group, {})
        for mq in mqs:
            entry = locks.get(mq)
            if entry is not None and entry.client_id == client_id:
                del locks[mq]
