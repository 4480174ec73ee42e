"""Offset stores: where a consumer keeps the next offset of each queue.

- ``RemoteBrokerOffsetStore`` (clustering): offsets live on the queue's
  broker (``UPDATE_CONSUMER_OFFSET`` / ``QUERY_CONSUMER_OFFSET``), so another
  member of the group can take a queue over where this one stopped. They go
  to the master, or to a slave while the master is down; an offset counts as
  written only for the broker it reached, so it is written again when the
  master comes back (whose table is older than what its slave was given).
- ``LocalFileOffsetStore`` (broadcasting): every member consumes everything,
  so each keeps its own offsets in a JSON file
  (``<dir>/<client ip>@<instance name>/<group>/offsets.json``), written
  atomically (temp file, fsync, rename; the previous file kept as ``.bak``).

Both keep the current offsets in memory (``update_offset``) and write them
out on ``persist_all`` (every 5 s by the client instance, and at shutdown).
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from enum import Enum
from pathlib import Path

import structlog
import trio

from client.consumer_api import ConsumerAPI
from client.errors import MQBrokerError, MQClientError
from protocol.message import MessageQueue

log = structlog.get_logger("client.offset_store")


class ReadOffsetType(Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetStore(ABC):
    def __init__(self, group: str) -> None:
        self.group = group
        self.table: dict[MessageQueue, int] = {}

    async def load(self) -> None:
        """Read what was persisted (local store); nothing for the remote store."""
        return None

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        if offset < 0:
            return
        if increase_only and self.table.get(mq, -1) >= offset:
            return
        self.table[mq] = offset

    async def read_offset(self, mq: MessageQueue, how: ReadOffsetType) -> int:
        """The offset of ``mq``, or -1 when unknown. Raises MQClientError /
        MQBrokerError when the store cannot be read (remote)."""
        if how is not ReadOffsetType.READ_FROM_STORE:
            offset = self.table.get(mq)
            if offset is not None or how is ReadOffsetType.READ_FROM_MEMORY:
                return -1 if offset is None else offset
        offset = await self._read_from_store(mq)
        if offset >= 0:
            self.table[mq] = offset
        return offset

    @abstractmethod
    async def _read_from_store(self, mq: MessageQueue) -> int: ...

    @abstractmethod
    async def persist_all(self, mqs: set[MessageQueue]) -> None:
        """Write out the offsets of ``mqs``. Failures are logged, not raised."""

    async def persist(self, mq: MessageQueue) -> None:
        await self.persist_all({mq})

    def remove_offset(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)

    def offsets_of(self, topic: str) -> dict[MessageQueue, int]:
        return {mq: o for mq, o in self.table.items() if mq.topic == topic}


class RemoteBrokerOffsetStore(OffsetStore):
    def __init__(self, api: ConsumerAPI, timeout: float = 3.0) -> None:
        super().__init__(api.group)
        self.api = api
        self.timeout = timeout
        # what each queue's offset was last written as, and where
        self._persisted: dict[MessageQueue, tuple[int, str | None]] = {}
        self._log = log.bind(group=api.group, client_id=api.instance.client_id)

    async def _read_from_store(self, mq: MessageQueue) -> int:
        return await self.api.fetch_consume_offset(mq)

    async def persist_all(self, mqs: set[MessageQueue]) -> None:
        admin = self.api.admin_addr
        todo = [(mq, off) for mq, off in list(self.table.items())
                if mq in mqs and self._persisted.get(mq) != (off, admin(mq))]
        if not todo:
            return

        async def one(mq: MessageQueue, offset: int) -> None:
            try:
                with trio.move_on_after(self.timeout):
                    addr = await self.api.update_consume_offset(mq, offset, self.timeout)
                    self._persisted[mq] = (offset, addr)
                    return
                self._log.warning("persist offset timed out", mq=str(mq), offset=offset)
            except (MQClientError, MQBrokerError) as exc:
                self._log.warning("persist offset failed", mq=str(mq), offset=offset,
                                  error=str(exc))
            except Exception:
                # one queue's failure must not cancel the others' (nor the persist loop)
                self._log.exception("persist offset failed", mq=str(mq), offset=offset)

        async with trio.open_nursery() as nursery:
            for mq, off in todo:
                nursery.start_soon(one, mq, off)

    def remove_offset(self, mq: MessageQueue) -> None:
        super().remove_offset(mq)
        self._persisted.pop(mq, None)


def _mq_key(mq: MessageQueue) -> str:
    return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"


def _mq_of(key: str) -> MessageQueue:
    topic, broker, qid = key.rsplit("@", 2)
    return MessageQueue(topic, broker, int(qid))


class LocalFileOffsetStore(OffsetStore):
    def __init__(self, group: str, path: Path) -> None:
        super().__init__(group)
        self.path = path
        self._log = log.bind(group=group, path=str(path))

    @staticmethod
    def default_path(base_dir: str | os.PathLike[str] | None, client_id: str, group: str) -> Path:
        base = Path(base_dir) if base_dir is not None else Path.home() / ".rocketmq_offsets"
        return base / client_id.replace(":", "_") / group / "offsets.json"

    def _read_file(self) -> dict[MessageQueue, int]:
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                data = json.loads(candidate.read_text())
                table = data["offsetTable"]
                return {_mq_of(k): int(v) for k, v in table.items()}
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                self._log.warning("offset file unreadable", file=str(candidate), error=str(exc))
        return {}

    async def load(self) -> None:
        table = await trio.to_thread.run_sync(self._read_file)
        self.table.update(table)
        if table:
            self._log.info("local offsets loaded", queues=len(table))

    async def _read_from_store(self, mq: MessageQueue) -> int:
        table = await trio.to_thread.run_sync(self._read_file)
        return table.get(mq, -1)

    def _write(self, table: dict[MessageQueue, int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps({"offsetTable": {_mq_key(mq): o for mq, o in sorted(table.items())}},
                          indent=1).encode()
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if self.path.exists():
            os.replace(self.path, self.path.with_name(self.path.name + ".bak"))
        os.replace(tmp, self.path)

    async def persist_all(self, mqs: set[MessageQueue]) -> None:
        # The file holds every queue this store knows, not only the ones asked.
        table = dict(self.table)
        if not table:
            return
        try:
            await trio.to_thread.run_sync(self._write, table)
        except OSError as exc:
            self._log.warning("persist local offsets failed", error=str(exc))
