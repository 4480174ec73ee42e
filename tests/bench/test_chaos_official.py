"""bench/chaos/official.py: the official producers' send records parsed and read as
their file grows (pure), acknowledged counted per SDK; then one child process of
the C++ client, with nothing to send to, recording every send and ending at the
end of the load or when its run is cancelled (skipped where the wheel does not load)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click
import pytest
import trio
from click.testing import CliRunner

import bench.chaos.__main__ as chaos_cli
from bench.chaos.accounting import OFFICIAL, OURS, Record, account, format_report, read_records
from bench.chaos.official import (
    LineTail,
    OfficialClientError,
    OfficialProducer,
    OfficialSend,
    parse_send,
)
from bench.chaos.summary import format_summary, summarize
from tests.integration.official_client import load_error
from tests.waits import wait_until

OK_LINE = '{"id": "o0-3", "begun": 1.5, "status": "SEND_OK", "msg_id": "AC1", "offset": 7, ' \
          '"t": 1.6}'


def test_send_ok_is_acknowledged_and_recorded_as_the_official_sdk() -> None:
    s = parse_send(OK_LINE)
    assert s == OfficialSend("o0-3", 1.5, 1.6, "SEND_OK", None, "AC1", 7)
    assert s.acknowledged and s.outcome() == "SEND_OK"
    assert s.record() == Record(1.6, "o0-3", "", 7, 1.5, OFFICIAL)


def test_other_statuses_and_errors_are_not_acknowledged() -> None:
    slave = parse_send('{"id": "o0-4", "begun": 2, "t": 2.5, "status": "FLUSH_SLAVE_TIMEOUT", '
                       '"msg_id": "AC2", "offset": 8}')
    assert not slave.acknowledged and slave.outcome() == "FLUSH_SLAVE_TIMEOUT"
    err = parse_send(json.dumps({"id": "o0-5", "begun": 3, "t": 3.1, "error":
                                 "ProducerSendSyncFailed: No route info of this topic: "
                                 "T,error:-1,in file x.cpp line:379"}))
    assert not err.acknowledged and err.status is None
    assert err.outcome() == "error: ProducerSendSyncFailed: No route info of this topic:"


@pytest.mark.parametrize("line, problem", [
    ("{not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"begun": 1, "t": 1, "status": "SEND_OK"}', "no id"),
    ('{"id": "o0-1", "begun": "soon", "t": 1, "error": "x"}', "'begun' is not a number"),
    ('{"id": "o0-1", "begun": 1, "t": true, "error": "x"}', "'t' is not a number"),
    ('{"id": "o0-1", "begun": 1, "t": 1}', "one of them"),
    ('{"id": "o0-1", "begun": 1, "t": 1, "status": "SEND_OK", "error": "x"}', "one of them"),
    ('{"id": "o0-1", "begun": 1, "t": 1, "status": "SEND_OK", "msg_id": "A"}', "without"),
    ('{"id": "o0-1", "begun": 1, "t": 1, "status": "SEND_OK", "msg_id": "A", "offset": -1}',
     "without"),
    ('{"id": "o0-1", "begun": 1, "t": 1, "status": 0}', "not text"),
])
def test_bad_records_refused(line: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_send(line)


def test_line_tail_hands_over_complete_lines_once(tmp_path: Path) -> None:
    path = tmp_path / "sends.jsonl"
    tail = LineTail(path)
    assert tail.read() == []  # not there yet
    path.write_bytes(b'{"a": 1}\n{"b"')
    assert tail.read() == ['{"a": 1}'] and tail.partial == b'{"b"'
    assert tail.read() == []
    with path.open("ab") as f:
        f.write(b': 2}\n\n{"c": 3}\n')
    assert tail.read() == ['{"b": 2}', '{"c": 3}'] and tail.partial == b""
    with path.open("ab") as f:
        f.write(b"x" * (64 * 1024 + 1))
    with pytest.raises(ValueError, match="longer than"):
        tail.read()


def test_acknowledged_counted_per_sdk(tmp_path: Path) -> None:
    acked = [Record(1.0, "p0-0", "broker-a:0", 0, 0.9, OURS),
             Record(1.1, "p0-1", "broker-a:1", 0),  # before the sdk field: ours
             parse_send(OK_LINE).record()]
    path = tmp_path / "acked.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in acked))
    assert read_records(path) == acked
    assert "sdk" not in json.loads(acked[1].to_json())
    delivered = [Record(2.0, "p0-0", "broker-a:0", 0), Record(2.0, "p0-1", "broker-a:1", 0)]
    report = account(read_records(path), delivered, [], 3.0)
    assert report.acknowledged == 3 and report.acknowledged_by_sdk == {OFFICIAL: 1, OURS: 2}
    assert report.lost == ["o0-3"]
    assert "acknowledged: 3 (ours 2, official 1)" in format_report(report)


def test_summary_sums_acknowledged_per_sdk() -> None:
    def rep(acked: int, by_sdk: dict[str, int] | None) -> dict[str, object]:
        r: dict[str, object] = {"acknowledged": acked, "lost": [], "duplicated": 0,
                                "redeliveries": 0, "faults": []}
        if by_sdk is not None:
            r["acknowledged_by_sdk"] = by_sdk
        return r
    s = summarize([rep(30, {OURS: 20, OFFICIAL: 10}), rep(5, None), rep(7, {OURS: 7})])
    assert s.acknowledged == 42 and s.acknowledged_by_sdk == {OURS: 32, OFFICIAL: 10}
    assert "acknowledged: 42 (ours 32, official 10)" in format_summary(s)


def test_the_option_fails_clearly_where_the_wheel_does_not_load(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chaos_cli, "load_error", lambda: "OSError: librocketmq.so: no such file")
    result = CliRunner().invoke(chaos_cli.main, ["--official-producers", "1"])
    assert result.exit_code == 2, result.output
    assert "--official-producers" in result.output
    assert "does not load" in result.output and "librocketmq.so" in result.output
    result = CliRunner().invoke(chaos_cli.main, ["--official-producers", "17"])
    assert result.exit_code == 2 and "17" in result.output


# ---- one child process of the C++ client ---------------------------------------------

WHY = load_error()
needs_wheel = pytest.mark.skipif(WHY is not None, reason=f"the official client: {WHY}")


def producer(tmp_path: Path, got: list[OfficialSend]) -> OfficialProducer:
    # nothing listens on port 1: every send fails at once ("No route info")
    return OfficialProducer(0, "127.0.0.1:1", "ChaosTopic", tmp_path, interval=0.05,
                            t0=time.monotonic(), max_messages=10_000, send_timeout=0.5,
                            timeout=120, on_send=got.append)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@needs_wheel
async def test_child_records_every_send_and_stops_at_the_end_of_the_load(
        tmp_path: Path) -> None:
    got: list[OfficialSend] = []
    p = producer(tmp_path, got)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        with trio.fail_after(60):
            await nursery.start(p.run, stop)
        await wait_until(lambda: len(got) >= 5, 30, "five sends recorded")
        stop.set()
    assert p.returncode == 0 and p.failure is None, p.diagnostics()
    assert p.pid is not None and gone(p.pid)
    # every line of the child's file handed over once, in order, none acknowledged
    lines = p.sends_path.read_text().splitlines()
    assert [s.id for s in got] == [json.loads(ln)["id"] for ln in lines]
    assert [s.id for s in got] == [f"o0-{i}" for i in range(len(got))]
    assert got and not any(s.acknowledged for s in got)
    assert all(s.begun <= s.t and "No route info" in (s.error or "") for s in got), got[:3]
    assert {"event": "stopped", "sent": len(got)} in p.events


@needs_wheel
async def test_child_killed_when_its_run_is_cancelled(tmp_path: Path) -> None:
    got: list[OfficialSend] = []
    p = producer(tmp_path, got)
    with trio.move_on_after(60) as cs:
        async with trio.open_nursery() as nursery:
            await nursery.start(p.run, trio.Event())  # never set
            await wait_until(lambda: len(got) >= 1, 30, "a send recorded")
            nursery.cancel_scope.cancel()
    assert not cs.cancelled_caught
    assert p.pid is not None and gone(p.pid) and p.returncode == -9
    assert len(got) == len(p.sends_path.read_text().splitlines())


# ---- children that go wrong (plain Python stand-ins: no wheel needed) ----------------

class StandIn(OfficialProducer):
    def __init__(self, tmp_path: Path, code: str) -> None:
        super().__init__(0, "127.0.0.1:1", "ChaosTopic", tmp_path, interval=0.05,
                         t0=time.monotonic(), max_messages=10, send_timeout=0.5, timeout=60,
                         on_send=lambda s: None)
        self.code = code

    def argv(self) -> list[str]:
        return [sys.executable, "-c", self.code]


async def test_a_child_that_does_not_start_is_an_error_with_its_stderr(tmp_path: Path) -> None:
    p = StandIn(tmp_path, "import sys; sys.exit('librocketmq.so: cannot open shared object')")
    with pytest.raises(OfficialClientError, match="exited with status 1 before it started") as e:
        await p.run(trio.Event())
    assert "cannot open shared object" in str(e.value) and p.returncode == 1


async def test_a_child_that_dies_during_the_load_is_a_failure(tmp_path: Path) -> None:
    started = json.dumps({"event": "started"})
    p = StandIn(tmp_path, f"print({started!r}, flush=True); import sys; sys.exit(3)")
    async with trio.open_nursery() as nursery:
        await nursery.start(p.run, trio.Event())  # returns: the child is gone
    assert p.returncode == 3
    assert p.failure == "exited with status 3 during the load, after 0 sends"


def test_the_command_names_a_child_that_did_not_start(tmp_path: Path) -> None:
    class Failing:
        official_failures: list[str] = []

        async def run(self) -> None:
            async with trio.open_nursery():
                raise OfficialClientError("official producer o0 did not start within 60 s")

    with pytest.raises(click.ClickException, match="o0 did not start"):
        chaos_cli._run(Failing())  # type: ignore[arg-type]
