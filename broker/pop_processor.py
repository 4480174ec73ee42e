"""POP on the remoting wire and POP's trio edge.

``PopMessageProcessor``: POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE and
CHANGE_MESSAGE_INVISIBLETIME
(RocketMQ 5's codes and header names) as thin adapters over ``PopService``
(broker/service/pop.py): decode the header, call the service, wait until its
changes are durable as the flush policy asks (``PopRunner.durable``), encode the answer with one table
(``STATUS_TO_CODE``). A pop that finds nothing and has a ``pollTime`` waits for
messages of its topic or its group's retry topic to arrive (at most
``longPollingMaxSuspendMillis``; ``maxPopPollingSize`` pops held at once, past
it POLLING_FULL).

``PopRunner``: the in-flight log's writer and the revive loop (every
``reviveInterval`` ms). The log follows the broker's ``flushDiskType``, as
RocketMQ 5's pop check points and acks follow the commit log's:

- ``SYNC_FLUSH``: a request is answered once its changes are fsynced (group
  commit: one fsync in a worker thread for all changes made meanwhile).
- ``ASYNC_FLUSH``: a request is answered once its changes are written to the
  log file (the page cache: a killed broker loses nothing); a flush task fsyncs
  what was written every ``flushIntervalCommitLog`` ms. A power loss can take
  the changes of the last interval: a forgotten ack, pop or change means a
  message is delivered again, never lost nor invisible for good.

Either way the log is rewritten as the table past ``popLogCheckpointBytes``
(appends wait for the rewrite).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog
import trio

from broker.pop.core import Inflight
from broker.service.pop import (
    HandleOutcome,
    PopOutcome,
    PopRequest,
    PopService,
    PopStatus,
    ReviveResult,
)
from broker.service.send import STORED, SendOutcome, SendStatus
from broker.store.pop_log import PopLog
from protocol.batch_ack import BatchAckError, decode_handles, encode_results
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    AckMessageRequestHeader,
    BatchAckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ConsumerSendMsgBackRequestHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from protocol.names import retry_topic
from protocol.trio.connection import RemotingConnection

log = structlog.get_logger("broker.pop")

STATUS_TO_CODE: dict[PopStatus, int] = {
    PopStatus.FOUND: ResponseCode.SUCCESS,
    PopStatus.OK: ResponseCode.SUCCESS,
    PopStatus.NO_MESSAGE: ResponseCode.PULL_NOT_FOUND,
    # RocketMQ answers an ack or change of a check point it no longer has NO_MESSAGE
    PopStatus.INVALID_RECEIPT_HANDLE: ResponseCode.NO_MESSAGE,
    PopStatus.BUSY: ResponseCode.SYSTEM_BUSY,
    PopStatus.NO_PERMISSION: ResponseCode.NO_PERMISSION,
    PopStatus.GROUP_NOT_EXIST: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    PopStatus.TOPIC_NOT_EXIST: ResponseCode.TOPIC_NOT_EXIST,
    PopStatus.ILLEGAL_REQUEST: ResponseCode.SYSTEM_ERROR,
    PopStatus.SUBSCRIPTION_PARSE_FAILED: ResponseCode.SUBSCRIPTION_PARSE_FAILED,
    PopStatus.FILTER_UNSUPPORTED: ResponseCode.SYSTEM_ERROR,
    PopStatus.SLAVE: ResponseCode.SERVICE_NOT_AVAILABLE,
}

# send-back outcomes that mean "try again on a later tick"
_TRANSIENT = frozenset({SendStatus.BUSY, SendStatus.SERVICE_NOT_AVAILABLE,
                        SendStatus.SYSTEM_ERROR})


def wall_ms() -> int:
    return int(time.time() * 1000)


def send_back_reviver(send_back: Callable[..., SendOutcome],
                      has_message: Callable[[int], bool], *,
                      dead_letter: bool = False) -> Callable[[Inflight], ReviveResult]:
    """Revive through SendService.send_back: ``%RETRY%<group>`` with one more
    reconsume time and no delay, or ``%DLQ%<group>`` past the group's
    ``retryMaxTimes``; ``dead_letter``: always ``%DLQ%<group>`` (an orderly
    message past its attempts)."""

    def revive(rec: Inflight) -> ReviveResult:
        if not has_message(rec.commit_log_offset):
            log.warning("in-flight message no longer in the commit log: dropped",
                        group=rec.group, topic=rec.topic, queue_id=rec.queue_id,
                        queue_offset=rec.queue_offset)
            return ReviveResult.GONE
        outcome = send_back(ConsumerSendMsgBackRequestHeader(
            offset=rec.commit_log_offset, group=rec.group, delay_level=-1 if dead_letter else 0),
            immediate=True)
        if outcome.status in STORED:
            return ReviveResult.DONE
        if outcome.status in _TRANSIENT:
            return ReviveResult.LATER
        log.warning("in-flight message not revived: dropped", group=rec.group,
                    topic=rec.topic, status=outcome.status.name, remark=outcome.remark)
        return ReviveResult.GONE

    return revive


class PopRunner:
    """Writes the service's journal to the log and ticks the revive loop."""

    def __init__(self, service: PopService, pop_log: PopLog, *, checkpoint_bytes: int,
                 revive_interval_ms: int, now_ms: Callable[[], int] = wall_ms,
                 sync_flush: bool = True, flush_interval_ms: int = 500) -> None:
        self.service = service
        self.pop_log = pop_log
        self.checkpoint_bytes = checkpoint_bytes
        self.revive_interval_ms = revive_interval_ms
        self.now_ms = now_ms
        self.sync_flush = sync_flush
        self.flush_interval_ms = flush_interval_ms
        self.written = 0  # journal entries written to the log file
        self.synced = 0  # journal entries fsynced
        self._writing: trio.Event | None = None  # set while an fsync-and-answer or a rewrite runs
        self._flush_wake = trio.Event()
        self.arrived: dict[str, trio.Event] = {}  # topic -> set when messages arrive
        self.held = 0
        self.log = log.bind(service="pop")
        # an orderly batch acked to its end frees its queue: held pops look again
        service.on_unblocked = lambda topic: self.notify_message_arriving(topic, -1, -1)

    async def durable(self) -> None:
        """Return once every change made so far is as durable as the flush
        policy asks before an answer: fsynced (SYNC_FLUSH) or written to the
        log file (ASYNC_FLUSH)."""
        journal = self.service.journal
        target = journal.seq
        done = (lambda: self.synced) if self.sync_flush else (lambda: self.written)
        while done() < target:
            if self._writing is not None:
                await self._writing.wait()
                continue
            if not self.sync_flush:
                frames, seq = journal.take()
                self.pop_log.append(frames)  # the page cache: no fsync, no thread
                self.written = seq
                if self.pop_log.size > self.checkpoint_bytes:
                    self._flush_wake.set()
                continue
            writing = self._writing = trio.Event()
            try:
                frames, seq = journal.take()
                checkpoint = None
                if self.pop_log.size + len(frames) > self.checkpoint_bytes:
                    checkpoint = self.service.table.snapshot()
                await trio.to_thread.run_sync(self.pop_log.write, frames, checkpoint)
                self.written = self.synced = seq
            finally:
                self._writing = None
                writing.set()

    async def flush(self) -> None:
        """ASYNC_FLUSH's background step: rewrite the log as the table when it
        is past ``checkpoint_bytes`` (appends wait), else fsync what was
        written (appends go on meanwhile)."""
        if self.pop_log.size > self.checkpoint_bytes:
            writing = self._writing = trio.Event()
            try:
                frames, seq = self.service.journal.take()
                # the snapshot holds every change made, written or not
                checkpoint = self.service.table.snapshot()
                await trio.to_thread.run_sync(self.pop_log.write, frames, checkpoint)
                self.written = self.synced = seq
            finally:
                self._writing = None
                writing.set()
            return
        seq = self.written
        if self.synced < seq:
            await trio.to_thread.run_sync(self.pop_log.sync)
            self.synced = seq

    async def _flush_loop(self) -> None:
        while True:
            with trio.move_on_after(self.flush_interval_ms / 1000):
                await self._flush_wake.wait()
            self._flush_wake = trio.Event()
            try:
                await self.flush()
            except Exception as exc:  # the next interval tries again
                self.log.error("pop log flush failed", error=repr(exc), exc_info=exc)

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        event = self.arrived.pop(topic, None)
        if event is not None:
            event.set()

    async def wait_arrival(self, topics: tuple[str, ...], deadline: float) -> None:
        """Until a message of one of ``topics`` arrives or ``deadline`` (trio time)."""
        events = [self.arrived.setdefault(t, trio.Event()) for t in topics]
        with trio.move_on_at(deadline):
            async with trio.open_nursery() as nursery:
                for event in events:
                    async def one(e: trio.Event = event) -> None:
                        await e.wait()
                        nursery.cancel_scope.cancel()
                    nursery.start_soon(one)

    async def revive_once(self) -> int:
        done = self.service.revive_due(self.now_ms())
        if done:
            self.log.info("in-flight messages revived", count=done)
        await self.durable()
        return done

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            if not self.sync_flush:
                nursery.start_soon(self._flush_loop)
            task_status.started()
            await self._revive_loop()

    async def _revive_loop(self) -> None:
        while True:
            await trio.sleep(self.revive_interval_ms / 1000)
            try:
                await self.revive_once()
            except Exception as exc:  # a failed pass: the next tick tries again
                self.log.error("revive pass failed", error=repr(exc), exc_info=exc)


class PopMessageProcessor:
    def __init__(self, service: PopService, runner: PopRunner, *, max_polling: int,
                 max_suspend_ms: Callable[[], int]) -> None:
        self.service = service
        self.runner = runner
        self.max_polling = max_polling
        self.max_suspend_ms = max_suspend_ms

    async def pop_message(self, conn: RemotingConnection, cmd: RemotingCommand
                          ) -> RemotingCommand:
        h = PopMessageRequestHeader.from_fields(cmd.ext_fields)
        req = PopRequest(h.consumer_group, h.topic, h.queue_id, h.max_msg_nums,
                         h.invisible_time, h.exp or "*", h.exp_type or "TAG", h.init_mode,
                         h.order)
        outcome = await self.receive(req, h.poll_time)
        if outcome is None:
            return cmd.response(ResponseCode.POLLING_FULL, self.polling_full_remark())
        return encode_pop(cmd, outcome)

    def polling_full_remark(self) -> str:
        return f"too many pops held (maxPopPollingSize {self.max_polling})"

    async def receive(self, req: PopRequest, poll_ms: int) -> PopOutcome | None:
        """Pop; when nothing is found, wait up to ``poll_ms`` (at most
        ``longPollingMaxSuspendMillis``) for messages of the topic or the group's
        retry topic and pop again. Answers once the changes are durable
        (``PopRunner.durable``); None when
        ``maxPopPollingSize`` pops are held already (POLLING_FULL). Every transport
        pops through here."""
        runner = self.runner
        outcome = self.service.pop(req, runner.now_ms())
        poll_ms = min(max(poll_ms, 0), self.max_suspend_ms())
        if outcome.status is PopStatus.NO_MESSAGE and poll_ms > 0:
            if runner.held >= self.max_polling:
                await runner.durable()
                return None
            deadline = trio.current_time() + poll_ms / 1000
            runner.held += 1
            try:
                while outcome.status is PopStatus.NO_MESSAGE and trio.current_time() < deadline:
                    until = deadline
                    if outcome.wake_ms is not None:  # an orderly batch visible again
                        wake = max(0, outcome.wake_ms - runner.now_ms()) / 1000
                        until = min(deadline, trio.current_time() + wake)
                    await runner.wait_arrival((req.topic, retry_topic(req.group)), until)
                    outcome = self.service.pop(req, runner.now_ms())
            finally:
                runner.held -= 1
        await runner.durable()
        return outcome

    async def ack_message(self, conn: RemotingConnection, cmd: RemotingCommand
                          ) -> RemotingCommand:
        h = AckMessageRequestHeader.from_fields(cmd.ext_fields)
        outcome = self.service.ack(h.consumer_group, h.topic, h.extra_info)
        await self.runner.durable()
        return encode_handle(cmd, outcome)

    async def batch_ack_message(self, conn: RemotingConnection, cmd: RemotingCommand
                                ) -> RemotingCommand:
        """BATCH_ACK_MESSAGE: the body's handles acked with one log write; the
        answer's body says, per handle, acked or why not."""
        h = BatchAckMessageRequestHeader.from_fields(cmd.ext_fields)
        try:
            handles = decode_handles(cmd.body)
        except BatchAckError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad batch ack body: {exc}")
        outcomes = self.service.ack_batch(h.consumer_group, h.topic, handles)
        await self.runner.durable()
        if isinstance(outcomes, HandleOutcome):
            return encode_handle(cmd, outcomes)
        remarks = [None if o.status is PopStatus.OK
                   else f"{o.status.value}: {o.remark}" for o in outcomes]
        return cmd.response(ResponseCode.SUCCESS, None, body=encode_results(remarks))

    async def change_invisible_time(self, conn: RemotingConnection, cmd: RemotingCommand
                                    ) -> RemotingCommand:
        h = ChangeInvisibleTimeRequestHeader.from_fields(cmd.ext_fields)
        outcome = self.service.change_invisible(h.consumer_group, h.topic, h.extra_info,
                                                h.invisible_time, self.runner.now_ms())
        await self.runner.durable()
        return encode_handle(cmd, outcome, h.invisible_time)


def encode_pop(cmd: RemotingCommand, outcome: PopOutcome) -> RemotingCommand:
    code = STATUS_TO_CODE[outcome.status]
    if outcome.status is not PopStatus.FOUND:
        return cmd.response(code, outcome.remark)
    header = PopMessageResponseHeader(
        pop_time=outcome.pop_time_ms, invisible_time=outcome.invisible_time_ms,
        receipt_handles=" ".join(m.handle for m in outcome.messages))
    body = b"".join(m.record for m in outcome.messages)
    return cmd.response(code, None, ext_fields=header.to_fields(), body=body)


def encode_handle(cmd: RemotingCommand, outcome: HandleOutcome,
                  invisible_time: int = 0) -> RemotingCommand:
    code = STATUS_TO_CODE[outcome.status]
    if outcome.status is not PopStatus.OK or not outcome.handle:
        remark = outcome.remark
        if outcome.status is PopStatus.INVALID_RECEIPT_HANDLE:
            remark = f"INVALID_RECEIPT_HANDLE: {remark}"
        return cmd.response(code, remark)
    header = ChangeInvisibleTimeResponseHeader(
        pop_time=outcome.visible_at_ms - invisible_time, invisible_time=invisible_time,
        receipt_handle=outcome.handle)
    return cmd.response(code, None, ext_fields=header.to_fields())
