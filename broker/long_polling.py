"""PullRequestHoldService: long polling (RocketMQ's PullRequestHoldService and
its MessageArrivingListener, with the consume queue's tags codes).

A pull that finds nothing new is held (up to ``longPollingMaxSuspendMillis``,
never past the client's own ``suspendTimeoutMillis``) and answered as soon as
the dispatcher indexes a message for it, or empty at its deadline.

Holds are indexed by queue and, within a queue, by the tags hash codes of
their subscription (``*`` or no expression: a wildcard hold). When the
dispatcher reports a queue's new max offset, the service reads the tags codes
of the consume-queue entries it has not seen yet, once for all the holds on
that queue and at most ``max_entries_per_step`` of them at a time (the rest a
scheduler turn later, from the service's task), and re-runs the pull of only
the holds whose tags code is among the new entries at or past the offset they
wait for, plus the wildcard holds waiting below the new end. A hold that does
not match costs nothing per message. Entries whose codes cannot be read (no
reader, a read failure, a gap in the queue) match every hold waiting below
them: never a missed wake-up, at worst a wasted re-run.

A hold is domain values only: the ``PullRequest`` and the ``PullWaiter``
the transport supplied (broker/service/pull.py); a re-run answers through the
waiter's callback, never a held connection and command.

Bounds: at most ``maxHeldPullsPerConnection`` holds per connection (the
waiters' ``owner``) and ``maxHeldPulls`` in all. A pull over a bound is not
held: ``suspend`` says so and the pull is answered at once, empty, as if its
suspend time were over, and the refusal is logged (rate-limited). A closed
connection's holds (and its count) are dropped when the server reports the
close.

A held pull whose answer fails (the retry raises, the waiter cannot take the
answer) is failed through its waiter (``SYSTEM_ERROR`` on the remoting wire)
when possible and dropped; the failure is logged (rate-limited) and never
reaches the dispatcher that called ``notify_message_arriving`` nor stops the
service's task.

``HoldIndex`` is the pure part (holds by queue and tags code, bounds,
deadlines; time and offsets passed in); ``PullRequestHoldService`` is the trio
edge that reads the consume queue, re-runs pulls and hands the waiters
their outcomes.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
import trio

from protocol.names import shown
from protocol.trio.service import Guard

if TYPE_CHECKING:
    from broker.service.pull import PullOutcome, PullRequest, PullWaiter

# consume-queue entries whose tags codes are read for one notification step
MAX_ENTRIES_PER_STEP = 1024
# held pulls answered at their deadline between two checkpoints of the service
EXPIRE_PER_STEP = 4
DEFAULT_MAX_HELD = 100_000
DEFAULT_MAX_HELD_PER_CONNECTION = 1_024

# Why a pull was not held (``HoldIndex.add``).
REFUSED_CONNECTION = "maxHeldPullsPerConnection"
REFUSED_BROKER = "maxHeldPulls"


# (request, final) -> the outcome, or None to keep holding (final=False only)
Retry = Callable[["PullRequest", bool], "PullOutcome | None"]
# the failure a waiter is told of when its held pull fails on the broker
HELD_PULL_FAILED = "the held pull failed on the broker"
# (topic, queue_id, first offset, at most) -> the tags codes of the consume-queue
# entries from that offset on (fewer at the queue's end or at a gap)
ReadTags = Callable[[str, int, int, int], Sequence[int]]

QueueKey = tuple[str, int]


@dataclass(slots=True, eq=False)
class HeldPull:
    waiter: PullWaiter
    request: PullRequest
    offset: int  # the queue offset the pull asked for: it waits for an entry at or past it
    deadline: float
    topic: str = ""
    queue_id: int = 0
    tag_codes: frozenset[int] | None = None  # None: every message
    done: bool = field(default=False)
    seq: int = 0  # arrival order, set by HoldIndex.add


class QueueHolds:
    """The holds of one queue, by tags code, and how far its entries were looked at."""

    __slots__ = ("seen", "target", "by_code", "wildcard", "count")

    def __init__(self, seen: int) -> None:
        self.seen = seen  # entries below it were looked at (or predate every hold)
        self.target = seen  # the queue's max offset as last reported
        self.by_code: dict[int, set[HeldPull]] = {}
        self.wildcard: set[HeldPull] = set()
        self.count = 0

    @property
    def behind(self) -> bool:
        return self.seen < self.target

    def add(self, hold: HeldPull) -> None:
        if hold.tag_codes is None:
            self.wildcard.add(hold)
        else:
            for code in hold.tag_codes:
                self.by_code.setdefault(code, set()).add(hold)
        self.count += 1

    def remove(self, hold: HeldPull) -> None:
        if hold.tag_codes is None:
            self.wildcard.discard(hold)
        else:
            for code in hold.tag_codes:
                holds = self.by_code.get(code)
                if holds is not None:
                    holds.discard(hold)
                    if not holds:
                        del self.by_code[code]
        self.count -= 1

    def holds(self) -> set[HeldPull]:
        out = set(self.wildcard)
        for holds in self.by_code.values():
            out |= holds
        return out

    def matching(self, start: int, end: int, codes: Sequence[int]) -> set[HeldPull]:
        """The holds a new entry in [start, end) may answer; ``codes`` are the
        tags codes of the first entries of that range, the rest are unknown."""
        if start + len(codes) < end:  # unknown entries: any hold waiting below ``end``
            return {h for h in self.holds() if h.offset < end}
        out = {h for h in self.wildcard if h.offset < end}
        last_at: dict[int, int] = {}
        for i, code in enumerate(codes):
            last_at[code] = start + i
        for code, last in last_at.items():
            holds = self.by_code.get(code)
            if holds:
                out.update(h for h in holds if h.offset <= last)
        return out


class HoldIndex:
    """Held pulls by queue and tags code, with bounds and deadlines (pure)."""

    def __init__(self, max_held: int = DEFAULT_MAX_HELD,
                 max_held_per_connection: int = DEFAULT_MAX_HELD_PER_CONNECTION) -> None:
        self.max_held = max_held
        self.max_held_per_connection = max_held_per_connection
        self.queues: dict[QueueKey, QueueHolds] = {}
        self.by_owner: dict[Hashable, set[HeldPull]] = {}  # by the waiters' owners
        self.total = 0
        self._deadlines: list[tuple[float, int, HeldPull]] = []
        self._seq = itertools.count()

    def refusal(self, owner: Hashable) -> str | None:
        """Which bound a new hold of ``owner`` would exceed, or None."""
        if len(self.by_owner.get(owner, ())) >= self.max_held_per_connection:
            return REFUSED_CONNECTION
        if self.total >= self.max_held:
            return REFUSED_BROKER
        return None

    def add(self, hold: HeldPull, max_offset: int | None = None) -> str | None:
        """Hold ``hold`` unless a bound forbids it (then: which bound).
        ``max_offset`` is the queue's max offset its pull saw (entries below
        it are not new to it); default: the offset it waits for."""
        owner = hold.waiter.owner
        refused = self.refusal(owner)
        if refused is not None:
            return refused
        key = (hold.topic, hold.queue_id)
        known = hold.offset if max_offset is None else max_offset
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = QueueHolds(known)
        elif known > q.target:
            q.target = known
        hold.seq = next(self._seq)
        q.add(hold)
        self.by_owner.setdefault(owner, set()).add(hold)
        self.total += 1
        heapq.heappush(self._deadlines, (hold.deadline, hold.seq, hold))
        return None

    def remove(self, hold: HeldPull) -> None:
        """Forget ``hold`` (answered, failed or dropped); idempotent."""
        if hold.done:
            return
        hold.done = True
        key = (hold.topic, hold.queue_id)
        q = self.queues.get(key)
        if q is not None:
            q.remove(hold)
            if q.count <= 0:
                del self.queues[key]
        owner = hold.waiter.owner
        holds = self.by_owner.get(owner)
        if holds is not None:
            holds.discard(hold)
            if not holds:
                del self.by_owner[owner]
        self.total -= 1
        self._compact()

    def drop_owner(self, owner: Hashable) -> int:
        """Forget every hold of ``owner``; how many there were."""
        holds = self.by_owner.get(owner)
        if not holds:
            return 0
        dropped = list(holds)
        for hold in dropped:
            self.remove(hold)
        return len(dropped)

    def arrived(self, key: QueueKey, max_offset: int) -> bool:
        """The queue's max offset is now ``max_offset``: whether entries wait
        to be looked at (``to_read``)."""
        q = self.queues.get(key)
        if q is None:
            return False
        if max_offset > q.target:
            q.target = max_offset
        return q.behind

    def to_read(self, key: QueueKey, limit: int | None) -> tuple[int, int] | None:
        """The next range of entries to look at, at most ``limit`` long."""
        q = self.queues.get(key)
        if q is None or not q.behind:
            return None
        end = q.target if limit is None else min(q.target, q.seen + max(1, limit))
        return q.seen, end

    def matched(self, key: QueueKey, start: int, end: int, codes: Sequence[int]
                ) -> list[HeldPull]:
        """Entries [start, end) were looked at (``codes``: the tags codes of
        the first ones, the rest unknown): the holds to re-run, oldest first."""
        q = self.queues.get(key)
        if q is None:
            return []
        q.seen = max(q.seen, end)
        found = q.matching(start, end, codes[: end - start])
        return sorted(found, key=lambda h: h.seq)

    def behind(self, key: QueueKey) -> bool:
        q = self.queues.get(key)
        return q is not None and q.behind

    def next_deadline(self) -> float | None:
        heap = self._deadlines
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def expire(self, now: float, limit: int | None = None) -> list[HeldPull]:
        """The holds whose deadline is ``now`` or earlier (at most ``limit``),
        forgotten, earliest first."""
        due: list[HeldPull] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now and (limit is None or len(due) < limit):
            _, _, hold = heapq.heappop(heap)
            if not hold.done:
                self.remove(hold)
                due.append(hold)
        return due

    def _compact(self) -> None:
        """Drop answered holds from the deadline heap once they are most of it."""
        if len(self._deadlines) > 2 * self.total + 1024:
            self._deadlines = [e for e in self._deadlines if not e[2].done]
            heapq.heapify(self._deadlines)


class PullRequestHoldService:
    def __init__(self, retry: Retry, broker_name: str = "", *, read_tags: ReadTags | None = None,
                 max_held: int = DEFAULT_MAX_HELD,
                 max_held_per_connection: int = DEFAULT_MAX_HELD_PER_CONNECTION,
                 max_entries_per_step: int = MAX_ENTRIES_PER_STEP) -> None:
        self.retry = retry
        self.read_tags = read_tags
        self.max_entries_per_step = max(1, max_entries_per_step)
        self.log = structlog.get_logger("broker.long_polling").bind(broker=broker_name)
        self.guard = Guard(self.log, "pull hold")
        self.index = HoldIndex(max_held, max_held_per_connection)
        self.refused = 0  # pulls answered at once because a bound was reached
        self.retries = 0  # held pulls re-run on a message's arrival
        self._behind: set[QueueKey] = set()  # queues with entries left for the task
        self._wake: trio.Event | None = None

    @property
    def held(self) -> dict[QueueKey, QueueHolds]:
        """The queues with held pulls."""
        return self.index.queues

    def suspend(self, request: PullRequest, waiter: PullWaiter, timeout_s: float,
                tag_codes: Collection[int] | None = None, max_offset: int | None = None) -> bool:
        """Hold a pull that found nothing until an entry at or past its
        offset may match it, or ``timeout_s``; False when it is not held (its
        waiter is closed, or a bound is reached: answer it now)."""
        if waiter.closed:
            return False
        topic, queue_id = request.topic, request.queue_id
        hold = HeldPull(waiter, request, request.queue_offset, trio.current_time() + timeout_s,
                        topic, queue_id, None if tag_codes is None else frozenset(tag_codes))
        refused = self.index.add(hold, max_offset)
        if refused is not None:
            self.refused += 1
            limit = (self.index.max_held_per_connection if refused == REFUSED_CONNECTION
                     else self.index.max_held)
            self.guard.note("held pulls at their bound, pull answered at once", refused,
                            bound=refused, limit=limit, refused_total=self.refused,
                            topic=shown(topic), queue_id=queue_id)
            return False
        key = (topic, queue_id)
        if self.index.behind(key):  # the pull saw entries the dispatcher did not report
            self._behind.add(key)
        self._wake_task()
        return True

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Called by the dispatcher (event loop thread) after messages are indexed."""
        key = (topic, queue_id)
        if not self.index.arrived(key, max_offset):
            return
        self._step(key)
        if self.index.behind(key):
            self._behind.add(key)
            self._wake_task()

    def connection_closed(self, owner: Hashable) -> None:
        """The server's close callback (``owner``: the connection, as its
        waiters name it): forget its holds."""
        self.index.drop_owner(owner)

    def _step(self, key: QueueKey) -> None:
        """Look at the next new entries of a queue; re-run the holds they match."""
        rng = self.index.to_read(key, self.max_entries_per_step if self.read_tags else None)
        if rng is None:
            return
        start, end = rng
        codes: Sequence[int] = ()
        if self.read_tags is not None:
            try:
                codes = self.read_tags(key[0], key[1], start, end - start)
            except Exception as exc:  # unknown codes: every hold below ``end`` is re-run
                self.guard.failed(exc, "reading consume-queue tags failed", topic=shown(key[0]),
                                  queue_id=key[1], offset=start)
        for hold in self.index.matched(key, start, end, codes):
            if hold.done:
                continue
            if hold.waiter.closed:
                self.index.remove(hold)
                continue
            self.retries += 1
            if self._answer(hold, final=False):
                self.index.remove(hold)

    def _answer(self, hold: HeldPull, final: bool) -> bool:
        """True when the hold is finished: answered, or failed and dropped."""
        try:
            outcome = self.retry(hold.request, final)
            if outcome is None:
                return False
            hold.waiter.answer(outcome)
        except Exception as exc:
            self.guard.failed(exc, "held pull failed, dropped", topic=shown(hold.topic),
                              queue_id=hold.queue_id, offset=hold.offset)
            try:
                hold.waiter.fail(HELD_PULL_FAILED)
            except Exception:
                pass  # the waiter is gone or broken; the client times out and retries
        return True

    def expire(self, now: float, limit: int | None = None) -> None:
        """Answer (empty) the held pulls whose deadline is ``now`` or earlier
        (at most ``limit`` of them)."""
        for hold in self.index.expire(now, limit):
            if not hold.waiter.closed:
                self._answer(hold, final=True)

    def catch_up(self) -> None:
        """One step for each queue with entries left over from a notification
        (a step moves past its entries before re-running any hold)."""
        for key in list(self._behind):
            self._step(key)
            if not self.index.behind(key):
                self._behind.discard(key)

    def _wake_task(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Answer held pulls whose deadline passed; read entries left over."""
        task_status.started()
        while True:
            if self._behind:
                await self.guard.run(self.catch_up)
                await trio.lowlevel.checkpoint()  # sends and pulls run between steps
            now = trio.current_time()
            deadline = self.index.next_deadline()
            if deadline is not None and deadline <= now:
                # in steps: thousands of holds due together must not stall sends
                await self.guard.run(self.expire, now, EXPIRE_PER_STEP)
                await trio.lowlevel.checkpoint()
                continue
            if self._behind:
                continue
            self._wake = trio.Event()
            with trio.move_on_at(math.inf if deadline is None else deadline):
                await self._wake.wait()  # a new hold (maybe an earlier deadline), or entries
            self._wake = None
