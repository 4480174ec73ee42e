"""GroupCommitService: SYNC_FLUSH acknowledgements.

A send in SYNC_FLUSH mode is answered only once its bytes are fsynced. Sends
queue a request; one fsync (in a worker thread) covers every request waiting
when it starts. A request still unflushed ``syncFlushTimeout`` ms after it was
queued is answered ``FLUSH_DISK_TIMEOUT``.

A failing fsync (an I/O error) is logged, rate-limited, and tried again after
a back-off; the requests it leaves waiting are answered FLUSH_DISK_TIMEOUT at
their deadline. A response that cannot be sent is logged and skipped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
import trio

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.connection import RemotingConnection
from protocol.trio.service import Guard


@dataclass(slots=True)
class GroupCommitRequest:
    conn: RemotingConnection
    response: RemotingCommand
    next_offset: int  # the request is durable once the flushed offset reaches this
    deadline: float
    done: bool = False


class GroupCommitService:
    def __init__(self, flush: Callable[[], int], timeout_ms: int, broker_name: str) -> None:
        self.flush = flush
        self.timeout = timeout_ms / 1000
        self.waiting: deque[GroupCommitRequest] = deque()
        self._wake_flusher: trio.Event | None = None
        self._wake_watcher: trio.Event | None = None
        self.log = structlog.get_logger("broker.flush").bind(broker=broker_name)
        self.guard = Guard(self.log, "group commit")
        self.flush_count = 0

    def submit(self, conn: RemotingConnection, response: RemotingCommand, next_offset: int) -> None:
        self.waiting.append(
            GroupCommitRequest(conn, response, next_offset, trio.current_time() + self.timeout)
        )
        for name in ("_wake_flusher", "_wake_watcher"):
            ev = getattr(self, name)
            if ev is not None:
                setattr(self, name, None)
                ev.set()

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._flusher)
            nursery.start_soon(self._watcher)
            task_status.started()

    async def _flusher(self) -> None:
        while True:
            if not self.waiting:
                ev = self._wake_flusher = trio.Event()
                await ev.wait()
                continue
            await self.guard.run(self._flush_once)

    async def _flush_once(self) -> None:
        target = self.waiting[-1].next_offset
        flushed = await trio.to_thread.run_sync(self.flush)
        self.flush_count += 1
        self._answer_flushed(flushed)
        if flushed < target:  # logged by the guard, tried again after a back-off
            raise RuntimeError(f"flush reached offset {flushed}, short of {target}")

    def _send(self, req: GroupCommitRequest) -> None:
        try:
            req.conn.send_response(req.response)
        except Exception as exc:
            self.guard.failed(exc, "group commit response not sent", next_offset=req.next_offset)

    def _answer_flushed(self, flushed: int) -> None:
        while self.waiting and self.waiting[0].next_offset <= flushed:
            req = self.waiting.popleft()
            if not req.done:
                req.done = True
                self._send(req)

    async def _watcher(self) -> None:
        """Answer FLUSH_DISK_TIMEOUT for requests past their deadline."""
        while True:
            live = [r for r in self.waiting if not r.done]
            if not live:
                ev = self._wake_watcher = trio.Event()
                await ev.wait()
                continue
            await trio.sleep_until(live[0].deadline)
            now = trio.current_time()
            for req in self.waiting:
                if req.deadline > now:
                    break
                if not req.done:
                    req.done = True
                    self.guard.note("flush disk timeout", "timeout", next_offset=req.next_offset)
                    timeout = req.response
                    timeout.code = ResponseCode.FLUSH_DISK_TIMEOUT
                    timeout.remark = "flush disk timeout: the message is stored but not yet on disk"
                    self._send(req)
            while self.waiting and self.waiting[0].done:
                self.waiting.popleft()
