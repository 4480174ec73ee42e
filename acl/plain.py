"""RocketMQ's plain ACL: ``plain_acl.yml`` accounts and the decision on one request.

As RocketMQ 4.x's ``PlainPermissionManager``, ``PlainAccessValidator.parse``
and ``Permission``; pure code: the caller hands in the request's code, header
fields and decoded heartbeat, the peer's host and a callable checking the
request's signature with an account's secret key (protocol/acl.py signs).

Order of checks (``PlainPermissionManager.validate``):

1. the peer matches a ``globalWhiteRemoteAddresses`` pattern: allowed;
2. no ``AccessKey`` field, or one no account has: refused;
3. the peer matches the account's ``whiteRemoteAddress``: allowed;
4. the signature does not verify with the account's ``secretKey``: refused;
5. sending to ``RMQ_SYS_TRACE_TOPIC`` (message trace): allowed;
6. an admin-only request code from an account without ``admin: true``: refused;
7. an admin account with no ``topicPerms`` and no ``groupPerms``: allowed;
8. every resource the request names needs its permission (PUB or SUB), from
   the account's ``topicPerms``/``groupPerms`` entry or else from its
   ``defaultTopicPerm``/``defaultGroupPerm``; DENY in what it has refuses.

A group is the resource ``%RETRY%<group>`` (so a request on a retry topic is
checked against its group), as RocketMQ's.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from acl.address import NoAddress, RemoteAddressStrategy, parse_host
from protocol import names
from protocol.acl import ACCESS_KEY
from protocol.client_data import HeartbeatData
from protocol.codes import RequestCode, ResponseCode

# The ACL fields of a request header (RocketMQ's SessionCredentials).

# RocketMQ's AclConstants: an access key must be longer than this
ACCESS_KEY_MIN_LENGTH = 6
# a secret key has at least this many characters (the project's rule; RocketMQ wants 7)
SECRET_KEY_MIN_LENGTH = 6

# RocketMQ request codes protocol/codes.py does not define (RocketMQ 4.9's RequestCode).
UPDATE_AND_CREATE_ACL_CONFIG = RequestCode.UPDATE_AND_CREATE_ACL_CONFIG
DELETE_ACL_CONFIG = RequestCode.DELETE_ACL_CONFIG
GET_BROKER_CLUSTER_ACL_INFO = RequestCode.GET_BROKER_CLUSTER_ACL_INFO
UPDATE_GLOBAL_WHITE_ADDRS_CONFIG = RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG
GET_BROKER_CLUSTER_ACL_CONFIG = RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG
INVOKE_BROKER_TO_RESET_OFFSET = RequestCode.INVOKE_BROKER_TO_RESET_OFFSET
CLONE_GROUP_OFFSET = 314
DELETE_EXPIRED_COMMITLOG = 329

# Requests only an ``admin: true`` account may make: RocketMQ's Permission.ADMIN_CODE
# (the first five and the ACL ones), and the other requests that change the
# broker's configuration, its permission or consumers' progress.
ADMIN_CODES: frozenset[int] = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_SUBSCRIPTIONGROUP,
    UPDATE_AND_CREATE_ACL_CONFIG,
    DELETE_ACL_CONFIG,
    GET_BROKER_CLUSTER_ACL_INFO,
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    GET_BROKER_CLUSTER_ACL_CONFIG,
    INVOKE_BROKER_TO_RESET_OFFSET,
    CLONE_GROUP_OFFSET,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.TRIGGER_DELETE_FILES,
    DELETE_EXPIRED_COMMITLOG,
    RequestCode.DELETE_TOPIC_IN_NAMESRV,
    # removing consume queues (mqadmin cleanExpiredCQ, cleanUnusedTopic)
    RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE,
    RequestCode.CLEAN_UNUSED_TOPIC,
    # reading the configuration: it names the broker's own account (brokerAccessKey)
    # and its files; secrets are masked, the rest is still for operators only
    RequestCode.GET_BROKER_CONFIG,
})


class Perm(enum.IntFlag):
    """RocketMQ's Permission bits."""

    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8


PERM_NAMES: dict[str, Perm] = {
    "DENY": Perm.DENY,
    "PUB": Perm.PUB,
    "SUB": Perm.SUB,
    "PUB|SUB": Perm.PUB | Perm.SUB,
    "SUB|PUB": Perm.PUB | Perm.SUB,
}


def perm_name(perm: Perm) -> str:
    if perm & Perm.DENY:
        return "DENY"
    named = [n for n, bit in (("PUB", Perm.PUB), ("SUB", Perm.SUB)) if perm & bit]
    return "|".join(named) if named else "DENY"


def check_permission(needed: Perm, owned: Perm) -> bool:
    """RocketMQ's Permission.checkPermission: DENY in ``owned`` always wins."""
    if owned & Perm.DENY:
        return False
    if needed & Perm.ANY:
        return bool(owned & (Perm.PUB | Perm.SUB))
    return bool(needed & owned)


def is_group_resource(resource: str) -> bool:
    return resource.startswith(names.RETRY_GROUP_TOPIC_PREFIX)


def group_resource(group: str) -> str:
    return names.RETRY_GROUP_TOPIC_PREFIX + group


def describe_resource(resource: str) -> str:
    """``topic=TopicA`` or ``group=GroupA`` (for ``%RETRY%GroupA``), bounded."""
    if is_group_resource(resource):
        return f"group={_shown(resource[len(names.RETRY_GROUP_TOPIC_PREFIX):])}"
    return f"topic={_shown(resource)}"


def _shown(name: str) -> str:
    if len(name) <= names.SHOWN_PREFIX and names.VALID_NAME.fullmatch(name):
        return name
    return names.shown(name)


# ---------------------------------------------------------------- accounts


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    white_remote_address: RemoteAddressStrategy
    admin: bool = False
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    # topic names and %RETRY%<group> for groups, as RocketMQ's resourcePermMap
    resource_perms: Mapping[str, Perm] = field(default_factory=dict)

    def owned(self, resource: str) -> tuple[Perm, str]:
        """The permission the account has on ``resource`` and where it comes from."""
        perm = self.resource_perms.get(resource)
        if perm is not None:
            return perm, "groupPerms" if is_group_resource(resource) else "topicPerms"
        if is_group_resource(resource):
            return self.default_group_perm, "defaultGroupPerm"
        if resource in OTHER_TOPICS_HOLDERS:
            return Perm.DENY, "defaultTopicPerm does not cover system topics"
        return self.default_topic_perm, "defaultTopicPerm"


# System topics holding other topics' messages (half, op, delayed, given-up
# transactions): beyond RocketMQ, ``defaultTopicPerm`` does not reach them, so an
# account reading "any topic" does not read every topic's transactions and delayed
# messages through them; a topicPerms entry (or an admin account) does.
OTHER_TOPICS_HOLDERS: frozenset[str] = frozenset({
    names.RMQ_SYS_TRANS_HALF_TOPIC, names.RMQ_SYS_TRANS_OP_HALF_TOPIC,
    names.RMQ_SYS_SCHEDULE_TOPIC, names.TRANS_CHECK_MAX_TIME_TOPIC,
})


@dataclass(frozen=True)
class Decision:
    allowed: bool
    remark: str = ""
    access_key: str | None = None
    # why a request was refused, for the metrics: one of REFUSAL_REASONS
    reason: str = ""
    # the precise reason, for the broker's log only (never sent: see SIGNATURE_REFUSED)
    detail: str = ""

    @property
    def response_code(self) -> int:
        return ResponseCode.SUCCESS if self.allowed else ResponseCode.NO_PERMISSION


# Decision.reason of a refusal (the label of rocketmq_acl_refusals_total)
NO_ACCESS_KEY = "no_access_key"
UNKNOWN_ACCOUNT = "unknown_account"
BAD_SIGNATURE = "signature"
NOT_ADMIN = "admin"
NO_PERMISSION = "permission"
NOT_LOADED = "not_loaded"
REFUSAL_REASONS = (NO_ACCESS_KEY, UNKNOWN_ACCOUNT, BAD_SIGNATURE, NOT_ADMIN, NO_PERMISSION,
                   NOT_LOADED)


# The remark of a refusal for an unknown access key and for a wrong signature alike.
SIGNATURE_REFUSED = ("Check signature failed: the access key is unknown or the signature "
                     "is wrong")


def _refused(remark: str, access_key: str | None = None, reason: str = NO_PERMISSION,
             detail: str = "") -> Decision:
    return Decision(False, remark, access_key, reason, detail)


@dataclass(frozen=True)
class Need:
    """One resource a request names and the permission it needs."""

    resource: str
    perm: Perm


def _field(fields: Mapping[str, object], *keys: str) -> str | None:
    """A header field as text (clients send ints and booleans too), or None."""
    for key in keys:
        value = fields.get(key)
        if value is None:
            continue
        if type(value) is str:
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str | int):
            return str(value)
    return None


# How a header field names a resource (HEADER_RESOURCES):
SEND_TOPIC = "send"  # PUB on the topic; SUB on a %RETRY%<group> topic (a consumer's retry)
SUB_TOPIC = "topic"  # SUB on the topic
SUB_GROUP = "group"  # SUB on the group (the resource %RETRY%<group>)

# Requests about one topic's queues (header field ``topic``): SUB on the topic.
TOPIC_READ_CODES: frozenset[int] = frozenset({
    RequestCode.GET_MAX_OFFSET,
    RequestCode.GET_MIN_OFFSET,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
    RequestCode.GET_TOPIC_STATS_INFO,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
    RequestCode.GET_TOPIC_CONFIG,
})

# The resources a request's header names, per code (RocketMQ's
# PlainAccessValidator.parse): (the fields read, the first one present; how it names
# a resource), in the order they are checked. HEART_BEAT names its resources in its
# body; the codes not listed name none.
_Spec = tuple[tuple[tuple[str, ...], str], ...]
_TOPIC_READ: _Spec = ((("topic",), SUB_TOPIC),)
_GROUP_READ: _Spec = ((("consumerGroup",), SUB_GROUP),)
_GROUP_AND_TOPIC: _Spec = ((("consumerGroup",), SUB_GROUP), (("topic",), SUB_TOPIC))
HEADER_RESOURCES: Mapping[int, _Spec] = {
    RequestCode.SEND_MESSAGE: ((("topic", "b"), SEND_TOPIC),),
    RequestCode.SEND_MESSAGE_V2: ((("b",), SEND_TOPIC),),
    RequestCode.SEND_BATCH_MESSAGE: ((("topic", "b"), SEND_TOPIC),),
    RequestCode.RECALL_MESSAGE: ((("topic",), SEND_TOPIC),),
    RequestCode.CONSUMER_SEND_MSG_BACK: ((("group",), SUB_GROUP),),
    RequestCode.PULL_MESSAGE: ((("topic",), SUB_TOPIC), (("consumerGroup",), SUB_GROUP)),
    RequestCode.POP_MESSAGE: _GROUP_AND_TOPIC,
    RequestCode.ACK_MESSAGE: _GROUP_AND_TOPIC,
    RequestCode.BATCH_ACK_MESSAGE: _GROUP_AND_TOPIC,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _GROUP_AND_TOPIC,
    RequestCode.QUERY_MESSAGE: _TOPIC_READ,
    RequestCode.UNREGISTER_CLIENT: _GROUP_READ,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _GROUP_READ,
    RequestCode.UPDATE_CONSUMER_OFFSET: _GROUP_AND_TOPIC,
    RequestCode.QUERY_CONSUMER_OFFSET: _GROUP_AND_TOPIC,
    RequestCode.GET_CONSUME_STATS: _GROUP_AND_TOPIC,
    RequestCode.QUERY_CONSUME_QUEUE: _GROUP_AND_TOPIC,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: _GROUP_READ,
    RequestCode.GET_CONSUMER_RUNNING_INFO: _GROUP_READ,
    # beyond RocketMQ: what a queue holds (offsets, counts, who consumes it) is
    # read with the topic's SUB, as its messages are
    **{code: _TOPIC_READ for code in TOPIC_READ_CODES},
}


def _header_needs(spec: _Spec, names: tuple[str | None, ...]) -> list[Need]:
    """The Needs of ``spec``'s fields, whose texts are ``names`` (None: missing)."""
    needs: dict[str, Perm] = {}
    for (_fields, kind), name in zip(spec, names, strict=True):
        if name is None:
            continue
        if kind == SUB_GROUP:
            needs[group_resource(name)] = Perm.SUB
        elif kind == SEND_TOPIC:
            needs[name] = Perm.SUB if is_group_resource(name) else Perm.PUB
        else:
            needs[name] = Perm.SUB
    return [Need(r, p) for r, p in needs.items()]


def _header_names(spec: _Spec, fields: Mapping[str, object]) -> tuple[str | None, ...]:
    return tuple([_field(fields, *keys) for keys, _kind in spec])


def required_resources(code: int, fields: Mapping[str, object],
                       heartbeat: HeartbeatData | None) -> list[Need]:
    """What a request needs, per code (RocketMQ's PlainAccessValidator.parse).

    Codes not listed need no resource permission (only the admin check and the
    account's identity). A missing field adds nothing, as RocketMQ's
    ``addResourceAndPerm(null, ...)``: the request's own processor refuses it.
    """
    if code == RequestCode.HEART_BEAT:
        needs: dict[str, Perm] = {}
        for consumer in heartbeat.consumers if heartbeat is not None else ():
            if consumer.group_name is not None:
                needs[group_resource(consumer.group_name)] = Perm.SUB
            for sub in consumer.subscriptions:
                if sub.topic is not None:
                    needs[sub.topic] = Perm.SUB
        return [Need(r, p) for r, p in needs.items()]
    spec = HEADER_RESOURCES.get(code, ())
    return _header_needs(spec, _header_names(spec, fields))


# Permission decisions remembered per accounts file (AclConfig.decide): a full
# cache is emptied, so a flood of names only costs the check again. Only requests
# whose names are no longer than a valid one (a group's 255 characters) are
# remembered: a few MB at most, whatever names a header (up to 256 KiB) carries.
DECISION_CACHE_ENTRIES = 4096
CACHED_NAME_MAX = names.GROUP_MAX_LENGTH
_DecisionKey = tuple[str, int, tuple[str | None, ...]]

ALLOWED = Decision(True)  # a globally white peer
NO_CODE = -1  # the request code of a request that has none (gRPC): never admin-only


@dataclass(frozen=True)
class AclConfig:
    global_white: tuple[RemoteAddressStrategy, ...] = ()
    accounts: Mapping[str, Account] = field(default_factory=dict)
    # (access key, request code, the names its header fields give) -> the permission
    # step's Decision, for requests whose signature verified; a reload of the file
    # makes a new AclConfig, so a new cache
    _decisions: dict[_DecisionKey, Decision] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    # the Decision allowing each account (shared: Decision is frozen)
    _allowed: dict[str, Decision] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._allowed.update({key: Decision(True, access_key=key) for key in self.accounts})

    def decide(self, code: int, fields: Mapping[str, object],
               heartbeat: HeartbeatData | None, remote_host: str,
               signature_ok: Callable[[str], bool]) -> Decision:
        if self.global_white and self._white(remote_host, self.global_white):
            return ALLOWED
        access_key = fields.get(ACCESS_KEY)
        if type(access_key) is not str:
            access_key = _field(fields, ACCESS_KEY)
        account = self._account(access_key, remote_host, signature_ok)
        if isinstance(account, Decision):
            return account
        if code == RequestCode.HEART_BEAT:  # resources in the body: not remembered
            return self._permission(account, code, required_resources(code, fields, heartbeat))
        spec = HEADER_RESOURCES.get(code, ())
        named = _header_names(spec, fields)
        key = (account.access_key, code, named)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._permission(account, code, _header_needs(spec, named))
            if all(n is None or len(n) <= CACHED_NAME_MAX for n in named):
                if len(self._decisions) >= DECISION_CACHE_ENTRIES:
                    self._decisions.clear()
                self._decisions[key] = decision
        return decision

    def decide_needs(self, access_key: str, remote_host: str,
                     signature_ok: Callable[[str], bool], needs: list[Need]) -> Decision:
        """A request of another transport (gRPC: broker/grpc/access.py) whose resources
        the caller names: ``decide``'s steps with ``needs`` for the header's (no gRPC
        request is admin-only)."""
        if self.global_white and self._white(remote_host, self.global_white):
            return ALLOWED
        account = self._account(access_key, remote_host, signature_ok)
        if isinstance(account, Decision):
            return account
        return self._permission(account, NO_CODE, needs)

    def _account(self, access_key: str | None, remote_host: str,
                 signature_ok: Callable[[str], bool]) -> Account | Decision:
        """The steps every request takes after the global white list: the account
        whose signature checks, or the final decision (refused; allowed by the
        account's white address)."""
        if not access_key:
            return _refused("No accessKey is configured", reason=NO_ACCESS_KEY)
        account = self.accounts.get(access_key)
        # an unknown key and a wrong signature get one remark: the answer must not
        # tell which access keys exist (the log has the precise reason, ``detail``)
        if account is None:
            return _refused(SIGNATURE_REFUSED, reason=UNKNOWN_ACCOUNT,
                            detail=f"No acl config for accessKey={_shown(access_key)}")
        if type(account.white_remote_address) is not NoAddress and \
                self._white(remote_host, (account.white_remote_address,)):
            return self._allow(access_key)
        if not signature_ok(account.secret_key):
            return _refused(SIGNATURE_REFUSED, access_key, BAD_SIGNATURE,
                            detail=f"Check signature failed for accessKey={access_key}")
        return account

    def _permission(self, account: Account, code: int, needs: list[Need]) -> Decision:
        """The steps after the signature: the trace topic, the admin check, the
        permissions on ``needs``."""
        # message trace: RocketMQ lets any signed account send to the trace topic
        if any(n.resource == names.RMQ_SYS_TRACE_TOPIC and n.perm == Perm.PUB for n in needs):
            return self._allow(account.access_key)
        return self.check_perm(account, code, needs)

    def _allow(self, access_key: str) -> Decision:
        decision = self._allowed.get(access_key)
        return Decision(True, access_key=access_key) if decision is None else decision

    def decide_stored(self, code: int, access_key: str | None, remote_host: str,
                      needs: Iterable[Need]) -> Decision:
        """Resources a processor finds in a request's body or in the stored data
        (the topic of the message at an offset, a half message's real topic), for
        a request ``decide`` let in: the same white addresses and permissions,
        without the signature (verified once, by the guard, which also made sure
        ``access_key`` names an account unless the peer is globally white)."""
        if self._white(remote_host, self.global_white):
            return ALLOWED
        account = self.accounts.get(access_key) if access_key else None
        if account is None:  # the account was deleted since, or no key was given
            return _refused(SIGNATURE_REFUSED, access_key, UNKNOWN_ACCOUNT,
                            detail=f"No acl config for accessKey={_shown(access_key or '')}")
        if self._white(remote_host, (account.white_remote_address,)):
            return self._allow(account.access_key)
        return self.check_perm(account, code, needs)

    def globally_white(self, remote_host: str) -> bool:
        """Whether ``remote_host`` is a global white address: every request from it
        passes, whatever it carries."""
        return self._white(remote_host, self.global_white)

    @staticmethod
    def _white(remote_host: str, strategies: Iterable[RemoteAddressStrategy]) -> bool:
        addr = parse_host(remote_host)
        for strategy in strategies:
            if strategy.matches(remote_host) if addr is None else strategy.matches_address(addr):
                return True
        return False

    @staticmethod
    def check_perm(account: Account, code: int, needs: Iterable[Need]) -> Decision:
        """RocketMQ's PlainPermissionManager.checkPerm for an authenticated account."""
        key = account.access_key
        if code in ADMIN_CODES and not account.admin:
            try:
                what = f"{code} ({RequestCode(code).name})"
            except ValueError:
                what = str(code)
            return _refused(
                f"Need admin permission for request code={what}, but accessKey={key} is not",
                key, NOT_ADMIN)
        if account.admin and not account.resource_perms:
            return Decision(True, access_key=key)
        for need in needs:
            owned, source = account.owned(need.resource)
            if not check_permission(need.perm, owned):
                return _refused(
                    f"No permission for {describe_resource(need.resource)}: "
                    f"{perm_name(need.perm)} needed, account {key} has {perm_name(owned)} "
                    f"({source})", key)
        return Decision(True, access_key=key)


# ---------------------------------------------------------------- plain_acl.yml


class _TextLoader(yaml.SafeLoader):
    """SafeLoader reading every scalar as its text (null aside): a secretKey
    ``012345`` stays ``"012345"``, not the octal number 5349."""


_TextLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag == "tag:yaml.org,2002:null"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

_TOP_KEYS = frozenset({"globalWhiteRemoteAddresses", "accounts", "dataVersion"})
_ACCOUNT_KEYS = frozenset({"accessKey", "secretKey", "whiteRemoteAddress", "admin",
                           "defaultTopicPerm", "defaultGroupPerm", "topicPerms", "groupPerms"})
_TRUE = frozenset({"true", "yes", "on", "y"})
_FALSE = frozenset({"false", "no", "off", "n", ""})


def _address(pattern: object, where: str) -> RemoteAddressStrategy:
    if pattern is not None and not isinstance(pattern, str):
        raise ValueError(f"{where} must be an address pattern, not {type(pattern).__name__}")
    try:
        return RemoteAddressStrategy.parse(pattern)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _perm(text: object, where: str) -> Perm:
    if text is None:
        return Perm.DENY  # RocketMQ's parsePermFromString(null)
    if not isinstance(text, str) or text.strip() not in PERM_NAMES:
        raise ValueError(f"{where}: {text!r} is not one of DENY, PUB, SUB, PUB|SUB")
    return PERM_NAMES[text.strip()]


def _strings(value: object, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a list of strings")
    return value


def _account(raw: object, index: int) -> Account:
    where = f"accounts[{index}]"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a map of accessKey, secretKey, ...")
    key = raw.get("accessKey")
    if isinstance(key, str) and key:
        where = f"account {key!r}"
    unknown = sorted(str(k) for k in raw if k not in _ACCOUNT_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (known: "
                         f"{', '.join(sorted(_ACCOUNT_KEYS))})")
    if not isinstance(key, str) or len(key) <= ACCESS_KEY_MIN_LENGTH:
        raise ValueError(f"{where}: accessKey is missing or not longer than "
                         f"{ACCESS_KEY_MIN_LENGTH} characters")
    secret = raw.get("secretKey")
    if not isinstance(secret, str) or len(secret) < SECRET_KEY_MIN_LENGTH:
        raise ValueError(f"{where}: secretKey is missing or shorter than "
                         f"{SECRET_KEY_MIN_LENGTH} characters")
    admin_text = raw.get("admin")
    admin_text = "" if admin_text is None else admin_text
    if not isinstance(admin_text, str) or admin_text.lower() not in _TRUE | _FALSE:
        raise ValueError(f"{where}: admin must be true or false")
    resource_perms: dict[str, Perm] = {}
    for field_name, is_topic in (("groupPerms", False), ("topicPerms", True)):
        for entry in _strings(raw.get(field_name), f"{where}: {field_name}"):
            name, sep, perm_text = entry.partition("=")
            name = name.strip()
            if not sep or not name or "=" in perm_text or not perm_text.strip():
                raise ValueError(f"{where}: {field_name} entry {entry!r} is not name=PERM "
                                 f"(for example topicA=SUB)")
            perm = _perm(perm_text, f"{where}: {field_name} entry {entry!r}")
            resource_perms[name if is_topic else group_resource(name)] = perm
    return Account(
        access_key=key,
        secret_key=secret,
        white_remote_address=_address(raw.get("whiteRemoteAddress"),
                                      f"{where}: whiteRemoteAddress"),
        admin=admin_text.lower() in _TRUE,
        default_topic_perm=_perm(raw.get("defaultTopicPerm"), f"{where}: defaultTopicPerm"),
        default_group_perm=_perm(raw.get("defaultGroupPerm"), f"{where}: defaultGroupPerm"),
        resource_perms=resource_perms,
    )


def parse_plain_acl(text: str) -> AclConfig:
    """``plain_acl.yml`` as an AclConfig; ValueError naming the account and field."""
    try:
        data: Any = yaml.load(text, Loader=_TextLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as e:
        raise ValueError(f"not valid YAML: {e}") from None
    if data is None or data == {}:
        raise ValueError("the file holds no data")
    if not isinstance(data, dict):
        raise ValueError("the file must be a map of globalWhiteRemoteAddresses and accounts")
    unknown = sorted(str(k) for k in data if k not in _TOP_KEYS)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(_TOP_KEYS))})")
    global_white = tuple(
        _address(p, f"globalWhiteRemoteAddresses[{i}]")
        for i, p in enumerate(_strings(data.get("globalWhiteRemoteAddresses"),
                                       "globalWhiteRemoteAddresses")))
    raw_accounts = data.get("accounts")
    if raw_accounts is None:
        raw_accounts = []
    if not isinstance(raw_accounts, list):
        raise ValueError("accounts must be a list")
    accounts: dict[str, Account] = {}
    for i, raw in enumerate(raw_accounts):
        account = _account(raw, i)
        if account.access_key in accounts:
            raise ValueError(f"account {account.access_key!r}: accessKey is defined twice")
        accounts[account.access_key] = account
    return AclConfig(global_white, accounts)


# ---------------------------------------------------------------- reloading


@dataclass
class AclWatcher:
    """The accounts in force, re-read when the file's mtime changes.

    The trio edge polls the file every few seconds and hands its text and mtime
    to ``load``; a file that does not parse leaves the last good accounts in
    force, and ``load`` returns why, to log (once per change of the file).
    """

    config: AclConfig | None = None
    mtime: float | None = None
    error: str | None = None

    def needs_reload(self, mtime: float) -> bool:
        return mtime != self.mtime

    def load(self, text: str, mtime: float) -> str | None:
        """Read a new version of the file: None when it is in force, else the error."""
        self.mtime = mtime
        try:
            config = parse_plain_acl(text)
        except ValueError as e:
            kept = "keeping the last good accounts" if self.config is not None \
                else "no accounts loaded yet"
            self.error = f"plain_acl.yml not loaded ({kept}): {e}"
            return self.error
        self.config, self.error = config, None
        return None
