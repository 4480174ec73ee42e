"""HA figures: how far an ASYNC_MASTER's slave stays behind under load, and how
fast a stopped slave catches up. Run from the repository root:

    .venv/bin/python -m bench.ha [--seconds 20] [--sample-ms 20]
    .venv/bin/python -m bench.ha --roles    # the older table: msg/s per role

A name server, an ASYNC_MASTER (ASYNC_FLUSH) and a SLAVE run as separate
processes on loopback (tests/integration/cluster.py), each with a temporary
store (256 MiB commit-log files). In one run:

1. full rate: mqbench sends 1 KiB messages in batches of 32 (16 in flight) for
   about ``--seconds``; its msg/s is the master's full batched rate.
2. half rate: a paced producer (``pace`` below, batches of 32 sent on a fixed
   schedule) at 50 % of that rate for as long.
3. catch-up: the slave is stopped, mqbench sends ``--catch-up-mb`` MB at full
   rate, the slave is started again; catch-up MB/s is the bytes it was behind
   over the time from its process start, and again from its first report to
   the master (without the process start), to reaching the master's end.
4. the page cache: as many bytes as the catch-up written with ``pwrite``
   into new files, no sync (``page_cache_line``): the kernel's cost of
   the page cache growing, which a slave pays for every byte it appends.
5. the disk: ``dd`` writes as many bytes as the catch-up with one fdatasync
   at the end (conv=fdatasync), on the stores' file system.

Lag under load, in ms of time behind: the master's GET_BROKER_RUNTIME_INFO
is sampled every ``--sample-ms`` (its commit-log end and the slave's
acknowledged offset, in one answer). For each sample (t, end) taken while the
producer runs, the lag is the time from t until the acknowledged offset first
reaches ``end`` (interpolated between the two samples around that moment):
how long the bytes the master held at t took to be on the slave. p50, p99 and
max over the producer's run; then how long the slave took, after the
producer stopped, to reach the master's end (drain).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import trio

from client.admin import MQAdmin
from tests.integration.cluster import Cluster, Daemon

BIN = Path(sys.executable).parent
PROPS: dict[str, Any] = {"mapedFileSizeCommitLog": 256 * 1024 * 1024}
SIZE = 1024
BATCH = 32


def bench(ns: str, topic: str, *args: str) -> dict[str, Any]:
    """mqbench producer's JSON result."""
    out = subprocess.run([str(BIN / "mqbench"), "producer", "-n", ns, "-t", topic, "--json",
                          *args], capture_output=True, text=True, timeout=900).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def pace(ns: str, topic: str, rate: float, count: int) -> dict[str, Any]:
    """Send ``count`` 1 KiB messages in batches of 32 at ``rate`` msg/s (batch k
    leaves at k * 32 / rate s, 16 in flight at most) in a subprocess; its
    result: msgs, seconds, msgs_per_s, late_s (how far the last batch left
    after its time: the producer kept up when near 0)."""
    out = subprocess.run([sys.executable, "-m", "bench.ha", "pace", ns, topic, str(rate),
                          str(count)], capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError(f"paced producer failed: {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


async def _paced(ns: str, topic: str, rate: float, count: int) -> dict[str, Any]:
    from client import Message, Producer

    body = b"x" * SIZE
    p = Producer("BENCH_PACED", namesrv_addr=ns)
    await p.start()
    try:
        await p.send(Message(topic, body))  # routes and connection
        batches = count // BATCH
        step = BATCH / rate
        nxt = [0]
        late = [0.0]
        t0 = trio.current_time()

        async def worker() -> None:
            while nxt[0] < batches:
                k = nxt[0]
                nxt[0] += 1
                at = t0 + k * step
                now = trio.current_time()
                if at > now:
                    await trio.sleep_until(at)
                else:
                    late[0] = max(late[0], now - at)
                await p.send_batch([Message(topic, body) for _ in range(BATCH)])

        async with trio.open_nursery() as nursery:
            for _ in range(16):
                nursery.start_soon(worker)
        elapsed = trio.current_time() - t0
    finally:
        await p.shutdown()
    sent = batches * BATCH
    return {"msgs": sent, "seconds": elapsed, "msgs_per_s": sent / elapsed, "late_s": late[0]}


@dataclass
class Sample:
    t: float  # monotonic seconds
    end: int  # the master's commit-log end
    acked: int  # the slave's acknowledged offset (-1: no slave connected)


class Sampler:
    """The master's end and the slave's acknowledged offset every ``interval``
    seconds, in a thread with its own trio loop and one admin connection."""

    def __init__(self, ns: str, master: str, interval: float) -> None:
        self.ns, self.master, self.interval = ns, master, interval
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: trio.run(self._run), daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    async def _run(self) -> None:
        async with MQAdmin(self.ns) as admin:
            nxt = trio.current_time()
            while not self._stop.is_set():
                try:
                    st = await admin.broker_runtime_info(self.master)
                except Exception:
                    pass
                else:
                    slaves = st["ha"].get("slaves") or []
                    acked = slaves[0]["ackedOffset"] if slaves else -1
                    self.samples.append(Sample(time.monotonic(), st["commitLogMaxOffset"],
                                               acked))
                nxt += self.interval
                await trio.sleep_until(max(nxt, trio.current_time()))

    def wait(self, until: Any, timeout: float) -> Sample | None:
        """The first sample (from now on) for which ``until(sample)``, or None."""
        deadline = time.monotonic() + timeout
        seen = len(self.samples)
        while time.monotonic() < deadline:
            for s in self.samples[seen:]:
                if until(s):
                    return s
            seen = len(self.samples)
            time.sleep(self.interval / 2)
        return None


def lags_ms(samples: Sequence[Sample], t_from: float, t_to: float) -> list[float]:
    """For each sample taken from ``t_from`` to ``t_to``: ms until the slave's
    acknowledged offset first reached that sample's end (interpolated between
    the two samples around the crossing). Samples never reached are left out."""
    acked = [s.acked for s in samples]
    # the acknowledged offset only grows: a running maximum is searchable
    run: list[int] = []
    top = -1
    for a in acked:
        top = max(top, a)
        run.append(top)
    out: list[float] = []
    for i, s in enumerate(samples):
        if not t_from <= s.t <= t_to:
            continue
        k = bisect_left(run, s.end, lo=i)
        if k >= len(samples):
            continue
        if k == i:
            out.append(0.0)
            continue
        a0, a1 = run[k - 1], run[k]
        t0, t1 = samples[k - 1].t, samples[k].t
        t_at = t0 + (t1 - t0) * (s.end - a0) / (a1 - a0) if a1 > a0 else t1
        out.append(max(0.0, t_at - s.t) * 1000)
    return out


def pct(values: Sequence[float], p: float) -> float:
    xs = sorted(values)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def lag_line(name: str, samples: list[Sample], t0: float, t1: float, rate: float) -> str:
    lags = lags_ms(samples, t0, t1)
    during = [s for s in samples if t0 <= s.t <= t1 and s.acked >= 0]
    behind = [s.end - s.acked for s in during]
    gaps = [b.t - a.t for a, b in zip(during, during[1:], strict=False)]
    return (f"{name}: {rate:,.0f} msg/s; lag p50 {pct(lags, 50):.0f} ms, p99 {pct(lags, 99):.0f} "
            f"ms, max {max(lags, default=float('nan')):.0f} ms over {len(lags)} samples "
            f"(every {1000 * sum(gaps) / max(1, len(gaps)):.0f} ms on average, longest gap "
            f"{1000 * max(gaps, default=0):.0f} ms); bytes behind p50 {pct(behind, 50) / 1e6:.1f} "
            f"MB, p99 {pct(behind, 99) / 1e6:.1f} MB, max {max(behind, default=0) / 1e6:.1f} MB")


def drain_line(sampler: Sampler, t_end: float) -> str:
    """How long after ``t_end`` the slave reached the master's end."""
    last = sampler.samples[-1]
    done = sampler.wait(lambda s: s.acked >= last.end, 300)
    if done is None:
        return "    drain: not caught up within 300 s"
    return f"    drain after the producer stopped: {done.t - t_end:.2f} s"


def disk_line(directory: Path, nbytes: int) -> str:
    """dd of ``nbytes`` (1 MiB blocks) with an fdatasync at its end, in ``directory``."""
    target = directory / "dd-test"
    mib = max(1, nbytes >> 20)
    t0 = time.monotonic()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mib}",
                    "conv=fdatasync"], capture_output=True, check=True)
    dt = time.monotonic() - t0
    target.unlink()
    return (f"disk: dd if=/dev/zero bs=1M count={mib} conv=fdatasync in {directory}: "
            f"{mib * 1.048576:.0f} MB in {dt:.2f} s = {mib * 1.048576 / dt:.0f} MB/s")


def page_cache_line(directory: Path, nbytes: int) -> str:
    """``pwrite`` of ``nbytes`` in 32 KiB writes into new fallocated files of
    256 MiB, kept until the last is written, no sync: what a slave's commit
    log costs the kernel as the page cache grows, without the broker. On a
    virtual machine whose host backs guest memory on first touch this is far
    slower than a copy (seen here: 0.3 CPU seconds per GB into pages freed
    just before, 4.6 into pages not touched for a while)."""
    chunk, size = b"\x5a" * (32 << 10), 256 << 20
    paths: list[Path] = []
    t0, c0 = time.monotonic(), time.process_time()
    written = 0
    try:
        while written < nbytes:
            path = directory / f"page-cache-test-{len(paths)}"
            paths.append(path)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.posix_fallocate(fd, 0, size)
                pos = 0
                while pos < size and written < nbytes:
                    os.pwrite(fd, chunk, pos)
                    pos += len(chunk)
                    written += len(chunk)
            finally:
                os.close(fd)
        dt, cpu = time.monotonic() - t0, time.process_time() - c0
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
    return (f"page cache: pwrite of {written / 1e6:.0f} MB into new files (32 KiB writes, "
            f"no sync): {written / 1e6 / dt:.0f} MB/s, {cpu / (written / 1e9):.2f} CPU seconds "
            f"per GB")


def wait_slave(ns: str, master: str, timeout: float = 30) -> None:
    async def go() -> None:
        async with MQAdmin(ns) as a:
            with trio.fail_after(timeout):
                while not (await a.broker_runtime_info(master))["ha"].get("slaves"):
                    await trio.sleep(0.1)
    trio.run(go)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def dirty_mb() -> str:
    """Dirty and Writeback of /proc/meminfo, in MB."""
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (f"dirty {int(info['Dirty'].split()[0]) / 1000:.0f} MB, writeback "
            f"{int(info['Writeback'].split()[0]) / 1000:.0f} MB")


def lag_study(seconds: float, sample_ms: float, catch_up_mb: int, pin_slave: bool) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if pin_slave and len(cpus) > 1:
        os.sched_setaffinity(0, cpus[:-1])  # this process and every daemon it starts
        print(f"pinned: the slave on CPU {cpus[-1]}, the rest on CPUs {cpus[:-1]}")
    with tempfile.TemporaryDirectory(prefix="bench-ha-", dir=os.environ.get("BENCH_DIR")) as d:
        c = Cluster(Path(d))
        try:
            ns = c.namesrv()
            m = c.broker("broker-a", ns.addr, brokerRole="ASYNC_MASTER",
                         flushDiskType="ASYNC_FLUSH", **PROPS)
            s = c.broker("broker-a-s", ns.addr, start=False, brokerName="broker-a", brokerId=1,
                         brokerRole="SLAVE", **PROPS)
            if pin_slave and len(cpus) > 1:
                s.preexec = lambda: os.sched_setaffinity(0, cpus[-1:])
            s.start()
            wait_slave(ns.addr, m.addr)
            bench(ns.addr, "W", "-b", str(BATCH), "-c", "20000")  # warm up both
            with Sampler(ns.addr, m.addr, sample_ms / 1000) as sampler:
                sampler.wait(lambda x: x.acked >= x.end, 60)
                # 1. full rate, for about ``seconds`` (the count from a 3 s probe)
                probe = bench(ns.addr, "P", "-b", str(BATCH), "-c", "100000")
                sampler.wait(lambda x: x.acked >= x.end, 120)
                count = int(probe["msgs_per_s"] * seconds) // BATCH * BATCH
                assert s.proc is not None and m.proc is not None
                cpu0 = cpu_seconds(s.proc.pid), cpu_seconds(m.proc.pid)
                full = bench(ns.addr, "B", "-s", str(SIZE), "-b", str(BATCH), "-c", str(count))
                t1 = time.monotonic()
                cpu1 = cpu_seconds(s.proc.pid), cpu_seconds(m.proc.pid)
                # mqbench's own start (process, routes) is not load: from its first second
                start = t1 - full["seconds"]
                print(f"full rate: mqbench producer -s {SIZE} -b {BATCH} -c {count}: "
                      f"{full['msgs_per_s']:,.0f} msg/s ({full['mb_per_s']:.1f} MB/s of bodies)")
                drained = drain_line(sampler, t1)  # every sample's end reached first
                print("    " + lag_line("full", sampler.samples, start, t1, full["msgs_per_s"]))
                print(drained)
                print(f"    CPU while producing: slave {(cpu1[0] - cpu0[0]) / (t1 - start):.2f}, "
                      f"master {(cpu1[1] - cpu0[1]) / (t1 - start):.2f} CPUs of "
                      f"{len(os.sched_getaffinity(0)) + (1 if pin_slave else 0)}")
                # 2. half rate
                half_rate = full["msgs_per_s"] / 2
                sampler.wait(lambda x: x.acked >= x.end, 120)
                half = pace(ns.addr, "H", half_rate, int(half_rate * seconds))
                t1 = time.monotonic()
                start = t1 - half["seconds"]
                print(f"half rate: paced producer at {half_rate:,.0f} msg/s: "
                      f"{half['msgs_per_s']:,.0f} msg/s, last batch {half['late_s'] * 1000:.0f} "
                      f"ms after its time")
                drained = drain_line(sampler, t1)
                print("    " + lag_line("half", sampler.samples, start, t1, half["msgs_per_s"]))
                print(drained)
                sampler.wait(lambda x: x.acked >= x.end, 120)
            # 3. catch-up
            catch_up(c, ns, m, s, catch_up_mb, sample_ms)
            print(page_cache_line(Path(d), catch_up_mb * 10**6))
            print(disk_line(Path(d), catch_up_mb * 10**6))
        finally:
            c.close()


def catch_up(c: Cluster, ns: Daemon, m: Daemon, s: Daemon, mb: int, sample_ms: float) -> None:
    s.stop()
    status0 = _status(ns.addr, m.addr)
    record = SIZE + 160  # about: a record's head, topic and properties
    count = mb * 10**6 // record // BATCH * BATCH
    produced = bench(ns.addr, "C", "-s", str(SIZE), "-b", str(BATCH), "-c", str(count))
    end = _status(ns.addr, m.addr)["commitLogMaxOffset"]
    behind = end - status0["commitLogMaxOffset"]
    dirty = dirty_mb()
    with Sampler(ns.addr, m.addr, sample_ms / 1000) as sampler:
        t0 = time.monotonic()
        s.start()
        started = time.monotonic()
        assert s.proc is not None
        cpu0 = cpu_seconds(s.proc.pid)
        first = sampler.wait(lambda x: x.acked >= 0, 120)
        done = sampler.wait(lambda x: x.acked >= end, 600)
        cpu = cpu_seconds(s.proc.pid) - cpu0
    if first is None or done is None:
        print("catch-up: the slave did not catch up within 600 s")
        return
    moved = end - first.acked
    print(f"catch-up: {behind / 1e6:.0f} MB behind ({produced['msgs_per_s']:,.0f} msg/s while "
          f"the slave was stopped): {behind / 1e6 / (done.t - t0):.0f} MB/s from the slave's "
          f"process start ({done.t - t0:.2f} s; up in {started - t0:.2f} s), "
          f"{moved / 1e6 / max(1e-9, done.t - first.t):.0f} MB/s from its first report "
          f"({moved / 1e6:.0f} MB in {done.t - first.t:.2f} s); the slave used {cpu:.2f} CPU "
          f"seconds from its start; at its start the page cache held {dirty}")


def _status(ns: str, addr: str) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with MQAdmin(ns) as a:
            return await a.broker_runtime_info(addr)
    return trio.run(go)


def roles() -> None:
    """Produce msg/s per role and flush type, the lag's bytes, single sync sends."""
    for role, flush, slave in [("ASYNC_MASTER", "ASYNC_FLUSH", False),
                               ("ASYNC_MASTER", "SYNC_FLUSH", False),
                               ("ASYNC_MASTER", "ASYNC_FLUSH", True),
                               ("ASYNC_MASTER", "SYNC_FLUSH", True),
                               ("SYNC_MASTER", "ASYNC_FLUSH", True),
                               ("SYNC_MASTER", "SYNC_FLUSH", True)]:
        with tempfile.TemporaryDirectory() as d:
            c = Cluster(Path(d))
            try:
                ns = c.namesrv()
                m = c.broker("broker-a", ns.addr, brokerRole=role, flushDiskType=flush, **PROPS)
                if slave:
                    c.broker("broker-a-s", ns.addr, brokerName="broker-a", brokerId=1,
                             brokerRole="SLAVE", **PROPS)
                    wait_slave(ns.addr, m.addr)
                with Sampler(ns.addr, m.addr, 0.1) as sampler:
                    r = bench(ns.addr, "B", "-s", str(SIZE), "-b", str(BATCH), "-c", "200000")
                print(f"{role:13} {flush:11} slave={slave}: {r['msgs_per_s']:,.0f} msg/s")
                behind = [x.end - x.acked for x in sampler.samples if x.acked >= 0]
                if behind:
                    print(f"    bytes behind under load: max {max(behind)}, "
                          f"median {pct(behind, 50):.0f}")
                if role == "SYNC_MASTER":
                    r = bench(ns.addr, "S", "-s", str(SIZE), "-b", "1", "-w", "1", "-c", "5000")
                    print(f"    single sync sends: {r['msgs_per_s']:,.0f} msg/s, "
                          f"latency {r['latency_us']}")
            finally:
                c.close()


@click.group(invoke_without_command=True)
@click.option("--seconds", type=float, default=20.0, show_default=True,
              help="How long each producer runs.")
@click.option("--sample-ms", type=float, default=20.0, show_default=True)
@click.option("--catch-up-mb", type=int, default=1000, show_default=True)
@click.option("--pin-slave", is_flag=True,
              help="The slave alone on the last CPU, everything else on the others (a slave "
                   "on its own host, as deployed); default: no pinning.")
@click.option("--roles", "by_role", is_flag=True, help="The table per role instead.")
@click.pass_context
def main(ctx: click.Context, seconds: float, sample_ms: float, catch_up_mb: int,
         pin_slave: bool, by_role: bool) -> None:
    if ctx.invoked_subcommand is not None:
        return
    if by_role:
        roles()
    else:
        lag_study(seconds, sample_ms, catch_up_mb, pin_slave)


@main.command("store")
@click.option("--records", type=int, default=64_000, show_default=True)
@click.option("--transfer", type=int, default=32 * 1024, show_default=True,
              help="Bytes per transfer (haTransferBatchSize).")
def store_command(records: int, transfer: int) -> None:
    """A slave store alone, no network: HAClient.on_transfer of a master
    store's log (1 KiB messages with a UNIQ_KEY, batches of 32 over 8 queues)
    in transfers of TRANSFER bytes; records/s and MB/s of the appends and
    their dispatch."""
    import uuid

    from broker.store import MessageExtBrokerInner
    from broker.store.ha.ha_client import HAClient
    from protocol.message import properties_to_string
    from tests.broker.store.helpers import make_config, open_store

    with tempfile.TemporaryDirectory() as d:
        stores = []
        for name in ("m", "s"):
            cfg = make_config(Path(d) / name, cl_size=256 << 20, cq_entries=300_000)
            cfg.max_message_size = 4 << 20
            stores.append(open_store(cfg))
        master, slave = stores
        body = b"x" * SIZE
        for b in range(records // BATCH):
            msgs = []
            for _ in range(BATCH):
                uniq = uuid.uuid4().hex.upper()
                msgs.append(MessageExtBrokerInner(
                    topic="B", queue_id=b % 8, flag=0, body=body,
                    properties_string=properties_to_string({"UNIQ_KEY": uniq}), uniq_key=uniq,
                    born_timestamp=1, born_host="10.0.0.1:1234"))
            master.put_messages(msgs)
        end = master.get_max_phy_offset()
        transfers = []
        offset = 0
        while offset < end:
            data = master.get_raw(offset, transfer)
            assert data
            transfers.append((offset, data))
            offset += len(data)
        client = HAClient(slave, max_record_size=256 << 20)
        t0 = time.perf_counter()
        for offset, data in transfers:
            client.on_transfer(offset, data, 0.0)
        dt = time.perf_counter() - t0
        assert slave.reput_offset == slave.get_max_phy_offset() == end
        print(f"{records} records, {end / 1e6:.0f} MB in {len(transfers)} transfers of "
              f"{transfer} bytes: {dt:.2f} s = {records / dt:,.0f} records/s, "
              f"{end / 1e6 / dt:.0f} MB/s")
        master.shutdown()
        slave.shutdown()


@contextmanager
def ha_pair(role: str, master: dict[str, Any] | None = None,
            slave: dict[str, Any] | None = None) -> Iterator[tuple[Daemon, Daemon, Daemon]]:
    """A name server, a master of ``role`` and its slave (PROPS, plus the
    extra keys of each) in a temporary directory, the slave replicating:
    (name server, master, slave); all stopped after."""
    with tempfile.TemporaryDirectory() as d:
        c = Cluster(Path(d))
        try:
            ns = c.namesrv()
            m = c.broker("broker-a", ns.addr, brokerRole=role, **{**PROPS, **(master or {})})
            s = c.broker("broker-a-s", ns.addr, brokerName="broker-a", brokerId=1,
                         brokerRole="SLAVE", **{**PROPS, **(slave or {})})
            wait_slave(ns.addr, m.addr)
            yield ns, m, s
        finally:
            c.close()


@main.command("frozen")
@click.option("--sends", type=int, default=10, show_default=True)
@click.option("--silent-ms", type=int, default=1000, show_default=True,
              help="haSlaveSilentMs (0: off, the wait RocketMQ has).")
def frozen_command(sends: int, silent_ms: int) -> None:
    """SYNC_MASTER with its slave frozen (SIGSTOP): how long each of SENDS
    sequential sends waits, and what it is answered."""
    with ha_pair("SYNC_MASTER", {"haSlaveSilentMs": silent_ms}) as (ns, _m, s):
        out = trio.run(_frozen_sends, ns.addr, s, sends)
        print(f"SYNC_MASTER, slave frozen, haSlaveSilentMs={silent_ms}: " + ", ".join(
            f"{status} {took * 1000:.0f} ms" for status, took in out))


async def _frozen_sends(ns: str, slave: Daemon, sends: int) -> list[tuple[str, float]]:
    from client import Message, Producer

    async with MQAdmin(ns) as admin:
        await admin.create_topic("Frozen", cluster="DefaultCluster")
    out: list[tuple[str, float]] = []
    async with Producer("bench-frozen", ns, retry_times_when_send_failed=0,
                        send_msg_timeout=10.0) as p:
        for _ in range(20):  # the slave acknowledging: SEND_OK
            if (await p.send(Message("Frozen", b"warm"))).send_status.name == "SEND_OK":
                break
            await trio.sleep(0.5)
        slave.freeze()
        try:
            for i in range(sends):
                t0 = time.perf_counter()
                r = await p.send(Message("Frozen", f"frozen-{i}".encode()))
                out.append((r.send_status.name, time.perf_counter() - t0))
        finally:
            slave.thaw()
    return out


@main.command("redeliver")
@click.option("--messages", type=int, default=20_000, show_default=True)
def redeliver_command(messages: int) -> None:
    """Offsets across a master's absence: MESSAGES are sent, the master stops,
    a push consumer group consumes them all from the slave (committing there)
    and stops, the master starts again (same store), the group starts again:
    how many messages it receives a second time."""
    with ha_pair("ASYNC_MASTER", slave={"slaveSyncInterval": 1000}) as (ns, m, s):
        first, again = trio.run(_redeliver, ns.addr, m, s, messages)
        print(f"{messages} messages: {first} consumed from the slave while the master "
              f"was down; after the master returned the group received {again} again")


async def _redeliver(ns: str, master: Daemon, slave: Daemon, messages: int
                     ) -> tuple[int, int]:
    from client import (
        ConsumeConcurrentlyStatus,
        ConsumeFromWhere,
        Message,
        Producer,
        PushConsumer,
    )

    topic, group = "Redeliver", "redeliver-group"
    async with MQAdmin(ns) as admin:
        await admin.create_topic(topic, cluster="DefaultCluster")
        async with Producer("bench-redeliver", ns) as p:
            for i in range(0, messages, 100):
                await p.send_batch([Message(topic, f"m-{j}".encode())
                                    for j in range(i, min(i + 100, messages))])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the slave holds everything and the topic
            st_m = await admin.broker_runtime_info(master.addr)
            st_s = await admin.broker_runtime_info(slave.addr)
            if st_s["commitLogMaxOffset"] == st_m["commitLogMaxOffset"] and st_s["topics"] >= \
                    st_m["topics"]:
                break
            await trio.sleep(0.2)
        master.stop()

        async def consume(want: int, idle_s: float) -> int:
            got = 0
            last = time.monotonic()

            def on(msgs: list, _ctx: object) -> ConsumeConcurrentlyStatus:
                nonlocal got, last
                got += len(msgs)
                last = time.monotonic()
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
            consumer = PushConsumer(group, namesrv_addr=ns,
                                    consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
            consumer.subscribe(topic, "*")
            consumer.register_message_listener(on)
            async with consumer:
                end = time.monotonic() + 120
                while time.monotonic() < end:
                    await trio.sleep(0.2)
                    if (want and got >= want) or (time.monotonic() - last > idle_s
                                                  and (got or time.monotonic() - last > 20)):
                        break
            return got

        first = await consume(messages, 5.0)
        master.start(timeout=60)
        again = await consume(0, 5.0)
    return first, again


@main.command("catch-up")
@click.option("--messages", type=int, default=900_000, show_default=True)
def catch_up_command(messages: int) -> None:
    """Catch-up alone, on new stores: the slave stopped, MESSAGES of 1 KiB sent
    in batches of 32, everything synced to disk, the slave started; MB/s from
    its first report to the master's end (the main run measures it after the
    lag phases, with the page cache full of their files)."""
    with ha_pair("ASYNC_MASTER") as (ns, m, s):
        s.stop()
        r = bench(ns.addr, "T", "-s", str(SIZE), "-b", str(BATCH), "-c", str(messages))
        end = _status(ns.addr, m.addr)["commitLogMaxOffset"]
        os.sync()
        assert m.proc is not None
        m_cpu0 = cpu_seconds(m.proc.pid)
        s.start()
        assert s.proc is not None
        t0: float | None = None
        a0 = 0
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            slaves = _status(ns.addr, m.addr)["ha"]["slaves"]
            if slaves and t0 is None:
                t0, a0 = time.monotonic(), slaves[0]["ackedOffset"]
            if slaves and slaves[0]["ackedOffset"] >= end:
                break
            time.sleep(0.05)
        assert t0 is not None
        dt = time.monotonic() - t0
        print(f"produced {r['mb_per_s']:.0f} MB/s without a slave; catch-up "
              f"{(end - a0) / 1e6:.0f} MB in {dt:.2f} s = {(end - a0) / 1e6 / dt:.0f} MB/s; "
              f"CPU seconds: slave {cpu_seconds(s.proc.pid):.2f} (from its start), "
              f"master {cpu_seconds(m.proc.pid) - m_cpu0:.2f}")
        print(page_cache_line(Path(tempfile.gettempdir()), end - a0))


@main.command("pace")
@click.argument("ns")
@click.argument("topic")
@click.argument("rate", type=float)
@click.argument("count", type=int)
def pace_command(ns: str, topic: str, rate: float, count: int) -> None:
    """(internal) the paced producer; prints its JSON result."""
    print(json.dumps(trio.run(_paced, ns, topic, rate, count)))


if __name__ == "__main__":
    shutil.which("dd") or sys.exit("bench_ha needs dd")
    main()
