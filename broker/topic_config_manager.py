"""TopicConfigManager: the broker's topics, persisted to config/topics.json.

An admin's change is written before ``update``/``delete`` return: a topic an
admin created is on disk when the request is answered and survives a kill -9
right after. Topics created on the fly (auto-create on send, retry and
dead-letter topics) are written soon after, coalesced: ``on_dirty`` wakes the
broker's topic persist task, which takes ``snapshot()`` on the event loop and
writes it in a worker thread, so a burst of creations costs one write and
never an fsync per topic on the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from broker.config import BrokerConfig
from broker.persist import ConfigSnapshot, load_json
from broker.topic_validator import AUTO_CREATE_TOPIC_KEY_TOPIC, SELF_TEST_TOPIC
from protocol.errors import RemoteProtocolError
from protocol.names import shown
from protocol.route import PERM_INHERIT, PERM_RW, DataVersion, TopicConfig, topic_config_problem


class TopicConfigManager:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(int(time.time() * 1000))
        self.path: Path = config.store_path("config", "topics.json")
        self.log = structlog.get_logger("broker.topics").bind(broker=config.broker_name)
        self.dirty = False
        # called when a change waits to be written (the broker wakes its persist task)
        self.on_dirty: Callable[[], None] = lambda: None
        self._add_system_topics()

    def _add_system_topics(self) -> None:
        self.table[SELF_TEST_TOPIC] = TopicConfig(SELF_TEST_TOPIC, 1, 1)
        if self.config.auto_create_topic_enable:
            n = self.config.default_topic_queue_nums
            self.table[AUTO_CREATE_TOPIC_KEY_TOPIC] = TopicConfig(
                AUTO_CREATE_TOPIC_KEY_TOPIC, n, n, PERM_RW | PERM_INHERIT
            )
        for name in (self.config.broker_cluster_name, self.config.broker_name):
            self.table[name] = TopicConfig(name, 1, 1, PERM_INHERIT)

    def load(self) -> None:
        data = load_json(self.path)
        if not data:
            return
        for name, raw in (data.get("topicConfigTable") or {}).items():
            try:
                cfg = TopicConfig.from_dict(raw)
            except RemoteProtocolError as exc:
                problem: str | None = str(exc)
            else:
                problem = (topic_config_problem(cfg, self.config.max_queue_nums)
                           if cfg.topic_name == name else "its key differs from its topicName")
            if problem is not None:
                self.log.warning("invalid topic in topics.json skipped", topic=shown(name),
                                 reason=problem)
                continue
            self.table[name] = cfg
        self.data_version = DataVersion.from_dict(data.get("dataVersion"))
        if not self.config.auto_create_topic_enable:
            self.table.pop(AUTO_CREATE_TOPIC_KEY_TOPIC, None)
        self.log.info("topics loaded", count=len(self.table))

    def snapshot(self, force: bool = True) -> ConfigSnapshot | None:
        """On the event loop: the table to write (a copy); None when nothing
        changed since the last snapshot and ``force`` is off."""
        if not (force or self.dirty):
            return None
        self.dirty = False
        return ConfigSnapshot(self.path, self.to_wire())

    def persist(self) -> None:
        """Write the table now, in the caller's thread (fsync: durable on return)."""
        snap = self.snapshot()
        assert snap is not None
        snap.write()

    def to_wire(self) -> dict[str, Any]:
        return {
            "topicConfigTable": {n: c.to_dict() for n, c in self.table.items()},
            "dataVersion": self.data_version.to_dict(),
        }

    def replace(self, table: dict[str, TopicConfig], version: DataVersion) -> None:
        """A slave takes its master's table (SlaveSynchronize); written soon."""
        self.table = dict(table)
        self.data_version = version
        self.log.info("topics copied from the master", count=len(table))
        self.dirty = True
        self.on_dirty()

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def update(self, cfg: TopicConfig, durable: bool = True) -> None:
        """Add or change a topic; written now when ``durable`` (an admin's
        request), else soon by the broker's persist task."""
        old = self.table.get(cfg.topic_name)
        self.table[cfg.topic_name] = cfg
        self.log.info("topic created" if old is None else "topic updated", topic=cfg.topic_name,
                      read=cfg.read_queue_nums, write=cfg.write_queue_nums, perm=cfg.perm)
        self.data_version.next_version(int(time.time() * 1000))
        if durable:
            self.persist()
        else:
            self.dirty = True
            self.on_dirty()

    def delete(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        self.log.info("topic deleted", topic=topic)
        self.data_version.next_version(int(time.time() * 1000))
        self.persist()
        return True

    def create_topic_in_send_back(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """The retry or dead-letter topic of a group, created on first use."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        cfg = TopicConfig(topic, queue_nums, queue_nums, perm)
        self.update(cfg, durable=False)
        return cfg

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
