"""Real etcd processes for the etcd backend's tests: one member or a small cluster on
127.0.0.1 with free client and peer ports, data in a tmp directory, stopped (and
waited for) after. Tests that need one skip, saying why, when there is no etcd
binary (``make etcd`` installs Debian's etcd-server as root)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.cluster import free_port
from tests.waits import freeze, wait_until_sync

ETCD = shutil.which("etcd")
needs_etcd = pytest.mark.skipif(
    ETCD is None, reason="no etcd binary on PATH (make etcd installs etcd-server as root on Debian)")


@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    stopped: bool = False  # SIGSTOP'd

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def start(self, initial_cluster: str, token: str) -> None:
        assert ETCD is not None
        args = [
            ETCD, "--name", self.name, "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
            "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", initial_cluster, "--initial-cluster-state", "new",
            "--initial-cluster-token", token,
            # small and quick: tests write a few keys
            "--heartbeat-interval", "50", "--election-timeout", "500",
            "--quota-backend-bytes", str(64 * 1024 * 1024),
        ]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"etcd {self.name} exited with {self.proc.returncode}: "
                               f"{self.log_path.read_text()[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.client_port, timeout=1)
            try:
                conn.request("GET", "/health")
                doc = json.loads(conn.getresponse().read())
            finally:
                conn.close()
        except (OSError, ValueError):
            return False
        return doc.get("health") == "true"

    def pause(self) -> None:
        assert self.proc is not None
        freeze(self.proc.pid)  # every thread stopped, not only signalled
        self.stopped = True

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.stopped = False

    def kill(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.stopped:
            self.resume()
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.stopped:
            self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@dataclass
class EtcdCluster:
    members: list[EtcdMember] = field(default_factory=list)

    @property
    def endpoints(self) -> str:
        return ";".join(m.endpoint for m in self.members)

    def start(self, timeout: float = 30.0) -> None:
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        token = f"test-{self.members[0].client_port}"
        for m in self.members:
            m.start(initial, token)
        wait_until_sync(lambda: all(m.healthy() for m in self.members), timeout,
                        "every etcd member healthy", interval=0.1)

    def stop(self) -> None:
        for m in self.members:
            m.stop()


def make_cluster(tmp: Path, size: int) -> EtcdCluster:
    cluster = EtcdCluster()
    ports: list[int] = []
    while len(ports) < 2 * size:
        port = free_port(1)
        if port not in ports:
            ports.append(port)
    for i in range(size):
        client_port, peer_port = ports[2 * i], ports[2 * i + 1]
        member_dir = tmp / f"etcd{i}"
        member_dir.mkdir(parents=True)
        cluster.members.append(EtcdMember(f"m{i}", client_port, peer_port, member_dir / "data",
                                          member_dir / "etcd.log"))
    return cluster
