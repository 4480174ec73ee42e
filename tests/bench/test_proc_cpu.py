"""bench.proc_cpu: CPU time of a process and of its tree, from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.proc_cpu import cpu_seconds, tree_cpu_seconds

TICK = os.sysconf("SC_CLK_TCK")


def stat_line(pid: int, name: str, ppid: int, utime: int, stime: int, cutime: int,
              cstime: int) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime ...
    return (f"{pid} ({name}) S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} {stime} {cutime} {cstime} "
            "20 0 1 0 100 0 0\n")


def fake_proc(root: Path, rows: list[tuple[int, str, int, int, int, int, int]]) -> str:
    for pid, name, ppid, ut, st, cut, cst in rows:
        (root / str(pid)).mkdir()
        (root / str(pid) / "stat").write_text(stat_line(pid, name, ppid, ut, st, cut, cst))
    (root / "self").mkdir()  # not a pid: ignored
    (root / "99").mkdir()  # a process gone between the listing and the read
    return str(root)


def test_tree_sums_descendants_and_their_reaped_children(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, [
        (10, "driver", 1, 100, 20, 5, 1),
        (11, "java) (x", 10, 1000, 200, 300, 30),  # a name with ") (" in it
        (12, "python3", 11, 50, 5, 0, 0),
        (13, "other", 1, 7777, 7777, 0, 0),  # not in the tree
        (14, "python3", 12, 1, 1, 0, 0),
    ])
    assert tree_cpu_seconds(10, proc) == pytest.approx((126 + 1530 + 55 + 2) / TICK)
    assert tree_cpu_seconds(12, proc) == pytest.approx((55 + 2) / TICK)
    assert cpu_seconds(11, proc) == pytest.approx(1200 / TICK)
    assert tree_cpu_seconds(99, proc) is None and cpu_seconds(99, proc) is None
    assert tree_cpu_seconds(10, str(tmp_path / "nothing")) is None


def test_a_real_childs_cpu_counts_alive_and_after_it_is_reaped() -> None:
    me = os.getpid()
    before = tree_cpu_seconds(me)
    assert before is not None
    burn = ("import time, sys\n"
            "end = time.process_time() + 0.3\n"
            "while time.process_time() < end: pass\n"  # 0.3 s of CPU, bounded
            "sys.stdout.write('done\\n'); sys.stdout.flush(); sys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        alive = tree_cpu_seconds(me)  # the child still runs: counted as a descendant
        assert alive is not None and alive - before >= 0.25
    finally:
        child.communicate("", timeout=60)
    reaped = tree_cpu_seconds(me)  # gone and waited for: in this process's cutime
    assert reaped is not None and reaped - before >= 0.25
