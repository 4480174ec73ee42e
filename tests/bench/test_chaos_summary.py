"""bench.chaos.summary: reports of several runs summed per fault kind."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from click.testing import CliRunner

from bench.chaos.accounting import FaultWindow, Report
from bench.chaos.summary import format_summary, main, summarize


def window(name: str, unavailable: float | None, gap: float, healed: bool = True
           ) -> FaultWindow:
    return FaultWindow(name, 0.0, 1.0, True, healed, unavailable, gap, None, 0.0)


def report(lost: list[str], *faults: FaultWindow) -> dict[str, object]:
    return asdict(Report(100, 100 - len(lost), lost, 2, 3, 0, list(faults)))


def test_runs_summed_per_fault_kind() -> None:
    s = summarize([
        report([], window("kill-master", 2.0, 2.0), window("kill-slave", 0.0, 1.0)),
        report([], window("kill-master", 4.0, 5.0), window("kill-master", None, 9.0, False)),
    ])
    assert (s.runs, s.acknowledged, s.lost, s.duplicated, s.redeliveries) == (2, 200, [], 4, 6)
    km = s.kinds["kill-master"]
    assert (km.count, km.healed, km.never_back) == (3, 2, 1)
    assert km.write_unavailable == [2.0, 4.0] and km.write_gap == [2.0, 5.0, 9.0]
    text = format_summary(s)
    assert "| kill-master | 3 | 2 | 3.0 / 4.0 | 1 | 5.0 / 9.0 |" in text
    assert "| kill-slave | 1 | 1 | 0.0 / 0.0 | 0 | 1.0 / 1.0 |" in text
    assert "runs: 2, faults: 4, healed: 3" in text


def test_a_lost_message_is_named_and_fails_the_command(tmp_path: Path) -> None:
    good, bad = tmp_path / "a.json", tmp_path / "b.json"
    good.write_text(json.dumps(report([], window("kill-master", 1.0, 1.0))))
    bad.write_text(json.dumps(report(["p1-7"], window("kill-slave", 1.0, 1.0))))
    result = CliRunner().invoke(main, [str(good), str(bad)])
    assert result.exit_code == 1, result.output
    assert "lost (acknowledged, never delivered): 1 ['p1-7']" in result.output
    assert CliRunner().invoke(main, [str(good)]).exit_code == 0
