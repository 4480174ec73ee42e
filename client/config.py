"""One configuration object for every client: producers, consumers, MQAdmin.

``ClientConfig`` carries what all of them share: the name-server list, ACL
credentials, TLS, the request timeout and the client instance name. Every
client class takes ``config=ClientConfig(...)``; the older keywords
(``namesrv_addr``, ``credentials``, ``access_key``/``secret_key``, ``use_tls``,
``tls_ca_path``, ``tls_cert_path``, ``tls_key_path``, ``request_timeout``,
``instance_name``) are still accepted and merged into it by ``merge_config``.

A field left at its default means "not set": the class's own default applies,
and the environment where it does today (``NAMESRV_ADDR``, ``ROCKETMQ_TLS_*``,
read when the client starts). ``ClientConfig.from_env()`` reads the environment
up front instead, credentials (``ROCKETMQ_ACCESS_KEY``/``ROCKETMQ_SECRET_KEY``)
included.

Pure: no I/O but the environment read by ``from_env``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from client.credentials import AclCredentials, resolve_credentials
from client.errors import MQClientError
from client.instance import parse_namesrv_addr
from protocol.namespace import namespace_problem
from protocol.namesrv_addr import namesrv_addr_from_env
from protocol.trio.tls import ClientTls, TlsConfigError, client_tls, client_tls_from_env

ENV_ACCESS_KEY = "ROCKETMQ_ACCESS_KEY"
ENV_SECRET_KEY = "ROCKETMQ_SECRET_KEY"


@dataclass(frozen=True)
class ClientConfig:
    """What every producer, consumer and admin shares. Raises MQClientError
    for a bad value when built.

    Fields:
        namesrv_addr: name servers, ``"a:9876;b:9876"`` (None: NAMESRV_ADDR,
            then each class's default).
        credentials: AclCredentials signing every request (None: unsigned).
        use_tls, tls_ca_path, tls_cert_path, tls_key_path: TLS on every
            connection (use_tls False: ROCKETMQ_TLS_* decide when the client
            starts, as before).
        request_timeout: seconds for one request (None: the class's default).
        instance_name: the client instance to share (None: the process id).
        namespace: the app's namespace (RocketMQ 4.5+'s ``setNamespace``): producers'
            and consumers' topics and groups are the namespaced names on the wire
            (``app1%TopicA``, protocol/namespace.py), and what the user sees (messages'
            topics, send results' queues) is named without it. None: no namespace.
    """

    namesrv_addr: str | None = None
    credentials: AclCredentials | None = None
    use_tls: bool = False
    tls_ca_path: str | None = None
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    request_timeout: float | None = None
    instance_name: str | None = None
    namespace: str | None = None

    def __post_init__(self) -> None:
        if self.namespace is not None:
            problem = (namespace_problem(self.namespace) if isinstance(self.namespace, str)
                       else "it must be a string")
            if problem is not None:
                raise MQClientError(f"namespace {self.namespace!r}: {problem}")
        if self.namesrv_addr is not None:
            parse_namesrv_addr(self.namesrv_addr)
        if self.credentials is not None and not isinstance(self.credentials, AclCredentials):
            raise MQClientError(f"credentials must be AclCredentials, not "
                                f"{type(self.credentials).__name__}")
        if not isinstance(self.use_tls, bool):
            raise MQClientError(f"use_tls must be True or False, not {self.use_tls!r}")
        for name in ("tls_ca_path", "tls_cert_path", "tls_key_path"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise MQClientError(f"{name} must be a path string, not {value!r}")
        self.client_tls()  # TLS files without use_tls
        if bool(self.tls_cert_path) != bool(self.tls_key_path):
            raise MQClientError("tls_cert_path and tls_key_path go together")
        timeout = self.request_timeout
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                    or not 0 < timeout < float("inf")):
            raise MQClientError(f"request_timeout must be a positive number of seconds, "
                                f"not {timeout!r}")
        if self.instance_name is not None and (not isinstance(self.instance_name, str)
                                               or not self.instance_name.strip()):
            raise MQClientError(f"instance_name must be a non-empty string, "
                                f"not {self.instance_name!r}")

    def client_tls(self) -> ClientTls | None:
        """The TLS fields as ClientTls; None: not set here (the environment
        decides when the client starts). Raises MQClientError."""
        try:
            return client_tls(self.use_tls, self.tls_ca_path, self.tls_cert_path,
                              self.tls_key_path)
        except TlsConfigError as exc:
            raise MQClientError(str(exc)) from exc

    def timeout_or(self, default: float) -> float:
        """``request_timeout``, or ``default`` when not set."""
        return default if self.request_timeout is None else float(self.request_timeout)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **fields: Any) -> ClientConfig:
        """A config from the environment: NAMESRV_ADDR, ROCKETMQ_ACCESS_KEY with
        ROCKETMQ_SECRET_KEY, ROCKETMQ_TLS_ENABLE with ROCKETMQ_TLS_CA/_CERT/_KEY;
        ``fields`` given win over them; TLS paths without ROCKETMQ_TLS_ENABLE
        are ignored, as when a client starts. Raises MQClientError (a key
        without its secret)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {"namesrv_addr": namesrv_addr_from_env(env)}
        access_key = env.get(ENV_ACCESS_KEY, "").strip() or None
        secret_key = env.get(ENV_SECRET_KEY, "").strip() or None
        if (access_key is None) != (secret_key is None):
            raise MQClientError(f"{ENV_ACCESS_KEY} and {ENV_SECRET_KEY} go together")
        values["credentials"] = resolve_credentials(None, access_key, secret_key)
        tls = client_tls_from_env(dict(env))
        if tls is not None:
            values.update(use_tls=True, tls_ca_path=tls.ca_path or None,
                          tls_cert_path=tls.cert_path or None, tls_key_path=tls.key_path or None)
        values.update(fields)
        return cls(**values)


_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(ClientConfig)}


def merge_config(config: ClientConfig | None, *,
                 access_key: str | None = None, secret_key: str | None = None,
                 **keywords: Any) -> ClientConfig:
    """``config`` (None: an empty one) with the old keywords merged in. A keyword
    at its default was not given; one given fills a field ``config`` leaves
    unset, and one that contradicts a field ``config`` sets is a TypeError
    naming both. ``access_key``/``secret_key`` become ``credentials``. Raises
    MQClientError for a bad value."""
    unknown = set(keywords) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown client config keyword(s): {', '.join(sorted(unknown))}")
    if config is not None and not isinstance(config, ClientConfig):
        raise TypeError(f"config must be a ClientConfig, not {type(config).__name__}")
    if access_key is not None or secret_key is not None:
        keywords["credentials"] = resolve_credentials(keywords.get("credentials"),
                                                      access_key, secret_key)
    given = {name: value for name, value in keywords.items() if value != _DEFAULTS[name]}
    if config is None:
        return ClientConfig(**given)
    if not given:
        return config
    for name, value in given.items():
        current = getattr(config, name)
        if current != _DEFAULTS[name] and current != value:
            raise TypeError(f"{name}={value!r} contradicts config.{name}={current!r}")
    return dataclasses.replace(config, **given)
