"""OffsetService: consumer offsets and queue offsets, in domain terms (what
QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET, GET_MAX_OFFSET and
GET_MIN_OFFSET do, without the remoting: broker/consumer_manage_processor.py
is their adapter).

A query answers the group's stored offset; for a group with none, 0 while
the queue's first message is still in memory, else not found (RocketMQ 4.x,
broker/new_group_offset.py). A slave answers from its own table. A commit is
a consumer's (``COMMIT``), an admin's reset (``ADMIN_RESET``: counted, so
slaves take it even downwards) or a slave's offset for its returned master
(``INCREASE_ONLY``: only forward, see ConsumerOffsetManager); a negative
offset is refused.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from broker.new_group_offset import query_offset_answer


class CommitKind(enum.Enum):
    COMMIT = "COMMIT"
    ADMIN_RESET = "ADMIN_RESET"
    INCREASE_ONLY = "INCREASE_ONLY"


class CommitStatus(enum.Enum):
    OK = "OK"  # stored (an INCREASE_ONLY commit that moves nothing back is OK too)
    ILLEGAL_OFFSET = "ILLEGAL_OFFSET"  # negative


@dataclass(slots=True)
class OffsetCommit:
    group: str
    topic: str
    queue_id: int
    offset: int
    kind: CommitKind = CommitKind.COMMIT
    reset_version: int | None = None  # INCREASE_ONLY: the reset counter the slave read


class ConsumerOffsets(Protocol):
    """ConsumerOffsetManager's part the service uses."""

    def query_offset(self, group: str, topic: str, queue_id: int) -> int: ...
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...
    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...
    def commit_forward(self, group: str, topic: str, queue_id: int, offset: int,
                       reset_version: int | None) -> bool: ...


class QueueOffsets(Protocol):
    """The store's part the service uses."""

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int
                                        ) -> bool: ...


class OffsetService:
    def __init__(self, offsets: ConsumerOffsets, queues: QueueOffsets) -> None:
        self.offsets = offsets
        self.queues = queues

    def query(self, group: str, topic: str, queue_id: int,
              zero_if_not_found: bool = True) -> int | None:
        """The offset the group reads the queue from, or None (not found:
        the client starts where its consume-from setting says)."""
        stored = self.offsets.query_offset(group, topic, queue_id)
        queues = self.queues
        return query_offset_answer(
            stored, queues.get_min_offset_in_queue(topic, queue_id),
            lambda: queues.check_in_disk_by_consume_offset(topic, queue_id, 0),
            zero_if_not_found=zero_if_not_found)

    def commit(self, c: OffsetCommit) -> CommitStatus:
        if c.offset < 0:
            return CommitStatus.ILLEGAL_OFFSET
        offsets = self.offsets
        if c.kind is CommitKind.INCREASE_ONLY:
            offsets.commit_forward(c.group, c.topic, c.queue_id, c.offset, c.reset_version)
        elif c.kind is CommitKind.ADMIN_RESET:
            offsets.reset_offset(c.group, c.topic, c.queue_id, c.offset)
        else:
            offsets.commit_offset(c.group, c.topic, c.queue_id, c.offset)
        return CommitStatus.OK

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.queues.get_max_offset_in_queue(topic, queue_id)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.queues.get_min_offset_in_queue(topic, queue_id)
