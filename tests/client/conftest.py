"""Fixtures for the client tests: a fake cluster in the test's own trio loop."""

from __future__ import annotations

import pytest
import trio

from tests.client.fakes import FakeCluster


@pytest.fixture
async def cluster(nursery: trio.Nursery) -> FakeCluster:
    """A fake name server and two fake brokers; ``TopicTest`` has 4 queues on each."""
    c = FakeCluster(brokers=2)
    await c.start(nursery)
    return c
