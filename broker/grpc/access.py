"""ACL on the gRPC port, the part with no I/O: RocketMQ 5's ``authorization`` header,
its signature and freshness, and what each RPC needs of the plain ACL accounts.

A RocketMQ 5 client signs every call with its metadata:

    x-mq-date-time: 20261206T213000Z
    authorization: MQv2-HMAC-SHA1 Credential=<AK>, SignedHeaders=x-mq-date-time, Signature=<hex>

where the signature is HMAC-SHA1 over the date-time text (UTF-8) keyed with the secret
key (UTF-8), in hex (the official clients write it lower-case; compared here without
regard to case). ``Credential=`` empty is an anonymous call (the Python client sends the
header even without credentials).

``decide`` checks a call against the accounts of ``plain_acl.yml`` with the remoting
port's steps (acl/plain.py ``AclConfig.decide_needs``): a global white address passes
whatever it sends; an anonymous or unknown account is refused; an account's white
address passes; then the signature, which also needs its ``x-mq-date-time`` within
``window_ms`` of the broker's clock either way (a captured header is good for that
long only); then the resources the RPC names (``RULES``, RocketMQ 5's
DefaultAuthorizationContextBuilder, one row per RPC):

- SendMessage, EndTransaction, RecallMessage: PUB on the topic (each message's);
- ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue,
  QueryAssignment, PullMessage and the offset RPCs: SUB on the topic and the group;
- QueryRoute: PUB or SUB on the topic (a producer and a consumer both look it up);
- Heartbeat: SUB on the group for a consumer (a producer names no resource);
- NotifyClientTermination: SUB on the group when one is named;
- Telemetry: the Settings a client sends: PUB on each publishing topic, SUB on the
  subscription's group and each subscribed topic (other commands: the account only);
- SyncLiteSubscription: SUB on the group and the topic.

A refusal is answered in the response's status as RocketMQ's proxy does:
UNAUTHORIZED (40100) when the caller is not authenticated (no, unknown or malformed
credentials, a wrong or stale signature), FORBIDDEN (40300) when the account lacks
the permission; a Telemetry stream (no response to carry it) ends with the gRPC status
UNAUTHENTICATED or PERMISSION_DENIED.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from google.protobuf.message import Message

from acl import plain
from acl.plain import AclConfig, Decision, Need, Perm, group_resource
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
NAMESPACE = "x-mq-namespace"
SCHEME = "MQv2-HMAC-SHA1"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
# bounds of the headers read (h2 bounds the whole header list at 64 KiB)
MAX_AUTHORIZATION_CHARS = 1024
MAX_DATE_TIME_CHARS = 32
DEFAULT_WINDOW_MS = 15 * 60 * 1000

# Decision.reason of the refusals this module adds (beside acl/plain.py's)
MALFORMED = plain.BAD_SIGNATURE
STALE = plain.BAD_SIGNATURE


class AuthorizationError(ValueError):
    """An ``authorization`` header that is not RocketMQ 5's form."""


@dataclass(frozen=True, slots=True)
class Authorization:
    access_key: str  # "": anonymous
    signed_headers: tuple[str, ...]
    signature: str


# the official clients' exact form: one match, no splitting
_USUAL = re.compile(r"MQv2-HMAC-SHA1 Credential=([^,/\s]+), SignedHeaders=x-mq-date-time, "
                    r"Signature=([0-9a-fA-F]{1,128})")


@lru_cache(maxsize=1024)  # a client signs once a second: its calls share a header
def parse_authorization(value: str) -> Authorization:
    """``MQv2-HMAC-SHA1 Credential=<AK>, SignedHeaders=<h;h>, Signature=<hex>``.
    Raises AuthorizationError saying what is wrong."""
    if len(value) > MAX_AUTHORIZATION_CHARS:  # before the cache keeps it
        raise AuthorizationError(f"the authorization header is longer than "
                                 f"{MAX_AUTHORIZATION_CHARS} characters")
    usual = _USUAL.fullmatch(value)
    if usual is not None:
        return Authorization(usual[1], (DATE_TIME,), usual[2].lower())
    scheme, _, rest = value.strip().partition(" ")
    if scheme != SCHEME:
        raise AuthorizationError(f"the authorization scheme must be {SCHEME}")
    parts: dict[str, str] = {}
    for item in rest.split(","):
        key, sep, val = item.strip().partition("=")
        if not sep or key not in ("Credential", "SignedHeaders", "Signature") or key in parts:
            raise AuthorizationError("the authorization header must be Credential=<access "
                                     "key>, SignedHeaders=x-mq-date-time, Signature=<hex>")
        parts[key] = val.strip()
    if "Credential" not in parts:
        raise AuthorizationError("the authorization header names no Credential")
    access_key = parts["Credential"].split("/", 1)[0]  # a Credential may carry a scope after '/'
    if not access_key:
        return Authorization("", (), "")
    headers = tuple(h.strip().lower() for h in parts.get("SignedHeaders", "").split(";")
                    if h.strip())
    if headers != (DATE_TIME,):
        raise AuthorizationError(f"SignedHeaders must be {DATE_TIME}")
    signature = parts.get("Signature", "")
    if not signature or len(signature) > 128 or \
            any(c not in "0123456789abcdefABCDEF" for c in signature):
        raise AuthorizationError("the Signature must be hexadecimal")
    return Authorization(access_key, headers, signature.lower())


def sign(secret_key: str, date_time: str) -> str:
    """The official clients' signature: HMAC-SHA1(secret, date-time) in lower-case hex."""
    return hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"),
                    hashlib.sha1).hexdigest()


def date_time_text(now_ms: int) -> str:
    """``now_ms`` (UTC) as ``x-mq-date-time`` writes it."""
    return time.strftime(DATE_TIME_FORMAT, time.gmtime(now_ms // 1000))


_DATE_TIME = re.compile(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z")


def parse_date_time(text: str) -> int | None:
    """``x-mq-date-time`` (``yyyyMMdd'T'HHmmss'Z'``, UTC) in ms; None when malformed."""
    return _parse_date_time(text) if len(text) <= MAX_DATE_TIME_CHARS else None


@lru_cache(maxsize=256)  # a client's calls within a second share one
def _parse_date_time(text: str) -> int | None:
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        return None
    try:
        y, mo, d, h, mi, sec = (int(part) for part in match.groups())
        when = datetime(y, mo, d, h, mi, sec, tzinfo=UTC)
    except ValueError:  # month 13, second 61
        return None
    return int(when.timestamp()) * 1000


def freshness_problem(date_time: str, now_ms: int, window_ms: int) -> str | None:
    """Why a signature over ``date_time`` is not taken at ``now_ms`` (None: it is)."""
    at = parse_date_time(date_time)
    if at is None:
        return f"{DATE_TIME} is missing or not in the form yyyyMMddTHHmmssZ"
    if abs(now_ms - at) > window_ms:
        return (f"{DATE_TIME} {date_time} is more than {window_ms // 1000} s from the "
                "broker's clock (UTC): the signature is stale, or the client's clock is off")
    return None


# ---- what each RPC needs ----------------------------------------------------------------

def _topic(resource: pb.Resource, perm: Perm) -> list[Need]:
    return [Need(resource.name, perm)] if resource.name else []


def _group(resource: pb.Resource) -> list[Need]:
    return [Need(group_resource(resource.name), Perm.SUB)] if resource.name else []


def _sub(group: pb.Resource, topic: pb.Resource) -> list[Need]:
    return _topic(topic, Perm.SUB) + _group(group)


def _send(request: spb.SendMessageRequest) -> list[Need]:
    needs: dict[str, Need] = {}
    for message in request.messages:
        for need in _topic(message.topic, Perm.PUB):
            needs[need.resource] = need
    return list(needs.values())


_CONSUMERS = frozenset({pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.PULL_CONSUMER,
                        pb.LITE_PUSH_CONSUMER, pb.LITE_SIMPLE_CONSUMER})


def _heartbeat(request: spb.HeartbeatRequest) -> list[Need]:
    return _group(request.group) if request.client_type in _CONSUMERS else []


def _telemetry(command: spb.TelemetryCommand) -> list[Need]:
    if command.WhichOneof("command") != "settings":
        return []
    settings = command.settings
    needs: list[Need] = []
    if settings.HasField("publishing"):
        for topic in settings.publishing.topics:
            needs += _topic(topic, Perm.PUB)
    if settings.HasField("subscription"):
        needs += _group(settings.subscription.group)
        for entry in settings.subscription.subscriptions:
            needs += _topic(entry.topic, Perm.SUB)
    return needs


Rule = Callable[[Message], list[Need]]

# per RPC of apache.rocketmq.v2.MessagingService: (its request type, the resources it
# needs); tests/broker/grpc/test_grpc_access.py fails on a served RPC without a row
RULES: dict[str, tuple[type[Message], Rule]] = {
    "QueryRoute": (spb.QueryRouteRequest,
                   lambda r: _topic(r.topic, Perm.ANY)),
    "Heartbeat": (spb.HeartbeatRequest, _heartbeat),
    "SendMessage": (spb.SendMessageRequest, _send),
    "QueryAssignment": (spb.QueryAssignmentRequest, lambda r: _sub(r.group, r.topic)),
    "ReceiveMessage": (spb.ReceiveMessageRequest,
                       lambda r: _sub(r.group, r.message_queue.topic)),
    "AckMessage": (spb.AckMessageRequest, lambda r: _sub(r.group, r.topic)),
    "ChangeInvisibleDuration": (spb.ChangeInvisibleDurationRequest,
                                lambda r: _sub(r.group, r.topic)),
    "ForwardMessageToDeadLetterQueue": (spb.ForwardMessageToDeadLetterQueueRequest,
                                        lambda r: _sub(r.group, r.topic)),
    "EndTransaction": (spb.EndTransactionRequest, lambda r: _topic(r.topic, Perm.PUB)),
    "RecallMessage": (spb.RecallMessageRequest, lambda r: _topic(r.topic, Perm.PUB)),
    "NotifyClientTermination": (spb.NotifyClientTerminationRequest,
                                lambda r: _group(r.group)),
    "Telemetry": (spb.TelemetryCommand, _telemetry),
    "PullMessage": (spb.PullMessageRequest, lambda r: _sub(r.group, r.message_queue.topic)),
    "UpdateOffset": (spb.UpdateOffsetRequest, lambda r: _sub(r.group, r.message_queue.topic)),
    "GetOffset": (spb.GetOffsetRequest, lambda r: _sub(r.group, r.message_queue.topic)),
    "QueryOffset": (spb.QueryOffsetRequest, lambda r: _topic(r.message_queue.topic, Perm.SUB)),
    "SyncLiteSubscription": (spb.SyncLiteSubscriptionRequest,
                             lambda r: _sub(r.group, r.topic)),
}

# the response type whose status carries a refusal, per RPC (Telemetry: none, a gRPC status)
RESPONSES: dict[str, type[Message]] = {
    "QueryRoute": spb.QueryRouteResponse,
    "Heartbeat": spb.HeartbeatResponse,
    "SendMessage": spb.SendMessageResponse,
    "QueryAssignment": spb.QueryAssignmentResponse,
    "ReceiveMessage": spb.ReceiveMessageResponse,
    "AckMessage": spb.AckMessageResponse,
    "ChangeInvisibleDuration": spb.ChangeInvisibleDurationResponse,
    "ForwardMessageToDeadLetterQueue": spb.ForwardMessageToDeadLetterQueueResponse,
    "EndTransaction": spb.EndTransactionResponse,
    "RecallMessage": spb.RecallMessageResponse,
    "NotifyClientTermination": spb.NotifyClientTerminationResponse,
    "PullMessage": spb.PullMessageResponse,
    "UpdateOffset": spb.UpdateOffsetResponse,
    "GetOffset": spb.GetOffsetResponse,
    "QueryOffset": spb.QueryOffsetResponse,
    "SyncLiteSubscription": spb.SyncLiteSubscriptionResponse,
}


def needs_of(method: str, request: Message) -> list[Need]:
    """The resources ``request`` of RPC ``method`` needs (an RPC with no row: none,
    the account alone)."""
    row = RULES.get(method)
    return row[1](request) if row is not None else []


# ---- the decision -------------------------------------------------------------------------

# reasons that mean "not authenticated" (UNAUTHORIZED); the others "not allowed" (FORBIDDEN)
_UNAUTHENTICATED = frozenset({plain.NO_ACCESS_KEY, plain.UNKNOWN_ACCOUNT, plain.BAD_SIGNATURE,
                              plain.NOT_LOADED})


def refusal_code(decision: Decision) -> int:
    """The v2 status code of a refused call: UNAUTHORIZED or FORBIDDEN."""
    return pb.Code.UNAUTHORIZED if decision.reason in _UNAUTHENTICATED else pb.Code.FORBIDDEN


def decide(config: AclConfig | None, method: str, request: Message,
           metadata: Mapping[str, str], remote_host: str, now_ms: int,
           window_ms: int = DEFAULT_WINDOW_MS) -> Decision:
    """Whether the call ``method`` with ``request`` and ``metadata`` (lower-case header
    names) from ``remote_host`` is allowed at ``now_ms``. Pure."""
    if config is None:
        return Decision(False, "access control is on but no accounts are loaded "
                               "(plain_acl.yml)", reason=plain.NOT_LOADED)
    if config.global_white and config.globally_white(remote_host):
        return plain.ALLOWED
    header = metadata.get(AUTHORIZATION, "")
    if header:
        try:
            auth = parse_authorization(header)
        except AuthorizationError as exc:
            return Decision(False, str(exc), reason=MALFORMED)
    else:
        auth = Authorization("", (), "")
    date_time = metadata.get(DATE_TIME, "")
    problems: list[str] = []

    def signature_ok(secret: str) -> bool:
        if not hmac.compare_digest(sign(secret, date_time[:MAX_DATE_TIME_CHARS]),
                                   auth.signature):
            return False
        problem = freshness_problem(date_time, now_ms, window_ms)
        if problem is not None:
            problems.append(problem)
            return False
        return True

    decision = config.decide_needs(auth.access_key, remote_host, signature_ok,
                                   needs_of(method, request))
    if not decision.allowed and problems:
        return Decision(False, problems[0], decision.access_key, STALE)
    return decision


__all__ = ["AUTHORIZATION", "DATE_TIME", "DEFAULT_WINDOW_MS", "NAMESPACE", "RESPONSES", "RULES",
           "Authorization", "AuthorizationError", "date_time_text", "decide",
           "freshness_problem", "needs_of", "parse_authorization", "parse_date_time",
           "refusal_code", "sign"]
