"""Finding logged tracebacks in daemon logs.

A daemon logs with structlog's ConsoleRenderer (protocol/trio/logs.py): one line per
event, starting with an ISO timestamp. ``log.exception(...)`` renders the
exception on the lines after the event: ``Traceback (most recent call last):``
(or ``+ Exception Group Traceback (most recent call last):``) and the frames,
or, for an exception that was never raised, just ``SomeError: text``. An
uncaught exception that kills the process prints the same through Python's
default hook. Every such block is a traceback here. The JSON renderer's
exception keys are recognised too, should a daemon ever log JSON.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
# the last line of a rendered exception: ``pkg.mod.SomeError: text`` (maybe inside a group's box)
EXCEPTION_LINE = re.compile(
    r"^[\s|+]*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|ExceptionGroup|Exit|Interrupt)"
    r"(?::\s.*)?$"
)
JSON_EXCEPTION = re.compile(r'"(?:exception|exc_info)"\s*:')
MAX_LINES = 60
MAX_LINE_CHARS = 400


def _clip(lines: list[str]) -> str:
    shown = [ln if len(ln) <= MAX_LINE_CHARS else ln[:MAX_LINE_CHARS] + " ..." for ln in lines]
    if len(shown) > MAX_LINES:
        cut = len(shown) - MAX_LINES
        shown = shown[: MAX_LINES // 2] + [f"... ({cut} lines cut) ..."] + shown[-MAX_LINES // 2 :]
    return "\n".join(shown)


def tracebacks(text: str) -> list[str]:
    """Every rendered exception in ``text``, each with the log line it belongs to."""
    lines = text.splitlines()
    found: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if LOG_LINE.match(line):
            i += 1
            continue
        if line.lstrip().startswith("{"):
            if JSON_EXCEPTION.search(line):
                found.append(_clip([line]))
            i += 1
            continue
        # a run of lines that are not log events: a rendered exception, or stray output
        j = i
        while j < len(lines) and not LOG_LINE.match(lines[j]):
            j += 1
        block = lines[i:j]
        if any(TRACEBACK.search(b) or EXCEPTION_LINE.match(b) for b in block):
            head = [lines[i - 1]] if i > 0 else []
            found.append(_clip(head + block))
        i = j
    return found


@dataclass
class LogWatch:
    """Remembers how far each log was read, to scan only what was written since."""

    offsets: dict[Path, int] = field(default_factory=dict)

    def mark(self, paths: Iterable[Path]) -> None:
        for p in paths:
            self.offsets[p] = p.stat().st_size if p.exists() else 0

    def new_tracebacks(self, paths: Iterable[Path]) -> list[tuple[Path, str]]:
        """(log, traceback) for every traceback written since ``mark`` (or ever)."""
        out: list[tuple[Path, str]] = []
        for p in paths:
            if not p.exists():
                continue
            start = self.offsets.get(p, 0)
            with open(p, "rb") as f:
                f.seek(start)
                data = f.read()
            self.offsets[p] = start + len(data)
            out += [(p, tb) for tb in tracebacks(data.decode(errors="replace"))]
        return out


def report(found: list[tuple[Path, str]], names: dict[Path, str], limit: int = 3) -> str:
    """A failure message naming each daemon and showing its traceback."""
    parts = [f"{len(found)} traceback(s) logged by the daemons (requirement 7: merely bad "
             f"requests never log one):"]
    for path, tb in found[:limit]:
        parts.append(f"--- daemon {names.get(path, path.stem)} (log {path}):\n{tb}")
    if len(found) > limit:
        parts.append(f"... and {len(found) - limit} more")
    return "\n".join(parts)
