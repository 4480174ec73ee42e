"""bench/compare.py (the order of a comparison's runs, medians, spreads, ratios, the
table) and bench.all's --baseline wiring, from fixed results: no benchmark runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench import all as bench_all
from bench.all import ASYNC, SYNC, comparison_rows, failure_text, figure_value
from bench.compare import (
    HIGHER,
    LOWER,
    NEW,
    OLD,
    Row,
    Samples,
    Spread,
    Turn,
    compare_row,
    number_text,
    paired_ratios,
    ratio_text,
    render,
    schedule,
    spread,
)
from tests.bench.test_modes import RESULTS, step


def samples(*values: float | None, why: str = "exit 2") -> Samples:
    s = Samples()
    for rep, v in enumerate(values):
        s.add(rep, v, why)
    return s


def test_schedule_alternates_the_sides_within_each_benchmark() -> None:
    got = schedule(["a", "b"], 2)
    assert got == [Turn("a", 0, OLD), Turn("a", 0, NEW), Turn("a", 1, OLD), Turn("a", 1, NEW),
                   Turn("b", 0, OLD), Turn("b", 0, NEW), Turn("b", 1, OLD), Turn("b", 1, NEW)]
    assert [t.side for t in schedule(["x"], 3)] == [OLD, NEW] * 3
    assert schedule([], 4) == []
    with pytest.raises(ValueError, match="at least 1"):
        schedule(["a"], 0)
    with pytest.raises(ValueError, match="distinct"):
        schedule(["a"], 1, (OLD, OLD))


def test_spread_and_paired_ratios() -> None:
    assert spread([]) is None
    assert spread([3.0, 1.0, 2.0, 10.0]) == Spread(2.5, 1.0, 10.0, 4)
    # repeat 1 has no old value, repeat 2 an old 0: neither gives a pair
    assert paired_ratios({0: 100.0, 2: 0.0, 3: 50.0}, {0: 110.0, 1: 9.0, 2: 5.0, 3: 45.0}) == [
        pytest.approx(1.1), pytest.approx(0.9)]


def test_row_of_both_sides_medians_spreads_and_paired_ratios() -> None:
    row = compare_row("batched produce ASYNC msg/s", HIGHER, samples(100, 120, 90),
                      samples(110, 150, 99), 3)
    assert row.old == Spread(100, 90, 120, 3) and row.new == Spread(110, 99, 150, 3)
    assert row.ratio == pytest.approx(1.1)
    # pairs: 110/100, 150/120, 99/90
    assert row.pairs is not None
    assert (row.pairs.low, row.pairs.median, row.pairs.high) == (
        pytest.approx(1.1), pytest.approx(1.1), pytest.approx(1.25))
    assert row.note == ""
    assert ratio_text(row) == "1.10 (1.10–1.25)"


def test_a_side_without_values_is_na_with_its_reason() -> None:
    row = compare_row("single send ASYNC p50 µs, busy poll 1000 µs", LOWER,
                      samples(None, None, why="exit 2: Error: No such option: --busy-poll-us"),
                      samples(150, 160), 2)
    assert row.old is None and row.ratio is None and row.pairs is None
    assert row.new == Spread(155, 150, 160, 2)
    assert ratio_text(row) == "n/a (baseline: exit 2: Error: No such option: --busy-poll-us)"
    both = compare_row("f", LOWER, samples(None, why="not run"),
                       samples(None, why="the pair failed: broker listening"), 1)
    assert ratio_text(both) == ("n/a (baseline: not run; this tree: the pair failed: "
                                "broker listening)")
    zero = compare_row("f", LOWER, samples(0.0), samples(1.0), 1)
    assert zero.ratio is None and ratio_text(zero) == "n/a (the baseline's median is 0)"


def test_repeats_that_gave_nothing_are_counted_beside_the_ratio() -> None:
    row = compare_row("consume pull msg/s", HIGHER, samples(100, None, 100, why="timed out"),
                      samples(200, 220, 180), 3)
    assert row.ratio == pytest.approx(2.0)
    # pairs of repeats 0 and 2 only: 200/100, 180/100
    assert ratio_text(row) == "2.00 (1.80–2.00); baseline 2 of 3 runs (timed out)"
    # the commonest reason is given
    s = Samples()
    for rep, why in enumerate(["a", "b", "b"]):
        s.add(rep, None, why)
    assert s.reason() == "b" and Samples().reason() == "not run"


def test_long_reasons_are_cut_and_one_line() -> None:
    row = compare_row("f", HIGHER, samples(None, why="x\n" * 200), samples(1.0), 1)
    assert "\n" not in row.note and len(row.note) == 160 and row.note.endswith("…")
    with pytest.raises(ValueError, match="better"):
        compare_row("f", "faster", samples(1.0), samples(1.0), 1)


def test_numbers_take_the_digits_their_size_needs() -> None:
    assert [number_text(v) for v in (123456.7, 415.4, 12.34, 1.234, -0.5)] == [
        "123,457", "415", "12.3", "1.23", "-0.50"]
    # what rounds up to the next size takes that size's digits
    assert [number_text(v) for v in (99.96, 9.996, 99.94)] == ["100", "10.0", "99.9"]


def test_render_lines_up_every_column_but_the_last() -> None:
    rows = [compare_row("batched produce ASYNC msg/s", HIGHER, samples(100_000, 90_000),
                        samples(110_000, 99_000), 2),
            compare_row("fdatasync p50 µs", LOWER, samples(None, None, why="exit 1"),
                        samples(170, 180), 2)]
    lines = render(rows).splitlines()
    assert len(lines) == 4
    assert lines[0].split(" | ")[0].strip() == "figure"
    assert lines[0].endswith("| new/old (min–max of pairs)")
    assert all(line.count("|") == 6 for line in lines)
    for i in range(6):  # every separator but none after the last column lines up
        assert len({_nth_bar(line, i) for line in lines}) == 1
    assert [c.strip() for c in lines[2].split("|")] == [
        "batched produce ASYNC msg/s", "higher", "95,000", "90,000–100,000", "104,500",
        "99,000–110,000", "1.10 (1.10–1.10)"]
    assert [c.strip() for c in lines[3].split("|")] == [
        "fdatasync p50 µs", "lower", "n/a", "n/a", "175", "170–180", "n/a (baseline: exit 1)"]


def _nth_bar(line: str, n: int) -> int:
    at = -1
    for _ in range(n + 1):
        at = line.index("|", at + 1)
    return at


# ---- bench.all: the figures read from a run's results -----------------------------------


def test_figure_values_and_why_one_is_missing() -> None:
    figures = {f.label: f for f in bench_all.comparison_figures()}
    assert len(figures) == len(bench_all.comparison_figures())  # labels are unique
    assert {f.benchmark for f in figures.values()} == set(bench_all.COMPARED)
    assert figure_value(RESULTS, figures["batched produce ASYNC msg/s"]) == (30123.4, "")
    assert figure_value(RESULTS, figures["batched produce SYNC request p99 ms"]) == (40.0, "")
    assert figure_value(RESULTS, figures["broker CPU µs/msg, batched ASYNC"]) == (7.5, "")
    assert figure_value(RESULTS, figures["broker peak RSS MiB, push consume"]) == (120.0, "")
    assert figure_value(RESULTS, figures["Spark first read s"]) == (50.004, "")
    assert figure_value(RESULTS, figures["machine: trio loopback round trip p50 µs"]) == (
        61.26, "")
    assert figure_value(RESULTS, figures["broker CPU µs/msg, push"]) == (
        None, "not in its output")
    failed = {"steps": [step("produce_single", SYNC, "mqbench producer -b 1",
                             error="exit 2") | {"stderr": "Usage: ...\n\nError: No such "
                                                          "option: --busy-poll-us\n\n"}]}
    assert figure_value(failed, figures["single send SYNC p50 µs"]) == (
        None, "exit 2: Error: No such option: --busy-poll-us")
    assert figure_value(failed, figures["single send ASYNC p50 µs"]) == (None, "not run")
    assert failure_text({"error": "timed out after 5s"}) == "timed out after 5s"


def test_comparison_rows_from_each_sides_runs() -> None:
    faster = {"steps": [s | {"results": [r | {"msgs_per_s": r["msgs_per_s"] * 1.5}
                                         for r in s["results"]]}
                        if s["name"] == "consume_pull" else s for s in RESULTS["steps"]]}
    broken = {"steps": [s if s["name"] != "push" else
                        step("push", ASYNC, "mqbench push", error="the pair failed: x")
                        for s in RESULTS["steps"]]}
    rows = {r.figure: r for r in comparison_rows(
        {OLD: [RESULTS, broken], NEW: [faster, faster]}, 2, skip_spark=True)}
    assert not any(name.startswith("Spark") for name in rows)
    assert rows["consume pull msg/s"].ratio == pytest.approx(1.5)
    assert rows["batched produce ASYNC msg/s"].ratio == pytest.approx(1.0)
    assert rows["batched produce ASYNC msg/s"].note == ""
    push = rows["push consume msg/s"]
    assert push.old == Spread(54000.0, 54000.0, 54000.0, 1)
    assert ratio_text(push) == "1.00 (1.00–1.00); baseline 1 of 2 runs (the pair failed: x)"
    none = comparison_rows({OLD: [{"steps": []}], NEW: [RESULTS]}, 1)
    assert isinstance(none[0], Row)
    assert ratio_text(none[0]) == "n/a (baseline: not run)"


def test_run_compare_takes_turns_and_files_each_run(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    calls: list[tuple[str, Path]] = []

    def fake_turn(root: Path, benchmark: str, steps: Any, checkout: Path) -> list[dict[str, Any]]:
        calls.append((benchmark, checkout))
        return [step(f"{benchmark}-{len(calls)}", "", "mqbench x")]

    monkeypatch.setattr(bench_all, "run_turn", fake_turn)
    old, new = tmp_path / "old", tmp_path / "new"
    out = bench_all.run_compare({OLD: old, NEW: new}, 1000, True, 2, str(tmp_path))
    n = len(bench_all.COMPARED)
    assert calls == [(b, side) for b in bench_all.COMPARED for _ in range(2)
                     for side in (old, new)]
    assert [s["name"] for s in out["runs"][OLD][1]["steps"]] == [
        f"{b}-{4 * i + 3}" for i, b in enumerate(bench_all.COMPARED)]
    assert all(len(out["runs"][side][r]["steps"]) == n for side in (OLD, NEW) for r in (0, 1))
    assert out["repeat"] == 2 and out["divisor"] == 1000 and out["skip_spark"]
    assert list(tmp_path.glob("mq-bench-compare-*")) == []  # its directory is removed


def test_options_that_do_not_go_together() -> None:
    runner = CliRunner()
    got = runner.invoke(bench_all.main, ["--repeat", "3"])
    assert got.exit_code == 2 and "--repeat goes with --baseline" in got.output
    got = runner.invoke(bench_all.main, ["--baseline", "HEAD", "--doc", "x.md"])
    assert got.exit_code == 2 and "--doc" in got.output
    got = runner.invoke(bench_all.main, ["--baseline", "HEAD", "--repeat", "0"])
    assert got.exit_code == 2


def test_a_baseline_that_is_no_tree_is_a_clear_error(tmp_path: Path) -> None:
    got = CliRunner().invoke(bench_all.main, ["--baseline", "no-such-rev-xyz", "--log-level",
                                              "WARNING", "--tmp-dir", str(tmp_path)])
    assert got.exit_code == 1
    assert "'no-such-rev-xyz' is neither a directory nor a commit" in got.output
    got = CliRunner().invoke(bench_all.main, ["--baseline", str(tmp_path)])
    assert got.exit_code == 1 and "no checkout of this project" in got.output


def test_a_side_that_cannot_run_runs_nothing(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    calls: list[tuple[str, Path]] = []

    def fake_turn(root: Path, benchmark: str, steps: Any, checkout: Path) -> list[dict[str, Any]]:
        calls.append((benchmark, checkout))
        return []

    monkeypatch.setattr(bench_all, "run_turn", fake_turn)
    old, new = tmp_path / "old", tmp_path / "new"
    out = bench_all.run_compare({OLD: old, NEW: new}, 1000, True, 1, str(tmp_path),
                                unable={OLD: "not its own: bench.mqbench (none at all)"})
    assert calls == [(b, new) for b in bench_all.COMPARED]
    steps = out["runs"][OLD][0]["steps"]
    # every step of every turn, the machine's first only
    plan = bench_all.plan(1000, True)
    assert [s["name"] for s in steps] == [
        s.name for b in bench_all.COMPARED for s in bench_all.turn_steps(b, plan)]
    assert [s["name"] for s in steps].count("machine_start") == 1
    assert {s["error"] for s in steps} == {"not its own: bench.mqbench (none at all)"}
    rows = comparison_rows(out["runs"], 1, skip_spark=True)
    assert ratio_text(rows[0]) == ("n/a (baseline: not its own: bench.mqbench (none at all); "
                                   "this tree: not run)")


def test_foreign_modules_says_which_entry_points_a_checkout_lacks(tmp_path: Path) -> None:
    assert bench_all.foreign_modules(bench_all.HERE) is None
    partial = tmp_path / "partial"
    for name in ("bench/__init__.py", "bench/mqbench.py", "broker/__init__.py",
                 "broker/cli.py"):
        (partial / name).parent.mkdir(parents=True, exist_ok=True)
        (partial / name).write_text("")
    why = bench_all.foreign_modules(partial)
    assert why is not None and why.startswith("not its own: namesrv.cli (")
    assert "bench.mqbench" not in why and "broker.cli" not in why
