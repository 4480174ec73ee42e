"""PullRequestHoldService timing in virtual time."""

from __future__ import annotations

import trio
import trio.testing

from broker.long_polling import PullRequestHoldService
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand


class FakeConn:
    closed = False

    def __init__(self) -> None:
        self.sent: list[tuple[float, RemotingCommand]] = []

    def send_response(self, cmd: RemotingCommand) -> None:
        self.sent.append((trio.current_time(), cmd))


async def test_timeout_and_arrival(autojump_clock: trio.testing.MockClock) -> None:
    state = {"has_data": False}

    def retry(conn: object, cmd: RemotingCommand, final: bool) -> RemotingCommand | None:
        if state["has_data"]:
            return cmd.response(ResponseCode.SUCCESS)
        return cmd.response(ResponseCode.PULL_NOT_FOUND) if final else None

    svc = PullRequestHoldService(retry)  # type: ignore[arg-type]
    conn = FakeConn()
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        start = trio.current_time()
        svc.suspend("T", 0, 5, conn, RemotingCommand.request(11), 15)  # type: ignore[arg-type]
        svc.suspend("T", 1, 0, conn, RemotingCommand.request(11), 2)  # type: ignore[arg-type]
        await trio.sleep(1)
        svc.notify_message_arriving("T", 0, 5)  # not past the held offset: keep holding
        assert conn.sent == []
        await trio.sleep(1.5)  # queue 1's hold expires at 2 s, empty
        assert len(conn.sent) == 1 and conn.sent[0][1].code == ResponseCode.PULL_NOT_FOUND
        assert conn.sent[0][0] - start == 2
        state["has_data"] = True
        svc.notify_message_arriving("T", 0, 6)
        assert len(conn.sent) == 2 and conn.sent[1][1].code == ResponseCode.SUCCESS
        await trio.sleep(20)
        assert len(conn.sent) == 2  # answered once only
        assert svc.held == {}
        nursery.cancel_scope.cancel()
