"""Consumer enums and listener contexts, with RocketMQ's names."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from client.errors import MQClientError
from protocol.message import MessageExt, MessageQueue


class MessageModel(Enum):
    """CLUSTERING: each message goes to one member of the group; BROADCASTING:
    to every member, with offsets kept locally."""

    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(Enum):
    """Where a group with no stored offset for a queue starts."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ConsumeConcurrentlyStatus(Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """Passed to a concurrent listener. ``delay_level_when_next_consume``: 0
    lets the broker choose (3 + reconsume times), -1 sends the message straight
    to the dead-letter queue, n > 0 asks for level n. ``ack_index``: with
    CONSUME_SUCCESS, messages after this index are treated as failed."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = 2**31 - 1


@dataclass(slots=True)
class ConsumeOrderlyContext:
    """Passed to an orderly listener. ``suspend_current_queue_time_millis``:
    how long the queue pauses after SUSPEND_CURRENT_QUEUE_A_MOMENT (-1: the
    consumer's default)."""

    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


ConsumeStatus = ConsumeConcurrentlyStatus | ConsumeOrderlyStatus
ListenerContext = ConsumeConcurrentlyContext | ConsumeOrderlyContext
MessageListener = Callable[
    [list[MessageExt], ListenerContext], ConsumeStatus | Awaitable[ConsumeStatus] | None
]


def parse_consume_timestamp(value: int | str | datetime | None) -> int:
    """Milliseconds since the epoch for CONSUME_FROM_TIMESTAMP.

    Accepts ms since the epoch, RocketMQ's ``yyyyMMddHHmmss`` (local time), a
    datetime, or None (half an hour ago). Raises MQClientError otherwise.
    """
    if value is None:
        return int(time.time() * 1000) - 30 * 60 * 1000
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, bool):
        raise MQClientError("consume_timestamp must be ms, 'yyyyMMddHHmmss' or a datetime")
    if isinstance(value, int):
        if value < 0:
            raise MQClientError("consume_timestamp must not be negative")
        return value
    if isinstance(value, str):
        try:
            return int(datetime.strptime(value, "%Y%m%d%H%M%S").timestamp() * 1000)
        except ValueError as exc:
            raise MQClientError(
                f"consume_timestamp {value!r} is not in the form yyyyMMddHHmmss"
            ) from exc
    raise MQClientError("consume_timestamp must be ms, 'yyyyMMddHHmmss' or a datetime")
