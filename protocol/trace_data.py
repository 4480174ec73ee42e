"""Message trace records: RocketMQ's text format (its client's TraceDataEncoder,
TraceContext, TraceBean, TraceConstants, TraceView), pure.

A trace message's body is records, each ended by FIELD_SPLITOR (``\\x02``),
each a list of fields joined by CONTENT_SPLITOR (``\\x01``); the first field
names the record:

    Pub         type, timestamp, regionId, groupName, topic, msgId, tags, keys,
                storeHost, bodyLength, costTime, msgType, offsetMsgId, success
                (RocketMQ 4.4 wrote no offsetMsgId: 13 fields; 5.x adds
                clientHost: 15)
    SubBefore   type, timestamp, regionId, groupName, requestId, msgId,
                retryTimes, keys
    SubAfter    type, requestId, msgId, costTime, success, keys, contextCode,
                timestamp, groupName (4.4: the first 6; 4.9.0: 8; 4.9.x/5.x: 9)
    EndTransaction  type, timestamp, regionId, groupName, topic, msgId, tags,
                keys, storeHost, msgType, transactionId, transactionState,
                fromTransactionCheck

``encode`` writes what RocketMQ 4.9.x/5.x's Java client writes (Pub with 14
fields, SubAfter with 9), so RocketMQ's own tools and dashboard read our records;
``decode`` reads every version above, and the official C++ client's records
(rocketmq-client-cpp: Pub as Java's 14 fields, SubBefore as Java's, SubAfter
with the first 6 fields only, and ``dKey`` written where a message has no keys).

Absent tags and keys: the Java client writes the text ``null`` (it appends a
Java null), the C++ client ``dKey``; RocketMQ's Java decoder cannot read an
empty last field (``String.split`` drops it, then it indexes past the end), so
``encode`` writes ``null`` too (for a SubAfter's group, its last field, as well)
and ``decode`` reads ``null`` and ``dKey`` back as no value. A record ``decode`` cannot read (unknown type, missing field, a
number that is not one) is skipped: a trace topic is written by any client.

The trace message itself (``TraceTransferBean``) carries the records' text and,
as its KEYS, each record's msgId and its message's keys, so that a query by key
on the trace topic (QUERY_MESSAGE; ``mqadmin queryMsgTraceById``) finds every
record of a message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum, IntEnum

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
# what the Java client writes for an absent tag or key, and the C++ client for absent keys
JAVA_NULL = "null"
CPP_NO_KEYS = "dKey"
ABSENT = frozenset({JAVA_NULL, CPP_NO_KEYS})
# the trace producer's group (TraceConstants.GROUP_NAME_PREFIX) and the region a
# broker that says none is in (MixAll.DEFAULT_TRACE_REGION_ID)
GROUP_NAME_PREFIX = "_INNER_TRACE_PRODUCER"
DEFAULT_REGION = "DefaultRegion"


class TraceType(Enum):
    Pub = "Pub"
    SubBefore = "SubBefore"
    SubAfter = "SubAfter"
    EndTransaction = "EndTransaction"


class MessageType(IntEnum):
    """RocketMQ's MessageType; a Pub record holds its ordinal."""

    Normal_Msg = 0
    Trans_Msg_Half = 1
    Trans_msg_Commit = 2
    Delay_Msg = 3
    Order_Msg = 4  # RocketMQ 5.x


class ConsumeReturnType(IntEnum):
    """RocketMQ's ConsumeReturnType; a SubAfter record's contextCode is its ordinal."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


@dataclass(slots=True)
class TraceBean:
    """One message of a trace record (TraceBean)."""

    topic: str = ""
    msg_id: str = ""
    offset_msg_id: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    client_host: str = ""
    store_time: int = 0
    retry_times: int = 0
    body_length: int = 0
    msg_type: MessageType = MessageType.Normal_Msg
    transaction_id: str = ""
    transaction_state: str = ""
    from_transaction_check: bool = False


@dataclass(slots=True)
class TraceContext:
    """One trace event (TraceContext): a send (Pub, one bean), the start and the
    end of a consume call (SubBefore/SubAfter, a bean per message, one
    ``request_id`` for both), an end of transaction."""

    trace_type: TraceType
    timestamp: int = 0  # ms
    region_id: str = DEFAULT_REGION
    group_name: str = ""
    cost_time: int = 0  # ms
    success: bool = True
    request_id: str = ""
    context_code: int = 0
    beans: list[TraceBean] = field(default_factory=list)
    # whether the record said when it happened (a C++ SubAfter does not)
    has_timestamp: bool = True


@dataclass(slots=True)
class TraceRecord:
    """One encoded record: its text, and what its trace message is indexed
    under: the msgId and the message's keys (one string, spaces between keys)."""

    data: str
    msg_id: str
    keys: str


@dataclass(slots=True)
class TraceTransferBean:
    """A context's records (``data``) and the keys of its trace message
    (RocketMQ's TraceTransferBean: each bean's msgId and its keys)."""

    data: str
    keys: list[str]


# ---- encoding --------------------------------------------------------------------


def _text(value: str | None) -> str:
    """A tag or key field: the Java client's ``null`` when there is none; the
    separators never reach a record (a property value cannot hold them)."""
    if not value:
        return JAVA_NULL
    if CONTENT_SPLITOR in value or FIELD_SPLITOR in value:
        value = value.replace(CONTENT_SPLITOR, " ").replace(FIELD_SPLITOR, " ")
    return value


def _plain(value: str) -> str:
    """Any other text field, separators replaced."""
    if CONTENT_SPLITOR in value or FIELD_SPLITOR in value:
        return value.replace(CONTENT_SPLITOR, " ").replace(FIELD_SPLITOR, " ")
    return value


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _record(fields: Iterable[object]) -> str:
    return CONTENT_SPLITOR.join(map(str, fields)) + FIELD_SPLITOR


def pub_record(timestamp: int, region_id: str, group: str, topic: str, msg_id: str,
               tags: str | None, keys: str | None, store_host: str, body_length: int,
               cost_time: int, msg_type: int, offset_msg_id: str, success: bool) -> TraceRecord:
    """A Pub record from its fields, without a context (the send hook's way: one
    per message sent)."""
    text = (f"Pub{CONTENT_SPLITOR}{timestamp}{CONTENT_SPLITOR}{_plain(region_id)}"
            f"{CONTENT_SPLITOR}{_plain(group)}{CONTENT_SPLITOR}{_plain(topic)}"
            f"{CONTENT_SPLITOR}{_plain(msg_id)}{CONTENT_SPLITOR}{_text(tags)}"
            f"{CONTENT_SPLITOR}{_text(keys)}{CONTENT_SPLITOR}{_plain(store_host)}"
            f"{CONTENT_SPLITOR}{body_length}{CONTENT_SPLITOR}{cost_time}{CONTENT_SPLITOR}"
            f"{msg_type}{CONTENT_SPLITOR}{_plain(offset_msg_id)}{CONTENT_SPLITOR}"
            f"{'true' if success else 'false'}{FIELD_SPLITOR}")
    return TraceRecord(text, msg_id, keys or "")


def encode_records(ctx: TraceContext) -> list[TraceRecord]:
    """The records of ``ctx``, one per bean (RocketMQ's encoderFromContextBean
    writes the same text for a context)."""
    t = ctx.trace_type
    out: list[TraceRecord] = []
    beans = ctx.beans
    if t is TraceType.Pub:
        b = beans[0]
        out.append(pub_record(ctx.timestamp, ctx.region_id, ctx.group_name, b.topic, b.msg_id,
                              b.tags, b.keys, b.store_host, b.body_length, ctx.cost_time,
                              int(b.msg_type), b.offset_msg_id, ctx.success))
    elif t is TraceType.SubBefore:
        for b in beans:
            text = _record((
                "SubBefore", ctx.timestamp, _plain(ctx.region_id), _plain(ctx.group_name),
                _plain(ctx.request_id), _plain(b.msg_id), b.retry_times, _text(b.keys)))
            out.append(TraceRecord(text, b.msg_id, b.keys))
    elif t is TraceType.SubAfter:
        for b in beans:
            text = _record((
                "SubAfter", _plain(ctx.request_id), _plain(b.msg_id), ctx.cost_time,
                _bool(ctx.success), _text(b.keys), ctx.context_code, ctx.timestamp,
                _text(ctx.group_name)))
            out.append(TraceRecord(text, b.msg_id, b.keys))
    else:
        b = beans[0]
        text = _record((
            "EndTransaction", ctx.timestamp, _plain(ctx.region_id), _plain(ctx.group_name),
            _plain(b.topic), _plain(b.msg_id), _text(b.tags), _text(b.keys),
            _plain(b.store_host), int(b.msg_type), _plain(b.transaction_id),
            _plain(b.transaction_state), _bool(b.from_transaction_check)))
        out.append(TraceRecord(text, b.msg_id, b.keys))
    return out


def encode(ctx: TraceContext) -> TraceTransferBean:
    """The records of ``ctx`` and the keys of its trace message: each bean's
    msgId, and its message's keys (one string, as RocketMQ adds it; the
    broker's index splits it at spaces)."""
    records = encode_records(ctx)
    keys: list[str] = []
    for r in records:
        keys.append(r.msg_id)
        if r.keys:
            keys.append(r.keys)
    return TraceTransferBean("".join(r.data for r in records), keys)


# ---- decoding --------------------------------------------------------------------


class _Bad(ValueError):
    """A record that cannot be read."""


def _int(text: str) -> int:
    # Java's parseInt/parseLong: an optional sign and ASCII digits only
    body = text[1:] if text[:1] in "+-" else text
    if not (body.isascii() and body.isdigit()) or len(body) > 19:
        raise _Bad(text)
    return int(text)


def _absent(text: str) -> str:
    return "" if text in ABSENT else text


def _java_bool(text: str) -> bool:
    return text.lower() == "true"  # Boolean.parseBoolean


def _msg_type(text: str) -> MessageType:
    try:
        return MessageType(_int(text))
    except ValueError:
        raise _Bad(text) from None


def _pub(line: list[str]) -> TraceContext:
    if len(line) < 12:
        raise _Bad("short Pub")
    bean = TraceBean(topic=line[4], msg_id=line[5], tags=_absent(line[6]),
                     keys=_absent(line[7]), store_host=line[8], body_length=_int(line[9]),
                     msg_type=_msg_type(line[11]))
    ctx = TraceContext(TraceType.Pub, timestamp=_int(line[1]), region_id=line[2],
                       group_name=line[3], cost_time=_int(line[10]), beans=[bean])
    if len(line) == 13:
        ctx.success = _java_bool(line[12])
    elif len(line) >= 14:
        bean.offset_msg_id = line[12]
        ctx.success = _java_bool(line[13])
        if len(line) >= 15:
            bean.client_host = line[14]
    return ctx


def _sub_before(line: list[str]) -> TraceContext:
    if len(line) < 8:
        raise _Bad("short SubBefore")
    bean = TraceBean(msg_id=line[5], retry_times=_int(line[6]), keys=_absent(line[7]))
    return TraceContext(TraceType.SubBefore, timestamp=_int(line[1]), region_id=line[2],
                        group_name=line[3], request_id=line[4], beans=[bean])


def _sub_after(line: list[str]) -> TraceContext:
    if len(line) < 6:
        raise _Bad("short SubAfter")
    bean = TraceBean(msg_id=line[2], keys=_absent(line[5]))
    ctx = TraceContext(TraceType.SubAfter, request_id=line[1], cost_time=_int(line[3]),
                       success=_java_bool(line[4]), region_id="", beans=[bean],
                       has_timestamp=False)
    if len(line) >= 7:
        ctx.context_code = _int(line[6])
    if len(line) >= 8:
        ctx.timestamp, ctx.has_timestamp = _int(line[7]), True
    if len(line) >= 9:
        ctx.group_name = _absent(line[8])
    return ctx


def _end_transaction(line: list[str]) -> TraceContext:
    if len(line) < 13:
        raise _Bad("short EndTransaction")
    bean = TraceBean(topic=line[4], msg_id=line[5], tags=_absent(line[6]),
                     keys=_absent(line[7]), store_host=line[8], msg_type=_msg_type(line[9]),
                     transaction_id=line[10], transaction_state=line[11],
                     from_transaction_check=_java_bool(line[12]))
    return TraceContext(TraceType.EndTransaction, timestamp=_int(line[1]), region_id=line[2],
                        group_name=line[3], beans=[bean])


_READERS = {
    TraceType.Pub.value: _pub,
    TraceType.SubBefore.value: _sub_before,
    TraceType.SubAfter.value: _sub_after,
    TraceType.EndTransaction.value: _end_transaction,
}


# where each record type holds its msgId
_MSG_ID_FIELD = {"Pub": 5, "SubBefore": 5, "SubAfter": 2, "EndTransaction": 5}
_MAX_FIELDS = 15


def decode(text: str, msg_id: str | None = None, limit: int | None = None
           ) -> list[TraceContext]:
    """Every record of a trace message body that can be read (RocketMQ's
    decoderFromTraceDataString), one context each; the others are skipped.

    ``msg_id``: only the records of that message are built (a query reads
    bodies anyone may have written: the others cost a scan, not objects);
    ``limit``: at most that many contexts. Records are found one at a time,
    never by splitting the whole body."""
    out: list[TraceContext] = []
    start, end = 0, len(text)
    while start < end and (limit is None or len(out) < limit):
        stop = text.find(FIELD_SPLITOR, start)
        if stop < 0:
            stop = end
        record = text[start:stop]
        start = stop + 1
        kind, sep, _ = record.partition(CONTENT_SPLITOR)
        reader = _READERS.get(kind) if sep else None
        if reader is None:
            continue
        # no record type reads past its 15th field: the rest stays one string
        line = record.split(CONTENT_SPLITOR, _MAX_FIELDS)
        if msg_id is not None:
            at = _MSG_ID_FIELD[kind]
            if len(line) <= at or line[at] != msg_id:
                continue
        try:
            out.append(reader(line))
        except _Bad:
            continue
    return out


# ---- what a query shows ----------------------------------------------------------


@dataclass(slots=True)
class TraceView:
    """One trace record of one message, as ``queryMsgTraceById`` and the dashboard
    show it (RocketMQ's TraceView): ``client_host`` is the host that sent the
    trace message (its born host)."""

    trace_type: str  # Pub, SubBefore, SubAfter, EndTransaction
    msg_id: str
    group_name: str
    client_host: str
    timestamp: int  # ms; 0: unknown
    cost_time: int
    success: bool
    topic: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    offset_msg_id: str = ""
    body_length: int = 0
    msg_type: str = ""
    region_id: str = ""
    request_id: str = ""
    retry_times: int = 0
    context_code: int = 0

    @property
    def status(self) -> str:
        return "success" if self.success else "failed"

    def to_dict(self) -> dict[str, object]:
        return {
            "type": self.trace_type, "msgId": self.msg_id, "groupName": self.group_name,
            "clientHost": self.client_host, "timestamp": self.timestamp,
            "costTime": self.cost_time, "status": self.status, "success": self.success,
            "topic": self.topic, "tags": self.tags, "keys": self.keys,
            "storeHost": self.store_host, "offsetMsgId": self.offset_msg_id,
            "bodyLength": self.body_length, "msgType": self.msg_type,
            "regionId": self.region_id, "requestId": self.request_id,
            "retryTimes": self.retry_times, "contextCode": self.context_code,
        }


def trace_views(msg_id: str, records: Iterable[tuple[str, TraceContext]]) -> list[TraceView]:
    """The views of ``msg_id`` among ``records`` ((client host, context) of every
    record read from the trace messages a key query found), ordered by time.

    RocketMQ's TraceView shows a SubAfter with no group (before 4.9.x it wrote
    none) and, without a timestamp, the time it was read. Here a SubAfter takes
    the group and region of its SubBefore (the same request id and msgId), and
    a SubAfter with no timestamp (the C++ client's) the time its consumption
    ended: the SubBefore's time plus the cost, or 0 (unknown). Consume records
    hold no topic: theirs is the Pub record's, when it is found."""
    befores: dict[tuple[str, str], TraceContext] = {}
    found: list[tuple[str, TraceContext, TraceBean]] = []
    topic = ""
    for host, ctx in records:
        for bean in ctx.beans:
            if bean.msg_id != msg_id:
                continue
            found.append((host, ctx, bean))
            if ctx.trace_type is TraceType.SubBefore:
                befores.setdefault((ctx.request_id, bean.msg_id), ctx)
            elif ctx.trace_type is TraceType.Pub and bean.topic:
                topic = topic or bean.topic
    views: list[TraceView] = []
    for host, ctx, bean in found:
        group, region, timestamp = ctx.group_name, ctx.region_id, ctx.timestamp
        if ctx.trace_type is TraceType.SubAfter:
            before = befores.get((ctx.request_id, bean.msg_id))
            if before is not None:
                group = group or before.group_name
                region = region or before.region_id
                if not ctx.has_timestamp:
                    timestamp = before.timestamp + ctx.cost_time
        views.append(TraceView(
            trace_type=ctx.trace_type.value, msg_id=bean.msg_id, group_name=group,
            client_host=host, timestamp=timestamp, cost_time=ctx.cost_time,
            success=ctx.success, topic=bean.topic or topic, tags=bean.tags, keys=bean.keys,
            store_host=bean.store_host, offset_msg_id=bean.offset_msg_id,
            body_length=bean.body_length,
            msg_type=bean.msg_type.name if ctx.trace_type in (
                TraceType.Pub, TraceType.EndTransaction) else "",
            region_id=region, request_id=ctx.request_id, retry_times=bean.retry_times,
            context_code=ctx.context_code))
    order = {TraceType.Pub.value: 0, TraceType.SubBefore.value: 1,
             TraceType.SubAfter.value: 2, TraceType.EndTransaction.value: 3}
    views.sort(key=lambda v: (v.timestamp, order.get(v.trace_type, 9)))
    return views
