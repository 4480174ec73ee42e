"""deploy/controller-3r-etcd starts as ``make cluster DEPLOY=controller-3r-etcd`` does
(deploy/run_cluster.py): etcd, the name server, three mqcontrollers, three brokers. A
copy with free ports: one controller leads, the brokers elect a master through it and
all three end up in its SyncStateSet; SIGTERM stops everything."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from client.admin import MQAdminError
from client.admin_controller import ControllerAdmin
from tests.controller.etcd_server import needs_etcd
from tests.integration.cluster import free_port
from tests.waits import wait_until

pytestmark = needs_etcd

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENT = ROOT / "deploy" / "controller-3r-etcd"
# the fixed ports of the deployment, and how many consecutive ones each needs
PORTS = {9876: 1, 9878: 1, 9879: 1, 9880: 1, 10911: 2, 10921: 2, 10931: 2, 2379: 1, 2380: 1}


def copy_with_free_ports(dest: Path) -> dict[int, int]:
    mapping: dict[int, int] = {}
    for old, span in PORTS.items():
        new = free_port(span)
        while new in mapping.values() or new + span - 1 in mapping.values():
            new = free_port(span)
        mapping[old] = new
    dest.mkdir()
    for f in DEPLOYMENT.iterdir():
        text = re.sub(r"\b(\d{4,5})\b",
                      lambda m: str(mapping.get(int(m.group(1)), m.group(1))), f.read_text())
        (dest / f.name).write_text(text)
    return mapping


async def test_controller_3r_etcd_starts_and_elects(tmp_path: Path) -> None:
    ports = copy_with_free_ports(tmp_path / "deployment")
    controllers = [f"127.0.0.1:{ports[p]}" for p in (9878, 9879, 9880)]
    brokers = {f"127.0.0.1:{ports[p]}" for p in (10911, 10921, 10931)}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROCKETMQ_LOG_DIR": str(tmp_path / "logs")}
    out = open(tmp_path / "cluster.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "deploy.run_cluster", "deployment"],
                            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        async with ControllerAdmin() as ctl:
            async def whole() -> bool:
                if proc.poll() is not None:
                    raise AssertionError(f"run_cluster exited ({proc.returncode}): "
                                         f"{(tmp_path / 'cluster.log').read_text()[-3000:]}")
                for c in controllers:
                    try:
                        table = (await ctl.sync_state_data(c, ["broker-a"])).replicas_info_table
                    except (MQAdminError, OSError):
                        continue
                    info = table.get("broker-a")
                    if info is not None and info.master_address in brokers and {
                            r.broker_address for r in info.in_sync_replicas} == brokers:
                        return True
                return False

            await wait_until(whole, 120, "a master elected, all three replicas in sync")
            leaders = [(await ctl.metadata(c)).get("isLeader") for c in controllers]
            assert leaders.count(True) == 1, leaders
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        out.close()
    assert code == 0, (tmp_path / "cluster.log").read_text()[-3000:]
    log = (tmp_path / "cluster.log").read_text()
    assert "[etcd]" in log and "[controller-2]" in log and "[broker-a-2]" in log
