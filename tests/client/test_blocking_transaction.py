"""The blocking TransactionProducer: the local transaction runs in the caller's
thread, checks in worker threads (at most ``check_workers`` at once)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from client.blocking import (
    CHECK_THREAD_NAME,
    LocalTransactionState,
    Message,
    MessageExt,
    MQClientError,
    SendStatus,
    TransactionProducer,
    TransactionSendResult,
)
from client.loop_thread import THREAD_NAME
from tests.client.conftest import loop_threads
from tests.client.fakes import ThreadedCluster
from tests.client.test_transaction_producer import (
    GROUP,
    TOPIC,
    TxBroker,
    check_fields,
    tx_cluster,
)
from tests.waits import wait_until_sync

COMMIT = LocalTransactionState.COMMIT_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW


def check_threads() -> list[threading.Thread]:
    """Threads running a check now (trio names a worker thread while it runs one)."""
    return [t for t in threading.enumerate() if t.name == CHECK_THREAD_NAME]


@pytest.fixture
def fakes() -> Iterator[ThreadedCluster]:
    """One TxBroker served by its own trio loop on a thread."""
    tc = ThreadedCluster(brokers=0)
    tc.cluster = tx_cluster(brokers=1)
    with tc:
        yield tc
    assert loop_threads() == []
    assert check_threads() == []


def broker_of(fakes: ThreadedCluster) -> TxBroker:
    broker = fakes.cluster.brokers[0]
    assert isinstance(broker, TxBroker)
    return broker


def test_local_transaction_runs_in_the_callers_thread(fakes: ThreadedCluster) -> None:
    threads: list[threading.Thread] = []

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            threads.append(threading.current_thread())
            return COMMIT if arg == "ok" else UNKNOW

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            raise AssertionError("not asked")

    broker = broker_of(fakes)
    with TransactionProducer(GROUP, fakes.cluster.namesrv_addr, Listener()) as producer:
        first = producer.send_message_in_transaction(Message(TOPIC, b"a"), "ok")
        second = producer.send_message_in_transaction(Message(TOPIC, b"b"), "later")
        wait_until_sync(lambda: len(broker.ends) == 2, 5, "2 END_TRANSACTION at the broker")
        plain = producer.send(Message(TOPIC, b"plain"))  # a Producer as well
    assert threads == [threading.current_thread()] * 2
    assert isinstance(first, TransactionSendResult)
    assert (first.send_status, first.local_transaction_state) == (SendStatus.SEND_OK, COMMIT)
    assert second.local_transaction_state is UNKNOW
    assert [e.ext_fields["commitOrRollback"] for e in broker.ends] == [8, 0]
    assert [e.ext_fields["transactionId"] for e in broker.ends] == [first.msg_id, second.msg_id]
    assert plain.send_status is SendStatus.SEND_OK


def test_local_transaction_exception_is_unknow(fakes: ThreadedCluster) -> None:
    class Listener:
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            raise KeyError("order 7")

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return COMMIT

    broker = broker_of(fakes)
    with TransactionProducer(GROUP, fakes.cluster.namesrv_addr, Listener()) as producer:
        result = producer.send_message_in_transaction(Message(TOPIC, b"a"))
        wait_until_sync(lambda: len(broker.ends) == 1, 5, "1 END_TRANSACTION at the broker")
        msg = Message(TOPIC, b"x")
        msg.delay_time_level = 2
        with pytest.raises(MQClientError, match="delayed message"):
            producer.send_message_in_transaction(msg)
    assert result.local_transaction_state is UNKNOW
    assert broker.ends[0].ext_fields["commitOrRollback"] == 0
    assert broker.ends[0].remark == "executeLocalTransactionBranch exception: KeyError: 'order 7'"


def test_checks_run_in_worker_threads_at_most_check_workers_at_once(
    fakes: ThreadedCluster,
) -> None:
    lock = threading.Lock()
    running = 0
    most = 0
    names: list[str] = []
    # Checks go in pairs: each waits for a partner, so two must run at once.
    pair = threading.Barrier(2, timeout=5)

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            return UNKNOW

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            nonlocal running, most
            with lock:
                running += 1
                most = max(most, running)
                names.append(threading.current_thread().name)
            try:
                pair.wait()
            finally:
                with lock:
                    running -= 1
            return COMMIT

    broker = broker_of(fakes)
    with TransactionProducer(GROUP, fakes.cluster.namesrv_addr, Listener(),
                             check_workers=2) as producer:
        result = producer.send_message_in_transaction(Message(TOPIC, b"a"))
        wait_until_sync(lambda: len(broker.ends) == 1, 5, "1 END_TRANSACTION at the broker")
        mq = result.message_queue
        record = fakes.call(broker.record, mq.topic, mq.queue_id, result.queue_offset)
        for i in range(6):
            fakes.call(broker.push_check, check_fields(result, tran_offset=i), record)
        wait_until_sync(lambda: len(broker.ends) == 7, 5, "7 END_TRANSACTION at the broker")
    answers = broker.ends[1:]
    assert sorted(e.ext_fields["tranStateTableOffset"] for e in answers) == list(range(6))
    assert {e.ext_fields["commitOrRollback"] for e in answers} == {8}  # no barrier broke
    assert {e.ext_fields["fromTransactionCheck"] for e in answers} == {True}
    assert most == 2
    assert names == [CHECK_THREAD_NAME] * 6
    assert THREAD_NAME not in names and threading.current_thread().name not in names
