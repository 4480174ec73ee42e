"""ProcessQueue: the messages of one queue pulled but not yet consumed.

Pure bookkeeping (RocketMQ's ProcessQueue), no I/O. Messages of a queue are
pulled in offset order, so a dict keyed by offset in insertion order is a
sorted map: its first key is the lowest offset not yet consumed, which is
what the consumer commits. Orderly consumption moves messages to a
"consuming" map while the listener runs; ``commit`` drops them and
``make_message_to_consume_again`` puts them back in front.

``last_pull_time`` is when the queue's pull task last went round its loop
(a pull sent, a flow-control pause, a back-off): a push consumer drops a
queue whose task has not done so for ``pull_max_idle_s`` (RocketMQ's
isPullExpired, 120 s) and takes it again, so a stuck pull cannot hold a
queue for ever. Times are ``trio.current_time()`` values, passed in.
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol.message import MessageExt

REBALANCE_LOCK_MAX_LIVE_TIME = 30.0  # s a broker lock is trusted without renewal
REBALANCE_LOCK_INTERVAL = 20.0  # s between lock renewals
PULL_MAX_IDLE_TIME = 120.0  # s without a pull before a push consumer drops the queue


class ProcessQueue:
    __slots__ = (
        "msgs", "consuming", "msg_count", "msg_size", "queue_offset_max", "dropped",
        "locked", "last_lock_time", "last_pull_time", "last_consume_time", "consuming_flag",
        "version",
    )

    def __init__(self, now: float = 0.0) -> None:
        self.msgs: dict[int, MessageExt] = {}
        self.consuming: dict[int, MessageExt] = {}
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = -1
        self.dropped = False
        self.locked = False
        self.last_lock_time = 0.0
        self.last_pull_time = now
        self.last_consume_time = now
        self.consuming_flag = False  # orderly: a consume task holds this queue's messages
        self.version = 0

    # ---- pulled messages ----------------------------------------------------------

    def put_messages(self, msgs: Iterable[MessageExt]) -> bool:
        """Cache pulled messages (offsets already cached are skipped). True when
        an orderly consume task should be started for the queue."""
        table = self.msgs
        added = 0
        size = 0
        for msg in msgs:
            off = msg.queue_offset
            if off in table or off in self.consuming:
                continue
            table[off] = msg
            added += 1
            size += len(msg.body)
            if off > self.queue_offset_max:
                self.queue_offset_max = off
        self.msg_count += added
        self.msg_size += size
        if table and not self.consuming_flag:
            self.consuming_flag = True
            return True
        return False

    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Forget consumed messages; returns the offset to commit: the lowest
        one still cached, or one past the highest pulled when none is left;
        -1 when nothing was ever cached."""
        table = self.msgs
        if self.queue_offset_max < 0:
            return -1
        removed = 0
        size = 0
        for msg in msgs:
            if table.pop(msg.queue_offset, None) is not None:
                removed += 1
                size += len(msg.body)
        self.msg_count -= removed
        self.msg_size -= size
        if table:
            return next(iter(table))
        return self.queue_offset_max + 1

    @property
    def max_span(self) -> int:
        """Distance between the lowest and highest cached offsets."""
        if not self.msgs:
            return 0
        return self.queue_offset_max - next(iter(self.msgs))

    def is_empty(self) -> bool:
        return not self.msgs and not self.consuming

    def clear(self) -> None:
        self.msgs.clear()
        self.consuming.clear()
        self.msg_count = 0
        self.msg_size = 0

    # ---- orderly ------------------------------------------------------------------

    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """Move up to ``batch_size`` lowest messages to the consuming map. When
        none is left, clears ``consuming_flag`` (the consume task stops)."""
        out: list[MessageExt] = []
        table = self.msgs
        while table and len(out) < batch_size:
            off = next(iter(table))
            msg = table.pop(off)
            self.consuming[off] = msg
            out.append(msg)
        if not out:
            self.consuming_flag = False
        return out

    def commit(self) -> int:
        """The consuming messages are done: forget them; returns the offset to
        commit (one past the highest), or -1 when there were none."""
        if not self.consuming:
            return -1
        offset = max(self.consuming) + 1
        self.msg_count -= len(self.consuming)
        self.msg_size -= sum(len(m.body) for m in self.consuming.values())
        self.consuming.clear()
        return offset

    def make_message_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Put consuming messages back in front of the cache, one more
        reconsume time each (orderly failure: consume them again locally)."""
        back: dict[int, MessageExt] = {}
        for msg in msgs:
            if self.consuming.pop(msg.queue_offset, None) is not None:
                msg.reconsume_times += 1
                back[msg.queue_offset] = msg
        if back:
            merged = dict(sorted(back.items()))
            merged.update(self.msgs)
            self.msgs = merged

    def lock_expired(self, now: float) -> bool:
        return now - self.last_lock_time > REBALANCE_LOCK_MAX_LIVE_TIME

    # ---- pull liveness --------------------------------------------------------------

    def pull_expired(self, now: float, max_idle: float = PULL_MAX_IDLE_TIME) -> bool:
        """No pull for more than ``max_idle`` s (RocketMQ's isPullExpired)."""
        return now - self.last_pull_time > max_idle
