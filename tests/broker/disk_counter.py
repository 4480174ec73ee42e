"""Counting what broker.persist does on disk: journal appends, snapshot writes, fsyncs."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import broker.persist


class DiskCounter:
    """Counts journal appends (and the records they hold), snapshot writes and
    fsyncs, and the fsyncs run on the thread that made the counter (the event
    loop's, in a trio test)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.appended = 0  # records on disk
        self.appends = 0
        self.snapshots = 0
        self.fsyncs = 0
        self.fsyncs_on_loop = 0
        real_append = broker.persist.TableJournal.append
        real_fsync = os.fsync
        real_write = broker.persist.atomic_write_bytes
        loop_thread = threading.current_thread()

        def append(journal: broker.persist.TableJournal, data: bytes, count: int) -> None:
            real_append(journal, data, count)
            self.appends += 1
            self.appended += count

        def fsync(fd: int) -> None:
            self.fsyncs += 1
            if threading.current_thread() is loop_thread:
                self.fsyncs_on_loop += 1
            real_fsync(fd)

        def write(path: Path, data: bytes) -> None:
            self.snapshots += 1
            real_write(path, data)

        monkeypatch.setattr(broker.persist.TableJournal, "append", append)
        monkeypatch.setattr(broker.persist.os, "fsync", fsync)
        monkeypatch.setattr(broker.persist, "atomic_write_bytes", write)
