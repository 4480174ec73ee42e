"""Two trees measured in one run, taking turns: the order of the runs and the table (pure).

``python -m bench.all --baseline REV --repeat N`` (bench/all.py) runs every benchmark
``N`` times for the old tree and ``N`` times for this one, alternating (old, new, old,
new, ...) so that whatever else loads the machine meanwhile falls on both alike. Then,
per figure, each side's median and spread (min–max) over its repeats, the ratio
new/old of the two medians and the spread of the paired ratios (each repeat's new run
against the old run just before it). A figure one side has no value for is a row
"n/a (why)", never an error.

No I/O, no clock: values in, rows and text out.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

OLD, NEW = "old", "new"
SIDES = (OLD, NEW)
SIDE_NAMES = {OLD: "baseline", NEW: "this tree"}
HIGHER, LOWER = "higher", "lower"
REASON_CHARS = 160  # a reason longer than this is cut (a row stays one readable line)


@dataclass(frozen=True, slots=True)
class Turn:
    """One run of one benchmark on one side."""

    benchmark: str
    repeat: int  # 0-based
    side: str


def schedule(benchmarks: Sequence[str], repeat: int,
             sides: Sequence[str] = SIDES) -> list[Turn]:
    """Every benchmark in its order, each ``repeat`` times the sides in turn:
    (b1, 0, old), (b1, 0, new), (b1, 1, old), (b1, 1, new), ..., (b2, 0, old), ..."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, not {repeat}")
    if len(set(sides)) != len(sides) or not sides:
        raise ValueError(f"sides must be distinct and at least one: {list(sides)}")
    return [Turn(b, r, s) for b in benchmarks for r in range(repeat) for s in sides]


@dataclass(slots=True)
class Samples:
    """One figure's repeats on one side: the value each repeat gave, or why it gave none."""

    values: dict[int, float] = field(default_factory=dict)  # repeat -> value
    missing: dict[int, str] = field(default_factory=dict)  # repeat -> reason

    def add(self, repeat: int, value: float | None, reason: str = "") -> None:
        if value is None:
            self.missing[repeat] = reason or "no value"
        else:
            self.values[repeat] = float(value)

    def reason(self) -> str:
        """The commonest reason a repeat gave nothing (the first seen among equals)."""
        if not self.missing:
            return "not run"
        counts = Counter(self.missing[r] for r in sorted(self.missing))
        return counts.most_common(1)[0][0]


@dataclass(frozen=True, slots=True)
class Spread:
    """The median of some values and the smallest and largest of them."""

    median: float
    low: float
    high: float
    count: int


def spread(values: Sequence[float]) -> Spread | None:
    """``values``' median, min and max (None for no values)."""
    if not values:
        return None
    return Spread(statistics.median(values), min(values), max(values), len(values))


def paired_ratios(old: Mapping[int, float], new: Mapping[int, float]) -> list[float]:
    """new/old of each repeat both sides gave a value for (the old one not 0), by repeat."""
    return [new[r] / old[r] for r in sorted(old.keys() & new.keys()) if old[r] != 0]


@dataclass(frozen=True, slots=True)
class Row:
    figure: str
    better: str  # HIGHER or LOWER
    old: Spread | None
    new: Spread | None
    ratio: float | None  # of the medians
    pairs: Spread | None  # of the paired ratios
    note: str  # why there is no ratio, or which repeats gave nothing ("" when all did)


def _short(reason: str) -> str:
    reason = " ".join(reason.split())
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "…"


def compare_row(figure: str, better: str, old: Samples, new: Samples, repeat: int) -> Row:
    """One figure's row from both sides' repeats (``repeat`` of each were scheduled)."""
    if better not in (HIGHER, LOWER):
        raise ValueError(f"better must be {HIGHER!r} or {LOWER!r}, not {better!r}")
    o, n = spread(list(old.values.values())), spread(list(new.values.values()))
    notes = []
    ratio: float | None = None
    pairs: Spread | None = None
    if o is None or n is None:
        why = [f"{SIDE_NAMES[side]}: {samples.reason()}"
               for side, samples, got in ((OLD, old, o), (NEW, new, n)) if got is None]
        notes.append("; ".join(why))
    elif o.median == 0:
        notes.append("the baseline's median is 0")
    else:
        ratio = n.median / o.median
        pairs = spread(paired_ratios(old.values, new.values))
        for side, samples in ((OLD, old), (NEW, new)):
            if len(samples.values) < repeat:
                notes.append(f"{SIDE_NAMES[side]} {len(samples.values)} of {repeat} runs "
                             f"({samples.reason()})")
    return Row(figure, better, o, n, ratio, pairs, _short("; ".join(notes)))


def number_text(v: float) -> str:
    """A figure as few digits as its size needs: 123,456 / 123 / 12.3 / 1.23."""
    a = abs(v)
    if round(a, 1) >= 100:  # as it would show with one decimal
        return f"{v:,.0f}"
    if round(a, 2) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def spread_text(s: Spread | None, digits: int | None = None) -> str:
    if s is None:
        return "n/a"
    if digits is None:
        return f"{number_text(s.low)}–{number_text(s.high)}"
    return f"{s.low:.{digits}f}–{s.high:.{digits}f}"


def ratio_text(row: Row) -> str:
    """The last cell: "1.03 (0.97–1.08)", the paired ratios' spread in brackets, or
    "n/a (why)"; which repeats gave nothing is added after a semicolon."""
    if row.ratio is None:
        return f"n/a ({row.note})"
    text = f"{row.ratio:.2f}"
    if row.pairs is not None:
        text += f" ({spread_text(row.pairs, 2)})"
    return f"{text}; {row.note}" if row.note else text


HEAD = ("figure", "better", "old median", "old min–max", "new median", "new min–max",
        "new/old (min–max of pairs)")


def row_cells(row: Row) -> tuple[str, ...]:
    return (row.figure, row.better,
            "n/a" if row.old is None else number_text(row.old.median), spread_text(row.old),
            "n/a" if row.new is None else number_text(row.new.median), spread_text(row.new),
            ratio_text(row))


def render(rows: Sequence[Row]) -> str:
    """Rows as aligned text, one per figure; the last column is not padded."""
    cells = [HEAD, *(row_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEAD) - 1)]

    def line(c: Sequence[str]) -> str:
        padded = [c[0].ljust(widths[0]), c[1].ljust(widths[1]),
                  *(v.rjust(w) for v, w in zip(c[2:-1], widths[2:], strict=True))]
        return " | ".join((*padded, c[-1])).rstrip()

    rule = "-|-".join("-" * w for w in widths) + "-|-" + "-" * len(HEAD[-1])
    return "\n".join([line(HEAD), rule, *(line(c) for c in cells[1:])])


__all__ = ["HIGHER", "LOWER", "NEW", "OLD", "SIDES", "Row", "Samples", "Spread", "Turn",
           "compare_row", "number_text", "paired_ratios", "ratio_text", "render", "schedule",
           "spread"]
