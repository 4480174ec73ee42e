"""Start a name server and every broker of a deployment directory, locally.

    python -m deploy.run_cluster deploy/2m-2s-async      # or: make cluster
    python -m deploy.run_cluster deploy/2m-2s-sync -o mapedFileSizeCommitLog=67108864
    python -m deploy.run_cluster deploy/controller-3r    # make cluster DEPLOY=controller-3r
    python -m deploy.run_cluster deploy/controller-3r-etcd   # etcd + three mqcontrollers

Each daemon runs as its own process (``mqnamesrv -c deploy/namesrv.properties``,
``mqbroker -c <dir>/<broker>.properties``), masters first, their logs prefixed
with the daemon's name on this terminal. SIGINT or SIGTERM stops them all
cleanly (slaves first); if one exits on its own, the rest are stopped too.
A deployment may hold its own ``namesrv.properties``, ``controller-*.properties``
(each an ``mqcontroller``, started after the name server) and ``etcd.conf.yml``
(``etcd --config-file``, started first and waited for: the controllers keep
their state there).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import click

BIN = Path(sys.executable).parent
# a deployment's own name server config (deploy/controller-3r: the controller inside it)
NAMESRV_FILE = "namesrv.properties"
CONTROLLER_GLOB = "controller-*.properties"  # mqcontroller processes of the deployment
ETCD_FILE = "etcd.conf.yml"  # an etcd the controllers keep their state in
ETCD_START_TIMEOUT = 30.0


def _brokers(directory: Path) -> list[Path]:
    """Masters before slaves (``*-s.properties``), each in name order (a
    ``namesrv.properties`` there is the name server's, ``controller-*.properties``
    controllers', not brokers')."""
    others = {NAMESRV_FILE} | {p.name for p in directory.glob(CONTROLLER_GLOB)}
    files = sorted(p for p in directory.glob("*.properties") if p.name not in others)
    return sorted(files, key=lambda p: (p.stem.endswith("-s"), p.stem))


def controllers_of(deployment: Path) -> list[Path]:
    """The deployment's mqcontroller configs, in name order."""
    return sorted(deployment.glob(CONTROLLER_GLOB))


def etcd_client_addr(conf: Path) -> tuple[str, int]:
    """(host, port) of the first of ``listen-client-urls`` in an etcd config file."""
    m = re.search(r"^listen-client-urls:\s*https?://([^:/,\s]+):(\d+)", conf.read_text(),
                  re.MULTILINE)
    if m is None:
        raise click.ClickException(f"{conf}: no listen-client-urls: http://HOST:PORT")
    return m.group(1), int(m.group(2))


def _wait_listening(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes]
                    ) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"etcd exited ({proc.returncode}) before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise click.ClickException(f"etcd not listening on {host}:{port} after {timeout:.0f} s")


def namesrv_config_of(deployment: Path) -> Path:
    """The deployment's own name server config, else deploy/namesrv.properties."""
    own = deployment / NAMESRV_FILE
    return own if own.is_file() else Path("deploy/namesrv.properties")


def _pump(name: str, proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    for line in iter(proc.stdout.readline, b""):
        sys.stdout.write(f"[{name}] {line.decode(errors='replace')}")
        sys.stdout.flush()


@click.command()
@click.argument("deployment", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--namesrv-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="The name server's config [default: DEPLOYMENT/"
              "namesrv.properties if there is one, else deploy/namesrv.properties]")
@click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE",
              help="Set one broker config key for every broker (repeatable).")
def main(deployment: Path, namesrv_config: Path | None, options: tuple[str, ...]) -> None:
    """Run DEPLOYMENT (e.g. deploy/2m-2s-async) with its name server until a signal."""
    namesrv_config = namesrv_config or namesrv_config_of(deployment)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    # one log directory per daemon: rotation is per process, so two must not share files
    log_root = Path(os.environ.get("ROCKETMQ_LOG_DIR") or Path.home() / "logs" / "rocketmqlogs")

    def spawn(name: str, args: list[str], log_dir: bool = True) -> subprocess.Popen[bytes]:
        if log_dir:
            args = [*args, "--log-dir", str(log_root / name)]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        procs.append((name, proc))
        threading.Thread(target=_pump, args=(name, proc), daemon=True).start()
        return proc

    try:
        etcd_conf = deployment / ETCD_FILE
        if etcd_conf.is_file():
            proc = spawn("etcd", ["etcd", "--config-file", str(etcd_conf)], log_dir=False)
            _wait_listening(*etcd_client_addr(etcd_conf), ETCD_START_TIMEOUT, proc)
        spawn("namesrv", [str(BIN / "mqnamesrv"), "-c", str(namesrv_config)])
        for conf in controllers_of(deployment):
            spawn(conf.stem, [sys.executable, "-m", "controller.cli", "-c", str(conf)])
        for conf in _brokers(deployment):
            extra = [arg for opt in options for arg in ("-o", opt)]
            spawn(conf.stem, [str(BIN / "mqbroker"), "-c", str(conf), *extra])
        while not stop.wait(0.5):
            if any(p.poll() is not None for _, p in procs):
                gone = [n for n, p in procs if p.poll() is not None]
                click.echo(f"stopping the cluster: {', '.join(gone)} exited", err=True)
                break
    finally:
        for _name, proc in reversed(procs):  # slaves, then masters, then the name server
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


if __name__ == "__main__":
    main()
