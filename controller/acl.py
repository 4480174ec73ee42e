"""The controller's ACL (issue 51): who may make each controller request.

``mqcontroller`` with ``aclEnable=true`` checks every request as the name server
does (namesrv/acl.py): the plain ACL's steps first (acl/plain.py: a global white
address, a known access key, the account's white address, the signature and its
binding, acl/binding.py), then what the request code needs, from one table,
``CONTROLLER_PERMISSIONS``:

- ``LOOKUP``: any known account (reading the controller's view: who leads, the
  replicas and SyncStateSets, the next free broker id);
- ``BROKER``: a broker's own account (``brokerAccessKey``): the requests replicas make
  about themselves (heart-beats, registration, broker ids, the master's SyncStateSet
  changes). In this project a broker's account is an ``admin: true`` account, as for
  the name server's REGISTER_BROKER and the HA port's hello; a client's account (PUB,
  SUB) cannot keep a dead master alive with forged heart-beats nor shrink a
  SyncStateSet;
- ``ADMIN``: an ``admin: true`` account (elections, the config, cleaning a broker's
  data). A replica without a master asks for an election itself, with the same
  (admin) account.

A code missing from the table needs ``ADMIN``. Only a global white address skips the
table, as it skips every check. The name server hosting the controller
(enableControllerInNamesrv) asks the same table for these codes.

``decide`` is pure; ``guard_table`` and ``header_gate`` put it around mqcontroller's
handlers and in front of connections not yet authenticated (protocol/trio/preauth.py),
as acl/guard.py does for the broker.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping

import structlog

from acl import guard
from acl.binding import SignatureBinding, code_name
from acl.guard import NOT_LOADED, OnRefusal
from acl.plain import NOT_ADMIN, AclConfig, Decision
from acl.plain import NOT_LOADED as NOT_LOADED_REASON
from protocol.codes import RequestCode
from protocol.trio.connection import HandlerTable
from protocol.trio.limits import MiB

log = structlog.get_logger("controller.acl")

# the largest request body of a controller (aclPreAuthMaxFrameBytes=0 makes room for
# it): a CONTROLLER_GET_SYNC_STATE_DATA of thousands of broker names
CONTROLLER_PRE_AUTH_BODY = 1 * MiB


class Need(enum.Enum):
    """What a controller request needs once its account is known and its signature
    verified."""

    LOOKUP = "any known account"
    BROKER = "a broker's account (admin: true, as brokerAccessKey's)"
    ADMIN = "an admin account"

    @property
    def admin(self) -> bool:
        return self is not Need.LOOKUP


# request code -> what it needs (every handler of controller/processor.py has a row)
CONTROLLER_PERMISSIONS: Mapping[int, Need] = {
    RequestCode.CONTROLLER_GET_METADATA_INFO: Need.LOOKUP,
    RequestCode.CONTROLLER_GET_REPLICA_INFO: Need.LOOKUP,
    RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: Need.LOOKUP,
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: Need.LOOKUP,
    RequestCode.BROKER_HEARTBEAT: Need.BROKER,
    RequestCode.CONTROLLER_REGISTER_BROKER: Need.BROKER,
    RequestCode.CONTROLLER_APPLY_BROKER_ID: Need.BROKER,
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: Need.BROKER,
    RequestCode.CONTROLLER_ELECT_MASTER: Need.ADMIN,
    RequestCode.UPDATE_CONTROLLER_CONFIG: Need.ADMIN,
    RequestCode.GET_CONTROLLER_CONFIG: Need.ADMIN,
    RequestCode.CLEAN_BROKER_DATA: Need.ADMIN,
}


def need_of(code: int) -> Need:
    """What ``code`` needs on a controller (a code without a row: ADMIN)."""
    return CONTROLLER_PERMISSIONS.get(code, Need.ADMIN)


def check_need(config: AclConfig, code: int, decision: Decision, need: Need) -> Decision:
    """The table's step after the plain ACL allowed a request (``decision``)."""
    if not need.admin or decision.access_key is None:  # None: a global white address
        return decision
    account = config.accounts.get(decision.access_key)
    if account is not None and account.admin:
        return decision
    return Decision(False, f"Need admin permission for request code={code_name(code)} on the "
                           f"controller ({need.value}), but accessKey={decision.access_key} "
                           "is not",
                    decision.access_key, NOT_ADMIN)


def decide(config: AclConfig | None, code: int, fields: Mapping[str, object], host: str,
           signature_ok: Callable[[str], bool]) -> Decision:
    """Whether the controller serves a request (pure)."""
    if config is None:
        return Decision(False, NOT_LOADED, reason=NOT_LOADED_REASON)
    decision = config.decide(code, fields, None, host, signature_ok)
    if not decision.allowed:
        return decision
    return check_need(config, code, decision, need_of(code))


decide_request = guard.request_decider(decide)


def header_gate(config: Callable[[], AclConfig | None],
                on_refusal: OnRefusal | None = None) -> guard.HeaderGate:
    """acl.guard's header gate with the controller's ``decide``."""
    return guard.HeaderGate(config, on_refusal, decide_fn=decide_request, logger=log)


def guard_table(table: HandlerTable, config: Callable[[], AclConfig | None],
                on_refusal: OnRefusal | None = None, *,
                binding: SignatureBinding | None = None) -> HandlerTable:
    """acl.guard's guard with the controller's ``decide``; ``binding`` checks
    signatures' binding (acl/binding.py)."""
    return guard.guard_table(table, config, on_refusal, decide_fn=decide_request, logger=log,
                             binding=binding)
