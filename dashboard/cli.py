"""``mqdashboard -n NS --users-file PATH [--host 127.0.0.1] [--port 8080]``: the
web console. ``mqdashboard --add-user NAME --users-file PATH`` adds a user (or
changes its password): the password is prompted for, or read from stdin's first
line with ``--password-stdin``. ``--no-login`` serves without logins, on a
loopback address only.

The web server and the app (hypercorn, starlette, jinja2) are the ``web`` extra: they are
imported only to serve, and without them mqdashboard says what to install
(protocol/extras.py); ``--add-user`` needs none of them."""

from __future__ import annotations

import logging
import signal
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import click
import trio

from dashboard.auth import (
    DEFAULT_SESSION_HOURS,
    HostPolicy,
    UsersFileError,
    add_user,
    is_loopback,
    load_users,
)
from dashboard.data import DEFAULT_TIMEOUT
from protocol.extras import DASHBOARD_MODULES, WEB, MissingExtraError, require
from protocol.namesrv_addr import NAMESRV_ADDR_ENV
from protocol.trio.logs import configure_logging

if TYPE_CHECKING:
    from hypercorn.config import Config

    from dashboard.guard import Security


def hypercorn_config(host: str, port: int, certfile: Path | None = None,
                     keyfile: Path | None = None) -> Config:
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    if certfile is not None and keyfile is not None:  # HTTPS: cookies are Secure then
        config.certfile = str(certfile)
        config.keyfile = str(keyfile)
    config.errorlog = logging.getLogger("hypercorn.error")  # through configure_logging
    config.accesslog = None
    config.graceful_timeout = 2.0
    return config


async def until_signal() -> None:
    """Returns at SIGINT or SIGTERM: hypercorn then shuts down in order."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


async def run(namesrv: str, host: str, port: int, timeout: float, security: Security,
              certfile: Path | None = None, keyfile: Path | None = None,
              task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    from hypercorn.trio import serve

    from dashboard.app import create_app

    app = create_app(namesrv, timeout, security=security)
    await serve(app, hypercorn_config(host, port, certfile, keyfile),  # type: ignore[arg-type]
                shutdown_trigger=until_signal, task_status=task_status)


def security_of(host: str, users_file: Path | None, no_login: bool, read_only: bool,
                allowed_hosts: tuple[str, ...], session_hours: float) -> Security:
    """The Security the options ask for. Raises click.UsageError when they are
    unsafe or contradict each other, UsersFileError for a bad users file."""
    from dashboard.guard import Security

    if users_file is not None and no_login:
        raise click.UsageError("--users-file and --no-login contradict each other")
    if users_file is None and not no_login:
        raise click.UsageError(
            "mqdashboard needs --users-file PATH (add a user with mqdashboard --add-user NAME "
            "--users-file PATH) or, on a loopback address only, --no-login")
    if no_login and not is_loopback(host):
        raise click.UsageError(f"--no-login is refused on the non-loopback address {host}: "
                               "anyone who reaches it could change the cluster; give "
                               "--users-file")
    users = None
    if users_file is not None:
        users = load_users(users_file)
        if not users:
            raise UsersFileError(f"users file {users_file}: no user in it (add one with "
                                 "mqdashboard --add-user NAME --users-file PATH)")
    try:
        hosts = HostPolicy.of(host, allowed_hosts)
    except ValueError as exc:
        raise click.UsageError(f"--allowed-host {exc}: expected NAME or NAME:PORT") from None
    return Security(users=users, hosts=hosts, read_only=read_only, session_hours=session_hours)


def add_user_command(users_file: Path | None, name: str, password_stdin: bool) -> None:
    if users_file is None:
        raise click.UsageError("--add-user needs --users-file PATH")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt(f"Password for {name}", hide_input=True,
                                confirmation_prompt=True)
    new = add_user(users_file, name, password)
    click.echo(f"{'added' if new else 'changed the password of'} {name} in {users_file}",
               err=True)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-n", "--namesrvAddr", "namesrv", default=None, envvar=NAMESRV_ADDR_ENV,
              show_envvar=True,
              help='Name server address list, "host:port;host:port" (required to serve).')
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 or :: to serve other hosts; needs "
                   "--users-file).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0.1), default=DEFAULT_TIMEOUT,
              show_default=True, help="Seconds for one admin request.")
@click.option("--users-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Who may log in: name:scrypt-hash lines, written by --add-user.")
@click.option("--no-login", is_flag=True,
              help="Serve without logins (loopback addresses only; CSRF, Host and Origin "
                   "checks stay on).")
@click.option("--read-only", is_flag=True,
              help="Refuse every change (topic create/update, offset reset).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME[:PORT]",
              help="Another Host name the dashboard answers to (repeatable); localhost, "
                   "127.0.0.1, [::1] and --host are allowed already.")
@click.option("--session-hours", type=click.FloatRange(min=0.01), default=DEFAULT_SESSION_HOURS,
              show_default=True, help="A login session ends this long after the login.")
@click.option("--certfile", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Serve HTTPS with this certificate (PEM); with --keyfile.")
@click.option("--keyfile", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="The private key of --certfile (PEM).")
@click.option("--add-user", "add_user_name", metavar="NAME", default=None,
              help="Add NAME to --users-file (or change its password) and exit.")
@click.option("--password-stdin", is_flag=True,
              help="With --add-user: read the password from stdin's first line.")
@click.option("--log-level", default="WARNING", show_default=True)
def main(namesrv: str | None, host: str, port: int, timeout: float, users_file: Path | None,
         no_login: bool, read_only: bool, allowed_hosts: tuple[str, ...], session_hours: float,
         certfile: Path | None, keyfile: Path | None, add_user_name: str | None,
         password_stdin: bool, log_level: str) -> None:
    """A web console for trio-rocketmq: cluster, topics, consumer groups, messages,
    producers. It reads everything through the admin API."""
    try:
        if add_user_name is not None:
            add_user_command(users_file, add_user_name, password_stdin)
            return
        if not namesrv:
            raise click.UsageError(f"give the name servers: -n host:port (or {NAMESRV_ADDR_ENV})")
        if (certfile is None) != (keyfile is None):
            raise click.UsageError("--certfile and --keyfile go together")
        require("mqdashboard", WEB, DASHBOARD_MODULES)
        security = security_of(host, users_file, no_login, read_only, allowed_hosts,
                               session_hours)
    except (UsersFileError, MissingExtraError) as exc:
        raise click.ClickException(str(exc)) from None
    configure_logging(log_level.upper())
    scheme = "https" if certfile is not None else "http"
    click.echo(f"mqdashboard on {scheme}://{host}:{port}/ (name server {namesrv}; "
               f"{'no login' if security.users is None else 'login required'}"
               f"{', read-only' if read_only else ''})", err=True)
    trio.run(partial(run, namesrv, host, port, timeout, security, certfile, keyfile))


if __name__ == "__main__":
    main()
