"""What the doc tests run blocks against: a working directory that looks like a
checkout, and daemon pairs started once for the session (the plain pair by every
block that runs; the ACL pair only when a block asks for it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, Daemon, free_port
from tests.integration.log_scan import LogWatch, report

REPO = Path(__file__).resolve().parents[2]

# Entries of the checkout a block's working directory does not link to: what a block
# writes must land in the test's directory, never in the checkout.
NOT_LINKED = frozenset({".git", ".venv", ".data", ".mypy_cache", ".ruff_cache",
                        ".pytest_cache"})

# The ACL pair's accounts: RocketMQ's sample accounts (docs/security.md shows them).
ACL_FILE = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TopicA=DENY
      - TopicB=PUB|SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""


@dataclass
class DaemonSet:
    """A name server and a broker (``broker-a`` of ``DefaultCluster``), and what the
    pages' addresses become for blocks run against them."""

    cluster: Cluster
    namesrv: Daemon
    broker: Daemon
    replacements: dict[str, str]
    watch: LogWatch = field(default_factory=LogWatch)

    def logs(self) -> dict[Path, str]:
        return {d.log_path: d.name for d in self.cluster.daemons}

    def check_logs(self) -> None:
        """Fail if a daemon logged a traceback since the last check."""
        names = self.logs()
        found = self.watch.new_tracebacks(names)
        if found:
            pytest.fail(report(found, names), pytrace=False)


def start_set(root: Path, **broker_props: object) -> DaemonSet:
    cluster = Cluster(root)
    try:
        ns_metrics, broker_metrics = free_port(1), free_port(1)
        ns = cluster.namesrv(metricsPort=ns_metrics)
        broker = cluster.broker("broker-a", ns.addr, True, metricsPort=broker_metrics,
                                **broker_props)
    except BaseException:
        cluster.close()
        raise
    return DaemonSet(cluster, ns, broker, {
        "127.0.0.1:9876": ns.addr,
        "127.0.0.1:9877": f"127.0.0.1:{ns_metrics}",
        "127.0.0.1:10911": broker.addr,
        "127.0.0.1:10913": f"127.0.0.1:{broker_metrics}",
    })


@dataclass
class DocEnv:
    """The working directory and environment blocks run in, and the daemon sets."""

    workdir: Path
    env: dict[str, str]
    root: Path
    sets: dict[str, DaemonSet] = field(default_factory=dict)

    def daemons(self, name: str) -> DaemonSet:
        if name not in self.sets:
            root = self.root / name
            root.mkdir()
            if name == "plain":
                # SQL92 filters are served (docs/filters.md); everything else as shipped
                self.sets[name] = start_set(root, enablePropertyFilter="true")
            elif name == "acl":
                acl = root / "plain_acl.yml"
                acl.write_text(ACL_FILE)
                self.sets[name] = start_set(root, aclEnable="true", aclPlainFile=acl)
            else:
                raise ValueError(f"no daemon set {name!r}")
        return self.sets[name]

    def close(self) -> None:
        """Stop every set (an orderly stop), then fail if a daemon logged a traceback
        while stopping."""
        for s in self.sets.values():
            s.cluster.close()
        for s in self.sets.values():
            s.check_logs()


def make_workdir(workdir: Path) -> None:
    """``workdir`` links to every entry of the checkout, so a block's relative paths
    (``deploy/...``, ``.venv/bin/...``) work as in a checkout, while what it writes
    stays in ``workdir``; ``.venv`` is the venv the tests run in."""
    for entry in REPO.iterdir():
        if entry.name not in NOT_LINKED:
            (workdir / entry.name).symlink_to(entry)
    (workdir / ".venv").symlink_to(Path(sys.prefix))
    (workdir / "tmp").mkdir()
    (workdir / "home").mkdir()
    (workdir / "blocks").mkdir()


def block_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ROCKETMQ_", "PYTEST_")) and k not in ("NAMESRV_ADDR",)}
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    env["HOME"] = str(workdir / "home")
    return env


@pytest.fixture(scope="session")
def doc_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocEnv]:
    workdir = tmp_path_factory.mktemp("docs-work")
    make_workdir(workdir)
    env = DocEnv(workdir, block_env(workdir), tmp_path_factory.mktemp("docs-daemons"))
    try:
        yield env
    finally:
        env.close()
