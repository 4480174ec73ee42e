"""Producers of the official RocketMQ 4.x client (the C++ one, PyPI ``rocketmq``) in a
chaos run, one child process each (``official_client_proc chaos``).

A child paces its own sync sends and appends one JSON line per send to its record
file (``official-K/sends.jsonl`` in the run's directory): the id, when the send began
and ended on the checker's clock, and the C++ client's answer (``status`` and, for a
stored message, ``msg_id`` and ``offset``) or its ``error``. ``OfficialProducer``
starts the child, reads that file as it grows (``LineTail``) and hands every send to
the checker, which counts a message acknowledged only on ``SEND_OK``, exactly as for
its own producers. Ids are ``oK-SEQ`` (ours: ``pK-SEQ``).

Bounded: the child stops at EOF on its stdin (closed at the end of the load, or when
the checker's process is gone), is killed if it has not exited ``stop_timeout`` s
later, and its own watchdog ends it after ``timeout`` s whatever happens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import trio

from bench.chaos.accounting import OFFICIAL, Record
from tests.integration.official_client import CHILD, REPO

ID_PREFIX = "o"  # official producer K's ids: oK-SEQ
SEND_OK = "SEND_OK"
START_TIMEOUT = 60.0  # the child up: the wheel loaded, the producer started
TAIL_INTERVAL = 0.2  # seconds between reads of a child's record file
MAX_LINE = 64 * 1024  # longer: not a record of ours
MAX_ERROR_KIND_WORDS = 8


class OfficialClientError(RuntimeError):
    """An official producer's child process did not start."""


@dataclass(frozen=True, slots=True)
class OfficialSend:
    """One send of an official producer, as its child recorded it."""

    id: str
    begun: float
    t: float
    status: str | None  # SEND_OK, FLUSH_SLAVE_TIMEOUT, ... (None: the send raised)
    error: str | None = None
    msg_id: str | None = None
    offset: int | None = None

    @property
    def acknowledged(self) -> bool:
        return self.status == SEND_OK

    def record(self) -> Record:
        """The acknowledged record (the C++ send result names no queue: ``""``)."""
        return Record(self.t, self.id, "", -1 if self.offset is None else self.offset,
                      self.begun, OFFICIAL)

    def outcome(self) -> str:
        """What the send came to, without addresses and numbers: a status, or
        ``error: <the C++ client's first words>``."""
        if self.status is not None:
            return self.status
        words = (self.error or "").split()[:MAX_ERROR_KIND_WORDS]
        return "error: " + " ".join(w for w in words if not any(c.isdigit() for c in w))


def _number(obj: Mapping[str, Any], key: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{key!r} is not a number: {v!r}")
    return float(v)


def parse_send(line: str) -> OfficialSend:
    """One line of a child's record file; ValueError for anything else."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        raise ValueError(f"not JSON: {line[:200]!r}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"not a JSON object: {line[:200]!r}")
    mid = obj.get("id")
    if not isinstance(mid, str) or not mid:
        raise ValueError(f"no id: {line[:200]!r}")
    begun, t = _number(obj, "begun"), _number(obj, "t")
    status, error = obj.get("status"), obj.get("error")
    if (status is None) == (error is None):
        raise ValueError(f"{mid}: a send has a status or an error, one of them: {line[:200]!r}")
    if status is None:
        if not isinstance(error, str):
            raise ValueError(f"{mid}: the error is not text")
        return OfficialSend(mid, begun, t, None, error)
    if not isinstance(status, str):
        raise ValueError(f"{mid}: the status is not text")
    msg_id, offset = obj.get("msg_id"), obj.get("offset")
    if status == SEND_OK and (not isinstance(msg_id, str) or not isinstance(offset, int)
                              or isinstance(offset, bool) or offset < 0):
        raise ValueError(f"{mid}: SEND_OK without a msg_id and an offset: {line[:200]!r}")
    return OfficialSend(mid, begun, t, status, None,
                        msg_id if isinstance(msg_id, str) else None,
                        offset if isinstance(offset, int) and not isinstance(offset, bool)
                        else None)


class LineTail:
    """The complete lines appended to a file since the last ``read``; a line still
    being written waits for its newline (``partial``: what of it is there)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pos = 0
        self.partial = b""

    def read(self) -> list[str]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return []
        self._pos += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        if len(self.partial) > MAX_LINE:
            raise ValueError(f"{self.path}: a line longer than {MAX_LINE} bytes")
        return [ln.decode("utf-8", "replace") for ln in lines if ln.strip()]


class OfficialProducer:
    """Official producer K of a run: ``await nursery.start(p.run, stop)`` returns once
    the child's producer has started; ``run`` returns after ``stop`` is set, the child
    has exited (or been killed) and its last records are handed to ``on_send``."""

    def __init__(self, k: int, namesrv: str, topic: str, root: Path, *, interval: float,
                 t0: float, max_messages: int, send_timeout: float, timeout: float,
                 on_send: Callable[[OfficialSend], None]) -> None:
        self.name = f"{ID_PREFIX}{k}"
        self.home = root / f"official-{k}"  # HOME: the C++ client logs under it
        self.sends_path = self.home / "sends.jsonl"
        self.namesrv, self.topic = namesrv, topic
        self.interval, self.t0, self.max_messages = interval, t0, max_messages
        self.send_timeout, self.timeout = send_timeout, timeout
        self.stop_timeout = 3 * send_timeout + 30.0  # the send under way, then the shutdown
        self.on_send = on_send
        self.sends = 0
        self.pid: int | None = None
        self.returncode: int | None = None
        self.failure: str | None = None  # the child ended badly (a crash, its watchdog)
        self.events: list[dict[str, Any]] = []  # the child's stdout
        self._news = trio.Event()  # set when a line (or EOF) came on the child's stdout
        self._eof = False
        self._tail = LineTail(self.sends_path)
        self.log = structlog.get_logger("chaos.official").bind(producer=self.name)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", CHILD, "chaos", "-n", self.namesrv,
                "-g", f"chaos-official-{self.name}", "-t", self.topic,
                "--prefix", self.name, "--interval", repr(self.interval),
                "--t0", repr(self.t0), "--max", str(self.max_messages),
                "--send-timeout-ms", str(max(1, round(self.send_timeout * 1000))),
                "--out", str(self.sends_path), "--timeout", repr(self.timeout)]

    def diagnostics(self, chars: int = 2000) -> str:
        """The child's stderr and the C++ client's log, their last ``chars`` each."""
        parts = []
        err = self.home / "stderr.log"
        if err.exists() and err.stat().st_size:
            parts.append(f"--- stderr ---\n{err.read_text(errors='replace')[-chars:]}")
        for log in sorted((self.home / "logs" / "rocketmq-cpp").glob("*")):
            parts.append(f"--- {log.name} ---\n{log.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    def _hand_over(self) -> None:
        try:
            lines = self._tail.read()
        except ValueError as e:
            lines = []
            self._bad(str(e))
        for line in lines:
            try:
                send = parse_send(line)
            except ValueError as e:
                self._bad(str(e))
                continue
            self.sends += 1
            self.on_send(send)

    def _bad(self, error: str) -> None:
        self.failure = self.failure or f"a bad record: {error}"
        self.log.error("bad record from the official producer", error=error)

    async def _read_events(self, stdout: trio.abc.ReceiveStream) -> None:
        buf = b""
        while data := await stdout.receive_some(4096):
            *lines, buf = (buf + data).split(b"\n")
            for ln in lines:
                try:
                    obj = json.loads(ln)
                except ValueError:
                    obj = None
                self.events.append(obj if isinstance(obj, dict) else
                                   {"event": "garbage", "line": ln[:200].decode(errors="replace")})
            buf = buf[-MAX_LINE:]
            self._news.set()
        self._eof = True
        self._news.set()

    def _has_event(self, name: str) -> bool:
        return any(e.get("event") == name for e in self.events)

    async def _wait_started(self) -> bool:
        with trio.move_on_after(START_TIMEOUT):
            while not self._has_event("started") and not self._eof:
                await self._news.wait()
                self._news = trio.Event()
        return self._has_event("started")

    async def _load(self, proc: trio.Process, stop: trio.Event) -> None:
        """Hand sends over until ``stop``, then end the child."""
        assert proc.stdin is not None
        while not stop.is_set() and proc.poll() is None:
            with trio.move_on_after(TAIL_INTERVAL):
                await stop.wait()
            self._hand_over()
        if proc.poll() is not None:  # before the end of the load
            if proc.returncode != 0:
                self.failure = (f"exited with status {proc.returncode} during the load, "
                                f"after {self.sends} sends")
                self.log.error("official producer exited", status=proc.returncode,
                               sends=self.sends, diagnostics=self.diagnostics())
            return
        await proc.stdin.aclose()  # EOF: the child stops after the send under way
        with trio.move_on_after(self.stop_timeout):
            while proc.poll() is None:
                await trio.sleep(TAIL_INTERVAL)
                self._hand_over()
        if proc.poll() is None:
            self.log.warning("official producer did not stop: killed", after=self.stop_timeout)

    async def run(self, stop: trio.Event,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        proc: trio.Process | None = None
        with open(self.home / "stderr.log", "ab") as stderr:
            try:
                proc = await trio.lowlevel.open_process(
                    self.argv(), cwd=REPO, env={**os.environ, "HOME": str(self.home)},
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
                self.pid = proc.pid
                assert proc.stdout is not None
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_events, proc.stdout)
                    started = await self._wait_started()
                    if started:
                        self.log.info("official producer started", pid=proc.pid)
                        task_status.started()
                        await self._load(proc, stop)
                    nursery.cancel_scope.cancel()  # the event reader
                if not started:
                    if self._eof:  # its stdout closed: it is exiting
                        with trio.move_on_after(5):
                            await proc.wait()
                    why = (f"did not start within {START_TIMEOUT:g} s" if proc.poll() is None
                           else f"exited with status {proc.returncode} before it started")
                    raise OfficialClientError(f"official producer {self.name} {why}\n"
                                              f"{self.diagnostics()}")
            finally:
                with trio.CancelScope(shield=True):
                    if proc is not None:
                        if proc.poll() is None:
                            proc.kill()
                        await proc.wait()
                        self.returncode = proc.returncode
                    self._hand_over()
        if self._has_event("timeout"):
            self.failure = self.failure or f"its watchdog ended it after {self.timeout:g} s"
