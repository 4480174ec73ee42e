"""Running a daemon until SIGINT or SIGTERM, with an orderly shutdown.

``run_daemon`` is what a daemon's CLI calls: a daemon that stops for any other
reason than a signal logs why, with the traceback, and the process exits 1.
"""

from __future__ import annotations

import errno
import signal
import sys
from typing import Any, NoReturn, Protocol

import structlog
import trio

from protocol.trio.service import describe

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


def fail(logger: Any, what: str, exc: BaseException) -> NoReturn:
    """Log why ``what`` (e.g. "broker") stopped, with the whole traceback, and exit 1."""
    logger.error(f"{what} failed", error=describe(first_leaf(exc)), exc_info=exc)
    sys.exit(1)


def run_daemon(daemon: Daemon, logger: Any, what: str,
               operator_errors: tuple[type[BaseException], ...] = ()) -> None:
    """Run ``daemon`` until a signal stops it; exit 1 (logged, with the
    traceback) when it fails, whatever the exception. An operator's mistake
    (``operator_errors``, or a listen port already in use) is logged as one
    line without a traceback: the message says what to fix."""
    try:
        trio.run(run_until_signal, daemon)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        logger.warning(f"{what} interrupted")
        sys.exit(130)
    except BaseException as exc:
        leaf = first_leaf(exc)
        if isinstance(leaf, operator_errors) or (
                isinstance(leaf, OSError) and leaf.errno == errno.EADDRINUSE):
            logger.error(f"{what} cannot start", error=describe(leaf))
            sys.exit(1)
        fail(logger, what, exc)
