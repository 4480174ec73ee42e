"""broker/grpc/guard.py without sockets: namespaces wrapped for the handler and unwrapped
for the client, ACL refusals in the response's status (Telemetry: a gRPC status)."""

from __future__ import annotations

import pytest
import trio

from acl.plain import parse_plain_acl
from broker.grpc.access import date_time_text, sign
from broker.grpc.framing import GrpcError, StatusCode
from broker.grpc.guard import GrpcGuard
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from broker.grpc.server import Call, Method

NOW_MS = 1_765_000_000_000
CONFIG = parse_plain_acl("""
accounts:
  - accessKey: consumerAK
    secretKey: consumerSK
    topicPerms: ["app1%TopicA=SUB"]
    groupPerms: ["app1%GroupA=SUB"]
""")
PATH = "/apache.rocketmq.v2.MessagingService/"


class Requests:
    def __init__(self, messages: list[bytes]) -> None:
        self.messages = messages

    async def next(self) -> bytes | None:
        return self.messages.pop(0) if self.messages else None


def make_call(name: str, requests: list[bytes], metadata: dict[str, str],
              out: list[bytes]) -> Call:
    async def send(framed: bytes) -> None:
        out.append(framed[5:])
    return Call(PATH + name, "127.0.0.1:5000", metadata, Requests(requests), send)


def signed(ak: str, sk: str, namespace: str = "") -> dict[str, str]:
    when = date_time_text(NOW_MS)
    return {"x-mq-date-time": when, "x-mq-namespace": namespace,
            "authorization": f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
                             f"Signature={sign(sk, when)}"}


def receive_request(group: str, topic: str) -> bytes:
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic))).SerializeToString()


def guarded(guard: GrpcGuard, seen: list[spb.ReceiveMessageRequest]) -> Method:
    async def handler(call: Call) -> None:
        request = spb.ReceiveMessageRequest()
        request.ParseFromString(await call.recv_one())
        seen.append(request)
        await call.send(spb.ReceiveMessageResponse(status=pb.Status(code=pb.Code.OK))
                        .SerializeToString())
        await call.send(spb.ReceiveMessageResponse(message=pb.Message(
            topic=pb.Resource(name=request.message_queue.topic.name))).SerializeToString())
    methods = guard.guard_methods({PATH + "ReceiveMessage": Method(handler, waits=True)})
    method = methods[PATH + "ReceiveMessage"]
    assert method.waits
    return method


def test_namespace_wrapped_in_and_unwrapped_out() -> None:
    seen: list[spb.ReceiveMessageRequest] = []
    method = guarded(GrpcGuard(None), seen)
    out: list[bytes] = []
    call = make_call("ReceiveMessage", [receive_request("GroupA", "TopicA")],
                     {"x-mq-namespace": "app1"}, out)
    trio.run(method.handler, call)
    assert seen[0].group.name == "app1%GroupA"
    assert seen[0].message_queue.topic.name == "app1%TopicA"
    message = spb.ReceiveMessageResponse.FromString(out[1]).message
    assert (message.topic.name, message.topic.resource_namespace) == ("TopicA", "app1")


def test_no_namespace_no_acl_is_untouched() -> None:
    seen: list[spb.ReceiveMessageRequest] = []
    method = guarded(GrpcGuard(None), seen)
    out: list[bytes] = []
    call = make_call("ReceiveMessage", [receive_request("GroupA", "TopicA")], {}, out)
    trio.run(method.handler, call)
    assert seen[0].group.name == "GroupA"


def test_acl_checks_the_namespaced_names() -> None:
    seen: list[spb.ReceiveMessageRequest] = []
    method = guarded(GrpcGuard(lambda: CONFIG, now_ms=lambda: NOW_MS), seen)
    out: list[bytes] = []
    trio.run(method.handler, make_call("ReceiveMessage", [receive_request("GroupA", "TopicA")],
                                       signed("consumerAK", "consumerSK", "app1"), out))
    assert len(seen) == 1 and len(out) == 2
    out.clear()
    # the same names outside the namespace: the account has no right on them
    trio.run(method.handler, make_call("ReceiveMessage", [receive_request("GroupA", "TopicA")],
                                       signed("consumerAK", "consumerSK"), out))
    assert len(seen) == 1
    refused = spb.ReceiveMessageResponse.FromString(out[0])
    assert refused.status.code == pb.Code.FORBIDDEN and "TopicA" in refused.status.message
    out.clear()
    trio.run(method.handler, make_call("ReceiveMessage", [receive_request("GroupA", "TopicA")],
                                       signed("consumerAK", "wrongSK", "app1"), out))
    assert spb.ReceiveMessageResponse.FromString(out[0]).status.code == pb.Code.UNAUTHORIZED
    assert len(seen) == 1


def test_bad_namespace_refused() -> None:
    method = guarded(GrpcGuard(None), [])
    call = make_call("ReceiveMessage", [receive_request("G", "T")],
                     {"x-mq-namespace": "a%b"}, [])
    with pytest.raises(GrpcError) as info:
        trio.run(method.handler, call)
    assert info.value.code is StatusCode.INVALID_ARGUMENT


def test_telemetry_refusal_is_a_grpc_status() -> None:
    got: list[spb.TelemetryCommand] = []

    async def telemetry(call: Call) -> None:
        while (payload := await call.recv()) is not None:
            command = spb.TelemetryCommand.FromString(payload)
            got.append(command)
            await call.send(command.SerializeToString())

    guard = GrpcGuard(lambda: CONFIG, now_ms=lambda: NOW_MS)
    method = guard.guard_methods({PATH + "Telemetry": Method(telemetry, streaming=True)})[
        PATH + "Telemetry"]

    def settings(group: str) -> bytes:
        return spb.TelemetryCommand(settings=pb.Settings(subscription=pb.Subscription(
            group=pb.Resource(name=group),
            subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="TopicA"))]))
        ).SerializeToString()

    out: list[bytes] = []
    trio.run(method.handler, make_call("Telemetry", [settings("GroupA")],
                                       signed("consumerAK", "consumerSK", "app1"), out))
    assert got[0].settings.subscription.group.name == "app1%GroupA"
    echoed = spb.TelemetryCommand.FromString(out[0])
    assert echoed.settings.subscription.subscriptions[0].topic.name == "TopicA"
    with pytest.raises(GrpcError) as info:
        trio.run(method.handler, make_call("Telemetry", [settings("GroupB")],
                                           signed("consumerAK", "consumerSK", "app1"), out))
    assert info.value.code is StatusCode.PERMISSION_DENIED
    assert guard.refusals == 1
