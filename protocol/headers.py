"""Typed request and response headers (the ``ext_fields`` map).

Each header is a dataclass whose snake_case fields travel under RocketMQ's
camelCase names. ``from_fields`` validates types and raises
RemoteProtocolError naming the offending field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from protocol.errors import RemoteProtocolError


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


class Header:
    """Base of every header dataclass."""

    _wire: ClassVar[list[tuple[str, str, type, bool, bool]]]

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._wire = []

    @classmethod
    def _spec(cls) -> list[tuple[str, str, type, bool, bool]]:
        if not cls._wire:
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):  # type: ignore[arg-type]
                typ = hints[f.name]
                optional = False
                if isinstance(typ, types.UnionType):
                    args = [a for a in typ.__args__ if a is not type(None)]
                    optional = len(args) < len(typ.__args__)
                    typ = args[0]
                required = (
                    f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                )
                cls._wire.append((f.name, _camel(f.name), typ, optional, required))
        return cls._wire

    def to_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, wire, _typ, _opt, _req in self._spec():
            value = getattr(self, name)
            if value is not None:
                out[wire] = value
        return out

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> Self:
        kwargs: dict[str, Any] = {}
        for name, wire, typ, optional, required in cls._spec():
            if wire not in fields or fields[wire] is None:
                if required and not optional:
                    raise RemoteProtocolError(f"{cls.__name__}: missing field {wire!r}")
                continue
            value = fields[wire]
            if typ is int and (type(value) is bool or not isinstance(value, int)):
                raise RemoteProtocolError(f"{cls.__name__}: field {wire!r} must be an integer")
            if typ is not int and not isinstance(value, typ):
                raise RemoteProtocolError(
                    f"{cls.__name__}: field {wire!r} must be {typ.__name__}"
                )
            kwargs[name] = value
        return cls(**kwargs)


# ---- producer -------------------------------------------------------------


@dataclass(slots=True)
class SendMessageRequestHeader(Header):
    producer_group: str
    topic: str
    queue_id: int
    sys_flag: int = 0
    born_timestamp: int = 0
    flag: int = 0
    properties: str = ""
    reconsume_times: int = 0
    default_topic: str = "TBW102"
    default_topic_queue_nums: int = 4
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None


@dataclass(slots=True)
class SendMessageResponseHeader(Header):
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    batch_uniq_id: str | None = None


# ---- consumer -------------------------------------------------------------


@dataclass(slots=True)
class PullMessageRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int = 0
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
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int


@dataclass(slots=True)
class QueryConsumerOffsetResponseHeader(Header):
    offset: int


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@dataclass(slots=True)
class GetMaxOffsetRequestHeader(Header):
    topic: str
    queue_id: int


@dataclass(slots=True)
class GetMinOffsetRequestHeader(Header):
    topic: str
    queue_id: int


@dataclass(slots=True)
class OffsetResponseHeader(Header):
    offset: int


# ---- admin ----------------------------------------------------------------


@dataclass(slots=True)
class CreateTopicRequestHeader(Header):
    topic: str
    default_topic: str = "TBW102"
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False


@dataclass(slots=True)
class DeleteTopicRequestHeader(Header):
    topic: str


@dataclass(slots=True)
class GetTopicStatsInfoRequestHeader(Header):
    topic: str


# ---- name server ----------------------------------------------------------


@dataclass(slots=True)
class RegisterBrokerRequestHeader(Header):
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    compressed: bool = False
    body_crc32: int = 0


@dataclass(slots=True)
class RegisterBrokerResponseHeader(Header):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True)
class UnRegisterBrokerRequestHeader(Header):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(slots=True)
class GetRouteInfoRequestHeader(Header):
    topic: str


@dataclass(slots=True)
class WipeWritePermOfBrokerRequestHeader(Header):
    broker_name: str


@dataclass(slots=True)
class WipeWritePermOfBrokerResponseHeader(Header):
    wipe_topic_count: int


# ---- queries --------------------------------------------------------------


@dataclass(slots=True)
class SearchOffsetRequestHeader(Header):
    topic: str
    queue_id: int
    timestamp: int


@dataclass(slots=True)
class ViewMessageRequestHeader(Header):
    offset: int


@dataclass(slots=True)
class QueryMessageRequestHeader(Header):
    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int


@dataclass(slots=True)
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None
