"""PullConsumer.read_range_here (client.direct_range): a range read over a
blocking socket in the calling thread, against the threaded fake cluster;
it reads what read_range reads (the tests both readers share are in
test_blocking_range_reader.py)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from client.blocking import MessageQueue, MQBrokerError, MQClientError, PullConsumer
from client.direct_range import DirectRangeReader, PullLink
from client.subscription import build_subscription
from protocol.codes import ResponseCode
from tests.client.conftest import loop_threads
from tests.client.fakes import ThreadedCluster
from tests.client.test_blocking_range_reader import GROUP, MQ, decode, put, read_all


def test_every_offset_once_as_read_range(fakes: ThreadedCluster) -> None:
    put(fakes, 150)
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        with consumer.read_range(MQ, "*", 5, 140, batch_size=16, in_flight=3) as threaded:
            expected = [o for got in threaded for o in decode(got)]
        with consumer.read_range_here(MQ, "*", 5, 140, batch_size=16, in_flight=3) as reader:
            assert reader.reached is None
            chunks = read_all(reader)
            assert reader.reached == 140
        assert decode(chunks) == expected == list(range(5, 140))
        assert [c.start for c in chunks] == list(range(5, 140, 16))
        assert consumer.max_offset(MQ) == 150  # the consumer is still usable
    assert loop_threads() == []


def test_skips_what_is_gone_by_default(fakes: ThreadedCluster) -> None:
    put(fakes, 20, min_offset=10)
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        with consumer.read_range_here(MQ, "*", 0, 30, batch_size=5, in_flight=2) as reader:
            chunks = read_all(reader)
        assert reader.reached == 30
        assert decode(chunks) == list(range(10, 30))
        assert [s for c in chunks for s in c.skipped] == [(0, 10), (5, 10)]


class DataLost(Exception):
    pass


def test_on_offset_moved_runs_in_the_calling_thread_and_its_error_surfaces(
        fakes: ThreadedCluster) -> None:
    put(fakes, 20, min_offset=10)
    seen: list[tuple[int, int, threading.Thread]] = []

    def moved(offset: int, min_offset: int) -> int:
        seen.append((offset, min_offset, threading.current_thread()))
        raise DataLost(f"lost {offset}..{min_offset}")

    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        with consumer.read_range_here(MQ, "*", 0, 30, batch_size=5, in_flight=2,
                                      on_offset_moved=moved) as reader:
            with pytest.raises(DataLost):
                read_all(reader)
            assert reader.reached == 0
            with pytest.raises(StopIteration):  # the error is raised once
                next(reader)
    assert (0, 10, threading.current_thread()) in seen
    assert all(t is threading.current_thread() for _, _, t in seen)


def test_close_early(fakes: ThreadedCluster) -> None:
    put(fakes, 400)
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        reader = consumer.read_range_here(MQ, "*", 0, 400, batch_size=4, in_flight=2)
        first = next(reader)
        assert first and first[0].start == 0
        reader.close()
        reader.close()  # idempotent
        with pytest.raises(StopIteration):
            next(reader)
        assert reader.reached is None  # the read never finished
        assert consumer.max_offset(MQ) == 400


def test_a_broker_that_does_not_answer_times_out(fakes: ThreadedCluster) -> None:
    put(fakes, 50)
    broker = fakes.cluster.broker(MQ.broker_name)
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        reader = consumer.read_range_here(MQ, "*", 0, 50, batch_size=10, in_flight=2,
                                          timeout=0.5)
        fakes.call(setattr, broker, "silent", True)
        try:
            t0 = time.monotonic()
            with pytest.raises(MQClientError, match="timed out"):
                read_all(reader)
            assert time.monotonic() - t0 < 5  # bounded by the pull timeout, not forever
        finally:
            fakes.call(setattr, broker, "silent", False)
        with pytest.raises(StopIteration):
            next(reader)


def test_a_broker_refusal_is_mqbrokererror(fakes: ThreadedCluster) -> None:
    put(fakes, 50)
    broker = fakes.cluster.broker(MQ.broker_name)
    fakes.call(setattr, broker, "pull_code", ResponseCode.NO_PERMISSION)
    try:
        with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
            with consumer.read_range_here(MQ, "*", 0, 50, batch_size=10) as reader:
                with pytest.raises(MQBrokerError) as info:
                    read_all(reader)
                assert info.value.response_code == ResponseCode.NO_PERMISSION
    finally:
        fakes.call(setattr, broker, "pull_code", None)


def test_bad_arguments_and_a_stopped_consumer(fakes: ThreadedCluster) -> None:
    consumer = PullConsumer(GROUP, fakes.cluster.namesrv_addr)
    with pytest.raises(MQClientError, match="not running"):
        consumer.read_range_here(MQ, "*", 0, 5)
    with consumer:
        with pytest.raises(MQClientError, match="bad range"):
            consumer.read_range_here(MQ, "*", 10, 5)
        with pytest.raises(MQClientError, match="positive"):
            consumer.read_range_here(MQ, "*", 0, 5, batch_size=0)
        with pytest.raises(MQClientError, match="positive"):
            consumer.read_range_here(MQ, "*", 0, 5, timeout=0)
        with pytest.raises(MQClientError, match="not in any route"):
            consumer.read_range_here(MessageQueue(MQ.topic, "broker-z", 0), "*", 0, 5)


def test_a_closed_port_is_mqclienterror() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(MQClientError, match="connect to"):
            PullLink(f"127.0.0.1:{port}", connect_timeout=2.0)
    with pytest.raises(MQClientError, match="bad broker address"):
        PullLink("no-port-here")


@contextlib.contextmanager
def peer() -> Iterator[tuple[PullLink, socket.socket]]:
    """A PullLink to a plain listening socket of the test's, and the accepted end."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        link = PullLink(f"127.0.0.1:{server.getsockname()[1]}", connect_timeout=2.0)
        conn, _ = server.accept()
        with conn:
            yield link, conn


def test_a_peer_that_closes_fails_the_read() -> None:
    with peer() as (link, conn):
        sub = build_subscription(MQ.topic, "*")
        reader = DirectRangeReader(link, GROUP, MQ, sub, 0, 10, timeout=5.0)
        conn.close()  # the requests arrive, the peer goes away
        with pytest.raises(MQClientError, match="closed the connection|failed"):
            next(reader)
        with pytest.raises(StopIteration):
            next(reader)


def test_a_peer_that_sends_garbage_fails_the_read() -> None:
    with peer() as (link, conn):
        sub = build_subscription(MQ.topic, "*")
        reader = DirectRangeReader(link, GROUP, MQ, sub, 0, 10, timeout=5.0)
        conn.sendall(b"\xff\xff\xff\xff" + b"x" * 64)  # a frame of 4 GiB announced
        with pytest.raises(MQClientError, match="bad response"):
            next(reader)
        assert link.sock is None


class StepClock:
    """A clock that moves only when told (the caller away between chunks)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_callers_time_between_chunks_does_not_count_against_the_pulls(
        fakes: ThreadedCluster) -> None:
    put(fakes, 60)
    broker = fakes.cluster.broker(MQ.broker_name)
    with PullConsumer(GROUP, fakes.cluster.namesrv_addr) as consumer:
        setup = consumer._run(consumer._consumer.read_setup, MQ, "*", None)
        clock = StepClock()
        link = PullLink(setup.addr, clock=clock)
        with DirectRangeReader(link, GROUP, MQ, setup.sub, 0, 60, batch_size=10,
                               in_flight=3, timeout=0.5) as reader:
            chunks = next(reader)
            for got in iter(lambda: next(reader, None), None):
                chunks += got
                clock.now += 10.0  # the caller works for 10 s on each: 20 pull timeouts
            assert decode(chunks) == list(range(60)) and reader.reached == 60
        # a pull not answered while the reader waits still times out
        link = PullLink(setup.addr, clock=time.monotonic)
        fakes.call(setattr, broker, "silent", True)
        try:
            with DirectRangeReader(link, GROUP, MQ, setup.sub, 0, 60, batch_size=10,
                                   timeout=0.3) as reader:
                with pytest.raises(MQClientError, match="timed out"):
                    next(reader)
        finally:
            fakes.call(setattr, broker, "silent", False)
