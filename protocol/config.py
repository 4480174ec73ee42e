"""RocketMQ-style properties files and typed config objects built from them.

A config is a dataclass whose attribute names are the snake_case forms of
RocketMQ's keys (``listenPort`` <-> ``listen_port``). ``PropertiesConfig``
gives it loading, updating and printing.

RocketMQ keys that mean nothing here (thread-pool sizes, ...) are listed in a
config's ``NO_EFFECT_KEYS`` with the reason: they are accepted, remembered in
a ``not_a_key()`` field, and the daemon logs one notice each at start. Any
other unknown key is a ConfigError.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
from collections.abc import Mapping
from enum import Enum
from typing import Any, ClassVar, Self, TypeVar

from protocol.names import shown


class ConfigError(ValueError):
    """A configuration key or value is not valid."""


C = TypeVar("C", bound="PropertiesConfig")


# What a secret's value is shown as wherever a config is shown (GET_BROKER_CONFIG,
# ``mqbroker -p``, mqadmin getBrokerConfig): the key stays visible, its value never
# leaves the daemon. An empty (unset) secret is shown empty: that leaks nothing.
SECRET_MASK = "******"
# A key naming one of these holds a secret: brokerSecretKey (and any *SecretKey),
# a password or a TLS key's passphrase (RocketMQ's tls.server.keyPassword,
# tls.client.keyPassword), a security token. Matched in lower case anywhere in the
# key, so a key added later is masked without being listed.
_SECRET_WORDS = ("secret", "password", "passphrase", "token")


def is_secret_key(key: str) -> bool:
    """Whether the config key ``key`` (any spelling: RocketMQ's or snake_case) holds
    a secret: its value is masked when shown and cannot be changed over the wire."""
    lowered = key.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def mask_secrets(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` with the value of every secret key (``is_secret_key``) replaced by
    ``SECRET_MASK``; empty values stay empty."""
    return {k: SECRET_MASK if v and is_secret_key(k) else v for k, v in props.items()}


# Keys whose RocketMQ spelling is not plain camelCase.
_SPECIAL_KEYS = {
    "broker_ip1": "brokerIP1", "broker_ip2": "brokerIP2",
    # RocketMQ's TLS keys (protocol/trio/tls.py)
    "tls_server_cert_path": "tls.server.certPath",
    "tls_server_key_path": "tls.server.keyPath",
    "tls_server_trust_cert_path": "tls.server.trustCertPath",
    "tls_server_need_client_auth": "tls.server.need.client.auth",
    "tls_enable": "tls.enable",
    "tls_client_cert_path": "tls.client.certPath",
    "tls_client_key_path": "tls.client.keyPath",
    "tls_client_trust_cert_path": "tls.client.trustCertPath",
}


def key_of(attr: str) -> str:
    if attr in _SPECIAL_KEYS:
        return _SPECIAL_KEYS[attr]
    head, *rest = attr.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def parse_properties(text: str, where: str = "") -> dict[str, str]:
    """Java-style properties text (``key=value`` or ``key:value``, ``#``/``!``
    comments). Raises ConfigError naming ``where`` and the line it cannot read."""
    props: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)$", line)
        if not m:
            raise ConfigError(f"{where or 'line '}{lineno}: cannot parse {line[:80]!r}")
        props[m.group(1)] = m.group(2).strip()
    return props


def properties_body(body: bytes | None) -> dict[str, str]:
    """A config-change request's body (UTF-8 properties text) as a dict; raises
    ConfigError when it is not UTF-8 or not properties."""
    try:
        text = (body or b"").decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("the body is not UTF-8 properties text") from None
    return parse_properties(text)


def rewrite_properties(text: str, changes: dict[str, str]) -> str:
    """``text`` (a properties file) with each key of ``changes`` set: the line
    that sets it is rewritten in place (the last one, if several do), comments
    and every other line are kept, keys it does not set are appended."""
    lines = text.splitlines()
    last: dict[str, int] = {}
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)", stripped)
        if m and m.group(1) in changes:
            last[m.group(1)] = i
    for key, i in last.items():
        lines[i] = f"{key}={changes[key]}"
    lines += [f"{key}={value}" for key, value in changes.items() if key not in last]
    return "\n".join(lines) + "\n"


def runtime_changes(config: C, props: Mapping[str, str], runtime_keys: Mapping[str, str],
                    daemon: str) -> tuple[dict[str, str], C]:
    """A running daemon's config changes (UPDATE_BROKER_CONFIG, UPDATE_NAMESRV_CONFIG),
    checked on a copy of ``config``: the changes under their RocketMQ names (the keys of
    ``runtime_keys``, matched in any case) and the copy with them applied (validated).
    ConfigError, nothing applied, when there is no key, a key holds a secret (refused
    first, by name: a secret is set in the config file, never over the wire), a key
    cannot change at run time, or a value is bad."""
    if not props:
        raise ConfigError("no key to change")
    secret = next((k for k in props if is_secret_key(k)), None)
    if secret is not None:
        raise ConfigError(f"{shown(secret)} holds a secret: a secret cannot be changed over "
                          f"the wire (set it in the {daemon}'s config file and restart it)")
    by_lower = {k.lower(): k for k in runtime_keys}
    changes: dict[str, str] = {}
    for key, value in props.items():
        name = by_lower.get(key.lower())
        if name is None:
            raise ConfigError(f"{shown(key)} cannot change at run time (keys that can: "
                              f"{', '.join(sorted(runtime_keys))})")
        changes[name] = value
    trial = copy.copy(config)
    trial.update(changes)  # converts and validates: ConfigError names the key
    return changes, trial


def _convert(name: str, current: Any, raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    try:
        if isinstance(current, Enum):
            return type(current)(text)
        if isinstance(current, bool):
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
    except ValueError as exc:
        raise ConfigError(f"bad value for {key_of(name)}: {raw!r}") from exc
    return text


_NOT_A_KEY = "not_a_key"


def not_a_key(default_factory: Any) -> Any:
    """A dataclass field that is state, not a config key (never loaded or printed)."""
    return dataclasses.field(default_factory=default_factory, init=False, repr=False,
                             compare=False, metadata={_NOT_A_KEY: True})


class PropertiesConfig:
    """Mixin for config dataclasses keyed by RocketMQ property names."""

    # RocketMQ key -> why it has no effect here; accepted, noted, never an error.
    NO_EFFECT_KEYS: ClassVar[dict[str, str]] = {}

    def _key_fields(self) -> list[dataclasses.Field[Any]]:
        return [f for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if not f.metadata.get(_NOT_A_KEY)]

    def to_properties(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in self._key_fields():
            value = getattr(self, f.name)
            if isinstance(value, Enum):
                value = value.value
            elif isinstance(value, bool):
                value = "true" if value else "false"
            out[key_of(f.name)] = str(value)
        return out

    def update(self, props: Mapping[str, Any], validate: bool = True) -> None:
        """Apply RocketMQ keys (camelCase) or attribute names, then ``validate``
        (unless ``validate`` is false: a loader applying several layers checks
        once, at the end). Raises ConfigError.

        A key of ``NO_EFFECT_KEYS`` is remembered in ``no_effect_keys`` (when
        the config has that field) and otherwise ignored."""
        fields = self._key_fields()
        by_key = {key_of(f.name).lower(): f for f in fields}
        by_attr = {f.name: f for f in fields}
        no_effect = {k.lower(): k for k in self.NO_EFFECT_KEYS}
        for key, raw in props.items():
            f = by_key.get(key.lower()) or by_attr.get(key)
            if f is not None:
                setattr(self, f.name, _convert(f.name, getattr(self, f.name), raw))
            elif key.lower() in no_effect:
                seen = getattr(self, "no_effect_keys", None)
                if isinstance(seen, dict):
                    seen[no_effect[key.lower()]] = str(raw).strip()
            else:
                raise ConfigError(f"unknown config key: {key}{self._suggest(key)}")
        if validate:
            self.validate()

    def _suggest(self, key: str) -> str:
        known = [key_of(f.name) for f in self._key_fields()] + list(self.NO_EFFECT_KEYS)
        by_lower = {k.lower(): k for k in known}
        close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.8)
        return f" (did you mean {by_lower[close[0]]}?)" if close else ""

    def validate(self) -> None:
        """Check the settings as a whole; raises ConfigError. Subclasses extend it."""

    @classmethod
    def from_properties(cls, props: dict[str, Any]) -> Self:
        cfg = cls()
        cfg.update(props)
        return cfg

    def shown_properties(self) -> dict[str, str]:
        """``to_properties`` as shown outside the daemon: secrets masked."""
        return mask_secrets(self.to_properties())

    def render(self) -> str:
        """The config as printed (``-p``) or answered: secrets masked."""
        return "\n".join(f"{k}={v}" for k, v in self.shown_properties().items())
