"""TransactionProducer (trio) against a fake name server and fake brokers that
record END_TRANSACTION and HEART_BEAT and push CHECK_TRANSACTION_STATE."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from client import (
    LocalTransactionState,
    Message,
    MessageExt,
    MQBrokerError,
    MQClientError,
    Producer,
    SendStatus,
    TransactionProducer,
    TransactionSendResult,
)
from client.config import ClientConfig
from protocol.body import unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import CheckTransactionStateRequestHeader, SendMessageRequestHeader
from protocol.message import MessageConst, string_to_properties
from protocol.record import TRANSACTION_PREPARED_TYPE, decode_msg_id
from protocol.trio import RemotingConnection
from tests.client.fakes import FakeBroker, FakeCluster
from tests.waits import wait_until

TOPIC = FakeCluster.TOPIC
GROUP = "tx_producer_group"
COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
# A request code no client serves: its REQUEST_CODE_NOT_SUPPORTED answer comes
# after every frame the broker sent before it was handled.
BARRIER_CODE = 9999


class TxBroker(FakeBroker):
    """A FakeBroker that also answers HEART_BEAT, records END_TRANSACTION and the
    client connection it last heard from, and pushes checks to it. Waits work
    from the broker's own trio loop and from other threads (tests.waits)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.ends: list[RemotingCommand] = []
        self.heartbeats: list[dict[str, Any]] = []
        self.client_conn: RemotingConnection | None = None
        h = self.handlers
        h.register(RequestCode.SEND_MESSAGE, self._tx_send)
        h.register(RequestCode.HEART_BEAT, self._heartbeat)
        h.register(RequestCode.END_TRANSACTION, self._end)
        h.register(RequestCode.UNREGISTER_CLIENT, self._unregister)

    def _tx_send(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        self.client_conn = conn
        return self._send(conn, cmd)

    def _heartbeat(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        self.client_conn = conn
        self.heartbeats.append(unpack_body(cmd.body))
        return cmd.response(ResponseCode.SUCCESS)

    def _unregister(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS)

    def _end(self, conn: RemotingConnection, cmd: RemotingCommand) -> None:
        assert cmd.is_oneway
        self.ends.append(cmd)

    def knows_group(self, group: str) -> bool:
        return any(
            group in [p["groupName"] for p in hb["producerDataSet"]] for hb in self.heartbeats
        )

    def record(self, topic: str, queue_id: int, queue_offset: int) -> bytes:
        """The stored record (as a check's body carries it)."""
        lo = self.min_offsets.get((topic, queue_id), 0)
        return self.queues[(topic, queue_id)][queue_offset - lo][0]

    def push_check(self, fields: dict[str, Any], body: bytes | None) -> None:
        """CHECK_TRANSACTION_STATE (oneway) to the client's connection."""
        assert self.client_conn is not None
        self.client_conn.send_response(
            RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, fields, body,
                                    oneway=True))

    async def barrier(self) -> None:
        """Returns once the client has handled every frame sent to it before."""
        assert self.client_conn is not None
        response = await self.client_conn.invoke(RemotingCommand.request(BARRIER_CODE), 5)
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def tx_cluster(brokers: int = 2) -> FakeCluster:
    c = FakeCluster(brokers=0)
    c.brokers = [TxBroker(f"broker-{chr(ord('a') + i)}") for i in range(brokers)]
    return c


def tx_broker(cluster: FakeCluster, name: str) -> TxBroker:
    broker = cluster.broker(name)
    assert isinstance(broker, TxBroker)
    return broker


@pytest.fixture
async def cluster(nursery: trio.Nursery) -> FakeCluster:
    """Two TxBrokers; every queue of TopicTest already holds one message, so
    queue and commit-log offsets of a send are not zero."""
    c = tx_cluster()
    await c.start(nursery)
    for b in c.brokers:
        for q in range(4):
            b.put(TOPIC, q, b"earlier")
    return c


class Listener:
    """Returns (or raises) ``execute`` / ``check``; records its calls."""

    def __init__(self, execute: Any = COMMIT, check: Any = COMMIT) -> None:
        self.execute = execute
        self.check = check
        self.executed: list[tuple[Message, Any]] = []
        self.checked: list[MessageExt] = []

    def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
        self.executed.append((msg, arg))
        if isinstance(self.execute, Exception):
            raise self.execute
        return self.execute

    def check_local_transaction(self, msg: MessageExt) -> Any:
        self.checked.append(msg)
        if isinstance(self.check, Exception):
            raise self.check
        return self.check


def make_producer(cluster: FakeCluster, listener: Any, **options: Any) -> TransactionProducer:
    return TransactionProducer(GROUP, cluster.namesrv_addr, listener, **options)


def check_fields(result: TransactionSendResult, tran_offset: int = 77,
                 commit_log_offset: int = 12345) -> dict[str, Any]:
    """A check header naming the half message of ``result``; its offsets differ
    from the message's so answers show where they came from."""
    return CheckTransactionStateRequestHeader(
        tran_state_table_offset=tran_offset,
        commit_log_offset=commit_log_offset,
        msg_id=result.offset_msg_id,
        transaction_id=result.msg_id,
        offset_msg_id=result.offset_msg_id,
    ).to_fields()


def half_record(broker: TxBroker, result: TransactionSendResult) -> bytes:
    mq = result.message_queue
    return broker.record(mq.topic, mq.queue_id, result.queue_offset)


# ---- send_message_in_transaction --------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "state", "end_type", "remark"),
    [
        (COMMIT, COMMIT, 8, None),
        (ROLLBACK, ROLLBACK, 12, None),
        (UNKNOW, UNKNOW, 0, None),
        (RuntimeError("boom"), UNKNOW, 0,
         "executeLocalTransactionBranch exception: RuntimeError: boom"),
        (None, UNKNOW, 0, None),
        ("COMMIT_MESSAGE", UNKNOW, 0, None),
    ],
    ids=["commit", "rollback", "unknow", "raises", "none", "not-a-state"],
)
async def test_local_transaction_state_goes_to_the_broker(
    cluster: FakeCluster, outcome: Any, state: LocalTransactionState, end_type: int,
    remark: str | None,
) -> None:
    listener = Listener(execute=outcome)
    msg = Message(TOPIC, b"order-1", tags="TagA")
    async with make_producer(cluster, listener) as producer:
        result = await producer.send_message_in_transaction(msg, arg={"order": 1})
        broker = tx_broker(cluster, result.message_queue.broker_name)
        await wait_until(lambda: len(broker.ends) == 1, 5, "1 END_TRANSACTION at broker")
    assert isinstance(result, TransactionSendResult)
    assert result.send_status is SendStatus.SEND_OK
    assert result.local_transaction_state is state
    assert result.transaction_id == result.msg_id == msg.properties["UNIQ_KEY"]
    assert listener.executed == [(msg, {"order": 1})]
    # The half message: sysFlag 0x4, TRAN_MSG and PGROUP.
    (send,) = broker.requests_of(RequestCode.SEND_MESSAGE)
    h = SendMessageRequestHeader.from_fields(send.ext_fields)
    assert h.sys_flag & TRANSACTION_PREPARED_TYPE
    props = string_to_properties(h.properties)
    assert props[MessageConst.PROPERTY_TRANSACTION_PREPARED] == "true"
    assert props[MessageConst.PROPERTY_PRODUCER_GROUP] == GROUP
    assert h.producer_group == GROUP
    # The end: offsets of the half message, the state's type, not from a check.
    (end,) = broker.ends
    assert result.queue_offset == 1
    assert result.offset_msg_id is not None
    _, commit_log_offset = decode_msg_id(result.offset_msg_id)
    assert commit_log_offset > 0
    assert end.ext_fields == {
        "producerGroup": GROUP,
        "tranStateTableOffset": result.queue_offset,
        "commitLogOffset": commit_log_offset,
        "commitOrRollback": end_type,
        "fromTransactionCheck": False,
        "msgId": result.msg_id,
        "transactionId": result.msg_id,
    }
    assert end.remark == remark
    other = next(b for b in cluster.brokers if b is not broker)
    assert isinstance(other, TxBroker) and other.ends == []


async def test_broker_learns_the_producer_after_the_first_half_message(
    cluster: FakeCluster,
) -> None:
    # The periodic heartbeat is 30 s away: only the prompt one can arrive in time.
    async with make_producer(cluster, Listener()) as producer:
        result = await producer.send_message_in_transaction(Message(TOPIC, b"x"))
        broker = tx_broker(cluster, result.message_queue.broker_name)
        await wait_until(lambda: broker.knows_group(GROUP), 5, "the broker knows the group")


async def test_delayed_message_or_batch_is_refused(cluster: FakeCluster) -> None:
    listener = Listener()
    async with make_producer(cluster, listener) as producer:
        msg = Message(TOPIC, b"x")
        msg.delay_time_level = 3
        with pytest.raises(MQClientError, match="a delayed message cannot be transactional"):
            await producer.send_message_in_transaction(msg)
        with pytest.raises(MQClientError, match="batches cannot be transactional"):
            await producer.send_message_in_transaction([Message(TOPIC, b"x")])  # type: ignore[arg-type]
    assert listener.executed == []
    assert all(b.requests_of(RequestCode.SEND_MESSAGE) == [] for b in cluster.brokers)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ResponseCode.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_DISK_TIMEOUT),
        (ResponseCode.FLUSH_SLAVE_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT),
        (ResponseCode.SLAVE_NOT_AVAILABLE, SendStatus.SLAVE_NOT_AVAILABLE),
    ],
)
async def test_send_not_ok_rolls_back_without_local_transaction(
    cluster: FakeCluster, code: ResponseCode, status: SendStatus
) -> None:
    for b in cluster.brokers:
        b.send_code = code
    listener = Listener()
    async with make_producer(cluster, listener) as producer:
        result = await producer.send_message_in_transaction(Message(TOPIC, b"x"), "arg")
        broker = tx_broker(cluster, result.message_queue.broker_name)
        await wait_until(lambda: len(broker.ends) == 1, 5, "1 END_TRANSACTION at broker")
    assert result.send_status is status
    assert result.local_transaction_state is ROLLBACK
    assert listener.executed == []
    assert broker.ends[0].ext_fields["commitOrRollback"] == 12
    assert broker.ends[0].ext_fields["fromTransactionCheck"] is False


async def test_refused_half_message_raises_and_ends_nothing(cluster: FakeCluster) -> None:
    for b in cluster.brokers:
        b.send_code = ResponseCode.MESSAGE_ILLEGAL
    listener = Listener()
    async with make_producer(cluster, listener) as producer:
        with pytest.raises(MQBrokerError) as info:
            await producer.send_message_in_transaction(Message(TOPIC, b"x"))
        assert info.value.response_code == ResponseCode.MESSAGE_ILLEGAL
        sent_to = [b for b in cluster.brokers if b.requests_of(RequestCode.SEND_MESSAGE)]
        assert len(sent_to) == 1
        broker = sent_to[0]
        assert isinstance(broker, TxBroker)
        await broker.barrier()
    assert listener.executed == []
    assert broker.ends == []


async def test_async_listener_methods(cluster: FakeCluster) -> None:
    calls: list[str] = []

    class AsyncListener:
        async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            await trio.lowlevel.checkpoint()
            calls.append(f"execute {arg}")
            return UNKNOW

        async def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            await trio.lowlevel.checkpoint()
            calls.append(f"check {msg.body.decode()}")
            return ROLLBACK

    async with make_producer(cluster, AsyncListener()) as producer:
        result = await producer.send_message_in_transaction(Message(TOPIC, b"m"), 7)
        broker = tx_broker(cluster, result.message_queue.broker_name)
        broker.push_check(check_fields(result), half_record(broker, result))
        await wait_until(lambda: len(broker.ends) == 2, 5, "2 END_TRANSACTION at broker")
    assert calls == ["execute 7", "check m"]
    assert [e.ext_fields["commitOrRollback"] for e in broker.ends] == [0, 12]
    assert [e.ext_fields["fromTransactionCheck"] for e in broker.ends] == [False, True]


# ---- checks from brokers ----------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "end_type", "remark"),
    [
        (COMMIT, 8, None),
        (ROLLBACK, 12, None),
        (UNKNOW, 0, None),
        (ValueError("db down"), 0, "checkLocalTransactionState Exception: ValueError: db down"),
        (42, 0, None),
    ],
    ids=["commit", "rollback", "unknow", "raises", "not-a-state"],
)
async def test_check_is_answered_on_the_broker_that_asked(
    cluster: FakeCluster, outcome: Any, end_type: int, remark: str | None
) -> None:
    listener = Listener(execute=UNKNOW, check=outcome)
    async with make_producer(cluster, listener) as producer:
        result = await producer.send_message_in_transaction(Message(TOPIC, b"pay", tags="T"))
        broker = tx_broker(cluster, result.message_queue.broker_name)
        broker.push_check(check_fields(result, 77, 12345), half_record(broker, result))
        await wait_until(lambda: len(broker.ends) == 2, 5, "2 END_TRANSACTION at broker")
    (checked,) = listener.checked
    assert isinstance(checked, MessageExt)
    assert (checked.topic, checked.body, checked.tags) == (TOPIC, b"pay", "T")
    assert checked.queue_id == result.message_queue.queue_id
    assert checked.uniq_key == result.msg_id
    assert checked.properties[MessageConst.PROPERTY_PRODUCER_GROUP] == GROUP
    answer = broker.ends[1]
    assert answer.ext_fields == {
        "producerGroup": GROUP,
        "tranStateTableOffset": 77,
        "commitLogOffset": 12345,
        "commitOrRollback": end_type,
        "fromTransactionCheck": True,
        "msgId": result.msg_id,
        "transactionId": result.msg_id,
    }
    assert answer.remark == remark
    other = next(b for b in cluster.brokers if b is not broker)
    assert isinstance(other, TxBroker) and other.ends == []


async def test_checks_for_other_groups_and_malformed_checks_are_dropped(
    cluster: FakeCluster,
) -> None:
    listener = Listener(execute=UNKNOW)
    async with make_producer(cluster, listener) as producer:
        result = await producer.send_message_in_transaction(Message(TOPIC, b"x"))
        broker = tx_broker(cluster, result.message_queue.broker_name)
        mq = result.message_queue
        good = check_fields(result)
        other_group = broker.put(TOPIC, mq.queue_id, b"y",
                                 properties={MessageConst.PROPERTY_PRODUCER_GROUP: "other_group"})
        no_group = broker.put(TOPIC, mq.queue_id, b"z")
        bad: list[tuple[dict[str, Any], bytes | None]] = [
            (good, broker.record(TOPIC, mq.queue_id, other_group[1])),  # no producer for it
            (good, broker.record(TOPIC, mq.queue_id, no_group[1])),  # no PGROUP at all
            ({k: v for k, v in good.items() if k != "commitLogOffset"},
             half_record(broker, result)),  # header field missing
            ({**good, "tranStateTableOffset": "one"}, half_record(broker, result)),  # bad type
            (good, None),  # no body
            (good, b"\x00\x00\x00\x10garbage-garbage"),  # not a record
            (good, half_record(broker, result)[:-3]),  # cut short
        ]
        for fields, body in bad:
            broker.push_check(fields, body)
        await broker.barrier()  # the connection is still open and every check was handled
        assert listener.checked == []
        assert len(broker.ends) == 1  # the send's own END only
        broker.push_check(good, half_record(broker, result))  # a good check still works
        await wait_until(lambda: len(broker.ends) == 2, 5, "2 END_TRANSACTION at broker")
    assert [m.uniq_key for m in listener.checked] == [result.msg_id]
    assert producer.checks_dropped == 0  # dropped by the client instance, not queued


async def test_checks_beyond_the_backlog_are_dropped(cluster: FakeCluster) -> None:
    entered = trio.Event()
    release = trio.Event()
    seen: list[str] = []

    class SlowListener(Listener):
        async def check_local_transaction(self, msg: MessageExt) -> Any:  # type: ignore[override]
            seen.append(msg.uniq_key or "")
            entered.set()
            await release.wait()
            return COMMIT

    async with make_producer(cluster, SlowListener(execute=UNKNOW), check_workers=1,
                             check_backlog=2) as producer:
        result = await producer.send_message_in_transaction(Message(TOPIC, b"x"))
        broker = tx_broker(cluster, result.message_queue.broker_name)
        record = half_record(broker, result)
        broker.push_check(check_fields(result, tran_offset=0), record)
        await entered.wait()  # the only worker is busy
        for i in range(1, 6):
            broker.push_check(check_fields(result, tran_offset=i), record)
        await broker.barrier()
        assert producer.checks_dropped == 3  # 1 running, 2 queued, 3 dropped
        release.set()
        await wait_until(lambda: len(broker.ends) == 4, 5, "4 END_TRANSACTION at broker")
    answers = [e.ext_fields["tranStateTableOffset"] for e in broker.ends[1:]]
    assert answers == [0, 1, 2]
    assert len(seen) == 3
    assert producer.checks_dropped == 3


async def test_shutdown_drops_queued_checks_and_lets_the_running_one_finish(
    cluster: FakeCluster,
) -> None:
    entered = trio.Event()
    release = trio.Event()
    checked: list[int] = []

    class SlowListener(Listener):
        async def check_local_transaction(self, msg: MessageExt) -> Any:  # type: ignore[override]
            entered.set()
            await release.wait()
            checked.append(1)
            return COMMIT

    producer = make_producer(cluster, SlowListener(execute=UNKNOW), check_workers=1,
                             check_backlog=5)
    await producer.start()
    result = await producer.send_message_in_transaction(Message(TOPIC, b"x"))
    broker = tx_broker(cluster, result.message_queue.broker_name)
    record = half_record(broker, result)
    broker.push_check(check_fields(result, tran_offset=10), record)
    await entered.wait()
    broker.push_check(check_fields(result, tran_offset=11), record)
    await broker.barrier()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer.shutdown)
        await trio.testing.wait_all_tasks_blocked()
        assert producer.checks_dropped == 1  # the queued one
        release.set()
    assert checked == [1]
    await wait_until(lambda: len(broker.ends) == 2, 5, "2 END_TRANSACTION at broker")
    assert broker.ends[1].ext_fields["tranStateTableOffset"] == 10


async def test_shutdown_cancels_a_check_that_does_not_finish(cluster: FakeCluster) -> None:
    cancelled = trio.Event()
    entered = trio.Event()

    class StuckListener(Listener):
        async def check_local_transaction(self, msg: MessageExt) -> Any:  # type: ignore[override]
            entered.set()
            try:
                await trio.sleep_forever()
            finally:
                cancelled.set()

    producer = make_producer(cluster, StuckListener(execute=UNKNOW), send_msg_timeout=0.2)
    await producer.start()
    result = await producer.send_message_in_transaction(Message(TOPIC, b"x"))
    broker = tx_broker(cluster, result.message_queue.broker_name)
    broker.push_check(check_fields(result), half_record(broker, result))
    await entered.wait()
    with trio.fail_after(5):
        await producer.shutdown()
    assert cancelled.is_set()


# ---- registration with brokers ------------------------------------------------------


async def test_check_only_producer_is_registered_and_answers(cluster: FakeCluster) -> None:
    # A second process of the group: it sends nothing, only answers checks for
    # half messages its dead predecessor left.
    a = tx_broker(cluster, "broker-a")
    msg_id, queue_offset = a.put(
        TOPIC, 2, b"left over",
        properties={MessageConst.PROPERTY_PRODUCER_GROUP: GROUP,
                    MessageConst.PROPERTY_TRANSACTION_PREPARED: "true",
                    "UNIQ_KEY": "C0A8000100002A9F0000000000000001"})
    listener = Listener(check=ROLLBACK)
    async with make_producer(cluster, listener) as producer:
        assert all(isinstance(b, TxBroker) and b.heartbeats == [] for b in cluster.brokers)
        await producer.fetch_publish_message_queues(TOPIC)
        # The periodic heartbeat is 30 s away: only the prompt one can arrive in time.
        for b in cluster.brokers:
            assert isinstance(b, TxBroker)
            await wait_until(partial(b.knows_group, GROUP), 5, f"{b.name} knows the group")
        fields = CheckTransactionStateRequestHeader(
            tran_state_table_offset=queue_offset, commit_log_offset=decode_msg_id(msg_id)[1],
            msg_id=msg_id, transaction_id="C0A8000100002A9F0000000000000001",
            offset_msg_id=msg_id).to_fields()
        a.push_check(fields, a.record(TOPIC, 2, queue_offset))
        await wait_until(lambda: len(a.ends) == 1, 5, "1 END_TRANSACTION at a")
    assert a.ends[0].ext_fields == {
        "producerGroup": GROUP,
        "tranStateTableOffset": queue_offset,
        "commitLogOffset": decode_msg_id(msg_id)[1],
        "commitOrRollback": 12,
        "fromTransactionCheck": True,
        "msgId": "C0A8000100002A9F0000000000000001",
        "transactionId": "C0A8000100002A9F0000000000000001",
    }
    assert [m.body for m in listener.checked] == [b"left over"]


async def test_brokers_known_before_the_producer_started_get_a_heartbeat(
    cluster: FakeCluster,
) -> None:
    async with Producer("plain_group", cluster.namesrv_addr) as plain:
        await plain.send(Message(TOPIC, b"plain"))  # the shared instance learns the brokers
        for b in cluster.brokers:  # and heartbeats them at once, for its producer
            assert isinstance(b, TxBroker)
            await wait_until(partial(len, b.heartbeats), 5, f"a heartbeat at {b.name}")
        async with make_producer(cluster, Listener()):
            for b in cluster.brokers:
                assert isinstance(b, TxBroker)
                await wait_until(partial(b.knows_group, GROUP), 5, f"{b.name} knows the group")
    broker = next(b for b in cluster.brokers if isinstance(b, TxBroker))
    # the plain producer's own heartbeat came first, when the instance met the broker
    first, *later = [{p["groupName"] for p in hb["producerDataSet"]} for hb in broker.heartbeats]
    assert first == {"plain_group"}
    assert {"plain_group", GROUP} in later


async def test_one_transaction_producer_per_group_and_instance(cluster: FakeCluster) -> None:
    listener = Listener(execute=UNKNOW, check=COMMIT)
    async with make_producer(cluster, listener) as producer:
        second = make_producer(cluster, Listener())
        with pytest.raises(MQClientError, match="already has a transaction producer"):
            await second.start()
        # The first one still answers checks and is still heartbeated.
        result = await producer.send_message_in_transaction(Message(TOPIC, b"x"))
        broker = tx_broker(cluster, result.message_queue.broker_name)
        broker.push_check(check_fields(result), half_record(broker, result))
        await wait_until(lambda: len(broker.ends) == 2, 5, "2 END_TRANSACTION at broker")
        await wait_until(lambda: broker.knows_group(GROUP), 5, "the broker knows the group")
        assert producer._instance is not None
        assert {"groupName": GROUP} in producer._instance.heartbeat_data()["producerDataSet"]


def test_bad_settings() -> None:
    class ExecuteOnly:
        def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
            return COMMIT

    with pytest.raises(MQClientError, match="no callable check_local_transaction"):
        TransactionProducer(GROUP, "127.0.0.1:9876", ExecuteOnly())  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="no callable execute_local_transaction"):
        TransactionProducer(GROUP, "127.0.0.1:9876", object())  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="check_workers"):
        TransactionProducer(GROUP, "127.0.0.1:9876", Listener(), check_workers=0)
    with pytest.raises(MQClientError, match="check_backlog"):
        TransactionProducer(GROUP, "127.0.0.1:9876", Listener(), check_backlog=-1)


async def test_namespace_half_message_and_check(cluster: FakeCluster) -> None:
    """ClientConfig.namespace: the half message goes to ``app1%TopicTest`` under group
    ``app1%<group>``; the result and the check's message name the topic without it."""
    cluster.namesrv.set_route("app1%" + TOPIC, cluster.brokers)
    listener = Listener(execute=UNKNOW, check=COMMIT)
    config = ClientConfig(namesrv_addr=cluster.namesrv_addr, namespace="app1")
    async with TransactionProducer(GROUP, None, listener, config=config) as producer:
        result = await producer.send_message_in_transaction(Message(TOPIC, b"pay"))
        assert result.message_queue.topic == TOPIC
        broker = tx_broker(cluster, result.message_queue.broker_name)
        (half,) = [c for c in broker.requests_of(RequestCode.SEND_MESSAGE)
                   if c.ext_fields["topic"] == "app1%" + TOPIC]
        assert half.ext_fields["producerGroup"] == "app1%" + GROUP
        mq = result.message_queue
        record = broker.record("app1%" + TOPIC, mq.queue_id, result.queue_offset)
        broker.push_check(check_fields(result), record)
        await wait_until(lambda: len(broker.ends) == 2, 5, "2 END_TRANSACTION at broker")
    (checked,) = listener.checked
    assert checked.topic == TOPIC
    assert broker.ends[1].ext_fields["producerGroup"] == "app1%" + GROUP
