"""The ASYNC_FLUSH write-behind loop (BrokerController._write_behind_loop), in
virtual time: when puts write enough within the interval after one wakes it, it
hands the commit log's bytes not yet fsynced to the disk; a slow stream of puts
is left to the fsync, and an idle broker is never woken. Its keys are checked,
and the flush intervals with them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from broker.config import BrokerConfig
from broker.controller import BrokerController
from protocol.config import ConfigError


def _controller(tmp_path: Path, **kw: Any) -> tuple[BrokerController, list[tuple[float, int]]]:
    """A controller whose store records each write-behind (virtual time, least
    bytes) and whose commit log is only its end offset, moved by ``_put``."""
    c = BrokerController(BrokerConfig(store_path_root_dir=str(tmp_path), **kw))
    calls: list[tuple[float, int]] = []

    def write_behind(least: int) -> int:
        calls.append((trio.current_time(), least))
        return 1

    c.message_store.write_behind = write_behind  # type: ignore[method-assign,assignment]
    c.message_store.commit_log = SimpleNamespace(max_offset=0)  # type: ignore[assignment]
    return c, calls


def _put(c: BrokerController, nbytes: int) -> None:
    """A put of ``nbytes``: the commit log grows, the append listeners hear of it."""
    c.message_store.commit_log.max_offset += nbytes
    for appended in list(c.message_store.append_listeners):
        appended()


LEAST = 64 * 4096


async def test_a_fast_stream_of_puts_is_written_behind_and_idle_is_quiet(
        tmp_path: Path, autojump_clock: trio.testing.MockClock, no_threads: None) -> None:
    c, calls = _controller(tmp_path, write_behind_interval_commit_log=10,
                           write_behind_commit_log_least_pages=64)
    before = list(c.message_store.append_listeners)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c._write_behind_loop)
        await trio.sleep(5)
        assert len(c.message_store.append_listeners) == len(before) + 1
        assert calls == []  # idle: no wake-up, no thread
        woke_at = trio.current_time()
        _put(c, 32 * 1024)  # wakes the loop; the interval counts from here
        for _ in range(8):  # 8 x 32 KiB within 10 ms: the least of 256 KiB
            await trio.sleep(0.001)
            _put(c, 32 * 1024)
        await trio.sleep(1)
        assert calls == [(pytest.approx(woke_at + 0.010), 1)]  # all not yet fsynced
        await trio.sleep(5)
        assert len(calls) == 1  # idle again
        _put(c, 1)
        await trio.sleep(0.001)
        _put(c, LEAST)
        await trio.sleep(0.05)
        assert len(calls) == 2
        nursery.cancel_scope.cancel()
    assert c.message_store.append_listeners == before  # its listener goes with it


async def test_a_slow_stream_of_puts_is_left_to_the_fsync(
        tmp_path: Path, autojump_clock: trio.testing.MockClock, no_threads: None) -> None:
    c, calls = _controller(tmp_path, write_behind_interval_commit_log=10)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c._write_behind_loop)
        await trio.sleep(0.001)
        for _ in range(200):  # 1 KiB a ms: 10 KiB in each 10 ms, far below 256 KiB
            _put(c, 1024)
            await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    assert c.message_store.commit_log.max_offset == 200 * 1024
    assert calls == []


@pytest.mark.parametrize("key", ["write_behind_interval_commit_log",
                                 "write_behind_commit_log_least_pages"])
def test_negative_write_behind_keys_are_refused(tmp_path: Path, key: str) -> None:
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path), **{key: -1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="must not be negative"):
        cfg.validate()
    BrokerConfig(store_path_root_dir=str(tmp_path), **{key: 0}).validate()  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["flush_interval_commit_log", "flush_interval_consume_queue"])
@pytest.mark.parametrize("value", [0, -5])
def test_flush_intervals_must_be_positive(tmp_path: Path, key: str, value: int) -> None:
    """A flush loop of 0 ms would spin."""
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path), **{key: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="must be positive"):
        cfg.validate()
