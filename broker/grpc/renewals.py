"""Receipt handles a push consumer holds, renewed while it consumes: a pure
tracker (RocketMQ 5 proxy's ReceiptHandleProcessor / DefaultReceiptHandleManager).

A RocketMQ 5 push consumer receives with ``auto_renew``: the server, not the
client, keeps the messages invisible while the listener runs. The broker
``track``s each handle it gives such a client; ``due(now)`` names the tracked
messages whose invisibility ends within ``ahead_ms``; the edge extends each (a
change of invisible time by ``slice_ms``, as ChangeInvisibleDuration does) and
reports the new handle with ``renewed``. The client keeps the handle it was
given: ``take`` answers the newest handle for it (and stops tracking it) when
the client acks, changes the invisibility itself or forwards the message to
the dead-letter queue.

A message stops being renewed (it comes back after its current invisibility)
when it has been tracked ``max_total_ms`` (renewMaxTimeMillis), when its
client goes (``forget_client``: heart-beats stopped, NotifyClientTermination,
its Telemetry stream closed), or when a renewal fails (``drop``).

Bounds: at most ``max_per_client`` handles of one client and ``max_total`` in
all; tracking one more past a bound stops tracking the oldest (of the client,
or of all): that message comes back after its invisibility, and an ack with
its first handle after it was renewed is INVALID_RECEIPT_HANDLE.

Times are milliseconds passed in; ``due`` is a heap by renewal time with stale
items skipped (and compacted away when they outnumber the live ones).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

# (group, the handle the client was given)
Key = tuple[str, str]


@dataclass(slots=True)
class Tracked:
    client_id: str
    group: str
    topic: str  # the topic the client received from (the handle may name its retry topic)
    original: str  # the handle the client holds
    handle: str  # the newest one
    visible_at_ms: int
    since_ms: int  # when it was delivered
    seq: int = 0  # which heap item is live
    renewals: int = 0

    @property
    def key(self) -> Key:
        return (self.group, self.original)


class RenewTracker:
    def __init__(self, *, ahead_ms: int, slice_ms: int, max_total_ms: int,
                 max_per_client: int, max_total: int) -> None:
        if min(ahead_ms, slice_ms, max_total_ms, max_per_client, max_total) <= 0:
            raise ValueError("renewal times and bounds must be positive")
        if slice_ms <= ahead_ms:
            raise ValueError("a renewal must last longer than the time ahead it is made")
        self.ahead_ms = ahead_ms
        self.slice_ms = slice_ms
        self.max_total_ms = max_total_ms
        self.max_per_client = max_per_client
        self.max_total = max_total
        self.entries: dict[Key, Tracked] = {}  # insertion order: oldest first
        self.by_client: dict[str, dict[Key, None]] = {}  # ... per client
        self._heap: list[tuple[int, int, Key]] = []  # (renew at, seq, key)
        self._seq = 0
        self.evicted = 0  # dropped for a bound since start
        self.expired = 0  # stopped at max_total_ms since start

    def __len__(self) -> int:
        return len(self.entries)

    def _push(self, t: Tracked) -> None:
        self._seq += 1
        t.seq = self._seq
        heapq.heappush(self._heap, (t.visible_at_ms - self.ahead_ms, t.seq, t.key))
        if len(self._heap) > 2 * len(self.entries) + 1024:
            self._heap = [(e.visible_at_ms - self.ahead_ms, e.seq, e.key)
                          for e in self.entries.values()]
            heapq.heapify(self._heap)

    def track(self, client_id: str, group: str, topic: str, handle: str,
              visible_at_ms: int, now_ms: int) -> int:
        """Remember a handle given to ``client_id``; returns how many older
        handles were dropped to keep within the bounds."""
        key = (group, handle)
        self.drop(key)
        dropped = 0
        mine = self.by_client.setdefault(client_id, {})
        while len(mine) >= self.max_per_client:
            self.drop(next(iter(mine)))
            dropped += 1
        while len(self.entries) >= self.max_total:
            self.drop(next(iter(self.entries)))
            dropped += 1
        t = Tracked(client_id, group, topic, handle, handle, visible_at_ms, now_ms)
        self.entries[key] = t
        self.by_client.setdefault(client_id, {})[key] = None
        self._push(t)
        self.evicted += dropped
        return dropped

    def drop(self, key: Key) -> Tracked | None:
        """Stop tracking ``key``; what was tracked (None: nothing)."""
        t = self.entries.pop(key, None)
        if t is None:
            return None
        mine = self.by_client.get(t.client_id)
        if mine is not None:
            mine.pop(key, None)
            if not mine:
                del self.by_client[t.client_id]
        return t

    def take(self, group: str, handle: str) -> str:
        """The handle to act on for one the client sent: the newest one of a
        tracked message (no longer tracked from now on), else ``handle``."""
        t = self.drop((group, handle))
        return handle if t is None else t.handle

    def forget_client(self, client_id: str) -> int:
        """The client is gone: stop renewing its messages; how many."""
        keys = list(self.by_client.get(client_id, ()))
        for key in keys:
            self.drop(key)
        return len(keys)

    def clients(self) -> list[str]:
        return list(self.by_client)

    def due(self, now_ms: int, limit: int = 1024) -> list[Tracked]:
        """Up to ``limit`` tracked messages to renew now (invisible for at most
        ``ahead_ms`` more), soonest first. Each must be answered with
        ``renewed``, ``retry_later`` or ``drop``. Messages tracked for
        ``max_total_ms`` are dropped here instead."""
        heap = self._heap
        out: list[Tracked] = []
        while heap and heap[0][0] <= now_ms and len(out) < limit:
            _, seq, key = heapq.heappop(heap)
            t = self.entries.get(key)
            if t is None or t.seq != seq:
                continue  # acked, dropped or renewed since
            if now_ms - t.since_ms >= self.max_total_ms:
                self.drop(key)
                self.expired += 1
                continue
            t.seq = 0  # out of the heap until answered
            out.append(t)
        return out

    def renewed(self, t: Tracked, handle: str, visible_at_ms: int) -> None:
        """A renewal of ``t`` succeeded with a new handle and visible time."""
        if self.entries.get(t.key) is not t:
            return  # taken meanwhile: nothing to keep
        t.handle = handle
        t.visible_at_ms = visible_at_ms
        t.renewals += 1
        self._push(t)

    def retry_later(self, t: Tracked, now_ms: int, delay_ms: int) -> None:
        """A renewal could not be made now (a transient failure): try again
        after ``delay_ms``."""
        if self.entries.get(t.key) is not t:
            return
        self._seq += 1
        t.seq = self._seq
        heapq.heappush(self._heap, (now_ms + delay_ms, t.seq, t.key))


__all__ = ["Key", "RenewTracker", "Tracked"]
