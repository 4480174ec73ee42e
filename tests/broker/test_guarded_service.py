"""Guarded background services (protocol/trio/service.py), in virtual time."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from protocol.trio.service import Guard, RepeatedErrors, run_every


class FakeLog:
    """A structlog-like logger that records its lines."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def _add(self, lvl: str, event: str, /, **kw: Any) -> None:
        self.lines.append((lvl, event, kw))

    def error(self, event: str, **kw: Any) -> None:
        self._add("error", event, **kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._add("warning", event, **kw)

    def info(self, event: str, **kw: Any) -> None:
        self._add("info", event, **kw)


def test_repeated_errors_pure() -> None:
    r = RepeatedErrors(quiet_period=60, burst=3)
    assert r.record("a", 0) == (True, 0)
    assert r.record("a", 1) is None and r.record("a", 59) is None
    assert r.record("a", 60) == (False, 2)  # two kept quiet since the last line
    assert r.record("b", 61) == (True, 0)
    assert r.record("c", 62) == (True, 0)
    assert r.record("d", 63) is None  # a burst of 3 lines in this period is used up
    assert r.record("e", 120) == (True, 0)  # a new period
    assert r.suppressed_total == 3


async def test_service_loop_survives_logs_once_and_rate_limits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = FakeLog()
    guard = Guard(log, "flush")
    calls = 0

    def step() -> None:
        nonlocal calls
        calls += 1
        if calls <= 40:
            raise ValueError("disk on fire")

    async with trio.open_nursery() as nursery:
        await nursery.start(run_every, guard, 1.0, step)
        await trio.sleep(300.5)
        nursery.cancel_scope.cancel()
    # it kept running through 40 failures (backing off up to 5 s more per
    # period), then ran on every period again
    assert calls >= 100
    assert guard.failures == 40 and guard.failures_in_a_row == 0
    # one line with the traceback, then one summary per quiet period (60 s)
    assert log.lines[0][1] == "flush failed"
    assert isinstance(log.lines[0][2]["exc_info"], ValueError)
    assert log.lines[0][2]["error"] == "ValueError: disk on fire"
    rest = log.lines[1:]
    assert 1 <= len(rest) <= 5
    assert all("exc_info" not in kw and kw["repeated"] > 0 for _, _, kw in rest)


async def test_event_driven_failures_back_off(autojump_clock: trio.testing.MockClock) -> None:
    """A loop with nothing to wait for does not spin when every round fails."""
    log = FakeLog()
    guard = Guard(log, "watcher")
    calls = 0

    async def step() -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("bug")

    with trio.move_on_after(60):
        while True:
            await guard.run(step)
    # 0.1 + 0.2 + ... + 5 + 5 ...: a handful of tries a minute, not millions
    assert 10 <= calls <= 20
    assert guard.backoff() == 5.0
    assert len(log.lines) == 1


async def test_cancellation_and_base_exceptions_propagate() -> None:
    guard = Guard(FakeLog(), "svc")
    with trio.CancelScope() as scope:
        scope.cancel()
        await guard.run(trio.sleep_forever)
    assert scope.cancelled_caught and guard.failures == 0

    def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        guard.call(interrupt)
    assert guard.failures == 0


async def test_a_failing_child_of_a_nursery_is_one_failure() -> None:
    log = FakeLog()
    guard = Guard(log, "fan-out")

    async def fan_out() -> None:
        async def bad() -> None:
            raise OSError("no route")

        async with trio.open_nursery() as n:
            n.start_soon(bad)
            n.start_soon(trio.sleep_forever)

    assert not await guard.run(fan_out)
    assert guard.failures == 1 and log.lines[0][2]["error"].startswith("ExceptionGroup")


def test_context_and_long_errors_are_bounded() -> None:
    log = FakeLog()
    guard = Guard(log, "register")
    guard.failed(ValueError("x" * 10_000), "register failed", topics=3)
    _, event, kw = log.lines[0]
    assert event == "register failed" and kw["topics"] == 3 and kw["service"] == "register"
    assert len(kw["error"]) < 300
