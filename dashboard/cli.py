"""``mqdashboard -n NS [--host 127.0.0.1] [--port 8080]``: the web console."""

from __future__ import annotations

import logging
import signal
from functools import partial

import click
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from dashboard.app import create_app
from dashboard.data import DEFAULT_TIMEOUT
from protocol.logs import configure_logging


def hypercorn_config(host: str, port: int) -> Config:
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.errorlog = logging.getLogger("hypercorn.error")  # through configure_logging
    config.accesslog = None
    config.graceful_timeout = 2.0
    return config


async def until_signal() -> None:
    """Returns at SIGINT or SIGTERM: hypercorn then shuts down in order."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


async def run(namesrv: str, host: str, port: int, timeout: float,
              task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    app = create_app(namesrv, timeout)
    await serve(app, hypercorn_config(host, port),  # type: ignore[arg-type]
                shutdown_trigger=until_signal, task_status=task_status)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-n", "--namesrvAddr", "namesrv", required=True,
              help='Name server address list, "host:port;host:port".')
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 or :: to serve other hosts).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0.1), default=DEFAULT_TIMEOUT,
              show_default=True, help="Seconds for one admin request.")
@click.option("--log-level", default="WARNING", show_default=True)
def main(namesrv: str, host: str, port: int, timeout: float, log_level: str) -> None:
    """A web console for trio-rocketmq: cluster, topics, consumer groups, messages,
    producers. It reads everything through the admin API."""
    configure_logging(log_level.upper())
    click.echo(f"mqdashboard on http://{host}:{port}/ (name server {namesrv})", err=True)
    trio.run(partial(run, namesrv, host, port, timeout))


if __name__ == "__main__":
    main()
