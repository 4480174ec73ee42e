"""RocketMQ 5 push consumers over gRPC: QueryAssignment,
ForwardMessageToDeadLetterQueue and the renewal of invisibility while a push
consumer's listener runs (the trio edge of broker/grpc/renewals.py).

- QueryAssignment: the topic's brokers that serve gRPC and have readable
  queues (this broker from its own table, the others from the name servers'
  route), as broker/grpc/assignment.py builds them. A request naming no or an
  illegal topic is ILLEGAL_TOPIC, no or an illegal group ILLEGAL_CONSUMER_GROUP;
  a topic no broker knows TOPIC_NOT_FOUND; one with no readable queue
  FORBIDDEN "no readable queue" (as RocketMQ's proxy). A group this broker does
  not know is a normal group (the proxy's answer; nothing is created).
- ForwardMessageToDeadLetterQueue: the message the receipt handle names goes
  to ``%DLQ%<group>`` as a remoting consumer's send-back to the dead-letter
  queue does (SendService.send_back with a negative delay level: the topic is
  created as RocketMQ creates it), then its pop is acked. A handle that names
  nothing in flight is INVALID_RECEIPT_HANDLE; a send-back refused answers its
  send status.
- Renewal: a ReceiveMessage with ``auto_renew`` from a client registered as a
  PUSH_CONSUMER is invisible ``defaultInvisibleTimeMills`` and its handles are
  tracked; ``run`` every ``renewSchedulePeriodMillis`` changes the invisible
  time of those due (``renewAheadTimeMillis`` before it ends, by
  ``renewSliceTimeMillis``) and forgets the clients no longer in the client
  table (heart-beats stopped, NotifyClientTermination).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import structlog
import trio

from broker.config import BrokerConfig
from broker.grpc.assignment import BrokerQueues, assignments, route_brokers
from broker.grpc.clients import GrpcClients
from broker.grpc.convert import POP_CODES, SEND_CODES, status
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from broker.grpc.renewals import RenewTracker, Tracked
from broker.pop.core import Inflight
from broker.pop_processor import PopMessageProcessor
from broker.service.pop import PoppedMessage, PopStatus
from broker.service.send import SendOutcome
from broker.topic_validator import check_user_topic
from protocol.headers import ConsumerSendMsgBackRequestHeader
from protocol.names import group_problem
from protocol.route import TopicConfig, TopicRouteData
from protocol.subscription_group import SubscriptionGroupConfig

log = structlog.get_logger("broker.grpc.push")

Code = pb.Code
RENEW_RETRY_MS = 1_000  # a renewal refused for a passing reason is tried again after this
RENEWS_PER_PASS = 4_096
MESSAGE_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")


class GroupLookup(Protocol):
    def __call__(self, group: str) -> SubscriptionGroupConfig | None: ...


class Topics(Protocol):
    def get(self, topic: str) -> TopicConfig | None: ...


SendBack = Callable[[ConsumerSendMsgBackRequestHeader], SendOutcome]
# the send's outcome once its flush and slave waits are done
Stored = Callable[[SendOutcome], Awaitable[SendOutcome]]
# the name servers' route of a topic (None: unknown or not asked)
Routes = Callable[[str], Awaitable[TopicRouteData | None]]


def tracker_of(config: BrokerConfig) -> RenewTracker:
    return RenewTracker(ahead_ms=config.renew_ahead_time_millis,
                        slice_ms=config.renew_slice_time_millis,
                        max_total_ms=config.renew_max_time_millis,
                        max_per_client=config.renew_max_handles_per_client,
                        max_total=config.renew_max_handles)


class PushConsumers:
    def __init__(self, config: BrokerConfig, topics: Topics, groups: GroupLookup, *,
                 endpoint: Callable[[], tuple[str, int]], routes: Routes,
                 pop: PopMessageProcessor | None, clients: GrpcClients | None,
                 send_back: SendBack | None, stored: Stored,
                 tracker: RenewTracker | None = None) -> None:
        self.config = config
        self.topics = topics
        self.groups = groups
        self.endpoint = endpoint
        self.routes = routes
        self.pop = pop
        self.clients = clients
        self.send_back = send_back
        self.stored = stored
        self.tracker = tracker or tracker_of(config)
        self.renewed = 0  # renewals made since start
        self.streams: dict[str, int] = {}  # client id -> its open Telemetry streams
        self.log = log.bind(broker=config.broker_name)

    # ---- QueryAssignment --------------------------------------------------------------

    async def query_assignment(self, request: spb.QueryAssignmentRequest, call: Any
                               ) -> spb.QueryAssignmentResponse:
        topic, group = request.topic.name, request.group.name
        reason = check_user_topic(topic) if topic else "the request names no topic"
        if reason is not None:
            return spb.QueryAssignmentResponse(status=status(Code.ILLEGAL_TOPIC, reason))
        reason = group_problem(group) if group else "the request names no group"
        if reason is not None:
            return spb.QueryAssignmentResponse(
                status=status(Code.ILLEGAL_CONSUMER_GROUP, reason))
        brokers: list[BrokerQueues] = []
        own = self.topics.get(topic)
        if own is not None:
            host, port = self.endpoint()
            brokers.append(BrokerQueues(self.config.broker_name, self.config.broker_id,
                                        host, port, own))
        route = await self.routes(topic)
        if route is not None:
            brokers += route_brokers(route, topic, self.config.broker_name)
        if not brokers:
            return spb.QueryAssignmentResponse(
                status=status(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist"))
        cfg = self.groups(group)
        fifo = cfg is not None and cfg.consume_message_orderly
        resource = pb.Resource(name=topic, resource_namespace=request.topic.resource_namespace)
        found = assignments(resource, brokers, fifo)
        if not found:
            return spb.QueryAssignmentResponse(
                status=status(Code.FORBIDDEN, "no readable queue"))
        return spb.QueryAssignmentResponse(status=status(Code.OK), assignments=found)

    # ---- renewal ----------------------------------------------------------------------

    def renews_for(self, client_id: str, auto_renew: bool) -> bool:
        """Whether a receive's handles are renewed: asked (``auto_renew``) by a
        client registered as a push consumer."""
        if not auto_renew or self.clients is None:
            return False
        session = self.clients.sessions.get(client_id)
        return session is not None and session.settings is not None \
            and session.settings.client_type == pb.PUSH_CONSUMER

    def track(self, client_id: str, group: str, topic: str,
              messages: Sequence[PoppedMessage], visible_at_ms: int, now_ms: int) -> None:
        dropped = 0
        for m in messages:
            dropped += self.tracker.track(client_id, group, topic, m.handle, visible_at_ms,
                                          now_ms)
        if dropped:
            self.log.warning("renewal bounds reached: the oldest handles are no longer "
                             "renewed", dropped=dropped, client_id=client_id[:128],
                             tracked=len(self.tracker))

    def handle_for(self, group: str, handle: str) -> str:
        """The handle to act on for one a client sent (its newest after renewals);
        the message is no longer renewed."""
        return self.tracker.take(group, handle)

    def client_gone(self, client_id: str) -> None:
        n = self.tracker.forget_client(client_id)
        if n:
            self.log.info("client gone: its messages are no longer renewed",
                          client_id=client_id[:128], handles=n)

    def stream_opened(self, client_id: str) -> None:
        if client_id:
            self.streams[client_id] = self.streams.get(client_id, 0) + 1

    def stream_closed(self, client_id: str) -> None:
        """A Telemetry stream ended: its client is gone once it has none open."""
        left = self.streams.get(client_id, 0) - 1
        if left > 0:
            self.streams[client_id] = left
            return
        self.streams.pop(client_id, None)
        self.client_gone(client_id)

    async def renew_once(self) -> int:
        """One pass: forget the clients that left, renew what is due; the
        number renewed."""
        assert self.pop is not None
        if self.clients is not None:
            for cid in self.tracker.clients():
                if cid not in self.clients.sessions:
                    self.client_gone(cid)
        runner = self.pop.runner
        now = runner.now_ms()
        done = 0
        for t in self.tracker.due(now, RENEWS_PER_PASS):
            try:
                done += self._renew(t, now)
            except Exception as exc:  # this one is no longer renewed; the others are
                self.tracker.drop(t.key)
                self.log.error("renewal failed", error=repr(exc), group=t.group,
                               topic=t.topic, exc_info=exc)
        self.renewed += done
        if done:
            await runner.durable()
        return done

    def _renew(self, t: Tracked, now_ms: int) -> int:
        assert self.pop is not None
        outcome = self.pop.service.change_invisible(t.group, t.topic, t.handle,
                                                    self.tracker.slice_ms, now_ms)
        if outcome.status is PopStatus.OK:
            self.tracker.renewed(t, outcome.handle, outcome.visible_at_ms)
            return 1
        if outcome.status in (PopStatus.BUSY, PopStatus.SLAVE):
            self.tracker.retry_later(t, now_ms, RENEW_RETRY_MS)
        else:  # acked elsewhere, revived, group gone: nothing left to renew
            self.tracker.drop(t.key)
            self.log.debug("renewal refused: no longer renewed", status=outcome.status.name,
                           remark=outcome.remark, group=t.group, topic=t.topic)
        return 0

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The renewal loop, until cancelled."""
        task_status.started()
        if self.pop is None:
            await trio.sleep_forever()
        period = self.config.renew_schedule_period_millis / 1000
        while True:
            await trio.sleep(period)
            try:
                await self.renew_once()
            except Exception as exc:  # a failed pass: the next one tries again
                self.log.error("renewal pass failed", error=repr(exc), exc_info=exc)

    # ---- ForwardMessageToDeadLetterQueue ----------------------------------------------

    async def forward_to_dlq(self, request: spb.ForwardMessageToDeadLetterQueueRequest,
                             call: Any) -> spb.ForwardMessageToDeadLetterQueueResponse:
        assert self.pop is not None and self.send_back is not None
        answer = spb.ForwardMessageToDeadLetterQueueResponse
        group, topic = request.group.name, request.topic.name
        if not group:
            return answer(status=status(Code.ILLEGAL_CONSUMER_GROUP,
                                        "the request names no group"))
        if not request.receipt_handle:
            return answer(status=status(Code.INVALID_RECEIPT_HANDLE,
                                        "the request names no receipt handle"))
        handle = self.handle_for(group, request.receipt_handle)
        found = self.pop.service.find(group, topic, handle)
        if not isinstance(found, Inflight):
            return answer(status=status(POP_CODES[found.status], found.remark or
                                        found.status.value))
        # the id the client names is kept as the dead letter's ORIGIN_MESSAGE_ID when
        # it looks like one (it goes into the stored properties)
        origin = request.message_id if MESSAGE_ID.fullmatch(request.message_id) else None
        header = ConsumerSendMsgBackRequestHeader(
            offset=found.commit_log_offset, group=group, delay_level=-1, origin_msg_id=origin)
        outcome = self.send_back(header)
        if outcome.waiters:
            outcome = await self.stored(outcome)
        code = SEND_CODES.get(outcome.status, Code.INTERNAL_SERVER_ERROR)
        if code != Code.OK:
            return answer(status=status(code, outcome.remark or outcome.status.value))
        acked = self.pop.service.ack(group, topic, handle)
        await self.pop.runner.durable()
        if acked.status is not PopStatus.OK:  # stored in the DLQ; its pop is gone already
            self.log.warning("forwarded to the DLQ but its pop not acked", group=group,
                             status=acked.status.name, remark=acked.remark)
        self.log.info("message forwarded to the dead-letter queue", group=group,
                      topic=topic, message_id=request.message_id[:128],
                      attempt=request.delivery_attempt)
        return answer(status=status(Code.OK))


__all__ = ["PushConsumers", "tracker_of"]
