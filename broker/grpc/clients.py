"""gRPC clients in the broker's producer and consumer tables: Heartbeat,
Telemetry ``Settings`` and NotifyClientTermination as ClientService calls.

A RocketMQ 5 client says who it is in two places: its Telemetry stream's
``Settings`` (its type; a producer's topics; a consumer's group, subscriptions
and fifo flag) and each Heartbeat (its group and type). Every Heartbeat of a
client whose settings are known registers it through ``ClientService`` (the
remoting HEART_BEAT's service, broker/service/clients.py), as a remoting
heart-beat would:

- a producer under each topic its settings publish to (RocketMQ 5's proxy
  registers a gRPC producer under its topics' names: producers have no group)
  and under the Heartbeat's group when it names one;
- a consumer (simple: ``CONSUME_ACTIVELY``, push: ``CONSUME_PASSIVELY``;
  clustering, from the last offset) under its group with its subscriptions,
  so that consumerConnection, consumerProgress and the consumer lists show it
  and the group is created where ``autoCreateSubscriptionGroup`` allows (a
  group that does not exist otherwise is REFUSED, as for remoting).

The registration is built as a remoting heart-beat body and read by
``HeartbeatData.from_wire``: the same names and bounds (groups per heart-beat,
subscriptions per consumer, tags, lengths) hold for both transports. A
client's channel is a ``SessionChannel`` (broker/service/types.py): one per
client id, kept while the client heart-beats; at most ``max_sessions`` at once
(a new client past it is refused, a known one is still served).

While a client's Telemetry stream is open, its session holds the stream's
outbox (broker/grpc/telemetry.py): the broker reaches the client there (a
transaction check's RecoverOrphanedTransactionCommand); the stream's end
detaches it.

A client leaves at NotifyClientTermination, or when its heart-beats stop: the
broker's housekeeping drops table members silent past
``channelExpiredTimeout`` and then ``expire`` forgets their sessions.

Pure: times are passed in (seconds on the clock the housekeeping uses).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.telemetry import TelemetryOutbox
from broker.service.clients import ClientService, ClientStatus
from broker.service.types import SessionChannel
from protocol.client_data import CLIENT_ID_MAX_LENGTH, HeartbeatData
from protocol.errors import RemoteProtocolError

log = structlog.get_logger("broker.grpc.clients")

MAX_SESSIONS = 65536
Code = pb.Code
# what a registration came to, as a v2 status: (code, remark)
Answer = tuple[int, str]
# ClientService's outcomes of a heart-beat (a group missing or not allowed to
# broadcast is the remoting wire's NO_PERMISSION)
CLIENT_CODES = {ClientStatus.OK: Code.OK, ClientStatus.REFUSED: Code.FORBIDDEN}
CONSUMER_TYPES: dict[int, str] = {pb.SIMPLE_CONSUMER: "CONSUME_ACTIVELY", pb.PUSH_CONSUMER: "CONSUME_PASSIVELY"}
EXPRESSION_TYPES = {pb.FILTER_TYPE_UNSPECIFIED: "TAG", pb.TAG: "TAG", pb.SQL: "SQL92"}


@dataclass(slots=True)
class Session:
    """What is known of one gRPC client."""

    channel: SessionChannel
    settings: pb.Settings | None = None
    last_seen: float = 0.0
    # its open Telemetry stream's outbox (None: no stream open): how the broker
    # reaches it (a transaction check)
    outbox: TelemetryOutbox | None = None


class GrpcClients:
    def __init__(self, service: ClientService[Any], *, max_sessions: int = MAX_SESSIONS) -> None:
        self.service = service
        self.max_sessions = max_sessions
        self.sessions: dict[str, Session] = {}

    def _session(self, client_id: str, peer: str, now: float) -> Session | Answer:
        if not client_id or len(client_id) > CLIENT_ID_MAX_LENGTH:
            return Code.BAD_REQUEST, ("the call names no client id (header x-mq-client-id, "
                                      f"at most {CLIENT_ID_MAX_LENGTH} characters)")
        session = self.sessions.get(client_id)
        if session is None:
            if len(self.sessions) >= self.max_sessions:
                return Code.TOO_MANY_REQUESTS, (f"{self.max_sessions} gRPC clients are known "
                                                "already; try again later")
            session = Session(SessionChannel(client_id, peer), last_seen=now)
            self.sessions[client_id] = session
        session.last_seen = now
        return session

    def settings(self, client_id: str, peer: str, settings: pb.Settings, now: float
                 ) -> Answer:
        """A client's Telemetry settings: remembered; registered at once when
        it names a consumer group or topics (its next Heartbeat keeps it)."""
        session = self._session(client_id, peer, now)
        if not isinstance(session, Session):
            return session
        session.settings = settings
        ua = settings.user_agent
        session.channel.attrs.update(
            language=pb.Language.Name(ua.language) if ua.language in pb.Language.values()
            else "OTHER", version=0, sdkVersion=ua.version[:64])
        return self._register(session, None, settings.client_type, now)

    def heartbeat(self, client_id: str, peer: str, group: str | None, client_type: int,
                  now: float) -> Answer:
        """A Heartbeat: the client registered again (see the module's doc)."""
        session = self._session(client_id, peer, now)
        if not isinstance(session, Session):
            return session
        return self._register(session, group, client_type, now)

    def _register(self, session: Session, group: str | None, client_type: int, now: float
                  ) -> Answer:
        try:
            hb = HeartbeatData.from_wire(heartbeat_body(session.channel.client_id, group,
                                                        client_type, session.settings))
        except RemoteProtocolError as exc:
            return Code.BAD_REQUEST, str(exc)
        outcome = self.service.heart_beat(session.channel, hb, now)
        return CLIENT_CODES.get(outcome.status, Code.INTERNAL_SERVER_ERROR), outcome.remark or "OK"

    def attach(self, client_id: str, outbox: TelemetryOutbox) -> None:
        """The client's Telemetry stream (it sent Settings): the broker reaches it there."""
        session = self.sessions.get(client_id)
        if session is not None and not outbox.closed:
            session.outbox = outbox

    def detach(self, client_id: str, outbox: TelemetryOutbox) -> None:
        """That stream closed: the client cannot be reached until it opens another
        (a newer stream's outbox stays)."""
        session = self.sessions.get(client_id)
        if session is not None and session.outbox is outbox:
            session.outbox = None

    def outboxes(self, channels: Iterable[Any]) -> list[TelemetryOutbox]:
        """The open Telemetry outboxes of the gRPC clients among ``channels``
        (a producer group's members): the ones a check can be sent to."""
        out: list[TelemetryOutbox] = []
        for ch in channels:
            if not isinstance(ch, SessionChannel) or ch.closed:
                continue
            session = self.sessions.get(ch.client_id)
            if session is not None and session.channel is ch and session.outbox is not None \
                    and not session.outbox.closed:
                out.append(session.outbox)
        return out

    def terminate(self, client_id: str) -> bool:
        """NotifyClientTermination: the client leaves every group it was in."""
        session = self.sessions.pop(client_id, None)
        if session is None:
            return False
        session.channel.closed = True
        self.service.channel_closed(session.channel)
        log.info("gRPC client terminated", client_id=client_id[:128])
        return True

    def expire(self, now: float, expired_after: float) -> int:
        """Forget the sessions silent for more than ``expired_after`` s (their
        table entries expire in the same scan); returns how many."""
        gone = [cid for cid, s in self.sessions.items() if now - s.last_seen > expired_after]
        for cid in gone:
            session = self.sessions.pop(cid)
            session.channel.closed = True
            self.service.channel_closed(session.channel)
        return len(gone)


def heartbeat_body(client_id: str, group: str | None, client_type: int,
                   settings: pb.Settings | None) -> dict[str, Any]:
    """The remoting heart-beat body a gRPC client's Heartbeat amounts to
    (``HeartbeatData.from_wire`` checks it)."""
    body: dict[str, Any] = {"clientID": client_id, "producerDataSet": [],
                            "consumerDataSet": []}
    if settings is not None and settings.HasField("client_type") and not client_type:
        client_type = settings.client_type
    if client_type == pb.PRODUCER:
        names = [t.name for t in settings.publishing.topics] if settings is not None else []
        if group:
            names.append(group)
        body["producerDataSet"] = [{"groupName": n} for n in dict.fromkeys(names)]
    elif client_type in CONSUMER_TYPES:
        sub = settings.subscription if settings is not None else None
        name = group or (sub.group.name if sub is not None and sub.HasField("group") else "")
        if not name:
            return body
        subs = [{"topic": e.topic.name, "subString": e.expression.expression or "*",
                 "expressionType": EXPRESSION_TYPES.get(e.expression.type, "TAG"),
                 "tagsSet": _tags(e.expression)} for e in (sub.subscriptions if sub else [])]
        body["consumerDataSet"] = [{
            "groupName": name, "consumeType": CONSUMER_TYPES[client_type],
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": subs}]
    return body


def _tags(expression: pb.FilterExpression) -> list[str]:
    if expression.type == pb.SQL:
        return []
    text = expression.expression.strip()
    if not text or text == "*":
        return []
    return [t.strip() for t in text.split("||") if t.strip()]


__all__ = ["CLIENT_CODES", "MAX_SESSIONS", "Answer", "GrpcClients", "Session", "heartbeat_body"]
