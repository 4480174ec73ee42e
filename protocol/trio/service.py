"""Guarded background services: one failing item never kills a daemon.

A background service (the broker's register, flush, persist, schedule and
long-polling services, the name server's liveness scan, the client's route
refresh, heartbeats and rebalance) does its work an iteration or an item at a
time. What it does with an exception from one of them is always the same:

- log it with the service's context and the traceback, once;
- stay quiet while the same error repeats, then say how often it repeated
  (``RepeatedErrors``: at most one line per error per ``quiet_period``, and at
  most ``burst`` lines per period whatever the errors);
- back off before the next attempt when iterations fail in a row, so an
  event-driven loop that fails at once never spins;
- go on with the next iteration or item.

``trio.Cancelled``, ``KeyboardInterrupt`` and every other ``BaseException``
that is not an ``Exception`` always propagate: shutdown stays clean.

``RepeatedErrors`` is pure (time passed in); ``Guard`` wraps it with a logger,
a clock and the back-off sleep.
"""

from __future__ import annotations

import inspect
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import trio

from protocol.names import shown

QUIET_PERIOD = 60.0  # seconds an identical error stays quiet after being logged
BURST = 20  # lines a guard logs per quiet period, whatever the errors
MAX_KEYS = 256  # distinct errors remembered
BACKOFF_MIN = 0.1
BACKOFF_MAX = 5.0
ERROR_TEXT_MAX = 200


def error_key(exc: BaseException) -> tuple[str, str]:
    """What makes two failures "the same error": type and (bounded) message."""
    return type(exc).__qualname__, str(exc)[:ERROR_TEXT_MAX]


def describe(exc: BaseException) -> str:
    """``Type: message``, bounded for a log line."""
    text = str(exc)
    if len(text) > ERROR_TEXT_MAX:
        text = shown(text, ERROR_TEXT_MAX)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(slots=True)
class _Seen:
    logged_at: float
    suppressed: int = 0


class RepeatedErrors:
    """Which failures to log: the first of each kind, then at most one line per
    ``quiet_period`` while it repeats, and at most ``burst`` lines per period."""

    def __init__(self, quiet_period: float = QUIET_PERIOD, burst: int = BURST,
                 max_keys: int = MAX_KEYS) -> None:
        self.quiet_period = quiet_period
        self.burst = burst
        self.max_keys = max_keys
        self._seen: OrderedDict[Hashable, _Seen] = OrderedDict()
        self._window_start = float("-inf")
        self._window_lines = 0
        self.suppressed_total = 0

    def record(self, key: Hashable, now: float) -> tuple[bool, int] | None:
        """A failure of kind ``key`` at ``now``. None: stay quiet. Else
        (first time seen, identical failures kept quiet since the last line)."""
        seen = self._seen.get(key)
        if seen is not None and now - seen.logged_at < self.quiet_period:
            seen.suppressed += 1
            self.suppressed_total += 1
            return None
        if now - self._window_start >= self.quiet_period:
            self._window_start, self._window_lines = now, 0
        if self._window_lines >= self.burst:
            if seen is not None:
                seen.suppressed += 1
            self.suppressed_total += 1
            return None
        self._window_lines += 1
        if seen is None:
            self._seen[key] = _Seen(now)
            if len(self._seen) > self.max_keys:
                self._seen.popitem(last=False)
            return True, 0
        repeated, seen.suppressed, seen.logged_at = seen.suppressed, 0, now
        self._seen.move_to_end(key)
        return False, repeated


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:  # outside a trio run (sync callers, unit tests)
        return time.monotonic()


class Guard:
    """What a background service does with a failure: log (rate-limited, a
    traceback the first time), back off, go on.

    ``log`` is a structlog logger already bound with the daemon's context
    (broker name, ...); ``service`` names the loop in every line.
    """

    def __init__(self, log: Any, service: str, *, clock: Callable[[], float] = _now,
                 quiet_period: float = QUIET_PERIOD, burst: int = BURST,
                 backoff_min: float = BACKOFF_MIN, backoff_max: float = BACKOFF_MAX) -> None:
        self.log = log
        self.service = service
        self.clock = clock
        self.errors = RepeatedErrors(quiet_period, burst)
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self.failures_in_a_row = 0
        self.failures = 0

    def failed(self, exc: BaseException, event: str | None = None, *,
               key: Hashable = None, **context: Any) -> None:
        """Log ``exc`` for this service, rate-limited. ``key`` (default: the
        error's type and message) says which failures count as identical."""
        self.failures += 1
        self.failures_in_a_row += 1
        event = event or f"{self.service} failed"
        decision = self.errors.record(
            (event, key if key is not None else error_key(exc)), self.clock())
        if decision is None:
            return
        first, repeated = decision
        if first:
            self.log.error(event, service=self.service, error=describe(exc), exc_info=exc,
                           **context)
        else:
            self.log.error(event, service=self.service, error=describe(exc),
                           repeated=repeated, **context)

    def note(self, event: str, key: Hashable, *, log_level: str = "warning",
             **context: Any) -> None:
        """Log an expected, possibly repeating condition (no exception), rate-limited."""
        decision = self.errors.record((event, key), self.clock())
        if decision is None:
            return
        first, repeated = decision
        if not first:
            context["repeated"] = repeated
        getattr(self.log, log_level)(event, service=self.service, **context)

    def ok(self) -> None:
        """An iteration succeeded: the next failure starts the back-off afresh."""
        self.failures_in_a_row = 0

    def backoff(self) -> float:
        """Seconds to wait after the current run of failures."""
        if self.failures_in_a_row <= 0:
            return 0.0
        return min(self.backoff_max, self.backoff_min * 2 ** min(self.failures_in_a_row - 1, 30))

    async def pause(self) -> None:
        await trio.sleep(self.backoff())

    def call(self, fn: Callable[..., Any], *args: Any, **context: Any) -> bool:
        """``fn(*args)``; a failure is logged with ``context``. True on success."""
        try:
            fn(*args)
        except Exception as exc:
            self.failed(exc, **context)
            return False
        self.ok()
        return True

    async def run(self, fn: Callable[..., Any], *args: Any, **context: Any) -> bool:
        """``[await] fn(*args)``; a failure is logged with ``context`` and
        followed by the back-off pause. True on success."""
        try:
            result = fn(*args)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            self.failed(exc, **context)
            await self.pause()
            return False
        self.ok()
        return True


async def run_every(guard: Guard, interval: float, fn: Callable[..., Any], *args: Any,
                    task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Every ``interval`` seconds, ``[await] fn(*args)`` under ``guard``, forever."""
    task_status.started()
    while True:
        await trio.sleep(interval)
        await guard.run(fn, *args)
