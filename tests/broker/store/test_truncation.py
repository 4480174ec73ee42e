"""Truncating a replica's log to the point it shares with a new master
(controller mode): every commit-log, consume-queue, index and epoch entry
past it goes, and a crash between any two steps leaves a store that loads
to the same consistent log."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.store import DefaultMessageStore, StoreConfig
from broker.store.ha.truncation import MARKER_FILE, TruncationMarker
from broker.store.status import StoreError
from protocol.record import decode_record
from tests.broker.store.helpers import inner, make_config, open_store

STEPS = ["epochs", "commit-log file cut", "commit-log files deleted", "consume queues",
         "index", "cursors"]


def config(root: Path):  # type: ignore[no-untyped-def]
    return make_config(root, cl_size=4096, cq_entries=100)


def filled(root: Path) -> tuple[DefaultMessageStore, list[int]]:
    """40 records over several 4 KiB files in two epochs; their end offsets."""
    store = open_store(config(root))
    ends: list[int] = []
    for i in range(40):
        if i in (0, 10):
            store.epochs.begin(store.get_max_phy_offset())
        r = store.put_message(inner("T", i % 2, f"m{i:02d}".encode() * 50, keys=f"k{i}"))
        assert r.ok and r.append_result is not None
        ends.append(r.append_result.wrote_offset + r.append_result.wrote_bytes)
    store.epochs.begin(ends[24])  # a third epoch, from record 25 on
    return store, ends


def crash(store: DefaultMessageStore) -> None:
    """A process killed: files closed as they are, nothing flushed, the abort file left."""
    store.commit_log.close()
    for cq in store._all_consume_queues():
        cq.close()
    if store.index_service is not None:
        store.index_service.close()
    store.store_lock.release()


def bodies(store: DefaultMessageStore, queue_id: int) -> list[bytes]:
    r = store.get_message("g", "T", queue_id, 0, 100, None)
    return [decode_record(b, 0).body for b in r.buffers]


def check_cut_at(store: DefaultMessageStore, ends: list[int], keep: int) -> None:
    """The store holds records 0..keep-1, and takes the next at their end."""
    cut = ends[keep - 1]
    assert store.get_max_phy_offset() == cut
    assert not (Path(store.root) / MARKER_FILE).exists()
    assert all(e.start < cut for e in store.epochs.entries)
    assert store.epochs.entries[-1].start <= cut
    for q in (0, 1):
        assert bodies(store, q) == [f"m{i:02d}".encode() * 50 for i in range(q, keep, 2)]
    assert store.query_message("T", f"k{keep - 1}", 10, 0, 2**62)
    # the log continues at the cut: the next record takes the next queue offset
    r = store.put_message(inner("T", keep % 2, b"new" * 50))
    assert r.ok and r.append_result is not None
    assert r.append_result.wrote_offset == cut
    assert r.append_result.logics_offset == keep // 2  # records of its queue before the cut
    assert bodies(store, keep % 2)[-1] == b"new" * 50


def test_truncation_cuts_every_part_of_the_store(tmp_path: Path) -> None:
    store, ends = filled(tmp_path)
    store.prepare_truncate(ends[14])
    assert TruncationMarker(tmp_path).pending() == ends[14]
    store.truncate_to(ends[14])
    store.finish_truncate()
    assert [e.start for e in store.epochs.entries] == [0, ends[9]]  # the third epoch went
    check_cut_at(store, ends, 15)
    store.shutdown()
    store = open_store(config(tmp_path))
    assert store.get_max_phy_offset() > ends[14]  # the record put after the cut stays
    assert bodies(store, 1)[-1] == b"new" * 50 and len(bodies(store, 1)) == 8
    store.shutdown()


@pytest.mark.parametrize("crash_after", [None, *STEPS[:-1]])
def test_a_crash_between_any_two_steps_loads_the_cut_log(tmp_path: Path,
                                                        crash_after: str | None) -> None:
    store, ends = filled(tmp_path)
    store.flush_commit_log()
    store.flush_consume_queues()
    store.prepare_truncate(ends[14])
    done = []
    if crash_after is not None:
        for step in store.truncation_steps(ends[14]):
            done.append(step)
            if step == crash_after:
                break
    crash(store)
    assert (tmp_path / MARKER_FILE).exists()
    store = open_store(config(tmp_path))
    check_cut_at(store, ends, 15)
    store.shutdown()


def test_a_crash_after_the_cut_before_the_marker_goes(tmp_path: Path) -> None:
    store, ends = filled(tmp_path)
    store.prepare_truncate(ends[30])
    assert list(store.truncation_steps(ends[30])) == STEPS
    crash(store)
    store = open_store(config(tmp_path))
    check_cut_at(store, ends, 31)
    store.shutdown()


def test_truncation_outside_the_log_or_unprepared_is_refused(tmp_path: Path) -> None:
    store, ends = filled(tmp_path)
    end = store.get_max_phy_offset()
    with pytest.raises(StoreError, match="cannot truncate"):
        store.prepare_truncate(end)
    with pytest.raises(StoreError, match="no truncation"):
        store.truncate_to(ends[3])
    assert store.get_max_phy_offset() == end
    store.shutdown()


def test_a_damaged_marker_stops_the_load(tmp_path: Path) -> None:
    store, ends = filled(tmp_path)
    store.shutdown()
    (tmp_path / MARKER_FILE).write_bytes(b"junk")
    with pytest.raises(StoreError, match="truncation of the log was cut short"):
        DefaultMessageStore(StoreConfig.from_broker(config(tmp_path))).load()
