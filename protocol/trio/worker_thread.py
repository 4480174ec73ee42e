"""WorkerThread: one long-lived thread for one kind of blocking call.

``trio.to_thread.run_sync`` costs a capacity-limiter round, a thread-cache
hand-off and an abortable wait per call: on this project's 2-core target
about 230 µs from the call to the result, as much as the ``fdatasync`` a
SYNC_FLUSH send waits for. A service that makes one blocking call after
another (the group commit's flushes) keeps its own thread instead: the call
is a ``SimpleQueue.put`` and the result comes back through the trio token.

Calls are run one at a time, in order. A caller that is cancelled while its
call runs still waits for it (the call cannot be interrupted and holds the
file it works on); calls made after ``close()`` raise ``trio.ClosedResourceError``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

T = TypeVar("T")

_STOP = object()


class WorkerThread:
    """Use as ``async with WorkerThread(name) as w: await w.run_sync(fn)``.

    Leaving the block stops the thread once its queued calls are done and
    joins it (in a trio worker thread, so the loop keeps serving)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    async def __aenter__(self) -> WorkerThread:
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
        thread = self._thread
        if thread is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(thread.join)
            self._thread = None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._jobs.put(_STOP)

    def _main(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            fn, report = job
            report(outcome.capture(fn))

    async def run_sync(self, fn: Callable[[], T],
                       on_result: Callable[[T], object] | None = None) -> T:
        """Run ``fn()`` in the thread; its result or exception.

        ``on_result(value)``, when given, runs in the trio thread as soon as
        the loop hears of the result, before the caller is woken: what must
        follow the call at once (the group commit answering the sends it
        flushed) skips a scheduling round. If it raises, the caller gets that
        exception."""
        if self._closed or self._thread is None:
            raise trio.ClosedResourceError(f"{self.name} is not running")
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        box: list[outcome.Outcome[T]] = []

        def finish() -> None:
            # a run_sync_soon callback: it must not raise (trio would crash)
            if on_result is not None and isinstance(box[0], outcome.Value):
                try:
                    on_result(box[0].value)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    box[0] = outcome.Error(exc)
            done.set()

        def report(result: outcome.Outcome[T]) -> None:
            box.append(result)
            try:
                token.run_sync_soon(finish)
            except trio.RunFinishedError:
                pass

        self._jobs.put((fn, report))
        with trio.CancelScope(shield=True):
            await done.wait()
        return box[0].unwrap()
