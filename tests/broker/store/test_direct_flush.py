"""The commit-log flush in steps, for fsyncs no thread runs (broker/group_commit.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from tests.broker.store.helpers import inner, make_config, open_store


def test_a_plan_holds_dups_of_the_unflushed_files_and_its_end_records_them(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=4096))
    try:
        for i in range(40):  # over several 4 KiB files
            store.put_message(inner("T", 0, b"x" * 200 + bytes([i])))
        mfq = store.commit_log.mapped_file_queue
        store.flush_commit_log()
        assert store.begin_commit_log_flush().files == []  # type: ignore[union-attr]
        before = mfq.max_offset
        for _ in range(12):
            store.put_message(inner("T", 0, b"y" * 300))
        plan = store.begin_commit_log_flush()
        assert plan is not None and plan.target == mfq.max_offset > before
        unflushed = [mf for mf in mfq.files if mf.wrote_position > mf.flushed_position]
        assert [f for f, _, _ in plan.files] == unflushed and len(unflushed) >= 2
        for mf, wrote, fd in plan.files:
            assert wrote == mf.wrote_position and fd != mf.fd
            assert os.fstat(fd).st_ino == os.fstat(mf.fd).st_ino  # the same file
        for _, _, fd in plan.files:
            os.fdatasync(fd)  # what the kernel does for the group commit
        assert store.end_commit_log_flush(plan) == plan.target == store.commit_log.flushed_where
        assert all(mf.flushed_position == mf.wrote_position for mf in unflushed)
        assert store.checkpoint.physic_msg_timestamp == plan.before_ms
        fds = [fd for _, _, fd in plan.files]
        plan.close()
        for fd in fds:
            try:
                os.fstat(fd)
            except OSError:
                continue
            raise AssertionError(f"fd {fd} was left open")
    finally:
        store.shutdown()


def test_no_plan_while_a_thread_holds_the_file_lock(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path))
    try:
        store.put_message(inner("T", 0, b"z"))
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with store._file_lock:
                held.set()
                release.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        held.wait(10)
        assert store.begin_commit_log_flush() is None  # never waits on the lock
        release.set()
        t.join()
        plan = store.begin_commit_log_flush()
        assert plan is not None and len(plan.files) == 1
        plan.close()
    finally:
        store.shutdown()


def test_the_next_file_is_wanted_once_the_last_is_half_full(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=4096))
    try:
        store.put_message(inner("T", 0, b"a" * 100))
        assert not store.commit_log_wants_next_file()
        while store.commit_log.mapped_file_queue.last().wrote_position * 2 < 4096:  # type: ignore[union-attr]
            store.put_message(inner("T", 0, b"b" * 100))
        assert store.commit_log_wants_next_file()
        store.prepare_next_commit_log_file()
        assert store.commit_log.mapped_file_queue.next_ready
        assert not store.commit_log_wants_next_file()
    finally:
        store.shutdown()
