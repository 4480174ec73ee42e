"""The interpreter ``make`` builds ``.venv`` from: the fastest Python 3.11 here.

Run with any ``python3`` before the venv exists; prints the chosen interpreter's
path on stdout and why on stderr. The candidates are ``python3`` and
``python3.11`` on PATH and the distribution's ``/usr/bin/python3.11`` and
``/usr/bin/python3``; each must be 3.11 and able to make a venv (``venv`` and
``ensurepip``). Each runs ``bench/pywork.py``, a pure-Python loop of the kinds
of work the broker's hot path does (``mqbench machine`` reports the same
figure), ``ROUNDS`` times in turns with the others, and its best run counts.
Another interpreter is chosen over ``python3`` only when it is at least
``MARGIN`` faster, so two builds that are alike never flip from one run to the
next.

Why: an interpreter built without profile-guided optimisation and link-time
optimisation (a plain source build, as pyenv's) runs the same bytecode
markedly slower than a distribution's build (Debian's is built with both). On
the 2-core machine this project is measured on, Debian's 3.11.2 took 298-313 ns
a step of that loop against 398-445 ns for pyenv's 3.11.7, and a fresh broker
stored 130,944-170,813 batched messages a second on it against 90,799-153,087
(six runs each, alternating).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

MARGIN = 0.10  # another interpreter must be this much faster than python3 to be chosen
TIMEOUT_S = 30.0
ROUNDS = 3  # probes of each candidate, taking turns; the fastest of each counts

# Run by each candidate (standard library only): its version, whether it can make
# a venv, and the best time of a loop of the kinds of work the broker's hot path does
PROBE = Path(__file__).resolve().parent.parent / "bench" / "pywork.py"


def candidates() -> list[str]:
    """Distinct interpreters (by real path) among the usual places, ``python3`` first."""
    found: list[str] = []
    seen: set[str] = set()
    for name in ("python3", "python3.11", "/usr/bin/python3.11", "/usr/bin/python3"):
        path = shutil.which(name)
        if path is None:
            continue
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        found.append(path)
    return found


def probe(path: str) -> dict[str, object] | None:
    """What ``PROBE`` printed under ``path``, or None when it failed."""
    try:
        # -I: nothing from the environment, the user's site or the script's directory
        proc = subprocess.run([path, "-I", str(PROBE)], capture_output=True, text=True,
                              timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return result if isinstance(result, dict) else None


def usable(result: dict[str, object] | None) -> bool:
    return loop_ns(result) is not None


def loop_ns(result: dict[str, object] | None) -> float | None:
    """The loop's ns of a Python 3.11 that can make a venv, else None."""
    if result is None or result.get("venv") is not True:
        return None
    version, ns = result.get("version"), result.get("ns")
    if not (isinstance(version, list) and version[:2] == [3, 11]):
        return None
    return float(ns) if isinstance(ns, (int, float)) and ns > 0 else None


def choose(results: Sequence[tuple[str, dict[str, object] | None]],
           margin: float = MARGIN) -> str | None:
    """The path to use: the first usable one (``python3``) unless another usable
    one's loop is at least ``margin`` faster; then the fastest. None when none
    is usable."""
    ok = [(path, ns) for path, ns in ((p, loop_ns(r)) for p, r in results) if ns is not None]
    if not ok:
        return None
    default_path, default_ns = ok[0]
    fastest_path, fastest_ns = min(ok, key=lambda pr: pr[1])
    if fastest_ns <= default_ns * (1 - margin):
        return fastest_path
    return default_path


def describe(path: str, result: dict[str, object] | None) -> str:
    if result is None:
        return f"{path}: did not run"
    version = result.get("version")
    shown = ".".join(map(str, version)) if isinstance(version, list) else "?"
    if result.get("venv") is not True:
        return f"{path} {shown}: cannot make a venv ({result.get('why', '')})"
    ns = loop_ns(result)
    if ns is None:
        return f"{path} {shown}: not Python 3.11"
    return f"{path} {shown}: {ns:.0f} ns a loop step"


def best_of(paths: Sequence[str], rounds: int = ROUNDS,
            run: Callable[[str], dict[str, object] | None] | None = None,
            ) -> list[tuple[str, dict[str, object] | None]]:
    """Each path's probe with the lowest ns over ``rounds`` rounds, the paths
    taking turns in each round: a burst of load on a busy machine slows one
    probe of each, not all of one interpreter's (a single probe each here
    once took 452 ns for an interpreter that otherwise took 298-313)."""
    run = run or probe
    best: dict[str, dict[str, object] | None] = {path: None for path in paths}
    for _ in range(rounds):
        for path in paths:
            result = run(path)
            if result is None:
                continue
            kept = best[path]
            if kept is None or _ns_of(result) < _ns_of(kept):
                best[path] = result
    return [(path, best[path]) for path in paths]


def _ns_of(result: dict[str, object]) -> float:
    ns = loop_ns(result)
    return float("inf") if ns is None else ns


def main() -> int:
    results = best_of(candidates())
    chosen = choose(results)
    for path, result in results:
        mark = "*" if path == chosen else " "
        print(f"{mark} {describe(path, result)}", file=sys.stderr)
    if chosen is None:
        print("no Python 3.11 here that can make a venv; using python3", file=sys.stderr)
        chosen = "python3"
    print(chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
