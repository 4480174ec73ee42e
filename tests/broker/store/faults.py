"""Simulated disk trouble for store tests: no space for some files, no fallocate."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from broker.store import message_store

_real_fallocate = os.posix_fallocate
_real_disk_usage = shutil.disk_usage


class Usage(NamedTuple):
    total: int
    used: int
    free: int


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


class Disk:
    """Patches ``os.posix_fallocate``, ``shutil.disk_usage`` and the store's
    used-space ratio.

    ``full_for``: files (by path) whose allocation fails with ENOSPC although
    the free-space check passed (another writer took the space meanwhile).
    ``free``: what disk_usage reports as free (None: the truth).
    ``used_ratio``: what the store's periodic check reads (the host's own
    fill never decides a test).
    ``no_fallocate``: posix_fallocate fails with EOPNOTSUPP (zeros are written).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full_for: Callable[[str], bool] = lambda path: False
        self.free: int | None = None
        self.used_ratio = 0.5
        self.no_fallocate = False
        self.allocations: list[str] = []
        monkeypatch.setattr(os, "posix_fallocate", self._fallocate)
        monkeypatch.setattr(shutil, "disk_usage", self._disk_usage)
        monkeypatch.setattr(message_store, "disk_used_ratio", lambda path: self.used_ratio)

    def _fallocate(self, fd: int, offset: int, length: int) -> None:
        path = fd_path(fd)
        if self.no_fallocate:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        if self.full_for(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        self.allocations.append(path)
        _real_fallocate(fd, offset, length)

    def _disk_usage(self, path: str | Path) -> Usage:
        real = _real_disk_usage(path)
        if self.free is None:
            return Usage(real.total, real.used, real.free)
        return Usage(real.total, real.total - self.free, self.free)

    def space_returns(self) -> None:
        self.full_for = lambda path: False
        self.free = None


def under(part: str) -> Callable[[str], bool]:
    """A ``full_for`` predicate: files in a directory named ``part``."""
    return lambda path: part in Path(path).parts


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its content (None for a directory)."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out
