"""LoopThread: one trio event loop on a daemon thread, for the blocking facade.

Every blocking Producer / PullConsumer of a process shares one loop
(``acquire_loop`` / ``release_loop``, reference counted): it starts with the
first object started and stops, joining its thread, when the last one shuts
down. Plain threads call into it with ``trio.from_thread.run``. An ``atexit``
hook stops a loop that was left running.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
import trio

from client.errors import MQClientError

log = structlog.get_logger("client.loop_thread")

T = TypeVar("T")

THREAD_NAME = "rocketmq-client-loop"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 30.0


class LoopThread:
    """A trio run on a daemon thread; ``run(afn, *args)`` executes in it."""

    def __init__(self, name: str = THREAD_NAME) -> None:
        self.name = name
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop_event: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._token is not None

    def in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def start(self) -> None:
        """Start the thread and wait until its loop runs. Raises MQClientError."""
        if self._thread is not None:
            raise MQClientError("the loop thread was already started")
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT) or self._token is None:
            raise MQClientError(f"the client loop thread did not start: {self._error!r}")

    def _main(self) -> None:
        try:
            trio.run(self._async_main)
        except BaseException as exc:  # report, never raise from a thread
            self._error = exc
            log.error("client loop thread crashed", exc_info=exc)
        finally:
            self._token = None
            self._ready.set()

    async def _async_main(self) -> None:
        self._stop_event = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop_event.wait()
            nursery.cancel_scope.cancel()  # background tasks end with the loop

    def spawn(self, afn: Callable[..., Awaitable[object]], *args: Any) -> None:
        """Start ``afn(*args)`` as a background task of the loop (cancelled
        when the loop stops). An error it raises is logged, never propagated:
        report failures through a channel or an attribute."""
        token, nursery = self._token, self._nursery
        if token is None or nursery is None:
            raise MQClientError("the client loop thread is not running")

        async def guarded() -> None:
            try:
                await afn(*args)
            except Exception as exc:
                log.error("client loop background task failed", exc_info=exc)

        try:
            trio.from_thread.run_sync(nursery.start_soon, guarded, trio_token=token)
        except trio.RunFinishedError as exc:
            raise MQClientError("the client loop thread has stopped") from exc

    def run(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``afn(*args)`` in the loop and return its result (or raise its error).

        Raises MQClientError when the loop is not running or when called from
        the loop thread itself (e.g. inside a send callback).
        """
        token = self._token
        if token is None:
            raise MQClientError("the client loop thread is not running")
        if self.in_loop_thread():
            raise MQClientError(
                "blocking client API called from its own loop thread (e.g. in a callback); "
                "use the async API there"
            )
        try:
            return trio.from_thread.run(afn, *args, trio_token=token)
        except trio.RunFinishedError as exc:
            raise MQClientError("the client loop thread has stopped") from exc

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop the loop (its background services are cancelled) and join the thread."""
        token, event, thread = self._token, self._stop_event, self._thread
        if token is not None and event is not None:
            try:
                trio.from_thread.run_sync(event.set, trio_token=token)
            except trio.RunFinishedError:
                pass
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("client loop thread did not stop in time", timeout=timeout)


_lock = threading.Lock()
_shared: LoopThread | None = None
_users = 0
_atexit_registered = False


def acquire_loop() -> LoopThread:
    """The shared loop, started if needed; adds a user (``release_loop`` it)."""
    global _shared, _users, _atexit_registered
    with _lock:
        if _shared is not None and _shared.in_loop_thread():
            raise MQClientError(
                "blocking client objects cannot be started from the client loop thread"
            )
        if _shared is None or not _shared.alive:
            loop = LoopThread()
            loop.start()
            _shared = loop
            _users = 0
            if not _atexit_registered:
                atexit.register(_stop_at_exit)
                _atexit_registered = True
        _users += 1
        return _shared


def release_loop() -> None:
    """Drop a user; the last one stops the loop and joins its thread."""
    global _shared, _users
    with _lock:
        _users -= 1
        if _users > 0 or _shared is None:
            return
        loop, _shared, _users = _shared, None, 0
    loop.stop()


def _stop_at_exit() -> None:
    global _shared, _users
    with _lock:
        loop, _shared, _users = _shared, None, 0
    if loop is not None:
        loop.stop(timeout=5.0)
