"""``mqbench attack``: the pure parts without sockets (RSS parsing, report
lines, the heartbeat body, rates, connection fates, pull frames), then every
kind briefly against a real name server and broker with short limits."""

from __future__ import annotations

import re
from pathlib import Path

import trio
import trio.testing
from click.testing import CliRunner

from bench.attacks import (
    ConnRecord,
    LineReader,
    ProbeResult,
    RssTrack,
    block_rates,
    chunks_of,
    conns_line,
    conns_report,
    counts_text,
    failure_kind,
    heartbeat_body,
    latency_summary,
    parse_status_kib,
    probe_report,
    pull_frames,
    rates_text,
    rss_report,
)
from bench.mqbench import cli
from client.errors import MQBrokerError, MQClientError
from protocol.body import unpack_body
from protocol.client_data import HeartbeatData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder
from protocol.headers import PullMessageRequestHeader
from protocol.trio.errors import RemotingConnectError, RemotingTimeoutError
from tests.integration.cluster import Cluster

STATUS = """Name:\tpython3
Umask:\t0022
State:\tS (sleeping)
VmPeak:\t  412340 kB
VmSize:\t  401232 kB
VmHWM:\t   90112 kB
VmRSS:\t   81234 kB
RssAnon:\t   60000 kB
Threads:\t3
"""

# ---- RSS ---------------------------------------------------------------------------------


def test_parse_status_kib_reads_fields_in_kib() -> None:
    assert parse_status_kib(STATUS) == 81234
    assert parse_status_kib(STATUS, "RssAnon") == 60000
    assert parse_status_kib(STATUS, "VmHWM") == 90112


def test_parse_status_kib_of_a_zombie_or_garbage_is_none() -> None:
    zombie = "Name:\tbroker\nState:\tZ (zombie)\nThreads:\t1\n"
    assert parse_status_kib(zombie) is None
    assert parse_status_kib("VmRSS:\tlots kB\n") is None
    assert parse_status_kib("VmRSSX:\t12 kB\n") is None
    assert parse_status_kib("") is None


def status(rss_mib: int, anon_mib: int) -> str:
    return f"Name:\tb\nVmRSS:\t{rss_mib * 1024} kB\nRssAnon:\t{anon_mib * 1024} kB\n"


def test_rss_track_keeps_start_peak_stop_and_end() -> None:
    t = RssTrack()
    for at, (rss, anon) in enumerate([(100, 40), (150, 90), (120, 60)]):
        t.add(status(rss, anon), float(at))
    t.stopped()
    t.add(status(110, 45), 9.0)
    r = t.rss
    assert (r.start, r.peak, r.peak_at, r.at_stop, r.last, t.samples) == (
        100 * 1024, 150 * 1024, 1.0, 120 * 1024, 110 * 1024, 4)
    assert (t.anon.start, t.anon.peak, t.anon.last) == (40 * 1024, 90 * 1024, 45 * 1024)
    line = rss_report(t, 10)
    assert line.startswith("broker RSS: start 100.0 MiB, peak 150.0 MiB (+50.0) at 1.0s, "
                           "at the window's end 120.0 MiB (+20.0), end 110.0 MiB (+10.0) "
                           "after a 10s settle; anonymous (RssAnon): start 40.0 MiB, "
                           "peak 90.0 MiB (+50.0) at 1.0s")
    assert line.endswith("end 45.0 MiB (+5.0) (4 samples every 0.2s)")
    assert "GONE" not in line


def test_rss_report_says_when_the_broker_went() -> None:
    t = RssTrack()
    t.add(status(2, 1), 0.0)
    t.add(None, 3.5)  # /proc/PID/status unreadable
    t.add("Name:\tb\nState:\tZ (zombie)\n", 3.7)  # only the first absence counts
    assert t.gone_at == 3.5
    assert "THE BROKER PROCESS WAS GONE 3.5s into the window" in rss_report(t, 1)


def test_rss_report_without_a_pid_or_a_sample() -> None:
    assert rss_report(None, 10) == "broker RSS: not sampled (give --broker-pid)"
    assert "no sample" in rss_report(RssTrack(), 10)


# ---- the probe's figures ---------------------------------------------------------------------


def test_latency_summary_is_mqbench_percentiles_and_max() -> None:
    samples = [i / 1e6 for i in range(1000, 0, -1)]  # 1..1000 us, unordered
    assert latency_summary(samples) == (500e-6, 990e-6, 1000e-6)
    assert latency_summary([]) == (0.0, 0.0, 0.0)


def test_probe_report_counts_failures_apart_from_latencies() -> None:
    r = ProbeResult(ok=3, failed=2, elapsed=10.0, rate=200, latencies=[0.001, 0.002, 0.004],
                    sent_at=[0.0, 1.0, 2.5], errors={"timeout": 1, "SYSTEM_BUSY": 1})
    line = probe_report(r)
    assert line.startswith("probe: 3 sends ok, 2 failed in 10.0s at 200/s (2,000 planned); ")
    assert "latency p50=2.00ms p99=4.00ms max=4.00ms (the slowest sent at 2.5s)" in line
    assert "over 100ms" not in line
    assert line.endswith("failures: SYSTEM_BUSY 1, timeout 1")


def test_probe_report_says_when_slow_sends_started() -> None:
    r = ProbeResult(ok=4, elapsed=2.0, rate=2, latencies=[0.001, 0.9, 1.5, 0.002],
                    sent_at=[0.0, 14.9, 15.0, 16.0])
    line = probe_report(r)
    assert line.endswith("max=1500.00ms (the slowest sent at 15.0s); 2 over 100ms, sent from "
                         "14.9s to 15.0s")
    assert probe_report(ProbeResult(error="no result")) == "probe: FAILED: no result"


def test_probe_result_json_round_trip() -> None:
    r = ProbeResult(ok=2, failed=1, elapsed=1.5, rate=10, latencies=[0.0012345678, 0.5],
                    sent_at=[0.25, 1.0], errors={"connect": 1})
    back = ProbeResult.from_json(r.to_json())
    assert back.sent_at == [0.25, 1.0]
    assert (back.ok, back.failed, back.elapsed, back.rate, back.errors) == (2, 1, 1.5, 10,
                                                                             {"connect": 1})
    assert back.latencies == [0.001235, 0.5]  # microseconds are enough


def test_failure_kind_names_codes_timeouts_and_connects() -> None:
    assert failure_kind(MQBrokerError(ResponseCode.SYSTEM_BUSY, "busy")) == "SYSTEM_BUSY"
    try:
        try:
            raise RemotingTimeoutError("no response")
        except RemotingTimeoutError as inner:
            raise MQClientError("send failed") from inner
    except MQClientError as exc:
        assert failure_kind(exc) == "timeout"
    assert failure_kind(RemotingConnectError("closed")) == "connect"
    assert failure_kind(trio.TooSlowError()) == "timeout"
    assert failure_kind(ValueError("odd")) == "ValueError"


def test_counts_text_most_first() -> None:
    assert counts_text({"b": 1, "a": 1, "c": 5, "z": 0}) == "c 5, a 1, b 1"
    assert counts_text({}) == "none"


# ---- what the attacks send ---------------------------------------------------------------------


def test_heartbeat_body_is_what_the_broker_accepts() -> None:
    body = heartbeat_body("127.0.0.1@x", consumer_group="G1", topic="T1", producer_group="P1")
    hb = HeartbeatData.from_wire(unpack_body(body))  # the broker's own check
    assert hb.client_id == "127.0.0.1@x"
    assert hb.producer_groups == ["P1"]
    (c,) = hb.consumers
    assert (c.group_name, c.message_model, c.consume_type) == ("G1", "CLUSTERING",
                                                              "CONSUME_PASSIVELY")
    assert [(s.topic, s.sub_string) for s in c.subscriptions] == [("T1", "*")]


def test_heartbeat_body_of_a_producer_only() -> None:
    hb = HeartbeatData.from_wire(unpack_body(heartbeat_body("c", producer_group="P")))
    assert hb.consumers == [] and hb.producer_groups == ["P"]


def test_pull_frames_ask_full_batches_of_the_filled_queue() -> None:
    frames = pull_frames("g", "T", 0, 100, 32)
    cmds = [RemotingCommand.decode(p) for p in FrameDecoder().feed(b"".join(frames))]
    assert {c.code for c in cmds} == {RequestCode.PULL_MESSAGE}
    heads = [PullMessageRequestHeader.from_fields(c.ext_fields) for c in cmds]
    assert [h.queue_offset for h in heads] == [0, 32, 64]  # 96 + 32 > 100
    # the subscription bit: the group never heart-beats, its pulls carry their own "*"
    assert {(h.max_msg_nums, h.sys_flag, h.topic, h.consumer_group, h.subscription)
            for h in heads} == {(32, 0x4, "T", "g", "*")}
    assert len(pull_frames("g", "T", 0, 5, 32)) == 1  # fewer messages than a batch: one pull


def test_chunks_of_joins_frames() -> None:
    assert chunks_of([b"a", b"b", b"c"], 2) == [(b"ab", 2), (b"c", 1)]


def test_block_rates_per_full_block() -> None:
    assert block_rates([0.5, 1.0, 2.0, 4.0, 4.5], 2) == [2.0, 2 / 3]  # the 5th: no full block
    assert block_rates([], 1000) == []
    assert rates_text([1000.0, 500.0], 1000) == "1,000: 1,000/s, 2,000: 500/s"
    assert rates_text([], 1000) == "(fewer than 1,000 created)"


def test_conns_report_tells_refused_from_closed_later() -> None:
    records = [
        ConnRecord(False, connected=0.1, closed=0.15),  # refused at once
        ConnRecord(False, connected=0.1, closed=30.1),  # closed later (30 s)
        ConnRecord(False, connected=0.2),  # still open
        ConnRecord(False, connect_error="timeout"),
    ]
    rep = conns_report(records)
    assert (rep["opened"], rep["connect_failed"], rep["refused_at_once"], rep["closed_later"],
            rep["open"]) == (3, 1, 1, 1, 1)
    line = conns_line("idle", 4, rep)
    assert line.startswith("idle: 4 tried, 3 opened, 1 connect failures, 1 refused at once")
    assert "1 closed later (after 30.0/30.0/30.0s min/median/max), 1 still open" in line
    assert line.endswith("connect errors: timeout 1")


async def test_line_reader_splits_lines_across_chunks() -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    reader = LineReader(receive)
    await send.send_all(b'{"ready": tr')
    await send.send_all(b'ue}\ngo\nst')
    assert await reader.line() == '{"ready": true}'
    assert await reader.line() == "go"
    await send.send_all(b"op\n")
    await send.aclose()
    assert await reader.line() == "stop"
    assert await reader.line() is None


# ---- end to end ------------------------------------------------------------------------------

KINDS = {
    "unread-pulls": ["--fill", "300"],
    "heartbeat-flood": ["--window", "200"],
    "idle-conns": ["-c", "40", "-m", "10"],
    "held-pulls": ["-H", "150", "--per-conn", "100", "--suspend-ms", "1000"],
    "groups": ["-g", "200", "-w", "16", "--conns", "2"],
    "topics": ["-t", "200", "-w", "8", "--per", "100"],
}


def test_every_kind_runs_and_reports(tmp_path: Path) -> None:
    """Each kind for 2 s against a broker with short limits (idle connections
    closed after 2 s, a started frame after 1 s, 30 connections per address)."""
    c = Cluster(tmp_path)
    outputs: dict[str, str] = {}
    try:
        ns = c.namesrv()
        broker = c.broker("broker-a", ns.addr, serverChannelMaxIdleTimeSeconds=2,
                          frameReadTimeoutSeconds=1, maxConnectionsPerAddress=30)
        assert broker.proc is not None
        common = ["-n", ns.addr, "-b", broker.addr, "--broker-pid", str(broker.proc.pid),
                  "-d", "2", "--settle", "0.4", "--probe-rate", "50"]
        for kind, extra in KINDS.items():
            result = CliRunner().invoke(cli, ["attack", kind, *common, *extra])
            assert result.exit_code == 0, (kind, result.output, result.exception)
            outputs[kind] = result.output
    finally:
        c.close()
    for kind, out in outputs.items():
        assert re.search(rf"^attack {kind}: 2s against broker .* nproc \d+", out, re.M), out
        assert re.search(rf"^attack {kind}: (?!FAILED)\S", out.split("\n", 1)[1], re.M), out
        assert f"attack {kind}: FAILED" not in out, out
        assert re.search(r"^probe: \d+ sends ok, \d+ failed in .*; latency p50=", out, re.M), out
        assert re.search(r"^broker RSS: start .* MiB, peak .* end .* after a 0.4s settle", out,
                         re.M), out
        assert "GONE" not in out, out
