"""WorkerThread: blocking calls in one long-lived thread, results back on trio."""

from __future__ import annotations

import threading

import outcome
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


async def test_submit_hands_the_outcome_to_a_callback_in_the_trio_thread() -> None:
    got: list[tuple[str, object]] = []
    loop_thread = threading.current_thread()
    done = trio.Event()

    def boom() -> int:
        raise OSError(5, "I/O error")

    def callback(result: outcome.Outcome[int]) -> None:
        assert threading.current_thread() is loop_thread
        got.append(("value", result.unwrap()) if isinstance(result, outcome.Value)
                   else ("error", repr(result.error)))
        if len(got) == 3:
            done.set()

    async with WorkerThread("t-submit") as w:
        for fn in (lambda: 3, boom, lambda: 4):
            w.submit(fn, callback)  # no await: queued in order
        with trio.fail_after(10):
            await done.wait()
        assert await w.run_sync(lambda: 5) == 5  # the thread goes on
    assert got == [("value", 3), ("error", "OSError(5, 'I/O error')"), ("value", 4)]
    with pytest.raises(trio.ClosedResourceError):
        w.submit(lambda: 1, callback)
