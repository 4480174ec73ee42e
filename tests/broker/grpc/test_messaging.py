"""MessagingService's handlers over fakes of the broker's services, driven through the
gRPC app in process (tests/broker/grpc/test_server.py's made-up ASGI events)."""

from __future__ import annotations

from typing import Any

from broker.config import BrokerConfig
from broker.grpc.framing import encode_message
from broker.grpc.messaging import GRPC_PRODUCER_GROUP, NOT_YET, SERVICE, MessagingService
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from broker.grpc.server import GrpcApp
from broker.service.send import SendOutcome, SendStatus
from protocol.headers import SendMessageRequestHeader
from protocol.message import string_to_properties
from protocol.route import TopicConfig
from tests.broker.grpc.test_server import Exchange


class FakeSend:
    def __init__(self) -> None:
        self.sent: list[tuple[SendMessageRequestHeader, bytes, str]] = []
        self.after = 0
        self.status = SendStatus.OK

    def send_single(self, h: SendMessageRequestHeader, body: bytes, born_host: str
                    ) -> SendOutcome:
        self.sent.append((h, body, born_host))
        if self.status is not SendStatus.OK:
            return SendOutcome(self.status, "refused here")
        return SendOutcome(SendStatus.OK, None, "offsetid", max(h.queue_id, 0), len(self.sent))

    def after_answer(self) -> None:
        self.after += 1


class FakeTopics:
    def __init__(self) -> None:
        self.table = {"T": TopicConfig("T", 4, 4)}
        self.created: list[str] = []

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def create_topic_in_send_message_method(self, topic: str, default_topic: str,
                                            queue_nums: int) -> TopicConfig | None:
        self.created.append(topic)
        self.table[topic] = TopicConfig(topic, queue_nums, queue_nums)
        return self.table[topic]


def service(**config: Any) -> tuple[MessagingService, FakeSend, FakeTopics, list[int]]:
    send, topics, changed = FakeSend(), FakeTopics(), []
    svc = MessagingService(BrokerConfig(broker_name="broker-a", **config), send,  # type: ignore[arg-type]
                           topics, endpoint=lambda: ("10.1.2.3", 8081),
                           on_topics_changed=lambda: changed.append(1), now_ms=lambda: 1000)
    return svc, send, topics, changed


async def call(svc: MessagingService, method: str, *requests: Any,
               metadata: dict[str, str] | None = None) -> tuple[Exchange, list[bytes]]:
    hs = {"content-type": "application/grpc", "x-mq-client-id": "cid-1", **(metadata or {})}
    ex = Exchange([{"type": "http.request",
                    "body": b"".join(encode_message(r.SerializeToString()) for r in requests),
                    "more_body": False}])
    scope = {"type": "http", "http_version": "2", "method": "POST",
             "path": f"/{SERVICE}/{method}",
             "headers": [(k.encode(), v.encode()) for k, v in hs.items()],
             "client": ("10.9.9.9", 4000)}
    await GrpcApp(svc.methods())(scope, ex.receive, ex.send)
    return ex, ex.messages()


def send_request(*groups: str | None, topic: str = "T") -> spb.SendMessageRequest:
    request = spb.SendMessageRequest()
    for i, group in enumerate(groups):
        msg = request.messages.add(topic=pb.Resource(name=topic), body=b"b%d" % i)
        msg.system_properties.message_id = f"ID{i}"
        msg.system_properties.message_type = pb.FIFO if group else pb.NORMAL
        if group:
            msg.system_properties.message_group = group
    return request


async def test_query_route() -> None:
    svc, _, _, _ = service()
    ex, (raw,) = await call(svc, "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name="T")))
    answer = spb.QueryRouteResponse.FromString(raw)
    assert answer.status.code == pb.OK
    assert [q.id for q in answer.message_queues] == [0, 1, 2, 3]
    q = answer.message_queues[0]
    assert (q.broker.name, q.broker.id) == ("broker-a", 0)
    assert q.broker.endpoints.addresses[0].host == "10.1.2.3"
    assert q.broker.endpoints.addresses[0].port == 8081
    assert set(q.accept_message_types) == {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}
    assert ex.trailers()[b"grpc-status"] == b"0"


async def test_query_route_creates_or_refuses_an_unknown_topic() -> None:
    svc, _, topics, changed = service()
    _, (raw,) = await call(svc, "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name="New")))
    assert spb.QueryRouteResponse.FromString(raw).status.code == pb.OK
    assert topics.created == ["New"] and changed == [1]
    svc, _, topics, _ = service(auto_create_topic_enable=False)
    _, (raw,) = await call(svc, "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name="New")))
    assert spb.QueryRouteResponse.FromString(raw).status.code == pb.TOPIC_NOT_FOUND
    _, (raw,) = await call(svc, "QueryRoute",
                           spb.QueryRouteRequest(topic=pb.Resource(name="bad topic!")))
    assert spb.QueryRouteResponse.FromString(raw).status.code == pb.ILLEGAL_TOPIC
    assert topics.created == []


async def test_send_message_picks_queues_and_answers_each() -> None:
    svc, send, _, _ = service()
    _, (raw,) = await call(svc, "SendMessage", send_request("g1", None, "g1", "g1"))
    answer = spb.SendMessageResponse.FromString(raw)
    assert answer.status.code == pb.OK
    assert [e.message_id for e in answer.entries] == ["ID0", "ID1", "ID2", "ID3"]
    assert [e.offset for e in answer.entries] == [1, 2, 3, 4]
    group_queues = {h.queue_id for h, _, _ in send.sent if "__SHARDINGKEY" in h.properties}
    assert len(group_queues) == 1 and 0 <= group_queues.pop() < 4
    assert send.sent[1][0].queue_id == -1  # no group: the service picks
    h, body, born_host = send.sent[0]
    assert h.producer_group == GRPC_PRODUCER_GROUP and body == b"b0"
    assert string_to_properties(h.properties)["UNIQ_KEY"] == "ID0"
    assert born_host == "10.9.9.9:4000"
    assert send.after == 1


async def test_send_message_statuses() -> None:
    svc, send, _, _ = service()
    send.status = SendStatus.NO_PERMISSION
    _, (raw,) = await call(svc, "SendMessage", send_request(None))
    answer = spb.SendMessageResponse.FromString(raw)
    assert answer.status.code == pb.FORBIDDEN and answer.status.message == "refused here"
    send.status = SendStatus.OK
    bad = send_request(None, None)
    bad.messages[1].body = b""
    _, (raw,) = await call(svc, "SendMessage", bad)
    answer = spb.SendMessageResponse.FromString(raw)
    assert answer.status.code == pb.MULTIPLE_RESULTS
    assert [e.status.code for e in answer.entries] == [pb.OK, pb.MESSAGE_BODY_EMPTY]
    _, (raw,) = await call(svc, "SendMessage", spb.SendMessageRequest())
    assert spb.SendMessageResponse.FromString(raw).status.code == pb.BAD_REQUEST


async def test_garbage_request_is_invalid_argument() -> None:
    svc, _, _, _ = service()
    ex = Exchange([{"type": "http.request", "body": encode_message(b"\xff\xff\xff"),
                    "more_body": False}])
    scope = {"type": "http", "http_version": "2", "method": "POST",
             "path": f"/{SERVICE}/SendMessage",
             "headers": [(b"content-type", b"application/grpc")], "client": None}
    await GrpcApp(svc.methods())(scope, ex.receive, ex.send)
    assert ex.trailers()[b"grpc-status"] == b"3"


async def test_telemetry_answers_every_settings_completely() -> None:
    svc, _, _, _ = service(max_message_size=1 << 20)
    producer = pb.Settings(client_type=pb.PRODUCER,
                           publishing=pb.Publishing(topics=[pb.Resource(name="T")]))
    consumer = pb.Settings(client_type=pb.PUSH_CONSUMER,
                           subscription=pb.Subscription(group=pb.Resource(name="G")))
    ex, raws = await call(svc, "Telemetry", spb.TelemetryCommand(settings=producer),
                          spb.TelemetryCommand(thread_stack_trace=spb.ThreadStackTrace()),
                          spb.TelemetryCommand(settings=consumer))
    answers = [spb.TelemetryCommand.FromString(r) for r in raws]
    assert len(answers) == 2 and ex.trailers()[b"grpc-status"] == b"0"
    pub, sub = answers[0].settings, answers[1].settings
    assert answers[0].status.code == pb.OK
    assert pub.publishing.max_body_size == 1 << 20 and pub.publishing.validate_message_type
    assert [t.name for t in pub.publishing.topics] == ["T"]
    for s in (pub, sub):
        assert s.backoff_policy.max_attempts > 0
        assert s.HasField("request_timeout") and s.HasField("metric") and not s.metric.on
    assert pub.backoff_policy.exponential_backoff.initial.ToMilliseconds() > 0
    # a group not known here: a default group's policy (retryMaxTimes 16 + 1, the
    # delay levels) and not FIFO
    assert sub.backoff_policy.max_attempts == 17
    assert [d.ToSeconds() for d in sub.backoff_policy.customized_backoff.next][:3] == [1, 5, 10]
    assert sub.subscription.HasField("fifo") and not sub.subscription.fifo
    assert sub.subscription.receive_batch_size > 0
    assert sub.subscription.long_polling_timeout.seconds > 0
    assert sub.subscription.group.name == "G"


async def test_heartbeat_and_termination_ok() -> None:
    svc, _, _, _ = service()
    _, (raw,) = await call(svc, "Heartbeat", spb.HeartbeatRequest(client_type=pb.PRODUCER))
    assert spb.HeartbeatResponse.FromString(raw).status.code == pb.OK
    _, (raw,) = await call(svc, "NotifyClientTermination", spb.NotifyClientTerminationRequest())
    assert spb.NotifyClientTerminationResponse.FromString(raw).status.code == pb.OK


async def test_everything_else_unimplemented_with_a_message() -> None:
    svc, _, _, _ = service()
    served = {"QueryRoute", "Heartbeat", "SendMessage", "NotifyClientTermination", "Telemetry",
              "QueryAssignment"}
    # without a PopService, without a TransactionService
    pop = {"ReceiveMessage", "AckMessage", "ChangeInvisibleDuration",
           "ForwardMessageToDeadLetterQueue", "EndTransaction"}
    recall = {"RecallMessage"}  # without a timer service
    declared = set(spb.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name)
    assert declared == served | pop | recall | set(NOT_YET)
    for method in sorted(NOT_YET) + sorted(pop) + sorted(recall):
        ex, raws = await call(svc, method, spb.HeartbeatRequest())
        assert raws == []
        trailers = ex.trailers()
        assert trailers[b"grpc-status"] == b"12", method
        assert b"not" in trailers[b"grpc-message"]


async def test_a_send_conflicting_with_the_topics_message_type_is_refused() -> None:
    svc, send, topics, _ = service()
    topics.table["F"] = TopicConfig("F", 4, 4, attributes={"message.type": "FIFO"})
    _, (raw,) = await call(svc, "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name="F")))
    routed = spb.QueryRouteResponse.FromString(raw).message_queues
    assert {tuple(q.accept_message_types) for q in routed} == {(pb.FIFO,)}
    _, (raw,) = await call(svc, "SendMessage", send_request(None, topic="F"))
    answer = spb.SendMessageResponse.FromString(raw)
    assert answer.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "expected type is FIFO, but actual type is NORMAL" in answer.status.message
    assert send.sent == []
    _, (raw,) = await call(svc, "SendMessage", send_request("g1", topic="F"))
    assert spb.SendMessageResponse.FromString(raw).status.code == pb.OK
    assert len(send.sent) == 1
    # MIXED takes every type; enableTopicMessageTypeCheck=false checks none
    topics.table["F"].attributes["message.type"] = "MIXED"
    _, (raw,) = await call(svc, "SendMessage", send_request(None, topic="F"))
    assert spb.SendMessageResponse.FromString(raw).status.code == pb.OK
    svc, send, topics, _ = service(enable_topic_message_type_check=False)
    topics.table["F"] = TopicConfig("F", 4, 4, attributes={"message.type": "DELAY"})
    _, (raw,) = await call(svc, "SendMessage", send_request(None, topic="F"))
    assert spb.SendMessageResponse.FromString(raw).status.code == pb.OK
