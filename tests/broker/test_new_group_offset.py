"""What QUERY_CONSUMER_OFFSET answers a group with no stored offset (RocketMQ
4.x's rule), without sockets: the pure rule, the memory-ratio test it asks,
the store's check of a queue's first message, and the processor on a master
and a slave driven through its handler table."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import BrokerConfig, BrokerRole
from broker.controller import BrokerController
from broker.new_group_offset import pop_init_offset, query_offset_answer
from broker.store import memory_ratio
from broker.store.memory_ratio import DEFAULT_PHYSICAL_MEMORY, in_disk, memory_budget
from protocol.codes import RequestCode, ResponseCode
from protocol.headers import OffsetResponseHeader, QueryConsumerOffsetRequestHeader
from protocol.route import TopicConfig
from tests.broker.fakes import call
from tests.broker.store.helpers import inner, make_config, open_store

GROUP = "new-group"
BODY = b"x" * 100


# ---- the pure rule --------------------------------------------------------------------

def never_asked() -> bool:
    raise AssertionError("the in-disk check was asked although it decides nothing")


@pytest.mark.parametrize(("stored", "min_offset", "first_in_disk", "zero", "want"), [
    (7, 0, False, True, 7),  # stored: that offset
    (0, 5, True, True, 0),  # stored 0 is an offset like any other
    (-1, 0, False, True, 0),  # none stored, first message in memory: 0
    (-1, -1, False, True, 0),  # RocketMQ tests minOffset <= 0
    (-1, 0, True, True, None),  # first message in disk: QUERY_NOT_FOUND
    (-1, 0, False, False, None),  # setZeroIfNotFound=false
])
def test_rule(stored: int, min_offset: int, first_in_disk: bool, zero: bool,
              want: int | None) -> None:
    assert query_offset_answer(stored, min_offset, lambda: first_in_disk, zero) == want


def test_rule_asks_the_store_only_when_it_decides() -> None:
    assert query_offset_answer(3, 0, never_asked) == 3
    assert query_offset_answer(-1, 1, never_asked) is None  # history cleaned up: not found
    assert query_offset_answer(-1, 0, never_asked, zero_if_not_found=False) is None


# ---- the memory ratio -----------------------------------------------------------------

def test_budget_is_javas_long_of_a_double() -> None:
    assert memory_budget(1000, 40) == 400
    assert memory_budget(16 * 2**30, 40) == int(16 * 2**30 * 0.4)
    assert memory_budget(999, 33) == 329  # (long) 329.67: truncated
    assert memory_budget(10**12, 0) == 0
    assert memory_budget(10**12, 100) == 10**12


def test_in_disk_is_strictly_more_than_the_budget_behind() -> None:
    assert not in_disk(1400, 1000, 400)
    assert in_disk(1401, 1000, 400)
    assert not in_disk(1000, 1000, 0)  # nothing behind: in memory even with no budget
    assert in_disk(1001, 1000, 0)


def test_physical_memory_falls_back_to_rocketmqs_24_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    assert memory_ratio.physical_memory() == memory_ratio.TOTAL_PHYSICAL_MEMORY_SIZE > 0

    def unknown(name: str) -> int:
        raise ValueError(name)
    monkeypatch.setattr(os, "sysconf", unknown)
    assert memory_ratio.physical_memory() == DEFAULT_PHYSICAL_MEMORY == 24 * 2**30


# ---- the store ------------------------------------------------------------------------

def test_store_checks_the_entry_at_the_offset(tmp_path: Path) -> None:
    store = open_store(dataclasses.replace(make_config(tmp_path, cl_size=1 << 16, cq_entries=100),
                                           access_message_in_memory_max_ratio=10))
    try:
        # no queue, or no entry at the offset: not in disk (nothing created)
        assert not store.check_in_disk_by_consume_offset("T", 0, 0)
        assert store.consume_queue_table == {}
        for _ in range(20):
            assert store.put_message(inner("T", 0, BODY)).ok
        size = store.get_max_phy_offset() // 20
        store.total_physical_memory = size * 50  # 10 %: 5 records' bytes
        assert store.check_in_disk_by_consume_offset("T", 0, 0)
        assert store.check_in_disk_by_consume_offset("T", 0, 14)  # 6 records behind
        assert not store.check_in_disk_by_consume_offset("T", 0, 15)  # 5: the budget itself
        assert not store.check_in_disk_by_consume_offset("T", 0, 20)  # no entry yet
        assert not store.check_in_disk_by_consume_offset("T", 1, 0)
        store.config = dataclasses.replace(store.config, access_message_in_memory_max_ratio=100)
        assert not store.check_in_disk_by_consume_offset("T", 0, 0)
    finally:
        store.shutdown()


# ---- the processor on a master and a slave ----------------------------------------------

@pytest.fixture
def made() -> Iterator[list[BrokerController]]:
    controllers: list[BrokerController] = []
    yield controllers
    for c in controllers:
        c._persist_and_close()


def controller(root: Path, made: list[BrokerController], messages: int, **props: Any
               ) -> BrokerController:
    """A broker with topic ``T`` (2 queues) and ``messages`` records in queue 0;
    "memory" is 10 records' bytes (ratio 40 %: 4 records are in memory)."""
    cfg = BrokerConfig(store_path_root_dir=str(root), listen_port=0,
                       maped_file_size_commit_log=4096, maped_file_size_consume_queue=10 * 20,
                       max_hash_slot_num=64, max_index_num=256, **props)
    c = BrokerController(cfg)
    c._load()
    made.append(c)
    c.topic_config_manager.update(TopicConfig("T", 2, 2))
    for _ in range(messages):
        assert c.message_store.put_message(inner("T", 0, BODY)).ok
    first = c.message_store.get_commit_log_offset_in_queue("T", 0, 1)
    c.message_store.total_physical_memory = 10 * first if messages > 1 else 10**9
    return c


def query(c: BrokerController, queue_id: int = 0, group: str = GROUP, **fields: Any
          ) -> int | None:
    r = call(c, RequestCode.QUERY_CONSUMER_OFFSET,
             QueryConsumerOffsetRequestHeader(group, "T", queue_id, **fields).to_fields())
    if r.code == ResponseCode.QUERY_NOT_FOUND:
        assert r.remark == "Not found, maybe this group consumer boot first"
        return None
    assert r.code == ResponseCode.SUCCESS, r
    return OffsetResponseHeader.from_fields(r.ext_fields).offset


@pytest.mark.parametrize("role", [BrokerRole.ASYNC_MASTER, BrokerRole.SLAVE])
def test_a_new_group_gets_0_while_the_first_message_is_in_memory(
        tmp_path: Path, made: list[BrokerController], role: BrokerRole) -> None:
    c = controller(tmp_path, made, 4, broker_role=role,
                   broker_id=1 if role is BrokerRole.SLAVE else 0)
    assert query(c) == 0  # 4 records: all in memory
    assert query(c, queue_id=1) == 0  # an empty queue: nothing in disk either
    assert query(c, set_zero_if_not_found=False) is None
    assert query(c, set_zero_if_not_found=True) == 0
    for _ in range(2):  # the first record falls out of the newest 4 records' bytes
        assert c.message_store.put_message(inner("T", 0, BODY)).ok
    assert query(c) is None
    assert query(c, queue_id=1) == 0
    # a stored offset is answered whatever the memory
    c.consumer_offset_manager.commit_offset(GROUP, "T", 0, 2)
    assert query(c) == 2
    c.consumer_offset_manager.commit_offset(GROUP, "T", 0, 0)
    assert query(c) == 0
    # the ratio is read per request (updateBrokerConfig changes it live)
    assert query(c, group="other") is None
    trio.run(c.apply_runtime_config, {"accessMessageInMemoryMaxRatio": "100"})
    assert query(c, group="other") == 0


def test_a_queue_whose_history_was_cleaned_up_is_not_found(
        tmp_path: Path, made: list[BrokerController]) -> None:
    c = controller(tmp_path, made, 60, file_reserved_time=0)
    c.message_store.total_physical_memory = 10**12  # everything "in memory"
    assert query(c) == 0
    store = c.message_store
    while store.clean_expired_files(int(time.time() * 1000) + 1000, 4, manual=True):
        pass
    assert store.get_min_offset_in_queue("T", 0) > 0
    assert query(c) is None


# ---- a new POP group's start (RocketMQ 5's getInitOffset) -----------------------------

@pytest.mark.parametrize(("init_min", "retry", "min_offset", "max_offset", "first_in_disk",
                          "want"), [
    (True, False, 3, 9, None, 3),  # MIN: the queue's min, the memory never asked
    (True, False, -1, 0, None, 0),  # MIN of a queue not created yet
    (False, True, 2, 9, None, 2),  # a retry topic: its min whatever the mode
    (False, False, 0, 9, False, 0),  # MAX, first message in memory: from the start
    (False, False, 0, 9, True, 9),  # MAX, first message in disk: the max
    (False, False, 4, 9, None, 9),  # MAX, the start cleaned up: the max, memory not asked
    (False, False, 0, 0, False, 0),  # an empty queue
])
def test_pop_init_offset(init_min: bool, retry: bool, min_offset: int, max_offset: int,
                         first_in_disk: bool | None, want: int) -> None:
    asked = never_asked if first_in_disk is None else (lambda: first_in_disk)
    assert pop_init_offset(init_min, retry, min_offset, max_offset, asked) == want
