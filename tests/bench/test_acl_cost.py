"""bench.acl_cost: the table from fixed samples, running another checkout's modules,
and one small run against real daemons (seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.acl_cost import FIGURES, HERE, render, summarize
from bench.all import checkout_env


def samples(base: float) -> dict[str, list[float]]:
    """Three runs of each figure: median base + 2i, smallest base + i (i: its rank)."""
    return {k: [base + i, base + 3 * i, base + 2 * i] for i, k in enumerate(FIGURES, 1)}


def test_summary_and_table() -> None:
    head = {"load_before": "1.00 0.50 0.25", "load_after": "1.10 0.60 0.30", "single": 5000,
            "batched": 64000, "repeat": 3}
    result = summarize(head, {"baseline": {"off": samples(100), "acl": samples(180)},
                              "this": {"off": samples(100), "acl": samples(120)}})
    assert result["median"]["this"]["acl"]["single_client"] == 122  # of 121, 123, 122
    assert result["min"]["this"]["acl"]["single_client"] == 121
    assert result["samples"]["baseline"]["off"]["batched_broker"] == [104, 112, 108]
    lines = render(result).splitlines()
    assert lines[2] == "| baseline | off | 102 | 104 | 106 | 108 |"
    assert lines[3] == "| baseline | acl | 182 | 184 | 186 | 188 |"
    assert lines[4] == "| baseline | ACL cost | +80 | +80 | +80 | +80 |"
    assert lines[7] == "| this | ACL cost | +20 | +20 | +20 | +20 |"
    assert "median of 3 runs of 5,000 single sends and 64,000 batched messages" in lines[-1]
    assert "load average 1.00 0.50 0.25 before, 1.10 0.60 0.30 after" in lines[-1]


def test_checkout_env_puts_the_checkout_first() -> None:
    assert checkout_env(None) == {}
    got = checkout_env(Path("/elsewhere"))
    assert got["cwd"] == "/elsewhere" and got["env"]["PYTHONPATH"] == "/elsewhere"
    assert got["env"]["PATH"] == os.environ["PATH"]
    out = subprocess.run([sys.executable, "-c", "import bench; print(bench.__file__)"],
                         capture_output=True, text=True, check=True, **checkout_env(HERE))
    assert out.stdout.strip() == str(HERE / "bench" / "__init__.py")


def test_small_run_against_real_daemons(tmp_path: Path) -> None:
    raw = tmp_path / "raw.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.acl_cost", "--single", "40", "--batched", "64",
         "--repeat", "1", "--json", str(raw), "--tmp-dir", str(tmp_path),
         "--log-level", "WARNING"],
        capture_output=True, text=True, timeout=240, **checkout_env(HERE))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(raw.read_text())
    for setup in ("off", "acl"):
        figures = result["samples"]["this"][setup]
        assert sorted(figures) == sorted(FIGURES)
        assert all(len(v) == 1 and v[0] >= 0 for v in figures.values())
        assert figures["single_client"][0] > 0  # the child's own CPU: never 0 for 40 sends
    assert "| this | ACL cost |" in proc.stdout
    assert not any(p.name.startswith("acl-cost-") for p in tmp_path.iterdir())  # cleaned up
