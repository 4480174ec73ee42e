"""``mqnamesrv``: start a name server."""

from __future__ import annotations

from typing import Any

import click
import structlog

from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from protocol.config import ConfigError
from protocol.trio.daemon import (
    fail,
    load_properties,
    log_options,
    require_extras,
    run_daemon,
    start_logging,
)
from protocol.trio.logs import NAMESRV_LOGS
from protocol.trio.tls import TLS_MODES, TlsConfigError

log = structlog.get_logger("namesrv")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config-file", type=click.Path(exists=True, dir_okay=False), help="Properties file.")
@click.option("-p", "--print-config", is_flag=True, help="Print the effective config and exit.")
@click.option("-l", "--listen-ip", default=None, help="Address to listen on.")
@click.option("--listen-port", "--port", type=int, default=None, help="Port (default 9876).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Prometheus metrics over HTTP on this port (metricsPort; 0: off).")
@click.option("--tls-mode", type=click.Choice(TLS_MODES, case_sensitive=False), default=None,
              help="tlsMode: disabled, permissive (TLS and plain on one port) or enforcing "
                   "(certificates: tls.server.certPath/keyPath in the config file).")
@log_options
def main(
    config_file: str | None,
    print_config: bool,
    listen_ip: str | None,
    listen_port: int | None,
    metrics_port: int | None,
    tls_mode: str | None,
    **log_opts: Any,
) -> None:
    """Start a name server (route registry).

    Logs go to stderr and to namesrv.log in --log-dir, else $ROCKETMQ_LOG_DIR,
    else ~/logs/rocketmqlogs."""
    config = NamesrvConfig()
    try:
        if config_file:
            config.update(load_properties(config_file))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    if listen_ip is not None:
        config.listen_ip = listen_ip
    if listen_port is not None:
        config.listen_port = listen_port
    if metrics_port is not None:
        config.metrics_port = metrics_port
    try:
        if tls_mode is not None:
            config.update({"tlsMode": tls_mode})
        config.server_tls().context()  # a missing or bad certificate: one line, no start
    except (ConfigError, TlsConfigError) as exc:
        raise click.UsageError(str(exc)) from exc
    if print_config:
        click.echo(config.render())
        return
    require_extras(config.metrics_port)
    start_logging(NAMESRV_LOGS, **log_opts)
    try:
        controller = NamesrvController(config, config_file)
    except ConfigError as exc:  # enableControllerInNamesrv with a backend it cannot open
        raise click.UsageError(str(exc)) from exc
    except Exception as exc:
        fail(log, "name server", exc)
    run_daemon(controller, log, "name server")
    log.info("name server stopped")


if __name__ == "__main__":
    main()
