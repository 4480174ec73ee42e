"""Changing ``plain_acl.yml`` as RocketMQ's admin requests do (pure code).

RocketMQ 4.x's ``PlainPermissionManager.updateAccessConfig``,
``deleteAccessConfig``, ``updateGlobalWhiteAddrsConfig`` and
``getAllAclConfig``: the file's document is read, changed, given the next
``dataVersion`` (a list of one ``{counter, timestamp}`` map, as RocketMQ
writes it) and rendered back in RocketMQ's block YAML. A change that would not
parse as a valid file raises AclAdminError and changes nothing; the trio edge
(broker/acl/admin_processor.py) writes the rendered text atomically.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from acl.address import RemoteAddressStrategy
from acl.plain import (
    ACCESS_KEY_MIN_LENGTH,
    PERM_NAMES,
    SECRET_KEY_MIN_LENGTH,
    AclConfig,
    _TextLoader,
    parse_plain_acl,
)

# RocketMQ's AclConstants
CONFIG_GLOBAL_WHITE_ADDRS = "globalWhiteRemoteAddresses"
CONFIG_ACCOUNTS = "accounts"
CONFIG_DATA_VERSION = "dataVersion"
# the order RocketMQ's PlainAccessConfig fields are written in
ACCOUNT_FIELDS = ("accessKey", "secretKey", "whiteRemoteAddress", "admin",
                  "defaultTopicPerm", "defaultGroupPerm", "topicPerms", "groupPerms")
# bounds on what an admin request may hold (the file is read on every reload)
MAX_KEY_LENGTH = 255
MAX_PERMS = 10_000
MAX_ADDRESSES = 1_000
MAX_FIELD_LENGTH = 32_767


class AclAdminError(ValueError):
    """An ACL admin request that cannot be applied; the message says why."""


@dataclass(frozen=True)
class AclVersion:
    """The file's ``dataVersion`` (RocketMQ's DataVersion)."""

    counter: int = 0
    timestamp: int = 0

    def next(self, now_ms: int) -> AclVersion:
        return AclVersion(self.counter + 1, max(now_ms, 0))

    def to_dict(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    def to_json(self) -> str:
        """As RocketMQ's DataVersion.toJson (the ``version`` field of 52's answer)."""
        return json.dumps({"counter": self.counter, "stateVersion": 0,
                           "timestamp": self.timestamp}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: object) -> AclVersion:
        try:
            d = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            d = None
        return _version_of(d)


def _int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return 0


def _version_of(raw: object) -> AclVersion:
    if isinstance(raw, list):
        raw = raw[0] if raw else None
    if not isinstance(raw, dict):
        return AclVersion()
    return AclVersion(_int(raw.get("counter")), _int(raw.get("timestamp")))


@dataclass(frozen=True)
class AccessConfig:
    """One account as an update carries it (RocketMQ's PlainAccessConfig).

    None means "not given": an update of an existing account keeps that field,
    as RocketMQ's createAclAccessConfigMap.
    """

    access_key: str
    secret_key: str | None = None
    white_remote_address: str | None = None
    admin: bool | None = None
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: tuple[str, ...] | None = None
    group_perms: tuple[str, ...] | None = None

    @classmethod
    def from_fields(cls, fields: Mapping[str, object]) -> AccessConfig:
        """From UPDATE_AND_CREATE_ACL_CONFIG's header (CreateAccessConfigRequestHeader):
        ``topicPerms``/``groupPerms`` are comma-separated ``name=PERM`` lists; an
        absent ``admin`` keeps an existing account's flag (a new one is not admin)."""
        def text(key: str) -> str | None:
            value = fields.get(key)
            if value is None:
                return None
            if isinstance(value, bool):
                return "true" if value else "false"
            if not isinstance(value, str | int):
                raise AclAdminError(f"{key} must be text")
            if isinstance(value, str) and len(value) > MAX_FIELD_LENGTH:
                raise AclAdminError(f"{key} is longer than {MAX_FIELD_LENGTH} characters")
            return str(value)

        key = text("accessKey")
        if not key:
            raise AclAdminError("accessKey is missing")
        admin = text("admin")
        admin = None if admin is None else admin.strip().lower()
        if admin not in (None, "true", "false"):
            raise AclAdminError(f"admin must be true or false, not {admin[:20]!r}")
        return cls(
            access_key=key,
            secret_key=text("secretKey") or None,
            white_remote_address=text("whiteRemoteAddress"),
            admin=None if admin is None else admin == "true",
            default_topic_perm=text("defaultTopicPerm") or None,
            default_group_perm=text("defaultGroupPerm") or None,
            topic_perms=split_list(text("topicPerms")),
            group_perms=split_list(text("groupPerms")),
        )

    def to_fields(self) -> dict[str, str]:
        """The request header (client side); absent fields left out."""
        out = {"accessKey": self.access_key}
        if self.admin is not None:
            out["admin"] = "true" if self.admin else "false"
        for name, value in (("secretKey", self.secret_key),
                            ("whiteRemoteAddress", self.white_remote_address),
                            ("defaultTopicPerm", self.default_topic_perm),
                            ("defaultGroupPerm", self.default_group_perm)):
            if value is not None:
                out[name] = value
        if self.topic_perms is not None:
            out["topicPerms"] = ",".join(self.topic_perms)
        if self.group_perms is not None:
            out["groupPerms"] = ",".join(self.group_perms)
        return out


def split_list(text: str | None) -> tuple[str, ...] | None:
    """``a,b , c`` as ("a", "b", "c"); None stays None, blanks are dropped."""
    if text is None:
        return None
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _check_perm(text: str | None, where: str) -> None:
    if text is not None and text.strip() not in PERM_NAMES:
        raise AclAdminError(f"{where}: {text[:40]!r} is not one of DENY, PUB, SUB, PUB|SUB")


def _check_address(text: str | None, where: str) -> None:
    if text is None:
        return
    try:
        RemoteAddressStrategy.parse(text)
    except ValueError as e:
        raise AclAdminError(f"{where}: {e}") from None


def check_access_config(cfg: AccessConfig, *, new: bool) -> None:
    """RocketMQ's checkPlainAccessConfig, with messages naming the field."""
    key = cfg.access_key
    if len(key) <= ACCESS_KEY_MIN_LENGTH or len(key) > MAX_KEY_LENGTH \
            or not key.isprintable() or key != key.strip():
        raise AclAdminError(f"accessKey must be {ACCESS_KEY_MIN_LENGTH + 1} to "
                            f"{MAX_KEY_LENGTH} printable characters without surrounding blanks")
    if cfg.secret_key is None:
        if new:
            raise AclAdminError(f"account {key}: a new account needs a secretKey")
    elif len(cfg.secret_key) < SECRET_KEY_MIN_LENGTH or len(cfg.secret_key) > MAX_KEY_LENGTH \
            or not cfg.secret_key.isprintable():
        raise AclAdminError(f"account {key}: secretKey must be {SECRET_KEY_MIN_LENGTH} to "
                            f"{MAX_KEY_LENGTH} printable characters")
    _check_address(cfg.white_remote_address, f"account {key}: whiteRemoteAddress")
    _check_perm(cfg.default_topic_perm, f"account {key}: defaultTopicPerm")
    _check_perm(cfg.default_group_perm, f"account {key}: defaultGroupPerm")
    for name, entries in (("topicPerms", cfg.topic_perms), ("groupPerms", cfg.group_perms)):
        if entries is None:
            continue
        if len(entries) > MAX_PERMS:
            raise AclAdminError(f"account {key}: more than {MAX_PERMS} {name}")
        for entry in entries:
            res, sep, perm = entry.partition("=")
            if not sep or not res.strip() or "=" in perm:
                raise AclAdminError(f"account {key}: {name} entry {entry[:60]!r} is not "
                                    f"name=PERM (for example topicA=SUB)")
            _check_perm(perm, f"account {key}: {name} entry {entry[:60]!r}")


def _account_dict(raw: Mapping[str, Any]) -> dict[str, Any]:
    """An account of the file, its fields in RocketMQ's order and types (admin a bool)."""
    out: dict[str, Any] = {}
    for name in ACCOUNT_FIELDS:
        if name not in raw or raw[name] is None:
            continue
        value = raw[name]
        if name == "admin":
            value = str(value).strip().lower() in ("true", "yes", "on", "y")
        elif name in ("topicPerms", "groupPerms"):
            value = [str(v) for v in value]
        else:
            value = str(value)
        out[name] = value
    return out


@dataclass(frozen=True)
class AclDocument:
    """``plain_acl.yml`` as RocketMQ keeps it: white addresses, accounts, version."""

    global_white: tuple[str, ...] = ()
    accounts: tuple[Mapping[str, Any], ...] = ()
    version: AclVersion = field(default_factory=AclVersion)

    # ---- reading and writing

    @classmethod
    def parse(cls, text: str) -> AclDocument:
        """ValueError (as parse_plain_acl's) when the file is not a valid ACL file."""
        parse_plain_acl(text)
        data: Any = yaml.load(text, Loader=_TextLoader)  # noqa: S506 - a SafeLoader
        white = data.get(CONFIG_GLOBAL_WHITE_ADDRS) or []
        accounts = data.get(CONFIG_ACCOUNTS) or []
        return cls(tuple(str(w) for w in white),
                   tuple(_account_dict(a) for a in accounts),
                   _version_of(data.get(CONFIG_DATA_VERSION)))

    def to_data(self) -> dict[str, Any]:
        return {
            CONFIG_GLOBAL_WHITE_ADDRS: list(self.global_white),
            CONFIG_ACCOUNTS: [dict(a) for a in self.accounts],
            CONFIG_DATA_VERSION: [self.version.to_dict()],
        }

    def render(self) -> str:
        """The file's text, block style as RocketMQ's snakeyaml writes it."""
        return yaml.safe_dump(self.to_data(), sort_keys=False, default_flow_style=False,
                              allow_unicode=True, width=4096)

    def config(self) -> AclConfig:
        return parse_plain_acl(self.render())

    def _checked(self) -> AclDocument:
        try:
            self.config()
        except ValueError as e:
            raise AclAdminError(str(e)) from None
        return self

    def account(self, access_key: str) -> Mapping[str, Any] | None:
        return next((a for a in self.accounts if a.get("accessKey") == access_key), None)

    # ---- the admin requests

    def with_account(self, cfg: AccessConfig, now_ms: int) -> AclDocument:
        """UPDATE_AND_CREATE_ACL_CONFIG: create the account, or update the given fields."""
        existing = self.account(cfg.access_key)
        check_access_config(cfg, new=existing is None)
        merged: dict[str, Any] = dict(existing or {})
        merged["accessKey"] = cfg.access_key
        if cfg.secret_key is not None:
            merged["secretKey"] = cfg.secret_key
        if cfg.white_remote_address is not None:
            merged["whiteRemoteAddress"] = cfg.white_remote_address
        if cfg.admin is not None:
            merged["admin"] = cfg.admin
        elif existing is None:
            merged["admin"] = False
        if cfg.default_topic_perm is not None:
            merged["defaultTopicPerm"] = cfg.default_topic_perm.strip()
        if cfg.default_group_perm is not None:
            merged["defaultGroupPerm"] = cfg.default_group_perm.strip()
        if cfg.topic_perms is not None:
            merged["topicPerms"] = list(cfg.topic_perms)
        if cfg.group_perms is not None:
            merged["groupPerms"] = list(cfg.group_perms)
        account = _account_dict(merged)
        if existing is None:
            accounts = (*self.accounts, account)
        else:
            accounts = tuple(account if a is existing else a for a in self.accounts)
        return replace(self, accounts=accounts, version=self.version.next(now_ms))._checked()

    def without_account(self, access_key: str, now_ms: int) -> AclDocument:
        """DELETE_ACL_CONFIG; AclAdminError when no account has that key."""
        if self.account(access_key) is None:
            raise AclAdminError(f"no account with accessKey={access_key[:64]}")
        accounts = tuple(a for a in self.accounts if a.get("accessKey") != access_key)
        return replace(self, accounts=accounts, version=self.version.next(now_ms))._checked()

    def with_global_white(self, addresses: Iterable[str], now_ms: int) -> AclDocument:
        """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: the list replaces the file's."""
        white = tuple(a.strip() for a in addresses if a.strip())
        if len(white) > MAX_ADDRESSES:
            raise AclAdminError(f"more than {MAX_ADDRESSES} global white addresses")
        for i, pattern in enumerate(white):
            _check_address(pattern, f"globalWhiteRemoteAddresses[{i}]")
        return replace(self, global_white=white, version=self.version.next(now_ms))._checked()

    # ---- GET_BROKER_CLUSTER_ACL_CONFIG (RocketMQ's AclConfig as JSON)

    def to_acl_config(self) -> dict[str, Any]:
        configs = []
        for a in self.accounts:
            configs.append({
                "accessKey": a.get("accessKey"),
                "secretKey": a.get("secretKey"),
                "whiteRemoteAddress": a.get("whiteRemoteAddress"),
                "admin": bool(a.get("admin", False)),
                "defaultTopicPerm": a.get("defaultTopicPerm"),
                "defaultGroupPerm": a.get("defaultGroupPerm"),
                "topicPerms": list(a.get("topicPerms") or []),
                "groupPerms": list(a.get("groupPerms") or []),
            })
        return {"globalWhiteAddrs": list(self.global_white), "plainAccessConfigs": configs}

    @classmethod
    def from_acl_config(cls, body: object, version: AclVersion) -> AclDocument:
        """A master's answer to GET_BROKER_CLUSTER_ACL_CONFIG, checked as a file is."""
        if not isinstance(body, dict):
            raise AclAdminError("the ACL config must be a map")
        white = body.get("globalWhiteAddrs") or []
        configs = body.get("plainAccessConfigs") or []
        if not isinstance(white, list) or not all(isinstance(w, str) for w in white):
            raise AclAdminError("globalWhiteAddrs must be a list of strings")
        if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
            raise AclAdminError("plainAccessConfigs must be a list of maps")
        accounts = []
        for c in configs:
            for name in ("topicPerms", "groupPerms"):
                if c.get(name) is not None and not isinstance(c.get(name), list):
                    raise AclAdminError(f"{name} must be a list")
            a = {k: v for k, v in c.items() if k in ACCOUNT_FIELDS and v not in (None, [])}
            accounts.append(_account_dict(a))
        return cls(tuple(white), tuple(accounts), version)._checked()
