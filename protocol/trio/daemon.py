"""Running a daemon until SIGINT or SIGTERM, with an orderly shutdown.

``run_daemon`` is what a daemon's CLI calls: a daemon that stops for any other
reason than a signal logs why, with the traceback, and the process exits 1.
``log_options`` and ``start_logging`` give every daemon the same log flags
(``--log-dir`` ...) and fail fast, in one line, when the logs cannot be written.
"""

from __future__ import annotations

import errno
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn, Protocol

import click
import structlog
import trio

from protocol.config import parse_properties
from protocol.extras import MissingExtraError, require_metrics_http
from protocol.trio.logs import (
    DEFAULT_BACKUPS,
    DEFAULT_MAX_BYTES,
    LOG_DIR_ENV,
    LogDirError,
    LogFile,
    LogFiles,
    configure_logging,
    default_log_dir,
    parse_size,
)
from protocol.trio.memory import tune_malloc
from protocol.trio.service import describe

log = structlog.get_logger("daemon")

# what asks a daemon to stop: the first cleanly, a second at once
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Daemon(Protocol):
    async def run(self, task_status: Any = ...) -> None: ...

    def request_shutdown(self) -> None: ...


async def run_until_signal(daemon: Daemon) -> None:
    """Run ``daemon`` until it returns; the first signal asks it to shut down
    cleanly, a second one cancels it."""
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:

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


def _size(ctx: click.Context, param: click.Parameter, value: Any) -> int:
    if isinstance(value, int):
        return value
    try:
        return parse_size(str(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def log_options(f: Any) -> Any:
    """The log flags of ``mqnamesrv`` and ``mqbroker``; ``main`` takes them as
    keyword arguments and hands them to ``start_logging``."""
    options = [
        click.option("--log-level", default="INFO", show_default=True, envvar="ROCKETMQ_LOG_LEVEL",
                     help="DEBUG, INFO, WARNING or ERROR."),
        click.option("--log-dir", type=click.Path(file_okay=False), default=None,
                     envvar=LOG_DIR_ENV, show_envvar=True,
                     help="Directory of the log files [default: ~/logs/rocketmqlogs]."),
        click.option("--log-max-bytes", default=str(DEFAULT_MAX_BYTES), callback=_size,
                     envvar="ROCKETMQ_LOG_MAX_BYTES", show_envvar=True, show_default=True,
                     help="A log file is rotated at this size (bytes, or 64K, 128M, 1G)."),
        click.option("--log-backups", type=click.IntRange(min=0), default=DEFAULT_BACKUPS,
                     envvar="ROCKETMQ_LOG_BACKUPS", show_envvar=True, show_default=True,
                     help="Rotated files kept per log (name.log.1 ... name.log.N)."),
        click.option("--log-format", type=click.Choice(["console", "json"]), default="console",
                     envvar="ROCKETMQ_LOG_FORMAT", show_envvar=True, show_default=True,
                     help="Line format of the files and stderr: text or JSON lines."),
        click.option("--log-console/--no-log-console", default=True, show_default=True,
                     help="Also log to stderr."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


def start_logging(files: tuple[LogFile, ...], *, log_level: str, log_dir: str | None,
                  log_max_bytes: int, log_backups: int, log_format: str,
                  log_console: bool) -> list[Any]:
    """Configure logging for a daemon writing ``files``; when the directory
    cannot be created or written, print one line on stderr and exit 1."""
    directory = default_log_dir() if not log_dir else click.format_filename(log_dir)
    spec = LogFiles(directory=Path(directory).expanduser(), files=files,
                    max_bytes=log_max_bytes, backups=log_backups)
    try:
        return configure_logging(log_level, json=log_format == "json", files=spec,
                                 console=log_console, lean=True)
    except LogDirError as exc:
        print(exc, file=sys.stderr, flush=True)
        sys.exit(1)


def first_leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def fail(logger: Any, what: str, exc: BaseException) -> NoReturn:
    """Log why ``what`` (e.g. "broker") stopped, with the whole traceback, and exit 1."""
    logger.error(f"{what} failed", error=describe(first_leaf(exc)), exc_info=exc)
    sys.exit(1)


def load_properties(path: str | Path) -> dict[str, str]:
    """Parse a daemon's Java-style properties file (``-c``). Raises ConfigError on a line
    it cannot read, OSError if unreadable."""
    return parse_properties(Path(path).read_text(), f"{path}:")


def require_extras(metrics_port: int) -> None:
    """Stop a daemon's CLI with one line, before it starts anything, when a feature it is
    asked for needs an extra that is not installed (protocol/extras.py): ``metricsPort``
    needs the web extra's hypercorn. Raises click.ClickException (``Error: ...``, exit 1)."""
    try:
        if metrics_port:
            require_metrics_http()
    except MissingExtraError as exc:
        raise click.ClickException(str(exc)) from None


def unblock_stop_signals() -> None:
    """Let SIGINT and SIGTERM reach this process. A signal mask survives
    ``exec``: started by a parent that had blocked them (to ``sigwait``, as
    some supervisors and scripts do), a daemon would never see either, and
    an orderly stop would end as a SIGKILL."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def run_daemon(daemon: Daemon, logger: Any, what: str,
               operator_errors: tuple[type[BaseException], ...] = ()) -> None:
    """Run ``daemon`` until a signal stops it; exit 1 (logged, with the
    traceback) when it fails, whatever the exception. An operator's mistake
    (``operator_errors``, or a listen port already in use) is logged as one
    line without a traceback: the message says what to fix."""
    tune_malloc()  # big buffers from the heap, not fresh mappings (protocol.trio.memory)
    unblock_stop_signals()
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
