"""The broker makes the next index file in a worker thread as soon as a
dispatch leaves the last one half full (BrokerController._index_ahead_loop
over IndexService.on_wants_next): the dispatch, on the event loop, never makes
one itself, even when files fill faster than the consume-queue flush comes
round. Virtual time, the thread's call made inline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import broker.store.index_service as service
from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.store.commit_log import DispatchRequest
from broker.store.index_service import IndexService


def _req(i: int) -> DispatchRequest:
    return DispatchRequest("T", 0, i * 100, 100, 0, 1_700_000_000_000, i, f"k{i}", None, 0)


async def test_the_next_file_is_made_as_soon_as_the_last_is_half_full(
        tmp_path: Path, autojump_clock: trio.testing.MockClock, no_threads: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = BrokerController(BrokerConfig(store_path_root_dir=str(tmp_path / "store")))
    svc = IndexService(tmp_path / "index", hash_slot_num=4, index_num=10)
    made: list[str] = []  # where an IndexFile was made: "loop" (a dispatch) or "ahead"
    real = service.IndexFile
    where = ["loop"]

    def counted(path: Path, *args: int) -> Any:
        made.append(where[0])
        return real(path, *args)

    monkeypatch.setattr(service, "IndexFile", counted)
    real_prepare = svc.prepare_next

    def prepare(now_ms: int | None = None) -> bool:
        where[0] = "ahead"
        try:
            return real_prepare(now_ms)
        finally:
            where[0] = "loop"

    svc.prepare_next = prepare  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c._index_ahead_loop, svc)
        await trio.sleep(1)
        assert svc.on_wants_next is not None
        svc.dispatch(_req(1))  # no file ahead yet (no load here): the dispatch makes one
        assert made == ["loop"]
        for i in range(2, 41):  # 9 keys a file: four files more
            svc.dispatch(_req(i))
            await trio.sleep(0.001)  # the loop's task runs between requests
        # four taken, and a fifth ahead of the last (keys 37-40: half full)
        assert made == ["loop"] + ["ahead"] * 5
        assert len(svc.files) == 5 and svc.next_ready
        assert svc.query_offset("T", "k33", 10, 0, 2**62) == [3300]
        await trio.sleep(5)
        assert len(made) == 6  # no file is made while none is wanted
        nursery.cancel_scope.cancel()
    assert svc.on_wants_next is None  # its hook goes with it
    svc.close()


async def test_a_slow_stream_wakes_it_once_a_file(
        tmp_path: Path, autojump_clock: trio.testing.MockClock, no_threads: None) -> None:
    c = BrokerController(BrokerConfig(store_path_root_dir=str(tmp_path / "store")))
    svc = IndexService(tmp_path / "index", hash_slot_num=4, index_num=10)
    calls: list[float] = []
    real_prepare = svc.prepare_next

    def prepare(now_ms: int | None = None) -> bool:
        calls.append(trio.current_time())
        return real_prepare(now_ms)

    svc.prepare_next = prepare  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c._index_ahead_loop, svc)
        await trio.sleep(1)
        for i in range(1, 10):  # one file's worth, a key a second
            svc.dispatch(_req(i))
            await trio.sleep(1)
        assert len(calls) == 1 and svc.next_ready  # at half full, once
        nursery.cancel_scope.cancel()
    svc.close()
