"""The ACL check around a daemon's served handlers, and the accounts file's loading
(the broker's; the name server's through namesrv/acl.py, with its own ``decide``).

``guard_table`` wraps every handler of a HandlerTable (sync ones stay sync, async
ones async) with AclConfig.decide, whose signature step also checks the signature's
binding to the request code and time (acl/binding.py, ``bound_decision``); a
refusal answers NO_PERMISSION with the decision's remark (a oneway request is dropped)
and is logged. A request let in authenticates its connection
(``RemotingConnection.authenticate``). ``HeaderGate`` is the same check asked about a
connection not yet authenticated, on a request's header before its body is read
(protocol/trio/preauth.py). ``AclFile`` reads ``plain_acl.yml`` at start (ConfigError when missing
or malformed) and re-reads it when its mtime changes, keeping the last good accounts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
import trio

from acl import plain
from acl.admin import AclAdminError, AclDocument
from acl.binding import SignatureBinding
from acl.plain import AclConfig, AclWatcher, Decision
from protocol.acl import ACCESS_KEY, read_binding, verify
from protocol.client_data import HeartbeatData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError
from protocol.trio import files
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.preauth import READ, TRUST, Judgement, Verdict, carries_signature

log = structlog.get_logger("broker.acl")

NOT_LOADED = "access control is on but no accounts are loaded (plain_acl.yml)"


def remote_host(remote_addr: str) -> str:
    """The host part of ``host:port`` (an IPv6 host may come in brackets)."""
    host, sep, _port = remote_addr.rpartition(":")
    if not sep:
        host = remote_addr
    return host.strip("[]")


def decide(config: AclConfig | None, conn: Any, cmd: RemotingCommand,
           binding: SignatureBinding | None = None) -> Decision:
    if config is None:
        return Decision(False, NOT_LOADED, reason=plain.NOT_LOADED)
    heartbeat: HeartbeatData | None = None
    if cmd.code == RequestCode.HEART_BEAT:
        try:
            heartbeat = HeartbeatData.from_wire(cmd.decode_body())
        except Exception:  # noqa: BLE001 - a bad body: the handler refuses it
            heartbeat = None
    fields = cmd.ext_fields or {}
    host = remote_host(getattr(conn, "remote_addr", "?"))
    return bound_decision(cmd, binding, lambda signature_ok: config.decide(
        cmd.code, fields, heartbeat, host, signature_ok))


def bound_decision(cmd: RemotingCommand, binding: SignatureBinding | None,
                   decide_with: Callable[[Callable[[str], bool]], Decision]) -> Decision:
    """``decide_with(signature_ok)``, the signature step checking ``cmd``'s signature and,
    with a ``binding``, its binding (acl/binding.py): a request whose signature
    verifies but whose binding does not is refused with the binding's reason, and an
    allowed bound request is remembered (a replay of it is refused)."""
    fields = cmd.ext_fields or {}
    body = cmd.body
    if binding is None:
        return decide_with(lambda secret: verify(fields, body, secret))
    verified: list[str | None] = []  # the binding problem of each verified signature
    bound = read_binding(fields)  # once, for check and remember

    def signature_ok(secret: str) -> bool:
        if not verify(fields, body, secret):
            return False
        problem = binding.check(cmd.code, fields, bound)
        verified.append(problem)
        return problem is None

    decision = decide_with(signature_ok)
    if decision.allowed:
        if verified:  # signed (not let in by a white address)
            problem = binding.remember(cmd.code, fields, bound)
            if problem is not None:
                return Decision(False, problem, decision.access_key, plain.BAD_SIGNATURE)
        return decision
    for problem in verified:
        if problem is not None:
            return Decision(False, problem, decision.access_key, plain.BAD_SIGNATURE)
    return decision


# called with (request code, Decision.reason) on each refusal (the daemon's metrics)
OnRefusal = Callable[[int, str], None]
# what a daemon asks of each request: (accounts in force, connection, request, signature
# binding) -> Decision
DecideFn = Callable[[AclConfig | None, Any, RemotingCommand, SignatureBinding | None], Decision]
_Decide = Callable[[AclConfig | None, Any, RemotingCommand], Decision]
# a daemon's pure rule: (accounts in force, request code, header fields, remote host,
# signature check) -> Decision
PureDecide = Callable[[AclConfig | None, int, Mapping[str, object], str,
                       Callable[[str], bool]], Decision]


def request_decider(decide: PureDecide) -> DecideFn:
    """The ``decide_fn`` of a daemon whose rule is the pure ``decide``: the request's
    fields and host, its signature checked (and its binding, with one) through
    ``bound_decision``."""
    def decide_request(config: AclConfig | None, conn: Any, cmd: RemotingCommand,
                       binding: SignatureBinding | None = None) -> Decision:
        fields = cmd.ext_fields or {}
        host = remote_host(getattr(conn, "remote_addr", "?"))
        return bound_decision(cmd, binding, lambda signature_ok: decide(
            config, cmd.code, fields, host, signature_ok))
    return decide_request


def _refusal(conn: Any, cmd: RemotingCommand, decision: Decision,
             on_refusal: OnRefusal | None, logger: Any) -> RemotingCommand | None:
    if on_refusal is not None:
        on_refusal(cmd.code, decision.reason)
    logger.warning("request refused by ACL", code=cmd.code,
                   access_key=(cmd.ext_fields or {}).get(ACCESS_KEY),
                   remote=getattr(conn, "remote_addr", "?"), reason=decision.reason,
                   remark=decision.remark, detail=decision.detail or None)
    if cmd.is_oneway:
        return None
    return cmd.response(ResponseCode.NO_PERMISSION, decision.remark)


def guard_table(table: HandlerTable, config: Callable[[], AclConfig | None],
                on_refusal: OnRefusal | None = None, *, decide_fn: DecideFn = decide,
                logger: Any = log, binding: SignatureBinding | None = None) -> HandlerTable:
    """A new table whose handlers first ask ``decide_fn(config(), conn, cmd, binding)``
    whether the request is allowed (the broker's ``decide`` unless another daemon
    gives its own); ``on_refusal(code, reason)`` counts each refusal, ``logger``
    logs it. ``binding``: the daemon's signature binding check (default: one with the
    default settings and replay caches of its own)."""
    bind = binding if binding is not None else SignatureBinding()

    def decide_bound(c: AclConfig | None, conn: Any, cmd: RemotingCommand) -> Decision:
        return decide_fn(c, conn, cmd, bind)

    out = HandlerTable()
    for code, sync in table._sync.items():
        out.register(code, _guard_sync(sync, config, on_refusal, decide_bound, logger))
    for code, async_ in table._async.items():
        out.register(code, _guard_async(async_, config, on_refusal, decide_bound, logger))
    return out


def _authenticated(conn: Any) -> None:
    """A request on ``conn`` passed the check: its connection is authenticated."""
    authenticate = getattr(conn, "authenticate", None)
    if authenticate is not None:
        authenticate()


class HeaderGate:
    """The ACL asked about a connection not yet authenticated (protocol/trio/preauth.py
    ``HeaderGate``), with the daemon's ``decide_fn``, ``on_refusal`` and ``logger`` as
    ``guard_table``'s. A global white address is trusted outright. A request that carries
    an ``AccessKey`` and a ``Signature`` needs its body (the signature covers it): read
    on. Any other is decided on its header alone, which is all its body could not
    change: let in (a white address), or refused with the remark, log line and count of
    the same refusal once its body is in."""

    def __init__(self, config: Callable[[], AclConfig | None],
                 on_refusal: OnRefusal | None = None, *, decide_fn: DecideFn = decide,
                 logger: Any = log) -> None:
        self.config = config
        self.on_refusal = on_refusal
        self.decide_fn = decide_fn
        self.logger = logger

    def trusts(self, remote_addr: str) -> bool:
        config = self.config()
        return config is not None and config.globally_white(remote_host(remote_addr))

    def judge(self, conn: Any, cmd: RemotingCommand) -> Judgement:
        if carries_signature(cmd.ext_fields):
            return READ
        decision = self.decide_fn(self.config(), conn, cmd, None)  # nothing signed to bind
        if decision.allowed:
            return TRUST
        return Judgement(Verdict.REFUSE,
                         _refusal(conn, cmd, decision, self.on_refusal, self.logger))


def _guard_sync(handler: Callable[..., RemotingCommand | None],
                config: Callable[[], AclConfig | None], on_refusal: OnRefusal | None,
                decide_fn: _Decide, logger: Any) -> Callable[..., RemotingCommand | None]:
    def guarded(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        decision = decide_fn(config(), conn, cmd)
        if not decision.allowed:
            return _refusal(conn, cmd, decision, on_refusal, logger)
        _authenticated(conn)
        return handler(conn, cmd)
    return guarded


def _guard_async(handler: Callable[..., Any],
                 config: Callable[[], AclConfig | None], on_refusal: OnRefusal | None,
                 decide_fn: _Decide, logger: Any) -> Callable[..., Any]:
    async def guarded(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        decision = decide_fn(config(), conn, cmd)
        if not decision.allowed:
            return _refusal(conn, cmd, decision, on_refusal, logger)
        _authenticated(conn)
        return await handler(conn, cmd)  # type: ignore[no-any-return]
    return guarded


def write_atomically(path: Path, text: str) -> float:
    """Replace the accounts file with ``text`` (protocol.trio.files.write_atomically; a new
    file is 0o600: it holds secret keys); returns the new mtime."""
    return files.write_atomically(path, text, new_mode=0o600)


class AclFile:
    """``plain_acl.yml`` and the accounts in force.

    Admin requests change the file through ``change`` (under one lock with the
    reloads, so a reload never reinstates an older text): the new text is
    written atomically and put in force at once.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.watcher = AclWatcher()
        self.lock = trio.Lock()
        self.missing = False  # the file was found deleted (logged once)

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

    def _read_if_changed(self) -> tuple[str, float] | None | FileNotFoundError:
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError as e:
            return e
        except OSError:
            return None
        if not self.watcher.needs_reload(mtime) and not self.missing:
            return None
        return self.path.read_text(encoding="utf-8"), mtime

    async def check(self) -> None:
        """Re-read the file when its mtime changed; a bad file is logged, old accounts kept."""
        async with self.lock:
            try:
                changed = await trio.to_thread.run_sync(self._read_if_changed)
            except (OSError, UnicodeDecodeError) as e:
                log.warning("ACL file not readable, keeping the last good accounts",
                            file=str(self.path), error=str(e))
                return
            if isinstance(changed, FileNotFoundError):
                if not self.missing:
                    self.missing = True
                    log.warning("ACL file deleted, keeping the last good accounts",
                                file=str(self.path))
                return
            if changed is None:
                return
            if self.missing:
                self.missing = False
                log.info("ACL file back", file=str(self.path))
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

    # ---- admin requests

    def _read_document(self) -> AclDocument:
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise AclAdminError(f"the ACL file {self.path.name} cannot be read: {e}") from None
        try:
            return AclDocument.parse(text)
        except ValueError as e:
            raise AclAdminError(f"the ACL file {self.path.name} on disk is malformed, "
                                f"fix it first: {e}") from None

    async def document(self) -> AclDocument:
        """The file as it is on disk (AclAdminError when unreadable or malformed)."""
        return await trio.to_thread.run_sync(self._read_document)

    async def change(self, fn: Callable[[AclDocument], AclDocument]) -> AclDocument:
        """Apply ``fn`` to the file's document, write it and put it in force.

        AclAdminError from reading or from ``fn`` changes nothing; OSError from
        writing leaves the old file (the rename is the only change).
        """
        async with self.lock:
            doc = fn(await self.document())
            text = doc.render()
            mtime = await trio.to_thread.run_sync(write_atomically, self.path, text)
            error = self.watcher.load(text, mtime)
            self.missing = False
        if error is not None:  # cannot happen: fn's result was checked
            log.error("ACL file written but not loaded", file=str(self.path), error=error)
        else:
            log.info("ACL file changed", file=str(self.path), version=doc.version.counter,
                     accounts=len(doc.accounts))
        return doc

    async def follow(self, doc: AclDocument) -> bool:
        """A slave: take the master's document when its version differs from the file's
        (or the file is unreadable); True when the file was replaced."""
        async with self.lock:
            try:
                current: AclDocument | None = await self.document()
            except AclAdminError:
                current = None
            if current is not None and current.version == doc.version:
                return False
            text = doc.render()
            mtime = await trio.to_thread.run_sync(write_atomically, self.path, text)
            self.watcher.load(text, mtime)
            self.missing = False
        log.info("ACL file copied from the master", file=str(self.path),
                 version=doc.version.counter, accounts=len(doc.accounts))
        return True
