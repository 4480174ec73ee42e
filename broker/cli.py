"""``mqbroker``: start a broker."""

from __future__ import annotations

import os
from typing import Any

import click
import structlog

from broker.config_load import load_broker_config
from broker.controller import BrokerController
from broker.store.store_lock import StoreLockedError
from protocol.config import ConfigError
from protocol.namesrv_addr import NAMESRV_ADDR_ENV
from protocol.trio.daemon import (
    fail,
    log_options,
    require_extras,
    run_daemon,
    start_logging,
)
from protocol.trio.logs import BROKER_LOGS
from protocol.trio.tls import TLS_MODES

log = structlog.get_logger("broker")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config-file", type=click.Path(exists=True, dir_okay=False),
              help="RocketMQ-style properties file (broker.conf).")
@click.option("-n", "--namesrv-addr", default=None,
              help='Name servers, "host:port;host:port" (wins over namesrvAddr in the config '
                   f'file, which wins over ${NAMESRV_ADDR_ENV}).')
@click.option("-p", "--print-config", is_flag=True, help="Print the effective config and exit.")
@click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE",
              help="Set one config key (repeatable), after the config file.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Prometheus metrics over HTTP on this port (metricsPort; 0: off).")
@click.option("--tls-mode", type=click.Choice(TLS_MODES, case_sensitive=False), default=None,
              help="tlsMode: disabled, permissive (TLS and plain on one port) or enforcing "
                   "(certificates: -o tls.server.certPath=... -o tls.server.keyPath=...).")
@log_options
def main(config_file: str | None, namesrv_addr: str | None, print_config: bool,
         options: tuple[str, ...], metrics_port: int | None, tls_mode: str | None,
         **log_opts: Any) -> None:
    """Start a broker (storage and serving).

    Logs go to stderr and to broker.log (store.log: the store's loggers) in
    --log-dir, else $ROCKETMQ_LOG_DIR, else ~/logs/rocketmqlogs."""
    # defaults -> -c -> -o and flags -> NAMESRV_ADDR -> runtime overlay -> validation:
    # what -p prints is what would run (broker/config_load.py)
    extra: dict[str, str] = {}
    for opt in options:
        key, sep, value = opt.partition("=")
        if not sep:
            raise click.UsageError(f"option must be KEY=VALUE: {opt!r}")
        extra[key.strip()] = value
    if tls_mode is not None:
        extra["tlsMode"] = tls_mode
    if namesrv_addr is not None:
        extra["namesrvAddr"] = namesrv_addr
    if metrics_port is not None:
        extra["metricsPort"] = str(metrics_port)
    try:
        loaded = load_broker_config(config_file, extra, os.environ)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    config = loaded.config
    if print_config:
        click.echo(config.render())
        return
    require_extras(config.metrics_port)
    start_logging(BROKER_LOGS, **log_opts)
    try:
        controller = BrokerController(loaded)
        controller.tune_gc = True
    except Exception as exc:
        fail(log, "broker", exc)
    run_daemon(controller, log, "broker", (StoreLockedError, ConfigError))


if __name__ == "__main__":
    main()
