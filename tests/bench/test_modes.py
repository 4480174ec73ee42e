"""``mqbench`` result dicts (``--json``) and their text, ``mqbench disk``'s
measuring function on a small file, ``bench.all``'s plan and table from
fixed results, and one bounded ``bench_all --quick --skip-spark`` run on
fresh daemons. Nothing here asserts a speed."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench import all as bench_all
from bench import mqbench
from bench.all import (
    ASYNC,
    ASYNC_BUSY,
    SYNC,
    SYNC_BUSY,
    PeakRss,
    cpu_seconds,
    find,
    parse_json_lines,
    plan,
    render_table,
    table_rows,
    wait_until,
)
from bench.mqbench import (
    CheckSummary,
    DiskBenchError,
    check_report,
    check_result,
    cli,
    default_disk_dir,
    latency_result,
    measure_fdatasync,
    mount_of,
    parse_member_line,
    push_result,
    render_checks,
    render_disk,
    render_latency,
    render_push,
    render_spark_run,
    render_spark_summary,
    render_throughput,
    render_transaction,
    report,
    spark_run_result,
    spark_summary,
    throughput_result,
)
from bench.stats import latency_us
from deploy import speedups
from protocol.trio.memory import rss_bytes

MiB = 1 << 20
POINTS = ["p50", "p90", "p99", "p99.9"]
REPO = Path(__file__).resolve().parents[2]

# ---- result dicts and their text ---------------------------------------------------------


def test_latency_us_keys_and_units() -> None:
    lat = latency_us([0.001, 0.002, 0.003, 0.004])
    assert list(lat) == POINTS
    assert lat["p50"] == pytest.approx(2000.0)
    assert lat["p99.9"] == pytest.approx(4000.0)
    assert latency_us([]) == {p: 0.0 for p in POINTS}


def test_throughput_result_is_json_and_renders_the_old_line() -> None:
    d = throughput_result("produce", 2000, 2000 * 1024, 2.0, [0.001] * 10, batch=32)
    assert json.loads(json.dumps(d)) == d
    assert d["mode"] == "produce"
    assert (d["count"], d["bytes"], d["seconds"]) == (2000, 2048000, 2.0)
    assert d["msgs_per_s"] == pytest.approx(1000.0)
    assert d["mb_per_s"] == pytest.approx(1.024)
    assert d["latency_per"] == "request" and d["batch"] == 32
    assert list(d["latency_us"]) == POINTS
    line = ("produce: 2000 msgs in 2.00s = 1,000 msg/s (1.0 MB/s); latency per request "
            "p50=1.000ms p90=1.000ms p99=1.000ms p99.9=1.000ms")
    assert render_throughput(d) == line
    assert report("produce", 2000, 2000 * 1024, 2.0, [0.001] * 10) == line


def test_throughput_result_of_no_time() -> None:
    d = throughput_result("consume", 0, 0, 0.0, [])
    assert (d["msgs_per_s"], d["mb_per_s"]) == (0.0, 0.0)
    assert render_throughput(d).startswith("consume: 0 msgs in 0.00s = 0 msg/s (0.0 MB/s)")


def test_transaction_results_render_both_phases() -> None:
    d = throughput_result("transaction", 100, 100, 1.0, [0.002], per="send_message_in_transaction",
                          rolled_back=2)
    assert render_transaction(d) == (
        "transaction: 100 committed in 1.00s = 100 tx/s (0.0 MB/s); latency per "
        "send_message_in_transaction p50=2.000ms p90=2.000ms p99=2.000ms p99.9=2.000ms; "
        "2 rolled back (half message not SEND_OK)")
    summary = CheckSummary(sent=4, delays=[1.0, 2.0, 3.0])
    checks = check_result(summary, 5.0, 30, rolled_back=1)
    assert json.loads(json.dumps(checks)) == checks
    assert checks["mode"] == "transaction_checks"
    assert (checks["sent"], checks["checked"], checks["missed"]) == (4, 3, 1)
    assert checks["unknow_to_check_s"] == {"min": 1.0, "p50": 2.0, "p90": 3.0, "max": 3.0}
    assert render_transaction(checks) == (
        check_report(summary, 5.0, 30) + "; 1 rolled back (half message not SEND_OK)")
    assert render_checks(check_result(CheckSummary(sent=0), 0.0, 1)) == (
        "checks: 0/0 UNKNOW transactions checked (waited 0.0s of --check-wait 1s); "
        "0 not checked in time")


def test_push_result_merges_members() -> None:
    members = [
        {"got": 3, "bytes": 30, "first": 100.0, "last": 101.0,
         "store_to_listener_ms": [1.0, 2.0, 3.0]},
        {"got": 1, "bytes": 10, "first": 100.5, "last": 102.0, "store_to_listener_ms": [4.0]},
        {"got": 0, "bytes": 0, "first": 0.0, "last": 0.0, "store_to_listener_ms": []},
    ]
    d = push_result(members, topic="T")
    assert (d["mode"], d["count"], d["bytes"], d["seconds"]) == ("push", 4, 40, 2.0)
    assert d["per_consumer"] == [3, 1, 0] and d["consumers"] == 3
    assert d["latency_per"] == "store-to-listener"
    assert d["latency_us"]["p50"] == pytest.approx(2000.0)
    assert d["latency_us"]["p99.9"] == pytest.approx(4000.0)
    line = render_push(d)
    assert line.startswith("push consume: 4 msgs in 2.00s = 2 msg/s (3 consumers: 3, 1, 0); "
                           "latency store-to-listener ")
    assert "p50=2.0ms" in line and "p99.9=4.0ms" in line
    nothing = push_result([parse_member_line("Traceback ...\n")])
    assert (nothing["count"], nothing["seconds"], nothing["msgs_per_s"]) == (0, 0.0, 0.0)


def test_parse_member_line_takes_the_last_json_object() -> None:
    out = 'noise\n{"got": 1, "first": 1.0, "last": 2.0}\n{broken\n{"got": 2, "first": 3.0, ' \
          '"last": 4.0, "bytes": 5, "store_to_listener_ms": [1.5]}\n\n'
    assert parse_member_line(out) == {"got": 2, "first": 3.0, "last": 4.0, "bytes": 5,
                                      "store_to_listener_ms": [1.5]}


def test_latency_result_renders_the_old_line() -> None:
    d = latency_result([0.003, 0.001, 0.002], 4, 2000, 10.0, topic="L")
    assert d["mode"] == "latency" and (d["count"], d["sent"]) == (3, 4)
    assert render_latency(d) == ("end-to-end: 3/4 msgs at 2000/s; latency p50=2.00ms "
                                 "p90=3.00ms p99=3.00ms p99.9=3.00ms")


def test_spark_runs_and_summary() -> None:
    runs = [spark_run_result("batch", i + 1, 1000, 1_000_000, secs, cpu_s=cpu)
            for i, (secs, cpu) in enumerate([(5.0, 9.0), (1.0, 1.5), (2.0, 2.5)])]
    assert render_spark_run(runs[1]) == ("spark batch run 2: 1000 msgs (1.0 MB of bodies) in "
                                         "1.00s = 1,000 msg/s; 1.50s of CPU in the session's "
                                         "processes")
    s = spark_summary(runs)
    assert json.loads(json.dumps(s)) == s
    assert s["run_seconds"] == {"p50": 2.0, "min": 1.0, "max": 5.0}
    assert s["first_msgs_per_s"] == pytest.approx(200.0)
    assert s["first_seconds"] == 5.0
    assert s["first_cpu_us_per_msg"] == pytest.approx(9000.0)
    assert s["warm_cpu_us_per_msg"] == pytest.approx(1500.0)  # the faster run's, as the rate
    no_cpu = spark_summary([spark_run_result("batch", 1, 10, 10, 1.0, cpu_s=None)] * 2)
    assert no_cpu["first_cpu_us_per_msg"] is None and no_cpu["warm_cpu_us_per_msg"] is None
    assert s["warm_msgs_per_s"] == pytest.approx(1000.0)  # of 1,000 and 500: nearest rank
    assert s["latency_us"] is None
    line = render_spark_summary(s)
    assert line.startswith("spark batch: 3 runs, run time p50=2.00s (min 1.00s, max 5.00s)")
    assert line.endswith("no per-request latency applies (each run reads the whole topic)")
    one = spark_summary(runs[:1])
    assert one["run_seconds"] is None and one["warm_msgs_per_s"] is None
    assert render_spark_summary(one) == ("spark batch: 1 runs; no per-request latency applies "
                                         "(each run reads the whole topic)")
    assert s["jvm_class_sharing"] is None
    for sharing, word in ((True, "on"), (False, "off")):
        d = spark_summary(runs[:1], sharing)
        assert d["jvm_class_sharing"] is sharing
        assert render_spark_summary(d) == (f"spark batch: 1 runs; driver JVM class sharing "
                                           f"{word}; no per-request latency applies (each run "
                                           "reads the whole topic)")
    stream = spark_run_result("stream", 1, 10, None, 2.0, micro_batches=2)
    assert render_spark_run(stream) == ("spark stream run 1 (availableNow, from earliest): "
                                        "10 msgs in 2 micro-batches, 2.00s wall = 5 msg/s")


# ---- disk --------------------------------------------------------------------------------


def test_measure_fdatasync_on_a_small_file(tmp_path: Path) -> None:
    store = tmp_path / "commitlog"
    store.mkdir()
    existing = store / "00000000000000000000"
    existing.write_bytes(b"keep me")
    d = measure_fdatasync(store, size=1024, count=50, file_size=4 * MiB)
    assert d["mode"] == "disk" and d["latency_per"] == "fdatasync"
    assert (d["count"], d["size"], d["file_size"]) == (50, 1024, 4 * MiB)
    assert d["preparation"] in ("fallocate", "zeros (no fallocate)")
    assert list(d["latency_us"]) == POINTS
    values = list(d["latency_us"].values())
    assert values == sorted(values) and values[0] > 0
    assert d["max_us"] >= values[-1] and d["mean_us"] > 0
    assert d["dir"] == str(store)
    assert json.loads(json.dumps(d)) == d
    assert "latency per fdatasync p50=" in render_disk(d)
    # only the store's own file is left, untouched
    assert sorted(p.name for p in store.iterdir()) == [existing.name]
    assert existing.read_bytes() == b"keep me"


def test_measure_fdatasync_zero_filled_and_wrapping(tmp_path: Path) -> None:
    d = measure_fdatasync(tmp_path / "new" / "dir", size=4096, count=40, file_size=64 * 1024,
                          zero_filled=True)  # 40 writes of 4 KiB wrap around a 64 KiB file
    assert d["preparation"] == "zero-filled" and d["count"] == 40
    assert list((tmp_path / "new" / "dir").iterdir()) == []


def test_measure_fdatasync_pwrite_or_through_the_mapping_after_a_prefill(
        tmp_path: Path) -> None:
    for through in (False, True):
        d = measure_fdatasync(tmp_path, size=1024, count=20, file_size=MiB,
                              through_mapping=through, prefill=256 * 1024)
        assert d["write"] == ("mmap" if through else "pwrite") and d["prefill"] == 256 * 1024
        assert d["count"] == 20
        text = render_disk(d)
        assert f"1024-byte {d['write']} writes after 0.25 MiB" in text
    with pytest.raises(DiskBenchError):
        measure_fdatasync(tmp_path, size=1024, count=1, file_size=MiB, prefill=MiB)
    assert list(tmp_path.iterdir()) == []


def test_measure_fdatasync_refuses_bad_sizes(tmp_path: Path) -> None:
    with pytest.raises(DiskBenchError):
        measure_fdatasync(tmp_path, size=8192, count=1, file_size=4096)
    with pytest.raises(DiskBenchError):
        measure_fdatasync(tmp_path, size=1, count=0, file_size=4096)
    with pytest.raises(DiskBenchError):
        measure_fdatasync(tmp_path, size=1, count=1, file_size=1 << 60)  # more than is free
    assert list(tmp_path.iterdir()) == []


def test_measure_fdatasync_removes_its_file_on_failure(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(fd: int) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(mqbench.os, "fdatasync", broken)
    with pytest.raises(OSError):
        measure_fdatasync(tmp_path, size=16, count=3, file_size=4096)
    assert list(tmp_path.iterdir()) == []


def test_disk_command_prints_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["disk", "--dir", str(tmp_path), "-s", "512", "-c", "20",
                                      "--file-size", str(MiB), "--compare-zero-filled", "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [d["preparation"] for d in lines][1] == "zero-filled"
    assert all(d["mode"] == "disk" and d["count"] == 20 for d in lines)
    assert list(tmp_path.iterdir()) == []
    text = CliRunner().invoke(cli, ["disk", "--dir", str(tmp_path), "-c", "5", "--file-size",
                                    str(MiB)])
    assert text.exit_code == 0 and text.output.startswith("disk: 5 fdatasyncs after 1024-byte")
    bad = CliRunner().invoke(cli, ["disk", "--dir", str(tmp_path), "-s", "4096", "--file-size",
                                   "1024"])
    assert bad.exit_code != 0 and "size" in bad.output


def test_default_disk_dir(tmp_path: Path) -> None:
    assert default_disk_dir(tmp_path) == tmp_path / ".data"
    (tmp_path / ".data" / "commitlog").mkdir(parents=True)
    assert default_disk_dir(tmp_path) == tmp_path / ".data" / "commitlog"
    (tmp_path / ".data" / "store" / "commitlog").mkdir(parents=True)
    assert default_disk_dir(tmp_path) == tmp_path / ".data" / "store" / "commitlog"


def test_mount_of_takes_the_longest_mount_point() -> None:
    mounts = ("/dev/vda / ext4 rw 0 0\n"
              "tmpfs /tmp tmpfs rw 0 0\n"
              "/dev/vdb /data/my\\040disk xfs rw 0 0\n"
              "overlay /tmpx overlay rw 0 0\n"
              "garbage\n")
    assert mount_of("/work/main/.data", mounts) == ("/", "ext4")
    assert mount_of("/tmp/x/y", mounts) == ("/tmp", "tmpfs")
    assert mount_of("/tmp", mounts) == ("/tmp", "tmpfs")
    assert mount_of("/tmpxyz", mounts) == ("/", "ext4")
    assert mount_of("/data/my disk/commitlog", mounts) == ("/data/my disk", "xfs")
    assert mount_of("/x", "") is None


# ---- machine -----------------------------------------------------------------------------


def test_machine_command_times_the_interpreter_and_loopback() -> None:
    affinity = os.sched_getaffinity(0)
    result = CliRunner().invoke(cli, ["machine", "-c", "50", "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    (d,) = [json.loads(line) for line in result.output.splitlines()]
    assert d["mode"] == "machine" and d["count"] == 50 and d["nproc"] == os.cpu_count()
    assert d["python_loop_ns"] > 0 and d["latency_per"] == "loopback round trip"
    # the version and the interpreter behind the venv's link
    assert d["python"] == f"{platform.python_version()} {os.path.realpath(sys.executable)}"
    assert d["python_work_ns"] > 0
    lat = d["latency_us"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99.9"] <= d["max_us"]
    assert set(d["cpu_idle"]) == {"driver", "governor", "halt_poll_ns"}
    assert d["cpu_idle_text"]
    text = CliRunner().invoke(cli, ["machine", "-c", "20"])
    assert text.exit_code == 0 and text.output.startswith("machine: ")
    assert f"CPU idle: {d['cpu_idle_text']}" in text.output
    assert "20 loopback round trips" in text.output
    assert f"; Python {d['python']}; Python loop " in text.output
    assert " ns per iteration; Python work (calls, objects, struct) " in text.output
    trio_lat = d["trio_latency_us"]
    assert 0 < trio_lat["p50"] <= trio_lat["p90"] <= trio_lat["p99"] <= trio_lat["p99.9"]
    wake = d["wake"]
    assert wake["rounds"] == 300 and wake["pause_us"] == 300
    assert wake["back_to_back_us"] > 0 and wake["after_pause_us"] > 0
    assert wake["ratio"] == pytest.approx(wake["after_pause_us"] / wake["back_to_back_us"])
    assert "the same with trio on both sides p50=" in text.output
    assert "right after a 300µs sleep (" in text.output
    pinned = d["pinned"]
    if len(os.sched_getaffinity(0)) < 2:
        assert pinned is None
    else:
        assert pinned["cpus"] == sorted(os.sched_getaffinity(0))[:2]
        assert pinned["same_cpu_us"]["p50"] > 0 and pinned["two_cpus_us"]["p50"] > 0
        assert "with both processes on one CPU " in text.output
    # the measurement gave this process back all its CPUs
    assert os.sched_getaffinity(0) == affinity


def test_pinned_loopback_needs_two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.mqbench as mqbench

    monkeypatch.setattr(mqbench.os, "sched_getaffinity", lambda pid: {3})
    assert mqbench.pinned_loopback(10) is None


def test_pinned_loopback_left_out_when_pinning_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU the kernel will not pin to (a cpuset changed meanwhile): the
    pinned figure is left out, the rest of ``mqbench machine`` goes on."""
    import bench.mqbench as mqbench

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")

    def refused(count: int, cpus: tuple[int, int] | None = None) -> list[float]:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(mqbench, "loopback_rtt", refused)
    assert mqbench.pinned_loopback(10) is None


def test_an_echo_peer_that_exits_is_an_os_error() -> None:
    import subprocess

    from bench.mqbench import _peer_port

    peer = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"],
                            stdout=subprocess.PIPE, text=True)
    with pytest.raises(OSError, match="did not start \\(exit code 3\\)"):
        _peer_port(peer)
    assert peer.stdout is not None
    peer.stdout.close()


def test_wake_cost_times_the_same_work_warm_and_after_a_pause(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.mqbench as mqbench

    calls: list[str] = []
    real = mqbench._SendWork.__call__

    def traced(self: Any) -> None:
        calls.append("work")
        real(self)

    sleeps: list[float] = []
    monkeypatch.setattr(mqbench._SendWork, "__call__", traced)
    monkeypatch.setattr(mqbench.time, "sleep", sleeps.append)
    d = mqbench.wake_cost(rounds=4, pause=0.001)
    # each round: a warm-up run, the timed warm run, the pause, the timed woken run
    assert calls == ["work"] * 12 and sleeps == [0.001] * 4
    assert d["rounds"] == 4 and d["pause_us"] == 1000
    assert d["ratio"] == pytest.approx(d["after_pause_us"] / d["back_to_back_us"])


def fake_sys(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    return root


IDLE = "devices/system/cpu/cpuidle"
HALT_POLL = "module/haltpoll/parameters/guest_halt_poll_ns"


def test_cpu_idle_reads_the_driver_and_a_kvm_guests_halt_polling(tmp_path: Path) -> None:
    from bench.mqbench import cpu_idle, idle_text

    off = cpu_idle(fake_sys(tmp_path / "a", {f"{IDLE}/current_driver": "haltpoll",
                                             f"{IDLE}/current_governor": "haltpoll",
                                             HALT_POLL: "0"}))
    assert off == {"driver": "haltpoll", "governor": "haltpoll", "halt_poll_ns": 0}
    assert idle_text(off) == "haltpoll, halt poll off"
    on = cpu_idle(fake_sys(tmp_path / "b", {f"{IDLE}/current_driver": "haltpoll",
                                            HALT_POLL: "200000"}))
    assert idle_text(on) == "haltpoll, halt poll 200 µs"
    intel = cpu_idle(fake_sys(tmp_path / "c", {f"{IDLE}/current_driver": "intel_idle",
                                               f"{IDLE}/current_governor_ro": "menu"}))
    assert intel == {"driver": "intel_idle", "governor": "menu", "halt_poll_ns": None}
    assert idle_text(intel) == "intel_idle (menu)"
    none = cpu_idle(tmp_path / "empty")
    assert none == {"driver": None, "governor": None, "halt_poll_ns": None}
    assert idle_text(none) == idle_text(None) == "no cpuidle driver seen"
    odd = cpu_idle(fake_sys(tmp_path / "d", {f"{IDLE}/current_driver": "haltpoll",
                                             HALT_POLL: "lots"}))
    assert odd["halt_poll_ns"] is None and idle_text(odd) == "haltpoll"


def test_loopback_peer_is_gone_afterwards() -> None:
    from bench.mqbench import loopback_rtt

    before = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert len(loopback_rtt(10, request=10, reply=3)) == 10
    after = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert after.count("socket.socket()") <= before.count("socket.socket()")


# ---- bench_all: plan, parsing, table -------------------------------------------------------


def test_plan_divides_counts() -> None:
    full = plan()
    assert [s.name for s in full[ASYNC]] == ["produce_batched", "consume_pull", "produce_single",
                                             "push", "spark_fill", "spark", "spark_noop",
                                             "spark_noop_rows"]
    assert [s.name for s in full[SYNC]] == ["produce_batched", "produce_single"]
    assert full[ASYNC][0].shown() == ("mqbench producer -t BenchTopic -s 1024 -b 32 -w 16 "
                                      "-c 200000")
    assert full[SYNC][1].shown() == "mqbench producer -t BenchSingle -s 1024 -b 1 -w 1 -c 20000"
    assert full[ASYNC][4].shown() == ("mqbench producer -t BenchTopic -s 1024 -b 32 -w 16 "
                                      "-c 800000")  # Spark then reads 1,000,000
    assert full[ASYNC][5].shown() == "mqbench spark -t BenchTopic -r 3"
    assert full[ASYNC][6].shown() == "mqbench spark --noop -r 3"  # a session of its own
    assert full[ASYNC][7].shown() == "mqbench spark --noop --noop-rows 1000000 -r 3"
    # against a spinning broker, spinning: batched (ASYNC) and single sends
    single_busy = "mqbench --busy-poll-us 1000 producer -t BenchSingle -s 1024 -b 1 -w 1 -c 20000"
    assert [s.shown() for s in full[ASYNC_BUSY]] == [
        "mqbench --busy-poll-us 1000 producer -t BenchTopic -s 1024 -b 32 -w 16 -c 200000",
        single_busy]
    assert [s.shown() for s in full[SYNC_BUSY]] == [single_busy]
    quick = plan(10, skip_spark=True, disk_file_size=MiB)
    assert [s.name for s in quick[ASYNC]][-1] == "push"
    assert quick[ASYNC][1].args[-3] == "20000"
    assert quick["disk"][0].shown() == "mqbench disk -s 1024 -c 200 --file-size 1048576"
    assert [m.shown() for m in full["machine"]] == ["mqbench machine -c 5000"] * 2
    assert [m.name for m in quick["machine"]] == ["machine_start", "machine_end"]


def test_parse_json_lines_skips_other_lines() -> None:
    out = 'x\n{"mode": "a"}\n  {"mode": "b"}  \n{not json\n[1]\n'
    assert parse_json_lines(out) == [{"mode": "a"}, {"mode": "b"}]


def lat(p50: float, p90: float, p99: float, p999: float) -> dict[str, float]:
    return {"p50": p50, "p90": p90, "p99": p99, "p99.9": p999}


def step(name: str, flush: str, command: str, *results: dict[str, Any],
         error: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "flush": flush, "command": command,
                         "results": list(results)}
    if error:
        d["error"] = error
    return d


RESULTS: dict[str, Any] = {"compiled_loops": {"a._x_c": True, "b._y_c": True}, "steps": [
    step("produce_batched", ASYNC, "mqbench producer -b 32",
         {"mode": "produce", "count": 200_000, "msgs_per_s": 30123.4,
          "latency_us": lat(1e4, 2e4, 33_000, 37_625)}) | {"broker_cpu_s": 1.5},
    step("consume_pull", ASYNC, "mqbench consumer",
         {"mode": "consume", "count": 100_000, "msgs_per_s": 66000.0})
    | {"broker_rss_peak_bytes": 95.4 * (1 << 20), "broker_cpu_s": 0.25},
    step("produce_single", ASYNC, "mqbench producer -b 1",
         {"mode": "produce", "msgs_per_s": 3000.0, "latency_us": lat(304.4, 400, 617, 3000)}),
    step("push", ASYNC, "mqbench push", {"mode": "push", "msgs_per_s": 54000.0})
    | {"broker_rss_peak_bytes": 120 << 20},
    step("spark", ASYNC, "mqbench spark -r 3",
         {"mode": "spark", "run": 1, "count": 1_000_000},
         {"mode": "spark", "run": 2, "count": 1_000_000},
         {"mode": "spark", "run": 3, "count": 1_000_000},
         {"mode": "spark_summary", "warm_msgs_per_s": 90000.0, "first_msgs_per_s": 20000.0,
          "first_seconds": 50.004, "first_cpu_us_per_msg": 14.64,
          "warm_cpu_us_per_msg": 4.36, "jvm_class_sharing": True}) | {"broker_cpu_s": 6.0},
    step("spark_noop", ASYNC, "mqbench spark --noop -r 3",
         {"mode": "spark", "run": 1},
         {"mode": "spark_summary", "warm_msgs_per_s": 12.0, "first_msgs_per_s": 1.0,
          "first_seconds": 4.1}),
    step("spark_noop_rows", ASYNC, "mqbench spark --noop --noop-rows 1000000 -r 3",
         {"mode": "spark", "run": 1},
         {"mode": "spark_summary", "warm_msgs_per_s": 400000.0, "first_msgs_per_s": 125000.0,
          "first_seconds": 8.0}),
    step("produce_batched", SYNC, "mqbench producer -b 32 (sync)",
         {"mode": "produce", "msgs_per_s": 43000.0, "latency_us": lat(1e4, 2e4, 40_000, 50_000)}),
    step("produce_single", SYNC, "mqbench producer -b 1 (sync)",
         {"mode": "produce", "msgs_per_s": 900.0, "latency_us": lat(1000, 1400, 2000, 18000)}),
    step("produce_batched", ASYNC_BUSY, "mqbench --busy-poll-us 1000 producer -b 32",
         {"mode": "produce", "msgs_per_s": 35000.0, "latency_us": lat(1e4, 2e4, 3e4, 4e4)}),
    step("produce_single", ASYNC_BUSY, "mqbench --busy-poll-us 1000 producer -b 1",
         {"mode": "produce", "msgs_per_s": 5000.0, "latency_us": lat(150.4, 200, 290, 900)}),
    step("produce_single", SYNC_BUSY, "mqbench --busy-poll-us 1000 producer -b 1 (sync)",
         {"mode": "produce", "msgs_per_s": 1000.0, "latency_us": lat(800, 1000, 1600, 9000)}),
    step("disk", "", "mqbench disk --dir <SYNC store>/commitlog",
         {"mode": "disk", "latency_us": lat(250, 300, 400, 800)}),
    step("machine_start", "", "mqbench machine -c 5000",
         {"mode": "machine", "python": "3.11.2 /usr/bin/python3.11", "python_loop_ns": 185.84,
          "python_work_ns": 301.4,
          "latency_us": lat(29.04, 35, 51, 84),
          "trio_latency_us": lat(61.26, 70, 90, 120), "wake": {"ratio": 2.44},
          "pinned": {"cpus": [0, 1], "same_cpu_us": lat(18.04, 20, 30, 40),
                     "two_cpus_us": lat(79.61, 90, 150, 300)},
          "cpu_idle_text": "haltpoll, halt poll off"}),
    step("machine_end", "", "mqbench machine -c 5000",
         {"mode": "machine", "python_loop_ns": 190.06, "python_work_ns": 310.6,
          "latency_us": lat(40.0, 45, 60, 90),
          "trio_latency_us": lat(70.0, 80, 90, 120), "wake": {"ratio": 2.0}}),
]}


def test_table_rows_from_fixed_results() -> None:
    rows = table_rows(RESULTS)
    assert rows == [
        ("batched produce ASYNC msg/s", "30,123", "mqbench producer -b 32"),
        ("consume pull msg/s", "66,000", "mqbench consumer"),
        ("batched produce SYNC msg/s", "43,000", "mqbench producer -b 32 (sync)"),
        ("batched produce ASYNC msg/s, busy poll 1000 µs", "35,000",
         "mqbench --busy-poll-us 1000 producer -b 32, broker busyPollMicros=1000"),
        ("single send ASYNC p50/p99 µs", "304 / 617", "mqbench producer -b 1"),
        ("single send SYNC p50/p99 µs", "1,000 / 2,000", "mqbench producer -b 1 (sync)"),
        ("single send ASYNC p50/p99 µs, busy poll 1000 µs", "150 / 290",
         "mqbench --busy-poll-us 1000 producer -b 1, broker busyPollMicros=1000"),
        ("single send SYNC p50/p99 µs, busy poll 1000 µs", "800 / 1,600",
         "mqbench --busy-poll-us 1000 producer -b 1 (sync), broker busyPollMicros=1000"),
        ("fdatasync p50/p99 µs", "250 / 400", "mqbench disk --dir <SYNC store>/commitlog"),
        ("SYNC single p50 / fdatasync p50", "4.00", "the two rows above"),
        ("batched produce ASYNC request p99/p99.9 ms", "33.00 / 37.62", "mqbench producer -b 32"),
        ("batched produce SYNC request p99/p99.9 ms", "40.00 / 50.00",
         "mqbench producer -b 32 (sync)"),
        ("push consume msg/s", "54,000", "mqbench push"),
        ("broker peak RSS MiB, pull / push consume", "95 / 120",
         "sampled every 50 ms during the two steps above (1 GiB commit-log files)"),
        # push and the SYNC pair measured no CPU time: n/a
        ("broker CPU µs/msg: batched ASYNC / SYNC, pull, push", "7.5 / n/a / 2.5 / n/a",
         "user + system time of the broker process during those steps"),
        ("Spark warm/first msg/s", "90,000 / 20,000",
         "mqbench spark -r 3 (driver JVM class sharing on)"),
        ("Spark CPU µs/msg: Spark's processes first / warm; broker", "14.6 / 4.4; 2.0",
         "the driver, its JVM and Python workers during each read (/proc); the broker over "
         "all the reads"),
        ("Spark first read s: rocketmq / a no-op Python source", "50.00 / 4.10",
         "mqbench spark -r 3; mqbench spark --noop -r 3 (a session of its own)"),
        ("Spark warm/first msg/s of a no-op source of as many rows", "400,000 / 125,000",
         "mqbench spark --noop --noop-rows 1000000 -r 3 (1 KiB bodies, a session of its own: "
         "Spark's own cost, the most any Python source could give)"),
        ("machine: Python (version, interpreter)", "3.11.2 /usr/bin/python3.11",
         "mqbench machine -c 5000"),
        ("broker: compiled loops in use", "2 of 2",
         "deploy/speedups.py (make speedups; ROCKETMQ_NO_SPEEDUPS=1 runs the Python loops)"),
        ("machine: Python loop ns/iteration, start / end", "185.8 / 190.1",
         "mqbench machine -c 5000"),
        ("machine: Python work ns/step (calls, objects, struct), start / end", "301 / 311",
         "mqbench machine -c 5000"),
        ("machine: loopback round trip p50 µs, start / end", "29.0 / 40.0",
         "mqbench machine -c 5000"),
        ("machine: trio loopback round trip p50 µs, start / end", "61.3 / 70.0",
         "mqbench machine -c 5000"),
        ("machine: loopback p50 µs, both on one CPU / on two, start", "18.0 / 79.6",
         "mqbench machine -c 5000"),
        ("machine: send work after a 300 µs sleep / back to back, start / end", "2.4 / 2.0",
         "mqbench machine -c 5000"),
        ("single send ASYNC p50 / loopback p50", "10.5", "the rows above"),
        ("machine: CPU idle, start", "haltpoll, halt poll off",
         "mqbench machine -c 5000 (cpuidle driver; a KVM guest's guest_halt_poll_ns)"),
    ]
    text = render_table(rows)
    lines = text.splitlines()
    widths = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    assert widths == (67, 26)
    assert lines[0].split(" | ") == ["figure".ljust(67), "value".rjust(26), "command"]
    assert len(lines) == 2 + len(rows)
    assert len({line.index("|") for line in lines}) == 1  # the columns line up
    assert lines[10].startswith("fdatasync p50/p99 µs ") and f"| {'250 / 400':>26} |" in lines[10]


def test_table_rows_with_failures_and_skipped_spark() -> None:
    steps = [s for s in RESULTS["steps"] if s["name"] not in ("spark", "disk", "machine_end")]
    steps.append(step("disk", "", "mqbench disk", error="exit 1"))
    steps = [s if s["name"] != "push" else step("push", ASYNC, "mqbench push", error="exit 2")
             for s in steps]
    rows = dict((r[0], (r[1], r[2])) for r in table_rows({"steps": steps}))
    assert rows["fdatasync p50/p99 µs"] == ("n/a", "mqbench disk  [exit 1]")
    assert rows["SYNC single p50 / fdatasync p50"][0] == "n/a"
    assert rows["push consume msg/s"] == ("n/a", "mqbench push  [exit 2]")
    assert rows["broker peak RSS MiB, pull / push consume"][0] == "n/a"  # push has none
    assert rows["Spark warm/first msg/s"] == ("skipped", "--skip-spark")
    assert rows["Spark first read s: rocketmq / a no-op Python source"] == (
        "skipped", "--skip-spark")
    assert rows["Spark CPU µs/msg: Spark's processes first / warm; broker"] == (
        "skipped", "--skip-spark")
    assert rows["consume pull msg/s"] == ("66,000", "mqbench consumer")
    assert rows["machine: Python loop ns/iteration, start / end"][0] == "n/a"
    assert rows["machine: Python work ns/step (calls, objects, struct), start / end"][0] == "n/a"
    assert rows["machine: Python (version, interpreter)"][0] == "3.11.2 /usr/bin/python3.11"
    assert rows["single send ASYNC p50 / loopback p50"][0] == "10.5"
    assert rows["machine: CPU idle, start"][0] == "haltpoll, halt poll off"
    assert find({"steps": []}, "push", ASYNC) == (None, "not run")
    assert table_rows({})[0] == ("batched produce ASYNC msg/s", "n/a", "not run")


def test_peak_rss_keeps_the_highest_sample() -> None:
    pid = os.getpid()
    before = rss_bytes(pid)
    assert before is not None
    with PeakRss(pid, interval=0.01) as rss:
        held = b"x" * (64 << 20)  # written, so resident

        def seen() -> bool:
            return rss.peak is not None and rss.peak >= before + (60 << 20)

        wait_until("the sampler sees the 64 MiB", seen, timeout=30)
        del held
    assert rss.peak is not None and rss.peak >= before + (60 << 20)
    with PeakRss(2**22 + 12345, interval=0.01) as gone:  # no such process
        pass
    assert gone.peak is None


def test_cpu_seconds_of_a_process() -> None:
    before = cpu_seconds(os.getpid())
    assert before is not None
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # burn 0.2 s of CPU (bounded)
        pass
    after = cpu_seconds(os.getpid())
    assert after is not None and after - before >= 0.1
    assert cpu_seconds(2**22 + 12345) is None  # no such process


def test_wait_until_stops_on_a_dead_process_or_the_deadline() -> None:
    calls: list[int] = []

    def third_time() -> bool:
        calls.append(1)
        return len(calls) >= 3

    wait_until("ready", third_time, timeout=60)
    assert len(calls) == 3
    with pytest.raises(RuntimeError, match="exited"):
        wait_until("ready", lambda: False, timeout=60, alive=lambda: False)
    with pytest.raises(TimeoutError):
        wait_until("ready", lambda: False, timeout=0)


# ---- end to end ------------------------------------------------------------------------


def test_bench_all_quick_end_to_end(tmp_path: Path) -> None:
    """Both pairs and the disk step with counts divided by 10 (about 15 s on
    2 cores); every step gives a result, the daemons and the temporary store
    are gone afterwards."""
    raw = tmp_path / "raw.json"
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.all", "--quick", "--skip-spark", "--json", str(raw),
         "--tmp-dir", str(work), "--log-level", "WARNING"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout, proc.stderr[-4000:])
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("figure ") and len(lines) == 2 + 28
    assert not any(" n/a " in line for line in lines), proc.stdout
    assert list(work.iterdir()) == []  # the stores were removed
    results = json.loads(raw.read_text())
    names = [(s["name"], s["flush"]) for s in results["steps"]]
    assert names == [("machine_start", ""), ("produce_batched", ASYNC), ("consume_pull", ASYNC),
                     ("produce_single", ASYNC), ("push", ASYNC),
                     ("produce_batched", SYNC), ("produce_single", SYNC),
                     ("produce_batched", ASYNC_BUSY), ("produce_single", ASYNC_BUSY),
                     ("produce_single", SYNC_BUSY), ("disk", ""),
                     ("machine_end", "")]
    assert all("error" not in s and s["returncode"] == 0 for s in results["steps"])
    by = {(s["name"], s["flush"]): s["results"] for s in results["steps"]}
    assert by[("produce_batched", ASYNC)][0]["count"] == 20_000
    assert by[("produce_single", SYNC)][0]["count"] == 2_000
    assert by[("consume_pull", ASYNC)][0]["count"] >= 20_000
    assert by[("push", ASYNC)][0]["count"] >= 20_000
    assert by[("disk", "")][0]["count"] == 200
    assert by[("machine_end", "")][0]["count"] == 500
    rows = {r[0]: r[1:] for r in bench_all.table_rows(results)}
    assert rows["Spark warm/first msg/s"] == ("skipped", "--skip-spark")
    # what the daemons of the run took, as this process sees the tree and environment
    assert rows["broker: compiled loops in use"][0] == speedups.in_use_text(speedups.in_use())
    # no daemon of this run is left: the temporary store paths are in no process's arguments
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(work) not in ps
