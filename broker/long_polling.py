"""PullRequestHoldService: long polling.

A pull that finds nothing new is held (up to ``longPollingMaxSuspendMillis``,
never past the client's own ``suspendTimeoutMillis``) and answered as soon as
the dispatcher indexes a message for its queue, or empty at its deadline.

A held pull whose answer fails (the retry raises, the connection cannot take
the response) is answered ``SYSTEM_ERROR`` when possible and dropped; the
failure is logged (rate-limited) and never reaches the dispatcher that called
``notify_message_arriving`` nor stops the deadline task.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.names import shown
from protocol.trio.connection import RemotingConnection
from protocol.trio.service import Guard

# (conn, cmd, final) -> the response, or None to keep holding (final=False only)
Retry = Callable[[RemotingConnection, RemotingCommand, bool], RemotingCommand | None]


@dataclass(slots=True)
class HeldPull:
    conn: RemotingConnection
    cmd: RemotingCommand
    offset: int
    deadline: float
    topic: str = ""
    queue_id: int = 0
    done: bool = field(default=False)


class PullRequestHoldService:
    def __init__(self, retry: Retry, broker_name: str = "") -> None:
        self.retry = retry
        self.log = structlog.get_logger("broker.long_polling").bind(broker=broker_name)
        self.guard = Guard(self.log, "pull hold")
        self.held: dict[tuple[str, int], list[HeldPull]] = {}
        self._deadlines: list[tuple[float, int, HeldPull]] = []
        self._seq = itertools.count()
        self._wake: trio.Event | None = None

    def suspend(self, topic: str, queue_id: int, offset: int, conn: RemotingConnection,
                cmd: RemotingCommand, timeout_s: float) -> None:
        hold = HeldPull(conn, cmd, offset, trio.current_time() + timeout_s, topic, queue_id)
        self.held.setdefault((topic, queue_id), []).append(hold)
        heapq.heappush(self._deadlines, (hold.deadline, next(self._seq), hold))
        if self._wake is not None:
            self._wake.set()

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Called by the dispatcher (event loop thread) after a message is indexed."""
        holds = self.held.get((topic, queue_id))
        if not holds:
            return
        keep = []
        for hold in holds:
            if hold.done or hold.conn.closed:
                hold.done = True
                continue
            if max_offset > hold.offset and self._answer(hold, final=False):
                continue
            keep.append(hold)
        if keep:
            self.held[(topic, queue_id)] = keep
        else:
            del self.held[(topic, queue_id)]

    def _answer(self, hold: HeldPull, final: bool) -> bool:
        """True when the hold is finished: answered, or failed and dropped."""
        try:
            response = self.retry(hold.conn, hold.cmd, final)
            if response is None:
                return False
            hold.done = True
            hold.conn.send_response(response)
        except Exception as exc:
            hold.done = True
            self.guard.failed(exc, "held pull failed, dropped", topic=shown(hold.topic),
                              queue_id=hold.queue_id, offset=hold.offset)
            try:
                hold.conn.send_response(hold.cmd.response(
                    ResponseCode.SYSTEM_ERROR, "the held pull failed on the broker"))
            except Exception:
                pass  # the connection is gone or broken; the client times out and retries
        return True

    def expire(self, now: float) -> None:
        """Answer (empty) the held pulls whose deadline is ``now`` or earlier."""
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, hold = heapq.heappop(self._deadlines)
            if not hold.done and not hold.conn.closed:
                self._answer(hold, final=True)
            hold.done = True
        for key in [k for k, hs in self.held.items() if all(h.done for h in hs)]:
            del self.held[key]

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Answer held pulls whose deadline passed."""
        task_status.started()
        while True:
            if not self._deadlines:
                self._wake = trio.Event()
                await self._wake.wait()
                self._wake = None
                continue
            deadline = self._deadlines[0][0]
            self._wake = trio.Event()
            with trio.move_on_at(deadline):
                await self._wake.wait()  # a new, possibly earlier, deadline
            self._wake = None
            await self.guard.run(self.expire, trio.current_time())
