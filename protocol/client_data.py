"""Bodies clients send about themselves: HeartbeatData, CheckClientRequestBody
and LockBatchRequestBody; and ResetOffsetBody, the offsets a broker tells a group's
consumers to take.

As RocketMQ's (``HeartbeatData``, ``ConsumerData``, ``SubscriptionData``,
``CheckClientRequestBody``, ``LockBatchRequestBody``, ``ResetOffsetBody``). ``from_wire``
checks a decoded body's shape (msgpack or JSON), every name (protocol.names) and every
bound, and raises RemoteProtocolError naming the offending field, so a broker keeps only
what it validated: nothing a peer adds beyond these fields is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocol import names
from protocol.errors import RemoteProtocolError
from protocol.headers import wire_int
from protocol.message import MessageQueue

CLIENT_ID_MAX_LENGTH = 255
TEXT_MAX_LENGTH = 255
SUB_STRING_MAX_LENGTH = 32767
# Bounds on what one heartbeat can make a broker hold.
MAX_GROUPS_PER_HEARTBEAT = 256
MAX_SUBSCRIPTIONS_PER_CONSUMER = 1024
MAX_TAGS_PER_SUBSCRIPTION = 1024
MAX_QUEUES_PER_LOCK = 4096
MAX_QUEUES_PER_RESET = 65536

MESSAGE_MODELS = ("CLUSTERING", "BROADCASTING")
CONSUME_TYPES = ("CONSUME_PASSIVELY", "CONSUME_ACTIVELY")
# RocketMQ's enums in declaration order: Java's clients send their names, the
# C++ client their ordinals.
MESSAGE_MODEL_ORDER = ("BROADCASTING", "CLUSTERING")
CONSUME_TYPE_ORDER = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
CONSUME_FROM_ORDER = ("CONSUME_FROM_LAST_OFFSET",
                      "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                      "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET",
                      "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP")


def _fail(where: str, what: str) -> RemoteProtocolError:
    return RemoteProtocolError(f"{where}: {what}")


def _map(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _fail(where, f"must be a map, not {type(obj).__name__}")
    return obj


def _list(obj: Any, where: str, limit: int) -> list[Any]:
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise _fail(where, f"must be an array, not {type(obj).__name__}")
    if len(obj) > limit:
        raise _fail(where, f"holds {len(obj)} entries, at most {limit} are accepted")
    return obj


def _text(d: dict[str, Any], key: str, where: str, default: str | None = None,
          limit: int = TEXT_MAX_LENGTH) -> str:
    value = d.get(key, default)
    if not isinstance(value, str):
        raise _fail(f"{where}.{key}", "missing" if value is None else "must be a string")
    if len(value) > limit:
        raise _fail(f"{where}.{key}", f"is longer than {limit} characters")
    return value


def _int(d: dict[str, Any], key: str, where: str, default: int, lo: int, hi: int) -> int:
    """An integer field; text holding an integer is read too (the C++ client
    sends ``subVersion`` as a string)."""
    value = d.get(key, default)
    if isinstance(value, str):
        try:
            value = wire_int(value, "")
        except RemoteProtocolError:
            pass
    if type(value) is not int or not lo <= value <= hi:
        raise _fail(f"{where}.{key}", f"must be an integer in {lo}..{hi}")
    return value


def _enum(d: dict[str, Any], key: str, where: str, default: str,
          order: tuple[str, ...]) -> str:
    """An enum field by name, or by its ordinal in RocketMQ's declaration."""
    value = d.get(key, default)
    if type(value) is int and 0 <= value < len(order):
        return order[value]
    if isinstance(value, str) and value in order:
        return value
    raise _fail(f"{where}.{key}", f"must be one of {', '.join(order)} (or its ordinal)")


def _bool(d: dict[str, Any], key: str, where: str) -> bool:
    value = d.get(key, False)
    if isinstance(value, bool):
        return value
    if value in (0, 1, "0", "1", "true", "false"):
        return value in (1, "1", "true")
    raise _fail(f"{where}.{key}", "must be true or false")


def _name(problem: str | None, where: str) -> None:
    if problem is not None:
        raise _fail(where, problem)


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = "*"
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    expression_type: str = "TAG"
    sub_version: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "subString": self.sub_string, "tagsSet": self.tags_set,
                "codeSet": self.code_set, "expressionType": self.expression_type,
                "subVersion": self.sub_version}

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> SubscriptionData:
        d = _map(obj, where)
        topic = d.get("topic")
        _name(names.topic_problem(topic), f"{where}.topic")
        assert isinstance(topic, str)
        tags = _list(d.get("tagsSet"), f"{where}.tagsSet", MAX_TAGS_PER_SUBSCRIPTION)
        codes = _list(d.get("codeSet"), f"{where}.codeSet", MAX_TAGS_PER_SUBSCRIPTION)
        if not all(isinstance(t, str) and len(t) <= TEXT_MAX_LENGTH for t in tags):
            raise _fail(f"{where}.tagsSet", f"must hold strings of at most {TEXT_MAX_LENGTH} characters")
        if not all(type(c) is int and -(2**31) <= c < 2**31 for c in codes):
            raise _fail(f"{where}.codeSet", "must hold 32-bit integers")
        return cls(
            topic=topic,
            sub_string=_text(d, "subString", where, "*", SUB_STRING_MAX_LENGTH),
            tags_set=list(tags),
            code_set=list(codes),
            expression_type=_text(d, "expressionType", where, "TAG"),
            sub_version=_int(d, "subVersion", where, 0, -(2**63), 2**63 - 1),
        )


@dataclass(slots=True)
class ConsumerData:
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    unit_mode: bool = False
    subscriptions: list[SubscriptionData] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"groupName": self.group_name, "consumeType": self.consume_type,
                "messageModel": self.message_model, "consumeFromWhere": self.consume_from_where,
                "unitMode": self.unit_mode,
                "subscriptionDataSet": [s.to_dict() for s in self.subscriptions]}

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> ConsumerData:
        d = _map(obj, where)
        group = d.get("groupName")
        _name(names.group_problem(group), f"{where}.groupName")
        assert isinstance(group, str)
        model = _enum(d, "messageModel", where, "CLUSTERING", MESSAGE_MODEL_ORDER)
        consume_type = _enum(d, "consumeType", where, "CONSUME_PASSIVELY", CONSUME_TYPE_ORDER)
        if type(d.get("consumeFromWhere")) is int:
            consume_from = _enum(d, "consumeFromWhere", where, "", CONSUME_FROM_ORDER)
        else:
            consume_from = _text(d, "consumeFromWhere", where, "CONSUME_FROM_LAST_OFFSET")
        unit_mode = _bool(d, "unitMode", where)
        subs = _list(d.get("subscriptionDataSet"), f"{where}.subscriptionDataSet",
                     MAX_SUBSCRIPTIONS_PER_CONSUMER)
        return cls(
            group_name=group,
            consume_type=consume_type,
            message_model=model,
            consume_from_where=consume_from,
            unit_mode=unit_mode,
            subscriptions=[SubscriptionData.from_wire(s, f"{where}.subscriptionDataSet[{i}]")
                           for i, s in enumerate(subs)],
        )


@dataclass(slots=True)
class HeartbeatData:
    client_id: str
    producer_groups: list[str] = field(default_factory=list)
    consumers: list[ConsumerData] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"clientID": self.client_id,
                "producerDataSet": [{"groupName": g} for g in self.producer_groups],
                "consumerDataSet": [c.to_dict() for c in self.consumers]}

    @classmethod
    def from_wire(cls, obj: Any) -> HeartbeatData:
        d = _map(obj, "heartbeat")
        client_id = _text(d, "clientID", "heartbeat", None, CLIENT_ID_MAX_LENGTH)
        producers = []
        for i, p in enumerate(_list(d.get("producerDataSet"), "heartbeat.producerDataSet",
                                    MAX_GROUPS_PER_HEARTBEAT)):
            where = f"heartbeat.producerDataSet[{i}]"
            group = _map(p, where).get("groupName")
            _name(names.group_problem(group), f"{where}.groupName")
            assert isinstance(group, str)
            producers.append(group)
        consumers = [
            ConsumerData.from_wire(c, f"heartbeat.consumerDataSet[{i}]")
            for i, c in enumerate(_list(d.get("consumerDataSet"), "heartbeat.consumerDataSet",
                                        MAX_GROUPS_PER_HEARTBEAT))
        ]
        return cls(client_id, producers, consumers)


@dataclass(slots=True)
class CheckClientRequestBody:
    """CHECK_CLIENT_CONFIG's body (RocketMQ's CheckClientRequestBody): a
    consumer asks whether the broker filters by one of its subscriptions."""

    client_id: str
    group: str
    subscription: SubscriptionData | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"clientId": self.client_id, "group": self.group,
                "subscriptionData": None if self.subscription is None
                else self.subscription.to_dict()}

    @classmethod
    def from_wire(cls, obj: Any) -> CheckClientRequestBody:
        where = "check client body"
        d = _map(obj, where)
        client_id = _text(d, "clientId", where, "", CLIENT_ID_MAX_LENGTH)
        group = d.get("group", "")
        if group:
            _name(names.group_problem(group), f"{where}.group")
        elif not isinstance(group, str):
            raise _fail(f"{where}.group", "must be a string")
        sub = d.get("subscriptionData")
        return cls(client_id, group, None if sub is None
                   else SubscriptionData.from_wire(sub, f"{where}.subscriptionData"))


@dataclass(slots=True)
class LockBatchRequestBody:
    consumer_group: str
    client_id: str
    mq_set: list[tuple[str, str, int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"consumerGroup": self.consumer_group, "clientId": self.client_id,
                "mqSet": [{"topic": t, "brokerName": b, "queueId": q} for t, b, q in self.mq_set]}

    @classmethod
    def from_wire(cls, obj: Any) -> LockBatchRequestBody:
        where = "lock body"
        d = _map(obj, where)
        group = d.get("consumerGroup")
        _name(names.group_problem(group), f"{where}.consumerGroup")
        assert isinstance(group, str)
        client_id = _text(d, "clientId", where, None, CLIENT_ID_MAX_LENGTH)
        mqs = []
        for i, it in enumerate(_list(d.get("mqSet"), f"{where}.mqSet", MAX_QUEUES_PER_LOCK)):
            at = f"{where}.mqSet[{i}]"
            m = _map(it, at)
            _name(names.topic_problem(m.get("topic")), f"{at}.topic")
            _name(names.broker_name_problem(m.get("brokerName")), f"{at}.brokerName")
            mqs.append((m["topic"], m["brokerName"], _int(m, "queueId", at, -1, 0, 2**31 - 1)))
        return cls(group, client_id, mqs)


@dataclass(slots=True)
class ResetOffsetBody:
    """RESET_CONSUMER_CLIENT_OFFSET's body (broker -> consumer) and the answer of
    INVOKE_BROKER_TO_RESET_OFFSET: ``{"offsetTable": [{topic, brokerName, queueId,
    offset}]}``. RocketMQ's keys a map by MessageQueue objects, which JSON cannot."""

    offsets: dict[MessageQueue, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"offsetTable": [{"topic": mq.topic, "brokerName": mq.broker_name,
                                 "queueId": mq.queue_id, "offset": offset}
                                for mq, offset in sorted(self.offsets.items())]}

    @classmethod
    def from_wire(cls, obj: Any) -> ResetOffsetBody:
        where = "reset offset body"
        d = _map(obj, where)
        offsets: dict[MessageQueue, int] = {}
        table = _list(d.get("offsetTable"), f"{where}.offsetTable", MAX_QUEUES_PER_RESET)
        for i, it in enumerate(table):
            at = f"{where}.offsetTable[{i}]"
            m = _map(it, at)
            _name(names.topic_problem(m.get("topic")), f"{at}.topic")
            _name(names.broker_name_problem(m.get("brokerName")), f"{at}.brokerName")
            mq = MessageQueue(m["topic"], m["brokerName"], _int(m, "queueId", at, -1, 0, 2**31 - 1))
            offsets[mq] = _int(m, "offset", at, -1, 0, 2**63 - 1)
        return cls(offsets)
