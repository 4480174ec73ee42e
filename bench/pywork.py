"""A yardstick of the interpreter: nanoseconds per step of a loop doing the
kinds of work the broker's hot path does (calls, a ``__slots__`` object,
attribute reads, dict and list updates, struct packing, bytes joins).

Builds of one Python version run this at different speeds: on the 2-core VM
this project is measured on, a source build of 3.11 without profile-guided or
link-time optimisation took about 410 ns a step, Debian's 3.11 (built with
both) about 300, while a bare loop of integer and dict operations
(``mqbench machine``'s "Python loop") ran alike on both.

Standard library only, and a script too: ``deploy/pick_python.py`` runs this
file under each candidate interpreter before any venv exists, and
``mqbench machine`` reports the same figure.
"""

from __future__ import annotations

import json
import struct
import sys
import time

_PACK = struct.Struct("<iqq").pack


class _Item:
    __slots__ = ("a", "b")

    def __init__(self, a: int, b: str) -> None:
        self.a = a
        self.b = b


def _step(i: int, d: dict[int, _Item], parts: list[bytes]) -> int:
    it = _Item(i, str(i))
    d[i & 1023] = it
    parts.append(_PACK(it.a, i, i))
    return len(it.b)


def _run(n: int) -> int:
    d: dict[int, _Item] = {}
    parts: list[bytes] = []
    total = 0
    for i in range(n):
        total += _step(i, d, parts)
        if len(parts) >= 64:
            b"".join(parts)
            parts.clear()
    return total


def work_ns(steps: int = 50_000, runs: int = 9) -> float:
    """The best of ``runs`` timings of ``steps`` steps, in ns a step."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        _run(steps)
        best = min(best, time.perf_counter() - t0)
    return best / steps * 1e9


def probe() -> dict[str, object]:
    """This interpreter's version, whether it can make a venv, and ``work_ns``."""
    out: dict[str, object] = {"version": list(sys.version_info[:3])}
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
        out["venv"] = True
    except ImportError as exc:
        out["venv"] = False
        out["why"] = str(exc)
    out["ns"] = work_ns()
    return out


if __name__ == "__main__":
    print(json.dumps(probe()))
