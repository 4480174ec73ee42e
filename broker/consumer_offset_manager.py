"""ConsumerOffsetManager: committed offsets per group, topic and queue.

Persisted to config/consumerOffset.json as ``{"offsetTable": {"topic@group":
{queueId: offset}}}``, every ``flushConsumerOffsetInterval`` ms and at shutdown:
``snapshot()`` copies the table on the event loop, the copy is written in a
worker thread (``ConfigSnapshot.write``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog

from broker.config import BrokerConfig
from broker.persist import ConfigSnapshot, load_json, write_snapshot_now

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

    def replace(self, table: dict[str, dict[int, int]]) -> None:
        """A slave takes its master's offsets (SlaveSynchronize)."""
        if table != self.offset_table:
            self.offset_table = table
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

    def snapshot(self, force: bool = False) -> ConfigSnapshot | None:
        """On the event loop: a copy of the table to write, or None when nothing
        changed since the last snapshot (unless ``force``). Clears ``dirty``;
        a caller whose write fails sets it again."""
        if not (self.dirty or force):
            return None
        self.dirty = False
        # the inner dicts are mutated in place by commits: copy them too (C-speed);
        # json writes their int keys as strings
        table = {k: dict(v) for k, v in self.offset_table.items()}
        return ConfigSnapshot(self.path, {"offsetTable": table})

    def load(self) -> None:
        data = load_json(self.path)
        if not data:
            return
        for k, queues in (data.get("offsetTable") or {}).items():
            self.offset_table[k] = {int(q): int(o) for q, o in queues.items()}
        self.log.info("consumer offsets loaded", entries=len(self.offset_table))

    def persist(self, force: bool = False) -> None:
        """Snapshot and write now, in the caller's thread (tests, shutdown)."""
        write_snapshot_now(self, force)
