"""The blocking facade end to end against fakes served on another thread's trio loop.

These are plain (non-async) tests: the facade must work without a trio loop
in the calling thread.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import threading

import pytest

from client import loop_thread
from client.blocking import (
    Message,
    MessageQueue,
    MQBrokerError,
    MQClientError,
    Producer,
    PullConsumer,
    PullStatus,
    SendResult,
    SendStatus,
)
from protocol.codes import ResponseCode
from tests.client.conftest import loop_threads
from tests.client.fakes import FakeCluster, ThreadedCluster

TOPIC = FakeCluster.TOPIC


def test_produce_and_consume_end_to_end(fakes: ThreadedCluster) -> None:
    ns = fakes.cluster.namesrv_addr
    with Producer("blocking_producer", ns) as producer:
        assert len(loop_threads()) == 1
        result = producer.send(Message(TOPIC, b"hello", tags="TagA"))
        assert isinstance(result, SendResult) and result.send_status is SendStatus.SEND_OK
        batch = producer.send_batch([Message(TOPIC, b"b%d" % i, tags="TagB") for i in range(3)])
        assert len(batch.msg_id.split(",")) == 3
        producer.send_oneway(Message(TOPIC, b"oneway"))
        assert len(producer.fetch_publish_message_queues(TOPIC)) == 8

        with PullConsumer("blocking_consumer", ns) as consumer:
            assert len(loop_threads()) == 1  # shared by every blocking object
            mq = result.message_queue
            r = consumer.pull(mq, "TagA", 0, 32)
            assert r.pull_status is PullStatus.FOUND
            assert [m.body for m in r.msg_found_list] == [b"hello"]
            assert r.msg_found_list[0].uniq_key == result.msg_id
            bq = batch.message_queue
            r = consumer.pull(bq, "TagB", batch.queue_offset, 32)
            assert [m.body for m in r.msg_found_list] == [b"b0", b"b1", b"b2"]
            queues = consumer.fetch_subscribe_message_queues(TOPIC)
            assert queues == sorted(queues) and len(queues) == 8
            assert consumer.fetch_consume_offset(mq) == -1
            consumer.update_consume_offset(mq, 1)
            assert consumer.fetch_consume_offset(mq) == 1
            assert consumer.max_offset(mq) >= 1 and consumer.min_offset(mq) == 0
        assert len(loop_threads()) == 1  # the producer still uses it
    assert loop_threads() == []


def test_send_async_future_and_callback(fakes: ThreadedCluster) -> None:
    seen: list[tuple[SendResult | None, BaseException | None, str]] = []
    done = threading.Event()

    def callback(result: SendResult | None, exc: BaseException | None) -> None:
        seen.append((result, exc, threading.current_thread().name))
        if len(seen) == 200:
            done.set()

    with Producer("blocking_producer", fakes.cluster.namesrv_addr) as producer:
        futures = [producer.send_async(Message(TOPIC, b"a%d" % i), callback) for i in range(200)]
        assert all(isinstance(f, concurrent.futures.Future) for f in futures)
        results = [f.result(timeout=10) for f in futures]
        assert done.wait(10)
        bf = producer.send_batch_async([Message(TOPIC, b"x"), Message(TOPIC, b"y")])
        assert len(bf.result(timeout=10).msg_id.split(",")) == 2
    assert len({r.msg_id for r in results}) == 200
    assert all(exc is None for _, exc, _ in seen)
    assert {name for _, _, name in seen} == {loop_thread.THREAD_NAME}
    assert loop_threads() == []


def test_errors_cross_the_thread_boundary(fakes: ThreadedCluster) -> None:
    def busy() -> None:
        for b in fakes.cluster.brokers:
            b.send_code = ResponseCode.SYSTEM_BUSY

    fakes.call(busy)
    with Producer("blocking_producer", fakes.cluster.namesrv_addr) as producer:
        with pytest.raises(MQBrokerError, match="SYSTEM_BUSY") as info:
            producer.send(Message(TOPIC, b"x"))
        assert info.value.response_code is ResponseCode.SYSTEM_BUSY
        fut = producer.send_async(Message(TOPIC, b"x"))
        assert isinstance(fut.exception(timeout=10), MQBrokerError)
        with pytest.raises(MQClientError, match="length is zero"):
            producer.send(Message(TOPIC, b""))
        with pytest.raises(MQClientError, match="length is zero"):
            producer.send_async(Message(TOPIC, b""))
    assert loop_threads() == []


def test_lifecycle(fakes: ThreadedCluster) -> None:
    producer = Producer("blocking_producer", fakes.cluster.namesrv_addr)
    with pytest.raises(MQClientError, match="not running"):
        producer.send(Message(TOPIC, b"x"))
    assert loop_threads() == []
    producer.start()
    with pytest.raises(MQClientError, match="started once"):
        producer.start()
    producer.shutdown()
    producer.shutdown()
    with pytest.raises(MQClientError, match="not running"):
        producer.send(Message(TOPIC, b"x"))
    assert loop_threads() == []
    # A new object after the loop stopped starts a new loop thread.
    with PullConsumer("blocking_consumer", fakes.cluster.namesrv_addr) as consumer:
        assert len(loop_threads()) == 1
        r = consumer.pull(MessageQueue(TOPIC, "broker-a", 0), "*", 0, 1)
        assert r.pull_status is PullStatus.NO_NEW_MSG
    assert loop_threads() == []


def test_used_from_many_threads(fakes: ThreadedCluster) -> None:
    with Producer("blocking_producer", fakes.cluster.namesrv_addr) as producer:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: producer.send(Message(TOPIC, b"%d" % i)), range(64)))
    assert len({r.msg_id for r in results}) == 64
    stored = fakes.call(
        lambda: sum(len(q) for b in fakes.cluster.brokers for q in b.queues.values())
    )
    assert stored == 64
    assert loop_threads() == []


def test_blocking_call_from_a_callback_is_refused(fakes: ThreadedCluster) -> None:
    errors: list[BaseException] = []
    with Producer("blocking_producer", fakes.cluster.namesrv_addr) as producer:

        def callback(result: SendResult | None, exc: BaseException | None) -> None:
            try:
                producer.send(Message(TOPIC, b"nested"))
            except MQClientError as e:
                errors.append(e)

        producer.send_async(Message(TOPIC, b"x"), callback).result(timeout=10)
    assert len(errors) == 1 and "own loop thread" in str(errors[0])


def run_to_exit(code: str) -> str:
    """Run ``code`` in a child interpreter that must print "started" and exit
    0 (through the atexit hooks); its stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "started" in proc.stdout
    return proc.stderr


def test_interpreter_exits_inside_a_with_block() -> None:
    # A generator suspended inside ``with PullConsumer(...)`` (a Spark reader
    # Spark stopped reading) is finalized after the atexit hook stopped the
    # loop thread: its shutdown has nothing left to do and must not raise.
    stderr = run_to_exit(
        "from client.blocking import PullConsumer\n"
        "def gen():\n"
        "    with PullConsumer('left_open', '127.0.0.1:9'):\n"
        "        yield 1\n"
        "g = gen()\n"
        "next(g)\n"
        "print('started')\n"
    )
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr


def test_interpreter_exits_with_a_producer_left_running() -> None:
    # Start needs no server; the atexit hook must stop the loop thread cleanly.
    stderr = run_to_exit(
        "from client.blocking import Producer\n"
        "p = Producer('left_running', '127.0.0.1:9')\n"
        "p.start()\n"
        "print('started')\n"
    )
    assert "Traceback" not in stderr
