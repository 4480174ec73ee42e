"""bench/chaos/accounting.py on made-up records: lost, duplicated, unacknowledged
deliveries, unavailability windows, the schedule parser, the record files."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos.accounting import (
    FaultRecord,
    Record,
    ScheduleError,
    Step,
    account,
    format_report,
    longest_gap,
    parse_schedule,
    read_faults,
    read_records,
    schedule_seconds,
)
from bench.chaos.runner import body, parse_body

KNOWN = ("kill-master", "kill-slave", "stop-master")


def ack(t: float, mid: str, begun: float | None = None, offset: int = 0) -> Record:
    return Record(t, mid, "broker-a:0", offset, t if begun is None else begun)


def got(t: float, mid: str, offset: int = 0) -> Record:
    return Record(t, mid, "broker-a:0", offset)


def healed(name: str, start: float, held: float) -> FaultRecord:
    return FaultRecord(name, start, True, start + held, True)


def test_nothing_lost_when_every_ack_is_delivered() -> None:
    acked = [ack(float(i), f"p0-{i}", offset=i) for i in range(10)]
    report = account(acked, [got(r.t + 0.1, r.id, r.offset) for r in acked], [], 10.0)
    assert (report.acknowledged, report.delivered, report.lost, report.duplicated,
            report.redeliveries, report.unacknowledged_delivered) == (10, 10, [], 0, 0, 0)


def test_one_acknowledged_message_missing_is_lost() -> None:
    acked = [ack(float(i), f"p0-{i}") for i in range(10)]
    delivered = [got(r.t + 0.1, r.id) for r in acked if r.id != "p0-7"]
    report = account(acked, delivered, [healed("kill-master", 5.0, 2.0)], 10.0)
    assert report.lost == ["p0-7"]
    assert report.all_faults_healed
    assert "lost (acknowledged, never delivered): 1" in format_report(report)
    assert "lost ids: p0-7" in format_report(report)


def test_duplicates_and_unacknowledged_deliveries_are_counted_not_lost() -> None:
    acked = [ack(1.0, "a"), ack(2.0, "b")]
    delivered = [got(1.1, "a"), got(2.1, "b"), got(3.0, "b"), got(3.1, "b"),
                 got(3.2, "x")]  # x: stored, its send failed at the client
    report = account(acked, delivered, [], 4.0)
    assert (report.lost, report.duplicated, report.redeliveries,
            report.unacknowledged_delivered, report.delivered) == ([], 1, 2, 1, 3)


def test_write_unavailability_counts_from_sends_begun_after_the_fault() -> None:
    # SEND_OKs every 0.1 s until 10, none from 10 to 13.5, then again; the fault at 10
    times = [i / 10 for i in range(100)] + [13.5 + i / 10 for i in range(30)]
    acked = [ack(t, f"m{i}") for i, t in enumerate(times)]
    # a send begun before the fault, answered after it: not a sign writes work
    acked.append(ack(10.2, "late", begun=9.9))
    report = account(acked, [], [healed("stop-master", 10.0, 3.0)], 16.5)
    (w,) = report.faults
    assert w.write_unavailable == pytest.approx(3.5)
    assert w.write_gap == pytest.approx(3.3)  # 10.2 .. 13.5
    assert w.held == pytest.approx(3.0)
    assert w.read_unavailable is None  # nothing delivered at all
    assert w.read_gap == pytest.approx(6.5)  # the whole window


def test_windows_end_at_the_next_fault_and_at_the_end_of_the_load() -> None:
    acked = [ack(1.0, "a"), ack(12.0, "b"), ack(25.0, "c")]
    delivered = [got(1.5, "a"), got(14.0, "b"), got(26.0, "c")]
    faults = [healed("kill-slave", 10.0, 2.0), healed("kill-master", 20.0, 3.0)]
    report = account(acked, delivered, faults, 30.0)
    first, second = report.faults
    assert (first.write_unavailable, first.read_unavailable) == (2.0, 4.0)
    assert first.write_gap == pytest.approx(8.0)  # 12 .. 20 (the window's end)
    assert (second.write_unavailable, second.read_unavailable) == (5.0, 6.0)
    assert second.read_gap == pytest.approx(6.0)  # 20 .. 26


def test_a_read_of_an_older_message_does_not_end_read_unavailability() -> None:
    acked = [ack(9.0, "old"), ack(10.5, "new")]
    delivered = [got(10.2, "old"), got(13.0, "new")]
    (w,) = account(acked, delivered, [healed("kill-master", 10.0, 1.0)], 15.0).faults
    assert w.read_unavailable == pytest.approx(3.0)


def test_reads_count_messages_sent_after_the_fault_even_unacknowledged() -> None:
    # writes never acknowledged after the fault (SLAVE_NOT_AVAILABLE), yet stored and read
    acked = [ack(9.0, "old")]
    delivered = [Record(10.1, "before", "broker-a:0", 0, 9.95),  # sent before the fault
                 Record(11.5, "stored", "broker-a:0", 1, 11.0)]
    (w,) = account(acked, delivered, [healed("stop-master", 10.0, 1.0)], 15.0).faults
    assert w.write_unavailable is None
    assert w.read_unavailable == pytest.approx(1.5)


def test_a_fault_not_healed_shows() -> None:
    faults = [FaultRecord("kill-master", 1.0, True, 2.0, False, "RuntimeError: no start")]
    report = account([], [], faults, 3.0)
    assert not report.all_faults_healed
    assert report.faults[0].write_unavailable is None
    text = format_report(report)
    assert "| kill-master | 1.0 | yes | NO |" in text
    assert "writes did not come back within the window of: kill-master" in text


def test_longest_gap_counts_the_window_edges() -> None:
    assert longest_gap([], 0.0, 5.0) == 5.0
    assert longest_gap([1.0, 2.0, 4.5], 0.0, 5.0) == 2.5
    assert longest_gap([-1.0, 0.5, 6.0], 0.0, 5.0) == 4.5


def test_schedule_parses_names_and_durations() -> None:
    steps = parse_schedule("kill-slave:3, stop-master,kill-master:4.5", KNOWN, 10.0)
    assert steps == [Step("kill-slave", 3.0), Step("stop-master", 10.0),
                     Step("kill-master", 4.5)]
    assert schedule_seconds(steps, 2.0) == pytest.approx(17.5 + 8.0)


@pytest.mark.parametrize("text, problem", [
    ("", "empty"),
    ("kill-all", "unknown fault"),
    ("kill-slave:x", "bad duration"),
    ("kill-slave:0", "within"),
    ("kill-slave:-1", "within"),
    ("kill-slave:99999", "within"),
    ("kill-slave:nan", "within"),
    (",".join(["kill-slave"] * 101), "more than"),
])
def test_schedule_refuses(text: str, problem: str) -> None:
    with pytest.raises(ScheduleError, match=problem):
        parse_schedule(text, KNOWN, 10.0)


def test_record_files_round_trip(tmp_path: Path) -> None:
    acked = [ack(1.0, "p0-0", begun=0.9, offset=3), ack(2.0, "p1-0")]
    path = tmp_path / "acked.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in acked) + "\n")
    assert read_records(path) == acked
    faults = [healed("kill-slave", 1.0, 2.0), FaultRecord("stop-master", 4.0)]
    fpath = tmp_path / "faults.jsonl"
    fpath.write_text("".join(f.to_json() + "\n" for f in faults))
    assert read_faults(fpath) == faults
    path.write_text('{"t": 1, "id": "a", "queue": "q", "offset": 0}\n{"t": 2, "id"')
    with pytest.raises(ValueError, match="acked.jsonl:2"):
        read_records(path)


def test_message_body_carries_id_and_send_start() -> None:
    assert parse_body(body("p3-17", 12.5).encode()) == ("p3-17", 12.5)
    assert parse_body(b"not ours") == ("not ours", None)
    assert parse_body(b"x|y") == ("x|y", None)
