"""Every message the broker stores, built in one place (pure, no trio).

``build_inner`` is the one factory of ``MessageExtBrokerInner``: a producer's
send, and every rewrite the broker makes of a stored message, go through it,
so tags code, keys and unique key always follow the properties.

The rewrites, beside each other:

- delay: ``to_schedule`` (a send with a delay level parks in
  ``SCHEDULE_TOPIC_XXXX``) and ``from_schedule`` (a due message back to its
  real topic);
- retry and dead letters: ``send_back_message`` (a consumer gives a message
  back: ``%RETRY%<group>`` or ``%DLQ%<group>``) and ``dead_letter_message``;
- transactions: ``to_half`` (a prepared message parks in
  ``RMQ_SYS_TRANS_HALF_TOPIC``), ``from_half`` (a committed one goes to its
  real topic), ``half_check_copy`` (the copy re-put before each check),
  ``op_record`` (the end of a half message, in
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC``), ``check_max_message`` (a half message
  checked too often) and ``check_request_record`` (what a producer is asked
  about).

A rewrite that reads properties a client wrote validates them and raises
``RewriteError`` (a ValueError) saying what is wrong.
"""

from __future__ import annotations

import time
from enum import Enum

from broker.store import MessageExtBrokerInner, PutMessageStatus
from broker.store.commit_log import SCHEDULE_TOPIC
from broker.topic_validator import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
)
from protocol.hashing import tags_hash_code
from protocol.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageConst,
    MessageExt,
    find_property,
    properties_to_string,
)
from protocol.names import RMQ_SYS_WHEEL_TIMER, shown, topic_problem
from protocol.record import (
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    encode_record,
    pack_host,
    transaction_type,
    with_transaction_type,
)

DELAY = MessageConst.PROPERTY_DELAY_TIME_LEVEL
REAL_TOPIC = MessageConst.PROPERTY_REAL_TOPIC
REAL_QID = MessageConst.PROPERTY_REAL_QUEUE_ID
RETRY_TOPIC = MessageConst.PROPERTY_RETRY_TOPIC
ORIGIN_MESSAGE_ID = MessageConst.PROPERTY_ORIGIN_MESSAGE_ID
TRAN_MSG = MessageConst.PROPERTY_TRANSACTION_PREPARED
PGROUP = MessageConst.PROPERTY_PRODUCER_GROUP
CHECK_TIMES = MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES
# On a half-message copy and an op record: the queue offset of the first half
# message of the transaction (its "origin"); on a committed message, the same.
PREPARED_QUEUE_OFFSET = MessageConst.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET
CHECK_IMMUNITY = MessageConst.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS
# On an op record: how the transaction ended ("COMMIT" or "ROLLBACK").
END_STATE = "TRAN_END_STATE"

OP_TAG = "d"  # RocketMQ's TransactionalMessageUtil.REMOVETAG
QUEUE_ID_MAX = 2**31 - 1  # QUEUEID is a signed 4-byte field of the record


class RewriteError(ValueError):
    """A stored message cannot be turned into the message it should become."""


# ---- the factory ------------------------------------------------------------------------


def build_inner(
    topic: str,
    queue_id: int,
    body: bytes,
    props: dict[str, str],
    *,
    props_text: str | None = None,
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: str = "127.0.0.1:0",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
) -> MessageExtBrokerInner:
    """A message for the store. ``props_text`` is ``props`` already encoded
    (a producer's send passes what it received); tags code, keys and unique
    key come from ``props``."""
    return MessageExtBrokerInner(
        topic=topic, queue_id=queue_id, flag=flag, body=body,
        properties_string=properties_to_string(props) if props_text is None else props_text,
        tags_code=tags_hash_code(props.get(PROPERTY_TAGS)), keys=props.get(PROPERTY_KEYS),
        uniq_key=props.get(PROPERTY_UNIQ_KEY), sys_flag=sys_flag,
        born_timestamp=born_timestamp or int(time.time() * 1000), born_host=born_host,
        reconsume_times=reconsume_times, prepared_transaction_offset=prepared_transaction_offset,
    )


def build_batch_inners(
    topic: str,
    queue_id: int,
    items: list[tuple[int, bytes, str]],
    *,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: str = "127.0.0.1:0",
    reconsume_times: int = 0,
) -> list[MessageExtBrokerInner]:
    """``build_inner`` for each (flag, body, properties text) of a producer's
    batch, ``props_text`` being the text received: the same messages, with the
    tags, keys and unique key read by ``find_property`` instead of a dict per
    message (a tenth of a batched send's cost on the broker)."""
    born = born_timestamp or int(time.time() * 1000)
    inner = MessageExtBrokerInner
    out: list[MessageExtBrokerInner] = []
    add = out.append
    # most messages have no tags or keys: a substring test spares the look-up
    has_tags, has_keys = PROPERTY_TAGS + "\x01", PROPERTY_KEYS + "\x01"
    for flag, body, text in items:
        tags = find_property(text, PROPERTY_TAGS) if has_tags in text else None
        keys = find_property(text, PROPERTY_KEYS) if has_keys in text else None
        add(inner(topic, queue_id, flag, body, text, tags_hash_code(tags) if tags else 0,
                  keys, find_property(text, PROPERTY_UNIQ_KEY), sys_flag, born, born_host,
                  reconsume_times, 0))
    return out


def from_stored(msg: MessageExt, topic: str, queue_id: int, props: dict[str, str], *,
                sys_flag: int | None = None, reconsume_times: int | None = None,
                prepared_transaction_offset: int = 0) -> MessageExtBrokerInner:
    """A stored message rewritten to ``topic``/``queue_id`` with ``props``;
    flag, body, born time and host stay."""
    return build_inner(
        topic, queue_id, msg.body, props, flag=msg.flag,
        sys_flag=msg.sys_flag if sys_flag is None else sys_flag,
        born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        reconsume_times=msg.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )


def _real_destination(props: dict[str, str], forbidden: str) -> tuple[str, int]:
    """REAL_TOPIC and REAL_QID of ``props`` (popped), checked."""
    topic = props.pop(REAL_TOPIC, None)
    if topic is None:
        raise RewriteError(f"the message has no {REAL_TOPIC} property")
    problem = topic_problem(topic)
    if problem is not None:
        raise RewriteError(f"{REAL_TOPIC}: {problem}")
    if topic == forbidden:
        raise RewriteError(f"{REAL_TOPIC} is {forbidden} itself")
    raw_qid = props.pop(REAL_QID, None)
    if raw_qid is None:
        raise RewriteError(f"the message has no {REAL_QID} property")
    if not (raw_qid.isascii() and raw_qid.isdigit() and len(raw_qid) <= 10
            and int(raw_qid) <= QUEUE_ID_MAX):
        raise RewriteError(f"{REAL_QID} {shown(raw_qid)} is not a queue id")
    return topic, int(raw_qid)


# ---- delay ------------------------------------------------------------------------------


def to_schedule(inner: MessageExtBrokerInner, props: dict[str, str], max_level: int) -> None:
    """Turn a message with a delay level into its SCHEDULE_TOPIC_XXXX form (in place)."""
    level = min(int(props.get(DELAY, "0")), max_level)
    props[DELAY] = str(level)
    props[REAL_TOPIC] = inner.topic
    props[REAL_QID] = str(inner.queue_id)
    inner.topic = SCHEDULE_TOPIC
    inner.queue_id = level - 1
    inner.properties_string = properties_to_string(props)


def from_schedule(msg: MessageExt) -> MessageExtBrokerInner:
    """The message to deliver for a due schedule-topic record.

    Raises RewriteError when ``REAL_TOPIC`` is missing or not a valid topic
    name (or is the schedule topic itself) or ``REAL_QID`` is not a queue id.
    """
    props = dict(msg.properties)
    topic, queue_id = _real_destination(props, SCHEDULE_TOPIC)
    props.pop(DELAY, None)
    return from_stored(msg, topic, queue_id, props)


# ---- timer ------------------------------------------------------------------------------

TIMER_OUT_MS = MessageConst.PROPERTY_TIMER_OUT_MS
# what a delivered timer message no longer carries (its due time, TIMER_OUT_MS, stays)
TIMER_CLEANED = (MessageConst.PROPERTY_TIMER_DELIVER_MS, MessageConst.PROPERTY_TIMER_DELAY_SEC,
                 MessageConst.PROPERTY_TIMER_DELAY_MS, MessageConst.PROPERTY_TIMER_DEL_UNIQKEY)


def to_timer(inner: MessageExtBrokerInner, props: dict[str, str], due_ms: int) -> None:
    """Turn a message with a timer into its ``rmq_sys_wheel_timer`` form (in
    place): queue 0, the real topic and queue in properties, the due time in
    ``TIMER_OUT_MS``."""
    props[REAL_TOPIC] = inner.topic
    props[REAL_QID] = str(inner.queue_id)
    props[TIMER_OUT_MS] = str(due_ms)
    inner.topic = RMQ_SYS_WHEEL_TIMER
    inner.queue_id = 0
    inner.properties_string = properties_to_string(props)


def from_timer(msg: MessageExt) -> MessageExtBrokerInner:
    """The message to deliver for a due timer record: its real topic and
    queue, its unique key, no timer inputs. Raises RewriteError as
    ``from_schedule``."""
    props = dict(msg.properties)
    topic, queue_id = _real_destination(props, RMQ_SYS_WHEEL_TIMER)
    for name in TIMER_CLEANED:
        props.pop(name, None)
    return from_stored(msg, topic, queue_id, props)


def timer_recall_marker(uniq_key: str, slot_ms: int) -> MessageExtBrokerInner:
    """The record of a recall, in the timer topic: the timer service reads it
    back (after a restart too) and does not deliver ``uniq_key``'s message of
    slot ``slot_ms``."""
    props = {MessageConst.PROPERTY_TIMER_DEL_UNIQKEY: uniq_key, TIMER_OUT_MS: str(slot_ms)}
    return build_inner(RMQ_SYS_WHEEL_TIMER, 0, b"", props)


# ---- retry and dead letters ---------------------------------------------------------------


def send_back_message(msg: MessageExt, topic: str, queue_id: int, origin_msg_id: str | None,
                      level: int, max_level: int) -> MessageExtBrokerInner:
    """A message a consumer gave back, for its retry topic (``level`` > 0: by
    way of the schedule topic) or its dead-letter queue (``level`` 0); one
    more reconsume time."""
    props = dict(msg.properties)
    props.setdefault(RETRY_TOPIC, msg.topic)
    if origin_msg_id:
        props.setdefault(ORIGIN_MESSAGE_ID, origin_msg_id)
    props.pop(DELAY, None)
    inner = from_stored(msg, topic, queue_id, props, reconsume_times=msg.reconsume_times + 1)
    if level > 0:
        props[DELAY] = str(level)
        to_schedule(inner, props, max_level)
    return inner


def dead_letter_message(msg: MessageExt, topic: str) -> MessageExtBrokerInner:
    """``msg`` as a dead letter in ``topic`` queue 0. ``REAL_TOPIC``/``REAL_QID``
    stay, so tools show where it was going; the delay level goes."""
    props = dict(msg.properties)
    props.pop(DELAY, None)
    return from_stored(msg, topic, 0, props)


# ---- transactions -----------------------------------------------------------------------


def is_prepared(sys_flag: int, props: dict[str, str]) -> bool:
    """Whether a producer's send is a half message: the prepared sysFlag type
    or ``TRAN_MSG=true`` (RocketMQ decides by the property)."""
    return (transaction_type(sys_flag) == TRANSACTION_PREPARED_TYPE
            or props.get(TRAN_MSG, "").lower() == "true")


def to_half(inner: MessageExtBrokerInner, props: dict[str, str], group: str) -> None:
    """Turn a producer's prepared message into its half-message form (in
    place): ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, the real topic and queue in
    properties, no transaction type in the sysFlag (RocketMQ's
    parseHalfMessageInner)."""
    props[REAL_TOPIC] = inner.topic
    props[REAL_QID] = str(inner.queue_id)
    props[TRAN_MSG] = "true"
    props.setdefault(PGROUP, group)
    for key in (CHECK_TIMES, PREPARED_QUEUE_OFFSET):  # the broker's to set, not a client's
        props.pop(key, None)
    inner.topic = RMQ_SYS_TRANS_HALF_TOPIC
    inner.queue_id = 0
    inner.sys_flag = with_transaction_type(inner.sys_flag, TRANSACTION_NOT_TYPE)
    inner.properties_string = properties_to_string(props)


def origin_of(msg: MessageExt) -> int:
    """The queue offset of the first half message of ``msg``'s transaction."""
    raw = msg.properties.get(PREPARED_QUEUE_OFFSET)
    if raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 18:
        return int(raw)
    return msg.queue_offset


def check_times_of(msg: MessageExt) -> int:
    raw = msg.properties.get(CHECK_TIMES, "0")
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else 0


def check_immunity_ms(msg: MessageExt, default_ms: int) -> int:
    """How long after its birth a half message is left alone: the
    transaction timeout, or longer when the producer asked
    (``CHECK_IMMUNITY_TIME_IN_SECONDS``, at most a day)."""
    raw = msg.properties.get(CHECK_IMMUNITY)
    if raw is None or not (raw.isascii() and raw.isdigit() and len(raw) <= 9):
        return default_ms
    return max(default_ms, min(int(raw), 86_400) * 1000)


def from_half(msg: MessageExt, tx_type: int, origin: int) -> MessageExtBrokerInner:
    """The message a committed half message becomes: its real topic and
    queue, the given transaction type in the sysFlag, the half message's
    commit-log offset as its prepared transaction offset (RocketMQ's
    endMessageTransaction). Raises RewriteError for bad ``REAL_*``."""
    props = dict(msg.properties)
    topic, queue_id = _real_destination(props, RMQ_SYS_TRANS_HALF_TOPIC)
    for key in (TRAN_MSG, CHECK_TIMES):
        props.pop(key, None)
    props[PREPARED_QUEUE_OFFSET] = str(origin)
    return from_stored(msg, topic, queue_id, props,
                       sys_flag=with_transaction_type(msg.sys_flag, tx_type),
                       prepared_transaction_offset=msg.commit_log_offset)


def half_check_copy(msg: MessageExt, origin: int, check_times: int) -> MessageExtBrokerInner:
    """The copy of a half message the check service puts at the end of the
    half queue before it asks the producer (so the queue's consume offset
    can move on): same message, ``check_times`` and its origin recorded."""
    props = dict(msg.properties)
    props[CHECK_TIMES] = str(check_times)
    props[PREPARED_QUEUE_OFFSET] = str(origin)
    return from_stored(msg, RMQ_SYS_TRANS_HALF_TOPIC, 0, props)


class EndState(Enum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


def op_record(copy_offset: int, origin: int, state: EndState, born_host: str,
              queue_id: int = 0) -> MessageExtBrokerInner:
    """The op record saying a half message ended: body the half message's
    queue offset, tag ``d`` (RocketMQ's), and here also the transaction's
    origin and how it ended."""
    props = {PROPERTY_TAGS: OP_TAG, PREPARED_QUEUE_OFFSET: str(origin), END_STATE: state.value}
    return build_inner(RMQ_SYS_TRANS_OP_HALF_TOPIC, queue_id, str(copy_offset).encode(), props,
                       born_host=born_host)


def parse_op(msg: MessageExt) -> tuple[int, int, EndState] | None:
    """(half queue offset, origin, end state) of an op record, None when it is not one."""
    raw = msg.body.decode("ascii", "replace")
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        return None
    copy_offset = int(raw)
    origin_raw = msg.properties.get(PREPARED_QUEUE_OFFSET)
    origin = (int(origin_raw) if origin_raw is not None and origin_raw.isdigit()
              and len(origin_raw) <= 18 else copy_offset)
    try:
        state = EndState(msg.properties.get(END_STATE, EndState.ROLLBACK.value))
    except ValueError:
        state = EndState.ROLLBACK
    return copy_offset, origin, state


def check_max_message(msg: MessageExt, check_times: int | None = None) -> MessageExtBrokerInner:
    """A half message checked ``transactionCheckMax`` times, kept for tools
    in ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0 (with ``check_times``, the
    count kept in memory, when given)."""
    props = dict(msg.properties)
    if check_times is not None:
        props[CHECK_TIMES] = str(check_times)
    return from_stored(msg, TRANS_CHECK_MAX_TIME_TOPIC, 0, props)


def check_request_record(msg: MessageExt, store_host: str) -> bytes:
    """The record sent with CHECK_TRANSACTION_STATE: the half message as its
    producer sent it, in its real topic and queue (RocketMQ's
    sendCheckMessage). Raises RewriteError for bad ``REAL_*``."""
    props = dict(msg.properties)
    topic, queue_id = _real_destination(props, RMQ_SYS_TRANS_HALF_TOPIC)
    props[REAL_TOPIC], props[REAL_QID] = topic, str(queue_id)
    return encode_record(
        topic=topic.encode(), queue_id=queue_id, flag=msg.flag, body=msg.body,
        properties=properties_to_string(props).encode(), sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp, born_host=pack_host(msg.born_host),
        store_timestamp=msg.store_timestamp, store_host=pack_host(store_host),
        reconsume_times=msg.reconsume_times, prepared_transaction_offset=0,
        queue_offset=msg.queue_offset, physical_offset=msg.commit_log_offset,
    )


# ---- what a put status means for a message the broker re-puts ----------------------------


class PutOutcome(Enum):
    STORED = "stored"  # in the commit log (a flush or slave timeout does not undo that)
    TRANSIENT = "transient"  # not stored now; the same put may succeed later
    PERMANENT = "permanent"  # this message can never be stored


PUT_OUTCOMES: dict[str, PutOutcome] = {
    "PUT_OK": PutOutcome.STORED,
    "FLUSH_DISK_TIMEOUT": PutOutcome.STORED,
    "FLUSH_SLAVE_TIMEOUT": PutOutcome.STORED,
    "SLAVE_NOT_AVAILABLE": PutOutcome.STORED,
    "SERVICE_NOT_AVAILABLE": PutOutcome.TRANSIENT,  # not running, or the disk is full
    "DISK_FULL": PutOutcome.TRANSIENT,  # nothing written; writes resume once space is back
    "DISPATCH_BEHIND": PutOutcome.TRANSIENT,  # nothing written until the store's reput catches up
    "OS_PAGECACHE_BUSY": PutOutcome.TRANSIENT,
    "CREATE_MAPEDFILE_FAILED": PutOutcome.TRANSIENT,
    # controller mode: the SyncStateSet is below minInSyncReplicas; refused before writing
    "IN_SYNC_REPLICAS_NOT_ENOUGH": PutOutcome.TRANSIENT,
    "MESSAGE_ILLEGAL": PutOutcome.PERMANENT,
    "PROPERTIES_SIZE_EXCEEDED": PutOutcome.PERMANENT,
    "UNKNOWN_ERROR": PutOutcome.PERMANENT,
}


def classify_put_status(status: PutMessageStatus) -> PutOutcome:
    """What a put status means for a message the broker itself re-puts.

    A status not in the table counts as transient: a status the store gains
    is never a reason to lose a message (the caller waits, and says why).
    """
    return PUT_OUTCOMES.get(status.name, PutOutcome.TRANSIENT)
