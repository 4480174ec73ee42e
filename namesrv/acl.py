"""The name server's ACL (issue 18, beyond RocketMQ): the broker's ``plain_acl.yml``
accounts and checks (acl/, shared with the broker; it does not load the store), with the name
server's own list of admin-only requests.

``decide`` is pure: a request is checked as the broker checks one (global white
address, known access key, account white address, signature); then a request
that changes routes or the KV config (``NAMESRV_ADMIN_CODES``: registering or
unregistering a broker, deleting a topic's routes, wiping or adding write
permission, KV config writes) needs an ``admin: true`` account, even from the
account's white address. Only a global white address skips that check (as it
skips every check, RocketMQ's meaning of ``globalWhiteRemoteAddresses``).

A verified signature's binding to the request code and time is checked as on the
broker (acl/binding.py): a route look-up's signature cannot delete the topic's
routes, nor serve twice.

The requests of the controller inside (enableControllerInNamesrv) are checked as
mqcontroller checks them (controller/acl.py ``CONTROLLER_PERMISSIONS``): look-ups
need a known account, replicas' requests (heart-beats among them) a broker's
(admin) account, elections, the config and cleaning an admin account.

``guard_table`` wraps a HandlerTable's handlers: a refusal answers
NO_PERMISSION with a remark naming what is missing (a oneway request is
dropped), is logged, and the connection stays usable once a request on it was
let in. ``header_gate`` asks the same of a connection not yet authenticated, on
a request's header (protocol/trio/preauth.py): an unsigned request there is
refused before its body is read and its connection closed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import structlog

from acl import guard
from acl.binding import NAMESRV_ADMIN_CODES, SignatureBinding, code_name
from acl.guard import NOT_LOADED, OnRefusal
from acl.plain import NOT_ADMIN, AclConfig, Decision
from acl.plain import NOT_LOADED as NOT_LOADED_REASON
from controller.acl import CONTROLLER_PERMISSIONS, check_need
from protocol.trio.connection import HandlerTable

log = structlog.get_logger("namesrv.acl")


def decide(config: AclConfig | None, code: int, fields: Mapping[str, object], host: str,
           signature_ok: Callable[[str], bool]) -> Decision:
    """Whether the name server serves a request (pure)."""
    if config is None:
        return Decision(False, NOT_LOADED, reason=NOT_LOADED_REASON)
    decision = config.decide(code, fields, None, host, signature_ok)
    if not decision.allowed:
        return decision
    need = CONTROLLER_PERMISSIONS.get(code)
    if need is not None:  # the controller inside (enableControllerInNamesrv): its table
        return check_need(config, code, decision, need)
    if code not in NAMESRV_ADMIN_CODES:
        return decision
    if decision.access_key is None:  # a global white address
        return decision
    account = config.accounts.get(decision.access_key)
    if account is None or not account.admin:
        return Decision(False, f"Need admin permission for request code={code_name(code)} on "
                               f"the name server, but accessKey={decision.access_key} is not",
                        decision.access_key, NOT_ADMIN)
    return decision


decide_request = guard.request_decider(decide)


def header_gate(config: Callable[[], AclConfig | None],
                on_refusal: OnRefusal | None = None) -> guard.HeaderGate:
    """The broker's header gate (acl.guard) with the name server's ``decide``."""
    return guard.HeaderGate(config, on_refusal, decide_fn=decide_request, logger=log)


def guard_table(table: HandlerTable, config: Callable[[], AclConfig | None],
                on_refusal: OnRefusal | None = None, *,
                binding: SignatureBinding | None = None) -> HandlerTable:
    """The broker's guard (acl.guard) with the name server's ``decide``;
    ``binding`` checks signatures' binding (acl/binding.py)."""
    return guard.guard_table(table, config, on_refusal, decide_fn=decide_request, logger=log,
                             binding=binding)
