"""WorkerThread: blocking calls in one long-lived thread, results back on trio."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from protocol.trio.worker_thread import WorkerThread


async def test_calls_run_in_order_in_one_thread_and_return_results() -> None:
    seen: list[tuple[int, str]] = []
    async with WorkerThread("t-order") as w:
        for i in range(5):
            assert await w.run_sync(lambda i=i: seen.append((i, threading.current_thread().name)) or i) == i
        thread = w._thread
    assert [i for i, _ in seen] == [0, 1, 2, 3, 4]
    assert {name for _, name in seen} == {"t-order"}
    assert thread is not None and not thread.is_alive()  # joined on exit


async def test_an_exception_is_raised_in_the_caller_and_the_thread_goes_on() -> None:
    def boom() -> int:
        raise OSError(5, "I/O error")

    async with WorkerThread("t-err") as w:
        with pytest.raises(OSError, match="I/O error"):
            await w.run_sync(boom)
        assert await w.run_sync(lambda: 7) == 7


async def test_a_cancelled_caller_still_waits_for_its_call() -> None:
    started, release = threading.Event(), threading.Event()
    finished: list[bool] = []
    returned: list[bool] = []

    def slow() -> None:
        started.set()
        release.wait(10)
        finished.append(True)

    async with WorkerThread("t-cancel") as w, trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def canceller() -> None:
            await trio.to_thread.run_sync(started.wait, 10)
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert not finished and not returned  # still waiting for the call
            release.set()

        nursery.start_soon(canceller)
        with scope:
            await w.run_sync(slow)
            returned.append(True)
            await trio.lowlevel.checkpoint()
        assert finished == [True] and returned == [True]
        assert scope.cancelled_caught


async def test_calls_after_close_are_refused() -> None:
    w = WorkerThread("t-closed")
    with pytest.raises(trio.ClosedResourceError):
        await w.run_sync(lambda: 1)
    async with w:
        pass
    with pytest.raises(trio.ClosedResourceError):
        await w.run_sync(lambda: 1)


async def test_on_result_runs_in_the_trio_thread_before_the_caller_wakes() -> None:
    order: list[str] = []
    loop_thread = threading.current_thread()

    def on_result(value: int) -> None:
        assert threading.current_thread() is loop_thread
        order.append(f"on_result {value}")

    async with WorkerThread("t-on-result") as w:
        assert await w.run_sync(lambda: 3, on_result=on_result) == 3
        order.append("caller")
    assert order == ["on_result 3", "caller"]


async def test_on_result_is_skipped_for_an_exception_and_its_own_error_reaches_the_caller(
) -> None:
    called: list[int] = []

    def boom() -> int:
        raise OSError(5, "I/O error")

    def bad_callback(value: int) -> None:
        called.append(value)
        raise RuntimeError("callback failed")

    async with WorkerThread("t-on-result-err") as w:
        with pytest.raises(OSError, match="I/O error"):
            await w.run_sync(boom, on_result=called.append)
        assert called == []
        with pytest.raises(RuntimeError, match="callback failed"):
            await w.run_sync(lambda: 4, on_result=bad_callback)
        assert called == [4]
        assert await w.run_sync(lambda: 5) == 5  # the thread and the loop go on
