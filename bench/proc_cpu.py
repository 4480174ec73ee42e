"""CPU time of processes from Linux's /proc, for the benchmarks.

``cpu_seconds(pid)`` is one live process's user + system time so far;
``tree_cpu_seconds(pid)`` adds every live descendant's and what finished
children cost (a process's reaped children's time is in its ``cutime`` and
``cstime``; one not reaped yet still has its own), so a Spark session's JVM and
the Python workers it starts count with the driver that started them.
Elsewhere than Linux both give None.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

PROC = "/proc"


def _fields(pid: int, proc: str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, proc: str = PROC) -> float | None:
    """User + system CPU time of a live process so far, or None."""
    fields = _fields(pid, proc)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / _ticks()


def _pids(proc: str) -> Iterable[int]:
    try:
        names = os.listdir(proc)
    except OSError:
        return []
    return [int(n) for n in names if n.isdigit()]


def tree_cpu_seconds(pid: int, proc: str = PROC) -> float | None:
    """CPU time (user + system) of ``pid``, its live descendants and the
    children any of them has reaped, so far; None when ``pid`` is not found."""
    stats: dict[int, list[str]] = {}
    for p in _pids(proc):
        fields = _fields(p, proc)
        if fields is not None:
            stats[p] = fields
    if pid not in stats:
        return None
    children: dict[int, list[int]] = {}
    for p, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(p)
    total = 0
    todo, seen = [pid], {pid}
    while todo:
        p = todo.pop()
        fields = stats[p]
        total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        for child in children.get(p, ()):
            if child not in seen:  # pids are unique in one scan; this only guards loops
                seen.add(child)
                todo.append(child)
    return total / _ticks()


__all__ = ["cpu_seconds", "tree_cpu_seconds"]
