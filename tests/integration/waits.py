"""Waiting on conditions in integration tests: bounded polls, never fixed sleeps."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from client.admin import MQAdmin, MQAdminError


async def wait_for(predicate: Callable[[], Awaitable[Any]], timeout: float, what: str,
                   interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s."""
    with trio.move_on_after(timeout):
        while True:
            value = await predicate()
            if value:
                return value
            await trio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def routed(admin: MQAdmin, topic: str) -> Callable[[], Awaitable[bool]]:
    """A predicate: the name servers have a route for ``topic``."""
    async def check() -> bool:
        try:
            await admin.topic_route(topic)
            return True
        except MQAdminError:
            return False
    return check


def at_least(count: Callable[[], int], n: int) -> Callable[[], Awaitable[bool]]:
    """A predicate: ``count()`` has reached ``n``."""
    async def check() -> bool:
        return count() >= n
    return check


def wait_until_sync(predicate: Callable[[], Any], timeout: float, what: str,
                    interval: float = 0.05) -> Any:
    """``wait_for`` for plain (blocking-client) tests, outside trio."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


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
            rows: list[dict[str, Any]] = await wait_for(done, timeout, f"{group} lag 0 on {topic}",
                                                        interval=0.5)
        except AssertionError as e:
            raise AssertionError(f"{e}: {await admin.consume_stats(group, topic)}") from None
    return rows
