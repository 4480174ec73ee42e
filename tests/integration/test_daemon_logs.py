"""Daemon log files: where they go, JSON lines, rotation, and an unwritable directory."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.trio.logs import BROKER_LOGS, LogDirError, LogFiles, open_log_files, parse_size
from tests.integration.cluster import BIN, Daemon, free_port
from tests.waits import wait_until_sync

SMALL_STORE = {
    "mapedFileSizeCommitLog": 4 * 1024 * 1024,
    "mapedFileSizeConsumeQueue": 3_000 * 20,
    "maxHashSlotNum": 5_000,
    "maxIndexNum": 20_000,
}


def has(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text(errors="replace")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The daemons' HOME, in tmp_path (never the real ~/logs); no ROCKETMQ_LOG_* set."""
    for key in [k for k in os.environ if k.startswith("ROCKETMQ_LOG")]:
        monkeypatch.delenv(key)
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


class Procs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.daemons: list[Daemon] = []

    def namesrv(self, *flags: str) -> Daemon:
        port = free_port(1)
        d = Daemon(f"namesrv-{port}", [str(BIN / "mqnamesrv"), "--port", str(port), *flags],
                   port, self.root / f"namesrv-{port}.out")
        self._start(d)
        return d

    def broker_args(self, namesrv: str, port: int, *flags: str) -> list[str]:
        props = {"brokerName": f"b{port}", "listenPort": port,
                 "storePathRootDir": self.root / f"store-{port}", **SMALL_STORE}
        return [str(BIN / "mqbroker"), "-n", namesrv,
                *(a for k, v in props.items() for a in ("-o", f"{k}={v}")), *flags]

    def broker(self, namesrv: str, *flags: str) -> Daemon:
        port = free_port(2)
        d = Daemon(f"broker-{port}", self.broker_args(namesrv, port, *flags), port,
                   self.root / f"broker-{port}.out", ready_marker="broker started")
        self._start(d)
        return d

    def _start(self, d: Daemon) -> None:
        d.start()
        self.daemons.append(d)

    def stop_all(self) -> None:
        for d in reversed(self.daemons):
            if d.proc is not None and d.proc.poll() is None:
                assert d.stop(20) == 0, d.log_text()[-2000:]


@pytest.fixture
def procs(tmp_path: Path, home: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


def test_files_in_log_dir_split_as_rocketmq(procs: Procs, tmp_path: Path, home: Path) -> None:
    ns_dir, b_dir = tmp_path / "ns-logs", tmp_path / "broker-logs"
    ns = procs.namesrv("--log-dir", str(ns_dir))
    b = procs.broker(ns.addr, "--log-dir", str(b_dir))
    wait_until_sync(lambda: has(ns_dir / "namesrv.log", "name server started"), 20, "namesrv.log")
    wait_until_sync(lambda: has(b_dir / "broker.log", "broker started"), 20, "broker.log")
    # the store's loggers go to store.log, and only there
    wait_until_sync(lambda: has(b_dir / "store.log", "store loaded"), 20, "store.log")
    assert "store loaded" not in (b_dir / "broker.log").read_text()
    assert "broker started" not in (b_dir / "store.log").read_text()
    # stderr keeps the console output, as before
    assert "broker started" in b.log_text()
    assert "name server started" in ns.log_text()
    procs.stop_all()
    assert has(b_dir / "broker.log", "broker stopped")
    # nothing under the (test) home
    assert not (home / "logs").exists()


def test_log_dir_from_env_then_home(procs: Procs, tmp_path: Path, home: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    procs.namesrv()
    default = home / "logs" / "rocketmqlogs" / "namesrv.log"
    wait_until_sync(lambda: has(default, "name server started"), 20, "~/logs/rocketmqlogs/namesrv.log")
    env_dir = tmp_path / "from-env"
    monkeypatch.setenv("ROCKETMQ_LOG_DIR", str(env_dir))
    procs.namesrv()
    wait_until_sync(lambda: has(env_dir / "namesrv.log", "name server started"), 20, "$ROCKETMQ_LOG_DIR")
    # the flag wins over the environment
    flag_dir = tmp_path / "from-flag"
    procs.namesrv("--log-dir", str(flag_dir))
    wait_until_sync(lambda: has(flag_dir / "namesrv.log", "name server started"), 20, "--log-dir over env")


def test_json_lines(procs: Procs, tmp_path: Path) -> None:
    ns = procs.namesrv("--log-dir", str(tmp_path / "ns"), "--log-format", "json")
    b_dir = tmp_path / "b"
    procs.broker(ns.addr, "--log-dir", str(b_dir), "--log-format", "json")
    procs.stop_all()
    for path in [tmp_path / "ns" / "namesrv.log", b_dir / "broker.log", b_dir / "store.log"]:
        lines = path.read_text().splitlines()
        assert lines, path
        for line in lines:
            rec = json.loads(line)
            assert {"event", "level", "logger", "timestamp"} <= rec.keys(), line
    events = [json.loads(x)["event"] for x in (b_dir / "broker.log").read_text().splitlines()]
    assert "broker started" in events and "broker stopped" in events


def test_rotation_keeps_at_most_backups(procs: Procs, tmp_path: Path) -> None:
    ns = procs.namesrv("--log-dir", str(tmp_path / "ns"))
    b_dir = tmp_path / "b"
    procs.broker(ns.addr, "--log-dir", str(b_dir), "--log-max-bytes", "600", "--log-backups", "1")
    procs.stop_all()
    names = sorted(p.name for p in b_dir.iterdir())
    assert "broker.log" in names and "broker.log.1" in names, names
    assert "broker.log.2" not in names, names
    for p in b_dir.iterdir():
        assert p.stat().st_size <= 600, (p, p.stat().st_size)
    # the last lines are in broker.log
    assert "broker stopped" in (b_dir / "broker.log").read_text()


def unwritable_dir(tmp_path: Path) -> Path:
    """A log directory the daemon cannot create or write: read-only for a
    regular user; under a regular file for root (chmod does not stop root)."""
    if os.geteuid() == 0:
        f = tmp_path / "file"
        f.write_text("not a directory\n")
        return f / "logs"
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    return d


@pytest.mark.parametrize("daemon", ["mqbroker", "mqnamesrv"])
def test_unwritable_log_dir_fails_in_one_line(daemon: str, tmp_path: Path, home: Path) -> None:
    logs = unwritable_dir(tmp_path)
    procs = Procs(tmp_path)
    port = free_port(2)
    args = (procs.broker_args("127.0.0.1:1", port, "--log-dir", str(logs)) if daemon == "mqbroker"
            else [str(BIN / "mqnamesrv"), "--port", str(port), "--log-dir", str(logs)])
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    finally:
        if logs.name == "ro":
            logs.chmod(0o700)
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"cannot write logs to {logs}: "), lines
    assert not (tmp_path / f"store-{port}").exists()  # it failed before opening the store


def test_parse_size() -> None:
    assert parse_size("1000") == 1000
    assert parse_size("64K") == 64 * 1024
    assert parse_size("128MiB") == 128 * 1024 * 1024
    assert parse_size("1g") == 1024**3
    with pytest.raises(ValueError):
        parse_size("lots")


def test_open_log_files_names_the_directory(tmp_path: Path) -> None:
    logs = unwritable_dir(tmp_path)
    try:
        with pytest.raises(LogDirError) as err:
            open_log_files(LogFiles(logs, BROKER_LOGS))
    finally:
        if logs.name == "ro":
            logs.chmod(0o700)
    assert str(err.value).startswith(f"cannot write logs to {logs}: ")
    ok = open_log_files(LogFiles(tmp_path / "ok", BROKER_LOGS, max_bytes=100, backups=1))
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == ["broker.log", "store.log"]
    for h in ok:
        h.close()
