"""A daemon that exits says why, with the traceback; the liveness scan survives a bug."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from protocol.trio.daemon import run_daemon
from tests.broker.test_guarded_service import FakeLog


class FailingDaemon:
    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        await trio.sleep(0)
        if self.exc is not None:
            raise self.exc

    def request_shutdown(self) -> None:
        pass


@pytest.mark.parametrize("exc", [
    RuntimeError("dictionary changed size during iteration"),
    KeyError("x"),
    ExceptionGroup("nursery", [ValueError("deep")]),
])
def test_a_failing_daemon_logs_why_with_the_traceback(exc: BaseException) -> None:
    log = FakeLog()
    with pytest.raises(SystemExit) as exited:
        run_daemon(FailingDaemon(exc), log, "broker")
    assert exited.value.code == 1
    [(level, event, kw)] = log.lines
    assert (level, event) == ("error", "broker failed")
    assert kw["exc_info"] is not None
    leaf = exc.exceptions[0] if isinstance(exc, ExceptionGroup) else exc
    assert kw["error"].startswith(type(leaf).__name__)


def test_a_clean_stop_exits_normally() -> None:
    log = FakeLog()
    run_daemon(FailingDaemon(None), log, "name server")
    assert log.lines == []


async def test_scan_loop_survives_a_failing_scan(autojump_clock: trio.testing.MockClock) -> None:
    controller = NamesrvController(NamesrvConfig())
    controller._scan_guard.log = log = FakeLog()
    calls = 0

    def scan(now: float, expired: float) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("route table bug")

    controller.routes.scan_not_active_broker = scan  # type: ignore[method-assign]
    with trio.move_on_after(300):
        await controller.scan_loop()
    assert calls >= 15  # every 10 s (plus back-off), not stopped by the first failure
    assert log.lines[0][1] == "scan not active broker failed"
    assert len(log.lines) <= 6
