"""The broker's topic persist task: admins answered once their change is
journaled, topics created on the fly journaled soon after, in group commits,
never with an fsync on the event loop."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

import broker.controller
import broker.persist
from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.topic_config_manager import TopicConfigManager
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from tests.broker.disk_counter import DiskCounter
from tests.broker.fakes import FakeConn
from tests.waits import wait_until


class CheckedConn(FakeConn):
    """A connection whose answers must not come before ``disk`` holds ``seq``."""

    def __init__(self, disk: DiskCounter, seq: int) -> None:
        super().__init__()
        self.disk, self.seq = disk, seq

    def send_response(self, cmd: RemotingCommand) -> None:
        assert self.disk.appended >= self.seq, "answered before the change was on disk"
        super().send_response(cmd)


def quiet(c: BrokerController) -> BrokerController:
    c.topic_config_manager.log = c.topic_config_manager.log.bind()
    c.topic_config_manager.log.info = lambda *a, **k: None  # type: ignore[method-assign]
    c.subscription_group_manager.log = c.subscription_group_manager.log.bind()
    c.subscription_group_manager.log.info = lambda *a, **k: None  # type: ignore[method-assign]
    return c


def config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(store_path_root_dir=str(tmp_path), maped_file_size_commit_log=1 << 20,
                        maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64,
                        max_index_num=256)


async def test_admin_changes_are_answered_once_journaled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = quiet(BrokerController(config(tmp_path)))
    await trio.to_thread.run_sync(c._load)
    disk = DiskCounter(monkeypatch)
    table = c._handler_table()
    create, _ = table.lookup(RequestCode.UPDATE_AND_CREATE_TOPIC)
    delete, _ = table.lookup(RequestCode.DELETE_TOPIC_IN_BROKER)
    assert create is not None and delete is not None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c._topic_persist_loop)
            conns = []
            for i in range(200):
                conn = CheckedConn(disk, i + 1)
                fields = {"topic": f"Admin{i}", "readQueueNums": 4, "writeQueueNums": 4}
                cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
                assert create(conn, cmd) is None  # answered later, once on disk
                conns.append(conn)
            with trio.fail_after(10):
                for conn in conns:
                    await conn.wait_sent(1)
            assert all(conn.sent[0].code == ResponseCode.SUCCESS for conn in conns)
            assert disk.appends == 1  # 200 creations, one group commit
            gone = CheckedConn(disk, 201)
            cmd = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Admin7"})
            assert delete(gone, cmd) is None
            with trio.fail_after(10):
                await gone.wait_sent(1)
            assert gone.sent[0].code == ResponseCode.SUCCESS
            nursery.cancel_scope.cancel()
        assert disk.snapshots == 0 and disk.fsyncs_on_loop == 0
        fresh = TopicConfigManager(c.config)
        fresh.load()
        assert {f"Admin{i}" for i in range(200)} - set(fresh.table) == {"Admin7"}
    finally:
        c._persist_and_close()


async def test_first_heartbeats_of_new_groups_journal_their_retry_topics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = quiet(BrokerController(config(tmp_path)))
    await trio.to_thread.run_sync(c._load)
    disk = DiskCounter(monkeypatch)
    heart_beat, _ = c._handler_table().lookup(RequestCode.HEART_BEAT)
    assert heart_beat is not None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c._topic_persist_loop)
            for batch in range(10):
                for i in range(100):
                    group = f"group-{batch}-{i}"
                    body = pack_body({"clientID": f"client-{group}", "producerDataSet": [],
                                      "consumerDataSet": [{
                                          "groupName": group, "messageModel": "CLUSTERING",
                                          "subscriptionDataSet": [{"topic": "T",
                                                                   "subString": "*"}]}]})
                    r = heart_beat(FakeConn(), RemotingCommand.request(RequestCode.HEART_BEAT,
                                                                       body=body))
                    assert r is not None and r.code == ResponseCode.SUCCESS, r
                await trio.testing.wait_all_tasks_blocked()
            tcm = c.topic_config_manager
            await wait_until(lambda: tcm.durable_seq >= tcm.seq, 10, "the topic journal durable",
                             interval=0.01)
            nursery.cancel_scope.cancel()
        assert disk.appended >= 1000 and disk.appends <= 20
        assert disk.snapshots == 0 and disk.fsyncs_on_loop == 0
        fresh = TopicConfigManager(c.config)
        fresh.load()
        assert all(f"%RETRY%group-{b}-{i}" in fresh.table for b in range(10) for i in range(100))
    finally:
        c._persist_and_close()


async def test_a_failing_disk_answers_admins_with_an_error_then_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # real time (the writes run in worker threads): a short wait for durability
    monkeypatch.setattr(broker.controller, "TOPIC_DURABLE_TIMEOUT_S", 0.3)
    c = quiet(BrokerController(config(tmp_path)))
    c._load()
    real_append = broker.persist.TableJournal.append
    broken = True

    def append(journal: broker.persist.TableJournal, data: bytes, count: int) -> None:
        if broken:
            raise OSError(28, "No space left on device")
        real_append(journal, data, count)

    real_write = broker.persist.atomic_write_bytes

    def write(path: Path, data: bytes) -> None:
        if broken:
            raise OSError(28, "No space left on device")
        real_write(path, data)

    monkeypatch.setattr(broker.persist.TableJournal, "append", append)
    monkeypatch.setattr(broker.persist, "atomic_write_bytes", write)
    create, _ = c._handler_table().lookup(RequestCode.UPDATE_AND_CREATE_TOPIC)
    assert create is not None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c._topic_persist_loop)
            conn = FakeConn()
            cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                          {"topic": "Late", "readQueueNums": 1,
                                           "writeQueueNums": 1})
            assert create(conn, cmd) is None
            with trio.fail_after(30):
                await conn.wait_sent(1)
            assert conn.sent[0].code == ResponseCode.SYSTEM_ERROR
            assert "not confirmed on disk" in (conn.sent[0].remark or "")
            broken = False  # the disk is back: the next try writes it
            tcm = c.topic_config_manager
            await wait_until(lambda: tcm.durable_seq >= tcm.seq, 30, "the topic journal durable")
            nursery.cancel_scope.cancel()
        fresh = TopicConfigManager(c.config)
        fresh.load()
        assert "Late" in fresh.table
    finally:
        c._persist_and_close()
