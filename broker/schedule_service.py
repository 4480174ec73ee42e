"""ScheduleMessageService: delayed messages.

A message with ``DELAY`` level n is stored in ``SCHEDULE_TOPIC_XXXX`` queue n-1
with its real topic and queue in ``REAL_TOPIC``/``REAL_QID``; the consume-queue
entry's tag field holds its delivery time. This service walks each level's
queue and re-puts due messages to their real topic. Progress per level is
persisted in ``config/delayOffset.json``; a crash between a re-put and the
next persist delivers that message again (at least once), never early.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import structlog
import trio

from broker.persist import atomic_write_json, load_json
from broker.store import MessageExtBrokerInner, PutMessageStatus
from broker.store.commit_log import SCHEDULE_TOPIC
from protocol.hashing import tags_hash_code
from protocol.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageConst,
    MessageExt,
    properties_to_string,
)

if TYPE_CHECKING:
    from broker.controller import BrokerController

DELAY = MessageConst.PROPERTY_DELAY_TIME_LEVEL
REAL_TOPIC = MessageConst.PROPERTY_REAL_TOPIC
REAL_QID = MessageConst.PROPERTY_REAL_QUEUE_ID
PERSIST_EVERY_S = 10.0


def to_schedule(inner: MessageExtBrokerInner, props: dict[str, str], max_level: int) -> None:
    """Turn a message with a delay level into its SCHEDULE_TOPIC_XXXX form (in place)."""
    level = min(int(props.get(DELAY, "0")), max_level)
    props[DELAY] = str(level)
    props[REAL_TOPIC] = inner.topic
    props[REAL_QID] = str(inner.queue_id)
    inner.topic = SCHEDULE_TOPIC
    inner.queue_id = level - 1
    inner.properties_string = properties_to_string(props)


def from_schedule(msg: MessageExt) -> MessageExtBrokerInner:
    """The message to deliver for a due schedule-topic record."""
    props = dict(msg.properties)
    topic = props.pop(REAL_TOPIC)
    queue_id = int(props.pop(REAL_QID))
    props.pop(DELAY, None)
    return MessageExtBrokerInner(
        topic=topic, queue_id=queue_id, flag=msg.flag, body=msg.body,
        properties_string=properties_to_string(props),
        tags_code=tags_hash_code(props.get(PROPERTY_TAGS)), keys=props.get(PROPERTY_KEYS),
        uniq_key=props.get(PROPERTY_UNIQ_KEY), sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
    )


class ScheduleMessageService:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller
        self.store = controller.message_store
        self.levels = controller.config.delay_level_table()
        self.max_level = max(self.levels)
        self.offset_table: dict[int, int] = {}
        self.path = controller.config.store_path("config", "delayOffset.json")
        self.log = structlog.get_logger("broker.schedule").bind(broker=controller.config.broker_name)

    def load(self) -> None:
        data = load_json(self.path) or {}
        for level, offset in (data.get("offsetTable") or {}).items():
            self.offset_table[int(level)] = int(offset)

    def persist(self) -> None:
        atomic_write_json(self.path, {"offsetTable": {str(k): v for k, v in self.offset_table.items()}})

    def deliver_due(self, now_ms: int) -> int:
        """Re-put every due message of every level. Returns how many."""
        delivered = 0
        for level in self.levels:
            queue_id = level - 1
            offset = max(self.offset_table.get(level, 0),
                         self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, queue_id))
            cq = self.store.consume_queue_table.get(SCHEDULE_TOPIC, {}).get(queue_id)
            while cq is not None:
                entries = cq.get_entries(offset, 64)
                if not entries:
                    break
                stop = False
                for phys, _size, deliver_at in entries:
                    if deliver_at > now_ms:
                        stop = True
                        break
                    msg = self.store.look_message_by_offset(phys)
                    if msg is not None and REAL_TOPIC in msg.properties:
                        result = self.store.put_message(from_schedule(msg))
                        if result.put_message_status != PutMessageStatus.PUT_OK:
                            self.log.warning("re-put of a due message failed, retrying later",
                                             level=level, status=result.put_message_status.value)
                            stop = True
                            break
                        delivered += 1
                    offset += 1
                if stop:
                    break
            self.offset_table[level] = offset
        return delivered

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        tick = self.controller.config.schedule_tick_millis / 1000
        last_persist = trio.current_time()
        task_status.started()
        try:
            while True:
                await trio.sleep(tick)
                self.deliver_due(int(time.time() * 1000))
                if trio.current_time() - last_persist >= PERSIST_EVERY_S:
                    await trio.to_thread.run_sync(self.persist)
                    last_persist = trio.current_time()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.persist)
