"""Orderly POP's rules (RocketMQ 5's FIFO groups, ConsumerOrderInfoManager):
pure decisions over a queue's orderly batch, no store and no time read here.

A pop by an orderly group (``consumeMessageOrderly``, or a remoting POP with
``order=true``) leaves its messages of one queue as an *orderly batch*
(``Inflight.orderly``). While any un-acked message of the batch is still
invisible the queue is blocked for the group (``OrderlyPlan.blocked_until_ms``:
the latest visible time; a change of invisible time extends it). Once every
un-acked one is visible again, the next pop of the queue delivers them again,
the same offsets in the same order, each with one more attempt: never through
``%RETRY%<group>``, which would let later messages pass them. A message already
delivered ``retryMaxTimes + 1`` times goes to ``%DLQ%<group>`` instead
(RocketMQ's proxy forwards a FIFO message whose reconsume times reach the
group's max attempts) and the queue moves past it. Once the batch is empty
(acked, or dead-lettered) the queue serves new messages again. The queue's
consumer offset is its lowest in-flight offset (``PopTable.ack_offset``): it
commits only past the acked prefix.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker.pop.core import Inflight
from protocol.record import OFF_RECONSUME_TIMES, RECORD_HEAD_SIZE

_INT = struct.Struct(">i")


@dataclass(slots=True)
class OrderlyPlan:
    """What a pop does with a queue's orderly batch."""

    blocked_until_ms: int | None = None  # still invisible: the queue is blocked until then
    dead: list[Inflight] = field(default_factory=list)  # attempts used up: to the DLQ
    again: list[Inflight] = field(default_factory=list)  # deliver again, in offset order


def plan_batch(batch: Sequence[Inflight], now_ms: int, retry_max_times: int,
               want: int) -> OrderlyPlan:
    """``batch``: the queue's un-acked orderly records by offset (non-empty).
    Blocked while one of them is invisible; else the records that were
    delivered more than ``retry_max_times`` times are dead letters and the
    first ``want`` others are delivered again."""
    latest = max(rec.visible_at_ms for rec in batch)
    if latest > now_ms:
        return OrderlyPlan(blocked_until_ms=latest)
    plan = OrderlyPlan()
    for rec in batch:
        if rec.attempt > retry_max_times:
            plan.dead.append(rec)
        elif len(plan.again) < want:
            plan.again.append(rec)
    return plan


def redelivered(rec: Inflight, now_ms: int, invisible_time_ms: int) -> Inflight:
    """``rec`` delivered again: one more attempt, a new visible time and a new
    generation (the previous delivery's handle is refused from now on)."""
    return Inflight(rec.group, rec.topic, rec.queue_id, rec.queue_offset,
                    rec.commit_log_offset, now_ms + invisible_time_ms, rec.attempt + 1,
                    now_ms, rec.gen + 1, True)


def with_reconsume_times(record: bytes, times: int) -> bytes:
    """The stored record with its RECONSUMETIMES set to ``times`` (what a
    remoting consumer reads as the attempt: an orderly re-delivery is the same
    stored message, not a retry copy). Raises ValueError for a short record."""
    if len(record) < RECORD_HEAD_SIZE:
        raise ValueError(f"a record of {len(record)} bytes has no whole head")
    out = bytearray(record)
    _INT.pack_into(out, OFF_RECONSUME_TIMES, times)
    return bytes(out)
