"""A name server and a broker run without the web extra (hypercorn, starlette, jinja2):
real daemons on loopback, started through their CLIs in a Python where those packages
cannot be imported."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.integration.cluster import Daemon, free_port

WEB_PACKAGES = ("hypercorn", "starlette", "jinja2")


def without_web(module: str) -> list[str]:
    """``python -c`` running ``module``'s click ``main`` with the web packages unimportable."""
    return [sys.executable, "-c",
            f"import sys; sys.modules.update(dict.fromkeys({WEB_PACKAGES!r}))\n"
            f"from {module} import main\nmain()"]


def test_daemons_start_serve_and_stop_without_the_web_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # the daemons' default log dir
    ns_port, broker_port = free_port(1), free_port(2)
    ns = Daemon("namesrv", [*without_web("namesrv.cli"), "--port", str(ns_port)], ns_port,
                tmp_path / "namesrv.out")
    broker = Daemon("broker", [
        *without_web("broker.cli"), "-n", ns.addr,
        "-o", f"listenPort={broker_port}", "-o", f"haListenPort={free_port(1)}",
        "-o", f"storePathRootDir={tmp_path / 'store'}",
        "-o", "mapedFileSizeCommitLog=4194304", "-o", "mapedFileSizeConsumeQueue=60000",
        "-o", "maxHashSlotNum=5000", "-o", "maxIndexNum=20000"], broker_port,
        tmp_path / "broker.out", ready_marker="broker started")
    started: list[Daemon] = []
    try:
        for d in (ns, broker):
            d.start()
            started.append(d)
        for d in (broker, ns):
            assert d.stop(20) == 0, d.log_text()[-2000:]
        assert "broker stopped" in broker.log_text()
    finally:
        for d in started:
            if d.proc is not None and d.proc.poll() is None:
                d.kill()
