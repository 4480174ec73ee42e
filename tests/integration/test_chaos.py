"""bench/chaos on a real replica group (SYNC_MASTER, SYNC_FLUSH, one slave): a
short schedule (kill -9 of the slave, SIGSTOP of the master, kill -9 of the
master and a restart) loses no acknowledged message, every fault is injected
and healed, and clients and the slave reach the master only through the
checker's proxies."""

from __future__ import annotations

import json
from pathlib import Path

from bench.chaos.accounting import Step, read_faults
from bench.chaos.group import PROXY_HOST, ReplicaGroup
from bench.chaos.runner import Checker, RunConfig
from tests.integration.cluster import Cluster

STEPS = [Step("kill-slave", 3.0), Step("stop-master", 3.0), Step("kill-master", 3.0)]


async def test_short_schedule_loses_nothing_acknowledged(cluster: Cluster,
                                                         tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    checker = Checker(records, RunConfig(steps=STEPS, calm=3.0, producers=3, rate=150.0,
                                         consumers=2, drain=60.0), cluster)
    report = await checker.run()  # bounded inside (trio.fail_after)

    assert report.lost == [], report.lost[:20]
    assert [(f.name, f.injected, f.healed) for f in report.faults] == [
        (s.fault, True, True) for s in STEPS]
    assert [f.name for f in read_faults(records / "faults.jsonl")] == [s.fault for s in STEPS]
    # load ran through every fault's window and writes came back after each
    assert report.acknowledged > 500, report
    assert all(f.write_unavailable is not None for f in report.faults), report.faults
    # the master advertised its proxies: the producers' SEND_OKs name its queues, the
    # remoting and HA proxies (and the master's own to the name server) carried connections
    assert isinstance(checker.group, ReplicaGroup)
    assert checker.group.master_addr.startswith(f"{PROXY_HOST}:")
    assert all(p.accepted > 0 for p in checker.group.proxies), [
        (p.name, p.accepted) for p in checker.group.proxies]
    first = json.loads((records / "acked.jsonl").read_text().splitlines()[0])
    assert first["queue"].startswith("broker-a:")
