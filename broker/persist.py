"""Atomic JSON persistence for the broker's managers (ConfigManager in RocketMQ).

Write a temp file, fsync it, keep the previous file as ``.bak``, rename the
temp file into place, fsync the directory. Loading falls back to ``.bak`` when
the main file is missing or unreadable.

A manager's table is mutated by the event loop; it is never iterated by a
worker thread. The loop takes a ``ConfigSnapshot`` (a copy that shares nothing
mutable with the table) and the worker thread serialises and writes that.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

log = structlog.get_logger("broker.persist")


def atomic_write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(obj, indent=2, sort_keys=True).encode()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if path.exists():
        bak = path.with_name(path.name + ".bak")
        os.replace(path, bak)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@dataclass(frozen=True, slots=True)
class ConfigSnapshot:
    """A table copied on the event loop, written from anywhere.

    ``data`` holds no object the loop mutates after the snapshot (immutable
    values may be shared); ``render`` turns it into the JSON document in the
    writer's thread, so the loop only pays for the copy.
    """

    path: Path
    data: Any
    render: Callable[[Any], Any] | None = None

    def write(self) -> None:
        atomic_write_json(self.path, self.data if self.render is None else self.render(self.data))


class SnapshotTable(Protocol):
    """A manager whose table is written from snapshots (a ``dirty`` flag)."""

    dirty: bool

    def snapshot(self, force: bool = False) -> ConfigSnapshot | None: ...


def write_snapshot_now(table: SnapshotTable, force: bool = False) -> None:
    """Snapshot ``table`` and write it in the caller's thread (tests, shutdown);
    a failed write leaves it dirty for the next try."""
    snap = table.snapshot(force)
    if snap is None:
        return
    try:
        snap.write()
    except BaseException:
        table.dirty = True
        raise


def load_json(path: Path) -> Any | None:
    """The file's content, or its ``.bak``'s, or None when neither is readable."""
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            return json.loads(candidate.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            log.warning("config file unreadable, trying backup", path=str(candidate), error=str(exc))
    return None
