"""ConsumerOffsetManager: committed offsets per group, topic and queue.

Persisted to config/consumerOffset.json as ``{"offsetTable": {"topic@group":
{queueId: offset}}, "resetVersions": {"topic@group": n}}``, every
``flushConsumerOffsetInterval`` ms and at shutdown: ``snapshot()`` copies the
table on the event loop, the copy is written in a worker thread
(``ConfigSnapshot.write``). A file without ``resetVersions`` (older brokers)
loads with no counters.

Reset counters: a slave keeps its offsets moving forward only (the larger of
its own and its master's, SlaveSynchronize), so a master must say when a
group's offsets were moved back on purpose. Every reset of a ``topic@group``
on a master adds one to the key's counter: an admin's reset (an
UPDATE_CONSUMER_OFFSET with ``adminReset=true``, sent by mqadmin
resetOffsetByTime and the dashboard), any commit that moves one of its
offsets back (a consumer's seek; RocketMQ's tools reset with plain commits),
and a deleted topic (its offsets removed). The counters travel with the
offsets (GET_ALL_CONSUMER_OFFSET's ``resetVersions``); a slave whose counter
for a key is lower takes the master's offsets of that key as they are, even
downwards. On a slave the counters only mirror its master's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from broker.config import BrokerConfig
from broker.persist import ConfigSnapshot, load_json, write_snapshot_now

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, config: BrokerConfig) -> None:
        self.offset_table: dict[str, dict[int, int]] = {}
        # topic@group -> how many times its offsets were reset (absent: never)
        self.reset_versions: dict[str, int] = {}
        # a master counts commits that move an offset back as resets; a slave's
        # counters are its master's (SlaveSynchronize)
        self.count_rewinds = not config.is_slave
        self.path: Path = config.store_path("config", "consumerOffset.json")
        self.dirty = False
        self.log = structlog.get_logger("broker.offsets").bind(broker=config.broker_name)

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """A consumer's commit. On a master, one that moves the offset back is a reset."""
        key = self.key(topic, group)
        queues = self.offset_table.setdefault(key, {})
        if self.count_rewinds and offset < queues.get(queue_id, offset):
            self._count_reset(key)
        queues[queue_id] = offset
        self.dirty = True

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """An admin's reset of one queue's offset (either way): counted."""
        key = self.key(topic, group)
        self._count_reset(key)
        self.offset_table.setdefault(key, {})[queue_id] = offset
        self.dirty = True

    def commit_forward(self, group: str, topic: str, queue_id: int, offset: int,
                       reset_version: int | None) -> bool:
        """A slave's offset (``increaseOnly``): taken only when it moves the
        offset forward and, when ``reset_version`` is given, no reset of the key
        happened since the slave read this broker's offsets (the counters equal).
        Returns whether it was taken."""
        key = self.key(topic, group)
        if reset_version is not None and reset_version != self.reset_versions.get(key, 0):
            return False
        queues = self.offset_table.setdefault(key, {})
        if offset <= queues.get(queue_id, -1):
            return False
        queues[queue_id] = offset
        self.dirty = True
        return True

    def reset_version(self, topic: str, group: str) -> int:
        return self.reset_versions.get(self.key(topic, group), 0)

    def _count_reset(self, key: str) -> None:
        self.reset_versions[key] = self.reset_versions.get(key, 0) + 1

    def apply_master(self, updates: Mapping[str, dict[int, int] | None],
                     versions: Mapping[str, int]) -> None:
        """A slave takes what a sync round decided (SlaveSynchronize's
        ``merge_offsets``): ``updates`` are keys' new queue offsets (None: the
        key goes), ``versions`` keys' reset counters from now on (0: none)."""
        for key, queues in updates.items():
            if queues is None:
                self.offset_table.pop(key, None)
            else:
                self.offset_table[key] = queues
        for key, n in versions.items():
            if n > 0:
                self.reset_versions[key] = n
            else:
                self.reset_versions.pop(key, None)
        if updates or versions:
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
        """The topic was deleted: its offsets go, and each key counts a reset
        (so a slave drops them too; the counters stay)."""
        prefix = topic + TOPIC_GROUP_SEPARATOR
        for k in [k for k in self.offset_table if k.startswith(prefix)]:
            del self.offset_table[k]
            self._count_reset(k)
            self.dirty = True

    def to_wire(self) -> dict[str, Any]:
        return {
            "offsetTable": {
                k: {str(q): o for q, o in v.items()} for k, v in self.offset_table.items()
            },
            # ours: RocketMQ's brokers and tools ignore a key they do not know
            "resetVersions": dict(self.reset_versions),
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
        return ConfigSnapshot(self.path, {"offsetTable": table,
                                          "resetVersions": dict(self.reset_versions)})

    def load(self) -> None:
        data = load_json(self.path)
        if not data:
            return
        for k, queues in (data.get("offsetTable") or {}).items():
            self.offset_table[k] = {int(q): int(o) for q, o in queues.items()}
        for k, n in (data.get("resetVersions") or {}).items():  # absent in older files
            if int(n) > 0:
                self.reset_versions[k] = int(n)
        self.log.info("consumer offsets loaded", entries=len(self.offset_table),
                      reset_counters=len(self.reset_versions))

    def persist(self, force: bool = False) -> None:
        """Snapshot and write now, in the caller's thread (tests, shutdown)."""
        write_snapshot_now(self, force)
