"""ReceiveMessage, AckMessage and ChangeInvisibleDuration over a real PopService, store
and in-flight log (tests/broker/test_pop_processor.py's ``edge``), driven through the gRPC
app in process; a MockClock for the long poll."""

from __future__ import annotations

import zlib
from typing import Any

import trio
import trio.testing

from broker.config import BrokerConfig
from broker.consumer_filter_manager import ConsumerFilterManager
from broker.grpc.convert import to_pb_message
from broker.grpc.framing import encode_message
from broker.grpc.messaging import SERVICE, MessagingService
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from broker.grpc.server import GrpcApp
from broker.service.pop import PoppedMessage
from protocol.message import MessageConst
from tests.broker.grpc.test_messaging import FakeSend, FakeTopics
from tests.broker.grpc.test_server import Exchange
from tests.broker.service.test_pop import GROUP, TOPIC
from tests.broker.store.helpers import inner
from tests.broker.test_pop_processor import Edge
from tests.broker.test_pop_processor import edge as edge  # noqa: F401  (the fixture)


async def messaging(e: Edge) -> MessagingService:
    """The service, its group's offsets noted by a first, empty receive (a new group
    starts at the queues' ends)."""
    svc = MessagingService(BrokerConfig(broker_name="b"), FakeSend(), FakeTopics(),  # type: ignore[arg-type]
                           endpoint=lambda: ("10.1.2.3", 8081), on_topics_changed=lambda: None,
                           pop=e.proc, now_ms=lambda: 777_000)
    first = await receive(svc, receive_request())
    assert [f.status.code for f in first] == [pb.MESSAGE_NOT_FOUND]
    return svc


async def call(svc: MessagingService, method: str, request: Any,
               timeout: str | None = None) -> tuple[Exchange, list[bytes]]:
    hs = {"content-type": "application/grpc"}
    if timeout is not None:
        hs["grpc-timeout"] = timeout
    ex = Exchange([{"type": "http.request", "body": encode_message(request.SerializeToString()),
                    "more_body": False}])
    scope = {"type": "http", "http_version": "2", "method": "POST",
             "path": f"/{SERVICE}/{method}",
             "headers": [(k.encode(), v.encode()) for k, v in hs.items()],
             "client": ("10.9.9.9", 4000)}
    await GrpcApp(svc.methods())(scope, ex.receive, ex.send)
    return ex, ex.messages()


def receive_request(batch: int = 8, invisible_s: int = 10, poll_s: int = 0,
                    filter_type: int = pb.TAG, expression: str = "*") -> spb.ReceiveMessageRequest:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC, resource_namespace="ns"),
                                      id=0, broker=pb.Broker(name="b")),
        filter_expression=pb.FilterExpression(type=filter_type, expression=expression),
        batch_size=batch)
    req.invisible_duration.FromSeconds(invisible_s)
    req.long_polling_timeout.FromSeconds(poll_s)
    return req


async def receive(svc: MessagingService, req: spb.ReceiveMessageRequest,
                  timeout: str | None = None) -> list[spb.ReceiveMessageResponse]:
    ex, raws = await call(svc, "ReceiveMessage", req, timeout)
    assert ex.trailers()[b"grpc-status"] == b"0"
    return [spb.ReceiveMessageResponse.FromString(r) for r in raws]


def ack_request(*handles: str) -> spb.AckMessageRequest:
    return spb.AckMessageRequest(
        group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC),
        entries=[spb.AckMessageEntry(message_id=f"M{i}", receipt_handle=h)
                 for i, h in enumerate(handles)])


async def ack(svc: MessagingService, *handles: str) -> spb.AckMessageResponse:
    _, (raw,) = await call(svc, "AckMessage", ack_request(*handles))
    return spb.AckMessageResponse.FromString(raw)


async def test_receive_streams_status_messages_then_delivery_time_and_acks_per_entry(
        edge: Edge) -> None:
    svc = await messaging(edge)
    assert edge.store.put_message(inner(TOPIC, 0, b"hello", tags="A", keys="k1 k2",
                                        properties={"UNIQ_KEY": "ID1", "color": "red"})).ok
    edge.put(1)
    frames = await receive(svc, receive_request())
    kinds = [f.WhichOneof("content") for f in frames]
    assert kinds == ["status", "message", "message", "delivery_timestamp"]
    assert frames[0].status.code == pb.OK
    assert frames[-1].delivery_timestamp.ToMilliseconds() == 777_000
    first = frames[1].message
    sp = first.system_properties
    assert first.topic.name == TOPIC and first.topic.resource_namespace == "ns"
    assert first.body == b"hello" and sp.message_id == "ID1"
    assert sp.tag == "A" and list(sp.keys) == ["k1", "k2"]
    assert dict(first.user_properties) == {"color": "red"}
    assert sp.body_digest.type == pb.CRC32 and sp.body_digest.checksum == \
        format(zlib.crc32(b"hello"), "08X")
    assert sp.born_host == "10.0.0.1" and sp.born_timestamp.ToMilliseconds() == 1
    assert sp.delivery_attempt == 1 and sp.invisible_duration.ToSeconds() == 10
    assert sp.queue_offset == 0 and sp.receipt_handle and sp.message_type == pb.NORMAL
    handles = [f.message.system_properties.receipt_handle for f in frames[1:3]]
    answer = await ack(svc, handles[0], "garbage")
    assert answer.status.code == pb.MULTIPLE_RESULTS
    assert [e.status.code for e in answer.entries] == [pb.OK, pb.INVALID_RECEIPT_HANDLE]
    assert [e.message_id for e in answer.entries] == ["M0", "M1"]
    spent = await ack(svc, handles[0])  # acked already
    assert spent.status.code == pb.INVALID_RECEIPT_HANDLE
    assert (await ack(svc, handles[1])).status.code == pb.OK
    assert edge.svc.table.get((GROUP, TOPIC, 0, 0)) is None


async def test_change_invisible_gives_a_new_handle_and_the_old_one_is_refused(
        edge: Edge) -> None:
    svc = await messaging(edge)
    edge.put(1)
    frames = await receive(svc, receive_request())
    old = frames[1].message.system_properties.receipt_handle
    change = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC), receipt_handle=old)
    change.invisible_duration.FromSeconds(60)
    _, (raw,) = await call(svc, "ChangeInvisibleDuration", change)
    changed = spb.ChangeInvisibleDurationResponse.FromString(raw)
    assert changed.status.code == pb.OK and changed.receipt_handle not in ("", old)
    stale = await ack(svc, old)
    assert stale.status.code == pb.INVALID_RECEIPT_HANDLE and "replaced" in stale.status.message
    change.invisible_duration.FromSeconds(0)
    _, (raw,) = await call(svc, "ChangeInvisibleDuration", change)
    assert spb.ChangeInvisibleDurationResponse.FromString(raw).status.code == \
        pb.ILLEGAL_INVISIBLE_TIME
    assert (await ack(svc, changed.receipt_handle)).status.code == pb.OK


async def test_the_long_poll_ends_before_the_deadline_and_is_never_refused_for_it(
        edge: Edge, autojump_clock: trio.testing.MockClock) -> None:
    svc = await messaging(edge)
    started = trio.current_time()
    frames = await receive(svc, receive_request(poll_s=20), timeout="3S")
    assert [f.status.code for f in frames] == [pb.MESSAGE_NOT_FOUND]
    assert trio.current_time() - started == 2.0  # 3 s less the 1 s reserve
    started = trio.current_time()
    frames = await receive(svc, receive_request(poll_s=20), timeout="400m")
    assert [f.status.code for f in frames] == [pb.MESSAGE_NOT_FOUND]
    assert 0.19 < trio.current_time() - started <= 0.2  # half of what was left


async def test_a_message_arriving_ends_the_long_poll(edge: Edge) -> None:
    svc = await messaging(edge)
    got: list[list[spb.ReceiveMessageResponse]] = []
    with trio.fail_after(10):  # the poll asks for 20 s: it ends well before
        async with trio.open_nursery() as nursery:
            async def held() -> None:
                got.append(await receive(svc, receive_request(poll_s=20), timeout="30S"))
            nursery.start_soon(held)
            await trio.testing.wait_all_tasks_blocked()
            assert edge.runner.held == 1
            edge.put(1)
    assert [f.WhichOneof("content") for f in got[0]] == \
        ["status", "message", "delivery_timestamp"]


async def test_bad_receives_are_clear_statuses(edge: Edge) -> None:
    svc = await messaging(edge)
    sql = await receive(svc, receive_request(filter_type=pb.SQL, expression="a > 1"))
    assert [f.status.code for f in sql] == [pb.UNSUPPORTED]
    no_group = receive_request()
    no_group.group.name = ""
    assert (await receive(svc, no_group))[0].status.code == pb.ILLEGAL_CONSUMER_GROUP
    assert (await receive(svc, receive_request(invisible_s=0)))[0].status.code == \
        pb.ILLEGAL_INVISIBLE_TIME
    assert (await receive(svc, receive_request(batch=33)))[0].status.code == pb.BAD_REQUEST
    other = receive_request()
    other.message_queue.broker.name = "elsewhere"
    assert (await receive(svc, other))[0].status.code == pb.BAD_REQUEST
    unknown = receive_request()
    unknown.message_queue.topic.name = "Nope"
    assert (await receive(svc, unknown))[0].status.code == pb.TOPIC_NOT_FOUND
    assert (await ack(svc)).status.code == pb.BAD_REQUEST  # no entries


def test_a_retried_message_shows_its_own_topic_and_a_stored_compressed_body_inflated(
        edge: Edge) -> None:
    props = {MessageConst.PROPERTY_RETRY_TOPIC: TOPIC, "TAGS": "A", "__SHARDINGKEY": "g1",
             "UNIQ_KEY": "ID9", "k": "v"}
    msg = inner("%RETRY%" + GROUP, 0, zlib.compress(b"plain"), properties=props)
    msg.sys_flag |= 0x1  # stored compressed
    assert edge.store.put_message(msg).ok
    found = edge.store.get_message(GROUP, "%RETRY%" + GROUP, 0, 0, 1, None)
    popped = PoppedMessage(bytes(found.buffers[0]), "h", 3, "%RETRY%" + GROUP, 0, 0)
    out = to_pb_message(popped, 5_000)
    assert out.topic.name == TOPIC and out.body == b"plain"
    assert out.system_properties.message_group == "g1"
    assert out.system_properties.message_type == pb.FIFO
    assert out.system_properties.delivery_attempt == 3
    assert dict(out.user_properties) == {"k": "v"}


async def test_an_sql92_filter_selects_by_properties(edge: Edge) -> None:
    """With enablePropertyFilter, a receive's SQL filter expression is evaluated on each
    message's properties; a bad expression is ILLEGAL_FILTER_EXPRESSION."""
    svc = await messaging(edge)
    edge.svc.filters = ConsumerFilterManager()
    edge.svc.settings.enable_property_filter = True  # type: ignore[misc]
    for i in range(4):
        assert edge.store.put_message(inner(TOPIC, 0, b"n%d" % i, tags="A",
                                            properties={"n": str(i)})).ok
    frames = await receive(svc, receive_request(filter_type=pb.SQL, expression="n >= 2"))
    assert [f.message.body for f in frames if f.WhichOneof("content") == "message"] == \
        [b"n2", b"n3"]
    bad = await receive(svc, receive_request(filter_type=pb.SQL, expression="n >="))
    assert [f.status.code for f in bad] == [pb.ILLEGAL_FILTER_EXPRESSION]
