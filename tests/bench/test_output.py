"""mqbench's final table and progress line: pure formatting, and no progress off a terminal."""

from __future__ import annotations

import io
import json

import pytest
import trio
import trio.testing

from bench.mqbench import (
    ProgressMeter,
    emit,
    latency_result,
    progress_enabled,
    progress_line,
    result_table,
    throughput_result,
    with_progress,
)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def produce_result() -> dict:
    return throughput_result("produce", 2000, 2_000_000, 2.0, [0.001] * 99 + [0.050])


def test_table_columns_align_and_hold_every_figure() -> None:
    consume = throughput_result("consume", 123_456, 0, 1.5, [0.0002, 0.0004], per="pull")
    text = result_table([produce_result(), consume])
    lines = text.splitlines()
    assert lines[0].split() == ["mode", "messages", "seconds", "msg/s", "MB/s", "p50", "ms",
                                "p90", "ms", "p99", "ms", "p99.9", "ms", "max", "ms"]
    assert lines[1].split() == ["produce", "2,000", "2.00", "1,000", "1.0",
                                "1.000", "1.000", "50.000", "50.000", "50.000"]
    assert lines[2].split()[:5] == ["consume", "123,456", "1.50", "82,304", "0.0"]
    assert lines[2].split()[-1] == "0.400"
    # right-aligned: every number column ends where its header does
    assert len(lines[0]) == len(lines[1]) == len(lines[2])
    assert lines[-1] == "latency per pull, request"


def test_table_shows_dash_for_missing_figures() -> None:
    lat = latency_result([0.002] * 9 + [0.003], 12, 2000, 1.0)
    row = result_table([lat]).splitlines()[1].split()
    assert row == ["latency", "10", "1.00", "-", "-", "2.000", "3.000", "3.000", "3.000", "3.000"]


def test_max_is_in_the_json_dict_beside_the_percentiles() -> None:
    d = produce_result()
    assert d["latency_max_us"] == pytest.approx(50_000.0)
    assert list(d["latency_us"]) == ["p50", "p90", "p99", "p99.9"]
    assert throughput_result("consume", 0, 0, 0.0, [])["latency_max_us"] == 0.0


def test_emit_json_is_one_object_and_text_ends_with_the_summary(
        capsys: pytest.CaptureFixture[str]) -> None:
    d = produce_result()
    emit(d, "SUMMARY", True, table=True)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and json.loads(out) == d
    emit(d, "SUMMARY", False, table=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("mode") and lines[-1] == "SUMMARY"


def test_progress_line() -> None:
    assert progress_line("produce", 12_000, 12_000_000, 1.25, 200_000, rate_now=9850.4) == (
        "produce  12,000/200,000 msgs (6%)  9,850 msg/s  9.6 MB/s  1.2s")
    assert progress_line("consume", 10, 0, 2.0) == "consume  10 msgs  5 msg/s  0.0 MB/s  2.0s"


def test_progress_meter_rate_of_the_last_interval_and_padding() -> None:
    m = ProgressMeter("produce", start=10.0, total=100)
    first = m.update(11.0, 50, 500)
    assert first.startswith("\r") and "50/100 msgs (50%)  50 msg/s" in first
    second = m.update(11.5, 60, 600)
    assert "20 msg/s" in second  # 10 messages in the last half second
    # a shorter line is padded to cover the longer one before it
    short = ProgressMeter("p", start=0.0)
    long_text = short.update(1.0, 1_000_000, 0)
    shorter = short.update(2.0, 1_000_001, 0)
    assert len(shorter) >= len(long_text)
    cleared = short.clear()
    assert cleared[0] == cleared[-1] == "\r" and set(cleared[1:-1]) == {" "}
    assert short.clear() == ""


def test_progress_only_on_a_terminal_without_json() -> None:
    assert progress_enabled(False, Tty())
    assert not progress_enabled(True, Tty())
    assert not progress_enabled(False, io.StringIO())


async def test_progress_rewrites_in_place_and_goes_away(
        autojump_clock: trio.testing.MockClock) -> None:
    out = Tty()
    done = [0]

    async def body() -> str:
        for _ in range(10):
            await trio.sleep(0.1)
            done[0] += 10
        return "result"

    assert await with_progress(body, "produce", lambda: (done[0], done[0] * 100), 100,
                               True, out) == "result"
    text = out.getvalue()
    assert "\n" not in text
    frames = text.split("\r")
    assert 3 <= len([f for f in frames if "msgs" in f]) <= 5  # 1 s at four a second
    assert "produce  " in text and "/100 msgs" in text
    assert frames[-1] == "" and frames[-2].strip() == ""  # erased at the end


async def test_no_progress_when_disabled(autojump_clock: trio.testing.MockClock) -> None:
    out = io.StringIO()

    async def body() -> int:
        await trio.sleep(2)
        return 7

    assert await with_progress(body, "produce", lambda: (1, 1), None, False, out) == 7
    assert out.getvalue() == ""
