"""Daemons stop in order on SIGTERM even when their parent had it blocked."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from protocol.trio.daemon import STOP_SIGNALS
from tests.integration.cluster import BIN, free_port, wait_port


def block_stop_signals() -> None:
    """In the child between fork and exec: what a parent that ``sigwait``s
    for SIGINT and SIGTERM passes on (a blocked mask survives exec)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def start_blocked(args: list[str], out: Path) -> subprocess.Popen[bytes]:
    with open(out, "ab") as log:
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=block_stop_signals)


def blocked_mask(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigBlk line")


def wait_text(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no {text!r} in {path}:\n{path.read_text()[-2000:]}")
        time.sleep(0.05)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_sigterm_stops_daemons_started_with_it_blocked(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # the daemons' default log dir
    # the set-up does what it says: a child started this way has both blocked
    probe = start_blocked([sys.executable, "-c", "import time; time.sleep(30)"],
                          tmp_path / "probe.out")
    try:
        deadline = time.monotonic() + 10
        wanted = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
        while blocked_mask(probe.pid) & wanted != wanted:  # exec may not have happened yet
            assert time.monotonic() < deadline, "the probe never showed SIGINT and SIGTERM blocked"
            time.sleep(0.02)
    finally:
        probe.kill()
        probe.wait()

    ns_port, broker_port = free_port(1), free_port(2)
    ns_out, broker_out = tmp_path / "namesrv.out", tmp_path / "broker.out"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ns = start_blocked([str(BIN / "mqnamesrv"), "--port", str(ns_port)], ns_out)
        procs.append(ns)
        wait_port(ns_port, proc=ns)
        broker = start_blocked([
            str(BIN / "mqbroker"), "-n", f"127.0.0.1:{ns_port}",
            "-o", f"listenPort={broker_port}", "-o", f"haListenPort={free_port(1)}",
            "-o", f"storePathRootDir={tmp_path / 'store'}",
            "-o", "mapedFileSizeCommitLog=4194304", "-o", "mapedFileSizeConsumeQueue=60000",
            "-o", "maxHashSlotNum=5000", "-o", "maxIndexNum=20000"], broker_out)
        procs.append(broker)
        wait_text(broker_out, "broker started", broker)
        for proc, out in ((broker, broker_out), (ns, ns_out)):
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0, out.read_text()[-2000:]
            assert "signal received, shutting down" in out.read_text()
        assert "broker stopped" in broker_out.read_text()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
