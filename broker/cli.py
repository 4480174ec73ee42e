"""``mqbroker``: start a broker."""

from __future__ import annotations

import click
import structlog

from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.store.store_lock import StoreLockedError
from protocol.config import ConfigError, load_properties
from protocol.logs import configure_logging
from protocol.trio.daemon import fail, run_daemon

log = structlog.get_logger("broker")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config-file", type=click.Path(exists=True, dir_okay=False),
              help="RocketMQ-style properties file (broker.conf).")
@click.option("-n", "--namesrv-addr", default=None, help='Name servers, "host:port;host:port".')
@click.option("-p", "--print-config", is_flag=True, help="Print the effective config and exit.")
@click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE",
              help="Set one config key (repeatable), after the config file.")
@click.option("--log-level", default="INFO", show_default=True)
def main(config_file: str | None, namesrv_addr: str | None, print_config: bool,
         options: tuple[str, ...], log_level: str) -> None:
    """Start a broker (storage and serving)."""
    config = BrokerConfig()
    try:
        if config_file:
            config.update(load_properties(config_file))
        extra = {}
        for opt in options:
            key, sep, value = opt.partition("=")
            if not sep:
                raise ConfigError(f"option must be KEY=VALUE: {opt!r}")
            extra[key.strip()] = value
        config.update(extra)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    if namesrv_addr is not None:
        config.namesrv_addr = namesrv_addr
    if print_config:
        click.echo(config.render())
        return
    configure_logging(log_level)
    try:
        controller = BrokerController(config)
        controller.tune_gc = True
    except Exception as exc:
        fail(log, "broker", exc)
    run_daemon(controller, log, "broker", (StoreLockedError, ConfigError))


if __name__ == "__main__":
    main()
