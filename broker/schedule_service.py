"""ScheduleMessageService: delayed messages.

A message with ``DELAY`` level n is stored in ``SCHEDULE_TOPIC_XXXX`` queue n-1
with its real topic and queue in ``REAL_TOPIC``/``REAL_QID``; the consume-queue
entry's tag field holds its delivery time. This service walks each level's
queue and re-puts due messages to their real topic. Progress per level is
persisted in ``config/delayOffset.json``; a crash between a re-put and the
next persist delivers that message again (at least once), never early.

One bad message never stops a level. A due message that can never be re-put
(no or garbage ``REAL_TOPIC``/``REAL_QID``, a real topic that is not a valid
topic name, a permanent put status such as ``MESSAGE_ILLEGAL``, an exception
from the store) goes to the dead-letter queue of its group, ``%DLQ%<group>``
(the group of a retry message is in its real topic ``%RETRY%<group>``), or is
dropped with a logged reason when no group is known; the level moves past it
either way. A transient status (store not writable, disk full, page cache
busy) parks the level for ``PARK_MS`` and the same message is tried again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import Enum
from typing import Any

import structlog
import trio

from broker.config import BrokerConfig
from broker.message_rewrite import (
    REAL_TOPIC,
    PutOutcome,
    RewriteError,
    classify_put_status,
    dead_letter_message,
    from_schedule,
)
from broker.persist import ConfigSnapshot, load_json, write_snapshot_now
from broker.store import DefaultMessageStore
from broker.store.commit_log import SCHEDULE_TOPIC
from broker.topic_config_manager import TopicConfigManager
from protocol.message import MessageExt
from protocol.names import (
    RETRY_GROUP_TOPIC_PREFIX,
    InvalidNameError,
    dlq_topic,
    shown,
    topic_problem,
)
from protocol.trio.service import Guard, describe

PERSIST_EVERY_S = 10.0
PARK_MS = 1000  # a level whose re-put failed transiently waits this long
ENTRIES_PER_READ = 64


def retry_group_of(real_topic: str | None) -> str | None:
    """The consumer group of a retry message (real topic ``%RETRY%<group>``,
    a valid topic name), else None."""
    if real_topic is None or not real_topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return None
    if topic_problem(real_topic) is not None:
        return None
    return real_topic[len(RETRY_GROUP_TOPIC_PREFIX):] or None


class _Step(Enum):
    DELIVERED = "delivered"
    SKIPPED = "skipped"  # dead-lettered, dropped or gone: move past it
    PARK = "park"  # transient failure: stop the level, retry this message later


def _wall_ms() -> int:
    return int(time.time() * 1000)


class ScheduleMessageService:
    def __init__(self, config: BrokerConfig, store: DefaultMessageStore,
                 topics: TopicConfigManager, on_topic_created: Callable[[], None] = lambda: None,
                 now_ms: Callable[[], int] = _wall_ms) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.on_topic_created = on_topic_created
        self.now_ms = now_ms
        self.levels = config.delay_level_table()
        self.max_level = max(self.levels)
        self.offset_table: dict[int, int] = {}
        self.parked_until: dict[int, int] = {}  # level -> wall-clock ms
        self.dirty = False
        self.dead_lettered = 0
        self.dropped = 0
        self.path = config.store_path("config", "delayOffset.json")
        self.log = structlog.get_logger("broker.schedule").bind(broker=config.broker_name)
        self.guard = Guard(self.log, "schedule")

    def load(self) -> None:
        data = load_json(self.path) or {}
        for level, offset in (data.get("offsetTable") or {}).items():
            self.offset_table[int(level)] = int(offset)

    def snapshot(self, force: bool = False) -> ConfigSnapshot | None:
        """On the event loop: the offsets to write, or None when unchanged."""
        if not (self.dirty or force):
            return None
        self.dirty = False
        return ConfigSnapshot(
            self.path, {"offsetTable": {str(k): v for k, v in self.offset_table.items()}})

    def persist(self, force: bool = False) -> None:
        """Snapshot and write now, in the caller's thread."""
        write_snapshot_now(self, force)

    def running_stats(self) -> dict[str, str]:
        """brokerStatus' ``scheduleMessageOffset_<level>`` = ``"<delivered>,<max>"``
        for each level with a schedule queue or an offset (RocketMQ's
        buildRunningStats): the level's progress and its queue's max offset. Equal
        numbers: nothing of that level waits any more (a re-put and its offset
        move together). Progress is where the next walk starts: never below the
        queue's min offset (a level not walked yet, or one whose files went)."""
        store = self.store
        queues = store.consume_queue_table.get(SCHEDULE_TOPIC, {})
        stats = {}
        for level in sorted(set(self.offset_table) | {qid + 1 for qid in queues}):
            qid = level - 1
            done = max(self.offset_table.get(level, 0),
                       store.get_min_offset_in_queue(SCHEDULE_TOPIC, qid))
            top = store.get_max_offset_in_queue(SCHEDULE_TOPIC, qid)
            stats[f"scheduleMessageOffset_{level}"] = f"{done},{top}"
        return stats

    # ---- delivery (synchronous, time passed in) ---------------------------------------

    def deliver_due(self, now_ms: int) -> int:
        """Re-put every due message of every level. Returns how many."""
        delivered = 0
        for level in self.levels:
            if self.parked_until.get(level, 0) > now_ms:
                continue
            self.parked_until.pop(level, None)
            try:
                delivered += self._deliver_level(level, now_ms)
            except Exception as exc:  # a store read failed: this level waits, the others go on
                self.guard.failed(exc, "delay level failed, retrying later", delay_level=level)
                self.parked_until[level] = now_ms + PARK_MS
        return delivered

    def _set_offset(self, level: int, offset: int) -> None:
        if self.offset_table.get(level) != offset:
            self.offset_table[level] = offset
            self.dirty = True

    def _deliver_level(self, level: int, now_ms: int) -> int:
        queue_id = level - 1
        cq = self.store.consume_queue_table.get(SCHEDULE_TOPIC, {}).get(queue_id)
        if cq is None:
            return 0
        offset = max(self.offset_table.get(level, 0),
                     self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, queue_id))
        delivered = 0
        try:
            while True:
                entries = cq.get_entries(offset, ENTRIES_PER_READ)
                if not entries:
                    return delivered
                for phys, _size, deliver_at in entries:
                    if deliver_at > now_ms:
                        return delivered
                    step = self._deliver_one(level, offset, phys)
                    if step is _Step.PARK:
                        self.parked_until[level] = now_ms + PARK_MS
                        return delivered
                    if step is _Step.DELIVERED:
                        delivered += 1
                    offset += 1
        finally:
            self._set_offset(level, offset)

    def _deliver_one(self, level: int, offset: int, phys: int) -> _Step:
        try:
            msg = self.store.look_message_by_offset(phys)
        except Exception as exc:
            self._drop(None, level, offset, f"unreadable: {describe(exc)}", exc,
                       commit_log_offset=phys)
            return _Step.SKIPPED
        if msg is None:  # cleaned away, or failing its CRC
            self.guard.note("due message unreadable, skipped", key=("unreadable", level),
                            delay_level=level, offset=offset, commit_log_offset=phys)
            return _Step.SKIPPED
        try:
            inner = from_schedule(msg)
        except RewriteError as exc:
            return self._dead_letter(msg, level, offset, str(exc))
        except Exception as exc:
            return self._dead_letter(msg, level, offset, describe(exc), exc)
        try:
            result = self.store.put_message(inner)
        except Exception as exc:
            return self._dead_letter(msg, level, offset, f"the store raised {describe(exc)}", exc)
        status = result.put_message_status
        outcome = classify_put_status(status)
        if outcome is PutOutcome.STORED:
            return _Step.DELIVERED
        if outcome is PutOutcome.TRANSIENT:
            self.guard.note("re-put of a due message failed, parking the level",
                            key=("transient", level, status), delay_level=level, offset=offset,
                            status=status.value, topic=inner.topic, park_ms=PARK_MS)
            return _Step.PARK
        return self._dead_letter(msg, level, offset, f"put status {status.value}",
                                 topic=inner.topic)

    def _dead_letter(self, msg: MessageExt, level: int, offset: int, reason: str,
                     exc: BaseException | None = None, **context: Any) -> _Step:
        """Move a message that can never be delivered to its group's DLQ, or drop it."""
        group = retry_group_of(msg.properties.get(REAL_TOPIC))
        if group is None:
            self._drop(msg, level, offset, reason + "; no group for a dead-letter queue", exc,
                       **context)
            return _Step.SKIPPED
        try:
            dlq = dlq_topic(group)
        except InvalidNameError as bad:
            self._drop(msg, level, offset, f"{reason}; {bad}", exc, **context)
            return _Step.SKIPPED
        try:
            _, created = self.topics.create_dead_letter_topic(dlq)
            if created:
                self.on_topic_created()
        except OSError as err:  # the topic could not be written: the disk, try again later
            self.guard.failed(err, "dead-letter topic could not be created, parking the level",
                              delay_level=level, offset=offset, topic=dlq)
            return _Step.PARK
        try:
            result = self.store.put_message(dead_letter_message(msg, dlq))
        except Exception as err:
            self._drop(msg, level, offset, f"{reason}; dead-letter put raised {describe(err)}",
                       err, **context)
            return _Step.SKIPPED
        status = result.put_message_status
        outcome = classify_put_status(status)
        if outcome is PutOutcome.TRANSIENT:
            self.guard.note("dead-letter put failed, parking the level",
                            key=("transient-dlq", level, status), delay_level=level, offset=offset,
                            status=status.value, topic=dlq)
            return _Step.PARK
        if outcome is PutOutcome.PERMANENT:
            self._drop(msg, level, offset, f"{reason}; dead-letter put status {status.value}",
                       exc, **context)
            return _Step.SKIPPED
        self.dead_lettered += 1
        self._report("delayed message moved to the dead-letter queue", exc, "warning",
                     delay_level=level, offset=offset, msg_id=msg.msg_id, dlq=dlq, reason=reason,
                     **context)
        return _Step.SKIPPED

    def _drop(self, msg: MessageExt | None, level: int, offset: int, reason: str,
              exc: BaseException | None = None, **context: Any) -> None:
        self.dropped += 1
        real = None if msg is None else msg.properties.get(REAL_TOPIC)
        self._report("delayed message dropped", exc, "error", delay_level=level, offset=offset,
                     msg_id=None if msg is None else msg.msg_id, real_topic=shown(real),
                     reason=reason, **context)

    def _report(self, event: str, exc: BaseException | None, log_level: str,
                **context: Any) -> None:
        """One line per kind of bad message, rate-limited; a traceback when it raised."""
        if exc is not None:
            self.guard.failed(exc, event, **context)
        else:
            key = (context.get("delay_level"), str(context.get("reason"))[:60])
            self.guard.note(event, key, log_level=log_level, **context)

    # ---- trio edge ----------------------------------------------------------------------

    async def persist_async(self) -> None:
        """Snapshot on the event loop, write in a worker thread."""
        snap = self.snapshot()
        if snap is None:
            return
        try:
            await trio.to_thread.run_sync(snap.write)
        except BaseException:
            self.dirty = True
            raise

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        tick = self.config.schedule_tick_millis / 1000
        last_persist = trio.current_time()
        task_status.started()
        try:
            while True:
                await trio.sleep(tick)
                await self.guard.run(self.deliver_due, self.now_ms())
                if trio.current_time() - last_persist >= PERSIST_EVERY_S:
                    last_persist = trio.current_time()
                    await self.guard.run(self.persist_async)
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self.persist_async()
                except Exception as exc:
                    self.guard.failed(exc, "delay offsets not saved at shutdown")
