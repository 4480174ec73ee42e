"""PopService: RocketMQ 5's POP consumption (receive, ack, change invisible
time, revive) in domain terms, with no transport.

``pop`` reads up to ``max_msg_nums`` messages of a topic (one queue, or any:
the group's retry topic ``%RETRY%<group>`` first, then the topic's queues from
a rotating start), moves the group's pop offset of each queue read past them
at once and leaves one in-flight record per message (broker/pop/core.py),
visible again at ``now + invisible_time``. Each message comes back with a
receipt handle. A group with no offset on a queue starts where RocketMQ 5's
getInitOffset puts it (broker/new_group_offset.py ``pop_init_offset``): with
ConsumeInitMode MAX, at 0 while the queue starts at 0 and its first message is
still in memory (a young queue is read from its start), else at its max.
``ack`` deletes a record, ``change_invisible`` moves it and answers a new
handle (the old one is then refused); ``revive_due`` re-puts the
messages whose visible time has come, through the ``Reviver`` the broker gives
(SendService.send_back: ``%RETRY%<group>`` with one more reconsume time, or
``%DLQ%<group>`` past the group's ``retryMaxTimes``), then drops their records.

Orderly groups (``consumeMessageOrderly``, or a request with ``order``): a
popped queue stays blocked for the group until its batch is acked or visible
again; then the same offsets are delivered again in order with one more
attempt, the ones past ``retryMaxTimes`` to ``%DLQ%<group>`` through the
``dead_letter`` reviver (broker/service/pop_orderly.py has the rules). Their
records are never revived.

Every change is an entry the service applies to its ``PopTable`` and queues in
``journal``; the trio edge (broker/pop_processor.py) writes the queued frames
(broker/store/pop_log.py) and answers each request once its changes are as
durable as ``flushDiskType`` asks (written, or fsynced). Bounds: ``popInflightMessageThreshold`` records per group and
``popInflightTotalThreshold`` in all; a pop past them is ``BUSY``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from broker.consumer_filter_manager import MessageFilter, sql_filter, tag_filter
from broker.new_group_offset import pop_init_offset
from broker.pop.core import (
    HandleCodec,
    HandleRef,
    Inflight,
    PopTable,
    ack_entry,
    change_entry,
    pop_entry,
    revive_entry,
)
from broker.service.pop_orderly import plan_batch, redelivered, with_reconsume_times
from broker.service.types import LiveRole
from broker.store import GetMessageStatus
from broker.store.message_store import MAX_FILTER_SCAN, RecordFilter
from broker.store.pop_log import encode_frame
from broker.store.status import GetMessageResult
from protocol.filter import parse_sub_expression
from protocol.filter_sql import SQL92, SqlFilter, SqlParseError, is_tag_type, unsupported_remark
from protocol.names import RETRY_GROUP_TOPIC_PREFIX, retry_topic
from protocol.record import record_position
from protocol.route import TopicConfig, is_readable
from protocol.subscription_group import SubscriptionGroupConfig

log = structlog.get_logger("broker.pop")

MAX_POP_NUMS = 32  # RocketMQ's limit on one pop
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # RocketMQ 5's longest invisible duration
INIT_MODE_MIN = 0  # RocketMQ's ConsumeInitMode: a new group starts at the queue's min ...
INIT_MODE_MAX = 1  # ... or at its max offset, at 0 while the queue's first message is in memory


class PopStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MESSAGE = "NO_MESSAGE"  # nothing to pop (yet): a long poll waits on this
    OK = "OK"  # an ack or change-invisible done
    INVALID_RECEIPT_HANDLE = "INVALID_RECEIPT_HANDLE"
    BUSY = "BUSY"  # in-flight bounds reached
    NO_PERMISSION = "NO_PERMISSION"
    GROUP_NOT_EXIST = "GROUP_NOT_EXIST"
    TOPIC_NOT_EXIST = "TOPIC_NOT_EXIST"
    ILLEGAL_REQUEST = "ILLEGAL_REQUEST"
    SUBSCRIPTION_PARSE_FAILED = "SUBSCRIPTION_PARSE_FAILED"
    FILTER_UNSUPPORTED = "FILTER_UNSUPPORTED"
    SLAVE = "SLAVE"  # POP is a master's


class ReviveResult(enum.Enum):
    DONE = "DONE"  # re-put (retry or dead letter): drop the record
    GONE = "GONE"  # the message is no longer in the commit log: drop the record
    LATER = "LATER"  # not now (a transient refusal): keep it, try on the next tick


@dataclass(slots=True)
class PopRequest:
    group: str
    topic: str
    queue_id: int  # -1: any queue
    max_msg_nums: int
    invisible_time_ms: int
    expression: str = "*"
    expression_type: str = "TAG"
    init_mode: int = INIT_MODE_MAX
    order: bool = False  # orderly, whatever the group says (PopMessageRequestHeader.order)


@dataclass(slots=True)
class PoppedMessage:
    record: bytes  # the stored record, as in the commit log
    handle: str
    attempt: int
    topic: str
    queue_id: int
    queue_offset: int


@dataclass(slots=True)
class PopOutcome:
    status: PopStatus
    remark: str | None = None
    messages: list[PoppedMessage] = field(default_factory=list)
    pop_time_ms: int = 0
    invisible_time_ms: int = 0
    # NO_MESSAGE with an orderly queue blocked: when its batch is visible again
    wake_ms: int | None = None


@dataclass(slots=True)
class HandleOutcome:
    """An ack's or change-invisible's answer (``handle``: the new one)."""

    status: PopStatus
    remark: str | None = None
    handle: str = ""
    visible_at_ms: int = 0


class PopSettings(Protocol):
    @property
    def broker_name(self) -> str: ...
    @property
    def broker_permission(self) -> int: ...
    @property
    def enable_property_filter(self) -> bool: ...


class SqlFilters(Protocol):
    """Compiled SQL92 expressions (ConsumerFilterManager); raises SqlParseError."""

    def get(self, group: str, topic: str, text: str, version: int) -> SqlFilter: ...


class Groups(Protocol):
    def find(self, group: str) -> SubscriptionGroupConfig | None: ...


class Topics(Protocol):
    def get(self, topic: str) -> TopicConfig | None: ...


class PopStore(Protocol):
    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_nums: int,
                    tag_codes: set[int] | None, record_filter: RecordFilter | None = None,
                    max_scan: int = MAX_FILTER_SCAN) -> GetMessageResult: ...

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool: ...


class Offsets(Protocol):
    """The consumer offset table: where a group's pop starts, and its progress
    shown to tools (consume stats)."""

    def query_offset(self, group: str, topic: str, queue_id: int) -> int: ...

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...


# re-puts an expired in-flight message (retry or dead letter)
Reviver = Callable[[Inflight], ReviveResult]


class Journal:
    """Frames applied to the table and not yet handed to the log."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.seq = 0  # entries queued since start

    def add(self, entry: dict[str, Any]) -> None:
        self.frames.append(encode_frame(entry))
        self.seq += 1

    def take(self) -> tuple[bytes, int]:
        data = b"".join(self.frames)
        self.frames.clear()
        return data, self.seq


def refusal(status: PopStatus, remark: str) -> PopOutcome:
    return PopOutcome(status, remark)


class PopService:
    def __init__(self, settings: PopSettings, role: LiveRole, groups: Groups, topics: Topics,
                 store: PopStore, offsets: Offsets, table: PopTable, codec: HandleCodec,
                 reviver: Reviver, filters: SqlFilters | None = None,
                 dead_letter: Reviver | None = None) -> None:
        self.settings = settings
        self.filters = filters  # SQL92 expressions, compiled once per (group, topic, text)
        self.role = role
        self.groups = groups
        self.topics = topics
        self.store = store
        self.offsets = offsets
        self.table = table
        self.codec = codec
        self.reviver = reviver
        # puts an orderly message past its attempts to %DLQ%<group> (None: drop it)
        self.dead_letter = dead_letter
        # told the topic of an orderly batch that was acked to its end (wakes long polls)
        self.on_unblocked: Callable[[str], None] | None = None
        self.dead_lettered = 0
        self._wake_ms: int | None = None
        self.journal = Journal()
        self._rotate = 0
        self.revived = 0  # messages re-put by revive_due since start
        self.acked = 0

    def _record(self, entry: dict[str, Any]) -> None:
        self.table.apply(entry)
        self.journal.add(entry)

    def _commit(self, group: str, topic: str, queue_id: int) -> None:
        """Tell the consumer offset table how far the queue is acked."""
        acked = self.table.ack_offset(group, topic, queue_id)
        if acked is not None:
            self.offsets.commit_offset(group, topic, queue_id, acked)

    def recover(self, entries: Sequence[dict[str, Any]]) -> None:
        """Rebuild the table from the log's entries (at start)."""
        for entry in entries:
            self.table.apply(entry)

    def is_orderly(self, group: str) -> bool:
        """Whether ``group`` is a FIFO group (``consumeMessageOrderly``)."""
        cfg = self.groups.find(group)
        return cfg is not None and cfg.consume_message_orderly

    # ---- pop ---------------------------------------------------------------------------

    def _check(self, group: str, topic: str) -> SubscriptionGroupConfig | PopOutcome:
        if self.role.is_slave:
            return refusal(PopStatus.SLAVE, "pop, ack and change-invisible are served by "
                                            "the master")
        if not is_readable(self.settings.broker_permission):
            return refusal(PopStatus.NO_PERMISSION,
                           f"the broker[{self.settings.broker_name}] pop message is forbidden")
        cfg = self.groups.find(group)
        if cfg is None:
            return refusal(PopStatus.GROUP_NOT_EXIST,
                           f"subscription group [{group}] does not exist")
        if not cfg.consume_enable:
            return refusal(PopStatus.NO_PERMISSION,
                           f"subscription group [{group}] has consumption disabled")
        return cfg

    def pop(self, req: PopRequest, now_ms: int) -> PopOutcome:
        checked = self._check(req.group, req.topic)
        if isinstance(checked, PopOutcome):
            return checked
        cfg = self.topics.get(req.topic)
        if cfg is None:
            return refusal(PopStatus.TOPIC_NOT_EXIST,
                           f"topic[{req.topic}] not exist, apply first please!")
        if not is_readable(cfg.perm):
            return refusal(PopStatus.NO_PERMISSION,
                           f"the topic[{req.topic}] pop message is forbidden")
        if req.queue_id < -1 or req.queue_id >= cfg.read_queue_nums:
            return refusal(PopStatus.ILLEGAL_REQUEST,
                           f"queueId[{req.queue_id}] is illegal, topic {req.topic} has "
                           f"{cfg.read_queue_nums} read queues")
        if not 0 < req.max_msg_nums <= MAX_POP_NUMS:
            return refusal(PopStatus.ILLEGAL_REQUEST,
                           f"maxMsgNums must be within 1..{MAX_POP_NUMS}")
        if not MIN_INVISIBLE_MS <= req.invisible_time_ms <= MAX_INVISIBLE_MS:
            return refusal(PopStatus.ILLEGAL_REQUEST,
                           f"invisibleTime must be within {MIN_INVISIBLE_MS}.."
                           f"{MAX_INVISIBLE_MS} ms")
        if req.init_mode not in (INIT_MODE_MIN, INIT_MODE_MAX):
            return refusal(PopStatus.ILLEGAL_REQUEST, "initMode must be 0 (MIN) or 1 (MAX)")
        how = self._filter(req)
        if isinstance(how, PopOutcome):
            return how
        # new records need room; an orderly batch delivered again does not (else a group
        # at its bound would never get its blocked queues back)
        room = self.table.room(req.group)
        want = req.max_msg_nums
        out: list[PoppedMessage] = []
        orderly = req.order or checked.consume_message_orderly
        self._wake_ms = None
        for topic, queue_id, init_mode in self._queues(req, cfg):
            if len(out) >= want:
                break
            if self._pop_orderly(req, checked, topic, queue_id, want - len(out), now_ms, out):
                continue
            if room <= 0:
                continue
            before = len(out)
            self._pop_queue(req, topic, queue_id, init_mode, how, min(want - len(out), room),
                            now_ms, out, orderly)
            room -= len(out) - before
        if not out and self.table.room(req.group) <= 0:
            return refusal(PopStatus.BUSY,
                           f"too many messages in flight for group [{req.group}] or on this "
                           "broker (popInflightMessageThreshold / popInflightTotalThreshold): "
                           "ack or wait for their invisible time")
        if not out:
            return PopOutcome(PopStatus.NO_MESSAGE, "no new message",
                              pop_time_ms=now_ms, invisible_time_ms=req.invisible_time_ms,
                              wake_ms=self._wake_ms)
        return PopOutcome(PopStatus.FOUND, None, out, now_ms, req.invisible_time_ms)

    def _filter(self, req: PopRequest) -> MessageFilter | PopOutcome:
        """How the pop filters: by tags hash (TAG), or by each record's properties
        (SQL92, with ``enablePropertyFilter``, as a pull does); a refusal else."""
        if is_tag_type(req.expression_type):
            try:
                return tag_filter(parse_sub_expression(req.expression))
            except ValueError as exc:
                return refusal(PopStatus.SUBSCRIPTION_PARSE_FAILED, str(exc))
        if (req.expression_type != SQL92 or not self.settings.enable_property_filter
                or self.filters is None):
            return refusal(PopStatus.FILTER_UNSUPPORTED, unsupported_remark(req.expression_type))
        try:
            return sql_filter(self.filters.get(req.group, req.topic, req.expression, 0))
        except SqlParseError as exc:
            return refusal(PopStatus.SUBSCRIPTION_PARSE_FAILED,
                           f"parse the SQL92 expression failed: {exc}")

    def _queues(self, req: PopRequest, cfg: TopicConfig) -> list[tuple[str, int, int]]:
        """(topic, queue, init mode) to read, in order: the group's retry
        queues first (a message given another attempt is not starved by new
        ones), then the topic's."""
        out: list[tuple[str, int, int]] = []
        retry = self.topics.get(retry_topic(req.group))
        if retry is not None:
            out.extend((retry.topic_name, q, INIT_MODE_MIN) for q in range(retry.read_queue_nums))
        if req.queue_id >= 0:
            out.append((req.topic, req.queue_id, req.init_mode))
        else:
            n = cfg.read_queue_nums
            self._rotate = (self._rotate + 1) % max(1, n)
            out.extend((req.topic, (self._rotate + i) % n, req.init_mode) for i in range(n))
        return out

    def _start_offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        known = self.table.offset(group, topic, queue_id)
        if known is not None:
            return known
        committed = self.offsets.query_offset(group, topic, queue_id)
        if committed >= 0:
            return committed
        store = self.store
        return pop_init_offset(
            init_mode == INIT_MODE_MIN, topic.startswith(RETRY_GROUP_TOPIC_PREFIX),
            store.get_min_offset_in_queue(topic, queue_id),
            store.get_max_offset_in_queue(topic, queue_id),
            lambda: store.check_in_disk_by_consume_offset(topic, queue_id, 0))

    def _pop_queue(self, req: PopRequest, topic: str, queue_id: int, init_mode: int,
                   how: MessageFilter, want: int, now_ms: int,
                   out: list[PoppedMessage], orderly: bool = False) -> None:
        group = req.group
        known = self.table.offset(group, topic, queue_id)
        offset = self._start_offset(group, topic, queue_id, init_mode)
        result = self.store.get_message(group, topic, queue_id, offset, want, how.tag_codes,
                                        how.record_filter, how.max_scan)
        got = result.status
        next_offset = offset
        records: list[Inflight] = []
        buffers: list[bytes] = []
        if got is GetMessageStatus.FOUND:
            visible_at = now_ms + req.invisible_time_ms
            for view in result.buffers:
                # the record's head says all an in-flight record needs
                queue_offset, commit_log_offset, reconsume = record_position(view)
                records.append(Inflight(group, topic, queue_id, queue_offset,
                                        commit_log_offset, visible_at, reconsume + 1, now_ms,
                                        orderly=orderly))
                buffers.append(bytes(view))
            next_offset = result.next_begin_offset
        elif got in (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.OFFSET_TOO_SMALL,
                     GetMessageStatus.OFFSET_OVERFLOW_BADLY):
            next_offset = result.next_begin_offset  # past filtered entries, or corrected
        if known is not None and next_offset <= known and not records:
            return
        self._record(pop_entry(group, topic, queue_id, next_offset, records, orderly))
        self._commit(group, topic, queue_id)
        for rec, data in zip(records, buffers, strict=True):
            out.append(PoppedMessage(data, self.codec.encode(rec), rec.attempt, topic,
                                     queue_id, rec.queue_offset))

    def _pop_orderly(self, req: PopRequest, group_cfg: SubscriptionGroupConfig, topic: str,
                     queue_id: int, want: int, now_ms: int, out: list[PoppedMessage]) -> bool:
        """The queue's orderly batch, if it has one (whatever the request: a
        group no longer orderly still finishes it): True when it decided this
        pop of the queue (blocked, or delivered again), False when the queue
        may serve new messages."""
        group = req.group
        batch = self.table.orderly_batch(group, topic, queue_id)
        if not batch:
            return False
        plan = plan_batch(batch, now_ms, group_cfg.retry_max_times, want)
        if plan.blocked_until_ms is not None:
            self._wake_at(plan.blocked_until_ms)
            return True
        for rec in plan.dead:
            result = (self.dead_letter(rec) if self.dead_letter is not None
                      else ReviveResult.GONE)
            if result is ReviveResult.LATER:  # later ones may not pass it: try again soon
                self._wake_at(now_ms + MIN_INVISIBLE_MS)
                self._commit(group, topic, queue_id)
                return True
            self._record(revive_entry(rec.key))
            if result is ReviveResult.DONE:
                self.dead_lettered += 1
            log.info("orderly message past its attempts: dead-lettered", group=group,
                     topic=topic, queue_id=queue_id, queue_offset=rec.queue_offset,
                     attempts=rec.attempt, result=result.value)
        records: list[Inflight] = []
        buffers: list[bytes] = []
        for rec in plan.again:
            data = self._stored_record(rec)
            if data is None:
                log.warning("orderly message no longer in the store: dropped", group=group,
                            topic=topic, queue_id=queue_id, queue_offset=rec.queue_offset)
                self._record(revive_entry(rec.key))
                continue
            records.append(redelivered(rec, now_ms, req.invisible_time_ms))
            buffers.append(with_reconsume_times(data, rec.attempt))
        if records:
            next_offset = self.table.offset(group, topic, queue_id)
            self._record(pop_entry(group, topic, queue_id,
                                   next_offset if next_offset is not None else 0, records, True))
        self._commit(group, topic, queue_id)
        for rec, data in zip(records, buffers, strict=True):
            out.append(PoppedMessage(data, self.codec.encode(rec), rec.attempt, topic,
                                     queue_id, rec.queue_offset))
        if records:
            return True
        if self.table.orderly_batch(group, topic, queue_id):
            self._wake_at(now_ms)  # the rest of the batch, on the next pop
            return True
        return False  # the batch is done (dead letters, gone): the queue moves on

    def _wake_at(self, at_ms: int) -> None:
        if self._wake_ms is None or at_ms < self._wake_ms:
            self._wake_ms = at_ms

    def _stored_record(self, rec: Inflight) -> bytes | None:
        """The stored record at ``rec``'s queue offset, or None when it is gone."""
        result = self.store.get_message(rec.group, rec.topic, rec.queue_id, rec.queue_offset,
                                        1, None)
        if result.status is not GetMessageStatus.FOUND or not result.buffers:
            return None
        view = result.buffers[0]
        if record_position(view)[0] != rec.queue_offset:
            return None
        return bytes(view)

    # ---- ack and change-invisible ------------------------------------------------------

    def _find(self, group: str, topic: str, handle: str) -> Inflight | HandleOutcome:
        checked = self._check(group, topic)
        if isinstance(checked, PopOutcome):
            return HandleOutcome(checked.status, checked.remark)
        ref = self.codec.decode(handle, group)
        if not isinstance(ref, HandleRef):
            return HandleOutcome(PopStatus.INVALID_RECEIPT_HANDLE, ref)
        if ref.broker_name != self.codec.broker_name:
            return HandleOutcome(PopStatus.INVALID_RECEIPT_HANDLE,
                                 f"receipt handle of broker {ref.broker_name}, not of this one")
        if topic not in (ref.topic, "") and ref.topic != retry_topic(group):
            return HandleOutcome(PopStatus.INVALID_RECEIPT_HANDLE,
                                 f"receipt handle of topic {ref.topic}, not {topic}")
        rec = self.table.get((group, ref.topic, ref.queue_id, ref.queue_offset))
        if rec is None:
            return HandleOutcome(PopStatus.INVALID_RECEIPT_HANDLE,
                                 "receipt handle expired: the message is no longer in flight "
                                 "(acked, or its invisible time ran out and it was delivered "
                                 "again)")
        if rec.gen != ref.gen:
            return HandleOutcome(PopStatus.INVALID_RECEIPT_HANDLE,
                                 "receipt handle replaced by a change of invisible time: use "
                                 "the newest handle")
        return rec

    def find(self, group: str, topic: str, handle: str) -> Inflight | HandleOutcome:
        """The in-flight record a handle names, or why it names none (as an
        ack would refuse it)."""
        return self._find(group, topic, handle)

    def ack(self, group: str, topic: str, handle: str) -> HandleOutcome:
        found = self._find(group, topic, handle)
        if isinstance(found, HandleOutcome):
            return found
        self._record(ack_entry(found.key))
        self._commit(found.group, found.topic, found.queue_id)
        self.acked += 1
        if (found.orderly and self.on_unblocked is not None
                and not self.table.orderly_batch(found.group, found.topic, found.queue_id)):
            self.on_unblocked(found.topic)
        return HandleOutcome(PopStatus.OK)

    def ack_batch(self, group: str, topic: str, handles: Sequence[str]
                  ) -> HandleOutcome | list[HandleOutcome]:
        """Ack each handle (RocketMQ's BATCH_ACK_MESSAGE): one outcome per
        handle, or one refusal for them all (slave, permission, group)."""
        checked = self._check(group, topic)
        if isinstance(checked, PopOutcome):
            return HandleOutcome(checked.status, checked.remark)
        return [self.ack(group, topic, h) for h in handles]

    def change_invisible(self, group: str, topic: str, handle: str, invisible_time_ms: int,
                         now_ms: int) -> HandleOutcome:
        if not MIN_INVISIBLE_MS <= invisible_time_ms <= MAX_INVISIBLE_MS:
            return HandleOutcome(PopStatus.ILLEGAL_REQUEST,
                                 f"invisibleTime must be within {MIN_INVISIBLE_MS}.."
                                 f"{MAX_INVISIBLE_MS} ms")
        found = self._find(group, topic, handle)
        if isinstance(found, HandleOutcome):
            return found
        visible_at = now_ms + invisible_time_ms
        self._record(change_entry(found.key, visible_at, found.gen + 1))
        return HandleOutcome(PopStatus.OK, None, self.codec.encode(found), visible_at)

    # ---- revive ------------------------------------------------------------------------

    def revive_due(self, now_ms: int, limit: int = 1024) -> int:
        """Re-put up to ``limit`` messages whose visible time has come; the
        number whose records were dropped. A ``LATER`` stops the round (the
        next tick tries again)."""
        if self.role.is_slave:
            return 0
        done = 0
        for rec in self.table.due(now_ms, limit):
            result = self.reviver(rec)
            if result is ReviveResult.LATER:
                break
            self._record(revive_entry(rec.key))
            self._commit(rec.group, rec.topic, rec.queue_id)
            done += 1
            if result is ReviveResult.DONE:
                self.revived += 1
        return done
