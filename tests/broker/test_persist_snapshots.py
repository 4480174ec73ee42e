"""Persisted tables are snapshotted on the event loop, written in a worker thread.

Before: the persist loop walked the consumer-offset table in a worker thread
while the loop inserted groups ("dictionary changed size during iteration"
killed the broker within seconds of an UPDATE_CONSUMER_OFFSET flood).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import trio

import broker.persist
from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.schedule_service import ScheduleMessageService
from broker.subscription_group_manager import SubscriptionGroupConfig
from protocol.route import TopicConfig


def controller(tmp_path: Path) -> BrokerController:
    return BrokerController(BrokerConfig(store_path_root_dir=str(tmp_path)))


async def test_persist_loop_under_concurrent_inserts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real persist path runs back to back while the loop inserts fresh groups.
    (Subscription groups are journaled now, by their own writer: test_group_journal.py.)"""
    # the race is in serialising, not in fsync: keep a busy disk out of the timing
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    c = controller(tmp_path)
    offsets = c.consumer_offset_manager
    writes = 0
    done = False

    async def persister() -> None:
        nonlocal writes
        while not done:
            await c.persist_configs()
            writes += 1
            await trio.lowlevel.checkpoint()

    # big enough that walking a table takes longer than a thread switch (5 ms)
    for i in range(20_000):
        offsets.commit_offset(f"base{i}", "Base", 0, i)
    offsets.persist()
    inserted = 0
    batch = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(persister)
        start = time.monotonic()
        # at least 1.5 s of inserts, and until two writes overlapped them (5 s at most)
        while time.monotonic() < start + 1.5 or (writes < 2 and time.monotonic() < start + 5):
            # the tables keep changing size but stay small enough to write often
            topic = f"T{batch % 20}"
            offsets.remove_topic(topic)
            for _ in range(200):
                offsets.commit_offset(f"g{inserted}", topic, inserted % 4, inserted)
                offsets.commit_offset("g", "Hot", inserted % 8, inserted)  # inner dict too
                inserted += 1
            batch += 1
            await trio.lowlevel.checkpoint()
        done = True
    assert c._persist_guard.failures == 0
    assert writes >= 1 and inserted > 10_000

    await c.persist_configs()  # the last inserts
    data = json.loads(offsets.path.read_text())["offsetTable"]
    assert data == {k: {str(q): o for q, o in v.items()} for k, v in offsets.offset_table.items()}


async def test_snapshot_is_taken_on_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = controller(tmp_path)
    loop_thread = threading.get_ident()
    seen: dict[str, int] = {}
    offsets = c.consumer_offset_manager
    real_snapshot = offsets.snapshot

    def snapshot(force: bool = False) -> broker.persist.ConfigSnapshot | None:
        seen["snapshot"] = threading.get_ident()
        return real_snapshot(force)

    real_write = broker.persist.atomic_write_json

    def write(path: Path, obj: object) -> None:
        seen[path.name] = threading.get_ident()
        real_write(path, obj)

    offsets.snapshot = snapshot  # type: ignore[method-assign]
    monkeypatch.setattr(broker.persist, "atomic_write_json", write)
    offsets.commit_offset("g", "T", 0, 5)
    await c.persist_configs()
    assert seen["snapshot"] == loop_thread
    assert seen["consumerOffset.json"] != loop_thread


def test_a_snapshot_shares_nothing_the_loop_mutates(tmp_path: Path) -> None:
    c = controller(tmp_path)
    offsets, groups = c.consumer_offset_manager, c.subscription_group_manager
    offsets.commit_offset("g", "T", 0, 5)
    groups.find("g")
    snap_offsets = offsets.snapshot()
    snap_groups = groups.snapshot()
    assert snap_offsets is not None and snap_groups is not None
    assert offsets.snapshot() is None  # clean until the next change
    offsets.commit_offset("g", "T", 0, 9)  # in place, inside the copied queue map
    offsets.commit_offset("g", "T", 1, 1)
    offsets.commit_offset("g2", "T", 0, 1)
    groups.update(SubscriptionGroupConfig("g", consume_enable=False))
    groups.find("g2")
    snap_offsets.write()
    snap_groups.write()
    assert json.loads(offsets.path.read_text())["offsetTable"] == {"T@g": {"0": 5}}
    written = json.loads(groups.path.read_text())["subscriptionGroupTable"]
    assert list(written) == ["g"] and written["g"]["consumeEnable"] is True


async def test_failed_write_is_logged_and_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = controller(tmp_path)
    offsets = c.consumer_offset_manager
    offsets.commit_offset("g", "T", 0, 5)
    real_write = broker.persist.atomic_write_json
    calls = 0

    def flaky(path: Path, obj: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError(28, "No space left on device")
        real_write(path, obj)

    monkeypatch.setattr(broker.persist, "atomic_write_json", flaky)
    await c.persist_configs()  # logged, not raised
    assert c._persist_guard.failures == 1 and offsets.dirty
    await c.persist_configs()
    assert json.loads(offsets.path.read_text())["offsetTable"] == {"T@g": {"0": 5}}
    assert not offsets.dirty


async def test_shutdown_writes_snapshots_taken_on_the_loop(tmp_path: Path) -> None:
    c = controller(tmp_path)
    await trio.to_thread.run_sync(c._load)
    c.consumer_offset_manager.commit_offset("g", "T", 0, 7)
    c.subscription_group_manager.find("g")
    c.topic_config_manager.update(TopicConfig("Created", 2, 2))
    snaps = c._shutdown_snapshots()
    c.consumer_offset_manager.commit_offset("late", "T", 0, 1)  # after the snapshot
    await trio.to_thread.run_sync(c._persist_and_close, snaps)
    config = Path(tmp_path, "config")
    assert json.loads((config / "consumerOffset.json").read_text())["offsetTable"] == {
        "T@g": {"0": 7}}
    assert "g" in json.loads((config / "subscriptionGroup.json").read_text())[
        "subscriptionGroupTable"]
    assert "Created" in json.loads((config / "topics.json").read_text())["topicConfigTable"]
    assert not c.message_store.running


def test_delay_offsets_snapshot(tmp_path: Path) -> None:
    c = controller(tmp_path)
    svc: ScheduleMessageService = c.schedule_service
    assert svc.snapshot() is None
    svc._set_offset(1, 4)
    snap = svc.snapshot()
    assert snap is not None
    svc._set_offset(1, 9)
    snap.write()
    assert json.loads(svc.path.read_text()) == {"offsetTable": {"1": 4}}
