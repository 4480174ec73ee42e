"""ConsumerOffsetManager: committed offsets per group, topic and queue.

Persisted to config/consumerOffset.json as ``{"offsetTable": {"topic@group":
{queueId: offset}}}``, every ``flushConsumerOffsetInterval`` ms and at shutdown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog

from broker.config import BrokerConfig
from broker.persist import atomic_write_json, load_json

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, config: BrokerConfig) -> None:
        self.offset_table: dict[str, dict[int, int]] = {}
        self.path: Path = config.store_path("config", "consumerOffset.json")
        self.dirty = False
        self.log = structlog.get_logger("broker.offsets").bind(broker=config.broker_name)

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offset_table.setdefault(self.key(topic, group), {})[queue_id] = offset
        self.dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group has none for the queue."""
        return self.offset_table.get(self.key(topic, group), {}).get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.offset_table.get(self.key(topic, group), {}))

    def groups_of_topic(self, topic: str) -> set[str]:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        return {k[len(prefix):] for k in self.offset_table if k.startswith(prefix)}

    def remove_topic(self, topic: str) -> None:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        for k in [k for k in self.offset_table if k.startswith(prefix)]:
            del self.offset_table[k]
            self.dirty = True

    def to_wire(self) -> dict[str, Any]:
        return {
            "offsetTable": {
                k: {str(q): o for q, o in v.items()} for k, v in self.offset_table.items()
            }
        }

    def load(self) -> None:
        data = load_json(self.path)
        if not data:
            return
        for k, queues in (data.get("offsetTable") or {}).items():
            self.offset_table[k] = {int(q): int(o) for q, o in queues.items()}
        self.log.info("consumer offsets loaded", entries=len(self.offset_table))

    def persist(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        atomic_write_json(self.path, self.to_wire())
