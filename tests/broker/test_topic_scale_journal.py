"""The topic journal: a change is one record, not a rewrite of topics.json.

Pure file work, no trio: records are appended (many changes, one write and one
fsync), replayed after the snapshot, a torn tail is ignored and cut off, and a
compaction can stop between any two of its steps without losing a change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import broker.persist
import broker.topic_config_manager as tcm
from broker.config import BrokerConfig
from broker.persist import (
    JournalBatch,
    JournaledSnapshot,
    atomic_write_bytes,
    decode_journal,
    encode_journal_record,
)
from broker.topic_config_manager import TopicConfigManager
from protocol.route import PERM_READ, PERM_RW, DataVersion, TopicConfig
from tests.broker.disk_counter import DiskCounter


def manager(tmp_path: Path) -> TopicConfigManager:
    mgr = TopicConfigManager(BrokerConfig(store_path_root_dir=str(tmp_path)))
    mgr.log = mgr.log.bind()
    mgr.log.info = lambda *a, **k: None  # type: ignore[method-assign]
    return mgr


def reloaded(tmp_path: Path) -> TopicConfigManager:
    mgr = manager(tmp_path)
    mgr.load()
    return mgr


def write_all(mgr: TopicConfigManager) -> list[JournalBatch | JournaledSnapshot]:
    """What the persist task does: write until nothing waits."""
    done = []
    for _ in range(100):
        work = mgr.next_write()
        if work is None:
            return done
        work.write()
        mgr.written(work)
        done.append(work)
    raise AssertionError("writes never end")


def test_records_round_trip_and_stop_at_a_torn_tail() -> None:
    data = b"".join(encode_journal_record({"seq": i}) for i in range(1, 4))
    assert decode_journal(data) == ([{"seq": 1}, {"seq": 2}, {"seq": 3}], len(data))
    for cut in range(1, 12):
        records, end = decode_journal(data[:-cut])
        assert [r["seq"] for r in records] == [1, 2] and end < len(data)
    flipped = bytearray(data)
    flipped[-2] ^= 0xFF  # crc mismatch in the last record
    assert [r["seq"] for r in decode_journal(bytes(flipped))[0]] == [1, 2]
    assert decode_journal(bytes(12)) == ([], 0)  # zeros (a length of 0) are no record


def test_changes_are_journaled_in_one_write_and_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = manager(tmp_path)
    woken: list[int] = []
    mgr.on_dirty = lambda: woken.append(1)
    seqs = [mgr.put(TopicConfig(f"T{i}", 4, 4)) for i in range(100)]
    assert mgr.remove("T3") is not None and mgr.remove("nope") is None
    mgr.put(TopicConfig("T5", 2, 2, PERM_READ))
    assert seqs == sorted(seqs) and len(woken) == 102 and mgr.durable_seq < mgr.seq
    counter = DiskCounter(monkeypatch)
    (work,) = write_all(mgr)  # group commit: every change waiting in one append
    assert isinstance(work, JournalBatch) and len(work.seqs) == 102
    assert counter.fsyncs == 2  # the journal, and its directory entry (first append only)
    assert counter.snapshots == 0 and not mgr.path.exists()
    assert mgr.durable_seq == mgr.seq and not mgr.dirty

    again = reloaded(tmp_path)
    assert {f"T{i}" for i in range(100)} - set(again.table) == {"T3"}
    assert again.get("T5") == TopicConfig("T5", 2, 2, PERM_READ)
    assert again.data_version == mgr.data_version and again.seq == mgr.seq

    mgr.put(TopicConfig("Later", 1, 1))
    counter.fsyncs = 0
    write_all(mgr)
    assert counter.fsyncs == 1  # one per append from now on
    assert "Later" in reloaded(tmp_path).table


def test_a_torn_last_record_is_ignored_and_cut_off(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    mgr.put(TopicConfig("A", 1, 1))
    mgr.put(TopicConfig("B", 1, 1))
    write_all(mgr)
    whole = mgr.journal.path.read_bytes()
    mgr.put(TopicConfig("Torn", 1, 1))
    (batch,) = write_all(mgr)
    assert isinstance(batch, JournalBatch)
    with open(mgr.journal.path, "r+b") as f:  # a crash in the middle of the last append
        f.truncate(len(whole) + len(batch.data) // 2)

    again = reloaded(tmp_path)
    assert {"A", "B"} <= set(again.table) and "Torn" not in again.table
    assert again.journal.path.read_bytes() == whole  # cut back to the last whole record
    again.put(TopicConfig("After", 1, 1))
    write_all(again)
    third = reloaded(tmp_path)
    assert {"A", "B", "After"} <= set(third.table) and "Torn" not in third.table


def test_a_failed_append_is_undone_and_written_again_as_a_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = manager(tmp_path)
    mgr.put(TopicConfig("A", 1, 1))
    write_all(mgr)
    size = mgr.journal.path.stat().st_size
    mgr.put(TopicConfig("B", 1, 1))
    work = mgr.next_write()
    assert isinstance(work, JournalBatch)
    real_fsync = os.fsync

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(broker.persist.os, "fsync", no_space)
    with pytest.raises(OSError):
        work.write()
    monkeypatch.setattr(broker.persist.os, "fsync", real_fsync)
    assert mgr.journal.path.stat().st_size == size  # the partial append is undone
    mgr.write_failed(work)
    (again,) = write_all(mgr)
    assert isinstance(again, JournaledSnapshot) and mgr.durable_seq == mgr.seq
    assert {"A", "B"} <= set(reloaded(tmp_path).table)


def test_compaction_when_the_journal_outgrows_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tcm, "COMPACT_MIN_RECORDS", 50)
    mgr = manager(tmp_path)
    kinds: list[str] = []
    for i in range(400):  # one topic changed over and over: the journal outgrows the table
        mgr.put(TopicConfig("Hot", 1 + i % 7, 1 + i % 7))
        mgr.put(TopicConfig(f"T{i % 20}", 1, 1))
        kinds += [type(w).__name__ for w in write_all(mgr)]
    assert kinds.count("JournaledSnapshot") >= 5
    assert mgr.journal.records < 60
    data = json.loads(mgr.path.read_text())
    assert data["journalSeq"] <= mgr.seq and "Hot" in data["topicConfigTable"]
    again = reloaded(tmp_path)
    assert again.get("Hot") == mgr.get("Hot") and again.table == mgr.table
    assert again.data_version == mgr.data_version


def test_a_crash_between_compaction_steps_loses_nothing(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    for name in ("A", "B", "C"):
        mgr.put(TopicConfig(name, 1, 1))
    mgr.remove("A")
    write_all(mgr)  # journal: put A, B, C, delete A
    snap = mgr.snapshot()
    assert snap is not None

    # 1. the temp file written, nothing renamed: the journal still holds everything
    tmp = snap.path.with_name(snap.path.name + ".tmp")
    tmp.write_bytes(tcm.render_topics(snap.data))
    assert set(reloaded(tmp_path).table) >= {"B", "C"} and "A" not in reloaded(tmp_path).table

    # 2. the snapshot in place, the journal not yet rotated: its records are older
    #    than the snapshot and skipped (the deleted A does not come back)
    atomic_write_bytes(snap.path, tcm.render_topics(snap.data))
    mgr.written(snap)
    mgr.put(TopicConfig("D", 1, 1))  # a change after the snapshot, journaled
    write_all(mgr)
    again = reloaded(tmp_path)
    assert {"B", "C", "D"} <= set(again.table) and "A" not in again.table

    # 3. a later compaction stopped after renaming the snapshot to .bak, before
    #    putting the new one in place: the .bak and both journals hold everything
    mgr.journal.rotate()
    mgr.put(TopicConfig("E", 1, 1))
    write_all(mgr)
    os.replace(mgr.path, mgr.path.with_name("topics.json.bak"))
    again = reloaded(tmp_path)
    assert {"B", "C", "D", "E"} <= set(again.table) and "A" not in again.table
    assert again.seq == mgr.seq


def test_an_unreadable_snapshot_falls_back_to_bak_and_both_journals(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch
                                                                      ) -> None:
    monkeypatch.setattr(tcm, "COMPACT_MIN_RECORDS", 1)
    mgr = manager(tmp_path)
    kinds = []
    for i in range(30):  # compactions every few records (the table is small)
        mgr.put(TopicConfig(f"T{i % 3}", 1 + i, 1 + i))
        kinds += [type(w).__name__ for w in write_all(mgr)]
    assert kinds.count("JournaledSnapshot") >= 2 and kinds[-1] == "JournalBatch"
    assert mgr.path.exists() and mgr.journal.bak.exists() and mgr.journal.path.exists()
    mgr.path.write_text("{torn")
    again = reloaded(tmp_path)
    assert again.table == mgr.table and again.seq == mgr.seq


def test_create_cost_does_not_grow_with_the_table(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 creations write the same bytes and fsync as often with 100,000
    topics as with 10: records, never the table."""

    def cost(existing: int, root: Path) -> tuple[int, int, int]:
        mgr = manager(root)
        mgr.replace({f"Old{i}": TopicConfig(f"Old{i}", 4, 4) for i in range(existing)},
                    DataVersion(1, 1))
        write_all(mgr)  # the copied table: one snapshot
        counter = DiskCounter(monkeypatch)
        written = 0
        for i in range(1000):
            mgr.put(TopicConfig(f"New{i:04d}", 4, 4))
            if i % 10 == 9:  # ten changes per group commit
                for work in write_all(mgr):
                    assert isinstance(work, JournalBatch)
                    written += len(work.data)
        monkeypatch.undo()
        return written, counter.fsyncs, counter.snapshots

    small = cost(10, tmp_path / "small")
    large = cost(100_000, tmp_path / "large")
    assert small == large
    assert small[1] <= 101 and small[2] == 0  # one fsync per group commit, no snapshot


def test_slave_copy_is_written_as_a_snapshot_and_needs_full_registrations(
    tmp_path: Path,
) -> None:
    mgr = manager(tmp_path)
    mgr.put(TopicConfig("Mine", 1, 1))
    write_all(mgr)
    seen = mgr.seq
    mgr.replace({"Theirs": TopicConfig("Theirs", 2, 2)}, DataVersion(7, 9))
    assert mgr.changes_since(seen) is None
    (work,) = write_all(mgr)
    assert isinstance(work, JournaledSnapshot)
    again = reloaded(tmp_path)
    assert "Theirs" in again.table and "Mine" not in again.table
    assert again.data_version == DataVersion(7, 9)


def test_changes_since_lists_what_changed_after_a_registration(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    mgr.put(TopicConfig("A", 1, 1))
    mgr.put(TopicConfig("B", 1, 1))
    seen = mgr.seq
    assert mgr.changes_since(seen) == ({}, [])
    mgr.put(TopicConfig("C", 1, 1))
    mgr.put(TopicConfig("A", 2, 2, PERM_RW))
    mgr.remove("B")
    changed, deleted = mgr.changes_since(seen) or ({}, [])
    assert changed == {"C": TopicConfig("C", 1, 1), "A": TopicConfig("A", 2, 2)}
    assert deleted == ["B"]
    assert mgr.changes_since(mgr.seq) == ({}, [])
    assert mgr.changes_since(mgr.changes_floor - 1) is None if mgr.changes_floor else True


def test_a_topics_attributes_are_journaled_and_replayed(tmp_path: Path) -> None:
    """A crash (no snapshot, only the journal's records) keeps message.type."""
    mgr = manager(tmp_path)
    mgr.put(TopicConfig("F", 4, 4, attributes={"message.type": "FIFO"}))
    write_all(mgr)
    assert not mgr.path.exists()  # only the journal holds it
    assert reloaded(tmp_path).get("F") == TopicConfig("F", 4, 4,
                                                      attributes={"message.type": "FIFO"})
