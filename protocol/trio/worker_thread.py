"""WorkerThread: one long-lived thread for one kind of blocking call.

``trio.to_thread.run_sync`` costs a capacity-limiter round, a thread-cache
hand-off and an abortable wait per call: on this project's 2-core target
about 230 µs from the call to the result, as much as the ``fdatasync`` a
SYNC_FLUSH send waits for. A service that makes one blocking call after
another (the group commit's flushes) keeps its own thread instead: the call
is a ``SimpleQueue.put`` and the result comes back through the trio token:
awaited (``run_sync``), or handed to a callback on the loop (``submit``),
which saves the caller's wake-up when what follows is short.

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

from protocol.trio.busy_poll import BusyPoll, active

T = TypeVar("T")

_STOP = object()


class WorkerThread:
    """Use as ``async with WorkerThread(name) as w: await w.run_sync(fn)``.

    Leaving the block stops the thread once its queued calls are done and
    joins it (in a trio worker thread, so the loop keeps serving)."""

    def __init__(self, name: str, busy_poll: BusyPoll | None = None) -> None:
        self.name = name
        # a spinning loop pauses while a call runs: the thread needs a CPU and the GIL
        self._busy_poll = active(busy_poll)
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._token: trio.lowlevel.TrioToken | None = None

    async def __aenter__(self) -> WorkerThread:
        self._token = trio.lowlevel.current_trio_token()
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

    def submit(self, fn: Callable[[], T], done: Callable[[outcome.Outcome[T]], object]) -> None:
        """Queue ``fn()`` without waiting: ``done(outcome)`` runs in the trio
        thread as soon as the loop hears of it. ``done`` must not raise (it
        runs as a ``run_sync_soon`` callback); it is never called once the
        trio run has finished."""
        token = self._token
        if self._closed or self._thread is None or token is None:
            raise trio.ClosedResourceError(f"{self.name} is not running")

        busy_poll = self._busy_poll
        if busy_poll is not None:
            busy_poll.pause()
            then = done

            def done(result: outcome.Outcome[T]) -> None:
                busy_poll.resume()
                then(result)

        def report(result: outcome.Outcome[T]) -> None:
            try:
                token.run_sync_soon(done, result)
            except trio.RunFinishedError:
                pass

        self._jobs.put((fn, report))

    async def run_sync(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` in the thread; its result or exception."""
        done = trio.Event()
        box: list[outcome.Outcome[T]] = []

        def finish(result: outcome.Outcome[T]) -> None:
            box.append(result)
            done.set()

        self.submit(fn, finish)
        with trio.CancelScope(shield=True):
            await done.wait()
        return box[0].unwrap()
