"""The blocking PullConsumer.read_range (RangeReader) against the threaded fake
cluster, and LoopThread.spawn."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

import pytest
import trio

from client import loop_thread
from client.blocking import MessageQueue, MQClientError, PullConsumer, RangeChunk
from client.loop_thread import LoopThread
from tests.client.conftest import delivered, loop_threads
from tests.client.fakes import FakeCluster, ThreadedCluster

TOPIC = FakeCluster.TOPIC
GROUP = "range_reader_group"
MQ = MessageQueue(TOPIC, "broker-a", 1)


def put(fakes: ThreadedCluster, count: int, *, min_offset: int = 0,
        tag: str | None = None) -> None:
    """Store ``count`` messages in MQ (offsets from ``min_offset``), bodies b"m<offset>"."""
    broker = fakes.cluster.broker(MQ.broker_name)

    def store() -> None:
        if min_offset:
            broker.min_offsets[(MQ.topic, MQ.queue_id)] = min_offset
        for i in range(min_offset, min_offset + count):
            t = tag if tag is not None else ("TagA" if i % 2 == 0 else "TagB")
            broker.put(MQ.topic, MQ.queue_id, b"m%d" % i, tags=t)

    fakes.call(store)


def decode(chunks: list[RangeChunk], tags: set[str] | None = None) -> list[int]:
    return delivered(chunks, MQ, tags)


def read_all(reader: Iterable[list[RangeChunk]]) -> list[RangeChunk]:
    chunks: list[RangeChunk] = []
    for got in reader:
        assert isinstance(got, list) and got  # at least one chunk per step
        chunks.extend(got)
    return chunks


def test_read_range_every_offset_once(fakes: ThreadedCluster) -> None:
    put(fakes, 150)
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        with consumer.read_range(MQ, "*", 5, 140, batch_size=16, in_flight=3) as reader:
            assert reader.reached is None
            chunks = read_all(reader)
            assert reader.reached == 140
        assert [c.start for c in chunks] == list(range(5, 140, 16))
        assert decode(chunks) == list(range(5, 140))
        # the consumer is still usable afterwards
        assert consumer.max_offset(MQ) == 150
    assert loop_threads() == []


# the two blocking range reads: through the client's loop thread, and in the
# calling thread over a connection of the read's own (tests/client/test_direct_range.py)
READS = ["read_range", "read_range_here"]


@pytest.mark.parametrize("read", READS)
def test_read_range_end_past_the_queue_max(fakes: ThreadedCluster, read: str) -> None:
    put(fakes, 40)
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        reader = getattr(consumer, read)(MQ, None, 0, 1000, batch_size=10, in_flight=4)
        chunks = read_all(reader)
        assert reader.reached == 40
        assert decode(chunks) == list(range(40))
        assert chunks[-1].exhausted and not any(c.exhausted for c in chunks[:-1])
        with pytest.raises(StopIteration):
            next(reader)  # iteration stays ended
        reader.close()
        if read == "read_range_here":
            assert reader.link.sock is None  # its connection closed when iteration ended


@pytest.mark.parametrize("read", READS)
def test_read_range_with_a_tag_expression(fakes: ThreadedCluster, read: str) -> None:
    put(fakes, 60)
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        with getattr(consumer, read)(MQ, "TagA", 0, 60, batch_size=8, in_flight=2) as reader:
            chunks = read_all(reader)
        assert reader.reached == 60
        assert decode(chunks, {"TagA"}) == list(range(0, 60, 2))


def test_close_early(fakes: ThreadedCluster) -> None:
    put(fakes, 400)
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        reader = consumer.read_range(MQ, "*", 0, 400, batch_size=4, in_flight=2)
        first: list[RangeChunk] = []
        for chunks in reader:
            first = chunks
            break
        assert first and first[0].start == 0
        reader.close()  # cancels the pulls in flight (the channel of 2 is full: not done yet)
        reader.close()  # idempotent
        with pytest.raises(StopIteration):
            next(reader)
        assert reader.reached is None  # cancelled: the read never finished
        # the loop is still healthy
        assert consumer.max_offset(MQ) == 400
    assert loop_threads() == []


def test_close_with_block_before_iterating(fakes: ThreadedCluster) -> None:
    put(fakes, 100)
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        with consumer.read_range(MQ, "*", 0, 100, batch_size=1, in_flight=1):
            pass
        assert consumer.min_offset(MQ) == 0
    assert loop_threads() == []


class DataLost(Exception):
    pass


def test_on_offset_moved_error_surfaces_from_iteration(fakes: ThreadedCluster) -> None:
    put(fakes, 20, min_offset=10)  # offsets 10..29; 0..9 are gone
    seen: list[tuple[int, int, bool]] = []

    def moved(offset: int, min_offset: int) -> int:
        seen.append((offset, min_offset, loop_thread_running()))
        raise DataLost(f"lost {offset}..{min_offset}")

    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        with consumer.read_range(MQ, "*", 0, 30, batch_size=5, in_flight=2,
                                 on_offset_moved=moved) as reader:
            with pytest.raises(DataLost) as info:
                read_all(reader)
            assert type(info.value) is DataLost
            assert reader.reached is None
            with pytest.raises(StopIteration):  # the error is raised once
                next(reader)
        assert (0, 10, True) in seen  # run in the client loop thread
        assert all(in_loop for _, _, in_loop in seen)


def loop_thread_running() -> bool:
    return threading.current_thread().name == loop_thread.THREAD_NAME


def test_default_on_offset_moved_skips(fakes: ThreadedCluster) -> None:
    put(fakes, 20, min_offset=10)
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        with consumer.read_range(MQ, "*", 0, 30, batch_size=5, in_flight=2) as reader:
            chunks = read_all(reader)
        assert reader.reached == 30
        assert decode(chunks) == list(range(10, 30))
        assert [s for c in chunks for s in c.skipped] == [(0, 10), (5, 10)]


def test_bad_range_error_surfaces_from_iteration(fakes: ThreadedCluster) -> None:
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        with consumer.read_range(MQ, "*", 10, 5) as reader:
            with pytest.raises(MQClientError, match="bad range"):
                next(reader)
        with consumer.read_range(MQ, "*", 0, 5, batch_size=0) as reader:
            with pytest.raises(MQClientError, match="positive"):
                next(reader)


def test_read_range_needs_a_running_consumer(fakes: ThreadedCluster) -> None:
    consumer = PullConsumer(GROUP, fakes.cluster.namesrv_addr)
    with pytest.raises(MQClientError, match="not running"):
        consumer.read_range(MQ, "*", 0, 5)
    consumer.start()
    consumer.shutdown()
    with pytest.raises(MQClientError, match="not running"):
        consumer.read_range(MQ, "*", 0, 5)


# ---- LoopThread.spawn ---------------------------------------------------------------


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    lt = LoopThread(name="test-spawn-loop")
    lt.start()
    try:
        yield lt
    finally:
        lt.stop(timeout=10)
    assert not lt.alive


def test_spawn_runs_in_the_loop(loop: LoopThread) -> None:
    done = threading.Event()
    where: list[str] = []

    async def task(a: int, b: int) -> None:
        await trio.sleep(0)
        where.append(f"{threading.current_thread().name} {a + b}")
        done.set()

    loop.spawn(task, 2, 3)  # returns at once
    assert done.wait(10)
    assert where == ["test-spawn-loop 5"]


def test_spawn_error_is_logged_not_propagated(loop: LoopThread) -> None:
    failed = threading.Event()

    async def boom() -> None:
        try:
            raise RuntimeError("boom")
        finally:
            failed.set()

    loop.spawn(boom)
    assert failed.wait(10)
    # the loop survives its background task's error
    assert loop.run(trio.sleep, 0) is None
    assert loop.alive


def test_spawned_task_is_cancelled_when_the_loop_stops() -> None:
    lt = LoopThread(name="test-spawn-loop")
    lt.start()
    started, cancelled = threading.Event(), threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.set()
            raise

    lt.spawn(forever)
    assert started.wait(10)
    lt.stop(timeout=10)
    assert cancelled.is_set()
    assert not lt.alive
    with pytest.raises(MQClientError):
        lt.spawn(forever)


def test_spawn_needs_a_running_loop() -> None:
    async def nothing() -> None:
        pass

    with pytest.raises(MQClientError, match="not running"):
        LoopThread().spawn(nothing)
