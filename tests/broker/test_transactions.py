"""Transactional messages on the broker, without sockets: the book, the
service over a real store (prepare, end, check passes, discard, restart)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker import transaction_service
from broker.config import BrokerConfig
from broker.consumer_offset_manager import ConsumerOffsetManager
from broker.message_rewrite import (
    CHECK_TIMES,
    PGROUP,
    PREPARED_QUEUE_OFFSET,
    REAL_QID,
    REAL_TOPIC,
    TRAN_MSG,
    EndState,
    build_inner,
    check_immunity_ms,
    from_half,
    op_record,
    parse_op,
)
from broker.service.transactions import (
    EndAction,
    EndStatus,
    EndTransaction,
    TransactionService,
)
from broker.store import DefaultMessageStore, MessageExtBrokerInner
from broker.store.status import GetMessageStatus
from broker.topic_config_manager import TopicConfigManager
from broker.topic_validator import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
)
from broker.transaction_book import TransactionBook, Verdict
from broker.transaction_service import (
    CID_RMQ_SYS_TRANS,
    Asked,
    CheckRequest,
    PassReport,
    TransactionalMessageService,
)
from protocol.message import MessageExt
from protocol.record import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    decode_record,
    transaction_type,
)
from tests.broker.store.helpers import make_config, open_store
from tests.broker.test_guarded_service import FakeLog

GROUP = "tx-group"
TOPIC = "orders"
HOST = "127.0.0.1:5555"
ACTIONS = {EndState.COMMIT: EndAction.COMMIT, EndState.ROLLBACK: EndAction.ROLLBACK}


class Master:
    is_slave = False
    sync_master = False


# ---- the book ----------------------------------------------------------------------------


def test_book_verdicts_and_newest_copy() -> None:
    book = TransactionBook()
    book.half_stored(0, 0)
    book.half_stored(1, 1)
    assert book.verdict(0, EndState.COMMIT) is Verdict.APPLY
    assert book.verdict(7, EndState.COMMIT) is Verdict.NOT_PENDING
    book.half_stored(5, 0)  # a check copy of transaction 0
    assert book.newest_copy(0) == 5
    assert book.should_skip(0, 0)  # the old copy is passed without a look
    assert not book.should_skip(5, 0)
    book.end(0, EndState.COMMIT, op_offset=0)
    assert book.verdict(0, EndState.COMMIT) is Verdict.REPEATED
    assert book.verdict(0, EndState.ROLLBACK) is Verdict.CONFLICT
    assert book.should_skip(5, 0)


def test_book_forgets_an_op_only_once_every_copy_is_passed() -> None:
    book = TransactionBook()
    book.half_stored(0, 0)
    book.half_stored(3, 0)
    book.end(0, EndState.ROLLBACK, op_offset=0)
    book.half_stored(1, 1)
    book.end(1, EndState.COMMIT, op_offset=1)
    book.advance(2)  # copy 3 of transaction 0 is still ahead: its op stays, and so 1's after it
    assert book.op_offset == 0 and set(book.ended) == {0, 1}
    book.advance(4)
    assert book.op_offset == 2 and book.ended == {}
    # an end for any copy of a forgotten transaction is refused: never applied twice
    assert book.verdict(0, EndState.ROLLBACK) is Verdict.NOT_PENDING
    assert book.verdict(1, EndState.COMMIT) is Verdict.NOT_PENDING


def test_book_rebuilt_from_ops_then_half_copies() -> None:
    book = TransactionBook(half_offset=2, op_offset=0)
    book.load_op(0, (2, 2, EndState.COMMIT))
    book.load_op(1, None)  # not an op record: passed like any other
    for copy, origin in ((2, 2), (3, 3), (4, 2), (5, 3)):
        book.load_half(copy, origin)
    assert book.pending == {3: 5}
    assert book.ended[2].last_copy == 4
    book.advance(5)
    assert book.op_offset == 2 and 2 not in book.ended


# ---- the rewrites -------------------------------------------------------------------------


def test_check_immunity_is_never_shorter_than_the_timeout() -> None:
    msg = MessageExt("t", b"x", {"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"})
    assert check_immunity_ms(msg, 6000) == 60_000
    msg.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] = "1"
    assert check_immunity_ms(msg, 6000) == 6000
    msg.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] = "soon"
    assert check_immunity_ms(msg, 6000) == 6000


def test_op_record_round_trip_and_garbage() -> None:
    op = op_record(12, 3, EndState.COMMIT, HOST)
    msg = MessageExt(op.topic, op.body, {"TAGS": "d", PREPARED_QUEUE_OFFSET: "3",
                                          "TRAN_END_STATE": "COMMIT"})
    assert parse_op(msg) == (12, 3, EndState.COMMIT)
    assert parse_op(MessageExt(op.topic, b"not a number", {})) is None
    assert parse_op(MessageExt(op.topic, b"7", {})) == (7, 7, EndState.ROLLBACK)


def test_from_half_refuses_a_broken_real_topic() -> None:
    msg = MessageExt(RMQ_SYS_TRANS_HALF_TOPIC, b"x", {REAL_TOPIC: "bad topic!", REAL_QID: "0"})
    with pytest.raises(ValueError, match=REAL_TOPIC):
        from_half(msg, TRANSACTION_COMMIT_TYPE, 0)
    msg.properties = {REAL_TOPIC: TOPIC, REAL_QID: "-1"}
    with pytest.raises(ValueError, match=REAL_QID):
        from_half(msg, TRANSACTION_COMMIT_TYPE, 0)


# ---- the service over a real store ------------------------------------------------------------


class Env:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.now = 1_000_000
        self.asked: list[CheckRequest] = []
        self.producer_online = True
        self.producer_busy = False
        self.open()

    def open(self) -> None:
        self.config: BrokerConfig = make_config(self.root, cl_size=256 * 1024, cq_entries=1000)
        self.config.transaction_time_out = 6000
        self.config.transaction_check_max = 3
        self.store: DefaultMessageStore = open_store(self.config)
        self.offsets = ConsumerOffsetManager(self.config)
        self.offsets.load()
        self.topics = TopicConfigManager(self.config)
        self.svc = TransactionalMessageService(self.config, self.store, self.offsets,
                                               self.topics, now_ms=lambda: self.now)
        self.svc.guard.log = FakeLog()
        self.svc.load()
        self.ends = TransactionService(self.config.broker_name, Master(), self.store, self.svc,
                                       self.svc.guard)

    def restart(self, persist_offsets: bool = True) -> None:
        if persist_offsets:
            self.offsets.persist(force=True)
        self.store.shutdown()
        self.open()

    def ask(self, group: str, build: Callable[[], CheckRequest]) -> Asked:
        if not self.producer_online:
            return Asked.NO_PRODUCER
        if self.producer_busy:
            return Asked.BUSY
        request = build()
        assert request.group == group
        self.asked.append(request)
        return Asked.SENT

    def prepare(self, body: bytes, queue_id: int = 1, born: int | None = None,
                props: dict[str, str] | None = None) -> tuple[int, int]:
        """A producer's prepared send: (half queue offset, commit-log offset)."""
        p = {"TAGS": "t", "UNIQ_KEY": body.decode(), TRAN_MSG: "true", PGROUP: GROUP,
             **(props or {})}
        inner = build_inner(TOPIC, queue_id, body, p, sys_flag=TRANSACTION_PREPARED_TYPE,
                            born_timestamp=born or self.now, born_host=HOST)
        result = self.svc.prepare(inner, p, GROUP)
        assert result.ok and result.append_result is not None
        return result.append_result.logics_offset, result.append_result.wrote_offset

    def end(self, where: tuple[int, int], state: EndState, group: str = GROUP,
            check: bool = False) -> tuple[EndStatus, str | None]:
        out = self.ends.end(EndTransaction(group, where[0], where[1], ACTIONS[state], HOST,
                                           from_check=check))
        return out.status, out.remark

    def check_pass(self) -> PassReport:
        report = PassReport()
        stop = self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0)
        while self.svc.check_chunk(self.now, stop, self.ask, report, limit=3):
            pass
        return report

    def messages(self, topic: str, queue_id: int = 1) -> list[MessageExt]:
        r = self.store.get_message("check", topic, queue_id, 0, 1000, None)
        if r.status is not GetMessageStatus.FOUND:
            return []
        return [decode_record(b) for b in r.buffers]

    def delivered(self) -> list[bytes]:
        return [m.body for m in self.messages(TOPIC)]


@pytest.fixture
def env(tmp_path: Path) -> Any:
    e = Env(tmp_path)
    yield e
    e.store.shutdown()


def test_half_message_is_invisible_until_committed(env: Env) -> None:
    where = env.prepare(b"a")
    assert env.delivered() == []
    (half,) = env.messages(RMQ_SYS_TRANS_HALF_TOPIC, 0)
    assert half.properties[REAL_TOPIC] == TOPIC and half.properties[REAL_QID] == "1"
    assert transaction_type(half.sys_flag) == TRANSACTION_NOT_TYPE
    assert env.end(where, EndState.COMMIT) == (EndStatus.ENDED, None)
    (msg,) = env.messages(TOPIC)
    assert msg.body == b"a" and msg.uniq_key == "a" and msg.tags == "t"
    assert transaction_type(msg.sys_flag) == TRANSACTION_COMMIT_TYPE
    assert msg.prepared_transaction_offset == where[1]
    assert TRAN_MSG not in msg.properties and REAL_TOPIC not in msg.properties
    (op,) = env.messages(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0)
    assert op.body == str(where[0]).encode() and op.tags == "d"


def test_rollback_stores_only_the_op_record(env: Env) -> None:
    where = env.prepare(b"r")
    assert env.end(where, EndState.ROLLBACK)[0] is EndStatus.ENDED
    assert env.delivered() == []
    assert len(env.messages(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0)) == 1


def test_repeated_conflicting_and_bad_ends_change_nothing(env: Env) -> None:
    where = env.prepare(b"a")
    other = env.prepare(b"b")
    assert env.end(where, EndState.COMMIT)[0] is EndStatus.ENDED
    code, remark = env.end(where, EndState.COMMIT)
    assert code is EndStatus.ALREADY_ENDED and "already committed" in str(remark)
    code, remark = env.end(where, EndState.ROLLBACK)
    assert code is EndStatus.CONFLICT and "already committed" in str(remark)
    code, remark = env.end(other, EndState.COMMIT, group="someone-else")
    assert code is EndStatus.NO_HALF_MESSAGE and "tx-group" in str(remark)
    code, remark = env.end((other[0] + 5, other[1]), EndState.COMMIT)
    assert code is EndStatus.NO_HALF_MESSAGE and "queue offset" in str(remark)
    code, remark = env.end((0, 10**9), EndState.COMMIT)
    assert code is EndStatus.NO_HALF_MESSAGE and "no half message" in str(remark)
    # the commit-log offset of a message that is not a half message
    (committed,) = env.messages(TOPIC)
    code, _ = env.end((committed.queue_offset, committed.commit_log_offset), EndState.COMMIT)
    assert code is EndStatus.NO_HALF_MESSAGE
    assert env.delivered() == [b"a"]
    assert len(env.messages(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0)) == 1


def test_young_half_messages_are_not_checked(env: Env) -> None:
    env.prepare(b"a")
    env.now += 5999
    assert env.check_pass().checked == 0 and env.asked == []
    env.now += 1
    assert env.check_pass().checked == 1
    (req,) = env.asked
    assert req.group == GROUP
    msg = decode_record(req.body)
    assert msg.topic == TOPIC and msg.queue_id == 1 and msg.body == b"a"
    # the producer is asked about the half message itself: no copy is written,
    # the check is counted in memory and the consume offset stays on it
    (half,) = env.messages(RMQ_SYS_TRANS_HALF_TOPIC, 0)
    assert req.header.tran_state_table_offset == 0
    assert req.header.commit_log_offset == half.commit_log_offset
    assert env.svc.known[0].times == 1
    assert env.offsets.query_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_HALF_TOPIC, 0) == 0


def test_check_answer_commits_once_whichever_copy_it_names(env: Env) -> None:
    first = env.prepare(b"a")
    env.now += 10_000
    env.check_pass()
    (req,) = env.asked
    copy = (req.header.tran_state_table_offset, req.header.commit_log_offset)
    assert env.end(copy, EndState.COMMIT, check=True)[0] is EndStatus.ENDED
    # the producer's own end arrives late and names the first copy
    code, remark = env.end(first, EndState.COMMIT)
    assert code is EndStatus.ALREADY_ENDED and "already" in str(remark)
    env.now += 10_000
    assert env.check_pass().checked == 0
    assert env.delivered() == [b"a"]


def test_a_late_end_for_an_old_copy_ends_the_newest(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transaction_service, "COMPACT_SLACK", 0)
    first = env.prepare(b"a")
    for i in range(3):  # ended ones behind the pending one: worth moving it
        env.end(env.prepare(f"e{i}".encode()), EndState.COMMIT)
    env.now += 10_000
    assert env.check_pass().copied == 1  # asked about it, then copied to 4; nobody answers
    assert env.end(first, EndState.ROLLBACK)[0] is EndStatus.ENDED
    op = env.messages(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0)[-1]
    assert op.body == b"4"  # the op names the newest copy, so the pass skips it
    env.now += 10_000
    assert env.check_pass().checked == 0
    assert env.delivered() == [b"e0", b"e1", b"e2"]


def test_unknown_forever_is_discarded_after_check_max(env: Env) -> None:
    where = env.prepare(b"u")
    for _ in range(3):
        env.now += 60_000
        assert env.check_pass().checked == 1
    env.now += 60_000
    report = env.check_pass()
    assert report.discarded == 1 and report.checked == 0
    assert len(env.asked) == 3
    (kept,) = env.messages(TRANS_CHECK_MAX_TIME_TOPIC, 0)
    assert kept.body == b"u" and kept.properties[CHECK_TIMES] == "3"
    assert env.topics.get(TRANS_CHECK_MAX_TIME_TOPIC) is not None
    code, _ = env.end(where, EndState.COMMIT)
    assert code is EndStatus.NOT_PENDING
    env.now += 60_000
    assert env.check_pass().checked == 0
    assert env.delivered() == []


def test_no_live_producer_still_counts_a_check(env: Env) -> None:
    env.producer_online = False
    env.prepare(b"a")
    env.now += 10_000
    report = env.check_pass()
    assert report.checked == 1 and report.no_producer == 1


def test_check_immunity_leaves_the_message_unchecked_in_place(env: Env) -> None:
    env.prepare(b"slow", props={"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"})
    env.prepare(b"fast")
    env.now += 10_000
    report = env.check_pass()
    assert [decode_record(r.body).body for r in env.asked] == [b"fast"]
    assert report.checked == 1 and report.copied == 0
    assert len(env.messages(RMQ_SYS_TRANS_HALF_TOPIC, 0)) == 2  # nothing written
    env.now += 60_000
    env.check_pass()
    assert sorted(decode_record(r.body).body for r in env.asked) == [b"fast", b"fast", b"slow"]


@pytest.mark.parametrize("persist_offsets", [True, False])
def test_restart_keeps_pending_and_ended_transactions(env: Env, persist_offsets: bool) -> None:
    states = [EndState.COMMIT, EndState.ROLLBACK, None] * 10
    places = [env.prepare(f"m{i}".encode()) for i in range(len(states))]
    for where, state in zip(places, states, strict=True):
        if state is not None:
            env.end(where, state)
    env.now += 10_000
    env.check_pass()  # the 10 unknown ones are asked about
    asked = [decode_record(r.body).body for r in env.asked]
    assert len(asked) == 10
    env.restart(persist_offsets=persist_offsets)  # without: the offsets rewind to 0
    # repeats change nothing: remembered (at or past the first pending one, where
    # the consume offset stopped, or all when the offsets rewound: the op records
    # are read back) they are acknowledged, forgotten (passed) they are refused
    for i, (where, state) in enumerate(zip(places, states, strict=True)):
        if state is not None:
            forgotten = persist_offsets and i < states.index(None)
            repeat = EndStatus.NOT_PENDING if forgotten else EndStatus.ALREADY_ENDED
            assert env.end(where, state)[0] is repeat
    env.asked.clear()
    env.now += 10_000
    env.check_pass()
    # each unknown transaction asked about once more (its newest copy), no ended one
    assert sorted(decode_record(r.body).body for r in env.asked) == sorted(asked)
    for req in env.asked:
        where = (req.header.tran_state_table_offset, req.header.commit_log_offset)
        assert env.end(where, EndState.COMMIT, check=True)[0] is EndStatus.ENDED
    expected = [f"m{i}".encode() for i, s in enumerate(states) if s is not EndState.ROLLBACK]
    assert sorted(env.delivered()) == sorted(expected)
    env.restart()
    env.now += 10_000
    env.asked.clear()
    env.check_pass()
    assert env.asked == []
    assert sorted(env.delivered()) == sorted(expected)


def test_commit_and_op_record_are_one_write(env: Env) -> None:
    where = env.prepare(b"a")
    writes: list[list[MessageExtBrokerInner]] = []
    real = env.store.put_together

    def spy(msgs: list[MessageExtBrokerInner]) -> Any:
        writes.append(list(msgs))
        return real(msgs)

    env.store.put_together = spy  # type: ignore[method-assign]
    env.end(where, EndState.COMMIT)
    (write,) = writes
    assert [m.topic for m in write] == [TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC]
    # both landed back to back in the commit log
    (msg,) = env.messages(TOPIC)
    (op,) = env.messages(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0)
    assert op.commit_log_offset == msg.commit_log_offset + msg.store_size


def test_ops_are_passed_once_the_half_queue_is(env: Env) -> None:
    for i in range(5):
        env.end(env.prepare(f"m{i}".encode()), EndState.COMMIT)
    env.now += 10_000
    env.check_pass()
    assert env.svc.book.op_offset == 5 and env.svc.book.ended == {}
    assert env.offsets.query_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_OP_HALF_TOPIC, 0) == 5
    assert env.offsets.query_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_HALF_TOPIC, 0) == 5


async def test_check_service_runs_a_pass_every_interval(
        env: Env, autojump_clock: trio.testing.MockClock) -> None:
    env.config.transaction_check_interval = 60_000
    env.prepare(b"a", born=1)  # long past its timeout
    async with trio.open_nursery() as nursery:
        await nursery.start(env.svc.run, env.ask)
        await trio.sleep(59.9)
        assert env.svc.passes == 0 and env.asked == []
        await trio.sleep(0.2)
        assert env.svc.passes == 1 and len(env.asked) == 1
        await trio.sleep(60 * 3)
        assert env.svc.passes == 4 and len(env.asked) == 3  # then discarded (check max 3)
        assert env.svc.discarded == 1
        nursery.cancel_scope.cancel()


def test_a_pass_does_not_read_half_messages_known_to_have_ended(env: Env) -> None:
    for i in range(50):
        env.end(env.prepare(f"m{i}".encode()), EndState.COMMIT)
    env.prepare(b"open")
    reads: list[int] = []
    real = env.store.look_message_by_offset

    def counting(offset: int) -> MessageExt | None:
        reads.append(offset)
        return real(offset)

    env.store.look_message_by_offset = counting  # type: ignore[method-assign,assignment]
    env.now += 10_000
    report = env.check_pass()
    assert report.skipped == 50 and report.checked == 1
    assert len(reads) == 1  # the open one, once (no copy is written)
    reads.clear()
    env.now += 10_000
    assert env.check_pass().checked == 1
    assert len(reads) == 1  # read again only to be sent


# ---- issue 48: no re-append of unchanged half messages, bounded pending ---------------------


def test_check_passes_do_not_write_pending_half_messages_again(env: Env) -> None:
    env.config.transaction_check_max = 5
    body = b"x" * 1500  # (the store of these tests takes messages up to 2 KiB)
    for i in range(20):
        env.prepare(body, props={"UNIQ_KEY": f"u{i}"})
    end = env.store.get_max_phy_offset()
    for n in range(1, 6):
        env.now += 60_000
        report = env.check_pass()
        # every pending transaction is asked about at every pass ...
        assert report.checked == 20 and report.copied == 0
        assert len(env.asked) == 20 * n
        # ... and the commit log does not grow: nothing is written again
        assert env.store.get_max_phy_offset() == end
    env.now += 60_000
    assert env.check_pass().discarded == 20  # then given up as before (transactionCheckMax)
    assert env.svc.book.pending == {} and env.svc.known == {}
    kept = env.messages(TRANS_CHECK_MAX_TIME_TOPIC, 0)
    assert len(kept) == 20 and {m.properties[CHECK_TIMES] for m in kept} == {"5"}


def test_a_producer_that_reads_nothing_is_asked_again_without_counting(env: Env) -> None:
    where = env.prepare(b"a")
    env.producer_busy = True
    for _ in range(5):  # more passes than transactionCheckMax (3): not discarded
        env.now += 60_000
        report = env.check_pass()
        assert report.busy == 1 and report.checked == 0 and report.discarded == 0
    assert env.svc.checks_dropped == 5 and env.svc.known[where[0]].times == 0
    env.producer_busy = False
    env.now += 60_000
    assert env.check_pass().checked == 1
    (req,) = env.asked
    assert env.end((req.header.tran_state_table_offset, req.header.commit_log_offset),
                   EndState.COMMIT, check=True)[0] is EndStatus.ENDED
    assert env.delivered() == [b"a"]


def test_pending_transactions_per_group_are_bounded(env: Env) -> None:
    env.config.transaction_max_pending_per_group = 3
    places = [env.prepare(f"p{i}".encode()) for i in range(3)]
    remark = env.svc.pending_refusal(GROUP)
    assert remark is not None
    assert "transactionMaxPendingPerGroup=3" in remark and GROUP in remark
    assert env.svc.pending_refusal("another-group") is None
    env.end(places[0], EndState.ROLLBACK)
    assert env.svc.pending_refusal(GROUP) is None
    env.prepare(b"p3")
    env.restart()  # the count is rebuilt from the half queue
    env.config.transaction_max_pending_per_group = 3
    assert env.svc.book.pending_in(GROUP) == 3 and env.svc.pending_refusal(GROUP) is not None
    env.config.transaction_check_max = 1
    env.now += 60_000
    env.check_pass()  # checked once ...
    env.now += 60_000
    assert env.check_pass().discarded == 3  # ... then discarded: no longer counted
    assert env.svc.book.pending_in(GROUP) == 0 and env.svc.refused_busy == 1


def test_pending_ones_are_copied_only_when_ended_ones_pile_up_behind_them(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transaction_service, "COMPACT_SLACK", 4)
    env.config.transaction_check_max = 10
    for i in range(3):
        env.prepare(f"open{i}".encode())
    env.now += 60_000
    assert env.check_pass().copied == 0  # only pending ones: nothing to gain
    for i in range(20):
        env.end(env.prepare(f"m{i}".encode()), EndState.COMMIT)
    env.now += 60_000
    report = env.check_pass()
    assert report.checked == 3 and report.copied == 3  # 23 > 2 * 3 + 4
    book = env.svc.book
    assert book.half_offset == 23 and book.ended == {} and book.op_offset == 20
    copies = env.messages(RMQ_SYS_TRANS_HALF_TOPIC, 0)[23:]
    assert [m.properties[CHECK_TIMES] for m in copies] == ["2", "2", "2"]  # counts kept
    end = env.store.get_max_phy_offset()
    for _ in range(3):
        env.now += 60_000
        report = env.check_pass()
        assert report.checked == 3 and report.copied == 0
    assert env.store.get_max_phy_offset() == end
    # a restart counts on from the copies' count (5 checks so far, 2 recorded)
    env.restart()
    env.now += 60_000
    env.check_pass()
    assert {p.times for p in env.svc.known.values()} == {3}


def test_book_counts_pending_transactions_per_group() -> None:
    book = TransactionBook()
    book.half_stored(0, 0, "a")
    book.half_stored(1, 1, "a")
    book.half_stored(2, 2, "b")
    book.half_stored(3, 0, "a")  # a copy: the same transaction
    assert book.pending_in("a") == 2 and book.pending_in("b") == 1
    book.end(0, EndState.COMMIT, op_offset=0)
    book.discard(2)
    assert book.pending_in("a") == 1 and book.pending_in("b") == 0 and book.per_group == {"a": 1}
    book.advance(4)  # transaction 1's only copy is behind: dropped
    assert book.pending == {} and book.per_group == {}
