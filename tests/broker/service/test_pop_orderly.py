"""Orderly POP (FIFO groups) in process: PopService over a real store in a temp dir
with the real table and codec (tests/broker/service/test_pop.py's fakes); time is a
number passed in; recovery replays the journal's frames (every prefix: a crash
point) into a fresh service. The pure rules (broker/service/pop_orderly.py) and
the table's orderly records are tested apart."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker.pop.core import EntryError, HandleCodec, Inflight, PopTable, pop_entry
from broker.pop_processor import send_back_reviver
from broker.service.pop import PopOutcome, PopService, PopStatus, ReviveResult
from broker.service.pop_orderly import plan_batch, redelivered, with_reconsume_times
from broker.service.send import SendOutcome, SendStatus
from broker.store import DefaultMessageStore
from broker.store.pop_log import decode_frames
from protocol.headers import ConsumerSendMsgBackRequestHeader
from protocol.record import decode_record
from protocol.route import TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig
from tests.broker.service.test_pop import (
    GROUP,
    RETRY,
    TOPIC,
    Groups,
    Offsets,
    Role,
    Settings,
    Topics,
    req,
)
from tests.broker.store.helpers import inner, make_config, open_store

INV = 10_000


@dataclass
class Fifo:
    store: DefaultMessageStore
    groups: Groups
    topics: Topics
    offsets: Offsets
    svc: PopService
    dead: list[int] = field(default_factory=list)  # queue offsets dead-lettered
    later: bool = False
    unblocked: list[str] = field(default_factory=list)

    def put(self, n: int, queue_id: int = 0, start: int = 0) -> None:
        for i in range(start, start + n):
            assert self.store.put_message(inner(TOPIC, queue_id, f"q{queue_id}-{i}".encode(),
                                                tags="A")).ok

    def dead_letter(self, rec: Inflight) -> ReviveResult:
        if self.later:
            return ReviveResult.LATER
        self.dead.append(rec.queue_offset)
        return ReviveResult.DONE

    def service(self, offsets: Offsets | None = None) -> PopService:
        """A fresh service over the same store and groups (a restart); the same
        consumer offsets unless given others."""
        svc = PopService(Settings(), Role(), self.groups, self.topics, self.store,
                         self.offsets if offsets is None else offsets,
                         PopTable(max_per_group=64, max_total=128),
                         HandleCodec(b"k" * 32, "b"), lambda rec: ReviveResult.DONE,
                         dead_letter=self.dead_letter)
        svc.on_unblocked = self.unblocked.append
        return svc


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Fifo]:
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=100))
    groups = Groups({GROUP: SubscriptionGroupConfig(GROUP, retry_max_times=2,
                                                    consume_message_orderly=True)})
    f = Fifo(store, groups, Topics({TOPIC: TopicConfig(TOPIC, 2, 2)}), Offsets(),
             None)  # type: ignore[arg-type]
    f.svc = f.service()
    yield f
    store.shutdown()


def offsets_of(out: PopOutcome) -> list[tuple[int, int]]:
    return [(m.queue_id, m.queue_offset) for m in out.messages]


def committed(f: Fifo, queue_id: int = 0) -> int:
    return f.offsets.table.get((GROUP, TOPIC, queue_id), -1)


def test_a_popped_queue_is_blocked_until_its_batch_is_acked(fifo: Fifo) -> None:
    fifo.put(4, queue_id=0)
    fifo.put(2, queue_id=1)
    first = fifo.svc.pop(req(2, INV, queue_id=0), 0)
    assert offsets_of(first) == [(0, 0), (0, 1)]
    # queue 0 is blocked for the group; queue 1 still serves
    assert fifo.svc.pop(req(32, INV, queue_id=0), 1).status is PopStatus.NO_MESSAGE
    other = fifo.svc.pop(req(32, INV), 2)
    assert offsets_of(other) == [(1, 0), (1, 1)]
    blocked = fifo.svc.pop(req(32, INV), 3)
    assert blocked.status is PopStatus.NO_MESSAGE and blocked.wake_ms == INV
    assert fifo.svc.ack(GROUP, TOPIC, first.messages[0].handle).status is PopStatus.OK
    assert fifo.unblocked == []
    assert fifo.svc.pop(req(32, INV, queue_id=0), 4).status is PopStatus.NO_MESSAGE
    assert fifo.svc.ack(GROUP, TOPIC, first.messages[1].handle).status is PopStatus.OK
    assert fifo.unblocked == [TOPIC]  # held pops look again
    assert committed(fifo) == 2
    after = fifo.svc.pop(req(32, INV, queue_id=0), 5)
    assert offsets_of(after) == [(0, 2), (0, 3)]
    assert [m.attempt for m in after.messages] == [1, 1]


def test_expiry_redelivers_the_same_offsets_in_order_with_one_more_attempt(
        fifo: Fifo) -> None:
    fifo.put(3)
    first = fifo.svc.pop(req(32, INV, queue_id=0), 0)
    assert offsets_of(first) == [(0, 0), (0, 1), (0, 2)]
    assert fifo.svc.pop(req(32, INV, queue_id=0), INV - 1).status is PopStatus.NO_MESSAGE
    # never revived to %RETRY%: the revive loop leaves orderly records alone
    assert fifo.svc.revive_due(10 * INV) == 0 and RETRY not in fifo.topics.table
    fifo.put(2, start=3)  # newer messages wait behind the batch
    again = fifo.svc.pop(req(32, INV, queue_id=0), INV)
    assert offsets_of(again) == [(0, 0), (0, 1), (0, 2)]
    assert [m.attempt for m in again.messages] == [2, 2, 2]
    assert [decode_record(m.record).body for m in again.messages] == [b"q0-0", b"q0-1",
                                                                      b"q0-2"]
    assert [decode_record(m.record).reconsume_times for m in again.messages] == [1, 1, 1]
    # the first delivery's handles are spent
    stale = fifo.svc.ack(GROUP, TOPIC, first.messages[0].handle)
    assert stale.status is PopStatus.INVALID_RECEIPT_HANDLE
    third = fifo.svc.pop(req(32, INV, queue_id=0), 2 * INV)
    assert [m.attempt for m in third.messages] == [3, 3, 3]
    for m in third.messages:
        assert fifo.svc.ack(GROUP, TOPIC, m.handle).status is PopStatus.OK
    assert offsets_of(fifo.svc.pop(req(32, INV, queue_id=0), 2 * INV)) == [(0, 3), (0, 4)]


def test_a_partial_ack_commits_only_the_acked_prefix_and_the_rest_comes_again(
        fifo: Fifo) -> None:
    fifo.put(4)
    first = fifo.svc.pop(req(3, INV, queue_id=0), 0)
    m0, m1, m2 = first.messages
    assert fifo.svc.ack(GROUP, TOPIC, m1.handle).status is PopStatus.OK  # not the first
    assert committed(fifo) == 0
    assert fifo.svc.ack(GROUP, TOPIC, m0.handle).status is PopStatus.OK
    assert committed(fifo) == 2
    again = fifo.svc.pop(req(32, INV, queue_id=0), INV)
    assert offsets_of(again) == [(0, 2)] and again.messages[0].attempt == 2
    assert fifo.svc.ack(GROUP, TOPIC, again.messages[0].handle).status is PopStatus.OK
    assert committed(fifo) == 3
    assert offsets_of(fifo.svc.pop(req(32, INV, queue_id=0), INV)) == [(0, 3)]
    del m2


def test_change_invisible_extends_the_block(fifo: Fifo) -> None:
    fifo.put(2)
    first = fifo.svc.pop(req(32, INV, queue_id=0), 0)
    changed = fifo.svc.change_invisible(GROUP, TOPIC, first.messages[1].handle, 30_000, 5_000)
    assert changed.status is PopStatus.OK
    blocked = fifo.svc.pop(req(32, INV, queue_id=0), 15_000)
    assert blocked.status is PopStatus.NO_MESSAGE and blocked.wake_ms == 35_000
    again = fifo.svc.pop(req(32, INV, queue_id=0), 35_000)
    assert offsets_of(again) == [(0, 0), (0, 1)] and [m.attempt for m in again.messages] == [2, 2]


def test_past_its_attempts_a_message_is_dead_lettered_and_the_queue_moves_on(
        fifo: Fifo) -> None:
    fifo.put(2)
    now = 0
    for attempt in (1, 2, 3):  # retryMaxTimes 2: three deliveries
        out = fifo.svc.pop(req(32, INV, queue_id=0), now)
        assert offsets_of(out) == [(0, 0), (0, 1)]
        assert [m.attempt for m in out.messages] == [attempt, attempt]
        if attempt == 3:
            assert fifo.svc.ack(GROUP, TOPIC, out.messages[1].handle).status is PopStatus.OK
        now += INV
    fifo.later = True  # the DLQ refuses for now: nothing passes the message
    late = fifo.svc.pop(req(32, INV, queue_id=0), now)
    assert late.status is PopStatus.NO_MESSAGE and late.wake_ms is not None
    fifo.later = False
    fifo.put(1, start=2)
    out = fifo.svc.pop(req(32, INV, queue_id=0), now)
    assert fifo.dead == [0] and fifo.svc.dead_lettered == 1
    assert offsets_of(out) == [(0, 2)] and out.messages[0].attempt == 1
    assert committed(fifo) == 2


def test_a_pop_with_order_is_orderly_for_any_group(fifo: Fifo) -> None:
    fifo.groups.table[GROUP] = SubscriptionGroupConfig(GROUP)
    assert not fifo.svc.is_orderly(GROUP)
    fifo.put(2)
    first = fifo.svc.pop(req(1, INV, queue_id=0, order=True), 0)
    assert offsets_of(first) == [(0, 0)]
    assert fifo.svc.pop(req(1, INV, queue_id=0, order=True), 1).status is PopStatus.NO_MESSAGE
    # a plain pop of the group also waits for the queue's orderly batch to end
    assert fifo.svc.pop(req(1, INV, queue_id=0), 2).status is PopStatus.NO_MESSAGE


def journal_entries(svc: PopService) -> list[dict[str, object]]:
    data, _ = svc.journal.take()
    entries, end = decode_frames(data)
    assert end == len(data)
    return entries  # type: ignore[return-value]


def test_restart_keeps_the_block_and_the_attempts(fifo: Fifo) -> None:
    fifo.put(3)
    fifo.svc.pop(req(32, INV, queue_id=0), 0)
    again = fifo.svc.pop(req(32, INV, queue_id=0), INV)
    assert fifo.svc.ack(GROUP, TOPIC, again.messages[0].handle).status is PopStatus.OK
    entries = journal_entries(fifo.svc)
    for rebuilt in (entries, None):  # the log as written, and its checkpoint
        svc = fifo.service()
        if rebuilt is None:
            first = fifo.service()
            first.recover(entries)  # type: ignore[arg-type]
            svc.recover(first.table.snapshot())
        else:
            svc.recover(rebuilt)  # type: ignore[arg-type]
        assert svc.pop(req(32, INV, queue_id=0), 2 * INV - 1).status is PopStatus.NO_MESSAGE
        out = svc.pop(req(32, INV, queue_id=0), 2 * INV)
        assert offsets_of(out) == [(0, 1), (0, 2)]
        assert [m.attempt for m in out.messages] == [3, 3]  # not reset below what was delivered


def test_every_crash_point_keeps_order_and_skips_nothing(fifo: Fifo) -> None:
    fifo.put(6)
    now = 0
    first = fifo.svc.pop(req(3, INV, queue_id=0), now)
    fifo.svc.ack(GROUP, TOPIC, first.messages[0].handle)
    now += INV
    again = fifo.svc.pop(req(3, INV, queue_id=0), now)
    fifo.svc.change_invisible(GROUP, TOPIC, again.messages[0].handle, INV, now)
    for m in again.messages[1:]:
        fifo.svc.ack(GROUP, TOPIC, m.handle)
    now += 2 * INV
    third = fifo.svc.pop(req(3, INV, queue_id=0), now)
    fifo.svc.ack(GROUP, TOPIC, third.messages[0].handle)
    entries = journal_entries(fifo.svc)
    delivered: dict[int, int] = {}  # offset -> highest attempt delivered by then
    for cut in range(len(entries) + 1):
        fifo.dead.clear()
        svc = fifo.service(Offsets())  # what the log had told the offset table
        svc.recover(entries[:cut])  # type: ignore[arg-type]
        for key, rec in svc.table.records.items():
            assert rec.attempt >= delivered.get(key[3], 0) or cut == 0
        popped_to = svc.table.offset(GROUP, TOPIC, 0) or 0
        # what is not acked by then: in flight, or never popped
        owed = [o for o in range(6)
                if o >= popped_to or (GROUP, TOPIC, 0, o) in svc.table.records]
        seen: list[int] = []
        t = now + 10 * INV
        for _ in range(20):  # drain: pop late, ack all
            out = svc.pop(req(32, INV, queue_id=0), t)
            if out.status is not PopStatus.FOUND:
                break
            seen += [m.queue_offset for m in out.messages]
            for m in out.messages:
                assert svc.ack(GROUP, TOPIC, m.handle).status is PopStatus.OK
        # in order, nothing skipped (a message past its attempts: to the DLQ)
        assert sorted(seen) == seen and sorted(seen + fifo.dead) == owed, (cut, seen)
        if cut < len(entries):
            entry = entries[cut]
            if entry["k"] == "pop":
                for row in entry["r"]:  # type: ignore[union-attr]
                    delivered[row[0]] = max(delivered.get(row[0], 0), row[3])


# ---- the pure rules and the table -----------------------------------------------------


def rec(offset: int, visible_at: int, attempt: int = 1) -> Inflight:
    return Inflight(GROUP, TOPIC, 0, offset, 100 + offset, visible_at, attempt, 0, 0, True)


def test_plan_batch_blocks_while_any_is_invisible_and_splits_dead_letters() -> None:
    assert plan_batch([rec(0, 5), rec(1, 9)], 8, 2, 32).blocked_until_ms == 9
    plan = plan_batch([rec(0, 5, 3), rec(1, 5, 1), rec(2, 5, 2), rec(3, 5)], 5, 2, 2)
    assert plan.blocked_until_ms is None
    assert [r.queue_offset for r in plan.dead] == [0]
    assert [r.queue_offset for r in plan.again] == [1, 2]
    again = redelivered(rec(4, 5, 2), 100, 50)
    assert (again.attempt, again.visible_at_ms, again.pop_time_ms, again.gen,
            again.orderly) == (3, 150, 100, 1, True)


def test_with_reconsume_times_patches_only_that_field(fifo: Fifo) -> None:
    fifo.put(1)
    out = fifo.svc.pop(req(1, INV, queue_id=0), 0)
    raw = out.messages[0].record
    patched = with_reconsume_times(raw, 7)
    assert decode_record(patched).reconsume_times == 7
    assert decode_record(patched).body == decode_record(raw).body and len(patched) == len(raw)
    with pytest.raises(ValueError):
        with_reconsume_times(b"short", 1)


def test_table_keeps_orderly_records_off_the_revive_heap_and_checkpoints_them() -> None:
    table = PopTable(10, 10)
    table.apply(pop_entry(GROUP, TOPIC, 0, 2, [rec(0, 5), rec(1, 5)], orderly=True))
    table.apply(pop_entry(GROUP, TOPIC, 1, 1,
                          [Inflight(GROUP, TOPIC, 1, 0, 9, 5, 1, 0)]))
    assert [r.queue_offset for r in table.due(100, 10)] == [0]  # the plain one only
    assert table.due(100, 10)[0].queue_id == 1
    assert [r.queue_offset for r in table.orderly_batch(GROUP, TOPIC, 0)] == [0, 1]
    again = PopTable(10, 10)
    for entry in table.snapshot():
        again.apply(entry)
    assert [r.queue_offset for r in again.orderly_batch(GROUP, TOPIC, 0)] == [0, 1]
    assert again.orderly_batch(GROUP, TOPIC, 1) == [] and again.offset(GROUP, TOPIC, 0) == 2
    again.apply({"k": "ack", "g": GROUP, "t": TOPIC, "q": 0, "o": 0})
    assert [r.queue_offset for r in again.orderly_batch(GROUP, TOPIC, 0)] == [1]
    old = pop_entry(GROUP, TOPIC, 3, 1, [Inflight(GROUP, TOPIC, 3, 0, 9, 5, 1, 0)])
    assert "ord" not in old  # logs written before orderly records load as plain ones
    bad = dict(old, ord=2)
    with pytest.raises(EntryError):
        PopTable(10, 10).apply(bad)


def test_the_brokers_dead_letter_reviver_asks_send_back_for_the_dlq() -> None:
    asked: list[tuple[ConsumerSendMsgBackRequestHeader, bool]] = []
    answer = [SendOutcome(SendStatus.OK)]

    def send_back(h: ConsumerSendMsgBackRequestHeader, *, immediate: bool) -> SendOutcome:
        asked.append((h, immediate))
        return answer[0]

    dead = send_back_reviver(send_back, lambda off: off != 999, dead_letter=True)
    retry = send_back_reviver(send_back, lambda off: True)
    assert dead(rec(0, 5)) is ReviveResult.DONE and retry(rec(0, 5)) is ReviveResult.DONE
    assert [(h.delay_level, h.offset, h.group, now) for h, now in asked] == [
        (-1, 100, GROUP, True), (0, 100, GROUP, True)]  # a negative level: %DLQ%
    answer[0] = SendOutcome(SendStatus.BUSY)
    assert dead(rec(0, 5)) is ReviveResult.LATER
    gone = Inflight(GROUP, TOPIC, 0, 1, 999, 5, 3, 0, 0, True)
    assert dead(gone) is ReviveResult.GONE


def test_a_group_at_its_in_flight_bound_still_gets_its_batches_again(fifo: Fifo) -> None:
    fifo.svc.table.max_per_group = 2
    fifo.put(3)
    first = fifo.svc.pop(req(32, INV, queue_id=0), 0)
    assert offsets_of(first) == [(0, 0), (0, 1)]  # the bound: two in flight
    assert fifo.svc.pop(req(32, INV), 1).status is PopStatus.BUSY
    again = fifo.svc.pop(req(32, INV), INV)  # no new record: not refused BUSY
    assert offsets_of(again) == [(0, 0), (0, 1)] and again.messages[0].attempt == 2
