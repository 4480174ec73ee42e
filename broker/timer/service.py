"""TimerService: timer messages in from ``rmq_sys_wheel_timer``, out to their topic when due.

A send with a timer is stored in the timer topic's queue 0 (acknowledged like
any send) with its real topic and queue in ``REAL_TOPIC``/``REAL_QID`` and its
due time in ``TIMER_OUT_MS``. This service, on a master only:

- *enqueue*: reads that consume queue from ``cq_offset``, appends one record
  per message to the timer log (``timer_log.py``) and into the wheel's slot
  (``wheel.py``); a recall marker (``TIMER_DEL_UNIQKEY``) becomes a record too;
- *deliver*: takes the due entries of the wheel in bounded batches, re-reads
  each message, puts it to its real topic (unique key kept, timer properties
  cleaned: ``message_rewrite.from_timer``) and yields to the event loop between
  batches, so sends are not stalled by a burst;
- *checkpoint*: every second the state of a second ago (``stage``: once the
  commit log is flushed past what it covers) is written: the log fsynced and
  the checkpoint (consume-queue offset, records, delivery cursor) replaced
  atomically, in a worker thread; segments behind the cursor are deleted. At a
  clean stop the present state is written.

After a kill -9 the wheel is rebuilt from the log up to the checkpoint and the
consume queue past it: nothing stored is lost; what was delivered after the
last checkpoint is delivered once more. After a clean shutdown nothing is
delivered twice (the shutdown checkpoint holds the exact cursor).

A due message whose re-put fails for a transient reason (store busy, disk
full) goes back into the wheel one precision later (a new log record); a
message that can never be delivered (no real topic, unreadable) is dropped
with a logged reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import structlog
import trio

from broker.config import BrokerConfig
from broker.message_rewrite import (
    PutOutcome,
    RewriteError,
    classify_put_status,
    from_timer,
    timer_recall_marker,
)
from broker.stats import LatencyHistogram
from broker.store import DefaultMessageStore, MessageExtBrokerInner, PutMessageStatus
from broker.timer.rules import DEL_UNIQKEY, OUT_MS
from broker.timer.timer_log import TimerCheckpoint, TimerLog
from broker.timer.wheel import DueEntry, Kind, TimerRecord, TimerWheel, key_hash
from protocol.message import PROPERTY_UNIQ_KEY
from protocol.names import RMQ_SYS_WHEEL_TIMER
from protocol.recall_handle import parse_handle
from protocol.trio.files import write_atomically
from protocol.trio.service import Guard, describe

ENQUEUE_BATCH = 64  # consume-queue entries moved into the wheel per step
DELIVER_BATCH = 64  # due messages re-put per step; the loop yields between steps
PUT_TOGETHER_BYTES = 1 << 20  # due messages re-put in one append, at most
TICK_S = 0.1  # how often new timer messages are looked for when nothing is due
CHECKPOINT_EVERY_S = 1.0
# a promoted slave delivers again what its old master delivered this long before
# the last checkpoint it copied (slave sync every 10 s, checkpoint lag ~2 s)
FOLLOW_MARGIN_MS = 60_000
RECALL_ENQUEUE_STEPS = 4  # batches of ENQUEUE_BATCH * 16 a recall moves in before it looks
# lateness buckets (seconds): delivered time minus due time
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


def _chunks(ready: list[tuple[DueEntry, MessageExtBrokerInner]]
            ) -> list[list[tuple[DueEntry, MessageExtBrokerInner]]]:
    """Consecutive groups of at most PUT_TOGETHER_BYTES (one message alone when larger)."""
    out: list[list[tuple[DueEntry, MessageExtBrokerInner]]] = []
    size = PUT_TOGETHER_BYTES
    for item in ready:
        if size + item[0].size > PUT_TOGETHER_BYTES:
            out.append([])
            size = 0
        out[-1].append(item)
        size += item[0].size
    return out


def _unlink_all(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _wall_ms() -> int:
    return int(time.time() * 1000)


class RecallStatus(Enum):
    """How a recall ended (each transport maps it to its code by one table)."""

    OK = "ok"
    NOT_FOUND = "not found"  # unknown, delivered already, or recalled already
    ILLEGAL = "illegal"  # a handle that is no handle, of another topic or broker
    BUSY = "busy"  # too many stored timer messages not yet in the wheel: try again
    OFF = "off"  # not a master's running timer


@dataclass(frozen=True, slots=True)
class RecallOutcome:
    status: RecallStatus
    remark: str = ""


class TimerService:
    def __init__(self, config: BrokerConfig, store: DefaultMessageStore,
                 now_ms: Callable[[], int] = _wall_ms) -> None:
        self.config = config
        self.store = store
        self.now_ms = now_ms
        self.precision_ms = config.timer_precision_ms
        self.log_files = TimerLog(config.store_path("timer"))
        self.wheel = TimerWheel(self.precision_ms)
        self.cq_offset = 0
        self.running = False
        self.delivered = 0
        self.dropped = 0
        self.retried = 0
        self.lateness = LatencyHistogram(LATENESS_BUCKETS)
        self.lateness_max_ms = 0
        self.last_checkpoint = TimerCheckpoint()
        self._moved = self._taken = 0
        # a slave: its master's last checkpoint (slave_synchronize), kept in
        # timer/master_checkpoint.json; a slave that becomes master with no
        # checkpoint of its own skips what that master had delivered
        self.master_path = config.store_path("timer", "master_checkpoint.json")
        self.master_checkpoint: TimerCheckpoint | None = None
        self._follow: tuple[int, int] | None = None  # (cq offset, due before): delivered
        self.skipped_as_delivered = 0
        self._staged: tuple[TimerCheckpoint, int] | None = None  # and the log offset it needs
        self.log = structlog.get_logger("broker.timer").bind(broker=config.broker_name)
        self.guard = Guard(self.log, "timer")

    # ---- load --------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuild the wheel from the log and the checkpoint (blocking, at start)."""
        started = time.monotonic()
        cp, records = self.log_files.load()
        wheel = TimerWheel(self.precision_ms, cp.done_slot, cp.done_index)
        wheel.replay(records)
        self.wheel = wheel
        self.cq_offset = cp.cq_offset
        self.last_checkpoint = cp
        try:
            self.master_checkpoint = TimerCheckpoint.decode(self.master_path.read_bytes())
        except FileNotFoundError:
            self.master_checkpoint = None
        except ValueError as exc:
            self.log.warning("master's timer checkpoint unreadable, ignored", error=str(exc))
            self.master_checkpoint = None
        self.log.info("timer wheel loaded", pending=wheel.pending, records=self.log_files.records,
                      cq_offset=cp.cq_offset, done_slot=cp.done_slot,
                      seconds=round(time.monotonic() - started, 3))

    # ---- enqueue (synchronous) ---------------------------------------------------------

    def backlog(self) -> int:
        """Timer-topic entries not yet moved into the wheel."""
        return max(0, self.store.get_max_offset_in_queue(RMQ_SYS_WHEEL_TIMER, 0) - self.cq_offset)

    def enqueue(self, limit: int = ENQUEUE_BATCH) -> int:
        """Move up to ``limit`` consume-queue entries into the log and wheel."""
        cq = self.store.consume_queue_table.get(RMQ_SYS_WHEEL_TIMER, {}).get(0)
        if cq is None:
            return 0
        start = max(self.cq_offset, self.store.get_min_offset_in_queue(RMQ_SYS_WHEEL_TIMER, 0))
        entries = cq.get_entries(start, limit)
        if not entries:
            if start != self.cq_offset:
                self.cq_offset = start
            return 0
        records = []
        for i, (phys, size, _tag) in enumerate(entries):
            record = self._record_of(phys, size, start + i)
            if record is not None:
                records.append(record)
        self.log_files.append(records)
        wheel = self.wheel
        for record in records:
            wheel.add(record)
        self.cq_offset = start + len(entries)
        return len(entries)

    def _record_of(self, phys: int, size: int, cq_offset: int) -> TimerRecord | None:
        msg = self.store.look_message_by_offset(phys)
        if msg is None:
            self.dropped += 1
            self.guard.note("timer message unreadable, dropped", key=("unreadable",),
                            commit_log_offset=phys)
            return None
        props = msg.properties
        raw = props.get(OUT_MS, "")
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
            self.dropped += 1
            self.guard.note("timer message without a due time, dropped", key=("no-due",),
                            commit_log_offset=phys, msg_id=msg.msg_id)
            return None
        due = int(raw)
        follow = self._follow
        if follow is not None and cq_offset < follow[0] and due < follow[1] \
                and msg.store_timestamp < follow[1]:
            self.skipped_as_delivered += 1  # the old master delivered it
            return None
        recall_key = props.get(DEL_UNIQKEY)
        if recall_key is not None:
            return TimerRecord(due, due, phys, key_hash(recall_key), size, Kind.RECALL)
        return TimerRecord(self.wheel.slot_of(due), due, phys,
                           key_hash(props.get(PROPERTY_UNIQ_KEY)), size)

    # ---- deliver (synchronous, time passed in) -----------------------------------------

    def deliver(self, now_ms: int, limit: int = DELIVER_BATCH) -> int:
        """Re-put up to ``limit`` due messages. Returns how many were taken.

        The due messages are re-put together (``put_together``: one append of
        up to PUT_TOGETHER_BYTES); when such a put is refused for a reason of
        one message, they go one by one so only that one is dropped."""
        due = self.wheel.take_due(now_ms, limit)
        ready: list[tuple[DueEntry, MessageExtBrokerInner]] = []
        for entry in due:
            inner = self._inner_of(entry.phys)
            if inner is not None:
                ready.append((entry, inner))
        again: list[TimerRecord] = []
        for chunk in _chunks(ready):
            for (entry, _), outcome in zip(chunk, self._put_all(chunk), strict=True):
                if outcome is PutOutcome.STORED:
                    self.delivered += 1
                    late = max(0, now_ms - entry.due_ms)
                    self.lateness.observe(late / 1000)
                    self.lateness_max_ms = max(self.lateness_max_ms, late)
                elif outcome is PutOutcome.TRANSIENT:
                    self.retried += 1
                    later = self.wheel.slot_of(now_ms + self.precision_ms)
                    again.append(TimerRecord(later, entry.due_ms, entry.phys, entry.key_hash,
                                             entry.size))
        if again:
            self.log_files.append(again)
            for record in again:
                self.wheel.add(record)
        return len(due)

    def _inner_of(self, phys: int) -> MessageExtBrokerInner | None:
        """The message to deliver for a due entry, or None (dropped, logged)."""
        try:
            msg = self.store.look_message_by_offset(phys)
        except Exception as exc:
            self._drop(phys, f"unreadable: {describe(exc)}")
            return None
        if msg is None:
            self._drop(phys, "unreadable (cleaned away or corrupt)")
            return None
        try:
            return from_timer(msg)
        except RewriteError as exc:
            self._drop(phys, str(exc))
            return None

    def _put_all(self, chunk: list[tuple[DueEntry, MessageExtBrokerInner]]) -> list[PutOutcome]:
        if len(chunk) > 1:
            try:
                result, _ = self.store.put_together([inner for _, inner in chunk])
            except Exception:
                result = None  # one by one says which
            if result is not None:
                outcome = classify_put_status(result.put_message_status)
                if outcome is PutOutcome.STORED:
                    return [outcome] * len(chunk)
                if outcome is PutOutcome.TRANSIENT:
                    self._note_transient(result.put_message_status, chunk[0][1].topic)
                    return [outcome] * len(chunk)
        return [self._put_one(entry.phys, inner) for entry, inner in chunk]

    def _put_one(self, phys: int, inner: MessageExtBrokerInner) -> PutOutcome:
        try:
            result = self.store.put_message(inner)
        except Exception as exc:
            return self._drop(phys, f"the store raised {describe(exc)}")
        outcome = classify_put_status(result.put_message_status)
        if outcome is PutOutcome.TRANSIENT:
            self._note_transient(result.put_message_status, inner.topic)
        elif outcome is PutOutcome.PERMANENT:
            return self._drop(phys, f"put status {result.put_message_status.value}")
        return outcome

    def _note_transient(self, status: PutMessageStatus, topic: str) -> None:
        self.guard.note("re-put of due timer messages failed, retrying later",
                        key=("transient", status), status=status.value, topic=topic)

    def _drop(self, phys: int, reason: str) -> PutOutcome:
        self.dropped += 1
        self.guard.note("due timer message dropped", key=("drop", reason[:60]),
                        log_level="error", commit_log_offset=phys, reason=reason)
        return PutOutcome.PERMANENT

    # ---- recall ------------------------------------------------------------------------

    def recall(self, uniq_key: str, slot_hint: int | None = None) -> RecallOutcome:
        """Cancel the pending timer message with this unique key: it is marked
        in the wheel at once and a marker is stored in the timer topic (so the
        recall survives a restart). NOT_FOUND for a key that is not pending."""
        if not self.running:
            return RecallOutcome(RecallStatus.OFF, "the timer service does not run on this "
                                 "broker (a slave, or timerWheelEnable=false)")
        # what was sent before the recall goes into the wheel first (bounded: a
        # burst's backlog is not moved here on the event loop, the caller retries)
        for _ in range(RECALL_ENQUEUE_STEPS):
            if not self.enqueue(ENQUEUE_BATCH * 16):
                break
        else:
            if self.backlog():
                return RecallOutcome(RecallStatus.BUSY, f"{self.backlog()} stored timer "
                                     "messages are not in the wheel yet: try again")
        key = key_hash(uniq_key)
        hint = None if slot_hint is None else self.wheel.slot_of(slot_hint)
        slot = self.wheel.find(key, hint)
        if slot is None:
            return RecallOutcome(RecallStatus.NOT_FOUND,
                                 f"no pending timer message with key {uniq_key!r} (unknown, "
                                 "delivered or recalled already)")
        result = self.store.put_message(timer_recall_marker(uniq_key, slot))
        if classify_put_status(result.put_message_status) is not PutOutcome.STORED:
            return RecallOutcome(RecallStatus.OFF, "the recall could not be stored: "
                                 f"{result.put_message_status.value}")
        self.wheel.recall(key, slot)
        return RecallOutcome(RecallStatus.OK)

    def recall_handle(self, topic: str, handle: str) -> RecallOutcome:
        """RECALL_MESSAGE / gRPC RecallMessage: a handle (protocol/recall_handle.py)
        of ``topic`` on this broker."""
        try:
            parsed = parse_handle(handle)
        except ValueError as exc:
            return RecallOutcome(RecallStatus.ILLEGAL, str(exc))
        if parsed.topic != topic:
            return RecallOutcome(RecallStatus.ILLEGAL, f"the recall handle is of topic "
                                 f"{parsed.topic!r}, not {topic!r}")
        if parsed.broker_name != self.config.broker_name:
            return RecallOutcome(RecallStatus.ILLEGAL, f"the recall handle is of broker "
                                 f"{parsed.broker_name!r}, not {self.config.broker_name!r}")
        return self.recall(parsed.message_id, parsed.timestamp_ms or None)

    # ---- figures -----------------------------------------------------------------------

    def status(self) -> dict[str, str]:
        """brokerStatus fields (RocketMQ 5 names where it has them)."""
        return {
            "timerRunning": str(self.running).lower(),
            "timerPendingCount": str(self.wheel.pending + self.backlog()),
            "timerEnqueueBacklog": str(self.backlog()),  # stored, not yet in the wheel
            "timerDeliveredCount": str(self.delivered),
            "timerDroppedCount": str(self.dropped),
            "timerRecalledCount": str(self.wheel.recalled_skipped),
            "timerLatenessMaxMs": str(self.lateness_max_ms),
            "timerLatenessAvgMs": str(round(self.lateness.sum * 1000 / self.lateness.count, 1)
                                      if self.lateness.count else 0),
            "timerCheckpointCqOffset": str(self.last_checkpoint.cq_offset),
            "timerSkippedAsDelivered": str(self.skipped_as_delivered),
        }

    # ---- trio edge ---------------------------------------------------------------------

    def _snapshot(self) -> TimerCheckpoint:
        done_slot, done_index = self.wheel.cursor()
        return TimerCheckpoint(self.cq_offset, self.log_files.records, done_slot, done_index)

    def stage(self) -> TimerCheckpoint | None:
        """The checkpoint to write now: the one staged at the previous call once
        the commit log is flushed past what it covers (the messages it moved
        into the wheel and the re-puts it counts as delivered are on disk, so a
        power loss cannot leave a checkpoint ahead of the log); then the
        present state is staged for the next call. None: nothing to write."""
        ready = None
        if self._staged is not None and self.flushed_offset() >= self._staged[1]:
            ready, self._staged = self._staged[0], None
        if self._staged is None:
            self._staged = (self._snapshot(), self.store.get_max_phy_offset())
        if ready is None or ready == self.last_checkpoint:
            return None
        return ready

    def flushed_offset(self) -> int:
        return self.store.commit_log.flushed_where

    async def checkpoint(self, cp: TimerCheckpoint | None = None) -> None:
        """Fsync the log and write a checkpoint (the staged one, or ``cp``) in a
        worker thread; then delete the segments wholly behind its cursor."""
        if cp is None:
            cp = self.stage()
            if cp is None:
                return
        if cp == self.last_checkpoint:
            return
        await trio.to_thread.run_sync(self.log_files.write_checkpoint, cp)
        self.last_checkpoint = cp
        gone = self.log_files.deletable(cp.done_slot)
        if gone:
            await trio.to_thread.run_sync(_unlink_all, gone)

    async def follow_master(self, cp: TimerCheckpoint) -> None:
        """A slave: its master's checkpoint, kept for a promotion (written in a
        worker thread when it changed)."""
        if cp == self.master_checkpoint or cp == TimerCheckpoint():
            return  # unchanged, or a master whose timer never ran: nothing to keep
        await trio.to_thread.run_sync(write_atomically, self.master_path, cp.encode())
        self.master_checkpoint = cp

    def start_following(self, margin_ms: int = FOLLOW_MARGIN_MS) -> None:
        """At a master's start: with no timer state of its own (a slave
        promoted) and its old master's checkpoint, the timer topic's entries
        that master had moved in and that were due (and stored) more than
        ``margin_ms`` before its cursor are taken as delivered. The margin
        covers the checkpoint's age (the sync period and the checkpoint's own
        lag): what the old master delivered within it comes again."""
        cp = self.master_checkpoint
        if cp is None or self.cq_offset or self.log_files.records or not cp.done_slot:
            self._follow = None
            return
        self._follow = (cp.cq_offset, cp.done_slot - margin_ms)
        self.log.info("timer state taken from the old master's checkpoint",
                      cq_offset=cp.cq_offset, done_slot=cp.done_slot, margin_ms=margin_ms)

    def _step(self) -> None:
        self._moved = self.enqueue()
        self._taken = self.deliver(self.now_ms())

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self.start_following()
        self.running = True
        last_checkpoint = trio.current_time()
        task_status.started()
        try:
            while True:
                self._moved = self._taken = 0
                await self.guard.run(self._step)
                moved, taken = self._moved, self._taken
                if trio.current_time() - last_checkpoint >= CHECKPOINT_EVERY_S:
                    last_checkpoint = trio.current_time()
                    await self.guard.run(self.checkpoint)
                if moved >= ENQUEUE_BATCH or taken >= DELIVER_BATCH:
                    await trio.sleep(0)  # more to do: let sends in, then go on
                    continue
                wait = TICK_S
                nxt = self.wheel.next_due_ms()
                if nxt is not None:
                    wait = min(wait, max(0.0, (nxt - self.now_ms()) / 1000))
                await trio.sleep(wait)
        finally:
            self.running = False
            with trio.CancelScope(shield=True):
                try:
                    # a clean stop: the store flushes what it holds as it closes
                    await self.checkpoint(self._snapshot())
                except Exception as exc:
                    self.guard.failed(exc, "timer checkpoint not saved at shutdown")

    def close(self) -> None:
        self.log_files.close()


__all__ = ["RecallOutcome", "RecallStatus", "TimerService"]
