"""Real mqnamesrv / mqbroker processes on 127.0.0.1 for integration tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from tests.waits import freeze, wait_until_sync

BIN = Path(sys.executable).parent


def _port_slice() -> range:
    """The ports this process hands out: below the kernel's ephemeral range, where no
    outgoing connection can take a port between our check and the daemon's bind, and
    split between pytest-xdist's workers so two workers never pick the same one."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    low, high = 20000, min(ephemeral_low, 65536)
    if high - low < 1000:  # an unusual range: above it instead
        low, high = 61000, 65536
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker[:2] == "gw" and worker[2:].isdigit() else 0
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), index + 1)
    size = (high - low) // count
    return range(low + index * size, low + (index + 1) * size)


_PORTS = _port_slice()
# Each process starts at its own place in the slice (a benchmark's children, a second
# suite) and walks forward, so a port a stopped daemon just left is not handed out again soon.
_next_port = _PORTS.start + (os.getpid() * 7919) % len(_PORTS)


def free_port(span: int = 2) -> int:
    """A port p such that p .. p+span-1 were free a moment ago on 127.0.0.1."""
    global _next_port
    for _ in range(len(_PORTS)):
        port = _next_port
        if port + span > _PORTS.stop:
            _next_port = _PORTS.start
            continue
        _next_port = port + span
        if all(_bindable(p) for p in range(port, port + span)):
            return port
    raise RuntimeError(f"no {span} free ports in {_PORTS}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_port(port: int, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Until something listens on ``port``; RuntimeError when ``proc`` exits first."""
    def listening() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    def exited() -> None:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")

    wait_until_sync(listening, timeout, f"something listening on {port}", check=exited)


@dataclass
class Daemon:
    name: str
    args: list[str]
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    # a log line printed once the daemon is fully up (a broker: after registering)
    ready_marker: str | None = None
    # run in the child between fork and exec (e.g. to start it with signals blocked)
    preexec: Callable[[], None] | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        seen = self.log_text().count(self.ready_marker) if self.ready_marker and self.log_path.exists() else 0
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=self.preexec)
        log.close()
        try:
            wait_port(self.port, timeout, proc=self.proc)
        except (RuntimeError, AssertionError) as e:  # say why: the log's last lines
            raise RuntimeError(f"{self.name} did not listen on {self.port}: {e}\n"
                               f"{self.log_text()[-2000:]}") from None
        if self.ready_marker:
            marker, proc = self.ready_marker, self.proc

            def exited() -> None:
                if proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited ({proc.returncode})")
            try:
                wait_until_sync(lambda: self.log_text().count(marker) > seen, timeout,
                                f"{marker!r} in the log", interval=0.02, check=exited)
            except (RuntimeError, AssertionError) as e:
                raise RuntimeError(f"{self.name} did not become ready: {e}\n"
                                   f"{self.log_text()[-2000:]}") from None

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait: an orderly shutdown. Returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def freeze(self) -> None:
        assert self.proc is not None
        freeze(self.proc.pid)  # every thread stopped, not only signalled

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class Cluster:
    root: Path
    daemons: list[Daemon] = field(default_factory=list)

    def namesrv(self, **props: object) -> Daemon:
        port = free_port(1)
        conf = self.root / f"namesrv-{port}.properties"
        props = {"listenPort": port, **props}
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        # each daemon its own log directory (never ~/logs in tests)
        logs = self.root / f"logs-namesrv-{port}"
        d = Daemon(f"namesrv-{port}",
                   [str(BIN / "mqnamesrv"), "-c", str(conf), "--log-dir", str(logs)], port,
                   self.root / f"namesrv-{port}.log")
        d.start()
        self.daemons.append(d)
        return d

    def controller(self, store: Path | None = None, ready_marker: str = "controller leads",
                   **props: object) -> Daemon:
        """A real ``mqcontroller`` (run as ``python -m controller.cli``: the script may
        not be installed in the test's environment yet), its state in ``store``; up once
        ``ready_marker`` is logged (one that may not lead: "controller started")."""
        port = free_port(1)
        conf = self.root / f"controller-{port}.properties"
        props = {"listenPort": port,
                 "controllerStorePath": store or self.root / f"controller-{port}", **props}
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        logs = self.root / f"logs-controller-{port}"
        d = Daemon(f"controller-{port}",
                   [sys.executable, "-m", "controller.cli", "-c", str(conf), "--log-dir",
                    str(logs)], port, self.root / f"controller-{port}.log",
                   ready_marker=ready_marker)
        d.start()
        self.daemons.append(d)
        return d

    def broker(self, name: str, namesrv: str, start: bool = True, **props: object) -> Daemon:
        port = free_port(2)
        store = self.root / f"store-{name}"
        conf = self.root / f"{name}.properties"
        base: dict[str, object] = {
            "brokerName": name,
            "listenPort": port,
            "storePathRootDir": store,
            "namesrvAddr": namesrv,
            # Store files are allocated for real: keep test brokers' disk use small
            # (64 MiB commit-log files, 4 MiB consume-queue files, a 4 MiB index).
            "mapedFileSizeCommitLog": 64 * 1024 * 1024,
            "mapedFileSizeConsumeQueue": 200_000 * 20,
            "maxHashSlotNum": 50_000,
            "maxIndexNum": 200_000,
        }
        base.update(props)
        conf.write_text("".join(f"{k}={v}\n" for k, v in base.items()))
        logs = self.root / f"logs-{name}"
        d = Daemon(name, [str(BIN / "mqbroker"), "-c", str(conf), "--log-dir", str(logs)], port,
                   self.root / f"{name}.log", ready_marker="broker started")
        if start:
            d.start()
        self.daemons.append(d)
        return d

    def close(self) -> None:
        for d in reversed(self.daemons):
            if d.proc is not None and d.proc.poll() is None:
                try:
                    d.stop(10)
                except subprocess.TimeoutExpired:
                    pass


async def json_lines(stream: trio.abc.ReceiveStream | None) -> AsyncIterator[Any]:
    """The JSON value of each whole line a child process writes (its stdout), as
    the official clients' driver scripts report; blank lines are skipped."""
    assert stream is not None
    buf = b""
    async for chunk in stream:
        buf += chunk
        *whole, buf = buf.split(b"\n")
        for line in whole:
            if line.strip():
                yield json.loads(line)

