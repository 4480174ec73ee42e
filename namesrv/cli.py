"""``mqnamesrv``: start a name server."""

from __future__ import annotations

import sys

import click
import structlog
import trio

from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from protocol.config import ConfigError, load_properties
from protocol.logs import configure_logging
from protocol.trio.daemon import first_leaf, run_until_signal

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
    controller = NamesrvController(config)
    try:
        trio.run(run_until_signal, controller)
    except (OSError, BaseExceptionGroup) as exc:
        leaf = first_leaf(exc)
        if not isinstance(leaf, OSError):
            raise
        log.error("name server failed to start", error=f"{type(leaf).__name__}: {leaf}")
        sys.exit(1)
    log.info("name server stopped")


if __name__ == "__main__":
    main()
