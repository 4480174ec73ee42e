"""The one way tests wait: poll a condition until it holds, bounded in time.

``wait_until`` (trio; real or MockClock time) and ``wait_until_sync`` (plain
threads, e.g. blocking-client tests) poll ``predicate`` every ``interval`` s and
return its first truthy value. After ``timeout`` s they fail with an
AssertionError naming the condition (``what``) and the last value the
predicate returned, so a predicate that returns something telling (a count, a
``Progress``, a list) makes a clear failure.

Never sleep to show that something does *not* happen: wait for a state that
implies quiet (a committed offset equal to the queue's max offset, a counter
the daemon or client exposes), or run the test under MockClock.
"""

from __future__ import annotations

import inspect
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from client.admin import MQAdmin, MQAdminError
from client.consumer_core import ConsumerCore
from protocol.message import MessageQueue

INTERVAL = 0.05
_NOTHING = object()


def _failure(what: str, timeout: float, last: object) -> AssertionError:
    seen = "the predicate never returned" if last is _NOTHING else f"last value {last!r:.500}"
    return AssertionError(f"timed out after {timeout}s waiting for {what} ({seen})")


async def wait_until(predicate: Callable[[], Any], timeout: float, what: str,
                     interval: float = INTERVAL) -> Any:
    """Poll ``predicate`` (a plain or async function) until it returns something
    truthy, and return that; fail after ``timeout`` s. ``interval=0`` polls once
    per scheduler round."""
    last: object = _NOTHING
    with trio.move_on_after(timeout):
        while True:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
            last = value
            await trio.sleep(interval)
    raise _failure(what, timeout, last)


def wait_until_sync(predicate: Callable[[], Any], timeout: float, what: str,
                    interval: float = INTERVAL, check: Callable[[], None] | None = None) -> Any:
    """``wait_until`` outside trio (blocking clients, child processes). ``check``,
    called after each falsy round, raises to stop waiting at once (a child
    process that exited)."""
    deadline = time.monotonic() + timeout
    last: object = _NOTHING
    while True:
        value = predicate()
        if value:
            return value
        last = value
        if check is not None:
            check()
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, last)
        time.sleep(interval)


def threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (state T in /proc): a SIGSTOP is
    only queued when kill() returns; a multi-threaded process under load can still
    answer a request until one of its threads has run and started the group stop."""
    try:
        tasks = [t for t in os.listdir(f"/proc/{pid}/task")]
        states = [open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0]
                  for t in tasks]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return bool(states) and all(state in ("T", "t") for state in states)


def freeze(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP ``pid`` and return once all its threads have stopped."""
    os.kill(pid, signal.SIGSTOP)
    wait_until_sync(lambda: threads_stopped(pid), timeout, f"process {pid} stopped",
                    interval=0.001)


@dataclass(frozen=True)
class Progress:
    """A count towards a goal: truthy once reached; its repr says how far it got."""

    value: int
    goal: int

    def __bool__(self) -> bool:
        return self.value >= self.goal

    def __repr__(self) -> str:
        return f"{self.value} of {self.goal}"


def at_least(count: Callable[[], int], n: int) -> Callable[[], Progress]:
    """A predicate: ``count()`` has reached ``n``."""
    return lambda: Progress(count(), n)


def routed(admin: MQAdmin, topic: str) -> Callable[[], Awaitable[bool]]:
    """A predicate: the name servers have a route for ``topic``."""
    async def check() -> bool:
        try:
            await admin.topic_route(topic)
            return True
        except MQAdminError:
            return False
    return check


@dataclass(frozen=True)
class Waiting:
    """What is still on its way: truthy (quiet) once nothing is; its repr lists it."""

    items: tuple[str, ...]

    def __bool__(self) -> bool:
        return not self.items

    def __repr__(self) -> str:
        return "nothing" if not self.items else "still waiting: " + "; ".join(self.items[:12])


SCHEDULE_OFFSET = "scheduleMessageOffset_"


async def delay_levels(admin: MQAdmin, brokers: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Every delay level of ``brokers``: (delivered, max offset) of its schedule
    queue (brokerStatus' ``scheduleMessageOffset_<level>``)."""
    levels: dict[str, tuple[int, int]] = {}
    for addr in brokers:
        for key, value in (await admin.broker_runtime_info(addr)).items():
            if key.startswith(SCHEDULE_OFFSET):
                done, top = (int(x) for x in str(value).split(","))
                levels[f"{addr} {key.removeprefix(SCHEDULE_OFFSET)}"] = (done, top)
    return levels


def _undelivered(levels: dict[str, tuple[int, int]]) -> list[str]:
    return [f"delay level {k}: {done} of {top} delivered"
            for k, (done, top) in levels.items() if done < top]


def delays_delivered(admin: MQAdmin, brokers: Sequence[str]) -> Callable[[], Awaitable[Waiting]]:
    """A predicate: no delayed message (delay level, retry back-off) waits on ``brokers``."""
    async def check() -> Waiting:
        return Waiting(tuple(_undelivered(await delay_levels(admin, brokers))))
    return check


def consumed_all(admin: MQAdmin, group: str, consumers: Sequence[ConsumerCore],
                 brokers: Sequence[str]) -> Callable[[], Awaitable[Waiting]]:
    """A predicate for "nothing more will reach ``group``'s listeners", to wait on
    before asserting that something did *not* arrive (no duplicate, no redelivery).
    It holds when two looks in a row see

    - every queue of the group's topics (its retry topic too) held by one of
      ``consumers`` at the queue's max offset (consume stats) with nothing
      cached: everything stored was consumed (or filtered out);
    - no delayed message (a retry's back-off) waiting on ``brokers``;
    - and not one of those figures changed in between. Each is read at another
      moment; none changing means all held at once, between the two looks.

    A failed message is sent back (stored) before its offset moves and a re-put
    moves a delay level and a retry queue together, so a retry on its way
    always shows. Stateful: make one per wait."""
    last: list[object] = []

    async def check() -> Waiting:
        waiting: list[str] = []
        held: dict[MessageQueue, int] = {}
        for c in consumers:
            held.update(c.offset_table())
            waiting += [f"{mq}: {pq.msg_count} cached" for mq, pq
                        in list(c.process_queue_table.items()) if not pq.is_empty()]
        tops: dict[MessageQueue, int] = {}
        for row in await admin.consume_stats(group):
            mq = MessageQueue(row["topic"], row["brokerName"], row["queueId"])
            tops[mq] = top = row["brokerOffset"]
            if held.get(mq, 0) < top:
                waiting.append(f"{mq}: consumed to {held.get(mq)} of {top}")
        levels = await delay_levels(admin, brokers)
        waiting += _undelivered(levels)
        seen = (held, tops, levels)
        if not waiting and last != [seen]:
            waiting.append("a second look with nothing changed")
        last[:] = [seen]
        return Waiting(tuple(waiting))
    return check


async def wait_lag_zero(namesrv: str, group: str, topic: str, timeout: float = 30.0
                        ) -> list[dict[str, Any]]:
    """Wait until ``group`` has committed every queue of ``topic`` up to its max
    offset (consumeStats lag 0 on every row): a state that implies nothing more
    is delivered. Returns the rows."""
    async with MQAdmin(namesrv) as admin:
        async def done() -> list[dict[str, Any]] | None:
            rows = await admin.consume_stats(group, topic)
            return rows if rows and all(r["lag"] == 0 for r in rows) else None
        try:
            rows: list[dict[str, Any]] = await wait_until(
                done, timeout, f"{group} lag 0 on {topic}", interval=0.5)
        except AssertionError as e:
            raise AssertionError(f"{e}: {await admin.consume_stats(group, topic)}") from None
    return rows
