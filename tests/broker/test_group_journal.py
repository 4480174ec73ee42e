"""Subscription groups are journaled as topics are (broker/persist.py
JournaledTable, broker/journal_writer.py): an admin's change is answered only
once it is on disk, many changes share one append and one fsync, fsyncs run
off the event loop, and a restart finds snapshot + journal."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio
import trio.testing

import broker.persist
from broker.config import BrokerConfig
from broker.controller import TOPIC_DURABLE_TIMEOUT_S, BrokerController
from broker.journal_writer import JournalWriter
from broker.persist import JournalBatch, JournaledSnapshot
from broker.subscription_group_manager import SubscriptionGroupManager
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.route import DataVersion
from protocol.subscription_group import SubscriptionGroupConfig
from protocol.trio.service import Guard
from tests.broker.disk_counter import DiskCounter
from tests.broker.fakes import FakeConn
from tests.broker.test_topic_scale_persist import CheckedConn, config, quiet
from tests.waits import wait_until


def manager(tmp_path: Path) -> SubscriptionGroupManager:
    m = SubscriptionGroupManager(BrokerConfig(store_path_root_dir=str(tmp_path)))
    m.log = m.log.bind()
    m.log.info = lambda *a, **k: None  # type: ignore[method-assign]
    return m


def reload(m: SubscriptionGroupManager) -> SubscriptionGroupManager:
    again = SubscriptionGroupManager(m.config)
    again.load()
    return again


def drain(m: SubscriptionGroupManager) -> None:
    while (work := m.next_write()) is not None:
        work.write()
        m.written(work)


def test_snapshot_and_journal_reload(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.put(SubscriptionGroupConfig("a", retry_max_times=2))
    m.find("auto")  # created on the fly: journaled too
    m.persist()  # a snapshot holding both
    m.put(SubscriptionGroupConfig("b", consume_broadcast_enable=False))
    m.put(SubscriptionGroupConfig("a", retry_max_times=5))
    assert m.remove("auto") is not None and m.remove("auto") is None
    work = m.next_write()
    assert isinstance(work, JournalBatch) and len(work.seqs) == 3  # one append for three
    work.write()
    m.written(work)
    assert m.durable_seq == m.seq and m.next_write() is None
    again = reload(m)
    assert again.table == m.table and set(again.table) == {"a", "b"}
    assert again.table["a"].retry_max_times == 5
    assert not again.table["b"].consume_broadcast_enable
    assert again.data_version == m.data_version and again.seq == m.seq
    # the numbers go on after a restart: a later change is not skipped at the next load
    again.put(SubscriptionGroupConfig("c"))
    drain(again)
    assert set(reload(again).table) == {"a", "b", "c"}


def test_a_torn_journal_tail_is_ignored(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.put(SubscriptionGroupConfig("kept"))
    drain(m)
    with open(m.journal.path, "ab") as f:
        f.write(b"\x00\x00\x00\x40torn")  # a record cut short by a crash
    again = reload(m)
    assert set(again.table) == {"kept"}
    again.put(SubscriptionGroupConfig("next"))
    drain(again)
    assert set(reload(again).table) == {"kept", "next"}


def test_a_long_journal_is_compacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker.persist, "COMPACT_MIN_RECORDS", 10)
    m = manager(tmp_path)
    for i in range(30):
        m.put(SubscriptionGroupConfig("hot", retry_max_times=i % 17))
        drain(m)
    assert m.journal.records < 10  # rewritten as a snapshot along the way
    assert reload(m).table["hot"].retry_max_times == 29 % 17


def test_merge_from_a_master(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = manager(tmp_path)
    m.put(SubscriptionGroupConfig("mine"))
    drain(m)
    m.merge({}, m.data_version)  # nothing new: nothing to write
    assert m.next_write() is None
    m.merge({"g": SubscriptionGroupConfig("g", retry_max_times=3)}, DataVersion(5, 5))
    drain(m)
    again = reload(m)
    assert set(again.table) == {"mine", "g"} and again.data_version == DataVersion(5, 5)
    monkeypatch.setattr(broker.persist, "COMPACT_MIN_RECORDS", 2)
    many = {f"m{i}": SubscriptionGroupConfig(f"m{i}") for i in range(3)}
    m.merge(many, DataVersion(6, 6))
    assert isinstance(m.next_write(), JournaledSnapshot)  # a first copy: the whole table


async def test_writer_group_commits_and_answers_after_the_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = manager(tmp_path)
    disk = DiskCounter(monkeypatch)
    writer = JournalWriter(m, Guard(m.log, "persist groups"), 10, "late")
    answered: list[tuple[int, bool, int]] = []  # (seq, ok, records on disk then)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run)
        await trio.testing.wait_all_tasks_blocked()
        for i in range(100):
            seq = m.put(SubscriptionGroupConfig(f"g{i}", retry_max_times=i % 17))
            assert not writer.when_durable(
                seq, lambda ok, s=seq: answered.append((s, ok, disk.appended)))
        await wait_until(lambda: len(answered) == 100, 10, "every change answered",
                         interval=0.01)
        assert writer.when_durable(m.seq, lambda ok: None)  # on disk: at once
        nursery.cancel_scope.cancel()
    assert all(ok and on_disk >= seq for seq, ok, on_disk in answered)
    assert disk.appends == 1 and disk.fsyncs_on_loop == 0
    assert len(reload(m).table) == 100


async def test_a_change_not_written_in_time_is_answered_not_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    m = manager(tmp_path)
    stuck = threading.Event()
    written = threading.Event()
    real_append = broker.persist.TableJournal.append

    def slow_append(journal: broker.persist.TableJournal, data: bytes, count: int) -> None:
        stuck.wait(30)  # a disk that does not answer (released below)
        real_append(journal, data, count)
        written.set()

    monkeypatch.setattr(broker.persist.TableJournal, "append", slow_append)
    writer = JournalWriter(m, Guard(m.log, "persist groups"), TOPIC_DURABLE_TIMEOUT_S, "late")
    answers: list[tuple[bool, float]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run)
        seq = m.put(SubscriptionGroupConfig("g"))
        assert not writer.when_durable(seq, lambda ok: answers.append((ok, trio.current_time())))
        await wait_until(lambda: answers, TOPIC_DURABLE_TIMEOUT_S + 5, "the late answer")
        assert answers == [(False, pytest.approx(TOPIC_DURABLE_TIMEOUT_S, abs=1))]
        stuck.set()
        # the append runs in real time in its thread while the mock clock jumps: wait
        # for it in real time, then for the writer to take its answer
        assert await trio.to_thread.run_sync(written.wait, 30), "the append never finished"
        await wait_until(lambda: m.durable_seq >= seq, 60, "the change on disk")
        nursery.cancel_scope.cancel()
    assert "g" in reload(m).table  # written once the disk answered


async def test_the_broker_answers_group_changes_once_journaled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = quiet(BrokerController(config(tmp_path)))
    await trio.to_thread.run_sync(c._load)
    disk = DiskCounter(monkeypatch)
    table = c._handler_table()
    update, _ = table.lookup(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
    delete, _ = table.lookup(RequestCode.DELETE_SUBSCRIPTIONGROUP)
    assert update is not None and delete is not None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.group_writer.run)
            conns = []
            for i in range(200):
                conn = CheckedConn(disk, i + 1)
                body = pack_body({"groupName": f"G{i}", "retryMaxTimes": i % 17})
                cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                              body=body)
                assert update(conn, cmd) is None  # answered later, once on disk
                conns.append(conn)
            with trio.fail_after(10):
                for conn in conns:
                    await conn.wait_sent(1)
            assert all(conn.sent[0].code == ResponseCode.SUCCESS for conn in conns)
            assert disk.appends == 1  # 200 changes, one group commit
            gone = CheckedConn(disk, 201)
            cmd = RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                          {"groupName": "G7"})
            assert delete(gone, cmd) is None
            with trio.fail_after(10):
                await gone.wait_sent(1)
            assert gone.sent[0].code == ResponseCode.SUCCESS
            missing = FakeConn()
            r = delete(missing, RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                                        {"groupName": "G7"}))
            assert r is not None and r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            nursery.cancel_scope.cancel()
        assert disk.snapshots == 0 and disk.fsyncs_on_loop == 0
        fresh = SubscriptionGroupManager(c.config)
        fresh.load()
        assert {f"G{i}" for i in range(200)} - set(fresh.table) == {"G7"}
        assert fresh.table["G16"].retry_max_times == 16
    finally:
        c._persist_and_close()
