"""The broker's ACL check around its served handlers, and the accounts file's loading.

``guard_table`` wraps every handler of a HandlerTable (sync ones stay sync, async
ones async) with AclConfig.decide; a refusal answers NO_PERMISSION with the
decision's remark (a oneway request is dropped) and is logged. ``AclFile``
reads ``plain_acl.yml`` at start (ConfigError when missing or malformed) and
re-reads it when its mtime changes, keeping the last good accounts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
import trio

from broker.acl.plain import AclConfig, AclWatcher, Decision
from protocol.acl import ACCESS_KEY, verify
from protocol.client_data import HeartbeatData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError
from protocol.trio.connection import HandlerTable, RemotingConnection

log = structlog.get_logger("broker.acl")

NOT_LOADED = "access control is on but no accounts are loaded (plain_acl.yml)"


def remote_host(remote_addr: str) -> str:
    """The host part of ``host:port`` (an IPv6 host may come in brackets)."""
    host, sep, _port = remote_addr.rpartition(":")
    if not sep:
        host = remote_addr
    return host.strip("[]")


def decide(config: AclConfig | None, conn: Any, cmd: RemotingCommand) -> Decision:
    if config is None:
        return Decision(False, NOT_LOADED)
    heartbeat: HeartbeatData | None = None
    if cmd.code == RequestCode.HEART_BEAT:
        try:
            heartbeat = HeartbeatData.from_wire(cmd.decode_body())
        except Exception:  # noqa: BLE001 - a bad body: the handler refuses it
            heartbeat = None
    fields = cmd.ext_fields or {}
    body = cmd.body
    return config.decide(
        cmd.code, fields, heartbeat, remote_host(getattr(conn, "remote_addr", "?")),
        lambda secret: verify(fields, body, secret))


def _refusal(conn: Any, cmd: RemotingCommand, decision: Decision) -> RemotingCommand | None:
    log.warning("request refused by ACL", code=cmd.code,
                access_key=(cmd.ext_fields or {}).get(ACCESS_KEY),
                remote=getattr(conn, "remote_addr", "?"), remark=decision.remark)
    if cmd.is_oneway:
        return None
    return cmd.response(ResponseCode.NO_PERMISSION, decision.remark)


def guard_table(table: HandlerTable, config: Callable[[], AclConfig | None]) -> HandlerTable:
    """A new table whose handlers first ask ``config()`` whether the request is allowed."""
    out = HandlerTable()
    for code, sync in table._sync.items():
        out.register(code, _guard_sync(sync, config))
    for code, async_ in table._async.items():
        out.register(code, _guard_async(async_, config))
    return out


def _guard_sync(handler: Callable[..., RemotingCommand | None],
                config: Callable[[], AclConfig | None]) -> Callable[..., RemotingCommand | None]:
    def guarded(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        decision = decide(config(), conn, cmd)
        if not decision.allowed:
            return _refusal(conn, cmd, decision)
        return handler(conn, cmd)
    return guarded


def _guard_async(handler: Callable[..., Any],
                 config: Callable[[], AclConfig | None]) -> Callable[..., Any]:
    async def guarded(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        decision = decide(config(), conn, cmd)
        if not decision.allowed:
            return _refusal(conn, cmd, decision)
        return await handler(conn, cmd)  # type: ignore[no-any-return]
    return guarded


class AclFile:
    """``plain_acl.yml`` and the accounts in force."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.watcher = AclWatcher()

    @property
    def config(self) -> AclConfig | None:
        return self.watcher.config

    def load_at_start(self) -> None:
        """Worker thread or start-up: ConfigError when the file is missing or malformed."""
        try:
            mtime = self.path.stat().st_mtime
            text = self.path.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"aclEnable=true but the ACL file {self.path} cannot be read: "
                              f"{e.strerror or e}") from None
        error = self.watcher.load(text, mtime)
        if error is not None:
            raise ConfigError(f"aclEnable=true but {self.path} is malformed: {error}")
        log.info("ACL accounts loaded", file=str(self.path),
                 accounts=len(self.watcher.config.accounts) if self.watcher.config else 0)

    def _read_if_changed(self) -> tuple[str, float] | None:
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            return None
        if not self.watcher.needs_reload(mtime):
            return None
        return self.path.read_text(encoding="utf-8"), mtime

    async def check(self) -> None:
        """Re-read the file when its mtime changed; a bad file is logged, old accounts kept."""
        try:
            changed = await trio.to_thread.run_sync(self._read_if_changed)
        except (OSError, UnicodeDecodeError) as e:
            log.warning("ACL file not readable, keeping the last good accounts",
                        file=str(self.path), error=str(e))
            return
        if changed is None:
            return
        error = self.watcher.load(*changed)
        if error is not None:
            log.warning("ACL file not reloaded", file=str(self.path), error=error)
        else:
            log.info("ACL accounts reloaded", file=str(self.path),
                     accounts=len(self.watcher.config.accounts) if self.watcher.config else 0)

    async def watch(self, interval_s: float) -> None:
        while True:
            await trio.sleep(interval_s)
            await self.check()
