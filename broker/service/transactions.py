"""TransactionService: how a producer ends a transaction, with no transport
(RocketMQ's EndTransactionProcessor; broker/end_transaction_processor.py is
the remoting adapter).

``end(EndTransaction) -> EndOutcome``: a commit stores the half message's
restored message in its real topic and queue *and* the op record in one write
(the store's ``put_together``), so a crash cannot leave one without the
other; a rollback stores the op record. "Unknown" changes nothing: the check
service asks the producer later (broker/transaction_service.py, the
check-back loop, which keeps the transactions' book). A transaction ends once
(broker/transaction_book.py): the same end again changes nothing, the other
end is refused.

The checks, in order: a slave refuses (ends belong on the master, which
replicates what they store); an action the broker does not know is refused;
then the half message must be at both offsets the request gives, the caller
may end it (ACL, ``MayEnd``, before anything else about it is told) and it
must be of the request's producer group (and, when the request names one, have
its message id: ``uniq_key``). ``from_check``: the end answers a
check (logged, as the producer's remark on an unknown end).

Expected outcomes are an ``EndStatus`` (one table per transport maps it to a
code); the service takes narrow collaborators (the protocols below), never
the controller, and its tests build it with fakes
(tests/broker/service/test_transactions.py).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from broker.message_rewrite import (
    PGROUP,
    EndState,
    PutOutcome,
    RewriteError,
    classify_put_status,
    from_half,
    op_record,
    origin_of,
)
from broker.service.types import LiveRole
from broker.store import MessageExtBrokerInner, PutMessageResult
from broker.store.status import PutMessageStatus
from broker.topic_validator import RMQ_SYS_TRANS_HALF_TOPIC
from broker.transaction_book import TransactionBook, Verdict
from protocol.message import MessageExt
from protocol.names import shown
from protocol.record import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)


class EndAction(enum.Enum):
    """What the producer says of its transaction (the values: the sysFlag
    transaction types a committed message carries, RocketMQ's
    ``commitOrRollback``)."""

    UNKNOWN = TRANSACTION_NOT_TYPE
    COMMIT = TRANSACTION_COMMIT_TYPE
    ROLLBACK = TRANSACTION_ROLLBACK_TYPE


END_STATES = {EndAction.COMMIT: EndState.COMMIT, EndAction.ROLLBACK: EndState.ROLLBACK}


class EndStatus(enum.Enum):
    """How an end came out. The first three are successes."""

    ENDED = "ENDED"  # committed or rolled back now (the remark tells a slow store)
    ALREADY_ENDED = "ALREADY_ENDED"  # the same end again: nothing changed
    UNKNOWN_NOTED = "UNKNOWN_NOTED"  # the producer does not know yet: the broker asks later
    SLAVE = "SLAVE"  # a slave ends nothing
    ILLEGAL_ACTION = "ILLEGAL_ACTION"  # neither commit, rollback nor unknown
    NO_HALF_MESSAGE = "NO_HALF_MESSAGE"  # none at the offsets, or of another group
    NO_PERMISSION = "NO_PERMISSION"  # the caller may not end it (ACL)
    CONFLICT = "CONFLICT"  # it ended the other way
    NOT_PENDING = "NOT_PENDING"  # it ended long ago or was discarded after too many checks
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"  # the half message cannot be committed
    STORE_FAILED = "STORE_FAILED"  # the end was not stored: the broker will ask again


SUCCESSES = frozenset({EndStatus.ENDED, EndStatus.ALREADY_ENDED, EndStatus.UNKNOWN_NOTED})


@dataclass(slots=True)
class EndTransaction:
    """One end. ``queue_offset`` and ``commit_log_offset`` locate the half
    message (its offset in the half queue and in the commit log). ``action``
    is an ``EndAction``, or the value a transport could not map to one (an
    int: refused ILLEGAL_ACTION, after the role is checked). ``born_host``:
    the producer's address, recorded in the op record."""

    producer_group: str
    queue_offset: int
    commit_log_offset: int
    action: EndAction | int
    born_host: str
    from_check: bool = False
    msg_id: str | None = None
    transaction_id: str | None = None
    producer_remark: str | None = None
    # when set, the half message's UNIQ_KEY must be this (gRPC: the request's message id)
    uniq_key: str | None = None


@dataclass(slots=True)
class EndOutcome:
    status: EndStatus
    remark: str | None = None


# Whether the caller may end this half message: None, or why not (the remark).
MayEnd = Callable[[MessageExt], str | None]


class Placed(Protocol):
    """Where the store put one record of a write."""

    @property
    def consume_queue_offset(self) -> int: ...


class EndStore(Protocol):
    """The message store's reads and the one write an end makes."""

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None: ...

    def put_together(self, msgs: list[MessageExtBrokerInner]
                     ) -> tuple[PutMessageResult, Sequence[Placed]]: ...


class HalfLedger(Protocol):
    """The transactional message service's book (broker/transaction_service.py):
    read on each end (a load replaces it), told of every end stored."""

    @property
    def book(self) -> TransactionBook: ...

    def record_end(self, origin: int, state: EndState, op_offset: int) -> None: ...


class Notes(Protocol):
    """Rate-limited log lines for conditions that repeat (protocol/trio/service.py Guard)."""

    def note(self, event: str, key: Hashable, *, log_level: str = ...,
             **context: Any) -> None: ...


class TransactionService:
    def __init__(self, broker_name: str, role: LiveRole, store: EndStore, ledger: HalfLedger,
                 notes: Notes) -> None:
        self.broker_name = broker_name
        self.role = role  # the live role
        self.store = store
        self.ledger = ledger
        self.notes = notes

    def end(self, req: EndTransaction, may_end: MayEnd | None = None) -> EndOutcome:
        """End the transaction as the producer says. ``may_end`` (ACL) refuses
        a half message the caller has no right to, before anything else about
        it is told."""
        if self.role.is_slave:
            return EndOutcome(EndStatus.SLAVE, f"the broker[{self.broker_name}] is a slave: end "
                                               "transactions on its master")
        action = req.action
        if action is EndAction.UNKNOWN:
            self.notes.note("producer does not know the transaction's state yet",
                            key=("unknown", req.producer_group), log_level="debug",
                            group=shown(req.producer_group), msg_id=shown(req.msg_id),
                            from_check=req.from_check, remark=shown(req.producer_remark))
            return EndOutcome(EndStatus.UNKNOWN_NOTED, "unknown: the broker will ask again")
        if not isinstance(action, EndAction):
            return EndOutcome(EndStatus.ILLEGAL_ACTION,
                              f"commitOrRollback must be {TRANSACTION_NOT_TYPE} (unknown), "
                              f"{TRANSACTION_COMMIT_TYPE} (commit) or "
                              f"{TRANSACTION_ROLLBACK_TYPE} (rollback), not {action}")
        state = END_STATES[action]
        out = self._end(req, action, state, may_end)
        if out.status not in SUCCESSES:
            self.notes.note("end transaction refused", key=("refused", out.status),
                            log_level="warning", group=shown(req.producer_group),
                            msg_id=shown(req.msg_id), state=state.value,
                            from_check=req.from_check, peer=req.born_host, reason=out.remark)
        return out

    def _end(self, req: EndTransaction, action: EndAction, state: EndState,
             may_end: MayEnd | None) -> EndOutcome:
        msg = self.store.look_message_by_offset(req.commit_log_offset)
        where = (f"half message at queue offset {req.queue_offset}, "
                 f"commit-log offset {req.commit_log_offset}")
        if msg is None or msg.topic != RMQ_SYS_TRANS_HALF_TOPIC:
            return EndOutcome(EndStatus.NO_HALF_MESSAGE, f"no {where}")
        if msg.queue_offset != req.queue_offset:
            return EndOutcome(EndStatus.NO_HALF_MESSAGE, (
                f"the half message at commit-log offset {req.commit_log_offset} has queue "
                f"offset {msg.queue_offset}, not {req.queue_offset}"))
        refused = may_end(msg) if may_end is not None else None
        if refused is not None:
            return EndOutcome(EndStatus.NO_PERMISSION, refused)
        if req.uniq_key is not None and msg.uniq_key != req.uniq_key:
            return EndOutcome(EndStatus.NO_HALF_MESSAGE, (
                f"the {where} is message {shown(msg.uniq_key)}, not {shown(req.uniq_key)}"))
        group = msg.properties.get(PGROUP)
        if group != req.producer_group:
            return EndOutcome(EndStatus.NO_HALF_MESSAGE, (
                f"the {where} belongs to producer group {shown(group)}, "
                f"not {shown(req.producer_group)}"))
        origin = origin_of(msg)
        book = self.ledger.book
        verdict = book.verdict(origin, state)
        if verdict is Verdict.REPEATED:
            return EndOutcome(EndStatus.ALREADY_ENDED,
                              f"the transaction was already {_done(state)}; nothing changed")
        if verdict is Verdict.CONFLICT:
            other = EndState.ROLLBACK if state is EndState.COMMIT else EndState.COMMIT
            return EndOutcome(EndStatus.CONFLICT, (
                f"the transaction was already {_done(other)}; it cannot be {_done(state)}"))
        if verdict is Verdict.NOT_PENDING:
            return EndOutcome(EndStatus.NOT_PENDING, (
                f"the transaction of the {where} is no longer pending "
                "(it ended earlier or was discarded after too many checks)"))
        newest = book.newest_copy(origin)
        assert newest is not None
        msgs = [op_record(newest, origin, state, req.born_host)]
        if state is EndState.COMMIT:
            try:
                msgs.insert(0, from_half(msg, action.value, origin))
            except RewriteError as exc:
                return EndOutcome(EndStatus.MESSAGE_ILLEGAL,
                                  f"the {where} cannot be committed: {exc}")
        result, placed = self.store.put_together(msgs)
        status = result.put_message_status
        if classify_put_status(status) is not PutOutcome.STORED:
            detail = f": {result.detail}" if result.detail else ""
            return EndOutcome(EndStatus.STORE_FAILED, (
                f"the end of the transaction could not be stored ({status.value}{detail}); "
                "the broker will ask again"))
        self.ledger.record_end(origin, state, placed[-1].consume_queue_offset)
        if status is not PutMessageStatus.PUT_OK:
            return EndOutcome(EndStatus.ENDED, f"stored, but {status.value}")
        return EndOutcome(EndStatus.ENDED)


def _done(state: EndState) -> str:
    return "committed" if state is EndState.COMMIT else "rolled back"
