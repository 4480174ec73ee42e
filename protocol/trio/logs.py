"""structlog set-up shared by every daemon and CLI.

structlog renders through the standard library's ``logging``: every event goes
to stderr (console format, no colours, as always) and, for a daemon, to files
in a log directory as RocketMQ's logback set-up does (``~/logs/rocketmqlogs``):

- ``mqnamesrv``: ``namesrv.log`` holds everything;
- ``mqbroker``: ``store.log`` holds the store's loggers (``store``, ``store.*``:
  commit log, mapped files, index), ``broker.log`` everything else (broker,
  remoting, daemon).

Each file is a ``RotatingFileHandler``: at ``max_bytes`` it becomes ``.1``
(``.1`` becomes ``.2`` ...) and at most ``backups`` old files are kept. Lines are
JSON when asked (``--log-format json``), otherwise the console format.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

LOG_DIR_ENV = "ROCKETMQ_LOG_DIR"
DEFAULT_MAX_BYTES = 128 * 1024 * 1024
DEFAULT_BACKUPS = 10
# whether configure_logging lets structlog cache each logger on first use (a
# daemon's hot path); the test suite turns it off (tests/conftest.py) so a
# command run in-process cannot pin its configuration into module loggers
CACHE_LOGGERS = True

# marks the handlers configure_logging installed, to replace them on the next call
_OURS = "_rocketmq_handler"


def default_log_dir() -> Path:
    """``$ROCKETMQ_LOG_DIR``, else ``~/logs/rocketmqlogs`` (RocketMQ's place)."""
    env = os.environ.get(LOG_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / "logs" / "rocketmqlogs"


_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(text: str) -> int:
    """``"134217728"``, ``"128M"``, ``"128MiB"``, ``"64k"`` -> bytes (binary units)."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"not a size: {text!r} (bytes, or a number with K, M or G)")
    unit = (m.group(2) or "").lower()[:1]
    return int(m.group(1)) * _UNITS[unit]


@dataclass(frozen=True, slots=True)
class LogFile:
    """One file in the log directory. ``loggers``: the logger names (and their
    children) it takes; empty: every logger no other file takes."""

    name: str
    loggers: tuple[str, ...] = ()


NAMESRV_LOGS = (LogFile("namesrv.log"),)
BROKER_LOGS = (LogFile("broker.log"), LogFile("store.log", ("store",)))


@dataclass(frozen=True, slots=True)
class LogFiles:
    """Where a daemon's log files go and how they rotate."""

    directory: Path
    files: Sequence[LogFile]
    max_bytes: int = DEFAULT_MAX_BYTES
    backups: int = DEFAULT_BACKUPS


class LogDirError(Exception):
    """The log directory cannot be created or written: the operator must fix it."""

    def __init__(self, directory: Path, reason: str) -> None:
        super().__init__(f"cannot write logs to {directory}: {reason}")
        self.directory = directory
        self.reason = reason


def _takes(prefixes: tuple[str, ...], name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


class _RouteFilter(logging.Filter):
    """Passes the records of ``own`` loggers; with ``own`` empty, those of no
    logger in ``others``."""

    def __init__(self, own: tuple[str, ...], others: tuple[str, ...]) -> None:
        super().__init__()
        self.own = own
        self.others = others

    def filter(self, record: logging.LogRecord) -> bool:
        if self.own:
            return _takes(self.own, record.name)
        return not _takes(self.others, record.name)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (test runners swap it)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


_QUOTED = frozenset(" \t=\r\n\"'")
_LEVEL_WIDTH = len("exception")  # ConsoleRenderer pads levels to its longest name
_EVENT_WIDTH = 30  # and events to 30 characters
_ABSENT = object()


class ConsoleLines:
    """structlog's ``ConsoleRenderer(colors=False)``, its lines character for
    character, at a fraction of its cost for the events without a traceback
    or stack (nearly all of them); those go to ConsoleRenderer itself."""

    def __init__(self) -> None:
        self.full = structlog.dev.ConsoleRenderer(colors=False)

    @staticmethod
    def _value(v: object) -> str:
        if isinstance(v, str):
            return repr(v) if _QUOTED.intersection(v) else v
        return repr(v)

    def __call__(self, logger: Any, name: str, event_dict: structlog.typing.EventDict) -> str:
        if "exc_info" in event_dict or "exception" in event_dict or "stack" in event_dict:
            return str(self.full(logger, name, event_dict))
        pop = event_dict.pop
        parts: list[str] = []
        ts = pop("timestamp", _ABSENT)
        if ts is not _ABSENT:
            parts.append(str(ts))
        level = pop("level", _ABSENT)
        if level is not _ABSENT:
            parts.append(f"[{str(level).ljust(_LEVEL_WIDTH)}]")
        event = pop("event", _ABSENT)
        if event is not _ABSENT:
            parts.append(str(event).ljust(_EVENT_WIDTH))
        for key in ("logger", "logger_name"):
            v = pop(key, _ABSENT)
            if v is not _ABSENT:
                parts.append(f"[{v}]")
        value = self._value
        parts.extend(f"{k}={value(event_dict[k])}" for k in sorted(event_dict))
        return " ".join(p for p in parts if p).rstrip(" ")


class _Line(str):
    """A structlog event already rendered by the last processor of the chain."""

    __slots__ = ()


class _Prerender:
    """The last structlog processor: renders the event (once, on the logging
    thread, while a ``log.exception`` is still being handled) for stdlib logging."""

    def __init__(self, renderer: structlog.typing.Processor) -> None:
        self.renderer = renderer

    def __call__(self, logger: Any, name: str, event_dict: structlog.typing.EventDict) -> str:
        return _Line(self.renderer(logger, name, event_dict))


class _RenderOnce(structlog.stdlib.ProcessorFormatter):
    """Passes structlog's rendered lines through; renders the records of plain
    ``logging`` users once however many handlers share this formatter (stderr
    and the log files; a rotating file handler also formats a record to decide
    whether to roll over): rendering is most of what a log line costs."""

    def format(self, record: logging.LogRecord) -> str:
        if type(record.msg) is _Line and not record.args:
            return str(record.msg)
        done = record.__dict__.get("_mq_line")
        if done is not None and done[0] is self:
            return str(done[1])
        line = super().format(record)
        record._mq_line = (self, line)  # type: ignore[attr-defined]
        return line


class _RotatingFile(logging.handlers.RotatingFileHandler):
    """RotatingFileHandler that keeps count of the file's size instead of a
    stat, a seek and a tell for every line. The count is re-read from the file
    every ``RESYNC_LINES`` lines and after a roll-over, so a file an operator
    truncated or another writer appended to is noticed soon."""

    RESYNC_LINES = 1000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._size: int | None = None  # None: read it from the file next time
        self._regular = True
        self._lines = 0
        self._pending = 0

    def shouldRollover(self, record: logging.LogRecord) -> bool:
        if self.stream is None:
            self.stream = self._open()
            self._size = None
        if self.maxBytes <= 0:
            return False
        if self._size is None or self._lines >= self.RESYNC_LINES:
            # never roll over anything but a regular file (bpo-45401)
            self._regular = not os.path.exists(self.baseFilename) or os.path.isfile(
                self.baseFilename)
            self.stream.seek(0, 2)
            self._size = self.stream.tell()
            self._lines = 0
        if not self._regular:
            return False
        self._pending = len(self.format(record).encode("utf-8", "replace")) + 1
        return self._size + self._pending >= self.maxBytes

    def doRollover(self) -> None:
        super().doRollover()
        self._size = None

    def emit(self, record: logging.LogRecord) -> None:
        self._pending = 0
        super().emit(record)
        if self._size is not None:
            self._size += self._pending
            self._lines += 1


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def open_log_files(spec: LogFiles) -> list[logging.Handler]:
    """One rotating handler per file; LogDirError when the directory cannot be
    created or a file in it cannot be opened for appending."""
    if spec.max_bytes <= 0:
        raise ValueError("log max bytes must be positive")
    if spec.backups < 0:
        raise ValueError("log backups must not be negative")
    directory = spec.directory
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LogDirError(directory, _reason(exc)) from None
    claimed = tuple(p for f in spec.files for p in f.loggers)
    handlers: list[logging.Handler] = []
    try:
        for f in spec.files:
            h: logging.Handler = _RotatingFile(
                directory / f.name, maxBytes=spec.max_bytes, backupCount=spec.backups,
                encoding="utf-8")
            h.addFilter(_RouteFilter(f.loggers, claimed))
            handlers.append(h)
    except OSError as exc:
        for h in handlers:
            h.close()
        raise LogDirError(directory, _reason(exc)) from None
    return handlers


def _level(level: str) -> int:
    lvl = logging.getLevelName(level.upper())
    return lvl if isinstance(lvl, int) else logging.INFO


def configure_logging(level: str = "INFO", json: bool = False, *,
                      files: LogFiles | None = None, console: bool = True,
                      lean: bool = False) -> list[Path]:
    """Route structlog (and stdlib ``logging``) to stderr (``console``) and to
    ``files``, with a level filter; lines are JSON with ``json``. Returns the
    log files' paths. Raises LogDirError (nothing changed) when the files
    cannot be opened. ``lean`` (a daemon's own process): stdlib ``logging``
    stops gathering for every record what no line shows (the caller's file and
    line, the thread's and the process's names)."""
    lvl = _level(level)
    file_handlers = open_log_files(files) if files is not None else []
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else ConsoleLines()
    )
    # the console renderer prints exc_info itself; JSON needs it turned into data
    tracebacks: list[structlog.typing.Processor] = (
        [structlog.processors.format_exc_info] if json else []
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso"),
    ]
    formatter = _RenderOnce(
        foreign_pre_chain=shared,  # records of plain ``logging`` users (libraries)
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tracebacks,
                    renderer],
    )
    handlers: list[logging.Handler] = [*file_handlers]
    if console:
        handlers.append(_StderrHandler())
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _OURS, False)]:
        root.removeHandler(old)
        old.close()
    for h in handlers:
        setattr(h, _OURS, True)
        h.setFormatter(formatter)
        root.addHandler(h)
    root.setLevel(lvl)
    if lean:
        # the caller's file and line cost a walk up the stack (logging's own
        # comment names _srcfile = None as the way to skip it)
        logging._srcfile = None  # type: ignore[attr-defined]
        logging.logThreads = False
        logging.logProcesses = False
        logging.logMultiprocessing = False
    structlog.configure(
        processors=[*shared, *tracebacks, _Prerender(renderer)],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=CACHE_LOGGERS,
    )
    return [Path(h.baseFilename) for h in file_handlers
            if isinstance(h, logging.handlers.RotatingFileHandler)]
