"""``mqcontroller``: start a controller (RocketMQ 5's controller mode, standalone)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import structlog

from controller.config import ControllerConfig
from controller.replicas import StateFormatError
from controller.runtime_config import load_overlay, overlay_path
from controller.service import ControllerService, open_backend
from controller.state_store import StateStoreError
from protocol.config import ConfigError
from protocol.trio.daemon import load_properties, log_options, run_daemon, start_logging
from protocol.trio.logs import LogFile
from protocol.trio.tls import TLS_MODES, TlsConfigError

log = structlog.get_logger("controller")

CONTROLLER_LOGS = (LogFile("controller.log"),)


def build(config: ControllerConfig, config_file: Path | None = None) -> ControllerService:
    """The controller ``mqcontroller`` runs: UPDATE_CONTROLLER_CONFIG writes its
    changes into ``config_file`` (-c), else into the overlay under controllerStorePath."""
    store, leadership = open_backend(config, f"{config.listen_ip}:{config.listen_port}")
    return ControllerService(config, store, leadership, config_file=config_file,
                             settings_file=config_file or overlay_path(config))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config-file", type=click.Path(exists=True, dir_okay=False),
              help="Properties file (RocketMQ's ControllerConfig keys).")
@click.option("-p", "--print-config", is_flag=True, help="Print the effective config and exit.")
@click.option("-l", "--listen-ip", default=None, help="Address to listen on.")
@click.option("--listen-port", "--port", type=int, default=None, help="Port (default 9878).")
@click.option("--store-path", default=None, help="controllerStorePath: the state's directory.")
@click.option("--tls-mode", type=click.Choice(TLS_MODES, case_sensitive=False), default=None,
              help="tlsMode: disabled, permissive (TLS and plain on one port) or enforcing "
                   "(certificates: tls.server.certPath/keyPath in the config file).")
@log_options
def main(config_file: str | None, print_config: bool, listen_ip: str | None,
         listen_port: int | None, store_path: str | None, tls_mode: str | None,
         **log_opts: Any) -> None:
    """Start a controller: it keeps each broker name's replicas, master, epochs and
    SyncStateSet, and elects a new master when the master's heart-beats stop.

    Without -c, the changes UPDATE_CONTROLLER_CONFIG made (kept in
    controllerStorePath/controller.conf.runtime) are applied at start.

    Logs go to stderr and to controller.log in --log-dir, else $ROCKETMQ_LOG_DIR,
    else ~/logs/rocketmqlogs."""
    config = ControllerConfig()
    try:
        if config_file:
            config.update(load_properties(config_file))
        overrides = {k: v for k, v in (("listenIp", listen_ip), ("listenPort", listen_port),
                                       ("controllerStorePath", store_path),
                                       ("tlsMode", tls_mode)) if v is not None}
        if overrides:
            config.update(overrides)
        if not config_file:
            load_overlay(config)
        config.server_tls().context()  # a missing or bad certificate: one line, no start
        client_tls = config.client_tls()
        if client_tls is not None:
            client_tls.context()
    except (ConfigError, TlsConfigError) as exc:
        raise click.UsageError(str(exc)) from exc
    if print_config:
        click.echo(config.render())
        return
    try:
        service = build(config, Path(config_file) if config_file else None)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    start_logging(CONTROLLER_LOGS, **log_opts)
    run_daemon(service, log, "controller",
               operator_errors=(StateStoreError, StateFormatError, ConfigError))
    log.info("controller stopped")


if __name__ == "__main__":
    main()
