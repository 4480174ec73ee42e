"""TopicConfigManager: the broker's topics, persisted under config/.

A change costs the same with 100,000 topics as with 10: it is one record in
``topics.json.journal`` (broker/persist.py: TableJournal), not a rewrite of
the table. Every change gets a number (``seq``) and goes to ``_pending``; the
broker's topic persist task takes every record waiting (``next_write``) and
appends them with one write and one fsync in a worker thread (group commit),
then calls ``written``: ``durable_seq`` says which changes are on disk. An
admin's change is answered once ``durable_seq`` reaches it (AdminService,
through the topics' ``JournalWriter``: broker/journal_writer.py); topics
created on the fly (auto-create on send, retry and dead-letter topics) are
journaled soon after, never with an fsync per topic on the event loop. The
bookkeeping is ``JournaledTable``'s (broker/persist.py), shared with the
subscription groups.

When the journal has grown past the table's size (at least
COMPACT_MIN_RECORDS records) the next write is a compaction instead: the
table, copied on the event loop, is written to ``topics.json`` atomically in
the worker thread and the journal starts afresh (``JournaledSnapshot``).
``load`` reads the snapshot and replays the records after it.

For name-server registration the manager remembers which topics changed
when (``changes_since``), so a registration carries only what changed since
the last one a name server took.

Topic configs are never changed in place: a change replaces the table's
object, so a shallow copy of the table is a snapshot.

``update``/``delete`` with ``durable=True`` and ``persist`` keep the old
synchronous contract (the whole table written in the caller's thread before
they return): for tools and tests, not for the broker's request paths.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from broker.config import BrokerConfig
from broker.persist import (
    JournaledSnapshot,
    JournaledTable,
    TableWrite,
    load_json,
)
from broker.topic_validator import AUTO_CREATE_TOPIC_KEY_TOPIC, SELF_TEST_TOPIC
from protocol.errors import RemoteProtocolError
from protocol.names import shown
from protocol.route import (
    PERM_INHERIT,
    PERM_RW,
    PERM_WRITE,
    DataVersion,
    TopicConfig,
    topic_config_problem,
)

# queues of a group's dead-letter topic (RocketMQ's DLQ_NUMS_PER_GROUP)
DLQ_NUMS_PER_GROUP = 1
# A compaction is due once the journal holds this many records and more than the table.
COMPACT_MIN_RECORDS = 10_000
# Deleted topics remembered for incremental registration before they are forgotten
# (name servers that have not seen the older changes then get a full registration).
MAX_REMEMBERED_DELETIONS = 10_000

TopicWrite = TableWrite


def render_topics(data: tuple[dict[str, TopicConfig], dict[str, int], int]) -> bytes:
    """topics.json: one topic per line (readable, and fast to write at 100,000)."""
    table, version, seq = data
    encode = json.JSONEncoder(sort_keys=True).encode
    lines = ",\n".join(
        f"    {encode(name)}: {encode(cfg.to_dict())}" for name, cfg in sorted(table.items())
    )
    return (
        "{\n"
        f'  "dataVersion": {json.dumps(version, sort_keys=True)},\n'
        f'  "journalSeq": {seq},\n'
        '  "topicConfigTable": {\n'
        f"{lines}\n"
        "  }\n"
        "}\n"
    ).encode()


class TopicConfigManager(JournaledTable):
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(int(time.time() * 1000))
        path: Path = config.store_path("config", "topics.json")
        self._init_journal(path)
        self.log = structlog.get_logger("broker.topics").bind(broker=config.broker_name)
        # topic -> number of its latest change, oldest first (deleted topics too)
        self._changed: dict[str, int] = {}
        self._deletions = 0
        # changes_since(s) knows every change after s only for s >= changes_floor
        self.changes_floor = 0
        self._add_system_topics()

    def _add_system_topics(self) -> None:
        self.table[SELF_TEST_TOPIC] = TopicConfig(SELF_TEST_TOPIC, 1, 1)
        if self.config.auto_create_topic_enable:
            n = self.config.default_topic_queue_nums
            self.table[AUTO_CREATE_TOPIC_KEY_TOPIC] = TopicConfig(
                AUTO_CREATE_TOPIC_KEY_TOPIC, n, n, PERM_RW | PERM_INHERIT
            )
        for name, enabled in ((self.config.broker_cluster_name, self.config.cluster_topic_enable),
                              (self.config.broker_name, self.config.broker_topic_enable)):
            self.table[name] = TopicConfig(name, 1, 1, PERM_INHERIT | (PERM_RW if enabled else 0))
        if self.config.trace_topic_enable:  # message trace (RocketMQ 4.4+): one queue
            name = self.config.msg_trace_topic_name
            self.table[name] = TopicConfig(name, 1, 1)

    # ---- loading -------------------------------------------------------------

    def _valid(self, name: object, raw: Any, where: str) -> TopicConfig | None:
        try:
            cfg = TopicConfig.from_dict(raw)
        except RemoteProtocolError as exc:
            problem: str | None = str(exc)
        else:
            problem = (topic_config_problem(cfg, self.config.max_queue_nums)
                       if cfg.topic_name == name else "its key differs from its topicName")
        if problem is not None:
            self.log.warning(f"invalid topic in {where} skipped", topic=shown(name),
                             reason=problem)
            return None
        return cfg

    def load(self) -> None:
        """The snapshot, then the journal's records after it (worker thread, at start)."""
        data = load_json(self.path)
        base_seq = 0
        if isinstance(data, dict):
            table = data.get("topicConfigTable") or {}
            for name, raw in table.items() if isinstance(table, dict) else ():
                cfg = self._valid(name, raw, "topics.json")
                if cfg is not None:
                    self.table[name] = cfg
            self.data_version = DataVersion.from_dict(data.get("dataVersion"))
            seq = data.get("journalSeq")
            base_seq = seq if type(seq) is int and seq > 0 else 0

        def apply(rec: dict[str, Any]) -> None:
            if "put" in rec:
                raw = rec["put"]
                name = raw.get("topicName") if isinstance(raw, dict) else None
                cfg = self._valid(name, raw, "topics.json.journal")
                if cfg is not None:
                    self.table[cfg.topic_name] = cfg
            elif isinstance(rec.get("delete"), str):
                self.table.pop(rec["delete"], None)
            self.data_version = DataVersion.from_dict(rec.get("dataVersion"))

        replayed = self.replay(base_seq, apply)
        self.changes_floor = self.seq
        if not self.config.auto_create_topic_enable:
            self.table.pop(AUTO_CREATE_TOPIC_KEY_TOPIC, None)
        self.log.info("topics loaded", count=len(self.table), journal_records=replayed)

    # ---- changes -------------------------------------------------------------

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def next_data_version(self) -> None:
        """A new dataVersion with no topic changed (brokerPermission changed: the
        name servers must apply the whole table again, RocketMQ's nextVersion)."""
        self.data_version.next_version(int(time.time() * 1000))

    def _record(self, topic: str, cfg: TopicConfig | None,
                version: DataVersion | None = None) -> int:
        """Number a change, queue its journal record, wake the writer. The data
        version moves on, or becomes ``version`` (a master's, SlaveSynchronize)."""
        if version is None:
            self.data_version.next_version(int(time.time() * 1000))
        else:
            self.data_version = DataVersion(version.timestamp, version.counter)
        rec: dict[str, Any] = {"dataVersion": self.data_version.to_dict()}
        if cfg is not None:
            rec["put"] = cfg.to_dict()
        else:
            rec["delete"] = topic
        seq = self._journal_record(rec)
        self._changed.pop(topic, None)
        self._changed[topic] = seq
        if cfg is None:
            self._deletions += 1
            if self._deletions > MAX_REMEMBERED_DELETIONS:
                self._forget_deletions()
        return seq

    def _forget_deletions(self) -> None:
        self._changed = {t: s for t, s in self._changed.items() if t in self.table}
        self._deletions = 0
        self.changes_floor = self.seq

    def put(self, cfg: TopicConfig) -> int:
        """Add or change a topic; returns the change's number. Journaled by the
        persist task: durable once ``durable_seq`` reaches the number."""
        old = self.table.get(cfg.topic_name)
        self.table[cfg.topic_name] = cfg
        self.log.info("topic created" if old is None else "topic updated", topic=cfg.topic_name,
                      read=cfg.read_queue_nums, write=cfg.write_queue_nums, perm=cfg.perm)
        return self._record(cfg.topic_name, cfg)

    def remove(self, topic: str) -> int | None:
        """Delete a topic; the change's number, or None when there was none."""
        if self.table.pop(topic, None) is None:
            return None
        self.log.info("topic deleted", topic=topic)
        return self._record(topic, None)

    def update(self, cfg: TopicConfig, durable: bool = True) -> None:
        """Add or change a topic; with ``durable``, the whole table is written
        now in the caller's thread (tools and tests), else soon by the persist task."""
        self.put(cfg)
        if durable:
            self.persist()

    def delete(self, topic: str, durable: bool = True) -> bool:
        if self.remove(topic) is None:
            return False
        if durable:
            self.persist()
        return True

    def merge(self, changes: dict[str, TopicConfig], version: DataVersion) -> None:
        """A slave takes its master's topics (SlaveSynchronize): ``changes``, the
        master's topics that are new here or differ, are added or updated, one
        journal record each (as ``put``); topics only this broker has are kept, so
        a master that lost its topics never empties its slave, and a topic
        deleted on the master stays on the slave (delete it there too). The data
        version becomes the master's. Many changes at once (a new slave's first
        copy) are written as a whole-table snapshot instead, as ``replace``."""
        if len(changes) < COMPACT_MIN_RECORDS:
            for name, cfg in changes.items():
                self.table[name] = cfg
                self._record(name, cfg, version)
        else:
            self.table.update(changes)
            self._whole_table_changed()
        self.data_version = DataVersion(version.timestamp, version.counter)
        if changes:
            self.log.info("topics copied from the master", changed=len(changes),
                          count=len(self.table))

    def replace(self, table: dict[str, TopicConfig], version: DataVersion) -> None:
        """A slave takes its master's table (SlaveSynchronize); written soon,
        as a whole-table snapshot. Registrations after it are full ones."""
        self.table = dict(table)
        self.data_version = version
        self.log.info("topics copied from the master", count=len(table))
        self._whole_table_changed()

    def _whole_table_changed(self) -> None:
        """Written soon as a whole-table snapshot; registrations after it are full ones."""
        self._changed.clear()
        self._deletions = 0
        self.changes_floor = self._whole_table_due()

    def create_topic_in_send_back(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """The retry or dead-letter topic of a group, created on first use."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        cfg = TopicConfig(topic, queue_nums, queue_nums, perm)
        self.update(cfg, durable=False)
        return cfg

    def create_dead_letter_topic(self, topic: str) -> tuple[TopicConfig, bool]:
        """A group's dead-letter topic (``%DLQ%<group>``), created on first use
        with one queue, write only (no consumer reads it; tools do), as RocketMQ
        4.x up to 4.9.0 creates it (later versions make it readable too).
        Returns the config and whether it was created now."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing, False
        return self.create_topic_in_send_back(topic, DLQ_NUMS_PER_GROUP, PERM_WRITE), True

    def create_topic_in_send_message_method(
        self, topic: str, default_topic: str, queue_nums: int
    ) -> TopicConfig | None:
        """Auto-create ``topic`` from ``default_topic``'s config, as RocketMQ does."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        default = self.table.get(default_topic)
        if default is None or not default.perm & PERM_INHERIT:
            return None
        n = max(1, min(queue_nums, default.write_queue_nums))
        cfg = TopicConfig(topic, n, n, default.perm & ~PERM_INHERIT)
        self.update(cfg, durable=False)
        return cfg

    # ---- registration --------------------------------------------------------

    def changes_since(self, seq: int) -> tuple[dict[str, TopicConfig], list[str]] | None:
        """(topics added or changed, topics deleted) after change ``seq``; None
        when they are not all known (a name server needs the whole table)."""
        if seq < self.changes_floor:
            return None
        changed: dict[str, TopicConfig] = {}
        deleted: list[str] = []
        for topic in reversed(self._changed):
            if self._changed[topic] <= seq:
                break
            cfg = self.table.get(topic)
            if cfg is None:
                deleted.append(topic)
            else:
                changed[topic] = cfg
        return changed, deleted

    def to_wire(self) -> dict[str, Any]:
        return {
            "topicConfigTable": {n: c.to_dict() for n, c in self.table.items()},
            "dataVersion": self.data_version.to_dict(),
        }

    # ---- writing (the journal writer: broker/persist.py JournaledTable) -------

    def table_size(self) -> int:
        return len(self.table)

    def compact_min_records(self) -> int:
        return COMPACT_MIN_RECORDS

    def snapshot_data(self) -> tuple[Any, Callable[[Any], bytes]]:
        # a shallow copy: configs are never changed in place
        return (dict(self.table), self.data_version.to_dict(), self.seq), render_topics

    def snapshot(self, force: bool = True) -> JournaledSnapshot | None:
        """On the event loop: the whole table to write, holding every change so
        far; None when nothing waits and ``force`` is off."""
        return self.journaled_snapshot(force)
