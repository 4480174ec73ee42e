"""What access control and TLS cost: the same sends with ACL off, ACL on, ACL + TLS.

    .venv/bin/python -m bench.security [--count N] [--single N] [--json PATH]

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
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import structlog

from bench.all import ASYNC, Pair, mqbench_argv, parse_json_lines
from protocol.trio.logs import configure_logging

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


Certs = tuple[Path, Path, Path]  # CA, server certificate, server key


def make_certs(d: Path) -> Certs:
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


def tls_options(setup: Setup, certs: Certs | None) -> list[str]:
    """A daemon's TLS keys for ``setup`` (as ``-o KEY=VALUE`` pairs)."""
    if not setup.tls:
        return ["-o", "tlsMode=disabled"]
    assert certs is not None
    ca, cert, key = certs
    return ["-o", "tlsMode=enforcing", "-o", f"tls.server.certPath={cert}",
            "-o", f"tls.server.keyPath={key}"]


def client_flags(setup: Setup, certs: Certs | None) -> list[str]:
    """mqbench's options (before the subcommand) for ``setup``."""
    flags: list[str] = []
    if setup.acl:
        flags += ["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]
    if setup.tls:
        assert certs is not None
        flags += ["--tls", "--tls-ca", str(certs[0])]
    return flags


def secured_pair(root: Path, setup: Setup, certs: Certs | None) -> Pair:
    """An ASYNC_FLUSH pair (bench_all's) with ``setup``'s ACL and TLS settings."""
    root.mkdir(parents=True, exist_ok=True)
    tls = tls_options(setup, certs)
    conf = root / "namesrv.properties"
    conf.write_text("\n".join(o for o in tls if o != "-o") + "\n")
    broker_options = list(tls)
    admin_kwargs: dict[str, Any] = {}
    if setup.tls:
        assert certs is not None
        broker_options += ["-o", "tls.enable=true", "-o", f"tls.client.trustCertPath={certs[0]}"]
        admin_kwargs.update(use_tls=True, tls_ca_path=str(certs[0]))
    if setup.acl:
        acl = root / "plain_acl.yml"
        acl.write_text(PLAIN_ACL)
        broker_options += ["-o", "aclEnable=true", "-o", f"aclPlainFile={acl}"]
        admin_kwargs.update(access_key=ACCESS_KEY, secret_key=SECRET_KEY)
    return Pair(root, ASYNC, namesrv_args=["-c", str(conf)], broker_options=broker_options,
                admin_kwargs=admin_kwargs)


def run_mqbench(pair: Pair, setup: Setup, flags: Sequence[str], args: Sequence[str]
                ) -> dict[str, Any]:
    argv = [*mqbench_argv(), *flags, *args, "-n", pair.namesrv, "--json"]
    shown = " ".join(["mqbench", *flags, *args])
    log.info("running", setup=setup.name, command=shown)
    entry: dict[str, Any] = {"setup": setup.name, "command": shown}
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
            mine = certs if setup.tls else None
            pair = secured_pair(root / setup.name.replace("+", "-"), setup, mine)
            flags = client_flags(setup, mine)
            try:
                pair.start()
                batched = run_mqbench(pair, setup, flags, ["producer", "-t", "BenchSecTopic", "-s", "1024",
                                             "-b", "32", "-w", "16", "-c", str(count)])
                one = run_mqbench(pair, setup, flags, ["producer", "-t", "BenchSecSingle", "-s", "1024",
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
