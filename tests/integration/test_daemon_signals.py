"""Daemons stop in order on SIGTERM even when their parent had it blocked."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.trio.daemon import STOP_SIGNALS
from tests.integration.cluster import BIN, Daemon, free_port


def block_stop_signals() -> None:
    """In the child between fork and exec: what a parent that ``sigwait``s
    for SIGINT and SIGTERM passes on (a blocked mask survives exec)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_sigterm_stops_daemons_started_with_it_blocked(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # the daemons' default log dir
    # the set-up does what it says: a child started this way has both blocked
    probe = subprocess.run(
        [sys.executable, "-c", "print(open('/proc/self/status').read())"],
        capture_output=True, text=True, timeout=30, check=True, preexec_fn=block_stop_signals)
    (line,) = [x for x in probe.stdout.splitlines() if x.startswith("SigBlk:")]
    wanted = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    assert int(line.split()[1], 16) & wanted == wanted

    ns_port, broker_port = free_port(1), free_port(2)
    ns = Daemon("namesrv", [str(BIN / "mqnamesrv"), "--port", str(ns_port)], ns_port,
                tmp_path / "namesrv.out", preexec=block_stop_signals)
    broker = Daemon("broker", [
        str(BIN / "mqbroker"), "-n", ns.addr,
        "-o", f"listenPort={broker_port}", "-o", f"haListenPort={free_port(1)}",
        "-o", f"storePathRootDir={tmp_path / 'store'}",
        "-o", "mapedFileSizeCommitLog=4194304", "-o", "mapedFileSizeConsumeQueue=60000",
        "-o", "maxHashSlotNum=5000", "-o", "maxIndexNum=20000"], broker_port,
        tmp_path / "broker.out", ready_marker="broker started", preexec=block_stop_signals)
    started: list[Daemon] = []
    try:
        for d in (ns, broker):
            d.start()
            started.append(d)
        for d in (broker, ns):
            assert d.stop(20) == 0, d.log_text()[-2000:]
            assert "signal received, shutting down" in d.log_text()
        assert "broker stopped" in broker.log_text()
    finally:
        for d in started:
            if d.proc is not None and d.proc.poll() is None:
                d.kill()
