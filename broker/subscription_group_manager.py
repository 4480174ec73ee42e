"""SubscriptionGroupManager: consumer groups' settings, persisted to config/subscriptionGroup.json.

As RocketMQ's: a group gets a config the first time it is seen (heartbeat,
pull, send-back) when ``autoCreateSubscriptionGroup`` is on; an admin can
create or change one with ``UPDATE_AND_CREATE_SUBSCRIPTIONGROUP``. The
settings the broker acts on: ``consumeEnable`` (pulls refused when off),
``consumeBroadcastEnable`` (broadcasting consumers refused when off),
``retryQueueNums`` (queues of ``%RETRY%<group>``) and ``retryMaxTimes``
(reconsume attempts before ``%DLQ%<group>``).

A ``SubscriptionGroupConfig`` is immutable: a change replaces it in the table,
so a snapshot is a shallow copy of the table taken on the event loop and
rendered to JSON in the worker thread that writes it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import structlog

from broker.config import BrokerConfig
from broker.persist import ConfigSnapshot, load_json, write_snapshot_now
from protocol.route import DataVersion
from protocol.subscription_group import SubscriptionGroupConfig

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupManager"]


class SubscriptionGroupManager:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion(int(time.time() * 1000))
        self.path: Path = config.store_path("config", "subscriptionGroup.json")
        self.dirty = False
        self.log = structlog.get_logger("broker.subscription_groups").bind(
            broker=config.broker_name
        )

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, created with defaults when auto-creation is on."""
        cfg = self.table.get(group)
        if cfg is None and self.config.auto_create_subscription_group:
            cfg = SubscriptionGroupConfig(group, retry_max_times=self.config.max_reconsume_times)
            self.table[group] = cfg
            self._changed()
            self.log.info("subscription group created", group=group)
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        self.table[cfg.group_name] = cfg
        self._changed()
        self.log.info("subscription group updated", group=cfg.group_name, config=cfg.to_dict())

    def merge(self, changes: dict[str, SubscriptionGroupConfig], version: DataVersion) -> None:
        """A slave takes its master's groups (SlaveSynchronize): ``changes``, the
        master's groups that are new here or differ, are added or updated; groups
        only this broker has are kept (a group deleted on the master stays on
        the slave). The data version becomes the master's."""
        self.table.update(changes)
        if version != self.data_version or changes:
            self.data_version = DataVersion(version.timestamp, version.counter)
            self.dirty = True
        if changes:
            self.log.info("subscription groups copied from the master", changed=len(changes),
                          count=len(self.table))

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self._changed()
        self.log.info("subscription group deleted", group=group)
        return True

    def _changed(self) -> None:
        self.data_version.next_version(int(time.time() * 1000))
        self.dirty = True

    def to_wire(self) -> dict[str, Any]:
        return _render((self.table, self.data_version.to_dict()))

    def snapshot(self, force: bool = False) -> ConfigSnapshot | None:
        """On the event loop: the table to write, or None when unchanged (unless
        ``force``). Clears ``dirty``; a caller whose write fails sets it again."""
        if not (self.dirty or force):
            return None
        self.dirty = False
        # configs are immutable: copying the table is enough
        return ConfigSnapshot(self.path, (dict(self.table), self.data_version.to_dict()),
                              _render)

    def load(self) -> None:
        data = load_json(self.path)
        if not data:
            return
        for name, raw in (data.get("subscriptionGroupTable") or {}).items():
            try:
                self.table[name] = SubscriptionGroupConfig.from_dict(raw)
            except ValueError as exc:
                self.log.warning("bad subscription group skipped", group=name, error=str(exc))
        self.data_version = DataVersion.from_dict(data.get("dataVersion"))
        self.log.info("subscription groups loaded", count=len(self.table))

    def persist(self, force: bool = False) -> None:
        """Snapshot and write now, in the caller's thread (tests, shutdown)."""
        write_snapshot_now(self, force)


def _render(data: tuple[dict[str, SubscriptionGroupConfig], dict[str, int]]) -> dict[str, Any]:
    table, version = data
    return {
        "subscriptionGroupTable": {n: c.to_dict() for n, c in sorted(table.items())},
        "dataVersion": version,
    }
