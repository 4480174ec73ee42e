"""Fixtures for the client tests: a fake cluster in the test's own trio loop."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import trio

from client import loop_thread
from tests.client.fakes import FakeCluster, ThreadedCluster


def loop_threads() -> list[threading.Thread]:
    """The blocking facade's loop threads still alive."""
    return [t for t in threading.enumerate() if t.name == loop_thread.THREAD_NAME]


@pytest.fixture
def fakes() -> Iterator[ThreadedCluster]:
    """The fake cluster on its own thread, for blocking clients; no thread left after."""
    before = set(threading.enumerate())
    with ThreadedCluster() as tc:
        yield tc
    assert set(threading.enumerate()) <= before, "threads left running"


@pytest.fixture
async def cluster(nursery: trio.Nursery) -> FakeCluster:
    """A fake name server and two fake brokers; ``TopicTest`` has 4 queues on each."""
    c = FakeCluster(brokers=2)
    await c.start(nursery)
    return c
