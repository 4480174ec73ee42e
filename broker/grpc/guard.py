"""Around every gRPC handler: namespaces (``x-mq-namespace``) and ACL (broker/grpc/access.py).

``guard_methods`` wraps the MessagingService table. A call that carries no namespace
on a broker without ACL reaches its handler untouched (a dictionary look-up is all it
costs). Otherwise its request is parsed here first:

- namespace: every ``Resource`` of the request (topics and groups, wherever they
  sit) gets its namespaced name (protocol/namespace.py ``wrap``, RocketMQ's
  NamespaceUtil), and every ``Resource`` of the responses loses it again (``unwrap``)
  with ``resource_namespace`` set, as RocketMQ's proxy answers; the handlers only
  ever see the names the broker stores;
- ACL: ``access.decide`` on the wrapped request (plain_acl.yml names the stored
  names: ``app1%TopicA``); a refusal is the RPC's response with UNAUTHORIZED or
  FORBIDDEN as its status (Telemetry: the gRPC status UNAUTHENTICATED or
  PERMISSION_DENIED), logged and counted (``on_refusal``).

Telemetry's commands are each wrapped and checked as they arrive, against the time
the stream started (its one ``x-mq-date-time``): a stream opened with a fresh
signature is not refused later for its age.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import structlog
from google.protobuf.message import Message

from acl.guard import remote_host
from acl.plain import NO_CODE, AclConfig, Decision
from broker.grpc import access
from broker.grpc.convert import status
from broker.grpc.framing import GrpcError, StatusCode, parse_request
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.server import Call, Handler, Method
from protocol.namespace import namespace_problem, unwrap, wrap

log = structlog.get_logger("broker.grpc")

# (request code: acl.plain.NO_CODE for gRPC, Decision.reason) per refusal: the broker's metrics
OnRefusal = Callable[[int, str], None]
_RESOURCE = pb.Resource.DESCRIPTOR


def resources(message: Message) -> Iterator[pb.Resource]:
    """Every ``Resource`` set in ``message``, at any depth."""
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        items = value if field.is_repeated else (value,)
        if field.message_type is _RESOURCE:
            yield from items
        elif field.message_type.GetOptions().map_entry:
            continue
        else:
            for item in items:
                yield from resources(item)


def wrap_resources(message: Message, namespace: str) -> None:
    """Each Resource of ``message`` named as stored in ``namespace`` (in place)."""
    for resource in resources(message):
        resource.name = wrap(namespace, resource.name)
        resource.resource_namespace = namespace


def unwrap_resources(message: Message, namespace: str) -> None:
    """Each Resource of ``message`` named as the app in ``namespace`` knows it (in place)."""
    for resource in resources(message):
        resource.name = unwrap(namespace, resource.name)
        resource.resource_namespace = namespace


class _Requests:
    def __init__(self, next_request: Callable[[], Any]) -> None:
        self._next = next_request

    async def next(self) -> bytes | None:
        return await self._next()  # type: ignore[no-any-return]


class _Guarded(Call):
    """The call as the handler sees it: requests already checked (and wrapped), each
    response unwrapped on its way to ``outer``."""

    def __init__(self, outer: Call, requests: Callable[[], Any],
                 response_type: type[Message] | None, namespace: str) -> None:
        super().__init__(outer.method, outer.peer, outer.metadata, _Requests(requests),
                         outer.send)
        self.deadline = outer.deadline
        self._outer = outer
        self._response_type = response_type
        self._namespace = namespace

    async def send(self, payload: bytes) -> None:
        if self._namespace and self._response_type is not None:
            response = self._response_type()
            response.ParseFromString(payload)
            unwrap_resources(response, self._namespace)
            payload = response.SerializeToString()
        self.sent += 1
        await self._outer.send(payload)


class GrpcGuard:
    """Namespaces always; ACL when ``acl`` is given (the accounts in force, read per call)."""

    def __init__(self, acl: Callable[[], AclConfig | None] | None, *,
                 window_ms: int = access.DEFAULT_WINDOW_MS,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 on_refusal: OnRefusal | None = None) -> None:
        self.acl = acl
        self.window_ms = window_ms
        self.now_ms = now_ms
        self.on_refusal = on_refusal
        self.refusals = 0

    def guard_methods(self, methods: dict[str, Method]) -> dict[str, Method]:
        out: dict[str, Method] = {}
        for path, method in methods.items():
            name = path.rpartition("/")[2]
            row = access.RULES.get(name)
            if row is None:  # not a MessagingService RPC we know: as it is
                out[path] = method
                continue
            request_type = row[0]
            if method.streaming:
                handler = self._streaming(name, request_type, method.handler)
            else:
                handler = self._unary(name, request_type, access.RESPONSES.get(name),
                                      method.handler)
            out[path] = Method(handler, streaming=method.streaming, waits=method.waits)
        return out

    # ---- the decision -------------------------------------------------------------------

    def _check(self, name: str, request: Message, call: Call, now_ms: int) -> Decision | None:
        """None when allowed, else the refusal (logged and counted)."""
        if self.acl is None:
            return None
        decision = access.decide(self.acl(), name, request, call.metadata,
                                 remote_host(call.peer), now_ms, self.window_ms)
        if decision.allowed:
            return None
        self.refusals += 1
        if self.on_refusal is not None:
            self.on_refusal(NO_CODE, decision.reason)
        log.bind(method=name, peer=call.peer).warning(
            "gRPC call refused by ACL", access_key=decision.access_key,
            reason=decision.reason, remark=decision.remark, detail=decision.detail or None)
        return decision

    @staticmethod
    def _namespace(call: Call) -> str:
        namespace = call.metadata.get(access.NAMESPACE, "")
        problem = namespace_problem(namespace)
        if problem is not None:
            raise GrpcError(StatusCode.INVALID_ARGUMENT, f"{access.NAMESPACE}: {problem}")
        return namespace

    # ---- unary (and server-streaming) calls ------------------------------------------------

    def _unary(self, name: str, request_type: type[Message],
               response_type: type[Message] | None, handler: Handler) -> Handler:
        async def guarded(call: Call) -> None:
            namespace = self._namespace(call)
            if not namespace and self.acl is None:
                await handler(call)
                return
            payload = await call.recv_one()
            request = parse_request(request_type, payload)
            if namespace:
                wrap_resources(request, namespace)
                payload = request.SerializeToString()
            refused = self._check(name, request, call, self.now_ms())
            if refused is not None:
                if response_type is None:
                    raise GrpcError(_grpc_code(refused), refused.remark)
                answer = response_type(status=status(access.refusal_code(refused),
                                                     refused.remark))
                await call.send(answer.SerializeToString())
                return
            given = [payload]

            async def next_request() -> bytes | None:
                return given.pop() if given else None

            await handler(_Guarded(call, next_request, response_type, namespace))
        return guarded

    # ---- Telemetry ---------------------------------------------------------------------------

    def _streaming(self, name: str, request_type: type[Message], handler: Handler) -> Handler:
        async def guarded(call: Call) -> None:
            namespace = self._namespace(call)
            if not namespace and self.acl is None:
                await handler(call)
                return
            started_ms = self.now_ms()

            async def next_request() -> bytes | None:
                payload = await call.recv()
                if payload is None:
                    return None
                request = parse_request(request_type, payload)
                if namespace:
                    wrap_resources(request, namespace)
                    payload = request.SerializeToString()
                refused = self._check(name, request, call, started_ms)
                if refused is not None:
                    raise GrpcError(_grpc_code(refused), refused.remark)
                return payload

            await handler(_Guarded(call, next_request, request_type, namespace))
        return guarded


def _grpc_code(decision: Decision) -> StatusCode:
    return (StatusCode.UNAUTHENTICATED if access.refusal_code(decision) == pb.Code.UNAUTHORIZED
            else StatusCode.PERMISSION_DENIED)


__all__ = ["GrpcGuard", "resources", "unwrap_resources", "wrap_resources"]
