"""The daemons' log lines: the fast console renderer, render-once, the counting
rotating file handler (pure; no daemon)."""

from __future__ import annotations

import io
import logging
import logging.handlers
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog

from protocol.trio import logs
from protocol.trio.logs import (
    BROKER_LOGS,
    ConsoleLines,
    LogFiles,
    configure_logging,
    open_log_files,
)

EVENTS: list[dict[str, Any]] = [
    {"timestamp": "2026-11-23T23:10:12.123456Z", "level": "info", "event": "topic created",
     "logger": "broker.topics", "broker": "broker-a", "topic": "%RETRY%G1", "queues": 1},
    {"event": "a much longer event than thirty characters, no padding"},
    {"level": "warning", "event": "x", "value": None, "flag": True, "ratio": 0.5,
     "items": [1, "two"], "mapping": {"k": "v"}},
    {"event": "quoting", "space": "a b", "tab": "a\tb", "eq": "a=b", "quote": 'say "hi"',
     "apostrophe": "it's", "newline": "a\nb", "plain": "ab", "empty": "", "unicode": "größe"},
    {"timestamp": None, "level": "critical", "event": None, "logger_name": "store.commitlog",
     "b": 2, "a": 1},
    {"timestamp": "", "level": "debug", "event": "", "logger": "", "z": "last"},
    {"event": "not a str event", "logger": 7},
    {"level": "exception", "event": 42, "n": 10**20},
]


@pytest.mark.parametrize("event", EVENTS)
def test_console_lines_match_structlog_console_renderer(event: dict[str, Any]) -> None:
    expected = structlog.dev.ConsoleRenderer(colors=False)(None, "info", dict(event))
    assert ConsoleLines()(None, "info", dict(event)) == expected


def test_console_lines_hand_tracebacks_to_console_renderer() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
        line = ConsoleLines()(None, "error", {"event": "failed", "exc_info": exc_info, "k": 1})
        expected = structlog.dev.ConsoleRenderer(colors=False)(
            None, "error", {"event": "failed", "exc_info": exc_info, "k": 1})
    assert line == expected
    assert "Traceback (most recent call last)" in line and "ValueError: boom" in line
    stacked = ConsoleLines()(None, "info", {"event": "here", "stack": "Stack (most recent)"})
    assert stacked.startswith("here") and "\nStack (most recent)" in stacked


def test_each_record_is_rendered_once_for_every_handler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logging_restored: None) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    rendered: list[str] = []
    real = ConsoleLines.__call__

    def counting(self: ConsoleLines, logger: Any, name: str, ed: Any) -> str:
        line = real(self, logger, name, ed)
        rendered.append(line)
        return line

    monkeypatch.setattr(ConsoleLines, "__call__", counting)
    paths = configure_logging("INFO", files=LogFiles(tmp_path, BROKER_LOGS), lean=True)
    structlog.get_logger("broker").info("topic created", topic="T1", queues=4)
    logging.getLogger("store.commitlog").warning("plain %s record", "logging")
    structlog.get_logger("broker").debug("below the level")
    assert len(rendered) == 2  # two records, three handlers (one also formats for its roll-over)
    broker_log, store_log = (p.read_text() for p in paths)
    assert broker_log == err.getvalue().splitlines(keepends=True)[0]
    assert "topic created" in broker_log and "queues=4 topic=T1" in broker_log
    assert "plain logging record" in store_log and "[store.commitlog]" in store_log
    assert "below the level" not in err.getvalue()
    assert logging._srcfile is None  # type: ignore[attr-defined]


def test_log_exception_keeps_its_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logging_restored: None) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    paths = configure_logging("INFO", files=LogFiles(tmp_path, BROKER_LOGS))
    try:
        {}["missing"]
    except KeyError:
        structlog.get_logger("broker").exception("request handler failed", code="SEND")
    text = paths[0].read_text()
    assert "request handler failed" in text and "code=SEND" in text
    assert "Traceback (most recent call last)" in text and "KeyError: 'missing'" in text


def test_json_lines_still_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               logging_restored: None) -> None:
    import json

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    paths = configure_logging("INFO", json=True, files=LogFiles(tmp_path, BROKER_LOGS))
    structlog.get_logger("broker").info("topic created", topic="T1")
    line = json.loads(paths[0].read_text())
    assert line["event"] == "topic created" and line["topic"] == "T1"
    assert line["logger"] == "broker" and line["level"] == "info"


def _records(handler: logging.Handler, texts: list[str]) -> None:
    handler.setFormatter(logging.Formatter("%(message)s"))
    for t in texts:
        handler.handle(logging.makeLogRecord({"msg": t, "levelno": logging.INFO,
                                              "name": "broker"}))


def test_rotating_file_counts_its_size(tmp_path: Path) -> None:
    h = open_log_files(LogFiles(tmp_path, BROKER_LOGS[:1], max_bytes=100, backups=2))[0]
    try:
        _records(h, ["a" * 39] * 2)  # 80 bytes with newlines
        assert (tmp_path / "broker.log").stat().st_size == 80
        _records(h, ["b" * 39])  # 80 + 40 >= 100: this line starts a new file
        assert (tmp_path / "broker.log").read_text() == "b" * 39 + "\n"
        assert (tmp_path / "broker.log.1").read_text() == ("a" * 39 + "\n") * 2
        _records(h, ["é" * 30])  # 61 bytes in UTF-8 (31 characters): 40 + 61 >= 100
        assert (tmp_path / "broker.log").read_text() == "é" * 30 + "\n"
        assert (tmp_path / "broker.log.2").read_text() == ("a" * 39 + "\n") * 2
    finally:
        h.close()


def test_rotating_file_notices_a_truncation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs._RotatingFile, "RESYNC_LINES", 3)
    h = open_log_files(LogFiles(tmp_path, BROKER_LOGS[:1], max_bytes=100, backups=1))[0]
    try:
        _records(h, ["a" * 29] * 3)  # 90 bytes
        assert h.stream is not None
        h.stream.truncate(0)  # an operator emptied the file (its size is read again now)
        _records(h, ["b" * 29] * 2)
        assert not (tmp_path / "broker.log.1").exists()
    finally:
        h.close()


def test_rotating_file_never_rolls_over_a_device(monkeypatch: pytest.MonkeyPatch) -> None:
    rolled: list[str] = []  # a real roll-over would rename /dev/null: it is only noted here
    monkeypatch.setattr(logs._RotatingFile, "doRollover", lambda self: rolled.append("x"))
    h = logs._RotatingFile("/dev/null", maxBytes=10, backupCount=1)
    try:
        _records(h, ["x" * 50] * 3)
    finally:
        h.close()
    assert rolled == []
