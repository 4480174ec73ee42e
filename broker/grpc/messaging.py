"""apache.rocketmq.v2.MessagingService: protobuf in, broker service, protobuf out.

The handlers only map (broker/grpc/convert.py) and call the broker's services:

- QueryRoute: the topic's queues on every broker of its route that serves gRPC:
  this broker's from its own table, the others' from the name servers' route,
  where each broker's registration carried its gRPC port (``grpcPorts``); a
  broker's endpoint is its address's host and that port. Each queue has its
  permission and explicit ``accept_message_types`` (this broker's: its topic's
  ``message.type``; the others': all, their attributes are not in the route). An unknown topic is created
  here as a send would create it when ``autoCreateTopicEnable`` (5.x clients look
  a topic up before sending), else TOPIC_NOT_FOUND. Name servers that do not
  answer within ROUTE_LOOKUP_S leave the answer to this broker's queues.
- SendMessage: a message whose type (``sent_type``: FIFO with a message group,
  DELAY with a delivery time, else NORMAL) is not its topic's ``message.type``
  (protocol/topic_attributes.py; unset or MIXED: any) is refused
  MESSAGE_PROPERTY_CONFLICT_WITH_TYPE while ``enableTopicMessageTypeCheck``
  (RocketMQ 5's proxy check); the others each through
  ``SendService.send_single``, on a queue the server picks (a message group's
  always the same one; others at random), its answer once stored (and flushed
  or replicated where the role asks for it).
- ReceiveMessage, AckMessage, ChangeInvisibleDuration: POP consumption through
  PopService (broker/service/pop.py) and its edge (``PopMessageProcessor.receive``,
  the long poll and the wait for the in-flight log's fsync). ReceiveMessage
  streams a status, then (when found) the messages and a ``delivery_timestamp``;
  its long poll is the request's ``long_polling_timeout`` (at most
  ``longPollingMaxSuspendMillis``) cut to end LONG_POLL_RESERVE_MS before the
  call's deadline, never refused for it. It pops from any of the topic's queues on
  this broker (as RocketMQ's proxy: the queue named only picks the broker).
  AckMessage answers each entry's status; ChangeInvisibleDuration a new handle
  (the old one is then INVALID_RECEIPT_HANDLE). TAG filters, and SQL92 with
  enablePropertyFilter (else UNSUPPORTED), as PopService filters.
- Heartbeat, NotifyClientTermination, Telemetry ``Settings``: the client joins
  (and leaves) the broker's producer and consumer tables through ClientService,
  as a remoting heart-beat does (broker/grpc/clients.py): consumerConnection,
  producerConnection and consumerProgress show it; it expires when its
  heart-beats stop. Without a client table (``clients`` None) they answer OK.
- Telemetry: every ``Settings`` the client sends is answered at once with a
  complete one (publishing: max body size and the producers' backoff policy;
  subscription: receive batch size, long-polling timeout, the group's fifo flag (a FIFO
  group's ReceiveMessage pops orderly: a queue's messages one batch at a time)
  and retry policy (broker/grpc/assignment.py); metrics off).
- QueryAssignment, ForwardMessageToDeadLetterQueue and the renewal of a push
  consumer's invisibility (a ReceiveMessage with ``auto_renew``; AckMessage and
  ChangeInvisibleDuration act on the newest handle of a renewed message): see
  broker/grpc/push.py.
- Telemetry streams: while one is open the client's session holds its outbox
  (broker/grpc/telemetry.py, bounded): a transaction check reaches a gRPC
  producer there as a ``RecoverOrphanedTransactionCommand``.
- Transactions (broker/grpc/transactions.py): a TRANSACTION message is stored
  as a half message of the producer group named after its topic, its answer's
  ``transaction_id`` saying where it is; EndTransaction commits, rolls back or
  notes "unknown" through TransactionService, as END_TRANSACTION does (without
  a ``transactions`` service: UNIMPLEMENTED).
- Everything else ends UNIMPLEMENTED with a message saying so.

A response's status lives in its body (20000 OK, 4xxxx the client's fault, 5xxxx
ours) as RocketMQ answers; the gRPC status is OK unless the call itself failed.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import structlog
import trio
from google.protobuf.message import Message

from broker.config import BrokerConfig
from broker.grpc.assignment import retry_policy, route_brokers
from broker.grpc.clients import GrpcClients
from broker.grpc.convert import (
    FILTER_TYPES,
    POP_CODES,
    SEND_CODES,
    Refusal,
    duration_ms,
    message_queues,
    queue_for_group,
    sent_type,
    status,
    to_pb_message,
    to_send_item,
)
from broker.grpc.framing import GrpcError, StatusCode, parse_request
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from broker.grpc.push import GroupLookup, PushConsumers, SendBack
from broker.grpc.recall import Recall, recall_answer
from broker.grpc.server import Call, Handler, Method
from broker.grpc.telemetry import TelemetryOutbox
from broker.grpc.transactions import end_transaction, transaction_token
from broker.pop_processor import PopMessageProcessor
from broker.service.pop import MAX_INVISIBLE_MS, MIN_INVISIBLE_MS, PopRequest, PopStatus
from broker.service.send import STORE_STATUS, UNKNOWN_STORE_STATUS, SendOutcome, SendService
from broker.service.transactions import TransactionService
from broker.store.offset_waiters import AllDone
from broker.topic_validator import check_user_topic
from protocol.names import InvalidNameError
from protocol.record import decode_msg_id
from protocol.route import TopicConfig, TopicRouteData
from protocol.subscription_group import SubscriptionGroupConfig
from protocol.topic_attributes import topic_message_type, type_conflict

log = structlog.get_logger("broker.grpc")

M = TypeVar("M", bound=Message)
SERVICE = "apache.rocketmq.v2.MessagingService"
Code = pb.Code
# the producer group a gRPC send is stored under (5.x producers have none):
# RocketMQ's MixAll.CLIENT_INNER_PRODUCER_GROUP
GRPC_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
MAX_MESSAGES_PER_SEND = 1024
# what Telemetry's Settings tell clients (RocketMQ 5 proxy's defaults)
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_S = 20
BACKOFF_MAX_ATTEMPTS = 3
BACKOFF_INITIAL_MS = 10
BACKOFF_MAX_MS = 1000
REQUEST_TIMEOUT_S = 3
ROUTE_LOOKUP_S = 3.0
# a long poll ends this long before the call's deadline (RocketMQ proxy's
# longPollingReserveTimeInMillis), half the time left when less remains
LONG_POLL_RESERVE_MS = 1000
DEFAULT_INVISIBLE_MS = 30_000  # a ReceiveMessage that names no invisible duration
MAX_ACK_ENTRIES = 1024
# RPCs served by someone else's work later; they answer UNIMPLEMENTED until then
NOT_YET = {
    "PullMessage": "PullMessage is not served over gRPC yet: pull with the remoting SDK",
    "UpdateOffset": "UpdateOffset is not served over gRPC yet",
    "GetOffset": "GetOffset is not served over gRPC yet",
    "QueryOffset": "QueryOffset is not served over gRPC yet",
    "SyncLiteSubscription": "lite topics (SyncLiteSubscription) are not supported",
}


class GrpcTopics(Protocol):
    """The topic table's look-up and the creation a first send would make."""

    def get(self, topic: str) -> TopicConfig | None: ...

    def create_topic_in_send_message_method(
        self, topic: str, default_topic: str, queue_nums: int) -> TopicConfig | None: ...


# the name servers' route of a topic (None: they know no such topic); raises when none answers
RouteLookup = Callable[[str], Awaitable[TopicRouteData | None]]


class MessagingService:
    """The handlers. ``endpoint()`` is this broker's gRPC (host, port), known once
    the server is bound; ``on_topics_changed`` tells the name servers of a topic
    created here."""

    def __init__(self, config: BrokerConfig, send: SendService, topics: GrpcTopics, *,
                 endpoint: Callable[[], tuple[str, int]],
                 on_topics_changed: Callable[[], None],
                 routes: RouteLookup | None = None,
                 pop: PopMessageProcessor | None = None,
                 clients: GrpcClients | None = None,
                 recall: Recall | None = None,
                 groups: GroupLookup | None = None,
                 send_back: SendBack | None = None,
                 transactions: TransactionService | None = None,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.config = config
        self.routes = routes
        self.pop = pop
        self.clients = clients
        self.recall = recall
        self.transactions = transactions
        self.send_service = send
        self.topics = topics
        self.endpoint = endpoint
        self.on_topics_changed = on_topics_changed
        self.now_ms = now_ms
        self.delay_levels = config.delay_level_table()  # retry back-off (push consumers)
        self.groups: GroupLookup = groups or (lambda _group: None)
        self.push = PushConsumers(config, topics, self.groups, endpoint=endpoint,
                                  routes=self._route, pop=pop, clients=clients,
                                  send_back=send_back, stored=_stored)

    def methods(self) -> dict[str, Method]:
        table: dict[str, Method] = {
            "QueryRoute": Method(self._unary(spb.QueryRouteRequest, self.query_route)),
            "Heartbeat": Method(self._unary(spb.HeartbeatRequest, self.heartbeat)),
            "SendMessage": Method(self.send_message),
            "NotifyClientTermination": Method(
                self._unary(spb.NotifyClientTerminationRequest, self.notify_termination)),
            "Telemetry": Method(self.telemetry, streaming=True),
            "QueryAssignment": Method(
                self._unary(spb.QueryAssignmentRequest, self.push.query_assignment)),
        }
        if self.pop is not None:
            table["ReceiveMessage"] = Method(self.receive_message, waits=True)
            table["AckMessage"] = Method(self._unary(spb.AckMessageRequest, self.ack_message))
            table["ChangeInvisibleDuration"] = Method(
                self._unary(spb.ChangeInvisibleDurationRequest, self.change_invisible))
        else:
            for name in ("ReceiveMessage", "AckMessage", "ChangeInvisibleDuration"):
                table[name] = Method(_unimplemented(
                    f"POP consumption ({name}) is not served by this broker"))
        recall = self.recall
        table["RecallMessage"] = Method(
            self._unary(spb.RecallMessageRequest, lambda r, _c: recall_answer(recall, r))
            if recall is not None else _unimplemented("RecallMessage is not served here"))
        name = "ForwardMessageToDeadLetterQueue"
        if self.pop is not None and self.push.send_back is not None:
            table[name] = Method(self._unary(spb.ForwardMessageToDeadLetterQueueRequest,
                                             self.push.forward_to_dlq))
        else:
            table[name] = Method(_unimplemented(f"{name} is not served by this broker"))
        if self.transactions is not None:
            table["EndTransaction"] = Method(
                self._unary(spb.EndTransactionRequest, self.end_transaction))
        else:
            table["EndTransaction"] = Method(_unimplemented(
                "transactions (EndTransaction) are not served by this broker"))
        for name, why in NOT_YET.items():
            table[name] = Method(_unimplemented(why))
        return {f"/{SERVICE}/{name}": m for name, m in table.items()}

    @staticmethod
    def _unary(request_type: type[Message], answer: Callable[[Any, Call], Any]) -> Handler:
        async def handler(call: Call) -> None:
            request = parse_request(request_type, await call.recv_one())
            response = answer(request, call)
            if inspect.isawaitable(response):
                response = await response
            await call.send(response.SerializeToString())
        return handler

    # ---- routes and liveness ----------------------------------------------------------

    def _topic(self, name: str) -> TopicConfig | None:
        cfg = self.topics.get(name)
        if cfg is None and self.config.auto_create_topic_enable:
            try:
                cfg = self.topics.create_topic_in_send_message_method(
                    name, "TBW102", self.config.default_topic_queue_nums)
            except InvalidNameError:
                return None
            if cfg is not None:
                self.on_topics_changed()
        return cfg

    async def query_route(self, request: spb.QueryRouteRequest, call: Call
                          ) -> spb.QueryRouteResponse:
        name = request.topic.name
        namespace = request.topic.resource_namespace
        reason = check_user_topic(name) if name else "the request names no topic"
        if reason is not None:
            return spb.QueryRouteResponse(status=status(Code.ILLEGAL_TOPIC, reason))
        cfg = self._topic(name)
        queues: list[pb.MessageQueue] = []
        if cfg is not None:
            host, port = self.endpoint()
            queues += message_queues(cfg, self.config.broker_name, self.config.broker_id,
                                     host, port, namespace, cfg.attributes)
        route = await self._route(name)
        if route is not None:
            queues += others_queues(route, name, self.config.broker_name, namespace)
        if not queues:
            return spb.QueryRouteResponse(
                status=status(Code.TOPIC_NOT_FOUND, f"topic {name!r} does not exist"))
        return spb.QueryRouteResponse(status=status(Code.OK), message_queues=queues)

    async def _route(self, topic: str) -> TopicRouteData | None:
        if self.routes is None:
            return None
        try:
            with trio.move_on_after(ROUTE_LOOKUP_S):
                return await self.routes(topic)
        except Exception as exc:  # the name servers are down: this broker's queues only
            log.warning("route look-up failed: answering this broker's queues only",
                        topic=topic, error=str(exc))
        return None

    def heartbeat(self, request: spb.HeartbeatRequest, call: Call) -> spb.HeartbeatResponse:
        if self.clients is None:
            return spb.HeartbeatResponse(status=status(Code.OK))
        group = request.group.name if request.HasField("group") else None
        code, remark = self.clients.heartbeat(call.client_id, call.peer, group or None,
                                              request.client_type, trio.current_time())
        return spb.HeartbeatResponse(status=status(code, remark))

    def notify_termination(self, request: spb.NotifyClientTerminationRequest, call: Call
                           ) -> spb.NotifyClientTerminationResponse:
        log.debug("gRPC client terminated", client_id=call.client_id[:128], peer=call.peer)
        if self.clients is not None:
            self.clients.terminate(call.client_id)
        return spb.NotifyClientTerminationResponse(status=status(Code.OK))

    # ---- send -------------------------------------------------------------------------

    async def send_message(self, call: Call) -> None:
        request = parse_request(spb.SendMessageRequest, await call.recv_one())
        if not request.messages:
            answer = spb.SendMessageResponse(status=status(Code.BAD_REQUEST, "no message to send"))
        elif len(request.messages) > MAX_MESSAGES_PER_SEND:
            answer = spb.SendMessageResponse(status=status(
                Code.BAD_REQUEST, f"more than {MAX_MESSAGES_PER_SEND} messages in one send"))
        else:
            entries = [await self._send_one(msg, call) for msg in request.messages]
            codes = {e.status.code for e in entries}
            if len(entries) == 1:
                top = entries[0].status
            elif codes == {Code.OK}:
                top = status(Code.OK)
            else:
                top = status(Code.MULTIPLE_RESULTS, "the messages had different results")
            answer = spb.SendMessageResponse(status=top, entries=entries)
        await call.send(answer.SerializeToString())
        self.send_service.after_answer()

    async def _send_one(self, msg: pb.Message, call: Call) -> spb.SendResultEntry:
        cfg = self.topics.get(msg.topic.name) if msg.topic.name else None
        try:
            item = to_send_item(msg, producer_group=GRPC_PRODUCER_GROUP,
                                max_size=self.config.max_message_size, now_ms=self.now_ms(),
                                max_delay_ms=self.config.timer_max_delay_sec * 1000)
        except Refusal as refusal:
            return spb.SendResultEntry(status=status(refusal.code, refusal.message))
        if cfg is not None and self.config.enable_topic_message_type_check:
            conflict = type_conflict(topic_message_type(cfg.attributes), sent_type(msg))
            if conflict is not None:
                return spb.SendResultEntry(status=status(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, conflict))
        if item.message_group is not None and cfg is not None:
            item.header.queue_id = queue_for_group(item.message_group, cfg.write_queue_nums)
        outcome = self.send_service.send_single(item.header, item.body, call.peer or "0.0.0.0:0")
        if outcome.waiters:
            outcome = await _stored(outcome)
        code = SEND_CODES.get(outcome.status, Code.INTERNAL_SERVER_ERROR)
        if code != Code.OK:
            return spb.SendResultEntry(status=status(code, outcome.remark or outcome.status.value))
        if item.message_type == pb.TRANSACTION:
            outcome.transaction_id = half_token(outcome)
        return spb.SendResultEntry(status=status(Code.OK), message_id=item.message_id,
                                   transaction_id=outcome.transaction_id or "",
                                   offset=outcome.queue_offset,
                                   recall_handle=outcome.recall_handle or "")

    # ---- POP consumption --------------------------------------------------------------

    def poll_ms(self, request: spb.ReceiveMessageRequest, deadline: float) -> int:
        """The long poll: the request's, cut to end before the call's ``deadline``
        (trio time); 0 when too little time is left, never an error."""
        wanted = duration_ms(request.long_polling_timeout) \
            if request.HasField("long_polling_timeout") else 0
        left = (deadline - trio.current_time()) * 1000
        if left == float("inf"):
            return max(0, wanted)
        reserve = min(LONG_POLL_RESERVE_MS, left / 2)
        return max(0, min(wanted, int(left - reserve)))

    async def receive_message(self, call: Call) -> None:
        assert self.pop is not None
        request = parse_request(spb.ReceiveMessageRequest, await call.recv_one())
        group = request.group.name
        queue = request.message_queue
        topic = queue.topic.name
        invisible = duration_ms(request.invisible_duration) \
            if request.HasField("invisible_duration") else DEFAULT_INVISIBLE_MS
        if request.auto_renew:  # the server keeps it invisible (RocketMQ 5's proxy)
            invisible = self.config.default_invisible_time_mills
        filter_type = FILTER_TYPES.get(request.filter_expression.type)
        refused: pb.Status | None = None
        if not group:
            refused = status(Code.ILLEGAL_CONSUMER_GROUP, "the request names no group")
        elif not topic:
            refused = status(Code.ILLEGAL_TOPIC, "the request names no topic")
        elif queue.broker.name and queue.broker.name != self.config.broker_name:
            refused = status(Code.BAD_REQUEST, f"queue of broker {queue.broker.name[:64]!r}, "
                                               f"not of {self.config.broker_name}")
        elif filter_type is None:
            refused = status(Code.ILLEGAL_FILTER_EXPRESSION, "unknown filter type "
                                                             f"{request.filter_expression.type}")
        elif not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
            refused = status(Code.ILLEGAL_INVISIBLE_TIME, "the invisible duration must be within "
                                                          f"{MIN_INVISIBLE_MS}..{MAX_INVISIBLE_MS} ms")
        if refused is not None:
            await call.send(spb.ReceiveMessageResponse(status=refused).SerializeToString())
            return
        assert filter_type is not None
        req = PopRequest(group, topic, -1, request.batch_size or RECEIVE_BATCH_SIZE, invisible,
                         request.filter_expression.expression or "*", filter_type)
        outcome = await self.pop.receive(req, self.poll_ms(request, call.deadline))
        if outcome is None:
            top = status(Code.TOO_MANY_REQUESTS, self.pop.polling_full_remark())
        elif outcome.status is PopStatus.FOUND:
            top = status(Code.OK)
        elif outcome.status is PopStatus.NO_MESSAGE:
            top = status(Code.MESSAGE_NOT_FOUND, "no new message")
        else:
            top = status(POP_CODES[outcome.status], outcome.remark or outcome.status.value)
        await call.send(spb.ReceiveMessageResponse(status=top).SerializeToString())
        if outcome is None or outcome.status is not PopStatus.FOUND:
            return
        if self.push.renews_for(call.client_id, request.auto_renew):
            self.push.track(call.client_id, group, topic, outcome.messages,
                            outcome.pop_time_ms + outcome.invisible_time_ms,
                            outcome.pop_time_ms)
        namespace = queue.topic.resource_namespace
        for popped in outcome.messages:
            message = to_pb_message(popped, outcome.invisible_time_ms, namespace)
            await call.send(spb.ReceiveMessageResponse(message=message).SerializeToString())
        done = spb.ReceiveMessageResponse()
        done.delivery_timestamp.FromMilliseconds(self.now_ms())
        await call.send(done.SerializeToString())

    async def ack_message(self, request: spb.AckMessageRequest, call: Call
                          ) -> spb.AckMessageResponse:
        assert self.pop is not None
        group, topic = request.group.name, request.topic.name
        if not group:
            return spb.AckMessageResponse(
                status=status(Code.ILLEGAL_CONSUMER_GROUP, "the request names no group"))
        if not request.entries:
            return spb.AckMessageResponse(status=status(Code.BAD_REQUEST, "no entry to ack"))
        if len(request.entries) > MAX_ACK_ENTRIES:
            return spb.AckMessageResponse(status=status(
                Code.BAD_REQUEST, f"more than {MAX_ACK_ENTRIES} entries in one ack"))
        entries: list[spb.AckMessageResultEntry] = []
        for entry in request.entries:
            handle = self.push.handle_for(group, entry.receipt_handle)
            outcome = self.pop.service.ack(group, topic, handle)
            entries.append(spb.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                status=_handle_status(outcome.status, outcome.remark)))
        await self.pop.runner.durable()
        codes = {e.status.code for e in entries}
        if len(entries) == 1:
            top = entries[0].status
        elif codes == {Code.OK}:
            top = status(Code.OK)
        else:
            top = status(Code.MULTIPLE_RESULTS, "the entries had different results")
        return spb.AckMessageResponse(status=top, entries=entries)

    async def change_invisible(self, request: spb.ChangeInvisibleDurationRequest, call: Call
                               ) -> spb.ChangeInvisibleDurationResponse:
        assert self.pop is not None
        group, topic = request.group.name, request.topic.name
        if not group:
            return spb.ChangeInvisibleDurationResponse(
                status=status(Code.ILLEGAL_CONSUMER_GROUP, "the request names no group"))
        invisible = duration_ms(request.invisible_duration)
        handle = self.push.handle_for(group, request.receipt_handle)
        outcome = self.pop.service.change_invisible(group, topic, handle,
                                                    invisible, self.pop.runner.now_ms())
        await self.pop.runner.durable()
        if outcome.status is PopStatus.ILLEGAL_REQUEST:
            return spb.ChangeInvisibleDurationResponse(
                status=status(Code.ILLEGAL_INVISIBLE_TIME, outcome.remark or "bad duration"))
        answer = spb.ChangeInvisibleDurationResponse(
            status=_handle_status(outcome.status, outcome.remark))
        if outcome.status is PopStatus.OK:
            answer.receipt_handle = outcome.handle
        return answer

    # ---- telemetry --------------------------------------------------------------------

    async def telemetry(self, call: Call) -> None:
        self.push.stream_opened(call.client_id)
        try:
            await self._telemetry(call)
        finally:  # the stream closed: a push consumer's messages are no longer renewed
            self.push.stream_closed(call.client_id)

    async def _telemetry(self, call: Call) -> None:
        """Settings answered at once; what the broker sends unasked (a transaction
        check) written from the stream's outbox, which the client's session holds
        while the stream is open."""
        outbox = TelemetryOutbox()
        lock = trio.Lock()  # the settings answers and the outbox's commands, one at a time

        async def write(payload: bytes) -> None:
            async with lock:
                await call.send(payload)

        refused: GrpcError | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(outbox.pump, write)
                try:
                    await self._telemetry_commands(call, outbox, write)
                except GrpcError as exc:
                    refused = exc
                nursery.cancel_scope.cancel()
        finally:
            outbox.close()
            if self.clients is not None:
                self.clients.detach(call.client_id, outbox)
        if refused is not None:
            raise refused

    async def _telemetry_commands(self, call: Call, outbox: TelemetryOutbox,
                                  write: Callable[[bytes], Awaitable[None]]) -> None:
        while True:
            payload = await call.recv()
            if payload is None:
                return
            command = parse_request(spb.TelemetryCommand, payload)
            if command.WhichOneof("command") == "settings":
                code: int = Code.OK
                remark = "OK"
                if self.clients is not None:
                    code, remark = self.clients.settings(call.client_id, call.peer,
                                                         command.settings, trio.current_time())
                    if code == Code.OK:
                        self.clients.attach(call.client_id, outbox)
                reply = spb.TelemetryCommand(status=status(code, remark),
                                             settings=self.settings_for(command.settings))
                await write(reply.SerializeToString())
            # thread stack traces and verify results are not asked for: nothing to do

    # ---- transactions -----------------------------------------------------------------

    def end_transaction(self, request: spb.EndTransactionRequest, call: Call
                        ) -> spb.EndTransactionResponse:
        assert self.transactions is not None
        return end_transaction(self.transactions, request, call.peer or "0.0.0.0:0")

    def settings_for(self, given: pb.Settings) -> pb.Settings:
        """A complete Settings for a client's: its own fields echoed, ours filled in."""
        out = pb.Settings()
        out.CopyFrom(given)
        if not given.HasField("request_timeout"):
            out.request_timeout.FromSeconds(REQUEST_TIMEOUT_S)
        if given.WhichOneof("pub_sub") == "subscription":
            # the group's policy and fifo flag (RocketMQ 5 proxy's mergeSubscriptionData;
            # a group not known here: a default group's)
            name = given.subscription.group.name
            group = (self.groups(name) if name else None) or SubscriptionGroupConfig(
                name or "-", retry_max_times=self.config.max_reconsume_times)
            out.backoff_policy.CopyFrom(retry_policy(group, self.delay_levels))
            out.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
            out.subscription.long_polling_timeout.FromSeconds(LONG_POLLING_TIMEOUT_S)
            out.subscription.fifo = group.consume_message_orderly
        else:
            attempts = given.backoff_policy.max_attempts if given.HasField("backoff_policy") \
                and given.backoff_policy.max_attempts > 0 else BACKOFF_MAX_ATTEMPTS
            policy = pb.RetryPolicy(max_attempts=attempts)
            policy.exponential_backoff.initial.FromMilliseconds(BACKOFF_INITIAL_MS)
            policy.exponential_backoff.max.FromMilliseconds(BACKOFF_MAX_MS)
            policy.exponential_backoff.multiplier = 2.0
            out.backoff_policy.CopyFrom(policy)
            out.publishing.max_body_size = self.config.max_message_size
            out.publishing.validate_message_type = True
        out.metric.CopyFrom(pb.Metric(on=False))
        return out


def others_queues(route: TopicRouteData, topic: str, own_broker: str,
                  namespace: str) -> list[pb.MessageQueue]:
    """The queues of the brokers in ``route`` but ``own_broker`` that serve gRPC: each
    broker name's master when it serves gRPC, else its lowest-id member that does."""
    out: list[pb.MessageQueue] = []
    for b in route_brokers(route, topic, own_broker):
        out += message_queues(b.config, b.broker_name, b.broker_id, b.host, b.port, namespace)
    return out


def half_token(outcome: SendOutcome) -> str:
    """A stored half message's transaction id for its gRPC producer: where it is
    (broker/grpc/transactions.py)."""
    assert outcome.msg_id is not None
    _store, commit_log_offset = decode_msg_id(outcome.msg_id)
    return transaction_token(commit_log_offset, outcome.queue_offset)


async def _stored(outcome: SendOutcome) -> SendOutcome:
    """The outcome once its flush and slave waits are done; the worst decides."""
    done = trio.Event()
    all_done = AllDone(outcome.waiters or [])
    all_done.on_done(lambda _d: done.set())
    await done.wait()
    if all_done.status is not None:
        st, remark = STORE_STATUS.get(all_done.status, UNKNOWN_STORE_STATUS)
        if remark is not None:
            outcome.status, outcome.remark = st, remark
    return outcome


def _handle_status(st: PopStatus, remark: str | None) -> pb.Status:
    """An ack's or change-invisible's outcome as a v2 status."""
    if st is PopStatus.OK:
        return status(Code.OK)
    return status(POP_CODES[st], remark or st.value)


def _unimplemented(why: str) -> Handler:
    async def handler(call: Call) -> None:
        raise GrpcError(StatusCode.UNIMPLEMENTED, why)
    return handler


__all__ = ["GRPC_PRODUCER_GROUP", "NOT_YET", "SERVICE", "GrpcTopics", "MessagingService"]
