"""Message model: Message, MessageExt, MessageQueue and RocketMQ's property keys."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field


class MessageConst:
    """Property names, as in RocketMQ's MessageConst."""

    PROPERTY_KEYS = "KEYS"
    PROPERTY_TAGS = "TAGS"
    PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
    PROPERTY_DELAY_TIME_LEVEL = "DELAY"
    PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
    PROPERTY_REAL_TOPIC = "REAL_TOPIC"
    PROPERTY_REAL_QUEUE_ID = "REAL_QID"
    PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
    PROPERTY_PRODUCER_GROUP = "PGROUP"
    PROPERTY_MIN_OFFSET = "MIN_OFFSET"
    PROPERTY_MAX_OFFSET = "MAX_OFFSET"
    PROPERTY_BUYER_ID = "BUYER_ID"
    PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    PROPERTY_TRANSFER_FLAG = "TRANSFER_FLAG"
    PROPERTY_CORRECTION_FLAG = "CORRECTION_FLAG"
    PROPERTY_MQ2_FLAG = "MQ2_FLAG"
    PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
    PROPERTY_MSG_REGION = "MSG_REGION"
    PROPERTY_TRACE_SWITCH = "TRACE_ON"
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    PROPERTY_SHARDING_KEY = "SHARDING_KEY"
    # timer messages (RocketMQ 5): an absolute delivery time or a relative delay
    PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
    # set by the broker: the due time it computed; a recall marker's unique key
    PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
    PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"

    KEY_SEPARATOR = " "


# the properties that make a send a timer message (RocketMQ 5's)
TIMER_INPUTS = (MessageConst.PROPERTY_TIMER_DELIVER_MS, MessageConst.PROPERTY_TIMER_DELAY_SEC,
                MessageConst.PROPERTY_TIMER_DELAY_MS)

# Short aliases used across the code base.
PROPERTY_KEYS = MessageConst.PROPERTY_KEYS
PROPERTY_TAGS = MessageConst.PROPERTY_TAGS
PROPERTY_UNIQ_KEY = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


def properties_to_string(props: dict[str, str]) -> str:
    """RocketMQ's property encoding: ``key\\x01value\\x02`` per entry."""
    if not props:
        return ""
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


def string_to_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    if not text:
        return props
    for item in text.split(PROPERTY_SEPARATOR):
        key, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            props[key] = value
    return props


def find_property(text: str, name: str) -> str | None:
    """``string_to_properties(text).get(name)`` without building the dict (the
    broker's batch path reads three properties of each message): the value of
    the last entry whose key is ``name``. ``name`` holds neither separator."""
    probe = name + NAME_VALUE_SEPARATOR
    at = text.rfind(PROPERTY_SEPARATOR + probe)
    if at >= 0:
        start = at + 1 + len(probe)
    elif text.startswith(probe):
        start = len(probe)
    else:
        return None
    end = text.find(PROPERTY_SEPARATOR, start)
    return text[start:] if end < 0 else text[start:end]


def check_property_text(value: str, what: str) -> None:
    """Properties may not contain the two separator characters."""
    if NAME_VALUE_SEPARATOR in value or PROPERTY_SEPARATOR in value:
        raise ValueError(f"{what} may not contain \\x01 or \\x02: {value!r}")


@dataclass(slots=True)
class Message:
    """A message to send. Tags and keys live in ``properties`` as in RocketMQ."""

    topic: str
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0

    def __init__(
        self,
        topic: str,
        body: bytes | str,
        tags: str | None = None,
        keys: str | list[str] | tuple[str, ...] | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
    ) -> None:
        self.topic = topic
        self.body = body.encode() if isinstance(body, str) else bytes(body)
        self.properties = dict(properties) if properties else {}
        self.flag = flag
        if tags:
            self.properties[PROPERTY_TAGS] = tags
        if keys:
            if not isinstance(keys, str):
                keys = MessageConst.KEY_SEPARATOR.join(keys)
            self.properties[PROPERTY_KEYS] = keys

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def delay_time_level(self) -> int:
        return int(self.properties.get(MessageConst.PROPERTY_DELAY_TIME_LEVEL, "0"))

    @delay_time_level.setter
    def delay_time_level(self, level: int) -> None:
        self.properties[MessageConst.PROPERTY_DELAY_TIME_LEVEL] = str(level)

    @property
    def deliver_time_ms(self) -> int | None:
        """A timer message's delivery time (ms since the epoch), or None.
        Set it to send a timer message (``TIMER_DELIVER_MS``): the broker
        delivers it then, to its precision (timerPrecisionMs, 1 s by default)."""
        raw = self.properties.get(MessageConst.PROPERTY_TIMER_DELIVER_MS)
        return int(raw) if raw is not None and raw.isdigit() else None

    @deliver_time_ms.setter
    def deliver_time_ms(self, at_ms: int) -> None:
        if not isinstance(at_ms, int) or isinstance(at_ms, bool) or not 0 <= at_ms < 2**63:
            raise ValueError(f"deliver_time_ms must be a non-negative 64-bit integer, not {at_ms!r}")
        for name in TIMER_INPUTS:
            self.properties.pop(name, None)
        self.properties[MessageConst.PROPERTY_TIMER_DELIVER_MS] = str(at_ms)

    @property
    def delay_ms(self) -> int | None:
        """A timer message's delay from its arrival at the broker, or None.
        Set it to send a timer message (``TIMER_DELAY_MS``)."""
        raw = self.properties.get(MessageConst.PROPERTY_TIMER_DELAY_MS)
        return int(raw) if raw is not None and raw.isdigit() else None

    @delay_ms.setter
    def delay_ms(self, delay: int) -> None:
        if not isinstance(delay, int) or isinstance(delay, bool) or not 0 <= delay < 2**63:
            raise ValueError(f"delay_ms must be a non-negative 64-bit integer, not {delay!r}")
        for name in TIMER_INPUTS:
            self.properties.pop(name, None)
        self.properties[MessageConst.PROPERTY_TIMER_DELAY_MS] = str(delay)

    def put_user_property(self, name: str, value: str) -> None:
        self.properties[name] = value

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)


_OFFSET = struct.Struct(">q")


def offset_msg_id(host_hex: str, commit_log_offset: int) -> str:
    """RocketMQ's offset msgId: the store host's 8 bytes (``host_hex``, their
    upper-case hex) and the commit-log offset's 8 bytes, in hex."""
    if commit_log_offset >= 0:
        return f"{host_hex}{commit_log_offset:016X}"
    return host_hex + _OFFSET.pack(commit_log_offset).hex().upper()


_EXT_FIELDS = ("topic", "body", "properties", "flag", "queue_id", "queue_offset",
               "commit_log_offset", "sys_flag", "born_timestamp", "born_host",
               "store_timestamp", "store_host", "reconsume_times",
               "prepared_transaction_offset", "body_crc", "store_size", "msg_id")


class MessageExt:
    """A stored message as decoded from a commit-log record.

    A decoded message keeps its properties as the record's text and splits
    it into ``properties`` on first use: a consumer that never reads a
    property (most read the body) never pays for the dict. The text is
    UTF-8-checked when the record is decoded. Its ``msg_id`` is formatted on
    first read, likewise.
    """

    __slots__ = ("topic", "body", "_properties", "_properties_text", "_properties_extra",
                 "flag", "queue_id", "queue_offset", "commit_log_offset", "sys_flag",
                 "born_timestamp", "born_host", "store_timestamp", "store_host",
                 "reconsume_times", "prepared_transaction_offset", "body_crc", "store_size",
                 "_msg_id", "_id_head")
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __init__(
        self,
        topic: str,
        body: bytes,
        properties: dict[str, str] | None,
        flag: int = 0,
        queue_id: int = 0,
        queue_offset: int = 0,
        commit_log_offset: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "",
        store_timestamp: int = 0,
        store_host: str = "",
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        body_crc: int = 0,
        store_size: int = 0,
        msg_id: str | None = "",
        properties_text: str = "",
        id_head: str = "",
        properties_extra: Mapping[str, str] | None = None,
    ) -> None:
        """``properties`` as a dict, or None with ``properties_text`` (RocketMQ's
        ``key\\x01value\\x02...``), split when first read; ``properties_extra``
        merged into them (as ``put_properties``: kept, not copied, while the
        text is not split yet); ``msg_id``, or None with ``id_head`` (the store
        host's hex), formatted when first read."""
        self.topic = topic
        self.body = body
        if properties is not None and properties_extra:
            properties, properties_extra = {**properties, **properties_extra}, None
        self._properties = properties
        self._properties_text = properties_text
        self._properties_extra = properties_extra
        self.flag = flag
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body_crc = body_crc
        self.store_size = store_size
        self._msg_id = msg_id
        self._id_head = id_head

    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            props = string_to_properties(self._properties_text)
            if self._properties_extra:
                props.update(self._properties_extra)
                self._properties_extra = None
            self._properties = props
            self._properties_text = ""
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._properties = value
        self._properties_text = ""
        self._properties_extra = None

    @property
    def msg_id(self) -> str:
        """RocketMQ's offset msgId (store host and commit-log offset, hex); a
        decoded message formats it on first read from ``id_head``, the store
        host's hex."""
        mid = self._msg_id
        if mid is None:
            mid = self._msg_id = offset_msg_id(self._id_head, self.commit_log_offset)
        return mid

    @msg_id.setter
    def msg_id(self, value: str) -> None:
        self._msg_id = value

    def put_properties(self, extra: Mapping[str, str]) -> None:
        """Set these properties. On a message whose properties were not read
        yet they are merged when first read: ``extra`` is kept, not copied, so
        one mapping may serve many messages but must not change afterwards."""
        props = self._properties
        if props is not None:
            props.update(extra)
        elif self._properties_extra is None:
            self._properties_extra = extra
        else:
            self._properties_extra = {**self._properties_extra, **extra}

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in _EXT_FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, MessageExt)
        return self._values() == other._values()

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _EXT_FIELDS)
        return f"MessageExt({shown})"

    def __getstate__(self) -> tuple[object, ...]:
        return self._values()

    def __setstate__(self, state: tuple[object, ...]) -> None:
        self.__init__(*state)  # type: ignore[misc]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"MessageQueue[topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"
