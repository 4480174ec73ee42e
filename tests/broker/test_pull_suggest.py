"""Which broker a pull response suggests next (RocketMQ's rules), without sockets:
the store's cold-read flag, the pure rules, and the processor on a master and
on a slave driven through its handler table."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig, BrokerRole
from broker.controller import BrokerController
from broker.pull_processor import FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION
from broker.service.pull import PullStatus, slave_outcome, suggest_which_broker_id
from broker.store import GetMessageStatus
from broker.subscription_group_manager import SubscriptionGroupConfig
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from protocol.route import MASTER_ID, TopicConfig
from tests.broker.fakes import FakeConn
from tests.broker.store.helpers import inner, make_config, open_store

GROUP = "g"
BODY = b"x" * 100


# ---- the pure rules ---------------------------------------------------------------

@pytest.mark.parametrize(("enable", "cold", "want"), [
    (False, False, MASTER_ID), (False, True, MASTER_ID),  # slave reads off: always the master
    (True, False, 0), (True, True, 1),  # the group's brokerId / whichBrokerWhenConsumeSlowly
])
def test_suggestion_rule_defaults(enable: bool, cold: bool, want: int) -> None:
    assert suggest_which_broker_id(enable, cold, SubscriptionGroupConfig(GROUP)) == want


def test_suggestion_rule_honours_the_group() -> None:
    cfg = SubscriptionGroupConfig(GROUP, broker_id=2, which_broker_when_consume_slowly=3)
    assert suggest_which_broker_id(True, True, cfg) == 3
    assert suggest_which_broker_id(True, False, cfg) == 2
    assert suggest_which_broker_id(False, True, cfg) == MASTER_ID


@pytest.mark.parametrize(("got", "status", "nxt", "want"), [
    # records were scanned: go on from there
    (GetMessageStatus.FOUND, PullStatus.FOUND, 12, (PullStatus.FOUND, 12)),
    (GetMessageStatus.NO_MATCHED_MESSAGE, PullStatus.NO_MATCHED_MSG, 12,
     (PullStatus.NO_MATCHED_MSG, 12)),
    # a lagging slave: stay at the requested offset, retry instead of "moved"
    (GetMessageStatus.OFFSET_OVERFLOW_BADLY, PullStatus.OFFSET_MOVED, 0,
     (PullStatus.RETRY_IMMEDIATELY, 10)),
    (GetMessageStatus.OFFSET_TOO_SMALL, PullStatus.OFFSET_MOVED, 20,
     (PullStatus.RETRY_IMMEDIATELY, 10)),
    (GetMessageStatus.NO_MESSAGE_IN_QUEUE, PullStatus.NO_NEW_MSG, 0,
     (PullStatus.NO_NEW_MSG, 10)),
    (GetMessageStatus.OFFSET_FOUND_NULL, PullStatus.NO_NEW_MSG, 40,
     (PullStatus.NO_NEW_MSG, 10)),
    (GetMessageStatus.OFFSET_OVERFLOW_ONE, PullStatus.NO_NEW_MSG, 10,
     (PullStatus.NO_NEW_MSG, 10)),
])
def test_slave_never_moves_an_offset(got: GetMessageStatus, status: PullStatus, nxt: int,
                                     want: tuple[PullStatus, int]) -> None:
    assert slave_outcome(got, status, nxt, requested=10) == want


# ---- the store's cold-read flag -----------------------------------------------------

def test_store_flags_reads_far_behind_the_end(tmp_path: Path) -> None:
    cfg = dataclasses.replace(make_config(tmp_path, cl_size=1 << 16, cq_entries=100),
                              access_message_in_memory_max_ratio=10)
    store = open_store(cfg)
    try:
        for _ in range(20):
            assert store.put_message(inner("T", 0, BODY)).ok
        size = store.get_max_phy_offset() // 20
        # 10 % of "memory" is 5 records' bytes
        store.total_physical_memory = size * 50
        first = store.get_message(GROUP, "T", 0, 0, 1, None)
        assert first.status is GetMessageStatus.FOUND and first.suggest_pulling_from_slave
        # a batch reaching near the end is warm even though it started far behind:
        # the last record pulled decides
        batch = store.get_message(GROUP, "T", 0, 0, 32, None)
        assert batch.message_count == 20 and not batch.suggest_pulling_from_slave
        # from record 15 on, 5 records' bytes are left: not past the limit; from 14, 6 are
        assert not store.get_message(GROUP, "T", 0, 15, 1, None).suggest_pulling_from_slave
        assert store.get_message(GROUP, "T", 0, 14, 1, None).suggest_pulling_from_slave
        # nothing read (caught up): never cold
        assert not store.get_message(GROUP, "T", 0, 20, 1, None).suggest_pulling_from_slave
        # ratio 0: every read that finds a record is cold
        store.config = dataclasses.replace(store.config, access_message_in_memory_max_ratio=0)
        assert store.get_message(GROUP, "T", 0, 19, 1, None).suggest_pulling_from_slave
    finally:
        store.shutdown()


def test_store_reads_the_machines_memory_once(tmp_path: Path) -> None:
    from broker.store import message_store

    store = open_store(make_config(tmp_path))
    try:
        assert store.total_physical_memory == message_store.TOTAL_PHYSICAL_MEMORY_SIZE > 0
    finally:
        store.shutdown()


# ---- the processor, on a master and a slave ---------------------------------------------



def broker(root: Path, role: BrokerRole, **props: Any) -> BrokerController:
    cfg = BrokerConfig(
        store_path_root_dir=str(root), broker_role=role,
        broker_id=1 if role is BrokerRole.SLAVE else 0, listen_port=0,
        maped_file_size_commit_log=1 << 20, maped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64, max_index_num=256, access_message_in_memory_max_ratio=10,
        **props,
    )
    c = BrokerController(cfg)
    c._load()
    c.topic_config_manager.update(TopicConfig("T", 1, 1))
    for _ in range(20):  # on a slave: what replication brought
        c.message_store.put_message(inner("T", 0, BODY))
    size = c.message_store.get_max_phy_offset() // 20
    c.message_store.total_physical_memory = size * 50  # 10 %: 5 records' bytes
    return c


@pytest.fixture
def tmp_root(tmp_path: Path) -> Iterator[list[BrokerController]]:
    made: list[BrokerController] = []
    yield made
    for c in made:
        c._persist_and_close()


def pull(c: BrokerController, offset: int, max_nums: int = 1, **fields: Any
         ) -> tuple[RemotingCommand, PullMessageResponseHeader]:
    handler, _ = c._handler_table().lookup(RequestCode.PULL_MESSAGE)
    assert handler is not None
    # the request's own subscription ("*"): no consumer heart-beats in these tests
    fields["sys_flag"] = fields.get("sys_flag", 0) | FLAG_SUBSCRIPTION
    h = PullMessageRequestHeader(consumer_group=GROUP, topic="T", queue_id=0,
                                 queue_offset=offset, max_msg_nums=max_nums, **fields)
    r = handler(FakeConn(), RemotingCommand.request(  # type: ignore[arg-type]
        RequestCode.PULL_MESSAGE, h.to_fields()))
    assert r is not None
    return r, PullMessageResponseHeader.from_fields(r.ext_fields)


def test_master_without_slave_reads_suggests_itself(tmp_path: Path,
                                                    tmp_root: list[BrokerController]) -> None:
    c = broker(tmp_path, BrokerRole.ASYNC_MASTER)
    tmp_root.append(c)
    r, h = pull(c, 0)
    assert r.code == ResponseCode.SUCCESS and h.suggest_which_broker_id == MASTER_ID


def test_master_sends_cold_reads_to_the_groups_slave(tmp_path: Path,
                                                     tmp_root: list[BrokerController]) -> None:
    c = broker(tmp_path, BrokerRole.ASYNC_MASTER, slave_read_enable=True)
    tmp_root.append(c)
    r, h = pull(c, 0)
    assert r.code == ResponseCode.SUCCESS and h.suggest_which_broker_id == 1
    r, h = pull(c, 18)
    assert r.code == ResponseCode.SUCCESS and h.suggest_which_broker_id == MASTER_ID
    # caught up (nothing read): the group's brokerId
    r, h = pull(c, 20)
    assert r.code == ResponseCode.PULL_NOT_FOUND and h.suggest_which_broker_id == MASTER_ID
    # the group's own choices
    cfg = c.subscription_group_manager.find(GROUP)
    assert cfg is not None
    c.subscription_group_manager.update(
        dataclasses.replace(cfg, broker_id=2, which_broker_when_consume_slowly=3))
    assert pull(c, 0)[1].suggest_which_broker_id == 3
    assert pull(c, 18)[1].suggest_which_broker_id == 2


def test_slave_sends_a_caught_up_consumer_back_to_the_master(
        tmp_path: Path, tmp_root: list[BrokerController]) -> None:
    c = broker(tmp_path, BrokerRole.SLAVE, slave_read_enable=True)
    tmp_root.append(c)
    r, h = pull(c, 0)  # still cold here: stay on the slave
    assert r.code == ResponseCode.SUCCESS and h.suggest_which_broker_id == 1
    r, h = pull(c, 16, max_nums=4)
    assert r.code == ResponseCode.SUCCESS and h.next_begin_offset == 20
    assert h.suggest_which_broker_id == MASTER_ID


def test_slave_keeps_offsets_where_they_are(tmp_path: Path,
                                            tmp_root: list[BrokerController]) -> None:
    c = broker(tmp_path, BrokerRole.SLAVE)
    tmp_root.append(c)
    # ahead of what the slave has (its master's newest records not here yet)
    r, h = pull(c, 25)
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and h.next_begin_offset == 25
    assert h.suggest_which_broker_id == MASTER_ID
    # a master moves such a consumer to its max offset... or back to 0
    m = broker(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    tmp_root.append(m)
    r, h = pull(m, 25)
    assert r.code == ResponseCode.PULL_OFFSET_MOVED and h.next_begin_offset == 0
    # a slave stores no offset piggybacked on a pull (it copies its master's);
    # a master does
    for b in (c, m):
        pull(b, 0, sys_flag=FLAG_COMMIT_OFFSET, commit_offset=7)
    assert c.consumer_offset_manager.query_offset(GROUP, "T", 0) == -1
    assert m.consumer_offset_manager.query_offset(GROUP, "T", 0) == 7
