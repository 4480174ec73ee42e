"""What access control and TLS cost: the same sends with ACL off, ACL on, ACL + TLS.

    .venv/bin/python -m deploy.bench_security [--count N] [--single N] [--json PATH]

One run, three fresh name server + broker pairs (ASYNC_FLUSH, free 127.0.0.1
ports, temporary stores), started one after another:

    off       no ACL, plain TCP
    acl       broker aclEnable=true (plain_acl.yml with one PUB|SUB account);
              mqbench signs every request (--access-key/--secret-key)
    acl+tls   as acl, and both daemons tlsMode=enforcing with throwaway
              certificates made by ``openssl`` for this run; mqbench --tls --tls-ca

Against each: ``mqbench producer -s 1024 -b 32 -w 16 -c COUNT`` (batched
produce msg/s) and ``mqbench producer -s 1024 -b 1 -w 1 -c SINGLE`` (single
sync send latency p50/p99). Prints one table with the command of each figure.
The daemons are stopped and the temporary directory removed whatever happens.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import structlog
import trio

from deploy.bench_all import (
    START_TIMEOUT,
    accepts,
    free_port,
    mqbench_argv,
    parse_json_lines,
    stop_process,
    wait_until,
)
from protocol.logs import configure_logging

log = structlog.get_logger("bench_security")

ACCESS_KEY = "benchuser"
SECRET_KEY = "bench-secret-1"
STEP_TIMEOUT = 900.0

PLAIN_ACL = f"""globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ACCESS_KEY}
    secretKey: {SECRET_KEY}
    whiteRemoteAddress:
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""


@dataclass(frozen=True)
class Setup:
    name: str
    acl: bool
    tls: bool


SETUPS = (Setup("off", False, False), Setup("acl", True, False), Setup("acl+tls", True, True))


def make_certs(d: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 (openssl). Returns (ca, cert, key)."""
    if shutil.which("openssl") is None:
        raise click.ClickException("openssl is needed for the ACL + TLS figures")
    d.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=bench-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    return d / "ca.pem", d / "server.pem", d / "server.key"


@dataclass
class SecuredPair:
    root: Path
    setup: Setup
    certs: tuple[Path, Path, Path] | None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    namesrv_port: int = 0
    broker_port: int = 0

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def tls_options(self) -> list[str]:
        if not self.setup.tls:
            return ["-o", "tlsMode=disabled"]
        assert self.certs is not None
        ca, cert, key = self.certs
        return ["-o", "tlsMode=enforcing", "-o", f"tls.server.certPath={cert}",
                "-o", f"tls.server.keyPath={key}"]

    def client_flags(self) -> list[str]:
        """mqbench's options (before the subcommand) for this setup."""
        flags: list[str] = []
        if self.setup.acl:
            flags += ["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]
        if self.setup.tls:
            assert self.certs is not None
            flags += ["--tls", "--tls-ca", str(self.certs[0])]
        return flags

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with open(self.root / f"{name}.log", "ab") as out:
            args = [*args, "--log-dir", str(self.root / "logs" / name), "--log-level", "WARNING"]
            proc = subprocess.Popen([sys.executable, "-m", *args], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        conf = self.root / "namesrv.properties"
        conf.write_text("\n".join(o for o in self.tls_options() if o != "-o") + "\n")
        self.namesrv_port = free_port()
        ns = self._spawn("namesrv", ["namesrv.cli", "--port", str(self.namesrv_port),
                                     "-c", str(conf)])
        wait_until("name server listening", lambda: accepts(self.namesrv_port), START_TIMEOUT,
                   lambda: ns.poll() is None)
        self.broker_port = free_port()
        ha_port = free_port()
        while ha_port == self.broker_port:
            ha_port = free_port()
        options = ["-o", f"listenPort={self.broker_port}", "-o", f"haListenPort={ha_port}",
                   "-o", f"storePathRootDir={self.root / 'store'}", *self.tls_options()]
        if self.setup.tls:
            assert self.certs is not None
            options += ["-o", "tls.enable=true", "-o", f"tls.client.trustCertPath={self.certs[0]}"]
        if self.setup.acl:
            acl = self.root / "plain_acl.yml"
            acl.write_text(PLAIN_ACL)
            options += ["-o", "aclEnable=true", "-o", f"aclPlainFile={acl}"]
        broker = self._spawn("broker", ["broker.cli", "-n", self.namesrv, *options])

        def alive() -> bool:
            return broker.poll() is None

        wait_until("broker listening", lambda: accepts(self.broker_port), START_TIMEOUT, alive)
        wait_until("broker registered with the name server", self.routed, START_TIMEOUT, alive)
        log.info("pair started", setup=self.setup.name, namesrv=self.namesrv,
                 broker=f"127.0.0.1:{self.broker_port}")

    def routed(self) -> bool:
        from client.admin import MQAdmin

        addr = f"127.0.0.1:{self.broker_port}"
        kw: dict[str, Any] = {}
        if self.setup.acl:
            kw.update(access_key=ACCESS_KEY, secret_key=SECRET_KEY)
        if self.setup.tls:
            assert self.certs is not None
            kw.update(use_tls=True, tls_ca_path=str(self.certs[0]))

        async def go() -> bool:
            async with MQAdmin(self.namesrv, timeout=3.0, **kw) as admin:
                route = await admin.topic_route("TBW102")
            return any(addr in bd.broker_addrs.values() for bd in route.broker_datas)

        try:
            return trio.run(go)
        except Exception:  # noqa: BLE001 - not yet
            return False

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc)
        self.procs.clear()

    def log_tail(self, chars: int = 2000) -> str:
        parts = []
        for name in ("namesrv", "broker"):
            path = self.root / f"{name}.log"
            if path.exists():
                parts.append(f"--- {name}.log ---\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)


def run_mqbench(pair: SecuredPair, args: Sequence[str]) -> dict[str, Any]:
    argv = [*mqbench_argv(), *pair.client_flags(), *args, "-n", pair.namesrv, "--json"]
    shown = " ".join(["mqbench", *pair.client_flags(), *args])
    log.info("running", setup=pair.setup.name, command=shown)
    entry: dict[str, Any] = {"setup": pair.setup.name, "command": shown}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        entry["error"] = f"timed out after {STEP_TIMEOUT:g}s"
        return entry
    results = parse_json_lines(proc.stdout)
    entry["result"] = results[-1] if results else None
    if proc.returncode != 0 or not results:
        entry["error"] = f"exit {proc.returncode}: {proc.stderr[-1500:]}"
        log.error("mqbench failed", command=shown, stderr=proc.stderr[-1500:],
                  daemons=pair.log_tail())
    return entry


def run(count: int, single: int, tmp_dir: str | None) -> list[dict[str, Any]]:
    root = Path(tempfile.mkdtemp(prefix="bench-security-", dir=tmp_dir))
    out: list[dict[str, Any]] = []
    try:
        certs = make_certs(root / "certs")
        for setup in SETUPS:
            pair = SecuredPair(root / setup.name.replace("+", "-"), setup,
                               certs if setup.tls else None)
            try:
                pair.start()
                batched = run_mqbench(pair, ["producer", "-t", "BenchSecTopic", "-s", "1024",
                                             "-b", "32", "-w", "16", "-c", str(count)])
                one = run_mqbench(pair, ["producer", "-t", "BenchSecSingle", "-s", "1024",
                                         "-b", "1", "-w", "1", "-c", str(single)])
                out.append({"setup": setup.name, "batched": batched, "single": one})
            finally:
                pair.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def _fmt(v: Any, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| setup | batched produce msg/s | single send p50 / p99 µs | commands |",
             "|---|---|---|---|"]
    for r in rows:
        b = (r["batched"].get("result") or {})
        s = (r["single"].get("result") or {})
        lat = s.get("latency_us") or {}
        lines.append(
            f"| {r['setup']} | {_fmt(b.get('msgs_per_s'))} | "
            f"{_fmt(lat.get('p50'))} / {_fmt(lat.get('p99'))} | "
            f"`{r['batched']['command']}`; `{r['single']['command']}` |")
    return "\n".join(lines)


@click.command()
@click.option("--count", default=200_000, show_default=True, help="Batched messages per setup.")
@click.option("--single", default=10_000, show_default=True, help="Single sends per setup.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the raw results to this file.")
@click.option("--tmp-dir", default=None, help="Where the temporary stores go.")
@click.option("--log-level", default="INFO", show_default=True)
def main(count: int, single: int, json_path: Path | None, tmp_dir: str | None,
         log_level: str) -> None:
    """ACL off, ACL on, ACL + TLS: batched produce and single-send latency, one run."""
    configure_logging(log_level)
    rows = run(count, single, tmp_dir)
    if json_path is not None:
        json_path.write_text(json.dumps(rows, indent=2) + "\n")
    click.echo(render(rows))
    failed = [e["command"] for r in rows for e in (r["batched"], r["single"]) if "error" in e]
    if failed:
        raise click.ClickException("failed: " + "; ".join(failed))


if __name__ == "__main__":
    main()
