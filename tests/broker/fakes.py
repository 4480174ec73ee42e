"""A connection stand-in for calling broker handlers without sockets, and a
held pull's waiter for the pull service and long polling."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from broker.service.pull import PullOutcome, PullStatus
from protocol.command import RemotingCommand

if TYPE_CHECKING:
    from broker.controller import BrokerController


class FakeConn:
    """Collects what a handler sends; ``wait_sent(n)`` waits (no polling)
    until ``n`` commands were sent."""

    remote_addr = "127.0.0.1:40000"
    closed = False

    def __init__(self) -> None:
        self.sent: list[RemotingCommand] = []
        self._grew: trio.Event | None = None

    def send_response(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)
        if self._grew is not None:
            self._grew.set()

    takes_requests = True

    def offer(self, cmd: RemotingCommand) -> bool:
        """A request the broker starts (RemotingConnection.offer): always taken."""
        self.send_response(cmd)
        return True

    def after_answers(self, work: Callable[[], None]) -> None:
        """What a handler leaves until its answer is written: run at once."""
        work()

    async def wait_sent(self, n: int) -> None:
        while len(self.sent) < n:
            self._grew = trio.Event()
            await self._grew.wait()


def call(c: BrokerController, code: int, fields: dict[str, Any] | None = None,
         body: bytes | None = None) -> RemotingCommand:
    """A controller's handler's answer to one request, whether returned or sent
    once its waiters are done."""
    handler, _ = c._handler_table().lookup(code)
    assert handler is not None
    conn = FakeConn()
    response = handler(conn, RemotingCommand.request(code, fields, body))  # type: ignore[arg-type]
    if response is None:
        assert len(conn.sent) == 1
        response = conn.sent[0]
    return response


class FakeOwner:
    """A connection as held pulls see it: the owner of their waiters
    (``waiter()``); collects (virtual time, outcome) answers and failures;
    ``wait_answered(n)`` waits (no polling) until ``n`` answers came."""

    closed = False

    def __init__(self) -> None:
        self.sent: list[tuple[float, PullOutcome]] = []
        self.failed: list[str] = []
        self._grew: trio.Event | None = None

    def waiter(self) -> FakeWaiter:
        return FakeWaiter(self)

    def outcomes(self) -> list[PullOutcome]:
        return [o for _, o in self.sent]

    def statuses(self) -> list[PullStatus]:
        return [o.status for _, o in self.sent]

    def _took(self) -> None:
        if self._grew is not None:
            self._grew.set()

    async def wait_answered(self, n: int) -> None:
        while len(self.sent) < n:
            self._grew = trio.Event()
            await self._grew.wait()


class FakeWaiter:
    """One held pull's waiter (PullWaiter) of a ``FakeOwner``."""

    __slots__ = ("client",)

    def __init__(self, client: FakeOwner) -> None:
        self.client = client

    @property
    def owner(self) -> FakeOwner:
        return self.client

    @property
    def closed(self) -> bool:
        return self.client.closed

    def answer(self, outcome: PullOutcome) -> None:
        self.client.sent.append((trio.current_time(), outcome))
        self.client._took()

    def fail(self, remark: str) -> None:
        self.client.failed.append(remark)
        self.client._took()
