"""The name server's ACL (issue 18, beyond RocketMQ): the broker's ``plain_acl.yml``
accounts and checks (broker.acl, pure; it does not load the store), with the name
server's own list of admin-only requests.

``decide`` is pure: a request is checked as the broker checks one (global white
address, known access key, account white address, signature); then a request
that changes routes or the KV config (``NAMESRV_ADMIN_CODES``: registering or
unregistering a broker, deleting a topic's routes, wiping or adding write
permission, KV config writes) needs an ``admin: true`` account, even from the
account's white address. Only a global white address skips that check (as it
skips every check, RocketMQ's meaning of ``globalWhiteRemoteAddresses``).

``guard_table`` wraps a HandlerTable's handlers: a refusal answers
NO_PERMISSION with a remark naming what is missing (a oneway request is
dropped), is logged, and the connection stays usable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from broker.acl.guard import NOT_LOADED, remote_host
from broker.acl.plain import NOT_ADMIN, AclConfig, Decision
from broker.acl.plain import NOT_LOADED as NOT_LOADED_REASON
from protocol.acl import ACCESS_KEY, verify
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.connection import HandlerTable, RemotingConnection

log = structlog.get_logger("namesrv.acl")

# Requests that change what the name server answers: admin accounts only.
NAMESRV_ADMIN_CODES: frozenset[int] = frozenset({
    RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.PUT_KV_CONFIG,
    RequestCode.DELETE_KV_CONFIG,
})


def code_name(code: int) -> str:
    try:
        return f"{code} ({RequestCode(code).name})"
    except ValueError:
        return str(code)


def decide(config: AclConfig | None, code: int, fields: Mapping[str, object], host: str,
           signature_ok: Callable[[str], bool]) -> Decision:
    """Whether the name server serves a request (pure)."""
    if config is None:
        return Decision(False, NOT_LOADED, reason=NOT_LOADED_REASON)
    decision = config.decide(code, fields, None, host, signature_ok)
    if not decision.allowed or code not in NAMESRV_ADMIN_CODES:
        return decision
    if decision.access_key is None:  # a global white address
        return decision
    account = config.accounts.get(decision.access_key)
    if account is None or not account.admin:
        return Decision(False, f"Need admin permission for request code={code_name(code)} on "
                               f"the name server, but accessKey={decision.access_key} is not",
                        decision.access_key, NOT_ADMIN)
    return decision


def decide_request(config: AclConfig | None, conn: Any, cmd: RemotingCommand) -> Decision:
    fields = cmd.ext_fields or {}
    body = cmd.body
    return decide(config, cmd.code, fields, remote_host(getattr(conn, "remote_addr", "?")),
                  lambda secret: verify(fields, body, secret))


# called with (request code, Decision.reason) on each refusal (the name server's metrics)
OnRefusal = Callable[[int, str], None]


def _refusal(conn: Any, cmd: RemotingCommand, decision: Decision,
             on_refusal: OnRefusal | None = None) -> RemotingCommand | None:
    if on_refusal is not None:
        on_refusal(cmd.code, decision.reason)
    log.warning("request refused by ACL", code=cmd.code,
                access_key=(cmd.ext_fields or {}).get(ACCESS_KEY),
                remote=getattr(conn, "remote_addr", "?"), reason=decision.reason,
                remark=decision.remark)
    if cmd.is_oneway:
        return None
    return cmd.response(ResponseCode.NO_PERMISSION, decision.remark)


def guard_table(table: HandlerTable, config: Callable[[], AclConfig | None],
                on_refusal: OnRefusal | None = None) -> HandlerTable:
    """A new table whose handlers first ask ``decide`` with ``config()``;
    ``on_refusal(code, reason)`` counts each refusal."""
    out = HandlerTable()
    for code, sync in table._sync.items():
        out.register(code, _guard_sync(sync, config, on_refusal))
    for code, async_ in table._async.items():
        out.register(code, _guard_async(async_, config, on_refusal))
    return out


def _guard_sync(handler: Callable[..., RemotingCommand | None],
                config: Callable[[], AclConfig | None],
                on_refusal: OnRefusal | None) -> Callable[..., RemotingCommand | None]:
    def guarded(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        decision = decide_request(config(), conn, cmd)
        if not decision.allowed:
            return _refusal(conn, cmd, decision, on_refusal)
        return handler(conn, cmd)
    return guarded


def _guard_async(handler: Callable[..., Any],
                 config: Callable[[], AclConfig | None],
                 on_refusal: OnRefusal | None) -> Callable[..., Any]:
    async def guarded(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        decision = decide_request(config(), conn, cmd)
        if not decision.allowed:
            return _refusal(conn, cmd, decision, on_refusal)
        return await handler(conn, cmd)  # type: ignore[no-any-return]
    return guarded
