"""SubscriptionGroupManager: consumer groups' settings, persisted to config/subscriptionGroup.json.

As RocketMQ's: a group gets a config the first time it is seen (heartbeat,
pull, send-back) when ``autoCreateSubscriptionGroup`` is on; an admin can
create or change one with ``UPDATE_AND_CREATE_SUBSCRIPTIONGROUP``. The
settings the broker acts on: ``consumeEnable`` (pulls refused when off),
``consumeBroadcastEnable`` (broadcasting consumers refused when off),
``retryQueueNums`` (queues of ``%RETRY%<group>``) and ``retryMaxTimes``
(reconsume attempts before ``%DLQ%<group>``).

Kept as the topics are (broker/persist.py ``JournaledTable``): every change
is one numbered record in ``subscriptionGroup.json.journal``, appended with
every other change waiting in one write and one fsync by the broker's journal
writer (broker/journal_writer.py) in a worker thread; ``durable_seq`` says
which changes are on disk, so an admin's change is answered once it is
(AdminService). Groups created on the fly are journaled soon after, never
with an fsync each. A compaction rewrites ``subscriptionGroup.json``
(RocketMQ's layout plus ``journalSeq``) when the journal has grown past the
table; ``load`` reads it and replays the records after it.

A ``SubscriptionGroupConfig`` is immutable: a change replaces it in the table,
so a snapshot is a shallow copy of the table taken on the event loop and
rendered to JSON in the worker thread that writes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from broker.config import BrokerConfig
from broker.persist import JournaledSnapshot, JournaledTable, load_json
from protocol.names import shown
from protocol.route import DataVersion
from protocol.subscription_group import SubscriptionGroupConfig

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupManager"]


class SubscriptionGroupManager(JournaledTable):
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion(int(time.time() * 1000))
        path: Path = config.store_path("config", "subscriptionGroup.json")
        self._init_journal(path)
        self.log = structlog.get_logger("broker.subscription_groups").bind(
            broker=config.broker_name
        )

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, created with defaults when auto-creation is on."""
        cfg = self.table.get(group)
        if cfg is None and self.config.auto_create_subscription_group:
            cfg = SubscriptionGroupConfig(group, retry_max_times=self.config.max_reconsume_times)
            self.table[group] = cfg
            self._record(cfg)
            self.log.info("subscription group created", group=group)
        return cfg

    def put(self, cfg: SubscriptionGroupConfig) -> int:
        """Add or change a group; returns the change's number (durable once
        ``durable_seq`` reaches it)."""
        self.table[cfg.group_name] = cfg
        self.log.info("subscription group updated", group=cfg.group_name, config=cfg.to_dict())
        return self._record(cfg)

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        self.put(cfg)

    def remove(self, group: str) -> int | None:
        """Delete a group; the change's number, or None when there was none."""
        if self.table.pop(group, None) is None:
            return None
        self.log.info("subscription group deleted", group=group)
        return self._record(None, group)

    def delete(self, group: str) -> bool:
        return self.remove(group) is not None

    def merge(self, changes: dict[str, SubscriptionGroupConfig], version: DataVersion) -> None:
        """A slave takes its master's groups (SlaveSynchronize): ``changes``, the
        master's groups that are new here or differ, are added or updated; groups
        only this broker has are kept (a group deleted on the master stays on
        the slave). The data version becomes the master's. Many changes at once
        are written as a whole-table snapshot."""
        if not changes and version == self.data_version:
            return
        self.table.update(changes)
        self.data_version = DataVersion(version.timestamp, version.counter)
        if len(changes) >= self.compact_min_records():
            self._whole_table_due()
        elif not changes:  # the version alone
            self._journal_record({"dataVersion": self.data_version.to_dict()})
        else:
            for cfg in changes.values():
                self._record(cfg, version=version)
        if changes:
            self.log.info("subscription groups copied from the master", changed=len(changes),
                          count=len(self.table))

    def _record(self, cfg: SubscriptionGroupConfig | None, deleted: str = "",
                version: DataVersion | None = None) -> int:
        """Journal a change (a put, or the deletion of ``deleted``); the data
        version moves on unless it is ``version`` (a master's)."""
        if version is None:
            self.data_version.next_version(int(time.time() * 1000))
        rec: dict[str, Any] = {"dataVersion": self.data_version.to_dict()}
        if cfg is not None:
            rec["put"] = cfg.to_dict()
        else:
            rec["delete"] = deleted
        return self._journal_record(rec)

    def to_wire(self) -> dict[str, Any]:
        return {
            "subscriptionGroupTable": {n: c.to_dict() for n, c in sorted(self.table.items())},
            "dataVersion": self.data_version.to_dict(),
        }

    # ---- the journal (broker/persist.py JournaledTable) --------------------------

    def table_size(self) -> int:
        return len(self.table)

    def snapshot_data(self) -> tuple[Any, Callable[[Any], bytes]]:
        # configs are immutable: copying the table is enough
        return (dict(self.table), self.data_version.to_dict(), self.seq), _render

    def snapshot(self, force: bool = False) -> JournaledSnapshot | None:
        """On the event loop: the whole table to write (holding every change so
        far), or None when nothing waits (unless ``force``)."""
        return self.journaled_snapshot(force)

    def _valid(self, raw: Any, where: str) -> SubscriptionGroupConfig | None:
        try:
            return SubscriptionGroupConfig.from_dict(raw)
        except ValueError as exc:
            name = raw.get("groupName") if isinstance(raw, dict) else None
            self.log.warning(f"bad subscription group in {where} skipped", group=shown(name),
                             error=str(exc))
            return None

    def load(self) -> None:
        """The snapshot, then the journal's records after it (at start)."""
        data = load_json(self.path)
        base_seq = 0
        if isinstance(data, dict):
            table = data.get("subscriptionGroupTable") or {}
            for name, raw in table.items() if isinstance(table, dict) else ():
                cfg = self._valid(raw, "subscriptionGroup.json")
                if cfg is not None and cfg.group_name == name:
                    self.table[name] = cfg
            self.data_version = DataVersion.from_dict(data.get("dataVersion"))
            seq = data.get("journalSeq")
            base_seq = seq if type(seq) is int and seq > 0 else 0

        def apply(rec: dict[str, Any]) -> None:
            if "put" in rec:
                cfg = self._valid(rec["put"], "subscriptionGroup.json.journal")
                if cfg is not None:
                    self.table[cfg.group_name] = cfg
            elif isinstance(rec.get("delete"), str):
                self.table.pop(rec["delete"], None)
            self.data_version = DataVersion.from_dict(rec.get("dataVersion"))

        replayed = self.replay(base_seq, apply)
        self.log.info("subscription groups loaded", count=len(self.table),
                      journal_records=replayed)

    def persist(self, force: bool = False) -> None:
        """The whole table written now, in the caller's thread (tools, tests,
        shutdown; not while the journal writer runs). ``force`` is accepted
        for the callers of the snapshot-only days: it is always written."""
        super().persist()


def _render(data: tuple[dict[str, SubscriptionGroupConfig], dict[str, int], int]) -> bytes:
    table, version, seq = data
    return json.dumps({
        "subscriptionGroupTable": {n: c.to_dict() for n, c in sorted(table.items())},
        "dataVersion": version,
        "journalSeq": seq,
    }, indent=2, sort_keys=True).encode()
