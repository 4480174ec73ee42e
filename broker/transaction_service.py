"""TransactionalMessageService: half messages, their ends and the check-back.

- ``prepare``: a producer's prepared message is stored as a half message in
  ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (message_rewrite.to_half), invisible
  to consumers (the topic has no topic config, so nothing routes or pulls it).
- ``end``: END_TRANSACTION. A commit stores the restored message in its real
  topic and queue *and* the op record in one write (store.put_together), so a
  crash cannot leave one without the other; a rollback stores the op record.
  A transaction ends once (transaction_book): a repeated end changes nothing.
- ``check_chunk``: the check pass. From the half queue's consume offset on,
  half messages whose transaction ended (or that have a newer copy) are
  passed; one checked ``transactionCheckMax`` times is discarded (a copy goes
  to ``TRANS_CHECK_MAX_TIME_TOPIC``); one younger than ``transactionTimeOut``
  (or its ``CHECK_IMMUNITY_TIME_IN_SECONDS``) ends the pass; any other gets a
  copy with its check count increased at the end of the queue and its
  producer group is asked, through one live producer, for the state of the
  copy (CHECK_TRANSACTION_STATE).

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
from dataclasses import asdict, dataclass
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
    RewriteError,
    check_immunity_ms,
    check_max_message,
    check_request_record,
    check_times_of,
    classify_put_status,
    from_half,
    half_check_copy,
    op_record,
    origin_of,
    parse_op,
    to_half,
)
from broker.store import DefaultMessageStore, MessageExtBrokerInner, PutMessageResult
from broker.store.status import PutMessageStatus
from broker.topic_config_manager import TopicConfigManager
from broker.topic_validator import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
)
from broker.transaction_book import TransactionBook, Verdict
from protocol.codes import ResponseCode
from protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from protocol.message import MessageExt
from protocol.names import shown
from protocol.record import encode_msg_id, pack_host
from protocol.route import PERM_RW
from protocol.trio.service import Guard

CID_RMQ_SYS_TRANS = "CID_RMQ_SYS_TRANS"
HALF_QUEUE_ID = 0
CHUNK = 256  # half messages looked at between two checkpoints of a pass


@dataclass(slots=True)
class CheckRequest:
    """What to ask a producer of ``group``."""

    group: str
    header: CheckTransactionStateRequestHeader
    body: bytes
    # the half message's real topic: with ACL, only producers that may PUB on it are asked
    topic: str = ""


# Asks one live producer of the group; False when none is connected.
Ask = Callable[[CheckRequest], bool]
# Whether the caller of END_TRANSACTION may end this half message: None, or why not.
MayEnd = Callable[[MessageExt], str | None]


@dataclass(slots=True)
class PassReport:
    looked: int = 0
    checked: int = 0
    no_producer: int = 0
    discarded: int = 0
    skipped: int = 0


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
        self.passes = 0
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
        for offset in range(half, half_end):
            msg = self._read(RMQ_SYS_TRANS_HALF_TOPIC, offset)
            if msg is not None:
                book.load_half(offset, origin_of(msg))
        if half_end > half or op_end > op:
            self.log.info("transactions loaded", half_messages=half_end - half,
                          op_records=op_end - op, **book.stats())

    def _read(self, topic: str, offset: int) -> MessageExt | None:
        phys = self.store.get_commit_log_offset_in_queue(topic, HALF_QUEUE_ID, offset)
        if phys < 0:
            return None
        return self.store.look_message_by_offset(phys)

    # ---- prepare ----------------------------------------------------------------------

    def prepare(self, inner: MessageExtBrokerInner, props: dict[str, str],
                group: str) -> PutMessageResult:
        """Store a producer's prepared message as a half message."""
        to_half(inner, props, group)
        result = self.store.put_message(inner)
        ar = result.append_result
        if ar is not None and classify_put_status(result.put_message_status) is PutOutcome.STORED:
            self.book.half_stored(ar.logics_offset, ar.logics_offset)
        return result

    # ---- end --------------------------------------------------------------------------

    def end(self, h: EndTransactionRequestHeader, state: EndState,
            born_host: str, may_end: MayEnd | None = None) -> tuple[int, str | None]:
        """END_TRANSACTION with a commit or rollback: (response code, remark).
        ``may_end`` (ACL) refuses a half message the caller has no right to,
        before anything else about it is told."""
        msg = self.store.look_message_by_offset(h.commit_log_offset)
        where = (f"half message at queue offset {h.tran_state_table_offset}, "
                 f"commit-log offset {h.commit_log_offset}")
        if msg is None or msg.topic != RMQ_SYS_TRANS_HALF_TOPIC:
            return ResponseCode.SYSTEM_ERROR, f"no {where}"
        if msg.queue_offset != h.tran_state_table_offset:
            return ResponseCode.SYSTEM_ERROR, (
                f"the half message at commit-log offset {h.commit_log_offset} has queue offset "
                f"{msg.queue_offset}, not {h.tran_state_table_offset}")
        refused = may_end(msg) if may_end is not None else None
        if refused is not None:
            return ResponseCode.NO_PERMISSION, refused
        group = msg.properties.get(PGROUP)
        if group != h.producer_group:
            return ResponseCode.SYSTEM_ERROR, (
                f"the {where} belongs to producer group {shown(group)}, "
                f"not {shown(h.producer_group)}")
        origin = origin_of(msg)
        verdict = self.book.verdict(origin, state)
        if verdict is Verdict.REPEATED:
            return ResponseCode.SUCCESS, f"the transaction was already {_done(state)}; nothing changed"
        if verdict is Verdict.CONFLICT:
            other = EndState.ROLLBACK if state is EndState.COMMIT else EndState.COMMIT
            return ResponseCode.TRANSACTION_FAILED, (
                f"the transaction was already {_done(other)}; it cannot be {_done(state)}")
        if verdict is Verdict.NOT_PENDING:
            return ResponseCode.TRANSACTION_FAILED, (
                f"the transaction of the {where} is no longer pending "
                "(it ended earlier or was discarded after too many checks)")
        newest = self.book.newest_copy(origin)
        assert newest is not None
        msgs = [op_record(newest, origin, state, born_host)]
        if state is EndState.COMMIT:
            try:
                msgs.insert(0, from_half(msg, h.commit_or_rollback, origin))
            except RewriteError as exc:
                return ResponseCode.MESSAGE_ILLEGAL, f"the {where} cannot be committed: {exc}"
        result, placed = self.store.put_together(msgs)
        status = result.put_message_status
        if classify_put_status(status) is not PutOutcome.STORED:
            detail = f": {result.detail}" if result.detail else ""
            return ResponseCode.SYSTEM_ERROR, (
                f"the end of the transaction could not be stored ({status.value}{detail}); "
                "the broker will ask again")
        self.book.end(origin, state, placed[-1].consume_queue_offset)
        if state is EndState.COMMIT:
            self.committed += 1
        else:
            self.rolled_back += 1
        if status is not PutMessageStatus.PUT_OK:
            return ResponseCode.SUCCESS, f"stored, but {status.value}"
        return ResponseCode.SUCCESS, None

    # ---- check ------------------------------------------------------------------------

    def check_chunk(self, now_ms: int, stop: int, ask: Ask, report: PassReport,
                    limit: int = CHUNK) -> bool:
        """Look at up to ``limit`` half messages before queue offset ``stop``
        (the queue's end when the pass began). Returns whether the pass goes on."""
        book = self.book
        i = max(book.half_offset,
                self.store.get_min_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID))
        go_on = True
        try:
            for _ in range(limit):
                if i >= stop:
                    go_on = False
                    break
                report.looked += 1
                if i in book.ended or book.pending.get(i, i) > i:
                    # the first half message of a transaction that ended or has a
                    # newer copy: passed without reading it
                    report.skipped += 1
                    i += 1
                    continue
                msg = self._read(RMQ_SYS_TRANS_HALF_TOPIC, i)
                if msg is None:  # cleaned away or unreadable
                    report.skipped += 1
                    i += 1
                    continue
                step = self._check_one(i, msg, now_ms, ask, report)
                if step is None:
                    go_on = False
                    break
                i += 1
        finally:
            book.advance(i, prune=not go_on)
            self._save_offsets()
        return go_on

    def _check_one(self, i: int, msg: MessageExt, now_ms: int, ask: Ask,
                   report: PassReport) -> bool | None:
        """Handle the half message at ``i``: True to move past it, None to end the pass."""
        book = self.book
        origin = origin_of(msg)
        if book.should_skip(i, origin):
            report.skipped += 1
            return True
        times = check_times_of(msg)
        if times >= self.config.transaction_check_max:
            return self._discard(i, msg, origin, times, report)
        timeout = self.config.transaction_time_out
        immunity = check_immunity_ms(msg, timeout)
        age = now_ms - msg.born_timestamp
        if 0 <= age < immunity:
            if immunity == timeout:
                return None  # the ones after it are younger still
            # a producer asked for a longer wait: move it to the end, unchecked
            return None if self._put_copy(i, msg, origin, times, report) is None else True
        copy = self._put_copy(i, msg, origin, times + 1, report)
        if copy is None:
            return None
        copy_offset, copy_msg = copy
        self.checks += 1
        report.checked += 1
        if not ask(self._check_request(copy_msg)):
            report.no_producer += 1
            self.guard.note("no live producer to check a transaction with",
                            key=("no-producer", msg.properties.get(PGROUP)),
                            log_level="warning", group=shown(msg.properties.get(PGROUP)),
                            queue_offset=copy_offset, check_times=times + 1)
        return True

    def _put_copy(self, i: int, msg: MessageExt, origin: int, times: int,
                  report: PassReport) -> tuple[int, MessageExt] | None:
        """Put a copy of the half message at the end of the queue; (its
        queue offset, the copy as stored), or None when the pass must stop."""
        result = self.store.put_message(half_check_copy(msg, origin, times))
        status = result.put_message_status
        outcome = classify_put_status(status)
        ar = result.append_result
        if outcome is PutOutcome.STORED and ar is not None:
            self.book.half_stored(ar.logics_offset, origin)
            copy = self.store.look_message_by_offset(ar.wrote_offset)
            if copy is None:  # cannot happen: it was just written
                return None
            return ar.logics_offset, copy
        if outcome is PutOutcome.TRANSIENT:
            self.guard.note("half message copy not stored, the check pass stops",
                            key=("transient", status), status=status.value, queue_offset=i)
            return None
        # a copy that can never be stored: the transaction cannot be checked any more
        self._discard(i, msg, origin, times, report, reason=f"copy refused: {status.value}")
        return None

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
        result = self.store.put_message(check_max_message(msg))
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
                **self.book.stats()}

    # ---- trio edge --------------------------------------------------------------------

    async def check_pass(self, ask: Ask) -> PassReport:
        """One pass over the half queue, yielding to other tasks between chunks."""
        report = PassReport()
        stop = self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        while self.check_chunk(self.now_ms(), stop, ask, report):
            await trio.sleep(0)
        self.passes += 1
        if report.checked or report.discarded:
            self.log.info("transaction check pass", **asdict(report), **self.book.stats())
        return report

    async def run(self, ask: Ask, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        interval = self.config.transaction_check_interval / 1000
        task_status.started()
        while True:
            await trio.sleep(interval)
            await self.guard.run(self.check_pass, ask)


def _done(state: EndState) -> str:
    return "committed" if state is EndState.COMMIT else "rolled back"
