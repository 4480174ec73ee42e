"""SlaveSynchronize: a master's tables are checked before a slave takes anything
from them; what it takes never loses the slave's state (merged topics and
groups, offsets only forward unless the master counted a reset, the slave's
newer offsets sent back); an untrusted master is not synced from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import trio
import trio.testing

from broker.config import BrokerConfig, BrokerRole
from broker.consumer_offset_manager import ConsumerOffsetManager
from broker.controller import BrokerController
from broker.slave_synchronize import (
    OffsetPush,
    SlaveSynchronize,
    changed_entries,
    merge_delay_offsets,
    merge_offsets,
    merge_offsets_from_slave,
    parse_delay_offsets,
    parse_groups,
    parse_offsets,
    parse_reset_versions,
    parse_topics,
)
from broker.subscription_group_manager import SubscriptionGroupConfig
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import UpdateConsumerOffsetRequestHeader
from protocol.route import DataVersion, TopicConfig
from tests.broker.fakes import call


def test_tables_round_trip() -> None:
    cfg = TopicConfig("T", 4, 4)
    topics, version = parse_topics(
        {"topicConfigTable": {"T": cfg.to_dict()}, "dataVersion": {"timestamp": 5, "counter": 2}},
        1024)
    assert topics == {"T": cfg} and version == DataVersion(5, 2)
    assert parse_offsets({"offsetTable": {"T@g": {"0": 7, "3": 9}}}) == {"T@g": {0: 7, 3: 9}}
    assert parse_delay_offsets({"offsetTable": {"1": 4, "18": 0}}) == {1: 4, 18: 0}
    groups, gv = parse_groups({"subscriptionGroupTable": {"g": {"groupName": "g"}},
                               "dataVersion": {"timestamp": 1, "counter": 1}})
    assert list(groups) == ["g"] and gv == DataVersion(1, 1)


@pytest.mark.parametrize("parse,body", [
    (lambda b: parse_topics(b, 1024), {"topicConfigTable": {"a/../b": {"topicName": "a/../b"}}}),
    (lambda b: parse_topics(b, 1024), {"topicConfigTable": {"T": {"topicName": "T",
                                                                  "writeQueueNums": 2**31 - 1}}}),
    (lambda b: parse_topics(b, 1024), {"topicConfigTable": {"T": {"topicName": "U"}}}),
    (lambda b: parse_topics(b, 1024), ["not", "a", "map"]),
    (parse_offsets, {"offsetTable": {"no-separator": {"0": 1}}}),
    (parse_offsets, {"offsetTable": {"T@g\x00": {"0": 1}}}),
    (parse_offsets, {"offsetTable": {"T@g": {"0": -1}}}),
    (parse_offsets, {"offsetTable": {"T@g": {"x": 1}}}),
    (parse_delay_offsets, {"offsetTable": {"0": 1}}),
    (parse_delay_offsets, {"offsetTable": {"1": "x"}}),
    (parse_groups, {"subscriptionGroupTable": {"g": {"groupName": "h"}}}),
    (parse_groups, {"subscriptionGroupTable": {"a b": {"groupName": "a b"}}}),
    (parse_reset_versions, {"resetVersions": {"no-separator": 1}}),
    (parse_reset_versions, {"resetVersions": {"T@g": -1}}),
    (parse_reset_versions, {"resetVersions": {"T@g": "1"}}),
    (parse_reset_versions, {"resetVersions": {"T@g": True}}),
    (parse_reset_versions, {"resetVersions": ["T@g"]}),
])
def test_bad_master_tables_are_refused(parse: Any, body: Any) -> None:
    with pytest.raises(RemoteProtocolError):
        parse(body)


# ---- the merge rules (pure) -----------------------------------------------------------


def test_reset_versions_are_optional() -> None:
    assert parse_reset_versions({"offsetTable": {}}) == {}  # an older master, RocketMQ's
    assert parse_reset_versions({"resetVersions": {"T@g": 3}}) == {"T@g": 3}


def test_topics_and_groups_merge_the_masters_entries_and_keep_the_slaves() -> None:
    mine = {"Both": TopicConfig("Both", 4, 4), "Mine": TopicConfig("Mine", 1, 1),
            "Same": TopicConfig("Same", 2, 2)}
    theirs = {"Both": TopicConfig("Both", 8, 8), "Theirs": TopicConfig("Theirs", 2, 2),
              "Same": TopicConfig("Same", 2, 2)}
    assert changed_entries(mine, theirs) == {"Both": TopicConfig("Both", 8, 8),
                                             "Theirs": TopicConfig("Theirs", 2, 2)}
    assert changed_entries(mine, {}) == {}  # an empty master changes nothing
    groups = {"g": SubscriptionGroupConfig("g"), "h": SubscriptionGroupConfig("h")}
    assert changed_entries(groups, {"g": SubscriptionGroupConfig("g", retry_max_times=3)}) == {
        "g": SubscriptionGroupConfig("g", retry_max_times=3)}


def test_offsets_move_forward_only_and_the_slaves_newer_ones_go_to_the_master() -> None:
    mine = {"T@g": {0: 10, 1: 50, 2: 7}, "Mine@g": {0: 3}}
    theirs = {"T@g": {0: 20, 1: 40, 3: 1}, "Theirs@g": {0: 9}}
    m = merge_offsets(mine, {}, theirs, {})
    assert m.updates == {"T@g": {0: 20, 1: 50, 2: 7, 3: 1}, "Theirs@g": {0: 9}}
    assert m.versions == {} and m.resets_taken == 0
    assert m.to_master == [OffsetPush("T", "g", 1, 50, 0), OffsetPush("T", "g", 2, 7, 0),
                           OffsetPush("Mine", "g", 0, 3, 0)]
    # equal tables: nothing to do
    same = merge_offsets(theirs, {"T@g": 2}, theirs, {"T@g": 2})
    assert (same.updates, same.versions, same.to_master) == ({}, {}, [])


def test_an_empty_master_empties_nothing() -> None:
    mine = {"T@g": {0: 10}}
    m = merge_offsets(mine, {"T@g": 1}, {}, {})
    assert m.updates == {}  # the offsets stay
    assert m.versions == {"T@g": 0}  # the master's (lost) counter, so its next reset counts
    assert m.to_master == [OffsetPush("T", "g", 0, 10, 0)]


def test_a_reset_on_the_master_is_taken_even_downwards() -> None:
    mine = {"T@g": {0: 500, 1: 600}, "U@g": {0: 5}}
    theirs = {"T@g": {0: 0}, "U@g": {0: 4}}
    m = merge_offsets(mine, {"T@g": 1}, theirs, {"T@g": 2})
    assert m.updates == {"T@g": {0: 0}}  # as the master has it: queue 1 goes too
    assert m.versions == {"T@g": 2} and m.resets_taken == 1
    assert m.to_master == [OffsetPush("U", "g", 0, 5, 0)]  # U not reset: forward, sent
    # a reset (deleted topic) leaving the master without the key: it goes here too
    gone = merge_offsets(mine, {}, {"U@g": {0: 5}}, {"T@g": 1})
    assert gone.updates == {"T@g": None} and gone.versions == {"T@g": 1}
    assert gone.to_master == []
    # the counter seen once: afterwards the forward rule again
    after = merge_offsets({"T@g": {0: 3}}, {"T@g": 2}, {"T@g": {0: 1}}, {"T@g": 2})
    assert after.updates == {} and after.to_master == [OffsetPush("T", "g", 0, 3, 2)]


def test_a_master_restored_from_its_slave_takes_the_larger_offsets_and_counters() -> None:
    mine = {"T@g": {0: 10, 1: 50}}
    theirs = {"T@g": {0: 20, 1: 40}, "U@g": {0: 3}}
    m = merge_offsets_from_slave(mine, {"T@g": 1}, theirs, {"T@g": 3, "U@g": 0})
    assert m.updates == {"T@g": {0: 20, 1: 50}, "U@g": {0: 3}}
    assert m.versions == {"T@g": 3} and m.to_master == []
    assert merge_offsets_from_slave(mine, {"T@g": 4}, {}, {"T@g": 3}).versions == {}
    # reset on this master since the slave copied the key: the slave's higher
    # offsets are from before the reset and stay out
    assert merge_offsets_from_slave(mine, {"T@g": 4}, theirs, {"T@g": 3}).updates == {
        "U@g": {0: 3}}


def test_pushes_are_capped_per_round() -> None:
    mine = {"T@g": {q: 100 for q in range(25)}}
    m = merge_offsets(mine, {}, {"T@g": {q: 1 for q in range(25)}}, {}, max_pushes=10)
    assert len(m.to_master) == 10 and m.more_to_master == 15
    assert [p.queue_id for p in m.to_master] == list(range(10))


def test_delay_offsets_keep_the_larger() -> None:
    assert merge_delay_offsets({1: 5, 2: 9, 3: 1}, {1: 7, 2: 3}) == {1: 7, 2: 9, 3: 1}
    assert merge_delay_offsets({1: 5}, {}) == {1: 5}


@pytest.mark.parametrize("bulk", [False, True])
def test_merged_topics_are_journaled_and_the_slaves_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bulk: bool) -> None:
    """A few changes: one journal record each (registrations stay incremental);
    many: a whole-table snapshot. Either way the slave's own topics stay."""
    import broker.topic_config_manager as tcm

    if bulk:
        monkeypatch.setattr(tcm, "COMPACT_MIN_RECORDS", 2)
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path))
    mgr = tcm.TopicConfigManager(cfg)
    mgr.put(TopicConfig("Mine", 1, 1))
    mgr.put(TopicConfig("Both", 1, 1))
    while (work := mgr.next_write()) is not None:
        work.write()
        mgr.written(work)
    seen = mgr.seq
    theirs = {"Both": TopicConfig("Both", 8, 8), "Theirs": TopicConfig("Theirs", 2, 2)}
    mgr.merge(changed_entries(mgr.table, theirs), DataVersion(7, 9))
    assert mgr.data_version == DataVersion(7, 9)
    changes = mgr.changes_since(seen)
    if bulk:
        assert changes is None  # a full registration next
    else:
        assert changes == (theirs, [])
    written = []
    while (work := mgr.next_write()) is not None:
        work.write()
        mgr.written(work)
        written.append(type(work).__name__)
    assert written == (["JournaledSnapshot"] if bulk else ["JournalBatch"])
    again = tcm.TopicConfigManager(cfg)
    again.load()
    assert {"Mine", "Both", "Theirs"} <= set(again.table)
    assert again.table["Both"] == TopicConfig("Both", 8, 8)
    assert again.data_version == DataVersion(7, 9)


def test_merged_groups_keep_the_slaves(tmp_path: Path) -> None:
    from broker.subscription_group_manager import SubscriptionGroupManager

    cfg = BrokerConfig(store_path_root_dir=str(tmp_path))
    sm = SubscriptionGroupManager(cfg)
    sm.update(SubscriptionGroupConfig("mine"))
    sm.dirty = False
    sm.merge({}, DataVersion(1, 1))  # an empty master
    assert set(sm.table) == {"mine"} and sm.data_version == DataVersion(1, 1) and sm.dirty
    sm.merge({"g": SubscriptionGroupConfig("g", retry_max_times=3)}, DataVersion(2, 2))
    sm.persist()
    again = SubscriptionGroupManager(cfg)
    again.load()
    assert set(again.table) == {"mine", "g"} and again.data_version == DataVersion(2, 2)


# ---- the reset counters (ConsumerOffsetManager) -------------------------------------


def offsets(tmp_path: Path, role: BrokerRole = BrokerRole.ASYNC_MASTER) -> ConsumerOffsetManager:
    return ConsumerOffsetManager(BrokerConfig(store_path_root_dir=str(tmp_path), broker_role=role,
                                              broker_id=0 if role != BrokerRole.SLAVE else 1))


def test_resets_are_counted_on_a_master(tmp_path: Path) -> None:
    om = offsets(tmp_path)
    om.commit_offset("g", "T", 0, 10)
    om.commit_offset("g", "T", 0, 20)
    assert om.reset_version("T", "g") == 0  # forward: a commit
    om.reset_offset("g", "T", 0, 30)  # an admin's, even forward
    assert om.reset_version("T", "g") == 1 and om.query_offset("g", "T", 0) == 30
    om.commit_offset("g", "T", 0, 25)  # a rewind (a seek, RocketMQ's reset tools)
    assert om.reset_version("T", "g") == 2
    om.commit_offset("g", "U", 0, 1)
    om.remove_topic("U")  # a deleted topic: its offsets go, counted
    assert om.query_offsets("g", "U") == {} and om.reset_version("U", "g") == 1
    assert om.to_wire()["resetVersions"] == {"T@g": 2, "U@g": 1}


def test_a_slave_does_not_count_rewinds(tmp_path: Path) -> None:
    om = offsets(tmp_path, BrokerRole.SLAVE)
    om.commit_offset("g", "T", 0, 10)
    om.commit_offset("g", "T", 0, 5)
    assert om.reset_version("T", "g") == 0 and om.query_offset("g", "T", 0) == 5


def test_increase_only_commits_move_forward_and_not_past_a_reset(tmp_path: Path) -> None:
    om = offsets(tmp_path)
    om.commit_offset("g", "T", 0, 100)
    assert not om.commit_forward("g", "T", 0, 90, 0)  # never back
    assert om.commit_forward("g", "T", 0, 150, 0) and om.query_offset("g", "T", 0) == 150
    assert om.commit_forward("g", "T", 1, 7, None)  # a queue the master has not
    om.reset_offset("g", "T", 0, 10)
    assert not om.commit_forward("g", "T", 0, 150, 0)  # decided before the reset
    assert om.query_offset("g", "T", 0) == 10
    assert om.commit_forward("g", "T", 0, 11, 1)


def test_counters_are_persisted_beside_the_offsets(tmp_path: Path) -> None:
    om = offsets(tmp_path)
    om.reset_offset("g", "T", 0, 4)
    om.persist()
    data = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert data == {"offsetTable": {"T@g": {"0": 4}}, "resetVersions": {"T@g": 1}}
    again = offsets(tmp_path)
    again.load()
    assert again.reset_versions == {"T@g": 1} and again.query_offset("g", "T", 0) == 4
    # an older broker's file: no counters
    (tmp_path / "config" / "consumerOffset.json").write_text('{"offsetTable": {"T@g": {"0": 4}}}')
    old = offsets(tmp_path)
    old.load()
    assert old.reset_versions == {} and old.query_offset("g", "T", 0) == 4


def test_an_admin_reset_is_counted_by_the_handler(tmp_path: Path) -> None:
    """UPDATE_CONSUMER_OFFSET: plain, adminReset (mqadmin resetOffsetByTime) and
    increaseOnly (a slave's) commits."""
    c = controller(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    try:
        def update(offset: int, **extra: Any) -> None:
            h = UpdateConsumerOffsetRequestHeader("g", "T", 0, offset, **extra)
            assert call(c, RequestCode.UPDATE_CONSUMER_OFFSET, h.to_fields()).code == \
                ResponseCode.SUCCESS

        om = c.consumer_offset_manager
        update(100)
        update(200, increase_only=True, reset_version=0)
        update(150, increase_only=True, reset_version=0)
        assert om.query_offset("g", "T", 0) == 200 and om.reset_version("T", "g") == 0
        update(10, admin_reset=True)
        assert om.query_offset("g", "T", 0) == 10 and om.reset_version("T", "g") == 1
        update(200, increase_only=True, reset_version=0)  # stale: decided before the reset
        assert om.query_offset("g", "T", 0) == 10
        update(5)  # a plain commit keeps today's behaviour: taken, even back
        assert om.query_offset("g", "T", 0) == 5
    finally:
        c._persist_and_close()


# ---- a round between two brokers in one process (no sockets) ------------------------


def controller(root: Path, role: BrokerRole) -> BrokerController:
    c = BrokerController(BrokerConfig(
        store_path_root_dir=str(root), broker_role=role,
        broker_id=1 if role == BrokerRole.SLAVE else 0, listen_port=0,
        maped_file_size_commit_log=1 << 20, maped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64, max_index_num=256))
    c._load()
    return c


class InProcessClient:
    """RemotingClient's ``invoke``, answered by the master's handlers."""

    def __init__(self, master: BrokerController) -> None:
        self.master = master
        self.requests: list[RemotingCommand] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.requests.append(cmd)
        return call(self.master, cmd.code, cmd.ext_fields, cmd.body)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerController, BrokerController]]:
    master = controller(tmp_path / "master", BrokerRole.ASYNC_MASTER)
    slave = controller(tmp_path / "slave", BrokerRole.SLAVE)
    try:
        yield master, slave
    finally:
        master._persist_and_close()
        slave._persist_and_close()


async def test_a_round_merges_and_sends_the_slaves_newer_offsets_back(
        pair: tuple[BrokerController, BrokerController]) -> None:
    master, slave = pair
    master.topic_config_manager.update(TopicConfig("T", 4, 4))
    master.subscription_group_manager.update(SubscriptionGroupConfig("g", retry_max_times=3))
    master.consumer_offset_manager.commit_offset("g", "T", 0, 10)
    master.consumer_offset_manager.commit_offset("g", "T", 1, 90)
    # the slave's own: a topic and a group the master lost, offsets committed here
    slave.topic_config_manager.update(TopicConfig("Lost", 2, 2))
    slave.subscription_group_manager.update(SubscriptionGroupConfig("lost"))
    slave.consumer_offset_manager.commit_offset("g", "T", 0, 70)
    slave.consumer_offset_manager.commit_offset("g", "Lost", 0, 5)
    client = InProcessClient(master)
    sync = SlaveSynchronize(slave, lambda: "master")
    await sync.sync_all(client, "master")  # type: ignore[arg-type]

    assert {"T", "Lost"} <= set(slave.topic_config_manager.table)
    assert {"g", "lost"} <= set(slave.subscription_group_manager.table)
    assert slave.subscription_group_manager.table["g"].retry_max_times == 3
    om = slave.consumer_offset_manager
    assert om.query_offsets("g", "T") == {0: 70, 1: 90}
    assert om.query_offsets("g", "Lost") == {0: 5}
    # the slave's newer offsets reached the master: only forward there
    assert master.consumer_offset_manager.query_offsets("g", "T") == {0: 70, 1: 90}
    assert master.consumer_offset_manager.query_offsets("g", "Lost") == {0: 5}
    assert sync.pushed == 2
    pushes = [r for r in client.requests if r.code == RequestCode.UPDATE_CONSUMER_OFFSET]
    assert all(r.ext_fields["increaseOnly"] is True for r in pushes)

    # an admin reset on the master (downwards) reaches the slave, and is not undone
    master.consumer_offset_manager.reset_offset("g", "T", 0, 0)
    await sync.sync_all(client, "master")  # type: ignore[arg-type]
    assert om.query_offsets("g", "T") == {0: 0, 1: 90}
    assert om.reset_version("T", "g") == 1
    assert master.consumer_offset_manager.query_offset("g", "T", 0) == 0
    assert sync.pushed == 2


async def test_an_empty_master_empties_nothing_on_its_slave(
        pair: tuple[BrokerController, BrokerController]) -> None:
    master, slave = pair
    master.topic_config_manager.update(TopicConfig("T", 4, 4))
    master.consumer_offset_manager.commit_offset("g", "T", 0, 10)
    client = InProcessClient(master)
    sync = SlaveSynchronize(slave, lambda: "master")
    await sync.sync_all(client, "master")  # type: ignore[arg-type]
    assert slave.consumer_offset_manager.query_offset("g", "T", 0) == 10
    empty = controller(master.config.store_path().parent / "empty", BrokerRole.ASYNC_MASTER)
    try:
        empty.topic_config_manager.next_data_version()  # a new master: another data version
        await sync.sync_all(InProcessClient(empty), "master")  # type: ignore[arg-type]
    finally:
        empty._persist_and_close()
    assert "T" in slave.topic_config_manager.table
    assert slave.consumer_offset_manager.query_offset("g", "T", 0) == 10


async def test_rounds_run_only_while_the_master_is_trusted(
        pair: tuple[BrokerController, BrokerController],
        autojump_clock: trio.testing.MockClock) -> None:
    master, slave = pair
    master.consumer_offset_manager.commit_offset("g", "T", 0, 10)
    trusted = False
    sync = SlaveSynchronize(slave, lambda: "master", master_trusted=lambda: trusted)
    client = InProcessClient(master)
    with structlog.testing.capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            await nursery.start(sync.run, client)
            await trio.sleep(sync.interval * 5.5)
            assert sync.synced == 0 and sync.skipped >= 5 and not client.requests
            assert slave.consumer_offset_manager.query_offset("g", "T", 0) == -1
            trusted = True
            await trio.sleep(sync.interval * 3)
            assert sync.synced >= 2
            assert slave.consumer_offset_manager.query_offset("g", "T", 0) == 10
            trusted = False
            await trio.sleep(sync.interval * 3)
            nursery.cancel_scope.cancel()
    events = [e["event"] for e in logs if "metadata sync" in e["event"]]
    assert events == ["metadata sync paused: the master's log is not trusted",
                      "metadata sync resumed: the master's log is trusted",
                      "metadata sync paused: the master's log is not trusted"]


async def test_the_masters_timer_checkpoint_is_kept_for_a_promotion(
        pair: tuple[BrokerController, BrokerController]) -> None:
    from broker.timer.timer_log import TimerCheckpoint
    master, slave = pair
    client = InProcessClient(master)
    sync = SlaveSynchronize(slave, lambda: "master")
    await sync.sync_all(client, "master")  # type: ignore[arg-type]
    assert slave.timer_service.master_checkpoint is None  # its timer never ran: nothing
    cp = TimerCheckpoint(cq_offset=7, records=7, done_slot=1_700_000_000_000, done_index=2)
    master.timer_service.last_checkpoint = cp
    await sync.sync_all(client, "master")  # type: ignore[arg-type]
    assert slave.timer_service.master_checkpoint == cp
    assert TimerCheckpoint.decode(slave.timer_service.master_path.read_bytes()) == cp
    assert sync.synced == 2
