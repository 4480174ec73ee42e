"""Fixtures the broker's virtual-time tests share."""

from __future__ import annotations

from typing import Any

import outcome
import pytest
import trio

from protocol.trio.worker_thread import WorkerThread


async def inline(fn: Any, *args: Any, **kw: Any) -> Any:
    return fn(*args)  # without a worker thread: virtual time stays exact


@pytest.fixture
def no_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker-thread calls (trio.to_thread, WorkerThread) made on the loop:
    virtual time does not run on while a real thread works."""

    async def inline_method(self: WorkerThread, fn: Any) -> Any:
        return fn()

    def inline_submit(self: WorkerThread, fn: Any, done: Any) -> None:
        trio.lowlevel.current_trio_token().run_sync_soon(done, outcome.capture(fn))

    monkeypatch.setattr(trio.to_thread, "run_sync", inline)
    monkeypatch.setattr(WorkerThread, "run_sync", inline_method)
    monkeypatch.setattr(WorkerThread, "submit", inline_submit)
