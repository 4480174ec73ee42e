"""The test side of the official RocketMQ C++ client: whether its wheel loads
here, and ``OfficialClient``, one ``official_client_proc`` child process (its
stdin, its JSON-line stdout read by a thread, its C++ log under its own HOME).
Every child is bounded in time (its own watchdog, and a kill at ``close``)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.waits import wait_until_sync

REPO = Path(__file__).resolve().parents[2]
CHILD = "tests.integration.official_client_proc"


@functools.cache
def load_error(module: str = "rocketmq.client") -> str | None:
    """Why ``module`` (by default ``rocketmq.client``: the wheel's ctypes wrapper and
    librocketmq) cannot be imported by this interpreter, or None when it can. Checked
    in a child process, so a C library is never loaded into pytest's own."""
    try:
        proc = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO,
                              capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    if proc.returncode == 0:
        return None
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit status {proc.returncode}"


class OfficialClient:
    """One child process running the C++ client (see ``official_client_proc``)."""

    def __init__(self, args: list[str], home: Path, timeout: float = 120.0) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.timeout = timeout
        self.lines: list[dict[str, Any]] = []
        self._stderr = open(home / "stderr.log", "ab")
        env = {**os.environ, "HOME": str(home)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", CHILD, *args, "--timeout", str(timeout)], cwd=REPO, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            encoding="utf-8")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                obj = {"event": "garbage", "line": line}
            self.lines.append(obj)  # list.append is atomic: readers take snapshots

    # ---- reading ------------------------------------------------------------------------

    def has_event(self, name: str) -> bool:
        return any(d.get("event") == name for d in list(self.lines))

    def records(self) -> list[dict[str, Any]]:
        """Every line that is not an event (send results, received messages)."""
        return [d for d in list(self.lines) if "event" not in d]

    def wait_event(self, name: str, timeout: float = 30.0) -> None:
        self.wait(lambda: self.has_event(name), timeout, f"event {name!r}")

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> None:
        def exited() -> None:
            if self.proc.poll() is not None:
                self._reader.join(5)  # the lines it printed before it exited
                if not predicate():
                    raise AssertionError(f"the C++ client process exited "
                                         f"({self.proc.returncode}) before {what}")
        try:
            wait_until_sync(predicate, timeout, what, check=exited)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.diagnostics()}") from None

    def diagnostics(self, chars: int = 3000) -> str:
        """The child's stderr and the C++ client's log, their last ``chars`` each."""
        parts = []
        err = self.home / "stderr.log"
        if err.exists() and err.stat().st_size:
            parts.append(f"--- stderr ---\n{err.read_text(errors='replace')[-chars:]}")
        for log in sorted((self.home / "logs" / "rocketmq-cpp").glob("*")):
            parts.append(f"--- {log.name} ---\n{log.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    def cpp_log_lines(self, *words: str) -> list[str]:
        """The C++ client log's lines holding every one of ``words``."""
        out = []
        for log in sorted((self.home / "logs" / "rocketmq-cpp").glob("*")):
            out += [ln for ln in log.read_text(errors="replace").splitlines()
                    if all(w in ln for w in words)]
        return out

    # ---- writing ------------------------------------------------------------------------

    def write(self, obj: dict[str, Any] | str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 30.0) -> int:
        """Close stdin (a producer shuts down, a consumer stops) and wait for the exit."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise AssertionError(f"the C++ client process did not stop within {timeout}s\n"
                                 f"{self.diagnostics()}") from None
        self._reader.join(5)
        return code

    def close(self) -> None:
        """Kill the child if it still runs; idempotent."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        self._reader.join(5)
        self._stderr.close()

    def __enter__(self) -> OfficialClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def message(topic: str, body: str, tags: str | None = None, keys: str | None = None,
            props: dict[str, str] | None = None) -> dict[str, Any]:
    """A message as the child reads it."""
    m: dict[str, Any] = {"topic": topic, "body": body}
    if tags:
        m["tags"] = tags
    if keys:
        m["keys"] = keys
    if props:
        m["props"] = props
    return m


def cpp_send(namesrv: str, requests: Iterable[dict[str, Any]], home: Path,
             group: str = "PID-cpp", timeout: float = 120.0,
             warm_up: Callable[[OfficialClient], int] | None = None) -> list[dict[str, Any]]:
    """Run a C++ producer through ``requests`` (see ``official_client_proc``); its
    answers in order. Fails on a request the C++ client answered with an error.
    ``warm_up(client)``, if given, runs first and returns how many requests it
    wrote (their answers come first)."""
    with OfficialClient(["produce", "-n", namesrv, "-g", group], home, timeout) as p:
        n = warm_up(p) if warm_up is not None else 0
        for req in requests:
            p.write(req)
            n += 1
        code = p.finish(timeout)
        answers = p.records()
        errors = [a for a in answers if "error" in a]
        assert not errors and code == 0 and len(answers) == n, (
            f"C++ producer: exit {code}, {len(answers)}/{n} answers, errors {errors[:5]}\n"
            f"{p.diagnostics()}")
        return sorted(answers, key=lambda a: int(a["i"]))
