"""A full disk: puts refused with a status and nothing half-written, every
acknowledged message in its consume queue exactly once, writes resuming by
themselves once space is back, restarts included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.store import DefaultMessageStore, PutMessageStatus, StoreConfig
from broker.store.allocation import DiskFullError
from tests.broker.store.faults import Disk, tree, under
from tests.broker.store.helpers import inner, make_config, open_store
from tests.broker.store.test_message_store import pull_all

CL = 4096


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


def put(store: DefaultMessageStore, topic: str, body: bytes, queue_id: int = 0,
        keys: str | None = None) -> PutMessageStatus:
    return store.put_message(inner(topic, queue_id, body, keys=keys)).put_message_status


def bodies(store: DefaultMessageStore, topic: str, queue_id: int = 0) -> list[bytes]:
    msgs = pull_all(store, topic, queue_id)
    assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
    return [m.body for m in msgs]


def fill_first_file(store: DefaultMessageStore, acked: list[bytes]) -> None:
    """Put until the next record would need the second commit-log file."""
    i = 0
    while store.get_max_phy_offset() + 2 * 300 < CL:
        body = b"m%03d-" % i + b"x" * 200
        assert put(store, "T", body) is PutMessageStatus.PUT_OK
        acked.append(body)
        i += 1


@pytest.mark.parametrize("how", ["free_space_check", "fallocate_enospc"])
def test_commit_log_file_cannot_be_allocated(tmp_path: Path, disk: Disk, how: str) -> None:
    cfg = make_config(tmp_path, cl_size=CL, cq_entries=100)
    store = open_store(cfg)
    acked: list[bytes] = []
    fill_first_file(store, acked)
    before = tree(tmp_path / "commitlog")
    end = store.get_max_phy_offset()
    if how == "free_space_check":
        disk.free = 1000
    else:
        disk.full_for = under("commitlog")
    for _ in range(3):  # the record needs the next file: refused each time
        r = store.put_message(inner("T", 0, b"z" * 500))
        assert r.put_message_status is PutMessageStatus.DISK_FULL
        assert r.append_result is None
        assert r.detail.startswith("disk full: cannot allocate a new commit-log file (4096 bytes, ")
    # nothing half-written: no BLANK pad, no file, no temporary file
    assert tree(tmp_path / "commitlog") == before
    assert store.get_max_phy_offset() == end
    assert bodies(store, "T") == acked
    disk.space_returns()
    r = store.put_message(inner("T", 0, b"z" * 500))
    assert r.put_message_status is PutMessageStatus.PUT_OK
    assert r.append_result is not None and r.append_result.logics_offset == len(acked)
    assert r.append_result.wrote_offset == CL
    acked.append(b"z" * 500)
    assert bodies(store, "T") == acked
    store.shutdown()
    store = open_store(cfg)
    assert bodies(store, "T") == acked
    store.shutdown()


def test_consume_queue_allocation_fails_after_the_append(tmp_path: Path, disk: Disk) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=10)
    store = open_store(cfg)
    heard: list[tuple[str, int, int]] = []
    store.dispatch_listeners.append(lambda t, q, n: heard.append((t, q, n)))
    acked = [b"a%d" % i for i in range(10)]
    for body in acked:  # the queue's first file is now full
        assert put(store, "T", body) is PutMessageStatus.PUT_OK
    disk.full_for = under("consumequeue")
    # the commit log takes it: acknowledged, though its queue entry must wait
    r = store.put_message(inner("T", 0, b"acked-but-waiting"))
    assert r.put_message_status is PutMessageStatus.PUT_OK
    assert r.append_result is not None and r.append_result.logics_offset == 10
    acked.append(b"acked-but-waiting")
    assert store.dispatch_behind and isinstance(store.dispatch_failure, DiskFullError)
    assert heard[-1] == ("T", 0, 10)  # no wake-up for a record not in its queue
    end = store.get_max_phy_offset()
    for topic in ("T", "Other"):  # every later put is refused, nothing appended
        r = store.put_message(inner(topic, 0, b"refused"))
        assert r.put_message_status is PutMessageStatus.DISK_FULL
        assert "consume-queue file" in r.detail
    assert store.get_max_phy_offset() == end
    store.check_disk()  # the periodic retry: still no space
    assert store.dispatch_behind
    disk.space_returns()
    store.check_disk()
    assert not store.dispatch_behind and store.dispatch_failure is None
    assert heard[-1] == ("T", 0, 11)  # the re-dispatched record wakes long polls
    assert bodies(store, "T") == acked  # each exactly once
    assert put(store, "T", b"after") is PutMessageStatus.PUT_OK
    acked.append(b"after")
    assert heard[-1] == ("T", 0, 12)
    assert bodies(store, "T") == acked
    store.shutdown()
    store = open_store(cfg)
    assert bodies(store, "T") == acked
    store.shutdown()


def test_retry_at_the_next_put(tmp_path: Path, disk: Disk) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=10))
    for i in range(10):
        put(store, "T", b"%d" % i)
    disk.full_for = under("consumequeue")
    assert put(store, "T", b"10") is PutMessageStatus.PUT_OK
    assert put(store, "T", b"refused") is PutMessageStatus.DISK_FULL
    disk.space_returns()
    assert put(store, "T", b"11") is PutMessageStatus.PUT_OK
    assert bodies(store, "T") == [b"%d" % i for i in range(12)]
    store.shutdown()


def test_batch_dispatch_fails_midway(tmp_path: Path, disk: Disk) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=10))
    for i in range(8):
        put(store, "T", b"%d" % i)
    disk.full_for = under("consumequeue")
    # entries 8 and 9 fit in the queue's file, 10 and 11 need the next one
    r = store.put_messages([inner("T", 0, b"%d" % i) for i in range(8, 12)])
    assert r.put_message_status is PutMessageStatus.PUT_OK and store.dispatch_behind
    disk.space_returns()
    assert store.reput()
    assert bodies(store, "T") == [b"%d" % i for i in range(12)]
    store.shutdown()


def test_other_dispatch_errors_refuse_puts_until_a_retry(tmp_path: Path, disk: Disk) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=10))
    put(store, "T", b"0")

    class Broken:
        fail = True

        def dispatch(self, req: object) -> None:
            if self.fail:
                raise OSError(5, "Input/output error")

        def dispatch_batch(self, reqs: list[object]) -> None:
            for req in reqs:
                self.dispatch(req)

    broken = Broken()
    store.dispatchers.append(broken)
    assert put(store, "T", b"1") is PutMessageStatus.PUT_OK
    r = store.put_message(inner("T", 0, b"refused"))
    assert r.put_message_status is PutMessageStatus.DISPATCH_BEHIND
    assert "Input/output error" in r.detail
    broken.fail = False
    assert put(store, "T", b"2") is PutMessageStatus.PUT_OK
    assert bodies(store, "T") == [b"0", b"1", b"2"]
    store.shutdown()


def test_index_allocation_fails(tmp_path: Path, disk: Disk) -> None:
    disk.full_for = under("index")
    # the index file made ahead at load cannot be made: left for the dispatch
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=100))
    assert store.index_service is not None and not store.index_service.next_ready
    assert put(store, "T", b"k", keys="key1") is PutMessageStatus.PUT_OK
    assert store.dispatch_behind
    assert put(store, "T", b"refused", keys="key2") is PutMessageStatus.DISK_FULL
    disk.space_returns()
    assert put(store, "T", b"k2", keys="key2") is PutMessageStatus.PUT_OK
    assert [len(store.query_message("T", k, 10, 0, 2**62)) for k in ("key1", "key2")] == [1, 1]
    assert bodies(store, "T") == [b"k", b"k2"]
    store.shutdown()


@pytest.mark.parametrize("clean", [True, False])
def test_restart_while_behind(tmp_path: Path, disk: Disk, clean: bool) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=10)
    store = open_store(cfg)
    for i in range(10):
        put(store, "T", b"%d" % i)
    disk.full_for = under("consumequeue")
    assert put(store, "T", b"10") is PutMessageStatus.PUT_OK  # acked, not in its queue
    if clean:
        store.shutdown()
    else:  # a crash
        store.flush_commit_log()
        store.commit_log.close()
        store.store_lock.release()  # a crashed broker's lock goes with its process
    # the broker starts although recovery cannot dispatch everything yet
    store = open_store(cfg)
    assert store.dispatch_behind
    assert put(store, "T", b"refused") is PutMessageStatus.DISK_FULL
    disk.space_returns()
    r = store.put_message(inner("T", 0, b"11"))
    assert r.append_result is not None and r.append_result.logics_offset == 11
    assert bodies(store, "T") == [b"%d" % i for i in range(12)]
    store.shutdown()


def test_queue_offsets_of_undispatched_records_survive_a_restart(tmp_path: Path, disk: Disk) -> None:
    """Recovery cannot dispatch, space comes back, and the next put must not
    reuse the queue offset of the record that waited."""
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=10)
    store = open_store(cfg)
    for i in range(10):
        put(store, "T", b"%d" % i)
    disk.full_for = under("consumequeue")
    put(store, "T", b"10")
    store.shutdown()
    store = DefaultMessageStore(StoreConfig.from_broker(cfg))
    assert store.load()
    assert store.commit_log.topic_queue_table["T-0"] == 11
    store.start()
    disk.space_returns()
    assert store.reput()
    assert bodies(store, "T") == [b"%d" % i for i in range(11)]
    store.shutdown()


def test_no_temporary_files_left(tmp_path: Path, disk: Disk) -> None:
    disk.full_for = lambda p: True
    # the first commit-log file, made ahead at load, cannot be made: left to the put
    store = open_store(make_config(tmp_path, cl_size=CL, cq_entries=10))
    assert put(store, "T", b"x") is PutMessageStatus.DISK_FULL
    store.flush_commit_log()
    store.shutdown()
    leftovers = [p for p in tree(tmp_path) if p.endswith((".alloc", ".build"))]
    assert leftovers == []
    assert not os.listdir(tmp_path / "commitlog")
