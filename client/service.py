"""ServiceNursery: a nursery owned by a trio system task.

RocketMQ-style objects are started with a plain ``await obj.start()`` and
stopped with ``await obj.shutdown()``, so their background tasks (route
refresh, connections, async-send workers) cannot live in the caller's
nursery. They live here instead: a system task holds a nursery open until
``stop()``; if the trio run ends first, trio cancels it. A system task must
never raise, so any unexpected error of a child is logged and swallowed
(cancellation still propagates).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
import trio

log = structlog.get_logger("client.service")


class ServiceNursery:
    """``await start()``, then ``start_soon``/``start`` tasks; ``await stop()`` cancels them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._nursery: trio.Nursery | None = None
        self._done: trio.Event | None = None
        self._stopping = False

    @property
    def running(self) -> bool:
        return self._nursery is not None and not self._stopping

    @property
    def nursery(self) -> trio.Nursery:
        if self._nursery is None or self._stopping:
            raise RuntimeError(f"{self.name} is not running")
        return self._nursery

    async def start(self) -> None:
        """Spawn the system task; returns once its nursery is open."""
        if self._done is not None:
            raise RuntimeError(f"{self.name} was already started")
        started = trio.Event()
        self._done = trio.Event()
        trio.lowlevel.spawn_system_task(self._main, started, name=self.name)
        await started.wait()

    def start_soon(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self.nursery.start_soon(async_fn, *args)

    async def start_task(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """``nursery.start`` in the service nursery; returns the started value."""
        return await self.nursery.start(async_fn, *args)

    async def stop(self) -> None:
        """Cancel every task of the service and wait until they are gone."""
        self._stopping = True
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        if self._done is not None:
            await self._done.wait()

    async def _main(self, started: trio.Event) -> None:
        assert self._done is not None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                started.set()
                await trio.sleep_forever()
        except BaseException as exc:  # a system task must not raise anything but Cancelled
            _reraise_cancelled(exc, self.name)
        finally:
            self._nursery = None
            self._stopping = True
            started.set()
            self._done.set()


def _reraise_cancelled(exc: BaseException, name: str) -> None:
    if isinstance(exc, trio.Cancelled):
        raise exc
    if isinstance(exc, BaseExceptionGroup):
        cancelled, rest = exc.split(trio.Cancelled)
        if rest is not None:
            log.error("background service failed", service=name, exc_info=rest)
        if cancelled is not None:
            raise cancelled
        return
    log.error("background service failed", service=name, exc_info=exc)
