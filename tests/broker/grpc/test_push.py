"""Push consumers over gRPC in process: QueryAssignment's answers, the renewal of an
auto_renew receive's invisibility over a real PopService and in-flight log (on a
MockClock), and ForwardMessageToDeadLetterQueue."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from broker.config import BrokerConfig
from broker.grpc.clients import Session
from broker.grpc.framing import encode_message
from broker.grpc.messaging import SERVICE, MessagingService
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from broker.grpc.server import GrpcApp
from broker.service.send import SendOutcome, SendStatus
from broker.service.types import SessionChannel
from protocol.headers import ConsumerSendMsgBackRequestHeader
from protocol.route import PERM_WRITE, BrokerData, QueueData, TopicConfig, TopicRouteData
from protocol.subscription_group import SubscriptionGroupConfig
from tests.broker.grpc.test_messaging import FakeSend, FakeTopics
from tests.broker.grpc.test_server import Exchange
from tests.broker.service.test_pop import GROUP, TOPIC
from tests.broker.test_pop_processor import Edge
from tests.broker.test_pop_processor import edge as edge  # noqa: F401  (the fixture)

CLIENT = "push-1"


class FakeClients:
    """The gRPC client table as the renewals read it: sessions by client id."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}

    def add(self, client_id: str, client_type: int) -> None:
        self.sessions[client_id] = Session(SessionChannel(client_id, "10.0.0.9:1"),
                                           pb.Settings(client_type=client_type))

    def settings(self, client_id: str, peer: str, settings: pb.Settings, now: float
                 ) -> tuple[int, str]:
        return pb.OK, "OK"

    def attach(self, client_id: str, outbox: object) -> None:
        pass

    def detach(self, client_id: str, outbox: object) -> None:
        pass


def messaging(e: Edge | None = None, *, groups: dict[str, SubscriptionGroupConfig] | None = None,
              route: TopicRouteData | None = None, clients: FakeClients | None = None,
              send_back: Any = None) -> MessagingService:
    async def routes(topic: str) -> TopicRouteData | None:
        return route

    table = groups or {}
    config = BrokerConfig(broker_name="b", default_invisible_time_mills=3_000,
                          renew_ahead_time_millis=1_000, renew_slice_time_millis=3_000,
                          renew_max_time_millis=20_000, renew_schedule_period_millis=200)
    return MessagingService(config, FakeSend(), FakeTopics(),  # type: ignore[arg-type]
                            endpoint=lambda: ("10.1.2.3", 8081), on_topics_changed=lambda: None,
                            routes=routes, pop=None if e is None else e.proc,
                            clients=clients, groups=table.get,  # type: ignore[arg-type]
                            send_back=send_back)


async def call(svc: MessagingService, method: str, request: Any) -> list[bytes]:
    ex = Exchange([{"type": "http.request", "body": encode_message(request.SerializeToString()),
                    "more_body": False}])
    scope = {"type": "http", "http_version": "2", "method": "POST",
             "path": f"/{SERVICE}/{method}",
             "headers": [(b"content-type", b"application/grpc"),
                         (b"x-mq-client-id", CLIENT.encode())],
             "client": ("10.9.9.9", 4000)}
    await GrpcApp(svc.methods())(scope, ex.receive, ex.send)
    assert ex.trailers()[b"grpc-status"] == b"0"
    return ex.messages()


async def assignment(svc: MessagingService, topic: str = "T", group: str = "G"
                     ) -> spb.QueryAssignmentResponse:
    (raw,) = await call(svc, "QueryAssignment", spb.QueryAssignmentRequest(
        topic=pb.Resource(name=topic), group=pb.Resource(name=group)))
    return spb.QueryAssignmentResponse.FromString(raw)


async def test_query_assignment_answers_per_broker_or_per_queue_for_fifo() -> None:
    route = TopicRouteData([QueueData("b2", 2, 2, 6)],
                           [BrokerData("c", "b2", {0: "10.0.0.2:10911"}, grpc_ports={0: 9081})])
    fifo = SubscriptionGroupConfig("F", consume_message_orderly=True)
    svc = messaging(groups={"F": fifo}, route=route)
    normal = await assignment(svc)
    assert normal.status.code == pb.OK
    assert [(a.message_queue.broker.name, a.message_queue.id) for a in normal.assignments] == [
        ("b", -1), ("b2", -1)]
    ordered = await assignment(svc, group="F")
    assert [(a.message_queue.broker.name, a.message_queue.id) for a in ordered.assignments] == [
        ("b", 0), ("b", 1), ("b", 2), ("b", 3), ("b2", 0), ("b2", 1)]
    assert ordered.assignments[4].message_queue.broker.endpoints.addresses[0].port == 9081


async def test_query_assignment_refusals() -> None:
    svc = messaging()
    assert (await assignment(svc, topic="Nope")).status.code == pb.TOPIC_NOT_FOUND
    assert (await assignment(svc, topic="")).status.code == pb.ILLEGAL_TOPIC
    assert (await assignment(svc, topic="bad topic!")).status.code == pb.ILLEGAL_TOPIC
    assert (await assignment(svc, group="")).status.code == pb.ILLEGAL_CONSUMER_GROUP
    assert (await assignment(svc, group="g" * 300)).status.code == pb.ILLEGAL_CONSUMER_GROUP
    svc.topics.table["W"] = TopicConfig("W", 4, 4, PERM_WRITE)  # type: ignore[attr-defined]
    refused = await assignment(svc, topic="W")
    assert refused.status.code == pb.FORBIDDEN and "no readable queue" in refused.status.message
    assert not refused.assignments


def receive_request(auto_renew: bool = True) -> spb.ReceiveMessageRequest:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1,
                                      broker=pb.Broker(name="b")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=8, auto_renew=auto_renew)
    req.long_polling_timeout.FromSeconds(0)
    return req


async def received(svc: MessagingService, auto_renew: bool = True) -> list[pb.Message]:
    raws = await call(svc, "ReceiveMessage", receive_request(auto_renew))
    frames = [spb.ReceiveMessageResponse.FromString(r) for r in raws]
    return [f.message for f in frames if f.WhichOneof("content") == "message"]


async def ack(svc: MessagingService, handle: str) -> int:
    (raw,) = await call(svc, "AckMessage", spb.AckMessageRequest(
        group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC),
        entries=[spb.AckMessageEntry(message_id="M", receipt_handle=handle)]))
    return spb.AckMessageResponse.FromString(raw).status.code


async def started(edge: Edge, svc: MessagingService) -> None:
    assert await received(svc) == []  # the group's first pop: it starts at the queue's end
    edge.put(2)


async def test_a_push_consumers_messages_stay_invisible_until_acked_with_the_first_handle(
        edge: Edge, autojump_clock: trio.testing.MockClock) -> None:
    clients = FakeClients()
    clients.add(CLIENT, pb.PUSH_CONSUMER)
    svc = messaging(edge, clients=clients)
    await started(edge, svc)
    first, second = await received(svc)
    assert first.system_properties.invisible_duration.ToMilliseconds() == 3_000
    # passes stepped by hand: an in-flight log write runs in a thread, and the mock
    # clock would jump past a running loop's next pass meanwhile
    for _ in range(50):  # 10 s: more than three times the invisible duration
        await trio.sleep(0.2)
        await svc.push.renew_once()
        assert await edge.runner.revive_once() == 0
    assert edge.revived == [] and svc.push.renewed == 8  # at 2, 4, 6, 8 s
    assert await ack(svc, first.system_properties.receipt_handle) == pb.OK
    async with trio.open_nursery() as nursery:  # the loop renews alike, and stops when told
        await nursery.start(svc.push.run)
        await trio.sleep(2.1)
        assert svc.push.renewed == 9
        # the other one changed by the client: its newest handle, then no more renewals
        (raw,) = await call(svc, "ChangeInvisibleDuration", spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC),
            receipt_handle=second.system_properties.receipt_handle,
            invisible_duration={"seconds": 1}))
        changed = spb.ChangeInvisibleDurationResponse.FromString(raw)
        assert changed.status.code == pb.OK and len(svc.push.tracker) == 0
        nursery.cancel_scope.cancel()
    await trio.sleep(1.5)
    assert await edge.runner.revive_once() == 1 and edge.revived == [1]


async def test_renewal_stops_when_the_client_leaves_or_is_no_push_consumer(
        edge: Edge, autojump_clock: trio.testing.MockClock) -> None:
    clients = FakeClients()
    clients.add(CLIENT, pb.PUSH_CONSUMER)
    svc = messaging(edge, clients=clients)
    await started(edge, svc)
    assert len(await received(svc)) == 2 and len(svc.push.tracker) == 2
    await svc.push.renew_once()
    del clients.sessions[CLIENT]  # heart-beats stopped: the housekeeping dropped it
    await trio.sleep(2.5)
    assert await svc.push.renew_once() == 0 and len(svc.push.tracker) == 0
    await trio.sleep(1)
    assert await edge.runner.revive_once() == 2  # back after their invisibility
    clients.add(CLIENT, pb.SIMPLE_CONSUMER)  # auto_renew from a simple consumer: not renewed
    edge.put(1)
    assert len(await received(svc)) == 1 and len(svc.push.tracker) == 0
    clients.add(CLIENT, pb.PUSH_CONSUMER)
    edge.put(1)
    assert len(await received(svc, auto_renew=False)) == 1 and len(svc.push.tracker) == 0


async def test_a_closed_telemetry_stream_forgets_the_clients_handles(
        edge: Edge, autojump_clock: trio.testing.MockClock) -> None:
    clients = FakeClients()
    clients.add(CLIENT, pb.PUSH_CONSUMER)
    svc = messaging(edge, clients=clients)
    await started(edge, svc)
    svc.push.stream_opened(CLIENT)
    assert len(await received(svc)) == 2
    # a whole Telemetry call: it opens and closes a stream of the same client
    await call(svc, "Telemetry", spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.PUSH_CONSUMER)))
    assert len(svc.push.tracker) == 2  # another stream is still open
    svc.push.stream_closed(CLIENT)
    assert len(svc.push.tracker) == 0 and svc.push.streams == {}


async def test_forward_to_dead_letter_queue_sends_back_and_acks(
        edge: Edge, autojump_clock: trio.testing.MockClock) -> None:
    sent: list[ConsumerSendMsgBackRequestHeader] = []

    def send_back(h: ConsumerSendMsgBackRequestHeader) -> SendOutcome:
        sent.append(h)
        return SendOutcome(SendStatus.OK if len(sent) == 1 else SendStatus.BUSY, "busy")

    clients = FakeClients()
    clients.add(CLIENT, pb.PUSH_CONSUMER)
    svc = messaging(edge, clients=clients, send_back=send_back)
    await started(edge, svc)
    first, second = await received(svc)
    await trio.sleep(2.5)
    await svc.push.renew_once()  # renewed: the client's handle is no longer the newest

    async def forward(m: pb.Message) -> int:
        (raw,) = await call(svc, "ForwardMessageToDeadLetterQueue",
                            spb.ForwardMessageToDeadLetterQueueRequest(
                                group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC),
                                receipt_handle=m.system_properties.receipt_handle,
                                message_id=m.system_properties.message_id,
                                delivery_attempt=3, max_delivery_attempts=3))
        return spb.ForwardMessageToDeadLetterQueueResponse.FromString(raw).status.code

    assert await forward(first) == pb.OK
    (h,) = sent
    assert h.group == GROUP and h.delay_level == -1 and h.offset >= 0
    assert edge.svc.table.get((GROUP, TOPIC, 0, 0)) is None  # its pop acked
    assert await forward(first) == pb.INVALID_RECEIPT_HANDLE  # done once
    assert await forward(second) == pb.TOO_MANY_REQUESTS  # refused: still in flight
    assert edge.svc.table.get((GROUP, TOPIC, 0, 1)) is not None
    (raw,) = await call(svc, "ForwardMessageToDeadLetterQueue",
                        spb.ForwardMessageToDeadLetterQueueRequest(group=pb.Resource(name=GROUP)))
    assert spb.ForwardMessageToDeadLetterQueueResponse.FromString(raw).status.code == \
        pb.INVALID_RECEIPT_HANDLE


async def test_settings_carry_the_groups_fifo_flag_and_retry_policy() -> None:
    groups = {"F": SubscriptionGroupConfig("F", retry_max_times=2, consume_message_orderly=True),
              "N": SubscriptionGroupConfig("N", retry_max_times=5)}
    svc = messaging(groups=groups)
    for name, fifo, attempts, strategy in (("F", True, 3, "exponential_backoff"),
                                           ("N", False, 6, "customized_backoff")):
        given = pb.Settings(client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(
            group=pb.Resource(name=name), fifo=not fifo))
        given.backoff_policy.max_attempts = 99  # the client's own: the group's wins
        out = svc.settings_for(given)
        assert out.subscription.fifo is fifo
        assert out.backoff_policy.max_attempts == attempts
        assert out.backoff_policy.WhichOneof("strategy") == strategy
