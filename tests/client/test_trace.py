"""client.trace and client.hooks: the batching core (pure), the dispatcher on a
MockClock with a fake producer, the trace hooks, and a producer with trace on
against the fake cluster."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from client import Message, MessageExt, MQBrokerError, MQClientError, Producer, SendResult
from client.blocking import Producer as BlockingProducer
from client.consumer_types import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus
from client.hooks import ConsumeMessageContext, SendMessageContext, send_hooks
from client.send_result import SendStatus, region_and_trace_switch
from client.trace import (
    AsyncTraceDispatcher,
    ConsumeMessageTraceHook,
    SendMessageTraceHook,
    TraceBatcher,
    TraceItem,
    check_trace_topic,
    item_records,
    trace_group,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.headers import SendMessageRequestHeader
from protocol.message import MessageQueue, string_to_properties
from protocol.names import RMQ_SYS_TRACE_TOPIC
from protocol.trace_data import (
    ConsumeReturnType,
    MessageType,
    TraceBean,
    TraceContext,
    TraceRecord,
    TraceType,
    decode,
)
from tests.client.fakes import FakeCluster, ThreadedCluster

TOPIC = FakeCluster.TOPIC


def record(msg_id: str, keys: str = "", size: int = 10) -> TraceRecord:
    return TraceRecord("x" * size, msg_id, keys)


def pub_ctx(msg_id: str, keys: str = "") -> TraceContext:
    return TraceContext(TraceType.Pub, timestamp=1, group_name="pg",
                        beans=[TraceBean(topic=TOPIC, msg_id=msg_id, keys=keys)])


# ---- TraceBatcher: pure ------------------------------------------------------------


def test_batch_due_after_its_first_record_waited() -> None:
    b = TraceBatcher(wait=0.5)
    assert b.due_at() is None and b.due(100.0) is None and b.drain() is None
    assert b.add(record("A"), 10.0) == []
    assert b.add(record("B", "k1 k2"), 10.3) == []
    assert b.due_at() == 10.5 and b.due(10.49) is None
    batch = b.due(10.5)
    assert batch is not None and batch.records == 2
    assert batch.data == b"x" * 20 and batch.keys == ["A", "B", "k1 k2"]
    assert b.pending == 0 and b.due_at() is None


def test_batch_cut_at_its_size() -> None:
    b = TraceBatcher(batch_bytes=25, wait=0.5)
    assert b.add(record("A"), 0.0) == [] and b.add(record("B"), 0.0) == []
    (batch,) = b.add(record("C"), 0.0)  # 30 bytes >= 25
    assert (batch.records, batch.keys) == (3, ["A", "B", "C"])
    assert b.pending == 0


def test_keys_within_their_budget_msg_ids_always() -> None:
    b = TraceBatcher(max_keys_bytes=40)
    b.add(record("A" * 10, keys="k" * 30), 0.0)  # 11 + 31 = 42 > 40: the keys stay out
    b.add(record("B" * 10, keys="k2"), 0.0)
    out = b.add(record("C" * 10), 0.0)  # 25 + 11 = 36
    assert out == []
    out = b.add(record("D" * 10), 0.0)  # 47 > 40: the batch is cut before D
    assert [x.keys for x in out] == [["A" * 10, "B" * 10, "k2", "C" * 10]]
    rest = b.drain()
    assert rest is not None and rest.keys == ["D" * 10] and rest.records == 1


def test_a_key_counted_once() -> None:
    b = TraceBatcher(max_keys_bytes=12)
    for _ in range(5):  # the same msgId in SubBefore and SubAfter: one key
        assert b.add(record("A" * 10), 0.0) == []
    batch = b.drain()
    assert batch is not None and batch.keys == ["A" * 10] and batch.records == 5


# ---- the dispatcher -------------------------------------------------------------------


class FakeTraceProducer:
    def __init__(self, fail: Exception | None = None, hang: bool = False) -> None:
        self.fail = fail
        self.hang = hang
        self.sent: list[Message] = []
        self.started = self.stopped = False

    async def start(self) -> None:
        self.started = True

    async def shutdown(self) -> None:
        self.stopped = True

    async def send(self, msg: Message, timeout: float | None = None) -> None:
        await trio.lowlevel.checkpoint()
        if self.hang:
            await trio.sleep_forever()
        if self.fail is not None:
            raise self.fail
        self.sent.append(msg)


def dispatcher(producer: FakeTraceProducer, **kw: Any) -> AsyncTraceDispatcher:
    return AsyncTraceDispatcher("pg", "PRODUCE", "127.0.0.1:1", producer=producer, **kw)


def test_full_queue_drops_and_counts() -> None:
    """No clock, no task: the bound is the channel's."""
    d = dispatcher(FakeTraceProducer(), queue_size=2)
    assert d.append(pub_ctx("A")) and d.append(pub_ctx("B"))
    assert not d.append(pub_ctx("C"))
    multi = TraceContext(TraceType.SubBefore, beans=[TraceBean(msg_id="D"), TraceBean(msg_id="E")])
    assert not d.append(multi)
    assert (d.appended, d.dropped) == (5, 3)


async def test_batches_sent_when_due_and_flushed_at_shutdown(
        autojump_clock: trio.testing.MockClock) -> None:
    producer = FakeTraceProducer()
    d = dispatcher(producer, batch_wait=0.5)
    await d.start()
    assert producer.started
    for i in range(3):
        d.append(pub_ctx(f"ID{i}", keys=f"key{i}"))
    await trio.sleep(0.4)
    assert producer.sent == []
    await trio.sleep(0.2)
    (msg,) = producer.sent
    assert msg.topic == RMQ_SYS_TRACE_TOPIC
    assert msg.keys == "ID0 key0 ID1 key1 ID2 key2"
    assert [c.beans[0].msg_id for c in decode(msg.body.decode())] == ["ID0", "ID1", "ID2"]
    d.append(pub_ctx("LAST"))
    await d.shutdown()  # before the batch is due: sent anyway
    assert [m.keys for m in producer.sent][1:] == ["LAST"]
    assert d.stats() == {"appended": 4, "dropped": 0, "sent": 4, "failed": 0,
                         "batchesSent": 2, "batchesFailed": 0}
    assert producer.stopped
    assert not d.append(pub_ctx("AFTER")) and d.dropped == 1


async def test_failed_trace_sends_are_counted_not_raised(
        autojump_clock: trio.testing.MockClock) -> None:
    producer = FakeTraceProducer(fail=MQBrokerError(ResponseCode.TOPIC_NOT_EXIST, "no topic",
                                                    "127.0.0.1:1"))
    d = dispatcher(producer)
    await d.start()
    d.append(pub_ctx("A"))
    d.append(pub_ctx("B"))
    await trio.sleep(1.0)
    assert (d.failed, d.batches_failed, d.sent) == (2, 1, 0)
    producer.fail = RuntimeError("a bug in the producer")
    d.append(pub_ctx("C"))
    await d.shutdown()
    assert (d.failed, d.batches_failed, d.dropped) == (3, 2, 0)


async def test_shutdown_bounded_when_trace_sends_hang(
        autojump_clock: trio.testing.MockClock) -> None:
    producer = FakeTraceProducer(hang=True)
    d = dispatcher(producer, flush_timeout=2.0, senders=1)
    await d.start()
    for i in range(4):
        d.append(pub_ctx(f"ID{i}"))
    await trio.sleep(1.0)  # the batch went to the sender, which hangs
    d.append(pub_ctx("ID9"))
    start = trio.current_time()
    await d.shutdown()
    assert trio.current_time() - start == pytest.approx(2.0)
    assert (d.sent, d.failed, d.dropped) == (0, 0, 5)


async def test_backlog_full_drops_batches(autojump_clock: trio.testing.MockClock) -> None:
    producer = FakeTraceProducer(hang=True)
    d = dispatcher(producer, senders=1, batch_backlog=1, batch_bytes=1, flush_timeout=1.0)
    await d.start()
    for i in range(4):  # each record is a batch: one sending, one queued, two dropped
        d.append(pub_ctx(f"ID{i}"))
    await trio.testing.wait_all_tasks_blocked()
    assert d.dropped == 2
    await d.shutdown()
    assert d.dropped == 4


def test_names() -> None:
    assert check_trace_topic(None) is None and check_trace_topic("  ") is None
    assert check_trace_topic(" MyTrace ") == "MyTrace"
    with pytest.raises(MQClientError, match="customized_trace_topic"):
        check_trace_topic("bad topic")
    assert trace_group("g", "PRODUCE").startswith("_INNER_TRACE_PRODUCER-g-PRODUCE-")
    long = trace_group("g" * 255, "CONSUME")
    assert long.startswith("_INNER_TRACE_PRODUCER-CONSUME-") and len(long) <= 255


def test_send_response_region_and_switch() -> None:
    assert region_and_trace_switch({}) == ("DefaultRegion", True)
    assert region_and_trace_switch({"MSG_REGION": "R1", "TRACE_ON": "false"}) == ("R1", False)
    assert region_and_trace_switch({"MSG_REGION": "", "TRACE_ON": "true"}) == (
        "DefaultRegion", True)


# ---- the hooks ------------------------------------------------------------------------


class Appended:
    """What a hook appends to its dispatcher."""

    trace_topic = RMQ_SYS_TRACE_TOPIC

    def __init__(self) -> None:
        self.contexts: list[TraceItem] = []

    def append(self, item: TraceItem) -> bool:
        self.contexts.append(item)
        return True

    def decoded(self) -> list[TraceContext]:
        """The records appended, as a query reads them back."""
        return decode("".join(r.data for item in self.contexts for r in item_records(item)))


def send_ctx(msgs: list[Message], result: SendResult | None, topic: str = TOPIC) -> SendMessageContext:
    for i, m in enumerate(msgs):
        m.properties["UNIQ_KEY"] = f"U{i}"
    return SendMessageContext("pg", msgs, MessageQueue(topic, "broker-a", 1), "127.0.0.1:10911",
                              len(msgs) > 1, born_ms=1000, started=trio.current_time() - 0.02)


def result(status: SendStatus = SendStatus.SEND_OK, trace_on: bool = True,
           offset_ids: str = "O0") -> SendResult:
    return SendResult(status, "U0", MessageQueue(TOPIC, "broker-a", 1), 5, offset_ids,
                      region_id="R", trace_on=trace_on)


async def test_send_hook_one_pub_per_message() -> None:
    sink = Appended()
    hook = SendMessageTraceHook(sink)  # type: ignore[arg-type]
    msgs = [Message(TOPIC, b"abc", tags="T", keys="k1"), Message(TOPIC, b"defgh")]
    ctx = send_ctx(msgs, None)
    hook.send_message_before(ctx)
    ctx.send_result = result(SendStatus.FLUSH_DISK_TIMEOUT, offset_ids="O0,O1")
    hook.send_message_after(ctx)
    (item,) = sink.contexts  # one item for the send: encoded by the dispatcher's task
    a, b = sink.decoded()
    assert (a.trace_type, a.group_name, a.region_id, a.success, a.timestamp) == (
        TraceType.Pub, "pg", "R", False, 1000)
    assert a.cost_time == 20
    assert [(c.beans[0].msg_id, c.beans[0].offset_msg_id, c.beans[0].body_length,
             c.beans[0].tags, c.beans[0].keys, c.beans[0].store_host) for c in (a, b)] == [
        ("U0", "O0", 3, "T", "k1", "127.0.0.1:10911"), ("U1", "O1", 5, "", "", "127.0.0.1:10911")]


async def test_send_hook_records_nothing_it_should_not() -> None:
    sink = Appended()
    hook = SendMessageTraceHook(sink)  # type: ignore[arg-type]
    failed = send_ctx([Message(TOPIC, b"x")], None)
    failed.exception = MQClientError("timeout")
    hook.send_message_after(failed)  # no result: a failed attempt
    off = send_ctx([Message(TOPIC, b"x")], None)
    off.send_result = result(trace_on=False)  # the broker says traceOn=false
    hook.send_message_after(off)
    own = send_ctx([Message(RMQ_SYS_TRACE_TOPIC, b"x")], None, topic=RMQ_SYS_TRACE_TOPIC)
    own.send_result = result()
    hook.send_message_after(own)  # trace data itself
    assert sink.contexts == []
    delayed = Message(TOPIC, b"x")
    delayed.delay_time_level = 3
    ctx = send_ctx([delayed], None)
    ctx.send_result = result()
    hook.send_message_after(ctx)
    assert sink.decoded()[0].beans[0].msg_type is MessageType.Delay_Msg


def ext(msg_id: str, topic: str = TOPIC, **props: str) -> MessageExt:
    return MessageExt(topic, b"body", {"UNIQ_KEY": msg_id, **props}, store_size=120,
                      reconsume_times=1, store_timestamp=5, msg_id="OFFSETID")


async def test_consume_hook_before_and_after(autojump_clock: trio.testing.MockClock) -> None:
    sink = Appended()
    hook = ConsumeMessageTraceHook(sink)  # type: ignore[arg-type]
    msgs = [ext("A", KEYS="k"), ext("B", TRACE_ON="false"), ext("C", topic=RMQ_SYS_TRACE_TOPIC),
            ext("D", MSG_REGION="R9")]
    ctx = ConsumeMessageContext("cg", MessageQueue(TOPIC, "broker-a", 0), msgs)
    hook.consume_message_before(ctx)
    await trio.sleep(0.4)
    ctx.finish(ConsumeConcurrentlyStatus.RECONSUME_LATER, raised=False)
    hook.consume_message_after(ctx)
    before, after = sink.contexts
    assert isinstance(before, TraceContext) and isinstance(after, TraceContext)
    assert [b.msg_id for b in before.beans] == ["A", "D"]
    assert (before.trace_type, before.group_name, before.region_id) == (
        TraceType.SubBefore, "cg", "R9")
    assert before.beans[0].keys == "k" and before.beans[0].retry_times == 1
    assert before.beans[0].body_length == 120
    assert (after.trace_type, after.request_id, after.success, after.context_code) == (
        TraceType.SubAfter, before.request_id, False, ConsumeReturnType.FAILED)
    assert after.cost_time == 100  # 400 ms over the call's 4 messages, as RocketMQ
    assert after.beans is before.beans


async def test_consume_hook_skips_untraced_calls() -> None:
    sink = Appended()
    hook = ConsumeMessageTraceHook(sink)  # type: ignore[arg-type]
    ctx = ConsumeMessageContext("cg", MessageQueue(TOPIC, "b", 0), [ext("A", TRACE_ON="false")])
    hook.consume_message_before(ctx)
    ctx.finish(ConsumeConcurrentlyStatus.CONSUME_SUCCESS, raised=False)
    hook.consume_message_after(ctx)
    assert sink.contexts == []


async def test_consume_outcomes() -> None:
    cases = [
        (ConsumeConcurrentlyStatus.CONSUME_SUCCESS, False, True, ConsumeReturnType.SUCCESS),
        (ConsumeOrderlyStatus.SUCCESS, False, True, ConsumeReturnType.SUCCESS),
        (ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT, False, False,
         ConsumeReturnType.FAILED),
        (None, True, False, ConsumeReturnType.EXCEPTION),
        (None, False, False, ConsumeReturnType.RETURNNULL),
        ("garbage", False, False, ConsumeReturnType.RETURNNULL),
    ]
    for answer, raised, success, kind in cases:
        ctx = ConsumeMessageContext("cg", MessageQueue(TOPIC, "b", 0), [])
        ctx.finish(answer, raised)
        assert (ctx.success, ctx.return_type) == (success, kind), answer


class Exploding:
    def __init__(self) -> None:
        self.calls = 0

    def hook_name(self) -> str:
        return "Exploding"

    def send_message_before(self, ctx: SendMessageContext) -> None:
        self.calls += 1
        raise RuntimeError("before")

    def send_message_after(self, ctx: SendMessageContext) -> None:
        self.calls += 1
        raise RuntimeError("after")


class Recording:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bool]] = []

    def hook_name(self) -> str:
        return "Recording"

    def send_message_before(self, ctx: SendMessageContext) -> None:
        self.seen.append(("before", ctx.mq.broker_name, ctx.batch))

    def send_message_after(self, ctx: SendMessageContext) -> None:
        what = "ok" if ctx.send_result is not None else type(ctx.exception).__name__
        self.seen.append((what, ctx.mq.broker_name, ctx.batch))


def test_hook_list_refuses_what_is_no_hook() -> None:
    class HalfAHook:
        def hook_name(self) -> str:
            return "half"

        def send_message_before(self, ctx: SendMessageContext) -> None:
            pass

    hooks = send_hooks(None)
    with pytest.raises(MQClientError, match="hook_name"):
        hooks.register(object())  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="send_message_after"):
        hooks.register(HalfAHook())  # type: ignore[arg-type]
    assert not hooks


# ---- a producer with hooks and trace, against the fake cluster ------------------------


async def test_hooks_see_every_attempt_and_a_failing_hook_changes_nothing(
        cluster: FakeCluster) -> None:
    cluster.brokers[0].send_code = ResponseCode.SYSTEM_BUSY  # broker-a refuses
    exploding, recording = Exploding(), Recording()
    async with Producer("hooked", cluster.namesrv_addr) as producer:
        producer.register_send_message_hook(exploding)
        producer.register_send_message_hook(recording)
        with pytest.raises(MQBrokerError):
            await producer.send(Message(TOPIC, b"m"), MessageQueue(TOPIC, "broker-a", 0))
        results = [await producer.send(Message(TOPIC, b"m")) for _ in range(4)]
        await producer.send_batch([Message(TOPIC, b"x"), Message(TOPIC, b"y")])
    assert all(r.message_queue.broker_name == "broker-b" for r in results)
    assert exploding.calls == len(recording.seen)
    befores, afters = recording.seen[0::2], recording.seen[1::2]
    assert all(b[0] == "before" for b in befores) and len(befores) == len(afters)
    assert afters[0] == ("MQBrokerError", "broker-a", False)
    assert {a[1] for a in afters if a[0] != "ok"} == {"broker-a"}
    assert [a for a in afters if a[0] == "ok"] == [("ok", "broker-b", False)] * 4 + [
        ("ok", "broker-b", True)]


def trace_sends(cluster: FakeCluster, topic: str = RMQ_SYS_TRACE_TOPIC) -> list[Any]:
    out = []
    for broker in cluster.brokers:
        for req in broker.requests_of(RequestCode.SEND_MESSAGE):
            if SendMessageRequestHeader.from_fields(req.ext_fields).topic == topic:
                out.append(req)
    return out


async def test_producer_with_trace_writes_pub_records(cluster: FakeCluster) -> None:
    cluster.namesrv.set_route(RMQ_SYS_TRACE_TOPIC, cluster.brokers[:1], queues=1)
    async with Producer("traced", cluster.namesrv_addr, enable_msg_trace=True) as producer:
        one = await producer.send(Message(TOPIC, b"hello", tags="TagA", keys="order-1"))
        many = await producer.send_batch([Message(TOPIC, b"x%d" % i) for i in range(3)])
        dispatcher = producer.trace_dispatcher
        assert dispatcher is not None and dispatcher.trace_topic == RMQ_SYS_TRACE_TOPIC
    assert dispatcher.stats()["sent"] == 4 and dispatcher.dropped == 0
    records = []
    keys: set[str] = set()
    for req in trace_sends(cluster):
        props = string_to_properties(SendMessageRequestHeader.from_fields(req.ext_fields).properties)
        keys |= set(props["KEYS"].split(" "))
        records += decode(req.body.decode())
    by_id = {c.beans[0].msg_id: c for c in records}
    ids = [one.msg_id, *many.msg_id.split(",")]
    assert sorted(by_id) == sorted(ids) and set(ids) <= keys and "order-1" in keys
    first = by_id[one.msg_id]
    assert (first.trace_type, first.group_name, first.success) == (TraceType.Pub, "traced", True)
    assert (first.beans[0].topic, first.beans[0].tags, first.beans[0].keys,
            first.beans[0].offset_msg_id, first.beans[0].body_length) == (
        TOPIC, "TagA", "order-1", one.offset_msg_id, 5)
    assert by_id[ids[2]].beans[0].offset_msg_id == (many.offset_msg_id or "").split(",")[1]


async def test_trace_topic_without_route_never_fails_user_sends(cluster: FakeCluster) -> None:
    async with Producer("traced", cluster.namesrv_addr, enable_msg_trace=True,
                        customized_trace_topic="NoSuchTrace") as producer:
        results = [await producer.send(Message(TOPIC, b"m%d" % i)) for i in range(5)]
        dispatcher = producer.trace_dispatcher
        assert dispatcher is not None
    assert all(r.send_status is SendStatus.SEND_OK for r in results)
    assert (dispatcher.failed, dispatcher.sent, dispatcher.dropped) == (5, 0, 0)
    assert trace_sends(cluster, "NoSuchTrace") == []


def test_blocking_producer_with_trace(fakes: ThreadedCluster) -> None:
    """The blocking facade passes the trace options on; its shutdown flushes."""
    c = fakes.cluster
    fakes.call(lambda: c.namesrv.set_route(RMQ_SYS_TRACE_TOPIC, c.brokers[1:], queues=1))
    with BlockingProducer("blocking-traced", c.namesrv_addr, enable_msg_trace=True) as producer:
        sent = producer.send(Message(TOPIC, b"hello"))
    ids = [ctx.beans[0].msg_id for req in fakes.call(trace_sends, c)
           for ctx in decode((req.body or b"").decode())]
    assert ids == [sent.msg_id]
