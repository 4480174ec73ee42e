"""Running a daemon until SIGINT or SIGTERM, with an orderly shutdown."""

from __future__ import annotations

import signal
from typing import Any, Protocol

import structlog
import trio

log = structlog.get_logger("daemon")


class Daemon(Protocol):
    async def run(self, task_status: Any = ...) -> None: ...

    def request_shutdown(self) -> None: ...


async def run_until_signal(daemon: Daemon) -> None:
    """Run ``daemon`` until it returns; the first signal asks it to shut down
    cleanly, a second one cancels it."""
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

            async def _main() -> None:
                await daemon.run()
                nursery.cancel_scope.cancel()

            nursery.start_soon(_main)
            first = True
            async for signum in signals:
                name = signal.Signals(signum).name
                if first:
                    log.info("signal received, shutting down", signal=name)
                    daemon.request_shutdown()
                    first = False
                else:
                    log.warning("second signal, stopping at once", signal=name)
                    nursery.cancel_scope.cancel()
                    break


def first_leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
