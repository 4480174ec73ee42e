"""TransactionService in process, over fakes: a fake store holding half
messages and taking the end's one write, the real transaction book behind a
fake ledger; the remoting adapter's table and decoding. No controller, no
sockets (tests/broker/test_transactions.py runs ends over a real store)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import pytest

from broker.end_transaction_processor import END_STATUS_TO_CODE, decode_end
from broker.message_rewrite import PGROUP, REAL_QID, REAL_TOPIC, TRAN_MSG, EndState
from broker.service.transactions import (
    SUCCESSES,
    EndAction,
    EndStatus,
    EndTransaction,
    TransactionService,
)
from broker.store import MessageExtBrokerInner, PutMessageResult
from broker.store.status import PutMessageStatus
from broker.topic_validator import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC
from broker.transaction_book import TransactionBook
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.message import MessageExt
from protocol.record import TRANSACTION_COMMIT_TYPE, transaction_type

GROUP = "tx-group"
HOST = "10.0.0.1:1234"


@dataclass
class Placed:
    consume_queue_offset: int


@dataclass
class Store:
    halves: dict[int, MessageExt] = field(default_factory=dict)
    writes: list[list[MessageExtBrokerInner]] = field(default_factory=list)
    status: PutMessageStatus = PutMessageStatus.PUT_OK
    op_offset: int = 0

    def half(self, queue_offset: int, commit_log_offset: int, group: str = GROUP,
             topic: str = RMQ_SYS_TRANS_HALF_TOPIC, **props: str) -> tuple[int, int]:
        self.halves[commit_log_offset] = MessageExt(
            topic, b"body", {PGROUP: group, REAL_TOPIC: "orders", REAL_QID: "1",
                             TRAN_MSG: "true", **props},
            queue_offset=queue_offset, commit_log_offset=commit_log_offset)
        return queue_offset, commit_log_offset

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        return self.halves.get(commit_log_offset)

    def put_together(self, msgs: list[MessageExtBrokerInner]
                     ) -> tuple[PutMessageResult, list[Placed]]:
        self.writes.append(msgs)
        result = PutMessageResult(self.status)
        if self.status in (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT):
            self.op_offset += 1
            return result, [Placed(7) for _ in msgs[:-1]] + [Placed(self.op_offset)]
        return result, []


@dataclass
class Ledger:
    book: TransactionBook = field(default_factory=TransactionBook)
    ends: list[tuple[int, EndState, int]] = field(default_factory=list)

    def record_end(self, origin: int, state: EndState, op_offset: int) -> None:
        self.book.end(origin, state, op_offset)
        self.ends.append((origin, state, op_offset))


@dataclass
class Notes:
    lines: list[tuple[str, Hashable, dict[str, Any]]] = field(default_factory=list)

    def note(self, event: str, key: Hashable, *, log_level: str = "warning",
             **context: Any) -> None:
        self.lines.append((event, key, context))


@dataclass
class Role:
    is_slave: bool = False
    sync_master: bool = False


@dataclass
class World:
    store: Store = field(default_factory=Store)
    ledger: Ledger = field(default_factory=Ledger)
    notes: Notes = field(default_factory=Notes)
    role: Role = field(default_factory=Role)

    def __post_init__(self) -> None:
        self.svc = TransactionService("b", self.role, self.store, self.ledger, self.notes)

    def prepared(self, queue_offset: int, commit_log_offset: int, **props: str) -> tuple[int, int]:
        self.ledger.book.half_stored(queue_offset, queue_offset, GROUP)
        return self.store.half(queue_offset, commit_log_offset, **props)


def end(where: tuple[int, int], action: EndAction | int, group: str = GROUP,
        from_check: bool = False) -> EndTransaction:
    return EndTransaction(group, where[0], where[1], action, HOST, from_check=from_check,
                          msg_id="id-1")


@pytest.fixture
def w() -> World:
    return World()


def test_commit_writes_the_message_and_its_op_record_together(w: World) -> None:
    where = w.prepared(0, 100)
    out = w.svc.end(end(where, EndAction.COMMIT))
    assert (out.status, out.remark) == (EndStatus.ENDED, None)
    ((committed, op),) = w.store.writes
    assert (committed.topic, committed.queue_id) == ("orders", 1)
    assert transaction_type(committed.sys_flag) == TRANSACTION_COMMIT_TYPE
    assert op.topic == RMQ_SYS_TRANS_OP_HALF_TOPIC and op.body == b"0"
    assert w.ledger.ends == [(0, EndState.COMMIT, 1)]
    assert w.notes.lines == []


def test_rollback_writes_only_the_op_record(w: World) -> None:
    where = w.prepared(3, 300)
    assert w.svc.end(end(where, EndAction.ROLLBACK)).status is EndStatus.ENDED
    ((op,),) = w.store.writes
    assert op.topic == RMQ_SYS_TRANS_OP_HALF_TOPIC
    assert w.ledger.ends == [(3, EndState.ROLLBACK, 1)]


def test_an_end_happens_once(w: World) -> None:
    where = w.prepared(0, 100)
    assert w.svc.end(end(where, EndAction.COMMIT)).status is EndStatus.ENDED
    out = w.svc.end(end(where, EndAction.COMMIT, from_check=True))
    assert out.status is EndStatus.ALREADY_ENDED and "already committed" in (out.remark or "")
    out = w.svc.end(end(where, EndAction.ROLLBACK))
    assert out.status is EndStatus.CONFLICT and "cannot be rolled back" in (out.remark or "")
    assert len(w.store.writes) == 1 and len(w.ledger.ends) == 1
    w.ledger.book.discard(0)  # forgotten (passed by the check service)
    w.ledger.book.ended.clear()
    assert w.svc.end(end(where, EndAction.COMMIT)).status is EndStatus.NOT_PENDING


def test_unknown_changes_nothing_and_is_noted(w: World) -> None:
    where = w.prepared(0, 100)
    req = end(where, EndAction.UNKNOWN, from_check=True)
    req.producer_remark = "still deciding"
    out = w.svc.end(req)
    assert out.status is EndStatus.UNKNOWN_NOTED and "ask again" in (out.remark or "")
    assert w.store.writes == [] and w.ledger.ends == []
    ((event, key, context),) = w.notes.lines
    assert key == ("unknown", GROUP) and context["from_check"] is True
    assert "still deciding" in context["remark"]


def test_refusals_in_order(w: World) -> None:
    where = w.prepared(0, 100)
    w.store.half(9, 900, topic="orders")  # a message, but no half message
    may_end_asked: list[MessageExt] = []

    def refuse(msg: MessageExt) -> str:
        may_end_asked.append(msg)
        return "no PUB"

    cases = [
        (end((0, 5), EndAction.COMMIT), EndStatus.NO_HALF_MESSAGE, "no half message"),
        (end((9, 900), EndAction.COMMIT), EndStatus.NO_HALF_MESSAGE, "no half message"),
        (end((4, 100), EndAction.COMMIT), EndStatus.NO_HALF_MESSAGE, "queue offset 0, not 4"),
        (end(where, EndAction.COMMIT, group="other"), EndStatus.NO_HALF_MESSAGE, GROUP),
        (end(where, 5), EndStatus.ILLEGAL_ACTION, "not 5"),
    ]
    for req, status, text in cases:
        out = w.svc.end(req, refuse if status is EndStatus.ILLEGAL_ACTION else None)
        assert out.status is status and text in (out.remark or ""), (req, out)
    assert may_end_asked == []  # nothing found, or nothing to end: the caller is not asked
    out = w.svc.end(end(where, EndAction.COMMIT, group="other"), refuse)
    assert (out.status, out.remark) == (EndStatus.NO_PERMISSION, "no PUB")  # before the group
    assert len(may_end_asked) == 1
    assert w.store.writes == [] and w.ledger.ends == []
    refused = [key for event, key, _ in w.notes.lines if event == "end transaction refused"]
    assert refused == [("refused", EndStatus.NO_HALF_MESSAGE)] * 4 + [
        ("refused", EndStatus.NO_PERMISSION)]


def test_a_slave_ends_nothing(w: World) -> None:
    where = w.prepared(0, 100)
    w.role.is_slave = True
    for action in (EndAction.COMMIT, EndAction.UNKNOWN, 5):  # before the action is looked at
        out = w.svc.end(end(where, action))
        assert out.status is EndStatus.SLAVE and "master" in (out.remark or "")
    assert w.store.writes == [] and w.notes.lines == []


def test_a_commit_the_store_cannot_take(w: World) -> None:
    where = w.prepared(0, 100)
    w.store.status = PutMessageStatus.OS_PAGECACHE_BUSY
    out = w.svc.end(end(where, EndAction.COMMIT))
    assert out.status is EndStatus.STORE_FAILED and "ask again" in (out.remark or "")
    assert w.ledger.ends == []  # still pending: a later end or check goes on
    w.store.status = PutMessageStatus.FLUSH_DISK_TIMEOUT  # stored, not yet on disk
    out = w.svc.end(end(where, EndAction.COMMIT))
    assert out.status is EndStatus.ENDED and out.remark == "stored, but FLUSH_DISK_TIMEOUT"
    w2 = World()
    bad = w2.prepared(0, 100, **{REAL_QID: "x"})  # its real queue is no queue
    out = w2.svc.end(end(bad, EndAction.COMMIT))
    assert out.status is EndStatus.MESSAGE_ILLEGAL and w2.store.writes == []


# ---------------------------------------------------------------- the remoting adapter


def test_every_end_status_has_a_code() -> None:
    assert set(END_STATUS_TO_CODE) == set(EndStatus)
    for status, code in END_STATUS_TO_CODE.items():
        assert (code == ResponseCode.SUCCESS) == (status in SUCCESSES), status


def test_decode_end_maps_the_action() -> None:
    fields = {"producerGroup": GROUP, "tranStateTableOffset": 3, "commitLogOffset": 300,
              "fromTransactionCheck": "true", "msgId": "m"}
    for value, action in ((0, EndAction.UNKNOWN), (8, EndAction.COMMIT),
                          (12, EndAction.ROLLBACK), (4, 4), (-1, -1)):
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION,
                                      {**fields, "commitOrRollback": value})
        cmd.remark = "note"
        req = decode_end(cmd, HOST)
        assert req == EndTransaction(GROUP, 3, 300, action, HOST, from_check=True, msg_id="m",
                                     producer_remark="note")
