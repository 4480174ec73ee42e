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
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from client.admin import MQAdmin, MQAdminError

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
                    interval: float = INTERVAL,
                    give_up: Callable[[], str | None] | None = None) -> Any:
    """``wait_until`` outside trio (blocking clients, subprocesses). ``give_up``,
    asked after each falsy round, returns a reason to fail at once (a child
    process that exited) or None to keep waiting."""
    deadline = time.monotonic() + timeout
    last: object = _NOTHING
    while True:
        value = predicate()
        if value:
            return value
        last = value
        if give_up is not None:
            reason = give_up()
            if reason is not None:
                raise AssertionError(f"gave up waiting for {what}: {reason} (last value {last!r:.500})")
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, last)
        time.sleep(interval)


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
