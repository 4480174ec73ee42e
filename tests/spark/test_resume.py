"""Planned ranges read to their end across broker failures (client.spark.resume),
over fake reads: no Spark, no sockets, a fake clock."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from client.errors import MQBrokerError, MQClientError
from client.range_reader import RangeChunk
from client.spark.offsets import OptionError, parse_options
from client.spark.resume import (
    RangeReadError,
    RetryWindow,
    ShortReadError,
    read_planned,
    retry_call,
    retryable,
)
from protocol.codes import ResponseCode


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, delay: float) -> None:
        self.slept.append(delay)
        self.now += delay


class Queue:
    """A queue as brokers hold it: offsets below ``stored`` exist. Each
    attempt's read follows ``script``: ("ok", n) yields chunks of up to 2
    offsets, n of them, then goes on to the end; ("die", n) raises a
    connection error after n chunks; ("refuse", 0) fails to open."""

    def __init__(self, stored: int, script: list[tuple[str, int]]) -> None:
        self.stored = stored
        self.script = script
        self.opened: list[tuple[int, int]] = []  # (offset, attempt)
        self.closed = 0

    @contextmanager
    def open(self, offset: int, attempt: int) -> Iterator[Iterator[list[RangeChunk]]]:
        self.opened.append((offset, attempt))
        mode, n = self.script[min(attempt, len(self.script) - 1)]
        if mode == "refuse":
            raise MQClientError("connect to 127.0.0.1:1 failed: refused")
        try:
            yield self._chunks(offset, mode, n)
        finally:
            self.closed += 1

    def _chunks(self, offset: int, mode: str, n: int) -> Iterator[list[RangeChunk]]:
        given = 0
        while offset < self.end:
            if mode == "die" and given == n:
                raise MQClientError("pull from 127.0.0.1:1 failed: the broker closed the connection")
            hi = min(offset + 2, self.end)
            chunk = RangeChunk(offset, hi, [b"%d" % o for o in range(offset, min(hi, self.stored))])
            chunk.next_offset = min(hi, self.stored)
            chunk.exhausted = self.stored < hi
            given += 1
            yield [chunk]
            if chunk.exhausted:
                return
            offset = hi

    end = 0


def read_all(queue: Queue, start: int, end: int, window: RetryWindow, clock: Clock
             ) -> tuple[list[bytes], list[tuple[int, str]]]:
    queue.end = end
    retries: list[tuple[int, str]] = []
    bodies: list[bytes] = []
    for chunks in read_planned(queue.open, start, end, window, clock=clock, sleep=clock.sleep,
                               on_retry=lambda o, e, d: retries.append((o, type(e).__name__)),
                               what="T broker-a:0"):
        for c in chunks:
            bodies += c.bodies
    return bodies, retries


def offsets(lo: int, hi: int) -> list[bytes]:
    return [b"%d" % o for o in range(lo, hi)]


def test_a_read_cut_off_goes_on_where_it_stopped_each_offset_once() -> None:
    clock = Clock()
    q = Queue(100, [("die", 3), ("refuse", 0), ("die", 1), ("ok", 0)])
    bodies, retries = read_all(q, 10, 30, RetryWindow(5), clock)
    assert bodies == offsets(10, 30)
    # 3 chunks of 2, then refused, then 1 more chunk, then the rest
    assert q.opened == [(10, 0), (16, 1), (16, 2), (18, 3)]
    assert [o for o, _ in retries] == [16, 16, 18] and q.closed == 3
    # delays doubled while failing in a row, started over after progress
    assert clock.slept == [0.1, 0.2, 0.1]


def test_a_short_read_waits_for_the_rest() -> None:
    """A slave that has not copied the planned end yet: read again until it has."""
    clock = Clock()
    q = Queue(15, [("ok", 0)])
    q.end = 20
    reads = read_planned(q.open, 10, 20, RetryWindow(5), clock=clock, sleep=clock.sleep)
    got: list[bytes] = []
    for chunks in reads:
        got += [b for c in chunks for b in c.bodies]
        if len(q.opened) == 2:
            q.stored = 100  # copied (or the master is back)
    assert got == offsets(10, 20)
    assert q.opened == [(10, 0), (15, 1), (15, 2)]


def test_past_what_the_brokers_reported_a_read_may_end_with_the_queue() -> None:
    """An end asked for beyond the queue's (a batch read's endingOffsets): the read
    waits only for the offsets a broker reported when the range was planned."""
    clock = Clock()
    q = Queue(15, [("ok", 0)])
    q.end = 40
    got = [b for chunks in read_planned(q.open, 10, 40, RetryWindow(5), clock=clock,
                                        sleep=clock.sleep, must_reach=15)
           for c in chunks for b in c.bodies]
    assert got == offsets(10, 15) and q.opened == [(10, 0)] and clock.slept == []
    q = Queue(15, [("ok", 0)])
    q.end = 40
    with pytest.raises(RangeReadError, match="ended at offset 15, short of 20"):
        list(read_planned(q.open, 10, 40, RetryWindow(1), clock=clock, sleep=clock.sleep,
                          must_reach=20))


def test_gives_up_after_the_window_without_progress() -> None:
    clock = Clock()
    q = Queue(12, [("ok", 0)])
    with pytest.raises(RangeReadError, match=r"T broker-a:0: offsets 12 to 20 could not be read "
                                             r"for 3 s.*ended at offset 12") as info:
        read_all(q, 10, 20, RetryWindow(3), clock)
    assert isinstance(info.value.__cause__, ShortReadError)
    assert clock.slept == [0.1, 0.2, 0.4, 0.8, 1.5]  # the last one up to the window's end


def test_a_refusal_is_final_and_no_window_means_no_retry() -> None:
    clock = Clock()

    @contextmanager
    def refused(offset: int, attempt: int) -> Iterator[list[list[RangeChunk]]]:
        raise MQBrokerError(ResponseCode.NO_PERMISSION, "no SUB", "127.0.0.1:1")
        yield []

    with pytest.raises(MQBrokerError):
        list(read_planned(refused, 0, 5, RetryWindow(60), clock=clock, sleep=clock.sleep))
    assert clock.slept == []
    q = Queue(100, [("die", 1)])
    with pytest.raises(RangeReadError, match="for 0 s"):
        read_all(q, 0, 10, RetryWindow(0), clock)
    assert q.opened == [(0, 0)]


def test_what_is_retried() -> None:
    assert retryable(MQClientError("connect to 127.0.0.1:1 failed: refused"))
    assert retryable(ShortReadError("ended at offset 3, short of 9"))
    assert not retryable(MQBrokerError(ResponseCode.NO_PERMISSION, "no SUB", "127.0.0.1:1"))
    assert not retryable(ValueError("not the client's"))
    try:
        try:
            raise ssl.SSLCertVerificationError("self-signed certificate")
        except ssl.SSLError as inner:
            raise RuntimeError("handshake") from inner
    except RuntimeError as wrapped:
        err = MQClientError("TLS handshake with 127.0.0.1:1 failed")
        err.__cause__ = wrapped
    assert not retryable(err)
    assert not retryable(MQClientError("TLS handshake failed: certificate verification "
                                       "failed: unable to get local issuer certificate"))


def test_stopping_early_closes_the_read() -> None:
    clock = Clock()
    q = Queue(100, [("ok", 0)])
    q.end = 50
    reads = read_planned(q.open, 0, 50, RetryWindow(5), clock=clock, sleep=clock.sleep)
    next(reads)
    reads.close()
    assert q.closed == 1 and len(q.opened) == 1


def test_retry_call_and_the_option() -> None:
    clock = Clock()
    answers: list[object] = [MQClientError("refused"), MQClientError("refused"), {"ok": 1}]

    def call() -> object:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    assert retry_call(call, RetryWindow(10), clock=clock, sleep=clock.sleep) == {"ok": 1}
    assert clock.slept == [0.1, 0.2]

    def down() -> object:
        raise MQClientError("connect failed")

    with pytest.raises(RangeReadError, match="offsets failed for 1 s: connect failed"):
        retry_call(down, RetryWindow(1), clock=clock, sleep=clock.sleep, what="offsets")
    base = {"namesrv": "h:1", "topic": "A"}
    assert parse_options(base, streaming=True).failover_timeout == 60.0
    assert parse_options({**base, "failoverTimeoutMs": "2500"}, streaming=False).failover_timeout == 2.5
    for bad in ("-1", "soon", "1e3"):
        with pytest.raises(OptionError, match="failoverTimeoutMs"):
            parse_options({**base, "failoverTimeoutMs": bad}, streaming=True)
    with pytest.raises(ValueError):
        RetryWindow(-1)


def test_driver_queries_retry_a_dead_broker_but_not_an_unknown_topic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's offset queries (``_Brokers.queues``) over a fake consumer."""
    import client.spark.source as source
    from protocol.message import MessageQueue

    clock = Clock()
    monkeypatch.setattr(source.time, "monotonic", clock)
    monkeypatch.setattr(source.time, "sleep", clock.sleep)

    class Consumer:
        def __init__(self) -> None:
            self.answers: list[object] = []

        def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
            a = self.answers.pop(0) if self.answers else [MessageQueue(topic, "broker-a", 0)]
            if isinstance(a, Exception):
                raise a
            assert isinstance(a, list)
            return a

        def min_offset(self, mq: MessageQueue) -> int:
            return 0

        def max_offset(self, mq: MessageQueue) -> int:
            return 7

    brokers = source._Brokers(parse_options({"namesrv": "h:1", "topic": "T",
                                             "failoverTimeoutMs": "5000"}, streaming=True))
    c = brokers._consumer = Consumer()
    gone = MQClientError("topic T does not exist on the name servers h:1")
    c.answers = [gone]
    with pytest.raises(source.UnknownTopicError, match="does not exist"):
        brokers.queues()  # never listed: a typo fails at once
    assert clock.slept == []
    assert brokers.queues()["T"]["broker-a:0"].max_offset == 7
    # listed once: gone for a moment (its only master dead), or unreachable, is waited for
    c.answers = [gone, MQClientError("connect to 127.0.0.1:1 failed")]
    assert brokers.queues()["T"]["broker-a:0"].max_offset == 7
    assert clock.slept == [0.1, 0.2]
    c.answers = [MQClientError("connect to 127.0.0.1:1 failed")] * 100
    with pytest.raises(RangeReadError, match="for 5 s"):
        brokers.queues()
