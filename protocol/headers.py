"""Typed request and response headers (the ``ext_fields`` map).

Each header is a dataclass whose snake_case fields travel under RocketMQ's
camelCase names. ``from_fields`` validates types and raises
RemoteProtocolError naming the offending field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Self

from protocol import names
from protocol.errors import RemoteProtocolError
from protocol.topic_attributes import MAX_UPDATE_TEXT


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


class IntRange:
    """Metadata of an int field: its wire width and meaning."""

    __slots__ = ("lo", "hi", "meaning")

    def __init__(self, lo: int, hi: int, meaning: str) -> None:
        self.lo, self.hi, self.meaning = lo, hi, meaning


class NameRule:
    """Metadata of a str field holding a name: ``problem(value)`` is None when valid."""

    __slots__ = ("problem",)

    def __init__(self, problem: Callable[[object], str | None]) -> None:
        self.problem = problem


class MaxLen:
    """Metadata of a free-text str field: its longest accepted value."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n


INT32 = IntRange(-(2**31), 2**31 - 1, "a 32-bit integer")
INT64 = IntRange(-(2**63), 2**63 - 1, "a 64-bit integer")
UINT32 = IntRange(0, 2**31 - 1, "a non-negative 32-bit integer")
UINT64 = IntRange(0, 2**63 - 1, "a non-negative 64-bit integer")
PORT = IntRange(1, 65535, "a port (1..65535)")
# Free text (properties, keys, subscriptions) is bounded like the record's properties.
DEFAULT_MAX_TEXT = 32767

Int32 = Annotated[int, INT32]
Int64 = Annotated[int, INT64]
NonNegInt32 = Annotated[int, UINT32]
NonNegInt64 = Annotated[int, UINT64]
Topic = Annotated[str, NameRule(names.topic_problem)]
Group = Annotated[str, NameRule(names.group_problem)]
BrokerName = Annotated[str, NameRule(names.broker_name_problem)]
ClusterName = Annotated[str, NameRule(names.cluster_name_problem)]
Address = Annotated[str, NameRule(names.addr_problem)]
Port = Annotated[int, PORT]

# (attribute, wire name, type, optional, required, check)
_Check = IntRange | NameRule | MaxLen | None
_Field = tuple[str, str, type, bool, bool, _Check]


def _unwrap(typ: Any) -> tuple[Any, bool, _Check]:
    """(base type, optional, check) of an annotation such as ``Topic | None``."""
    optional = False
    if isinstance(typ, types.UnionType) or typing.get_origin(typ) is typing.Union:
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        optional = len(args) < len(typing.get_args(typ))
        typ = args[0]
    check: _Check = None
    if typing.get_origin(typ) is Annotated:
        typ, *meta = typing.get_args(typ)
        check = meta[0]
    if check is None:
        if typ is int:
            check = INT64
        elif typ is str:
            check = MaxLen(DEFAULT_MAX_TEXT)
    return typ, optional, check


class Header:
    """Base of every header dataclass.

    ``from_fields`` and ``to_fields`` are generated per class on first use
    (straight-line code, as dataclasses builds ``__init__``): a send's header
    is decoded on every request, and a loop over field specs cost ~25 µs.
    """

    _wire: ClassVar[list[_Field]]

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._wire = []
        # each class gets its own codec, built when first used
        cls.from_fields = classmethod(_lazy_from_fields)  # type: ignore[assignment]
        cls.to_fields = _lazy_to_fields  # type: ignore[method-assign]

    @classmethod
    def _spec(cls) -> list[_Field]:
        if not cls._wire:
            hints = typing.get_type_hints(cls, include_extras=True)
            for f in dataclasses.fields(cls):  # type: ignore[arg-type]
                typ, optional, check = _unwrap(hints[f.name])
                required = (
                    f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                )
                cls._wire.append((f.name, _camel(f.name), typ, optional, required, check))
        return cls._wire

    def to_fields(self) -> dict[str, Any]:
        """The wire map: camelCase names, None values left out."""
        raise NotImplementedError  # replaced per subclass (__init_subclass__)

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> Self:
        """Decode and check every field; RemoteProtocolError names the first bad one."""
        raise NotImplementedError  # replaced per subclass (__init_subclass__)


def _lazy_from_fields(cls: type[Header], fields: dict[str, Any]) -> Any:
    decode = _build_from_fields(cls)
    cls.from_fields = classmethod(decode)  # type: ignore[assignment]
    return decode(cls, fields)


def _lazy_to_fields(self: Header) -> dict[str, Any]:
    cls = type(self)
    encode = _build_to_fields(cls)
    cls.to_fields = encode  # type: ignore[method-assign,assignment]
    return encode(self)


def wire_int(value: object, message: str) -> int:
    """An integer header value that came as text (RocketMQ's format sends every
    header value as a string: "12", "-1"); RemoteProtocolError otherwise."""
    if isinstance(value, str) and 0 < len(value) <= 24:
        if value.isdigit() and value.isascii():  # the usual form ("12"): no sign, no space
            return int(value)
        text = value.strip()
        digits = text[1:] if text[:1] in ("-", "+") else text
        if digits.isascii() and digits.isdigit():  # not "1_0", not other scripts' digits
            return int(text)
    raise RemoteProtocolError(message)


def wire_bool(value: object, message: str) -> bool:
    """A boolean header value that came as text or a number: "true"/"false"
    (Java's clients), "1"/"0" (the C++ client), 1/0."""
    if isinstance(value, str):
        if value == "false":  # the usual forms (Java's clients, a signed request's)
            return False
        if value == "true":
            return True
        text = value.strip().lower()
        if text in ("true", "1"):
            return True
        if text in ("false", "0"):
            return False
    elif type(value) is int and value in (0, 1):
        return bool(value)
    raise RemoteProtocolError(message)


def wire_str(value: object, message: str) -> str:
    """A text header value that came as a JSON number or boolean."""
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    raise RemoteProtocolError(message)


def _build_from_fields(cls: type[Header]) -> Callable[..., Any]:
    """Straight-line ``from_fields`` for ``cls``: per field, look it up, then
    the same checks and messages as a generic loop over ``_spec`` would make."""
    ns: dict[str, Any] = {"E": RemoteProtocolError, "isinstance": isinstance, "len": len,
                          "type": type, "int": int, "TO_INT": wire_int, "TO_BOOL": wire_bool,
                          "TO_STR": wire_str}
    defaults = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    lines = ["def from_fields(cls, fields):", "    get = fields.get"]
    args = []
    who = cls.__name__
    for i, (name, wire, typ, optional, required, check) in enumerate(cls._spec()):
        field = defaults[name]
        lines.append(f"    v = get({wire!r})")
        lines.append("    if v is None:")
        if required and not optional:
            lines.append(f"        raise E({f'{who}: missing field {wire!r}'!r})")
        elif field.default is not dataclasses.MISSING:
            ns[f"D{i}"] = field.default
            lines.append(f"        v = D{i}")
        elif field.default_factory is not dataclasses.MISSING:
            ns[f"D{i}"] = field.default_factory
            lines.append(f"        v = D{i}()")
        else:
            lines.append("        pass")
        if typ is int:
            assert isinstance(check, IntRange)
            ns[f"LO{i}"], ns[f"HI{i}"] = check.lo, check.hi
            lines.append("    else:")
            lines.append("        if type(v) is not int:")
            lines.append(f"            v = TO_INT(v, {f'{who}: field {wire!r} must be an integer'!r})")
            lines.append(f"        if not LO{i} <= v <= HI{i}:")
            msg = f"{who}: field {wire!r} must be {check.meaning}, got "
            lines.append(f"            raise E({msg!r} + str(v))")
        else:
            ns[f"T{i}"] = typ
            checks: list[str] = []
            if isinstance(check, NameRule):
                ns[f"P{i}"] = check.problem
                checks = [f"p = P{i}(v)", "if p is not None:",
                          f"    raise E({f'{who}: field {wire!r}: '!r} + p)"]
            elif isinstance(check, MaxLen):
                msg = f"{who}: field {wire!r} is longer than {check.n} characters"
                checks = [f"if len(v) > {check.n}:", f"    raise E({msg!r})"]
            lines.append(f"    elif not isinstance(v, T{i}):")
            wrong = f"{who}: field {wire!r} must be {typ.__name__}"
            convert = "TO_BOOL" if typ is bool else "TO_STR" if typ is str else None
            if convert is None:
                lines.append(f"        raise E({wrong!r})")
            else:
                # a value in another JSON type (RocketMQ's format), then the same checks
                lines.append(f"        v = {convert}(v, {wrong!r})")
                lines += ["        " + c for c in checks]
            if checks:
                lines.append("    else:")
                lines += ["        " + c for c in checks]
        lines.append(f"    a{i} = v")
        args.append(f"{name}=a{i}")
    lines.append(f"    return cls({', '.join(args)})")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from the class's own fields
    fn: Callable[..., Any] = ns["from_fields"]
    return fn


def _build_to_fields(cls: type[Header]) -> Callable[[Any], dict[str, Any]]:
    lines = ["def to_fields(self):", "    out = {}"]
    for name, wire, *_ in cls._spec():
        lines.append(f"    v = self.{name}")
        lines.append("    if v is not None:")
        lines.append(f"        out[{wire!r}] = v")
    lines.append("    return out")
    ns: dict[str, Any] = {}
    exec("\n".join(lines), ns)  # noqa: S102 - generated from the class's own fields
    fn: Callable[[Any], dict[str, Any]] = ns["to_fields"]
    return fn


# ---- producer -------------------------------------------------------------


@dataclass(slots=True)
class SendMessageRequestHeader(Header):
    producer_group: Group
    topic: str
    queue_id: Int32
    sys_flag: Int32 = 0
    born_timestamp: NonNegInt64 = 0
    flag: Int32 = 0
    properties: str = ""
    reconsume_times: NonNegInt32 = 0
    default_topic: Topic = "TBW102"
    default_topic_queue_nums: NonNegInt32 = 4
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: NonNegInt32 | None = None


@dataclass(slots=True)
class SendMessageRequestHeaderV2(Header):
    """SEND_MESSAGE_V2 (310), and SEND_BATCH_MESSAGE (320) from RocketMQ's
    clients: ``SendMessageRequestHeader`` under one-letter names (RocketMQ's
    SendMessageRequestHeaderV2, for shorter headers). ``a`` to ``h`` are
    required, as RocketMQ's @CFNotNull; ``n`` (the broker's name, RocketMQ 5)
    is read and not used."""

    a: Group  # producerGroup
    b: str  # topic (checked by the send processor, as SendMessageRequestHeader's)
    c: Topic  # defaultTopic
    d: NonNegInt32  # defaultTopicQueueNums
    e: Int32  # queueId
    f: Int32  # sysFlag
    g: NonNegInt64  # bornTimestamp
    h: Int32  # flag
    i: str = ""  # properties
    j: NonNegInt32 = 0  # reconsumeTimes
    k: bool = False  # unitMode
    l: NonNegInt32 | None = None  # noqa: E741 - maxReconsumeTimes (consumeRetryTimes)
    m: bool = False  # batch
    n: Annotated[str, MaxLen(255)] | None = None  # brokerName

    def to_v1(self) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(
            producer_group=self.a, topic=self.b, queue_id=self.e, sys_flag=self.f,
            born_timestamp=self.g, flag=self.h, properties=self.i, reconsume_times=self.j,
            default_topic=self.c, default_topic_queue_nums=self.d, unit_mode=self.k,
            batch=self.m, max_reconsume_times=self.l,
        )

    @classmethod
    def from_v1(cls, v1: SendMessageRequestHeader, broker_name: str | None = None
                ) -> SendMessageRequestHeaderV2:
        return cls(a=v1.producer_group, b=v1.topic, c=v1.default_topic,
                   d=v1.default_topic_queue_nums, e=v1.queue_id, f=v1.sys_flag,
                   g=v1.born_timestamp, h=v1.flag, i=v1.properties, j=v1.reconsume_times,
                   k=v1.unit_mode, l=v1.max_reconsume_times, m=v1.batch, n=broker_name)


def is_v2_send_header(fields: dict[str, Any]) -> bool:
    """Whether a SEND_BATCH_MESSAGE header is RocketMQ's V2 (one-letter names,
    what RocketMQ's clients send) rather than SendMessageRequestHeader's names
    (what this project's producer sends)."""
    return "topic" not in fields and ("b" in fields or "a" in fields)


@dataclass(slots=True)
class SendMessageResponseHeader(Header):
    msg_id: str
    queue_id: Int32
    queue_offset: int
    transaction_id: str | None = None
    batch_uniq_id: str | None = None
    recall_handle: str | None = None  # a timer message's (RocketMQ 5.3)


@dataclass(slots=True)
class RecallMessageRequestHeader(Header):
    """RECALL_MESSAGE (370): cancel a pending timer message
    (protocol/recall_handle.py); the response's ``msgId`` is its unique key."""

    producer_group: Group
    topic: Topic
    recall_handle: Annotated[str, MaxLen(1024)]


@dataclass(slots=True)
class RecallMessageResponseHeader(Header):
    msg_id: str


# ---- consumer -------------------------------------------------------------


@dataclass(slots=True)
class PullMessageRequestHeader(Header):
    consumer_group: Group
    topic: Topic
    queue_id: Int32
    queue_offset: int
    max_msg_nums: Int32
    sys_flag: Int32 = 0
    commit_offset: int = 0
    suspend_timeout_millis: int = 0
    subscription: str = "*"
    sub_version: int = 0
    expression_type: str = "TAG"


@dataclass(slots=True)
class PullMessageResponseHeader(Header):
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass(slots=True)
class PopMessageRequestHeader(Header):
    """POP_MESSAGE (RocketMQ 5): up to ``max_msg_nums`` messages, invisible to
    the group for ``invisible_time`` ms unless acked; ``queue_id`` -1: any
    queue; ``poll_time`` > 0: wait that long (ms) for messages."""

    consumer_group: Group
    topic: Topic
    queue_id: Int32
    max_msg_nums: Int32
    invisible_time: Int64
    poll_time: Int64 = 0
    born_time: Int64 = 0
    init_mode: Int32 = 0
    exp_type: Annotated[str, MaxLen(32)] = "TAG"
    exp: Annotated[str, MaxLen(DEFAULT_MAX_TEXT)] = "*"
    order: bool = False


@dataclass(slots=True)
class PopMessageResponseHeader(Header):
    """``receipt_handles``: one per message of the body, in order, separated by
    spaces (ours; RocketMQ's clients build theirs from the other fields)."""

    pop_time: int
    invisible_time: int
    revive_qid: int = 0
    rest_num: int = 0
    receipt_handles: str = ""


@dataclass(slots=True)
class AckMessageRequestHeader(Header):
    """ACK_MESSAGE: ``extra_info`` is the message's receipt handle."""

    consumer_group: Group
    topic: Topic
    queue_id: Int32
    extra_info: Annotated[str, MaxLen(1024)]
    offset: Int64


@dataclass(slots=True)
class BatchAckMessageRequestHeader(Header):
    """BATCH_ACK_MESSAGE: the receipt handles of ``topic`` (or of the group's
    retry topic) are in the body (protocol/batch_ack.py)."""

    consumer_group: Group
    topic: Topic


@dataclass(slots=True)
class ChangeInvisibleTimeRequestHeader(Header):
    """CHANGE_MESSAGE_INVISIBLETIME: the message of ``extra_info`` (its
    receipt handle) is invisible for ``invisible_time`` ms from now."""

    consumer_group: Group
    topic: Topic
    queue_id: Int32
    extra_info: Annotated[str, MaxLen(1024)]
    offset: Int64
    invisible_time: Int64


@dataclass(slots=True)
class ChangeInvisibleTimeResponseHeader(Header):
    """``receipt_handle``: the message's new handle (the old one is refused
    from now on)."""

    pop_time: int
    invisible_time: int
    revive_qid: int = 0
    receipt_handle: str = ""


@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    """RocketMQ's; ``setZeroIfNotFound`` (RocketMQ 5) false asks for
    QUERY_NOT_FOUND rather than a new group's 0 (broker/new_group_offset.py)."""

    consumer_group: Group
    topic: Topic
    queue_id: Int32
    set_zero_if_not_found: bool | None = None


@dataclass(slots=True)
class QueryConsumerOffsetResponseHeader(Header):
    offset: int


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    """RocketMQ's, and two fields of ours (left out when None; RocketMQ's
    brokers ignore them): ``adminReset`` marks an admin's reset (mqadmin
    resetOffsetByTime), counted by the broker; ``increaseOnly`` is a slave
    handing its master an offset committed on it (SlaveSynchronize): taken only
    forward, and only while the key's reset counter is still ``resetVersion``."""

    consumer_group: Group
    topic: Topic
    queue_id: Int32
    commit_offset: int
    admin_reset: bool | None = None
    increase_only: bool | None = None
    reset_version: NonNegInt64 | None = None


@dataclass(slots=True)
class GetMaxOffsetRequestHeader(Header):
    topic: Topic
    queue_id: Int32


@dataclass(slots=True)
class GetMinOffsetRequestHeader(Header):
    topic: Topic
    queue_id: Int32


@dataclass(slots=True)
class OffsetResponseHeader(Header):
    offset: int


# ---- admin ----------------------------------------------------------------


@dataclass(slots=True)
class CreateTopicRequestHeader(Header):
    topic: Topic
    default_topic: Topic = "TBW102"
    read_queue_nums: Int32 = 16
    write_queue_nums: Int32 = 16
    perm: Int32 = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: Int32 = 0
    order: bool = False
    # RocketMQ 5: "+key=value,-key" changes of the topic's attributes
    # (protocol/topic_attributes.py); None: none
    attributes: Annotated[str, MaxLen(MAX_UPDATE_TEXT)] | None = None


@dataclass(slots=True)
class DeleteTopicRequestHeader(Header):
    topic: Topic


@dataclass(slots=True)
class GetTopicStatsInfoRequestHeader(Header):
    topic: Topic


@dataclass(slots=True)
class GetTopicConfigRequestHeader(Header):
    topic: Topic


@dataclass(slots=True)
class QueryConsumeQueueRequestHeader(Header):
    topic: Topic
    queue_id: NonNegInt32
    index: NonNegInt64  # the first consume-queue entry to show
    count: Int32  # how many (the broker bounds it)
    consumer_group: Group | None = None  # its subscription: which entries it would read


@dataclass(slots=True)
class ViewBrokerStatsDataRequestHeader(Header):
    stats_name: Annotated[str, MaxLen(64)]
    stats_key: Annotated[str, MaxLen(1024)]


@dataclass(slots=True)
class QueryTopicConsumeByWhoRequestHeader(Header):
    topic: Topic


@dataclass(slots=True)
class GetProducerConnectionListRequestHeader(Header):
    producer_group: Group


# ---- name server ----------------------------------------------------------


@dataclass(slots=True)
class RegisterBrokerRequestHeader(Header):
    broker_name: BrokerName
    broker_addr: Address
    cluster_name: ClusterName
    broker_id: NonNegInt64
    ha_server_addr: Address | None = None  # only once the broker listens on its HA port
    compressed: bool = False
    body_crc32: int = 0
    # the body holds only the topics changed since its baseDataVersion ("deletedTopics"
    # lists the deleted ones); sent only to a name server that answered incrementalOk
    incremental: bool = False
    # the broker sends incremental registrations to a name server answering incrementalOk
    incremental_capable: bool = False
    # the broker serves apache.rocketmq.v2 gRPC on this port of its address's host
    # (enableGrpc; docs/grpc.md): routes carry it for RocketMQ 5's clients
    grpc_port: Port | None = None
    # controller mode (RocketMQ 5's stateVersion, #6316): the masterEpoch of the role the
    # broker holds and its SyncStateSet epoch; of two live brokerId 0 registrations of a
    # broker name the name server keeps the higher masterEpoch. None: not in controller
    # mode (or an older broker): registrations conflict as before
    master_epoch: NonNegInt64 | None = None
    sync_state_set_epoch: NonNegInt64 | None = None


@dataclass(slots=True)
class RegisterBrokerResponseHeader(Header):
    ha_server_addr: Address | None = None
    master_addr: Address | None = None
    # this name server applies incremental registrations (answered to incrementalCapable)
    incremental_ok: bool = False
    # an incremental registration was not applied: the name server does not hold the
    # broker's baseDataVersion (restarted, expired, another connection); send the whole table
    need_full: bool = False


@dataclass(slots=True)
class UnRegisterBrokerRequestHeader(Header):
    broker_name: BrokerName
    broker_addr: Address
    cluster_name: ClusterName
    broker_id: NonNegInt64


@dataclass(slots=True)
class GetRouteInfoRequestHeader(Header):
    topic: Topic


@dataclass(slots=True)
class WipeWritePermOfBrokerRequestHeader(Header):
    broker_name: BrokerName


@dataclass(slots=True)
class WipeWritePermOfBrokerResponseHeader(Header):
    wipe_topic_count: int


@dataclass(slots=True)
class AddWritePermOfBrokerRequestHeader(Header):
    broker_name: BrokerName


@dataclass(slots=True)
class AddWritePermOfBrokerResponseHeader(Header):
    add_topic_count: int


# ---- name server: KV config ---------------------------------------------------

# Namespaces and keys of the name server's KV config (RocketMQ's KVConfigManager).
KV_NAME_MAX_LENGTH = 255
KV_VALUE_MAX_LENGTH = DEFAULT_MAX_TEXT


def kv_name_problem(value: object) -> str | None:
    """None when ``value`` may name a KV config namespace or key: 1 to 255
    characters, no control characters."""
    if not isinstance(value, str):
        return "must be a string"
    if not value:
        return "must not be empty"
    if len(value) > KV_NAME_MAX_LENGTH:
        return f"is longer than {KV_NAME_MAX_LENGTH} characters"
    if not value.isprintable():
        return f"{names.shown(value)} holds a control character"
    return None


KVName = Annotated[str, NameRule(kv_name_problem)]
KVValue = Annotated[str, MaxLen(KV_VALUE_MAX_LENGTH)]


@dataclass(slots=True)
class PutKVConfigRequestHeader(Header):
    namespace: KVName
    key: KVName
    value: KVValue


@dataclass(slots=True)
class GetKVConfigRequestHeader(Header):
    namespace: KVName
    key: KVName


@dataclass(slots=True)
class GetKVConfigResponseHeader(Header):
    value: str | None = None


@dataclass(slots=True)
class DeleteKVConfigRequestHeader(Header):
    namespace: KVName
    key: KVName


@dataclass(slots=True)
class GetKVListByNamespaceRequestHeader(Header):
    namespace: KVName


# ---- consumers, by an admin (mqadmin skipAccumulatedMessage, consumerStatus) ----

ClientId = Annotated[str, MaxLen(255)]


@dataclass(slots=True)
class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (admin -> broker) and RESET_CONSUMER_CLIENT_OFFSET
    (broker -> consumer, oneway): move ``group``'s offsets of ``topic`` to the first
    message stored at or after ``timestamp`` (ms; -1: past the last message). Without
    ``is_force`` an offset only moves back (RocketMQ's rollback)."""

    topic: Topic
    group: Group
    timestamp: Int64
    is_force: bool = True


@dataclass(slots=True)
class GetConsumerRunningInfoRequestHeader(Header):
    """GET_CONSUMER_RUNNING_INFO (admin -> broker -> consumer): a consumer's state."""

    consumer_group: Group
    client_id: ClientId
    jstack_enable: bool = False


# ---- queries --------------------------------------------------------------


@dataclass(slots=True)
class SearchOffsetRequestHeader(Header):
    topic: Topic
    queue_id: Int32
    timestamp: int


@dataclass(slots=True)
class ViewMessageRequestHeader(Header):
    offset: int


@dataclass(slots=True)
class QueryMessageRequestHeader(Header):
    topic: Topic
    key: str
    max_num: Int32
    begin_timestamp: int
    end_timestamp: int


@dataclass(slots=True)
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    offset: int
    group: Group
    delay_level: Int32
    origin_msg_id: str | None = None
    origin_topic: Topic | None = None
    unit_mode: bool = False
    max_reconsume_times: NonNegInt32 | None = None


# ---- transactions -----------------------------------------------------------


@dataclass(slots=True)
class EndTransactionRequestHeader(Header):
    """END_TRANSACTION (producer -> broker, oneway): how a half message ends.

    ``tran_state_table_offset`` and ``commit_log_offset`` locate the half
    message (its queue offset in RMQ_SYS_TRANS_HALF_TOPIC and its commit-log
    offset); ``commit_or_rollback`` is a sysFlag transaction type:
    TRANSACTION_COMMIT_TYPE (8), TRANSACTION_ROLLBACK_TYPE (12) or
    TRANSACTION_NOT_TYPE (0, unknown: nothing happens, the broker asks later).
    """

    producer_group: Group
    tran_state_table_offset: NonNegInt64
    commit_log_offset: NonNegInt64
    commit_or_rollback: Int32
    from_transaction_check: bool = False
    msg_id: Annotated[str, MaxLen(128)] | None = None
    transaction_id: Annotated[str, MaxLen(128)] | None = None


@dataclass(slots=True)
class CheckTransactionStateRequestHeader(Header):
    """CHECK_TRANSACTION_STATE (broker -> producer, oneway); the body is the
    half message's commit-log record (protocol.record.decode_record)."""

    tran_state_table_offset: NonNegInt64
    commit_log_offset: NonNegInt64
    msg_id: Annotated[str, MaxLen(128)] | None = None
    transaction_id: Annotated[str, MaxLen(128)] | None = None
    offset_msg_id: Annotated[str, MaxLen(128)] | None = None


# ---- ACL administration (RocketMQ 4.x's plain ACL admin requests) --------------

AclKey = Annotated[str, MaxLen(255)]


@dataclass(slots=True)
class DeleteAccessConfigRequestHeader(Header):
    """DELETE_ACL_CONFIG: the account to delete."""

    access_key: AclKey


@dataclass(slots=True)
class UpdateGlobalWhiteAddrsConfigRequestHeader(Header):
    """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: comma-separated address patterns (the
    new list, replacing the file's)."""

    global_white_addrs: str


@dataclass(slots=True)
class GetBrokerAclConfigResponseHeader(Header):
    """GET_BROKER_CLUSTER_ACL_INFO's answer: ``version`` is the ACL file's
    DataVersion as JSON; ``all_acl_file_version`` maps the file to it."""

    version: str
    broker_name: str
    broker_addr: str
    cluster_name: str
    all_acl_file_version: str | None = None
