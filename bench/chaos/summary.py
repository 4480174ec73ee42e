"""Many chaos runs in one table: ``python -m bench.chaos.summary RUN.json ...``.

Each file holds the report of one ``python -m bench.chaos --json`` run. Prints the
runs' totals (acknowledged, in all and per producing client; lost, duplicated; a
lost id is listed) and, per fault
kind, how many were injected and healed, write unavailability (from the fault's
start to the first SEND_OK of a send begun after it) and the longest stretch
without a SEND_OK in its window, as p50 / max over every fault of that kind.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from bench.chaos.accounting import OURS, by_sdk_text


@dataclass
class KindFigures:
    count: int = 0
    healed: int = 0
    write_unavailable: list[float] = field(default_factory=list)
    never_back: int = 0  # no SEND_OK of a send begun in the window
    write_gap: list[float] = field(default_factory=list)


@dataclass
class Summary:
    runs: int = 0
    acknowledged: int = 0
    acknowledged_by_sdk: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    duplicated: int = 0
    redeliveries: int = 0
    kinds: dict[str, KindFigures] = field(default_factory=dict)


def summarize(reports: Iterable[Mapping[str, Any]]) -> Summary:
    """Sum reports (``dataclasses.asdict`` of accounting.Report)."""
    s = Summary()
    for r in reports:
        s.runs += 1
        s.acknowledged += int(r["acknowledged"])
        # a report from before the per-client count: all ours
        by_sdk = r.get("acknowledged_by_sdk") or {OURS: int(r["acknowledged"])}
        for sdk, n in by_sdk.items():
            s.acknowledged_by_sdk[str(sdk)] = s.acknowledged_by_sdk.get(str(sdk), 0) + int(n)
        s.lost.extend(str(m) for m in r["lost"])
        s.duplicated += int(r["duplicated"])
        s.redeliveries += int(r["redeliveries"])
        for f in r["faults"]:
            k = s.kinds.setdefault(str(f["name"]), KindFigures())
            k.count += 1
            k.healed += bool(f["injected"]) and bool(f["healed"])
            if f["write_unavailable"] is None:
                k.never_back += 1
            else:
                k.write_unavailable.append(float(f["write_unavailable"]))
            k.write_gap.append(float(f["write_gap"]))
    return s


def _p50_max(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} / {max(xs):.1f}" if xs else "-"


def format_summary(s: Summary) -> str:
    faults = sum(k.count for k in s.kinds.values())
    lines = [
        f"runs: {s.runs}, faults: {faults}, healed: {sum(k.healed for k in s.kinds.values())}",
        f"acknowledged: {s.acknowledged}{by_sdk_text(s.acknowledged_by_sdk)}",
        f"lost (acknowledged, never delivered): {len(s.lost)}"
        + (f" {sorted(s.lost)[:20]}" if s.lost else ""),
        f"duplicated: {s.duplicated} ({s.redeliveries} extra deliveries)",
        "",
        "| fault | count | healed | write unavail. s p50 / max | writes never back "
        "| longest no-SEND_OK s p50 / max |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(s.kinds):
        k = s.kinds[name]
        lines.append(f"| {name} | {k.count} | {k.healed} | {_p50_max(k.write_unavailable)} "
                     f"| {k.never_back} | {_p50_max(k.write_gap)} |")
    return "\n".join(lines)


@click.command()
@click.argument("files", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
def main(files: tuple[Path, ...]) -> None:
    """Sum the JSON reports in FILES (one per run); exit 1 if anything was lost."""
    reports = []
    for f in files:
        try:
            reports.append(json.loads(f.read_text()))
        except ValueError as e:
            raise click.BadParameter(f"{f}: not a JSON report ({e})") from None
    s = summarize(reports)
    click.echo(format_summary(s))
    sys.exit(1 if s.lost else 0)


if __name__ == "__main__":
    main()
