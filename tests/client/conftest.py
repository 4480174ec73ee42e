"""Fixtures for the client tests: a fake cluster in the test's own trio loop."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator

import pytest
import trio

from client import loop_thread
from client.range_reader import RangeChunk
from protocol.message import MessageQueue
from protocol.record import decode_columns, empty_columns
from tests.client.fakes import FakeCluster, ThreadedCluster


def loop_threads() -> list[threading.Thread]:
    """The blocking facade's loop threads still alive."""
    return [t for t in threading.enumerate() if t.name == loop_thread.THREAD_NAME]


def delivered(chunks: list[RangeChunk], mq: MessageQueue,
              tags: Collection[str] | None = None) -> list[int]:
    """The offsets a range reader gets: each chunk's records below its end,
    tag-checked. Bodies must be ``b"m<offset>"`` and records of ``mq``."""
    cols = empty_columns()
    for chunk in chunks:
        for body in chunk.bodies:
            decode_columns(body, cols, stop_offset=chunk.end)
    offsets = []
    for i, offset in enumerate(cols.queue_offsets):
        assert bytes(cols.bodies[i]) == b"m%d" % offset
        assert cols.topics[i] == mq.topic and cols.queue_ids[i] == mq.queue_id
        if tags is None or cols.properties(i).get("TAGS") in tags:
            offsets.append(offset)
    return offsets


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
