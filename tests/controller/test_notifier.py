"""The Notifier: one notification in flight per broker, the newest waiting, each bounded."""

from __future__ import annotations

import trio
import trio.testing

from controller.replicas import MasterView
from controller.service import Notifier
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import NotifyBrokerRoleChangedRequestHeader
from protocol.trio.errors import RemotingConnectError

A1, A2 = "127.0.0.1:10911", "127.0.0.1:10921"


def view(epoch: int, master: int | None = 1) -> MasterView:
    return MasterView("c", "b", master, A1 if master == 1 else A2, epoch, frozenset({1}),
                      epoch, {1: A1, 2: A2})


class SlowClient:
    """Answers each request after ``delay`` (None: never); ``down``: refuses at once."""

    def __init__(self, delay: float | None, down: frozenset[str] = frozenset()) -> None:
        self.delay = delay
        self.down = down
        self.sent: list[tuple[str, int]] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        if addr in self.down:
            raise RemotingConnectError(f"connect to {addr} failed")
        header = NotifyBrokerRoleChangedRequestHeader.from_fields(cmd.ext_fields)
        self.sent.append((addr, header.master_epoch))
        if self.delay is None:
            await trio.sleep_forever()
        await trio.sleep(self.delay)
        return cmd.response(ResponseCode.SUCCESS)


async def test_newest_replaces_the_waiting_one(autojump_clock: trio.testing.MockClock) -> None:
    client = SlowClient(delay=1.0)
    async with trio.open_nursery() as nursery:
        notifier = Notifier(client, nursery, timeout=3.0)  # type: ignore[arg-type]
        notifier.notify(view(1))
        await trio.testing.wait_all_tasks_blocked()
        notifier.notify(view(2))  # waits behind 1 ...
        notifier.notify(view(3))  # ... and is replaced by 3
    assert sorted(client.sent) == [(A1, 1), (A1, 3), (A2, 1), (A2, 3)]
    assert (notifier.sent, notifier.failed) == (4, 0)


async def test_a_silent_broker_costs_one_timeout(autojump_clock: trio.testing.MockClock) -> None:
    client = SlowClient(delay=None, down=frozenset({A2}))
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        notifier = Notifier(client, nursery, timeout=3.0)  # type: ignore[arg-type]
        notifier.notify(view(1))
    assert trio.current_time() - start == 3.0  # bounded; the other was refused at once
    assert (notifier.sent, notifier.failed) == (0, 2)
