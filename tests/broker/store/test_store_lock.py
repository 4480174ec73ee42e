from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.store import DefaultMessageStore, PutMessageStatus, StoreConfig, StoreError
from broker.store.store_lock import StoreLock, StoreLockedError
from tests.broker.store.helpers import inner, make_config, open_store


def test_second_store_on_one_directory_fails_to_load(tmp_path: Path) -> None:
    first = open_store(make_config(tmp_path))
    assert first.put_message(inner("T", 0, b"one")).put_message_status is PutMessageStatus.PUT_OK
    second = DefaultMessageStore(StoreConfig.from_broker(make_config(tmp_path)))
    with pytest.raises(StoreLockedError) as err:
        second.load()
    text = str(err.value)
    assert str(tmp_path) in text and f"pid {os.getpid()}" in text
    assert isinstance(err.value, StoreError)
    with pytest.raises(StoreError):  # never loaded, never started
        second.start()
    second.shutdown()  # harmless: it holds nothing
    # the first store is unaffected
    assert first.put_message(inner("T", 0, b"two")).put_message_status is PutMessageStatus.PUT_OK
    assert len(first.get_message("g", "T", 0, 0, 32, None).buffers) == 2
    first.shutdown()


def test_lock_released_at_shutdown(tmp_path: Path) -> None:
    first = open_store(make_config(tmp_path))
    first.shutdown()
    again = open_store(make_config(tmp_path))  # the lock went with the shutdown
    again.shutdown()
    assert (tmp_path / "lock").exists()  # the file stays; only the lock goes


def test_lock_released_when_load_fails(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=4096))
    store.put_message(inner("T", 0, b"x"))
    store.shutdown()
    # the file size cannot change
    wrong = DefaultMessageStore(StoreConfig.from_broker(make_config(tmp_path, cl_size=8192)))
    with pytest.raises(StoreError, match="file size"):
        wrong.load()
    assert not wrong.store_lock.held
    open_store(make_config(tmp_path, cl_size=4096)).shutdown()


def test_lock_file_names_no_pid_when_unknown(tmp_path: Path) -> None:
    holder = StoreLock(tmp_path)
    holder.acquire()
    os.truncate(tmp_path / "lock", 0)  # the holder has not written its pid yet
    with pytest.raises(StoreLockedError) as err:
        StoreLock(tmp_path).acquire()
    assert "with pid" not in str(err.value) and str(tmp_path) in str(err.value)
    holder.release()
    other = StoreLock(tmp_path)
    other.acquire()
    other.release()
