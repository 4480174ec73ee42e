"""StoreLock: one broker per store directory.

The store takes an exclusive ``flock`` on ``<storePathRootDir>/lock`` before it
opens any file and holds it until shutdown (RocketMQ's ``lock`` file). A
second broker on the same directory gets ``StoreLockedError`` naming the
directory and the holder's pid (which the holder writes into the file). The
lock belongs to the open file, so it goes with the process however it ends
(kill -9 included): nothing stale is ever left to clean up by hand.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from broker.store.status import StoreError

LOCK_FILE_NAME = "lock"


class StoreLockedError(StoreError):
    """Another broker (or store) holds the store directory."""


class StoreLock:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / LOCK_FILE_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (creating the directory); StoreLockedError when it is
        held elsewhere, StoreError when the file cannot be opened."""
        if self._fd is not None:
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # no O_TRUNC: the holder's pid stays readable for the error below
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open the store lock file {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            by = f" by the process with pid {holder}" if holder else ""
            raise StoreLockedError(
                f"the store directory {self.root} is locked{by}: another broker is using it "
                "(each broker needs its own storePathRootDir)"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"cannot lock {self.path}: {exc}") from exc
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid is only a hint for the error a second broker gets
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (the file stays: removing it would race a new holder)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
