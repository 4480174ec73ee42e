"""POP's remoting adapter and trio edge without sockets: long polling, its
bound, the log writes' group commit, the revive loop, hostile headers; a
MockClock drives time (the in-flight log is a real file in a temp dir)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.pop.core import HandleCodec, PopTable
from broker.pop_processor import PopMessageProcessor, PopRunner
from broker.service.pop import PopService, ReviveResult
from broker.store import DefaultMessageStore
from broker.store.pop_log import PopLog
from protocol.batch_ack import decode_results
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import ChangeInvisibleTimeResponseHeader, PopMessageResponseHeader
from protocol.route import TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig
from tests.broker.fakes import FakeConn
from tests.broker.service.test_pop import GROUP, TOPIC, Groups, Offsets, Role, Settings, Topics
from tests.broker.store.helpers import inner, make_config, open_store


@dataclass
class Edge:
    store: DefaultMessageStore
    svc: PopService
    runner: PopRunner
    proc: PopMessageProcessor
    pop_log: PopLog
    writes: list[int]
    revived: list[int]

    def put(self, n: int = 1) -> None:
        for i in range(n):
            assert self.store.put_message(inner(TOPIC, 0, b"m%d" % i, tags="A")).ok


@pytest.fixture
def edge(tmp_path: Path) -> Iterator[Edge]:
    store = open_store(make_config(tmp_path / "store", cl_size=1 << 16, cq_entries=100))
    revived: list[int] = []

    def revive(rec: Any) -> ReviveResult:
        revived.append(rec.queue_offset)
        return ReviveResult.DONE

    svc = PopService(Settings(), Role(), Groups({GROUP: SubscriptionGroupConfig(GROUP)}),
                     Topics({TOPIC: TopicConfig(TOPIC, 1, 1)}), store, Offsets(),
                     PopTable(100, 100), HandleCodec(b"k" * 32, "b"), revive)
    pop_log = PopLog(tmp_path / "pop")
    pop_log.load()
    writes: list[int] = []
    real_write = pop_log.write

    def counted(frames: bytes, checkpoint: Any = None) -> None:
        writes.append(len(frames))
        real_write(frames, checkpoint)

    pop_log.write = counted  # type: ignore[method-assign]
    runner = PopRunner(svc, pop_log, checkpoint_bytes=1 << 20, revive_interval_ms=1000,
                       now_ms=lambda: int(trio.current_time() * 1000))
    store.dispatch_listeners.append(runner.notify_message_arriving)
    proc = PopMessageProcessor(svc, runner, max_polling=1, max_suspend_ms=lambda: 15_000)
    yield Edge(store, svc, runner, proc, pop_log, writes, revived)
    pop_log.close()
    store.shutdown()


def pop_cmd(poll: int = 0, invisible: int = 10_000) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.POP_MESSAGE, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": "-1", "maxMsgNums": "8",
        "invisibleTime": str(invisible), "pollTime": str(poll), "initMode": "0"})


def handle_cmd(code: int, handle: str, **extra: str) -> RemotingCommand:
    return RemotingCommand.request(code, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "extraInfo": handle,
        "offset": "0", **extra})


async def test_a_pop_waits_for_a_message_and_acks_are_on_disk(edge: Edge) -> None:
    conn = FakeConn()
    answers: list[RemotingCommand] = []
    async with trio.open_nursery() as nursery:
        async def held() -> None:
            answers.append(await edge.proc.pop_message(conn, pop_cmd(poll=5_000)))  # type: ignore[arg-type]
        nursery.start_soon(held)
        await trio.testing.wait_all_tasks_blocked()
        assert not answers and edge.runner.held == 1
        edge.put()  # dispatch wakes the held pop
    (resp,) = answers
    assert resp.code == ResponseCode.SUCCESS
    handle = PopMessageResponseHeader.from_fields(resp.ext_fields).receipt_handles
    assert edge.writes and PopLog(edge.pop_log.directory).load()[0]["k"] == "pop"
    ack = await edge.proc.ack_message(conn, handle_cmd(RequestCode.ACK_MESSAGE, handle))  # type: ignore[arg-type]
    assert ack.code == ResponseCode.SUCCESS
    # the first (empty) pop noted where the queue starts; then the pop, the ack
    assert [e["k"] for e in PopLog(edge.pop_log.directory).load()] == ["pop", "pop", "ack"]
    again = await edge.proc.ack_message(conn, handle_cmd(RequestCode.ACK_MESSAGE, handle))  # type: ignore[arg-type]
    assert again.code == ResponseCode.NO_MESSAGE
    assert again.remark is not None and again.remark.startswith("INVALID_RECEIPT_HANDLE")


async def test_a_held_pop_ends_at_its_poll_time_and_the_bound_answers_full(
        edge: Edge, autojump_clock: trio.testing.MockClock) -> None:
    conn = FakeConn()
    answers: list[RemotingCommand] = []
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        async def held() -> None:
            answers.append(await edge.proc.pop_message(conn, pop_cmd(poll=5_000)))  # type: ignore[arg-type]
        nursery.start_soon(held)
        await trio.testing.wait_all_tasks_blocked()
        full = await edge.proc.pop_message(conn, pop_cmd(poll=5_000))  # type: ignore[arg-type]
        assert full.code == ResponseCode.POLLING_FULL and "maxPopPollingSize" in str(full.remark)
    assert answers[0].code == ResponseCode.PULL_NOT_FOUND
    assert trio.current_time() - started == pytest.approx(5.0, abs=0.01)
    assert edge.runner.held == 0


async def test_concurrent_changes_share_one_write(edge: Edge) -> None:
    edge.put(4)
    conn = FakeConn()
    resp = await edge.proc.pop_message(conn, pop_cmd())  # type: ignore[arg-type]
    handles = PopMessageResponseHeader.from_fields(resp.ext_fields).receipt_handles.split()
    before = len(edge.writes)
    async with trio.open_nursery() as nursery:
        for h in handles:
            nursery.start_soon(edge.proc.ack_message, conn,
                               handle_cmd(RequestCode.ACK_MESSAGE, h))
    assert len(edge.writes) - before <= 2  # the first ack's write, then all the others'
    assert len(PopLog(edge.pop_log.directory).load()) == 1 + 4


async def test_change_invisible_answers_the_new_handle(edge: Edge) -> None:
    edge.put()
    conn = FakeConn()
    resp = await edge.proc.pop_message(conn, pop_cmd())  # type: ignore[arg-type]
    handle = PopMessageResponseHeader.from_fields(resp.ext_fields).receipt_handles
    changed = await edge.proc.change_invisible_time(conn, handle_cmd(  # type: ignore[arg-type]
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME, handle, invisibleTime="20000"))
    assert changed.code == ResponseCode.SUCCESS
    new = ChangeInvisibleTimeResponseHeader.from_fields(changed.ext_fields).receipt_handle
    assert new and new != handle


async def test_the_revive_loop_ticks(edge: Edge, autojump_clock: trio.testing.MockClock) -> None:
    edge.put(2)
    await edge.proc.pop_message(FakeConn(), pop_cmd(invisible=3_000))  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(edge.runner.run)
        await trio.sleep(2.5)
        assert edge.revived == []
        await trio.sleep(1)
        assert edge.revived == [0, 1]
        nursery.cancel_scope.cancel()
    assert [e["k"] for e in PopLog(edge.pop_log.directory).load()] == ["pop", "rev", "rev"]


@pytest.mark.parametrize("fields", [
    {"extraInfo": "x" * 1025},
    {"queueId": "zero"},
    {"consumerGroup": "bad group!"},
])
async def test_hostile_headers_raise_a_protocol_error(edge: Edge, fields: dict[str, str]
                                                      ) -> None:
    cmd = handle_cmd(RequestCode.ACK_MESSAGE, "h")
    cmd.ext_fields.update(fields)
    with pytest.raises(RemoteProtocolError):
        await edge.proc.ack_message(FakeConn(), cmd)  # type: ignore[arg-type]


async def test_past_the_checkpoint_size_the_log_is_rewritten_as_the_table(edge: Edge) -> None:
    edge.put(6)
    conn = FakeConn()
    resp = await edge.proc.pop_message(conn, pop_cmd())  # type: ignore[arg-type]
    edge.runner.checkpoint_bytes = edge.pop_log.size + 100  # two acks' frames past it
    handles = PopMessageResponseHeader.from_fields(resp.ext_fields).receipt_handles.split()
    for h in handles[:4]:
        await edge.proc.ack_message(conn, handle_cmd(RequestCode.ACK_MESSAGE, h))  # type: ignore[arg-type]
    entries = PopLog(edge.pop_log.directory).load()
    assert [e["k"] for e in entries].count("ack") < 4  # rewritten at least once
    table = PopTable(100, 100)
    for e in entries:
        table.apply(e)
    assert table.records == edge.svc.table.records and table.offsets == edge.svc.table.offsets
    assert sorted(k[3] for k in table.records) == [4, 5]


def async_runner(edge: Edge, syncs: list[int]) -> PopRunner:
    """The edge's service behind an ASYNC_FLUSH runner; ``syncs`` counts fsyncs."""
    real_sync = edge.pop_log.sync

    def counted() -> None:
        syncs.append(edge.pop_log.size)
        real_sync()

    edge.pop_log.sync = counted  # type: ignore[method-assign]
    runner = PopRunner(edge.svc, edge.pop_log, checkpoint_bytes=1 << 20,
                       revive_interval_ms=86_400_000, sync_flush=False, flush_interval_ms=500,
                       now_ms=lambda: int(trio.current_time() * 1000))
    edge.proc.runner = runner
    return runner


def handles_of(resp: RemotingCommand) -> list[str]:
    return PopMessageResponseHeader.from_fields(resp.ext_fields).receipt_handles.split()


async def test_async_flush_answers_once_written_and_the_flush_task_fsyncs(
        edge: Edge, autojump_clock: trio.testing.MockClock) -> None:
    syncs: list[int] = []
    runner = async_runner(edge, syncs)
    edge.put(3)
    conn = FakeConn()
    handles = handles_of(await edge.proc.pop_message(conn, pop_cmd()))  # type: ignore[arg-type]
    for h in handles:
        ack = await edge.proc.ack_message(conn, handle_cmd(RequestCode.ACK_MESSAGE, h))  # type: ignore[arg-type]
        assert ack.code == ResponseCode.SUCCESS
    # answered with no fsync (and no thread): the entries are in the file already
    assert syncs == [] and edge.writes == [] and runner.synced == 0
    assert [e["k"] for e in PopLog(edge.pop_log.directory).load()] == ["pop", "ack", "ack", "ack"]
    assert runner.written == edge.svc.journal.seq
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        await nursery.start(runner.run)
        await trio.sleep(0.4)
        assert syncs == []  # not before flushIntervalCommitLog
        while runner.synced < runner.written:  # the fsync runs in a worker thread
            await trio.sleep(0.01)
        assert trio.current_time() - start >= 0.5
        assert syncs == [edge.pop_log.size]
        assert edge.pop_log.synced_size == edge.pop_log.size
        await trio.sleep(2)
        assert len(syncs) == 1  # nothing new written: no fsync
        nursery.cancel_scope.cancel()


async def test_async_flush_power_loss_redelivers_unsynced_acks_and_loses_nothing(
        edge: Edge, tmp_path: Path) -> None:
    """A power loss keeps the log up to its last fsync: the acks after it are
    forgotten, so those messages are delivered again; every message is either
    acked before the fsync or in flight (none lost, none hidden for good)."""
    runner = async_runner(edge, [])
    edge.put(6)
    conn = FakeConn()
    handles = handles_of(await edge.proc.pop_message(conn, pop_cmd(invisible=10_000)))  # type: ignore[arg-type]
    for h in handles[:2]:
        await edge.proc.ack_message(conn, handle_cmd(RequestCode.ACK_MESSAGE, h))  # type: ignore[arg-type]
    await runner.flush()  # the background fsync: the pop and two acks are durable
    for h in handles[2:5]:
        ack = await edge.proc.ack_message(conn, handle_cmd(RequestCode.ACK_MESSAGE, h))  # type: ignore[arg-type]
        assert ack.code == ResponseCode.SUCCESS
    kept = edge.pop_log.synced_size
    assert kept < edge.pop_log.size
    with open(edge.pop_log.path, "r+b") as f:  # what the disk held at the power loss
        f.truncate(kept)
    table = PopTable(100, 100)
    for e in PopLog(edge.pop_log.directory).load():
        table.apply(e)
    assert table.offset(GROUP, TOPIC, 0) == 6  # the pop survived: no message popped twice now
    in_flight = sorted(k[3] for k in table.records)
    assert in_flight == [2, 3, 4, 5]  # the three forgotten acks and the un-acked one
    assert [r.queue_offset for r in table.due(10**15, 100)] == [2, 3, 4, 5]  # redelivered


async def test_async_flush_checkpoint_holds_appends_until_the_new_log_is_in_place(
        edge: Edge) -> None:
    # real time: the rewrite is a worker thread, which an autojump clock would
    # jump past (to the revive loop's next tick)
    runner = async_runner(edge, [])
    edge.put(6)
    conn = FakeConn()
    handles = handles_of(await edge.proc.pop_message(  # type: ignore[arg-type]
        conn, pop_cmd(invisible=12 * 3600 * 1000)))
    runner.checkpoint_bytes = edge.pop_log.size + 100
    for h in handles[:4]:
        await edge.proc.ack_message(conn, handle_cmd(RequestCode.ACK_MESSAGE, h))  # type: ignore[arg-type]
    assert edge.pop_log.size > runner.checkpoint_bytes and edge.writes == []
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        # the acks woke the flush task: the rewrite runs at once (appends wait on it)
        with trio.fail_after(5):
            while not edge.writes:
                await trio.sleep(0.001)
        await edge.proc.ack_message(conn, handle_cmd(RequestCode.ACK_MESSAGE, handles[4]))  # type: ignore[arg-type]
        nursery.cancel_scope.cancel()
    table = PopTable(100, 100)
    for e in PopLog(edge.pop_log.directory).load():
        table.apply(e)
    assert sorted(k[3] for k in table.records) == [5]
    assert table.records == edge.svc.table.records


def batch_cmd(handles: list[str], body: bytes | None = None) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.BATCH_ACK_MESSAGE, {"consumerGroup": GROUP, "topic": TOPIC},
        body=body if body is not None else "\n".join(handles).encode())


async def test_batch_ack_acks_with_one_write_and_says_which_handles_it_refused(
        edge: Edge) -> None:
    edge.put(4)
    conn = FakeConn()
    handles = handles_of(await edge.proc.pop_message(conn, pop_cmd()))  # type: ignore[arg-type]
    await edge.proc.ack_message(conn, handle_cmd(RequestCode.ACK_MESSAGE, handles[0]))  # type: ignore[arg-type]
    before = len(edge.writes)
    resp = await edge.proc.batch_ack_message(conn, batch_cmd(handles + ["1.AAAA.AAAA"]))  # type: ignore[arg-type]
    assert resp.code == ResponseCode.SUCCESS
    results = decode_results(resp.body, 5)
    assert results[1:4] == [None, None, None]
    assert results[0] is not None and results[0].startswith("INVALID_RECEIPT_HANDLE: ")
    assert "no longer in flight" in results[0]
    assert results[4] is not None and "not issued" in results[4]
    assert len(edge.writes) - before == 1
    assert len(edge.svc.table) == 0
    assert [e["k"] for e in PopLog(edge.pop_log.directory).load()].count("ack") == 4


@pytest.mark.parametrize("body", [b"", b"\xff\xfe", b"a\n\nb", b"h\n" * 1100,
                                  b"x" * 600])
async def test_hostile_batch_ack_bodies_are_refused_with_a_reason(edge: Edge, body: bytes
                                                                  ) -> None:
    resp = await edge.proc.batch_ack_message(FakeConn(), batch_cmd([], body))  # type: ignore[arg-type]
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark is not None and resp.remark.startswith("bad batch ack body")


async def test_batch_ack_of_an_unknown_group_is_refused_whole(edge: Edge) -> None:
    cmd = batch_cmd(["h"])
    cmd.ext_fields["consumerGroup"] = "no-such-group"
    resp = await edge.proc.batch_ack_message(FakeConn(), cmd)  # type: ignore[arg-type]
    assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
