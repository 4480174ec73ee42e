"""controller/file_store.py: the one-file state store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from controller.file_store import STATE_FILE, FileStateStore, decode_file, encode_file
from controller.state_store import StateConflict, StateStore, StateStoreError, Stored


def _store(tmp_path: Path) -> StateStore:
    store: StateStore = FileStateStore(tmp_path / "ctrl")  # it is a StateStore
    return store


async def test_load_save_compare_and_swap(tmp_path: Path) -> None:
    store = FileStateStore(tmp_path / "ctrl")
    assert await store.load() is None
    assert await store.save(b"one", 0) == 1
    assert await store.save(b"two", 1) == 2
    with pytest.raises(StateConflict):
        await store.save(b"stale", 1)
    with pytest.raises(StateConflict):
        await store.save(b"first again", 0)
    assert await store.load() == Stored(b"two", 2)
    # another store on the same directory (a restart) reads the same
    assert await FileStateStore(tmp_path / "ctrl").load() == Stored(b"two", 2)
    assert _store(tmp_path) is not None


async def test_two_stores_one_file_cannot_both_win(tmp_path: Path) -> None:
    a, b = FileStateStore(tmp_path), FileStateStore(tmp_path)
    await a.save(b"x", 0)
    results: list[object] = []

    async def save(store: FileStateStore, data: bytes) -> None:
        try:
            results.append(await store.save(data, 1))
        except StateConflict as exc:
            results.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(save, a, b"from a")
        nursery.start_soon(save, b, b"from b")
    assert sorted(type(r).__name__ for r in results) == ["StateConflict", "int"]
    loaded = await a.load()
    assert loaded is not None and loaded.version == 2 and loaded.data in (b"from a", b"from b")


async def test_crash_mid_write_keeps_the_old_version(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStateStore(tmp_path)
    await store.save(b"old", 0)

    def crash(*_: object) -> None:
        raise OSError(5, "power cut before the rename")

    # the temp file is written and fsynced, then the process "dies" before the rename
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(StateStoreError, match="power cut"):
        await store.save(b"new", 1)
    monkeypatch.undo()
    assert (tmp_path / (STATE_FILE + ".tmp")).exists()
    assert await FileStateStore(tmp_path).load() == Stored(b"old", 1)
    # a torn temp file left by a crash is no obstacle to the next save
    (tmp_path / (STATE_FILE + ".tmp")).write_bytes(b"RMQ")
    assert await store.save(b"newer", 1) == 2
    assert await store.load() == Stored(b"newer", 2)


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic", "empty"])
async def test_a_damaged_file_is_an_error(tmp_path: Path, damage: str) -> None:
    store = FileStateStore(tmp_path)
    await store.save(b'{"format": 1, "brokerSets": []}', 0)
    path = tmp_path / STATE_FILE
    raw = bytearray(path.read_bytes())
    if damage == "truncate":
        raw = raw[:-3]
    elif damage == "flip":
        raw[-1] ^= 0x01
    elif damage == "magic":
        raw[0:1] = b"X"
    else:
        raw = bytearray()
    path.write_bytes(bytes(raw))
    with pytest.raises(StateStoreError):
        await store.load()
    with pytest.raises(StateStoreError):  # nor is it overwritten as if it were empty
        await store.save(b"x", 0)


def test_file_codec() -> None:
    raw = encode_file(b"data", 7)
    assert decode_file(raw) == Stored(b"data", 7)
    with pytest.raises(StateStoreError, match="positive"):
        decode_file(encode_file(b"data", 0))


async def test_unwritable_directory_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(StateStoreError):
        await FileStateStore(blocker / "sub").save(b"x", 0)
