"""Running a daemon's main task until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
import trio

log = structlog.get_logger("daemon")


async def run_until_signal(main_task: Callable[..., Awaitable[Any]]) -> None:
    """Run ``main_task`` until a signal arrives, then cancel it and let it clean up."""
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

            async def _main() -> None:
                await main_task()
                nursery.cancel_scope.cancel()

            nursery.start_soon(_main)
            async for signum in signals:
                log.info("signal received, shutting down", signal=signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
