"""apache.rocketmq.v2 messages to and from the broker's domain values, with no I/O.

A ``Message`` of a SendMessage becomes a ``SendMessageRequestHeader`` and a
body, as RocketMQ 5's proxy maps it:

- ``system_properties``: ``tag`` -> ``TAGS``, ``keys`` -> ``KEYS`` (space
  separated), ``message_id`` -> ``UNIQ_KEY`` (the id the client made and the
  one the answer carries), ``message_group`` -> ``__SHARDINGKEY``, born time
  -> the header's ``bornTimestamp``; ``delivery_timestamp`` -> the smallest
  delay level (``messageDelayLevel``) that is not earlier (a time already past:
  no delay; past the last level: the last level);
- ``user_properties`` as they are, but a name the broker reserves for itself
  is refused (ILLEGAL_MESSAGE_PROPERTY_KEY) and no name or value may hold the
  two separator characters;
- ``message_type`` TRANSACTION: a half message, as a remoting producer's
  prepared send (``TRAN_MSG=true`` and the prepared sysFlag), of the producer
  group named after its topic (RocketMQ 5's proxy: gRPC producers have no
  group and are registered under their topics' names); no message group nor
  delivery time with it;
- the body: ``body_encoding`` GZIP is inflated (bounded by maxMessageSize);
  a ``body_digest`` (CRC32, MD5 or SHA1, hex as clients write it) must match
  the body, else MESSAGE_CORRUPTED.

A refused message is a ``Refusal``: a v2 ``Code`` and the reason, answered in
the response body's status as RocketMQ does.

A popped message (ReceiveMessage) goes the other way (``to_pb_message``): the
stored record's body (inflated if stored compressed, ``body_encoding``
IDENTITY) with its CRC32 ``body_digest``, ``message_id`` (the producer's
``UNIQ_KEY``, else the offset id), ``tag``, ``keys``, ``message_group``, born
time and host, store time and host, queue and offset, the ``receipt_handle``,
``invisible_duration`` and ``delivery_attempt`` of this pop; its topic the one
the consumer asked for (a retried message's ``RETRY_TOPIC``, not ``%RETRY%``);
the broker's own properties are left out of ``user_properties``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import zlib
from collections.abc import Mapping
from typing import Any

from broker.grpc.pb import definition_pb2 as pb
from broker.service.pop import PoppedMessage, PopStatus
from broker.service.send import SendStatus
from protocol.delay_levels import delay_level
from protocol.headers import SendMessageRequestHeader
from protocol.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageConst,
    properties_to_string,
)
from protocol.record import (
    FLAG_COMPRESSED,
    TRANSACTION_PREPARED_TYPE,
    decode_record,
    with_transaction_type,
)
from protocol.route import PERM_READ, PERM_WRITE, TopicConfig

Code = pb.Code
# RocketMQ 5's name for a FIFO message's group (MessageConst.PROPERTY_SHARDING_KEY)
PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"
# the topic attribute naming the message types a topic takes (RocketMQ 5: message.type)
MESSAGE_TYPE_ATTRIBUTE = "message.type"
ALL_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
TYPE_BY_NAME: dict[str, pb.MessageType] = {"NORMAL": pb.NORMAL, "FIFO": pb.FIFO, "DELAY": pb.DELAY,
                "TRANSACTION": pb.TRANSACTION}
# property names a producer may not set itself: the broker's own
RESERVED_PROPERTIES = frozenset(
    v for k, v in vars(MessageConst).items() if k.startswith("PROPERTY_")
) | {PROPERTY_MESSAGE_GROUP}
MAX_PROPERTY_BYTES = 16 * 1024  # a user property's name and value together
MAX_KEYS = 64


class Refusal(Exception):
    """A message refused: ``code`` (a v2 Code) and why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclasses.dataclass(slots=True)
class SendItem:
    """One message of a SendMessage as the send service takes it."""

    header: SendMessageRequestHeader
    body: bytes
    message_id: str
    message_group: str | None
    message_type: int


# ---- routes -------------------------------------------------------------------------------


def accept_message_types(attributes: Mapping[str, str]) -> list[pb.MessageType]:
    """The types a topic takes: its ``message.type`` attribute (one of NORMAL, FIFO,
    DELAY, TRANSACTION; MIXED or none: all four)."""
    named = attributes.get(MESSAGE_TYPE_ATTRIBUTE, "").strip().upper()
    if named in TYPE_BY_NAME:
        return [TYPE_BY_NAME[named]]
    return list(ALL_TYPES)


def permission(perm: int) -> pb.Permission:
    readable, writeable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writeable:
        return pb.READ_WRITE
    if readable:
        return pb.READ
    if writeable:
        return pb.WRITE
    return pb.NONE


def message_queues(cfg: TopicConfig, broker_name: str, broker_id: int, host: str, port: int,
                   namespace: str = "",
                   attributes: Mapping[str, str] | None = None) -> list[pb.MessageQueue]:
    """A topic's queues on one broker, as QueryRoute answers them: as RocketMQ's proxy
    does, queues both readable and writeable up to the smaller count, then the rest
    read-only or write-only."""
    endpoints = pb.Endpoints(scheme=address_scheme(host),
                             addresses=[pb.Address(host=host, port=port)])
    broker = pb.Broker(name=broker_name, id=broker_id, endpoints=endpoints)
    types = accept_message_types(attributes or {})
    perm = permission(cfg.perm)
    out: list[pb.MessageQueue] = []
    for qid in range(max(cfg.read_queue_nums, cfg.write_queue_nums)):
        p = perm
        if perm == pb.READ_WRITE:
            if qid >= cfg.write_queue_nums:
                p = pb.READ
            elif qid >= cfg.read_queue_nums:
                p = pb.WRITE
        out.append(pb.MessageQueue(
            topic=pb.Resource(resource_namespace=namespace, name=cfg.topic_name), id=qid,
            permission=p, broker=broker, accept_message_types=types))
    return out


def address_scheme(host: str) -> pb.AddressScheme:
    if ":" in host:
        return pb.IPv6
    parts = host.split(".")
    if len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts):
        return pb.IPv4
    return pb.DOMAIN_NAME


# ---- send ---------------------------------------------------------------------------------


def queue_for_group(group: str, write_queue_nums: int) -> int:
    """The queue a message group's messages all go to (a stable hash: the same
    group, the same queue, while the topic's write queue count stays)."""
    return zlib.crc32(group.encode()) % write_queue_nums if write_queue_nums > 0 else 0


def check_digest(body: bytes, digest: pb.Digest) -> None:
    """Raise Refusal MESSAGE_CORRUPTED when ``digest`` is set and does not match
    ``body`` (hex, either case; a CRC32 may omit leading zeros, as the Java client's)."""
    if digest.type == pb.DIGEST_TYPE_UNSPECIFIED:
        return
    given = digest.checksum.strip().lower()
    if digest.type == pb.CRC32:
        try:
            ok = int(given, 16) == zlib.crc32(body)
        except ValueError:
            ok = False
    elif digest.type == pb.MD5:
        ok = given == hashlib.md5(body).hexdigest()
    elif digest.type == pb.SHA1:
        ok = given == hashlib.sha1(body).hexdigest()
    else:
        raise Refusal(Code.BAD_REQUEST, f"unknown body digest type {digest.type}")
    if not ok:
        raise Refusal(Code.MESSAGE_CORRUPTED,
                      f"the body's {pb.DigestType.Name(digest.type)} digest does not match")


def decode_body(msg: pb.Message, max_size: int) -> bytes:
    """The body as stored: inflated if GZIP, its digest checked (on the body as sent,
    or failing that the inflated body)."""
    body = msg.body
    sp = msg.system_properties
    if not body:
        raise Refusal(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
    if sp.body_encoding == pb.GZIP:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            plain = inflater.decompress(body, max_size + 1)
        except zlib.error as exc:
            raise Refusal(Code.MESSAGE_CORRUPTED, f"the GZIP body does not inflate: {exc}") \
                from None
        if len(plain) > max_size:
            raise Refusal(Code.MESSAGE_BODY_TOO_LARGE,
                          f"the body inflates past maxMessageSize {max_size}")
        if not inflater.eof:
            raise Refusal(Code.MESSAGE_CORRUPTED, "the GZIP body is cut short")
        if sp.HasField("body_digest"):
            try:
                check_digest(body, sp.body_digest)
            except Refusal:
                check_digest(plain, sp.body_digest)
        body = plain
    elif sp.body_encoding in (pb.IDENTITY, pb.ENCODING_UNSPECIFIED):
        if sp.HasField("body_digest"):
            check_digest(body, sp.body_digest)
    else:
        raise Refusal(Code.BAD_REQUEST, f"unknown body encoding {sp.body_encoding}")
    if len(body) > max_size:
        raise Refusal(Code.MESSAGE_BODY_TOO_LARGE,
                      f"the message body size {len(body)} exceeds maxMessageSize {max_size}")
    return body


def _text(value: str, what: str, code: int) -> str:
    if NAME_VALUE_SEPARATOR in value or PROPERTY_SEPARATOR in value:
        raise Refusal(code, f"{what} may not hold the characters \\x01 or \\x02")
    return value


def sent_type(msg: pb.Message) -> str:
    """What a message is, by its properties (RocketMQ's
    TopicMessageType.parseFromMessageProperty): TRANSACTION when its type says
    so, FIFO with a message group, DELAY with a delivery time, else NORMAL."""
    sp = msg.system_properties
    if sp.message_type == pb.TRANSACTION:
        return "TRANSACTION"
    if sp.HasField("message_group"):
        return "FIFO"
    if sp.HasField("delivery_timestamp"):
        return "DELAY"
    return "NORMAL"


def to_send_item(msg: pb.Message, *, producer_group: str, max_size: int, now_ms: int,
                 max_delay_ms: int, queue_id: int = -1) -> SendItem:
    """One v2 message as the send service takes it. Raises Refusal. A
    ``delivery_timestamp`` becomes a timer (``TIMER_DELIVER_MS``, exact to the
    broker's timerPrecisionMs); one more than ``max_delay_ms`` away is refused
    with ILLEGAL_DELIVERY_TIME; one already past is delivered at once."""
    topic = msg.topic.name
    if not topic:
        raise Refusal(Code.ILLEGAL_TOPIC, "the message names no topic")
    sp = msg.system_properties
    message_type = sp.message_type
    if message_type not in (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION,
                            pb.MESSAGE_TYPE_UNSPECIFIED):
        raise Refusal(Code.UNSUPPORTED,
                      f"message type {pb.MessageType.Name(message_type)} is not supported")
    body = decode_body(msg, max_size)
    props: dict[str, str] = {}
    for name, value in msg.user_properties.items():
        if name in RESERVED_PROPERTIES:
            raise Refusal(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                          f"property {name[:64]!r} is reserved for the broker")
        if not name or len(name) + len(value) > MAX_PROPERTY_BYTES:
            raise Refusal(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                          "a user property's name is empty or it is longer than "
                          f"{MAX_PROPERTY_BYTES} characters")
        props[_text(name, "a property name", Code.ILLEGAL_MESSAGE_PROPERTY_KEY)] = \
            _text(value, "a property value", Code.ILLEGAL_MESSAGE_PROPERTY_KEY)
    if sp.HasField("tag"):
        if not sp.tag.strip() or "|" in sp.tag:
            raise Refusal(Code.ILLEGAL_MESSAGE_TAG, "a tag may not be blank nor hold '|'")
        props[PROPERTY_TAGS] = _text(sp.tag, "the tag", Code.ILLEGAL_MESSAGE_TAG)
    if sp.keys:
        if len(sp.keys) > MAX_KEYS:
            raise Refusal(Code.ILLEGAL_MESSAGE_KEY, f"more than {MAX_KEYS} keys")
        for key in sp.keys:
            if not key.strip() or " " in key:
                raise Refusal(Code.ILLEGAL_MESSAGE_KEY, "a key may not be blank nor hold spaces")
            _text(key, "a key", Code.ILLEGAL_MESSAGE_KEY)
        props[PROPERTY_KEYS] = MessageConst.KEY_SEPARATOR.join(sp.keys)
    message_id = sp.message_id
    if not message_id or len(message_id) > 128 or not message_id.isascii() \
            or not message_id.isalnum():
        raise Refusal(Code.ILLEGAL_MESSAGE_ID, "the message id must be 1..128 letters or digits")
    props[PROPERTY_UNIQ_KEY] = message_id
    group: str | None = None
    if sp.HasField("message_group"):
        group = sp.message_group
        if not group or len(group) > 64:
            raise Refusal(Code.ILLEGAL_MESSAGE_GROUP, "a message group is 1..64 characters")
        props[PROPERTY_MESSAGE_GROUP] = _text(group, "the message group",
                                              Code.ILLEGAL_MESSAGE_GROUP)
    if message_type == pb.FIFO and group is None:
        raise Refusal(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a FIFO message needs a group")
    sys_flag = 0
    if message_type == pb.TRANSACTION:
        if group is not None or sp.HasField("delivery_timestamp"):
            raise Refusal(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                          "a transactional message has no message group nor delivery time")
        # a half message (as a remoting producer's prepared send), of the producer
        # group named after its topic: the one its producers are registered under
        props[MessageConst.PROPERTY_TRANSACTION_PREPARED] = "true"
        producer_group = topic
        sys_flag = with_transaction_type(0, TRANSACTION_PREPARED_TYPE)
    if sp.HasField("delivery_timestamp"):
        if group is not None:
            raise Refusal(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                          "a message is FIFO or delayed, not both")
        ts = sp.delivery_timestamp
        due = ts.seconds * 1000 + ts.nanos // 1_000_000
        if due - now_ms > max_delay_ms:
            raise Refusal(Code.ILLEGAL_DELIVERY_TIME,
                          f"the delivery time is {due - now_ms} ms away, later than the "
                          f"broker's timerMaxDelaySec ({max_delay_ms // 1000})")
        if due > now_ms:
            props[MessageConst.PROPERTY_TIMER_DELIVER_MS] = str(due)
    born = sp.born_timestamp.seconds * 1000 + sp.born_timestamp.nanos // 1_000_000
    header = SendMessageRequestHeader(
        producer_group=producer_group, topic=topic, queue_id=queue_id, sys_flag=sys_flag,
        born_timestamp=max(0, born) or now_ms, properties=properties_to_string(props))
    return SendItem(header, body, message_id, group, message_type)


# a send service's status in a v2 answer
SEND_CODES: dict[SendStatus, int] = {
    SendStatus.OK: Code.OK,
    SendStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    SendStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    SendStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    SendStatus.NO_PERMISSION: Code.FORBIDDEN,
    SendStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    SendStatus.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    SendStatus.GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    SendStatus.BUSY: Code.TOO_MANY_REQUESTS,
    SendStatus.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    SendStatus.SYSTEM_ERROR: Code.INTERNAL_SERVER_ERROR,
}


# ---- receive ------------------------------------------------------------------------------

# a PopService status in a v2 answer (FOUND and NO_MESSAGE are ReceiveMessage's own)
POP_CODES: dict[PopStatus, int] = {
    PopStatus.FOUND: Code.OK,
    PopStatus.OK: Code.OK,
    PopStatus.NO_MESSAGE: Code.MESSAGE_NOT_FOUND,
    PopStatus.INVALID_RECEIPT_HANDLE: Code.INVALID_RECEIPT_HANDLE,
    PopStatus.BUSY: Code.TOO_MANY_REQUESTS,
    PopStatus.NO_PERMISSION: Code.FORBIDDEN,
    PopStatus.GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    PopStatus.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    PopStatus.ILLEGAL_REQUEST: Code.BAD_REQUEST,
    PopStatus.SUBSCRIPTION_PARSE_FAILED: Code.ILLEGAL_FILTER_EXPRESSION,
    PopStatus.FILTER_UNSUPPORTED: Code.UNSUPPORTED,
    PopStatus.SLAVE: Code.FORBIDDEN,
}

# the filter types a ReceiveMessage may name, as PopService (protocol/filter_sql) spells them
FILTER_TYPES: dict[int, str] = {pb.FILTER_TYPE_UNSPECIFIED: "TAG", pb.TAG: "TAG", pb.SQL: "SQL92"}


def duration_ms(d: Any) -> int:
    """A protobuf Duration in whole milliseconds (negative stays negative)."""
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000


def _split_host(host: str) -> str:
    return host.rsplit(":", 1)[0].strip("[]") if host else ""


def to_pb_message(popped: PoppedMessage, invisible_ms: int, namespace: str = "") -> pb.Message:
    """A popped message as ReceiveMessage answers it."""
    ext = decode_record(popped.record)
    body = ext.body if isinstance(ext.body, bytes) else bytes(ext.body)
    if ext.sys_flag & FLAG_COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error:
            pass  # served as stored, as a pull serves it
    props = dict(ext.properties)
    topic = props.get(MessageConst.PROPERTY_RETRY_TOPIC) or ext.topic
    sp = pb.SystemProperties(
        message_id=props.get(PROPERTY_UNIQ_KEY) or ext.msg_id,
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(body):08X}"),
        body_encoding=pb.IDENTITY,
        born_host=_split_host(ext.born_host),
        store_host=ext.store_host,
        receipt_handle=popped.handle,
        queue_id=popped.queue_id,
        queue_offset=popped.queue_offset,
        delivery_attempt=popped.attempt,
    )
    sp.born_timestamp.FromMilliseconds(ext.born_timestamp)
    sp.store_timestamp.FromMilliseconds(ext.store_timestamp)
    sp.invisible_duration.FromMilliseconds(invisible_ms)
    tag = props.get(PROPERTY_TAGS)
    if tag:
        sp.tag = tag
    keys = props.get(PROPERTY_KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(MessageConst.KEY_SEPARATOR) if k)
    group = props.get(PROPERTY_MESSAGE_GROUP)
    if group:
        sp.message_group = group
        sp.message_type = pb.FIFO
    elif MessageConst.PROPERTY_DELAY_TIME_LEVEL in props or \
            MessageConst.PROPERTY_REAL_TOPIC in props:
        sp.message_type = pb.DELAY
    else:
        sp.message_type = pb.NORMAL
    user = {k: v for k, v in props.items() if k not in RESERVED_PROPERTIES}
    return pb.Message(topic=pb.Resource(resource_namespace=namespace, name=topic),
                      user_properties=user, system_properties=sp, body=body)


def status(code: int, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)  # type: ignore[arg-type]


__all__ = [
    "ALL_TYPES", "FILTER_TYPES", "MESSAGE_TYPE_ATTRIBUTE", "POP_CODES", "PROPERTY_MESSAGE_GROUP",
    "RESERVED_PROPERTIES", "SEND_CODES", "duration_ms", "to_pb_message", "Refusal", "SendItem", "accept_message_types", "address_scheme",
    "check_digest", "decode_body", "delay_level", "message_queues", "permission",
    "queue_for_group", "sent_type", "status", "to_send_item",
]
