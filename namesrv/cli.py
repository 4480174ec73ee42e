"""``mqnamesrv``: start a name server."""

from __future__ import annotations

import click
import structlog

from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from protocol.config import ConfigError, load_properties
from protocol.logs import configure_logging
from protocol.trio.daemon import fail, run_daemon

log = structlog.get_logger("namesrv")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config-file", type=click.Path(exists=True, dir_okay=False), help="Properties file.")
@click.option("-p", "--print-config", is_flag=True, help="Print the effective config and exit.")
@click.option("-l", "--listen-ip", default=None, help="Address to listen on.")
@click.option("--listen-port", "--port", type=int, default=None, help="Port (default 9876).")
@click.option("--log-level", default="INFO", show_default=True)
def main(
    config_file: str | None,
    print_config: bool,
    listen_ip: str | None,
    listen_port: int | None,
    log_level: str,
) -> None:
    """Start a name server (route registry)."""
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
    if print_config:
        click.echo(config.render())
        return
    configure_logging(log_level)
    try:
        controller = NamesrvController(config)
    except Exception as exc:
        fail(log, "name server", exc)
    run_daemon(controller, log, "name server")
    log.info("name server stopped")


if __name__ == "__main__":
    main()
