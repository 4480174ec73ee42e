"""Cleanup by age and by disk ratio, and write refusal on a full disk."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from broker.store import GetMessageStatus, PutMessageStatus
from broker.store.message_store import disk_used_ratio
from tests.broker.store.helpers import inner, make_config, open_store

HOUR_MS = 3_600_000


def fill(store, n: int) -> None:  # type: ignore[no-untyped-def]
    for i in range(n):
        r = store.put_message(inner("T", i % 2, b"x" * 300))
        assert r.put_message_status == PutMessageStatus.PUT_OK


def age_files(root: Path, hours: float) -> None:
    old = time.time() - hours * 3600
    for f in (root / "commitlog").iterdir():
        os.utime(f, (old, old))


def test_cleanup_by_time_at_delete_hour(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=4096, cq_entries=10)
    cfg.delete_when = "04"
    cfg.file_reserved_time = 72
    store = open_store(cfg)
    store.disk_usage = lambda p: 0.10
    fill(store, 60)
    files = len(store.commit_log.mapped_file_queue.files)
    now = int(time.time() * 1000)
    # young files: nothing goes, whatever the hour
    assert store.clean_expired_files(now, 4) == 0
    age_files(tmp_path, 100)
    # old files, but not the delete hour and plenty of space: nothing goes
    assert store.clean_expired_files(now, 13) == 0
    deleted = store.clean_expired_files(now, 4)
    assert 0 < deleted <= cfg.delete_files_batch_max
    while store.clean_expired_files(now, 4):
        pass
    assert len(store.commit_log.mapped_file_queue.files) == 1  # never the file being written
    assert files > 1
    # consume queues follow, min offsets move, a pull below the min is told where to go
    for q in (0, 1):
        lo = store.get_min_offset_in_queue("T", q)
        assert lo > 0
        r = store.get_message("g", "T", q, 0, 32, None)
        assert r.status == GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == lo
        r = store.get_message("g", "T", q, lo, 32, None)
        assert r.status == GetMessageStatus.FOUND
    mins = [store.get_min_offset_in_queue("T", q) for q in (0, 1)]
    store.shutdown()
    store = open_store(cfg)  # the moved min offsets survive a restart
    assert [store.get_min_offset_in_queue("T", q) for q in (0, 1)] == mins
    assert store.get_message("g", "T", 0, mins[0], 32, None).status == GetMessageStatus.FOUND
    store.shutdown()


def test_cleanup_by_disk_ratio(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=4096, cq_entries=10)
    store = open_store(cfg)
    fill(store, 60)
    now = int(time.time() * 1000)
    store.disk_usage = lambda p: 0.80  # past diskMaxUsedSpaceRatio: expired files go now
    assert store.clean_expired_files(now, 13) == 0  # but these are young
    age_files(tmp_path, 100)
    assert store.clean_expired_files(now, 13) > 0
    before = len(store.commit_log.mapped_file_queue.files)
    fill(store, 30)
    store.disk_usage = lambda p: 0.86  # past the forcible ratio: even young files go
    assert store.clean_expired_files(now, 13) > 0
    assert len(store.commit_log.mapped_file_queue.files) < before + 3
    store.shutdown()


def test_full_disk_refuses_writes_keeps_reads(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16))
    fill(store, 4)
    usage = {"ratio": 0.95}
    store.disk_usage = lambda p: usage["ratio"]
    store.check_disk()
    assert store.disk_full
    r = store.put_message(inner("T", 0, b"refused"))
    assert r.put_message_status == PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert store.get_message("g", "T", 0, 0, 32, None).status == GetMessageStatus.FOUND
    usage["ratio"] = 0.50
    store.check_disk()
    assert store.put_message(inner("T", 0, b"ok")).put_message_status == PutMessageStatus.PUT_OK
    store.shutdown()


def test_used_ratio_is_dfs_blocks_reserved_for_root_count_on_neither_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 blocks, 600 unallocated of which 100 are ours to use (500
    reserved for root): 400 used of 500 we could have, 80% as df and
    RocketMQ say, not the 90% that counting the reserve as used would give."""

    class Vfs(NamedTuple):
        f_blocks: int
        f_bfree: int
        f_bavail: int
        f_frsize: int

    seen: list[str] = []

    def statvfs(path: str | Path) -> Vfs:
        seen.append(str(path))
        return Vfs(1000, 600, 100, 4096)

    monkeypatch.setattr(os, "statvfs", statvfs)
    assert disk_used_ratio(tmp_path) == 0.8
    assert seen == [str(tmp_path)]
    monkeypatch.setattr(os, "statvfs", lambda path: Vfs(1000, 1000, 1000, 4096))
    assert disk_used_ratio(tmp_path) == 0.0  # an empty file system
    monkeypatch.setattr(os, "statvfs", lambda path: Vfs(0, 0, 0, 4096))
    assert disk_used_ratio(tmp_path) == 0.0  # a pseudo file system with no blocks
    monkeypatch.setattr(os, "statvfs", lambda path: Vfs(1000, 500, 0, 4096))
    assert disk_used_ratio(tmp_path) == 1.0  # nothing left for us: full


def test_a_new_store_reads_the_true_ratio_of_its_own_directory(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=4096, cq_entries=10))
    try:
        st = os.statvfs(tmp_path)
        used = st.f_blocks - st.f_bfree
        expect = used / (used + st.f_bavail)
        assert abs(store.check_disk() - expect) < 0.01
    finally:
        store.shutdown()
