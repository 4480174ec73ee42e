"""deploy/pick_python.py: which interpreter ``make`` builds .venv from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy import pick_python
from deploy.pick_python import best_of, choose, describe, usable

ROOT = Path(__file__).resolve().parent.parent


def result(ns: float, version: tuple[int, ...] = (3, 11, 7), venv: bool = True
           ) -> dict[str, object]:
    return {"version": list(version), "venv": venv, "ns": ns}


def test_python3_stays_unless_another_is_faster_by_the_margin() -> None:
    # 10% faster or more: the faster one; less: python3, so alike builds never flip
    assert choose([("python3", result(400)), ("/usr/bin/python3.11", result(300))]) \
        == "/usr/bin/python3.11"
    assert choose([("python3", result(400)), ("/usr/bin/python3.11", result(360))]) \
        == "/usr/bin/python3.11"
    assert choose([("python3", result(400)), ("/usr/bin/python3.11", result(370))]) == "python3"
    assert choose([("python3", result(300)), ("/usr/bin/python3.11", result(400))]) == "python3"
    # the fastest of several
    assert choose([("python3", result(400)), ("a", result(300)), ("b", result(250))]) == "b"


def test_only_a_python_3_11_that_can_make_a_venv_counts() -> None:
    fast_but_312 = result(100, version=(3, 12, 1))
    fast_without_venv = {**result(100, version=(3, 11, 2), venv=False), "why": "No module named 'ensurepip'"}
    assert not usable(fast_but_312) and not usable(fast_without_venv) and not usable(None)
    assert choose([("python3", result(400)), ("x", fast_but_312), ("y", fast_without_venv),
                   ("z", None)]) == "python3"
    # python3 itself unusable: the first usable one is the default
    assert choose([("python3", fast_but_312), ("/usr/bin/python3.11", result(400))]) \
        == "/usr/bin/python3.11"
    assert choose([("python3", None)]) is None
    assert choose([]) is None
    assert describe("y", fast_without_venv) == "y 3.11.2: cannot make a venv (No module named 'ensurepip')"
    assert describe("x", fast_but_312) == "x 3.12.1: not Python 3.11"
    assert describe("z", None) == "z: did not run"
    assert describe("p", result(412.4)) == "p 3.11.7: 412 ns a loop step"


def test_each_candidate_keeps_its_fastest_probe_the_candidates_taking_turns() -> None:
    calls: list[str] = []
    timings = {"a": [500.0, 300.0, 310.0], "b": [450.0, 900.0, 440.0]}
    failing = iter([None, result(350), None])

    def run(path: str) -> dict[str, object] | None:
        calls.append(path)
        if path == "c":
            return next(failing)
        return result(timings[path][calls.count(path) - 1])

    got = dict(best_of(["a", "b", "c"], rounds=3, run=run))
    assert calls == ["a", "b", "c"] * 3  # turns, not all of one candidate's first
    assert got["a"] == result(300.0) and got["b"] == result(440.0)
    assert got["c"] == result(350)  # one probe of three ran: it counts
    assert dict(best_of(["d"], rounds=2, run=lambda path: None)) == {"d": None}


def test_the_probe_runs_under_a_real_interpreter() -> None:
    r = pick_python.probe(sys.executable)
    assert r is not None
    assert r["version"] == list(sys.version_info[:3])
    assert isinstance(r["ns"], float) and r["ns"] > 0
    assert pick_python.probe("/nonexistent/python3") is None
    assert pick_python.probe("/bin/false") is None


def test_candidates_are_distinct_interpreters(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    # python3 and python3.11 on PATH are links to one interpreter: listed once
    (tmp_path / "python3").symlink_to(sys.executable)
    (tmp_path / "python3.11").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = pick_python.candidates()
    assert found[0] == str(tmp_path / "python3")
    assert len({os.path.realpath(p) for p in found}) == len(found)
    assert str(tmp_path / "python3.11") not in found


def test_the_command_prints_one_path_it_can_make_a_venv_from() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "deploy" / "pick_python.py")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    chosen = proc.stdout.strip()
    assert len(proc.stdout.splitlines()) == 1
    # every candidate is described on stderr, the chosen one marked
    marked = [line for line in proc.stderr.splitlines() if line.startswith("* ")]
    if chosen == "python3":  # nothing usable here
        assert "no Python 3.11 here" in proc.stderr
    else:
        assert len(marked) == 1 and marked[0].startswith(f"* {chosen} 3.11.")
        assert usable(pick_python.probe(chosen))
