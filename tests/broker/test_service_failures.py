"""Broker background services survive a failing item, in virtual time."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.group_commit import GroupCommitService
from broker.long_polling import HELD_PULL_FAILED, PullRequestHoldService
from broker.out_api import BrokerOuterAPI
from broker.service.pull import PullOutcome, PullRequest, PullStatus
from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager
from protocol.body import compress_body, decompress_body, pack_body
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.route import TopicConfig
from protocol.trio.errors import RemotingConnectError
from tests.broker.fakes import FakeOwner
from tests.broker.test_group_commit import submit
from tests.broker.test_guarded_service import FakeLog
from tests.waits import wait_until


class FakeConn:
    closed = False

    def __init__(self) -> None:
        self.sent: list[RemotingCommand] = []

    def send_response(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)


# ---- long polling ---------------------------------------------------------------------


async def test_a_failing_held_pull_is_dropped_not_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def retry(req: PullRequest, final: bool) -> PullOutcome | None:
        if req.group == "bad":
            raise KeyError("queue vanished")
        return PullOutcome(PullStatus.NO_NEW_MSG if final else PullStatus.FOUND)

    svc = PullRequestHoldService(retry, "b")
    svc.guard.log = log = FakeLog()
    good, bad = FakeOwner(), FakeOwner()
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        svc.suspend(PullRequest("bad", "T", 0, 0, 32), bad.waiter(), 5)
        svc.suspend(PullRequest("good", "T", 0, 0, 32), good.waiter(), 5)
        svc.notify_message_arriving("T", 0, 1)  # the dispatcher's call does not raise
        assert bad.failed == [HELD_PULL_FAILED] and bad.sent == []
        assert good.statuses() == [PullStatus.FOUND]
        assert svc.held == {}
        # the deadline task survives the same failure
        svc.suspend(PullRequest("bad", "T", 1, 0, 32), bad.waiter(), 2)
        svc.suspend(PullRequest("good", "T", 1, 0, 32), good.waiter(), 3)
        await trio.sleep(4)
        assert good.statuses()[-1] is PullStatus.NO_NEW_MSG
        assert len(bad.failed) == 2 and svc.held == {}
        nursery.cancel_scope.cancel()
    assert svc.guard.failures == 2 and len(log.lines) == 1  # the same error, logged once


# ---- group commit ---------------------------------------------------------------------


async def test_group_commit_survives_failing_fsyncs(
    autojump_clock: trio.testing.MockClock, no_threads: None
) -> None:
    state = {"fail": 3, "written": 0}

    def flush() -> int:
        if state["fail"]:
            state["fail"] -= 1
            raise OSError(5, "Input/output error")
        return state["written"]

    svc = GroupCommitService(flush, 5000, "b")
    svc.guard.log = log = FakeLog()
    conn = FakeConn()
    ok = RemotingCommand.request(10).response(ResponseCode.SUCCESS)
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        state["written"] = 100
        submit(svc, conn, ok, 100)
        await wait_until(lambda: conn.sent, 10, "a response sent")
        assert conn.sent[0].code == ResponseCode.SUCCESS
        assert svc.guard.failures == 3 and len(log.lines) == 1
        nursery.cancel_scope.cancel()


async def test_group_commit_times_out_while_fsync_keeps_failing(
    autojump_clock: trio.testing.MockClock, no_threads: None
) -> None:
    def flush() -> int:
        raise OSError(5, "Input/output error")

    svc = GroupCommitService(flush, 1000, "b")
    svc.guard.log = FakeLog()
    conn = FakeConn()
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        submit(svc, conn, RemotingCommand.request(10).response(ResponseCode.SUCCESS), 1)
        await trio.sleep(1.5)
        assert [c.code for c in conn.sent] == [ResponseCode.FLUSH_DISK_TIMEOUT]
        tries = svc.guard.failures
        assert 2 <= tries <= 6  # backing off (0.1 s, 0.2 s, ...), not spinning
        await trio.sleep(60)
        assert svc.guard.failures == tries  # nothing waits any more: no more fsyncs
        submit(svc, conn, RemotingCommand.request(10).response(ResponseCode.SUCCESS), 2)
        await trio.sleep(1.5)
        assert len(conn.sent) == 2 and svc.guard.failures > tries  # still serving
        nursery.cancel_scope.cancel()


# ---- registration ---------------------------------------------------------------------


class FakeClient:
    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.calls = 0

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return cmd.response(ResponseCode.SUCCESS)


def config(tmp_path: Path, **kw: Any) -> BrokerConfig:
    return BrokerConfig(store_path_root_dir=str(tmp_path), namesrv_addr="127.0.0.1:1;127.0.0.1:2",
                        **kw)


async def test_register_never_raises_for_a_name_server(tmp_path: Path) -> None:
    wire = {"topicConfigTable": {"T": {"topicName": "T"}}}
    for error in (LocalProtocolError("frame too large"), RemotingConnectError("refused"),
                  RuntimeError("bug")):
        client = FakeClient(error)
        api = BrokerOuterAPI(config(tmp_path), client)  # type: ignore[arg-type]
        api.guard.log = FakeLog()
        assert await api.register_broker_all(wire) == 0
        assert client.calls == 2
    ok = FakeClient(None)
    assert await BrokerOuterAPI(config(tmp_path), ok).register_broker_all(wire) == 2  # type: ignore[arg-type]


async def test_a_registration_too_large_for_a_frame_is_not_sent(tmp_path: Path) -> None:
    client = FakeClient(None)
    api = BrokerOuterAPI(config(tmp_path, max_frame_size=200 * 1024), client)  # type: ignore[arg-type]
    api.guard.log = log = FakeLog()
    huge = "%RETRY%" + os.urandom(300 * 1024).hex()  # incompressible
    assert await api.register_broker_all({"topicConfigTable": {huge: {"topicName": huge}}}) == 0
    assert client.calls == 0
    _, event, kw = log.lines[0]
    assert event == "registration too large for a frame, not sent"
    assert kw["topics"] == 1 and len(kw["longest_topics"][0]) < 200


class NamesrvClient:
    """Hands each registration to a real name-server processor."""

    def __init__(self) -> None:
        self.routes = RouteInfoManager()
        self.table = NamesrvProcessor(self.routes, lambda: 0.0).handler_table()
        self.sent: list[RemotingCommand] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.sent.append(cmd)
        handler, _ = self.table.lookup(cmd.code)
        assert handler is not None
        response = handler(None, cmd)  # type: ignore[arg-type]
        assert response is not None
        return response


async def test_a_large_registration_goes_compressed(tmp_path: Path) -> None:
    """Thousands of retry topics exceed the frame uncompressed: the body goes
    compressed (RocketMQ's compressed register) and the name server routes them."""
    client = NamesrvClient()
    api = BrokerOuterAPI(config(tmp_path, max_frame_size=2 * 1024 * 1024), client)  # type: ignore[arg-type]
    table = {f"%RETRY%consumer-group-{i:06d}": TopicConfig(f"%RETRY%consumer-group-{i:06d}", 1, 1)
             .to_dict() for i in range(30_000)}
    wire = {"topicConfigTable": table, "dataVersion": {"timestamp": 1, "counter": 1}}
    assert len(pack_body(wire)) > 2 * 1024 * 1024
    assert await api.register_broker_all(wire) == 2
    cmd = client.sent[0]
    assert cmd.ext_fields["compressed"] is True and cmd.body is not None
    assert len(cmd.body) < 1024 * 1024
    assert len(client.routes.topic_queue_table) == 30_000


def test_compressed_bodies_are_bounded() -> None:
    bomb = compress_body(bytes(64 * 1024 * 1024))
    assert len(bomb) < 1024 * 1024
    with pytest.raises(RemoteProtocolError, match="inflates past"):
        decompress_body(bomb, 1024 * 1024)
    with pytest.raises(RemoteProtocolError, match="truncated"):
        decompress_body(compress_body(b"x" * 1000)[:-4], 1024)
    with pytest.raises(RemoteProtocolError, match="undecodable"):
        decompress_body(b"not zlib", 1024)
    assert decompress_body(compress_body(b"abc"), 3) == b"abc"


class FailingOuterAPI:
    def __init__(self) -> None:
        self.calls: Counter[str | None] = Counter()  # name server (None: all) -> calls

    async def register_broker_all(self, wire: dict[str, object],
                                  ha_server_addr: str | None = None,
                                  addrs: list[str] | None = None) -> int:
        for addr in addrs or [None]:
            self.calls[addr] += 1
        raise LocalProtocolError("frame of 17000000 bytes exceeds 16777216")


async def test_register_loop_survives_and_backs_off(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    c = BrokerController(config(tmp_path))
    c._register_guard.log = log = FakeLog()
    logs = {}
    for addr, guard in c._register_guards.items():
        guard.log = logs[addr] = FakeLog()
    api = FailingOuterAPI()
    c.outer_api = api  # type: ignore[assignment]
    await c.register_broker_all()  # the start-up registration: logged, not raised
    assert api.calls == {None: 1} and len(log.lines) == 1
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c._register_loop)
        for _ in range(200):  # a flood of topic changes while registration fails
            c.trigger_register()
            await trio.sleep(0.05)
        await trio.sleep(120)
        nursery.cancel_scope.cancel()
    # one loop per name server, each at most one try per back-off, then once per period
    assert set(logs) == {"127.0.0.1:1", "127.0.0.1:2"}
    for addr, ns_log in logs.items():
        assert 10 <= api.calls[addr] <= 40
        assert ns_log.lines[0][1] == "register with name servers failed"
        assert isinstance(ns_log.lines[0][2]["exc_info"], LocalProtocolError)
        assert len(ns_log.lines) <= 4


async def test_housekeeping_survives_a_failing_notification(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    c = BrokerController(config(tmp_path))
    calls = 0

    def scan(now: float, expired: float) -> list[str]:
        nonlocal calls
        calls += 1
        raise RuntimeError("table corrupted")

    c.consumer_manager.scan_not_active = scan  # type: ignore[method-assign]
    with trio.move_on_after(100):
        await c._housekeeping_loop()
    assert calls >= 8
