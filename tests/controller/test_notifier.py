"""The Notifier: one notification in flight per broker, the newest waiting, each bounded."""

from __future__ import annotations

import trio
import trio.testing

from acl.guard import guard_table
from acl.plain import parse_plain_acl
from controller.config import ControllerConfig
from controller.replicas import MasterView
from controller.service import ControllerService, Notifier
from controller.state_store import AlwaysLeader
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import NotifyBrokerRoleChangedRequestHeader
from protocol.trio.connection import HandlerTable
from protocol.trio.errors import RemotingConnectError
from protocol.trio.server import RemotingServer
from tests.controller.fakes import MemoryStore

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


async def _notify_acl_broker(credentials: dict[str, str]) -> tuple[int, list[int]]:
    """A broker-like server with ACL on (the broker's guard) and a controller with
    ``credentials``: what the broker's handler saw, and the ACL refusals."""
    config = parse_plain_acl("accounts:\n"
                             "  - {accessKey: ctrl0001, secretKey: ctrlsecret, admin: true}\n")
    seen: list[int] = []
    refused: list[int] = []

    def notified(conn: object, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(NotifyBrokerRoleChangedRequestHeader.from_fields(cmd.ext_fields).master_epoch)
        return cmd.response(ResponseCode.SUCCESS)

    table = HandlerTable()
    table.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, notified)
    server = RemotingServer(guard_table(table, lambda: config,
                                        lambda code, reason: refused.append(code)),
                            "127.0.0.1", 0)
    cfg = ControllerConfig()
    cfg.update(credentials)
    svc = ControllerService(cfg, MemoryStore(), AlwaysLeader(), serve=False)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        await nursery.start(svc.run)
        assert svc.notifier is not None
        addr = f"127.0.0.1:{port}"
        svc.notifier.notify(MasterView("c", "b", 1, addr, 7, frozenset({1}), 1, {1: addr}))
        with trio.fail_after(10):
            while svc.notifier.sent + svc.notifier.failed == 0:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    return len(refused), seen


async def test_notifications_are_signed_with_the_controllers_account() -> None:
    signed = {"controllerAccessKey": "ctrl0001", "controllerSecretKey": "ctrlsecret"}
    assert await _notify_acl_broker(signed) == (0, [7])
    assert await _notify_acl_broker({}) == (1, [])  # unsigned: a broker with ACL refuses it
