"""``python -m bench.chaos``: one chaos run, its report on stdout (docs/chaos.md)."""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import click
import trio

from bench.chaos.accounting import Report, ScheduleError, format_report, parse_schedule
from bench.chaos.controller_group import ControllerGroupError
from bench.chaos.group import CONTROLLER, CONTROLLER_ONLY, FAULTS, MASTER_SLAVE, GroupConfig
from bench.chaos.official import OfficialClientError
from bench.chaos.proxy import Mode
from bench.chaos.runner import Checker, RunConfig
from protocol.trio.logs import configure_logging
from tests.integration.official_client import load_error

DEFAULT_SCHEDULE = "kill-slave,kill-master,stop-master:20,partition-master"


@click.command()
@click.option("--schedule", default=DEFAULT_SCHEDULE, show_default=True,
              help="Faults in order, comma-separated, each NAME or NAME:SECONDS. Names: "
                   + ", ".join(FAULTS) + ".")
@click.option("--fault-seconds", default=10.0, show_default=True,
              type=click.FloatRange(0.1, 3600),
              help="How long a fault without :SECONDS is held.")
@click.option("--calm", default=5.0, show_default=True, type=click.FloatRange(0, 600),
              help="Seconds without a fault before each fault and after the last.")
@click.option("--mode", default=MASTER_SLAVE, show_default=True,
              type=click.Choice([MASTER_SLAVE, CONTROLLER]),
              help="master-slave: a fixed master and its slaves; controller: three replicas "
                   "of one broker name whose master a controller elects (it moves).")
@click.option("--controllers", default=0, show_default=True, type=click.IntRange(0, 5),
              help="Controller mode: 0 runs the controller inside the name server; N runs "
                   "N mqcontroller processes (more than one needs --etcd).")
@click.option("--etcd", is_flag=True,
              help="Controller mode: the mqcontrollers keep their state on a real etcd.")
@click.option("--heartbeat-ms", default=10_000, show_default=True,
              type=click.IntRange(100, 600_000),
              help="Controller mode: brokerHeartbeatTimeout of the controller "
                   "(controllerHeartBeatTimeoutMills of the brokers).")
@click.option("--poll-interval", default=None, type=click.FloatRange(0.1, 600),
              help="Clients' route refresh (pollNameServerInterval), seconds "
                   "[default: 0.5 in controller mode, the SDK's 30 otherwise].")
@click.option("--slaves", default=1, type=click.IntRange(1, 2), show_default=True)
@click.option("--role", "broker_role", default="SYNC_MASTER", show_default=True,
              type=click.Choice(["SYNC_MASTER", "ASYNC_MASTER"]))
@click.option("--flush", "flush_disk_type", default="SYNC_FLUSH", show_default=True,
              type=click.Choice(["SYNC_FLUSH", "ASYNC_FLUSH"]))
@click.option("-o", "--broker-option", "options", multiple=True, metavar="KEY=VALUE",
              help="One more broker config key for every broker of the group (repeatable).")
@click.option("--producers", default=4, type=click.IntRange(1, 64), show_default=True,
              help="Producers of our SDK.")
@click.option("--official-producers", default=0, type=click.IntRange(0, 16),
              show_default=True,
              help="Producers of the official RocketMQ 4.x client (the C++ one, PyPI "
                   "rocketmq), each in a child process, at the same rate each as ours.")
@click.option("--consumers", default=2, type=click.IntRange(1, 16), show_default=True)
@click.option("--rate", default=200.0, type=click.FloatRange(1, 20_000), show_default=True,
              help="Messages per second, all producers (both kinds) together.")
@click.option("--max-messages", default=1_000_000, type=click.IntRange(1, 100_000_000),
              show_default=True, help="Most sends in the whole run.")
@click.option("--send-timeout", default=3.0, show_default=True,
              type=click.FloatRange(0.1, 60), help="Seconds per send.")
@click.option("--drain", default=60.0, show_default=True, type=click.FloatRange(0, 3600),
              help="Most seconds, after the load, to wait for every SEND_OK to be delivered.")
@click.option("--partition-mode", default="blackhole", show_default=True,
              type=click.Choice(["blackhole", "drop"]))
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the stores, logs and record files here (default: a temporary "
                   "directory, removed).")
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON line.")
@click.option("--log-level", default="WARNING", show_default=True)
def main(schedule: str, fault_seconds: float, calm: float, mode: str, controllers: int,
         etcd: bool, heartbeat_ms: int, poll_interval: float | None, slaves: int, broker_role: str,
         flush_disk_type: str, options: tuple[str, ...], producers: int,
         official_producers: int, consumers: int, rate: float, max_messages: int, send_timeout: float, drain: float, partition_mode: str,
         directory: Path | None, as_json: bool, log_level: str) -> None:
    """Run the schedule against a replica group on loopback and print what was lost."""
    try:
        steps = parse_schedule(schedule, FAULTS, fault_seconds)
    except ScheduleError as e:
        raise click.BadParameter(str(e), param_hint="--schedule") from None
    wrong = sorted({s.fault for s in steps} & CONTROLLER_ONLY) if mode != CONTROLLER else []
    if wrong:
        raise click.BadParameter(f"{', '.join(wrong)} needs --mode controller",
                                 param_hint="--schedule")
    if mode == CONTROLLER and poll_interval is None:
        poll_interval = 0.5
    props: dict[str, object] = {}
    for opt in options:
        key, sep, value = opt.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{opt!r} is not KEY=VALUE", param_hint="-o")
        props[key] = value
    if official_producers:
        why = load_error()
        if why is not None:
            raise click.BadParameter(f"the official client (PyPI rocketmq) does not load with "
                                     f"{sys.executable}: {why}",
                                     param_hint="--official-producers")
    configure_logging(log_level)
    config = RunConfig(steps=steps, calm=calm, producers=producers,
                       official_producers=official_producers, rate=rate,
                       max_messages=max_messages, send_timeout=send_timeout,
                       consumers=consumers, drain=drain, partition_mode=Mode(partition_mode),
                       poll_interval=poll_interval,
                       group=GroupConfig(slaves, broker_role, flush_disk_type, props, mode=mode,
                                         controllers=controllers, etcd=etcd,
                                         heartbeat_ms=heartbeat_ms))
    try:
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            report, failures = _run(Checker(directory, config))
        else:
            with tempfile.TemporaryDirectory(prefix="chaos-") as d:
                report, failures = _run(Checker(Path(d), config))
    except ControllerGroupError as e:
        raise click.UsageError(str(e)) from None
    if as_json:
        click.echo(json.dumps(asdict(report)))
    else:
        click.echo(format_report(report))
    for f in failures:
        click.echo(f"official producer {f}", err=True)
    sys.exit(0 if not report.lost and report.all_faults_healed and not failures else 1)


def _run(checker: Checker) -> tuple[Report, list[str]]:
    """The run's report and its official producers' failures; an official producer
    that did not start ends the command with its reason."""
    try:
        report = trio.run(checker.run)
    except BaseExceptionGroup as eg:
        match, _ = eg.split(OfficialClientError)
        if match is None:
            raise
        first = match.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise click.ClickException(str(first)) from None
    return report, checker.official_failures


if __name__ == "__main__":
    main()
