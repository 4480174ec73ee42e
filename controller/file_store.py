"""FileStateStore: the controller's state in one local file (one controller).

The file (``controllerStorePath``/``controller.state``):

    magic "RMQCTRL1" (8) | version (8, big-endian) | length (4) | crc32 (4) | data

with the CRC over version, length and data. A save writes a temp file, fsyncs it,
renames it over the old one and fsyncs the directory, all in a worker thread, before
it returns: a crash at any point leaves the old version or the new one, never a
mix. The compare-and-swap reads the version on disk under an exclusive ``flock`` of
``controller.state.lock``, so two processes pointed at one directory cannot both
save over the same version. A file that fails its checks is an error
(StateStoreError), never taken for an empty state: the operator decides.
"""

from __future__ import annotations

import fcntl
import os
import struct
import zlib
from pathlib import Path

import trio

from controller.state_store import StateConflict, StateStoreError, Stored
from protocol.trio.files import fsync_dir

MAGIC = b"RMQCTRL1"
_HEAD = struct.Struct(">8sQII")
STATE_FILE = "controller.state"
MAX_STATE_BYTES = 256 * 1024 * 1024


def encode_file(data: bytes, version: int) -> bytes:
    crc = zlib.crc32(struct.pack(">QI", version, len(data)) + data)
    return _HEAD.pack(MAGIC, version, len(data), crc) + data


def decode_file(raw: bytes, where: str = "state file") -> Stored:
    """The stored blob and version; StateStoreError when the bytes fail a check."""
    if len(raw) < _HEAD.size:
        raise StateStoreError(f"{where}: {len(raw)} bytes, shorter than its header")
    magic, version, length, crc = _HEAD.unpack_from(raw)
    if magic != MAGIC:
        raise StateStoreError(f"{where}: not a controller state file (magic {magic!r})")
    data = raw[_HEAD.size:]
    if len(data) != length:
        raise StateStoreError(f"{where}: holds {len(data)} bytes of data, its header says "
                              f"{length} (truncated or damaged)")
    if zlib.crc32(struct.pack(">QI", version, length) + data) != crc:
        raise StateStoreError(f"{where}: CRC mismatch (damaged)")
    if version <= 0:
        raise StateStoreError(f"{where}: version {version} is not positive")
    return Stored(data, version)


class FileStateStore:
    """``controller.state_store.StateStore`` over a local file."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).expanduser()
        self.path = self.directory / STATE_FILE
        self._lock = trio.Lock()
        self.saves = 0

    # ---- blocking parts (worker thread) ----

    def _read(self) -> Stored | None:
        try:
            size = self.path.stat().st_size
            if size > MAX_STATE_BYTES + _HEAD.size:
                raise StateStoreError(f"{self.path}: {size} bytes, more than a state holds")
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateStoreError(f"cannot read {self.path}: {exc}") from exc
        return decode_file(raw, str(self.path))

    def _save(self, data: bytes, expected: int) -> int:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.directory / (STATE_FILE + ".lock"), "a+b") as lock:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
                current = self._read()
                version = current.version if current is not None else 0
                if version != expected:
                    raise StateConflict(f"{self.path} holds version {version}, not {expected}")
                new = version + 1
                tmp = self.directory / (STATE_FILE + ".tmp")
                with open(tmp, "wb") as f:
                    f.write(encode_file(data, new))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
                fsync_dir(self.directory)
                return new
        except (StateConflict, StateStoreError):
            raise
        except OSError as exc:
            raise StateStoreError(f"cannot write {self.path}: {exc}") from exc

    # ---- StateStore ----

    async def load(self) -> Stored | None:
        async with self._lock:
            return await trio.to_thread.run_sync(self._read)

    async def save(self, data: bytes, expected: int) -> int:
        if len(data) > MAX_STATE_BYTES:
            raise StateStoreError(f"state of {len(data)} bytes is larger than "
                                  f"{MAX_STATE_BYTES}")
        async with self._lock:
            version = await trio.to_thread.run_sync(self._save, data, expected)
            self.saves += 1
            return version

    async def aclose(self) -> None:
        return None
