"""TopicPublishInfo: a topic's writable queues and round-robin queue selection.

The basic behaviour of RocketMQ's MQFaultStrategy (latency fault tolerance
off): queues are taken in turn across every writable queue of every broker;
a retry skips queues of the broker that just failed when another exists.
"""

from __future__ import annotations

import random

from protocol.message import MessageQueue


class TopicPublishInfo:
    """Writable queues of one topic. ``is_default`` marks a TBW102-based route."""

    __slots__ = ("topic", "queues", "is_default", "_index")

    def __init__(
        self,
        topic: str,
        queues: list[MessageQueue],
        *,
        is_default: bool = False,
        start_index: int | None = None,
    ) -> None:
        self.topic = topic
        self.queues = queues
        self.is_default = is_default
        self._index = random.randrange(1 << 16) if start_index is None else start_index

    @property
    def ok(self) -> bool:
        return bool(self.queues)

    @property
    def next_index(self) -> int:
        return self._index

    def select(self, last_broker: str | None = None) -> MessageQueue:
        """The next queue in turn; if ``last_broker`` is given, one on another broker
        when there is one. Raises IndexError when there is no queue."""
        queues = self.queues
        n = len(queues)
        if not n:
            raise IndexError("no writable queue")
        if last_broker is not None:
            for _ in range(n):
                mq = queues[self._index % n]
                self._index += 1
                if mq.broker_name != last_broker:
                    return mq
        mq = queues[self._index % n]
        self._index += 1
        return mq

    def __repr__(self) -> str:
        return f"TopicPublishInfo(topic={self.topic!r}, queues={len(self.queues)}, default={self.is_default})"
