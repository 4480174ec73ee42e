"""bench.trace_send: reading perf's syscall lines and splitting round trips
into their parts (pure; the tool itself needs perf and is run by hand)."""

from __future__ import annotations

import pytest

from bench.trace_send import PARTS, ROUND_TRIP, Event, parse, render, segments, summary

C, B = 100, 200  # the client's and the broker's pids
REQ, ANS = 1267, 75  # request and answer frame lengths


def line(comm: str, pid: int, t: float, call: str, rest: str) -> str:
    return f"{comm:>16} {pid:>6} [001] {t:12.6f}: {call:>32}: {rest}"


def test_parse_reads_each_kind_and_skips_the_rest() -> None:
    lines = [
        line("python", C, 9631.756478, "syscalls:sys_enter_sendto",
             "fd: 0x00000009, buff: 0x2c9a8040, len: 0x000004f2, flags: 0x00000000, "
             "addr: 0x00000000, addr_len: 0x00000000"),
        line("python", B, 9631.756514, "syscalls:sys_exit_epoll_wait", "0x1"),
        line("python", B, 9631.756545, "syscalls:sys_exit_recvfrom", "0x4f2"),
        line("python", B, 9631.756750, "syscalls:sys_exit_recvfrom", "0xfffffffffffffff5"),
        line("python", B, 9631.756688, "syscalls:sys_enter_io_submit",
             "ctx_id: 0x7ff0fdbd8000, nr: 0x00000001, iocbpp: 0x7ff0fbc15f00"),
        line("kworker/0:1-eve", 54, 9631.756833, "block:block_rq_issue", "254,0 WS 4096 ()"),
        line("python", B, 9631.756700, "syscalls:sys_exit_io_submit", "0x1"),
        "# a comment perf script does not print, and a blank line:",
        "",
    ]
    events = parse(lines)
    assert [(e.pid, e.kind, e.value, e.fd) for e in events] == [
        (C, "send", 0x4F2, 9), (B, "wake", 1, -1), (B, "recv", 0x4F2, -1),
        (B, "recv", -11, -1), (B, "submit", 0, -1)]
    assert [e.t_us for e in events] == pytest.approx(
        [9631756478.0, 9631756514.0, 9631756545.0, 9631756750.0, 9631756688.0])


def cycle(t: float, sync: bool = False, noise: bool = False) -> list[Event]:
    """One round trip from ``t``: request wake 30, broker 100 (with a 60 µs
    fsync when ``sync``), answer wake 20, client 50 -> the next request at +200."""
    ev = [Event(C, t, "send", REQ, 9),
          Event(C, t + 2, "wake", 0),  # the client's loop polls without a timeout
          Event(B, t + 30, "wake", 1),
          Event(B, t + 32, "recv", REQ),
          Event(B, t + 35, "recv", -11)]  # the reader's next try: nothing yet
    if sync:
        ev += [Event(B, t + 50, "submit"), Event(B, t + 110, "wake", 1)]
    if noise:  # the broker's own traffic and a client heart beat on the same connection
        ev += [Event(B, t + 60, "send", 300, 14), Event(C, t + 70, "send", 400, 9)]
    ev += [Event(B, t + 130, "send", ANS, 15),
           Event(B, t + 131, "wake", 1),  # the broker's later wake-ups are not the client's
           Event(C, t + 150, "wake", 1),
           Event(C, t + 152, "recv", ANS)]
    return ev


def test_segments_split_each_round_trip_into_parts_that_sum_to_it() -> None:
    events = [e for i in range(5) for e in cycle(1000.0 + 200 * i)]
    events.append(Event(C, 2000.0, "send", REQ, 9))  # the sixth request closes the fifth trip
    parts = segments(events, C, B)
    assert parts["request wake"] == [30] * 5
    assert parts["broker"] == [100] * 5
    assert parts["answer wake"] == [20] * 5
    assert parts["client"] == [50] * 5
    assert parts["round trip"] == [200] * 5
    assert parts["fsync"] == []
    assert sum(parts[p][0] for p in ROUND_TRIP) == parts["round trip"][0]


def test_a_sync_flush_round_trip_shows_its_fsync_within_the_broker_part() -> None:
    events = [e for i in range(3) for e in cycle(1000.0 + 200 * i, sync=True)]
    events.append(Event(C, 1600.0, "send", REQ + 2, 9))  # a frame a little longer: a request
    parts = segments(events, C, B)
    assert parts["fsync"] == [60] * 3 and parts["broker"] == [100] * 3
    assert parts["round trip"] == [200] * 3


def test_other_traffic_and_other_processes_are_passed_over() -> None:
    events = [e for i in range(4) for e in cycle(1000.0 + 200 * i, noise=i in (1, 2))]
    events += [Event(999, 1100.0, "send", REQ, 9), Event(999, 1101.0, "wake", 1)]
    events.sort(key=lambda e: e.t_us)
    events.append(Event(C, 1800.0, "send", REQ, 9))
    parts = segments(events, C, B)
    assert parts["broker"] == [100] * 4 and parts["client"] == [50] * 4
    assert parts["round trip"] == [200] * 4


def test_a_round_trip_missing_an_edge_gives_no_parts_it_cannot_time() -> None:
    events = cycle(1000.0)
    events = [e for e in events if not (e.pid == C and e.kind == "recv")]  # answer never read
    events.append(Event(C, 1200.0, "send", REQ, 9))
    parts = segments(events, C, B)
    assert parts["broker"] == [100] and parts["answer wake"] == [20]
    assert parts["client"] == [] and parts["round trip"] == []
    assert segments([], C, B) == {p: [] for p in PARTS}


def test_summary_and_render() -> None:
    rows = summary({"broker": [float(v) for v in range(1, 101)], "client": []})
    assert rows == [("broker", 100, 51.0, 91.0, 50.5)]
    text = render(rows)
    assert text.splitlines()[0].split() == ["part", "count", "p50", "µs", "p90", "µs",
                                            "mean", "µs"]
    assert text.splitlines()[1].split() == ["broker", "100", "51", "91", "50"]
