"""The chaos checker's pure part: the fault schedule, the three record files
(acknowledged sends, deliveries, faults) and what they add up to.

No sockets, no trio: records in, a ``Report`` out. Times are seconds on one
monotonic clock (the checker's, from the start of the run).

Record files hold one JSON object a line:

- acknowledged: ``{"t": 1.25, "id": "p0-17", "queue": "broker-a:2", "offset": 40,
  "begun": 1.2, "sdk": "ours"}``, one per SEND_OK (``t``: when the answer arrived,
  ``begun``: when the send began, ``sdk``: which client's producer sent it, OURS or
  OFFICIAL; a record without it counts as ours). The official client's send
  result names no queue: its records have ``"queue": ""``;
- delivered: the same fields, one per message handed to a consumer's listener
  (``t``: when the listener saw it; ``begun``: when its send began, carried in
  the body, so known for a message whose send failed at the client too);
- faults: ``{"name": "kill-master", "start": 10.0, "injected": true,
  "healed_at": 15.2, "healed": true, "error": null}``, one per fault.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX_SCHEDULE_ITEMS = 100
MAX_FAULT_SECONDS = 3600.0

# which client produced an acknowledged message
OURS = "ours"  # this project's SDK (client/)
OFFICIAL = "official"  # the official RocketMQ 4.x client (the C++ one, PyPI rocketmq)


def body(mid: str, begun: float) -> str:
    """A message's body: its id and when its send began (the checker's clock)."""
    return f"{mid}|{begun:.6f}"


def parse_body(data: bytes) -> tuple[str, float | None]:
    """``body``'s id and start; a body that is not one: its text, None."""
    text = data.decode(errors="replace")
    mid, sep, begun = text.partition("|")
    try:
        return mid, float(begun) if sep else None
    except ValueError:
        return text, None


class ScheduleError(ValueError):
    """A schedule string that does not parse, or names an unknown fault."""


@dataclass(frozen=True, slots=True)
class Step:
    """One fault of a schedule, held for ``seconds`` before it is healed."""

    fault: str
    seconds: float


def parse_schedule(text: str, known: Iterable[str], default_seconds: float) -> list[Step]:
    """``"kill-slave:5,stop-master,kill-master:4.5"`` -> steps, in order.

    A step without ``:seconds`` is held ``default_seconds``. Raises
    ScheduleError for an unknown fault, a bad or out-of-range duration, an
    empty schedule or more than MAX_SCHEDULE_ITEMS steps.
    """
    names = set(known)
    steps: list[Step] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, secs = item.partition(":")
        name = name.strip()
        if name not in names:
            raise ScheduleError(f"unknown fault {name!r} (known: {', '.join(sorted(names))})")
        try:
            seconds = float(secs) if sep else default_seconds
        except ValueError:
            raise ScheduleError(f"bad duration {secs!r} for {name}") from None
        if not 0 < seconds <= MAX_FAULT_SECONDS:
            raise ScheduleError(f"{name}: the duration must be within 0..{MAX_FAULT_SECONDS:g} s, "
                                f"not {seconds:g}")
        steps.append(Step(name, seconds))
        if len(steps) > MAX_SCHEDULE_ITEMS:
            raise ScheduleError(f"more than {MAX_SCHEDULE_ITEMS} steps")
    if not steps:
        raise ScheduleError("the schedule is empty")
    return steps


def schedule_seconds(steps: Sequence[Step], calm: float) -> float:
    """How long a schedule runs: ``calm`` before each fault and after the last."""
    return sum(s.seconds for s in steps) + calm * (len(steps) + 1)


@dataclass(frozen=True, slots=True)
class Record:
    """One acknowledged send or one delivery."""

    t: float
    id: str
    queue: str
    offset: int
    begun: float | None = None  # when the message's send began (None: not known)
    sdk: str | None = None  # an acknowledged send: OURS or OFFICIAL (None: a delivery)

    def to_json(self) -> str:
        d = asdict(self)
        if self.sdk is None:
            del d["sdk"]
        return json.dumps(d, separators=(",", ":"))


@dataclass(slots=True)
class FaultRecord:
    """One fault of a run: when it started, whether inject() and heal() completed."""

    name: str
    start: float
    injected: bool = False
    healed_at: float | None = None
    healed: bool = False
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


def _lines(path: Path) -> Iterable[dict[str, Any]]:
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                # the last line of a file whose writer was killed may be cut short
                raise ValueError(f"{path}:{n}: not a JSON record") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{n}: not a JSON object")
            yield obj


def read_records(path: Path) -> list[Record]:
    out = []
    for obj in _lines(path):
        begun, sdk = obj.get("begun"), obj.get("sdk")
        out.append(Record(float(obj["t"]), str(obj["id"]), str(obj["queue"]), int(obj["offset"]),
                          None if begun is None else float(begun),
                          None if sdk is None else str(sdk)))
    return out


def read_faults(path: Path) -> list[FaultRecord]:
    return [FaultRecord(str(o["name"]), float(o["start"]), bool(o["injected"]),
                        None if o.get("healed_at") is None else float(o["healed_at"]),
                        bool(o["healed"]), o.get("error")) for o in _lines(path)]


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """What one fault did to availability, over its window: from its start
    to the next fault's start (the last one's: to the end of the load)."""

    name: str
    start: float
    held: float | None  # seconds from start to healed (None: never healed)
    injected: bool
    healed: bool
    # seconds from the fault's start to the first SEND_OK of a send begun after it
    # (None: none in the window); an answer to a send begun before says little
    write_unavailable: float | None
    # the longest stretch in the window without a SEND_OK (the window's edges count)
    write_gap: float
    # seconds from the start to the first delivery of a message whose send began after
    # the start (None: none in the window)
    read_unavailable: float | None
    # the longest stretch in the window without a delivery
    read_gap: float


@dataclass(frozen=True, slots=True)
class Report:
    acknowledged: int  # distinct ids with a SEND_OK
    delivered: int  # distinct ids delivered at least once
    lost: list[str]  # acknowledged, never delivered
    duplicated: int  # ids delivered more than once
    redeliveries: int  # deliveries past each id's first
    unacknowledged_delivered: int  # delivered, never acknowledged (fine: counted)
    faults: list[FaultWindow] = field(default_factory=list)
    # distinct acknowledged ids per producing client (OURS, OFFICIAL)
    acknowledged_by_sdk: dict[str, int] = field(default_factory=dict)

    @property
    def all_faults_healed(self) -> bool:
        return all(f.injected and f.healed for f in self.faults)


def _first_after(times: Sequence[float], start: float, end: float) -> float | None:
    for t in times:
        if start <= t < end:
            return t - start
    return None


def _first_begun_after(begun: Sequence[tuple[float, float]], start: float,
                       end: float) -> float | None:
    """Seconds from ``start`` to the earliest answer of a send begun in [start, end)
    and answered before ``end``."""
    answers = [t for b, t in begun if start <= b < end and t < end]
    return min(answers) - start if answers else None


def longest_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest stretch of [start, end) without an event of sorted ``times``."""
    last = start
    gap = 0.0
    for t in times:
        if t < start:
            continue
        if t >= end:
            break
        gap = max(gap, t - last)
        last = t
    return max(gap, end - last)


def account(acked: Sequence[Record], delivered: Sequence[Record],
            faults: Sequence[FaultRecord], load_end: float) -> Report:
    """The run's report. ``load_end``: when the producers stopped (the last
    fault's window ends there)."""
    acked_ids = {r.id for r in acked}
    counts = Counter(r.id for r in delivered)
    lost = sorted(acked_ids - counts.keys())
    dup = [n for n in counts.values() if n > 1]
    ack_times = sorted(r.t for r in acked)
    acked_at = {r.id: r.t for r in acked}
    # (begun, answered) of each SEND_OK; a record without begun: as if begun when answered
    begun = sorted((r.t if r.begun is None else r.begun, r.t) for r in acked)
    windows = []
    ordered = sorted(faults, key=lambda f: f.start)
    for i, f in enumerate(ordered):
        end = ordered[i + 1].start if i + 1 < len(ordered) else load_end
        end = max(end, f.start)
        # a delivery shows reads work only for a message sent after the start (an
        # older one may have been pulled before the fault); without its send's
        # start, the time its SEND_OK arrived stands in
        fresh = sorted(r.t for r in delivered
                       if (r.begun if r.begun is not None else acked_at.get(r.id, -1.0))
                       >= f.start)
        all_reads = sorted(r.t for r in delivered)
        windows.append(FaultWindow(
            f.name, f.start, None if f.healed_at is None else f.healed_at - f.start,
            f.injected, f.healed,
            _first_begun_after(begun, f.start, end), longest_gap(ack_times, f.start, end),
            _first_after(fresh, f.start, end), longest_gap(all_reads, f.start, end)))
    sdk_of = {r.id: r.sdk or OURS for r in acked}
    by_sdk = dict(sorted(Counter(sdk_of.values()).items()))
    return Report(len(acked_ids), len(counts), lost, len(dup), sum(n - 1 for n in dup),
                  len(counts.keys() - acked_ids), windows, by_sdk)


def by_sdk_text(by_sdk: dict[str, int]) -> str:
    """``" (ours 120, official 40)"``; empty for no acknowledged message."""
    if not by_sdk:
        return ""
    return " (" + ", ".join(f"{k} {v}" for k, v in sorted(by_sdk.items(),
                                                          key=lambda kv: kv[0] != OURS)) + ")"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def format_report(report: Report) -> str:
    """The summary lines and the per-fault table (markdown, as docs/chaos.md shows it)."""
    lines = [
        f"acknowledged: {report.acknowledged}{by_sdk_text(report.acknowledged_by_sdk)}",
        f"delivered: {report.delivered}",
        f"lost (acknowledged, never delivered): {len(report.lost)}",
        f"duplicated (delivered more than once): {report.duplicated} "
        f"({report.redeliveries} extra deliveries)",
        f"delivered, never acknowledged: {report.unacknowledged_delivered}",
        "",
        "| fault | held s | injected | healed | write unavail. s | longest no-SEND_OK s "
        "| read unavail. s | longest no-delivery s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in report.faults:
        lines.append(f"| {f.name} | {_s(f.held)} | {'yes' if f.injected else 'NO'} | "
                     f"{'yes' if f.healed else 'NO'} | {_s(f.write_unavailable)} | "
                     f"{f.write_gap:.1f} | {_s(f.read_unavailable)} | {f.read_gap:.1f} |")
    for what, attr in (("writes", "write_unavailable"), ("reads", "read_unavailable")):
        stuck = [f.name for f in report.faults if getattr(f, attr) is None]
        if stuck:
            lines += ["", f"{what} did not come back within the window of: {', '.join(stuck)}"]
    if report.lost:
        shown = ", ".join(report.lost[:20])
        lines += ["", f"lost ids: {shown}" + (" ..." if len(report.lost) > 20 else "")]
    return "\n".join(lines)


def report_json(report: Report) -> str:
    return json.dumps(asdict(report))
