"""TransactionalMessageService: half messages, their ends and the check-back.

- ``prepare``: a producer's prepared message is stored as a half message in
  ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (message_rewrite.to_half), invisible
  to consumers (the topic has no topic config, so nothing routes or pulls it).
- ``record_end``: a transaction ended. END_TRANSACTION itself (the checks, the
  commit or rollback written with its op record in one write) is
  TransactionService's (broker/service/transactions.py); it reads the book
  here and tells this service of every end it stored.
- ``check_chunk``: the check pass. From the half queue's consume offset on,
  half messages whose transaction ended (or that have a newer copy) are
  passed; one checked ``transactionCheckMax`` times is discarded (a copy goes
  to ``TRANS_CHECK_MAX_TIME_TOPIC``); one younger than ``transactionTimeOut``
  ends the pass, one inside its longer ``CHECK_IMMUNITY_TIME_IN_SECONDS`` is
  left for a later pass; for any other its producer group is asked, through
  one live producer that reads what it is sent, for the state of the
  transaction (CHECK_TRANSACTION_STATE). A producer that does not read is
  not asked (the check is dropped, counted, and asked again next pass).

  Unlike RocketMQ, a check does not write a copy of the half message at the
  end of the queue: the check count is kept in memory (``Pending``) and the
  half message is read only to be sent. The consume offset stops at the
  first pending transaction; a copy (with the count) is written only when
  moving past one is worth it: when the queue from the consume offset on
  holds more than twice as many half messages as are pending (plus
  ``COMPACT_SLACK``), the pending ones at its head are copied to the end, so
  each copy frees at least one ended half message behind it. A restart
  counts checks on from the newest copy's count.
- ``prepare`` refuses a group with ``transactionMaxPendingPerGroup`` pending
  transactions (``pending_refusal``).

Everything lives in the commit log and in the consume offsets of group
``CID_RMQ_SYS_TRANS`` on the half and op queues (persisted with every
group's offsets); ``load`` rebuilds the book from them, so a restart, clean
or not, loses no pending transaction and commits none twice.

The methods are synchronous; ``run`` is the trio edge (a pass every
``transactionCheckInterval`` ms, in chunks so that requests keep being served).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

import structlog
import trio

from broker.config import BrokerConfig
from broker.consumer_offset_manager import ConsumerOffsetManager
from broker.message_rewrite import (
    PGROUP,
    REAL_TOPIC,
    EndState,
    PutOutcome,
    check_immunity_ms,
    check_max_message,
    check_request_record,
    check_times_of,
    classify_put_status,
    half_check_copy,
    origin_of,
    parse_op,
    to_half,
)
from broker.store import DefaultMessageStore, MessageExtBrokerInner, PutMessageResult
from broker.topic_config_manager import TopicConfigManager
from broker.topic_validator import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
)
from broker.transaction_book import TransactionBook
from protocol.headers import CheckTransactionStateRequestHeader
from protocol.message import MessageExt
from protocol.names import shown
from protocol.record import encode_msg_id, pack_host
from protocol.route import PERM_RW
from protocol.trio.service import Guard

CID_RMQ_SYS_TRANS = "CID_RMQ_SYS_TRANS"
HALF_QUEUE_ID = 0
CHUNK = 256  # half messages looked at between two checkpoints of a pass
# Half messages the queue may hold from its consume offset on beyond twice the
# pending ones before the pending ones at its head are copied to its end: a
# few thousand entries to read at a restart, and the ended transactions behind
# them (book.ended) kept in memory meanwhile.
COMPACT_SLACK = 1024


@dataclass(slots=True)
class CheckRequest:
    """What to ask a producer of ``group``."""

    group: str
    header: CheckTransactionStateRequestHeader
    body: bytes
    # the half message's real topic: with ACL, only producers that may PUB on it are asked
    topic: str = ""


class Asked(Enum):
    SENT = "sent"  # queued to a producer of the group
    NO_PRODUCER = "no producer"  # none connected: the check counts all the same
    BUSY = "busy"  # its producers read nothing: not sent, not counted, asked next pass


# Asks one live producer of ``group`` for the request ``build`` makes (called
# only when a producer can take it).
Ask = Callable[[str, Callable[[], CheckRequest]], Asked]


@dataclass(slots=True)
class Pending:
    """A pending transaction as the check pass knows it (in memory)."""

    group: str
    born: int  # ms
    immunity: int  # CHECK_IMMUNITY_TIME_IN_SECONDS in ms (0: none; transactionTimeOut applies)
    times: int  # checks so far (its newest copy in the half queue may record fewer)


@dataclass(slots=True)
class PassReport:
    looked: int = 0
    checked: int = 0
    no_producer: int = 0
    busy: int = 0  # checks not sent: the producers read nothing
    discarded: int = 0
    skipped: int = 0
    copied: int = 0  # half messages copied to the end of the queue
    # the pass's position: the next queue offset to look at (-1: not started),
    # and whether the consume offset still follows it (no pending one left behind)
    cursor: int = -1
    head: bool = True
    compact: bool = False


def _wall_ms() -> int:
    return int(time.time() * 1000)


class TransactionalMessageService:
    def __init__(self, config: BrokerConfig, store: DefaultMessageStore,
                 offsets: ConsumerOffsetManager, topics: TopicConfigManager,
                 on_topic_created: Callable[[], None] = lambda: None,
                 now_ms: Callable[[], int] = _wall_ms) -> None:
        self.config = config
        self.store = store
        self.offsets = offsets
        self.topics = topics
        self.on_topic_created = on_topic_created
        self.now_ms = now_ms
        self.book = TransactionBook()
        self.committed = 0
        self.rolled_back = 0
        self.discarded = 0
        self.checks = 0
        self.checks_dropped = 0  # not sent: the group's producers read nothing
        self.refused_busy = 0  # prepared sends refused: the group's pending bound
        self.copies = 0  # half messages copied to the end of the queue
        self.passes = 0
        # origin -> what the pass knows of a pending transaction; copy offset ->
        # origin for them, so a pass reads a pending half message only to send it
        self.known: dict[int, Pending] = {}
        self.at_copy: dict[int, int] = {}
        self.log = structlog.get_logger("broker.transaction").bind(broker=config.broker_name)
        self.guard = Guard(self.log, "transaction check")

    # ---- start ------------------------------------------------------------------------

    def _consume_offset(self, topic: str) -> int:
        offset = self.offsets.query_offset(CID_RMQ_SYS_TRANS, topic, HALF_QUEUE_ID)
        return max(offset, self.store.get_min_offset_in_queue(topic, HALF_QUEUE_ID), 0)

    def load(self) -> None:
        """Rebuild the book from the op and half queues (after the store loaded)."""
        half = self._consume_offset(RMQ_SYS_TRANS_HALF_TOPIC)
        op = self._consume_offset(RMQ_SYS_TRANS_OP_HALF_TOPIC)
        book = self.book = TransactionBook(half, op)
        op_end = self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
        for offset in range(op, op_end):
            msg = self._read(RMQ_SYS_TRANS_OP_HALF_TOPIC, offset)
            book.load_op(offset, None if msg is None else parse_op(msg))
        half_end = self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        self.known.clear()
        self.at_copy.clear()
        for offset in range(half, half_end):
            msg = self._read(RMQ_SYS_TRANS_HALF_TOPIC, offset)
            if msg is not None:
                book.load_half(offset, origin_of(msg), str(msg.properties.get(PGROUP, "")))
        if half_end > half or op_end > op:
            self.log.info("transactions loaded", half_messages=half_end - half,
                          op_records=op_end - op, **book.stats())

    def _read(self, topic: str, offset: int) -> MessageExt | None:
        phys = self.store.get_commit_log_offset_in_queue(topic, HALF_QUEUE_ID, offset)
        if phys < 0:
            return None
        return self.store.look_message_by_offset(phys)

    # ---- prepare ----------------------------------------------------------------------

    def pending_refusal(self, group: str) -> str | None:
        """Why a prepared message of producer group ``group`` is refused
        (SYSTEM_BUSY), or None: the group has ``transactionMaxPendingPerGroup``
        transactions neither committed nor rolled back."""
        limit = self.config.transaction_max_pending_per_group
        pending = self.book.pending_in(group)
        if pending < limit:
            return None
        self.refused_busy += 1
        self.guard.note("prepared message refused: too many pending transactions",
                        key=("pending-bound", group), log_level="warning",
                        group=shown(group), pending=pending, limit=limit)
        return (f"[TRANSACTION_PENDING_LIMIT]broker busy: producer group {shown(group)} has "
                f"{pending} pending transactions (transactionMaxPendingPerGroup={limit}); "
                "end (commit or roll back) some, or answer the broker's checks, then retry")

    def prepare(self, inner: MessageExtBrokerInner, props: dict[str, str],
                group: str) -> PutMessageResult:
        """Store a producer's prepared message as a half message."""
        to_half(inner, props, group)
        result = self.store.put_message(inner)
        ar = result.append_result
        if ar is not None and classify_put_status(result.put_message_status) is PutOutcome.STORED:
            self.book.half_stored(ar.logics_offset, ar.logics_offset, props[PGROUP])
        return result

    # ---- end ------------------------------------------------------------------------

    def record_end(self, origin: int, state: EndState, op_offset: int) -> None:
        """A transaction ended (broker/service/transactions.py stored its op
        record at ``op_offset`` of the op queue): the book and the counts."""
        self.book.end(origin, state, op_offset)
        if state is EndState.COMMIT:
            self.committed += 1
        else:
            self.rolled_back += 1

    # ---- check ------------------------------------------------------------------------

    def check_chunk(self, now_ms: int, stop: int, ask: Ask, report: PassReport,
                    limit: int = CHUNK) -> bool:
        """Look at up to ``limit`` half messages before queue offset ``stop``
        (the queue's end when the pass began). Returns whether the pass goes on."""
        book = self.book
        start = max(book.half_offset,
                    self.store.get_min_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID))
        if report.cursor < 0:
            # copy pending ones only when the queue behind the consume offset is
            # mostly ended transactions (so each copy frees at least one)
            report.compact = stop - start > 2 * len(book.pending) + COMPACT_SLACK
        i = max(report.cursor, start)
        go_on = True
        try:
            for _ in range(limit):
                if i >= stop:
                    go_on = False
                    break
                report.looked += 1
                step = self._look(i, now_ms, ask, report)
                if step is None:
                    go_on = False
                    break
                if not step:
                    report.head = False  # a pending one stays: the consume offset stops here
                elif report.head:
                    book.advance(i + 1, prune=False)
                i += 1
        finally:
            report.cursor = i
            if not go_on:
                if report.head:
                    book.advance(i, prune=True)
                self._forget_ended()
            self._save_offsets()
        return go_on

    def _look(self, i: int, now_ms: int, ask: Ask, report: PassReport) -> bool | None:
        """The half message at ``i``: True when the consume offset may move
        past it, False when it must not (pending), None to end the pass."""
        book = self.book
        if i in book.ended or book.pending.get(i, i) > i:
            # the first half message of a transaction that ended or has a
            # newer copy: passed without reading it
            report.skipped += 1
            return True
        msg: MessageExt | None = None
        origin = self.at_copy.get(i)
        if origin is None or origin not in self.known:
            msg = self._read(RMQ_SYS_TRANS_HALF_TOPIC, i)
            if msg is None:  # cleaned away or unreadable
                report.skipped += 1
                return True
            origin = origin_of(msg)
        if book.should_skip(i, origin):
            report.skipped += 1
            return True
        self.at_copy[i] = origin
        p = self.known.get(origin)
        if p is None:
            assert msg is not None
            group = str(msg.properties.get(PGROUP, ""))
            book.note_group(origin, group)
            p = self.known[origin] = Pending(group, msg.born_timestamp,
                                             check_immunity_ms(msg, 0), check_times_of(msg))
        if p.times >= self.config.transaction_check_max:
            msg = msg or self._read(RMQ_SYS_TRANS_HALF_TOPIC, i)
            if msg is None:
                report.skipped += 1
                return True
            return self._discard(i, msg, origin, p.times, report)
        timeout = self.config.transaction_time_out
        age = now_ms - p.born
        due = not 0 <= age < max(timeout, p.immunity)
        if not due and p.immunity <= timeout:
            return None  # the ones after it are younger still
        if due:
            self._ask(i, origin, p, msg, ask, report)
        if report.head and report.compact:
            return self._put_copy(i, origin, p, report)
        return False

    def _ask(self, i: int, origin: int, p: Pending, msg: MessageExt | None, ask: Ask,
             report: PassReport) -> None:
        """Ask the group about the transaction whose newest copy is at ``i``."""
        def build() -> CheckRequest:
            found = msg or self._read(RMQ_SYS_TRANS_HALF_TOPIC, i)
            if found is None:
                raise LookupError(f"half message at queue offset {i} unreadable")
            return self._check_request(found)

        try:
            asked = ask(p.group, build)
        except LookupError:
            return
        if asked is Asked.BUSY:
            report.busy += 1
            self.checks_dropped += 1
            self.guard.note("a producer group reads no checks: checks dropped, asked next pass",
                            key=("busy", p.group), log_level="warning", group=shown(p.group),
                            queue_offset=i)
            return
        p.times += 1
        self.checks += 1
        report.checked += 1
        if asked is Asked.NO_PRODUCER:
            report.no_producer += 1
            self.guard.note("no live producer to check a transaction with",
                            key=("no-producer", p.group), log_level="warning",
                            group=shown(p.group), queue_offset=i, check_times=p.times)

    def _put_copy(self, i: int, origin: int, p: Pending, report: PassReport) -> bool | None:
        """Copy the half message at ``i`` (with its check count) to the end of
        the queue so the consume offset can move past it: True once stored,
        None when the pass must stop."""
        msg = self._read(RMQ_SYS_TRANS_HALF_TOPIC, i)
        if msg is None:
            return True
        result = self.store.put_message(half_check_copy(msg, origin, p.times))
        status = result.put_message_status
        outcome = classify_put_status(status)
        ar = result.append_result
        if outcome is PutOutcome.STORED and ar is not None:
            self.book.half_stored(ar.logics_offset, origin, p.group)
            self.at_copy.pop(i, None)
            self.at_copy[ar.logics_offset] = origin
            self.copies += 1
            report.copied += 1
            return True
        if outcome is PutOutcome.TRANSIENT:
            self.guard.note("half message copy not stored, the check pass stops",
                            key=("transient", status), status=status.value, queue_offset=i)
            return None
        # a copy that can never be stored: the transaction cannot be checked any more
        self._discard(i, msg, origin, p.times, report, reason=f"copy refused: {status.value}")
        return None

    def _forget_ended(self) -> None:
        """Drop what the pass knew of transactions no longer pending."""
        pending = self.book.pending
        for copy, origin in list(self.at_copy.items()):
            if pending.get(origin) != copy:
                del self.at_copy[copy]
                if origin not in pending:
                    self.known.pop(origin, None)
        for origin in [o for o in self.known if o not in pending]:
            del self.known[origin]

    def _check_request(self, copy: MessageExt) -> CheckRequest:
        uniq = copy.uniq_key
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=copy.queue_offset,
            commit_log_offset=copy.commit_log_offset,
            msg_id=uniq, transaction_id=uniq,
            offset_msg_id=encode_msg_id(pack_host(copy.store_host), copy.commit_log_offset),
        )
        return CheckRequest(str(copy.properties.get(PGROUP)), header,
                            check_request_record(copy, copy.store_host),
                            copy.properties.get(REAL_TOPIC) or copy.topic)

    def _discard(self, i: int, msg: MessageExt, origin: int, times: int, report: PassReport,
                 reason: str | None = None) -> bool | None:
        """Give a transaction up: a copy for tools in TRANS_CHECK_MAX_TIME_TOPIC."""
        try:
            if self.topics.get(TRANS_CHECK_MAX_TIME_TOPIC) is None:
                self.topics.create_topic_in_send_back(TRANS_CHECK_MAX_TIME_TOPIC, 1, PERM_RW)
                self.on_topic_created()
        except OSError as exc:
            self.guard.failed(exc, "TRANS_CHECK_MAX_TIME_TOPIC could not be created")
            return None
        result = self.store.put_message(check_max_message(msg, times))
        outcome = classify_put_status(result.put_message_status)
        if outcome is PutOutcome.TRANSIENT:
            return None
        self.book.discard(origin)
        self.discarded += 1
        report.discarded += 1
        self.guard.note("transaction discarded after too many checks",
                        key=("discard", msg.properties.get(PGROUP)), log_level="warning",
                        group=shown(msg.properties.get(PGROUP)), msg_id=msg.uniq_key,
                        queue_offset=i, check_times=times,
                        reason=reason or f"checked {times} times (transactionCheckMax)",
                        kept=outcome is PutOutcome.STORED)
        return True

    def _save_offsets(self) -> None:
        book = self.book
        for topic, offset in ((RMQ_SYS_TRANS_HALF_TOPIC, book.half_offset),
                              (RMQ_SYS_TRANS_OP_HALF_TOPIC, book.op_offset)):
            if self.offsets.query_offset(CID_RMQ_SYS_TRANS, topic, HALF_QUEUE_ID) != offset:
                self.offsets.commit_offset(CID_RMQ_SYS_TRANS, topic, HALF_QUEUE_ID, offset)

    def status(self) -> dict[str, Any]:
        return {"committed": self.committed, "rolled_back": self.rolled_back,
                "discarded": self.discarded, "checks": self.checks, "passes": self.passes,
                "checks_dropped": self.checks_dropped, "refused_busy": self.refused_busy,
                "copies": self.copies, **self.book.stats()}

    # ---- trio edge --------------------------------------------------------------------

    async def check_pass(self, ask: Ask) -> PassReport:
        """One pass over the half queue, yielding to other tasks between chunks."""
        report = PassReport()
        stop = self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        while self.check_chunk(self.now_ms(), stop, ask, report):
            await trio.sleep(0)
        self.passes += 1
        if report.checked or report.discarded or report.busy or report.copied:
            counts = {f.name: getattr(report, f.name) for f in fields(report)
                      if f.name not in ("cursor", "head", "compact")}
            self.log.info("transaction check pass", **counts, **self.book.stats())
        return report

    async def run(self, ask: Ask, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        interval = self.config.transaction_check_interval / 1000
        task_status.started()
        while True:
            await trio.sleep(interval)
            await self.guard.run(self.check_pass, ask)

