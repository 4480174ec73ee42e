"""The etcd backend as a controller configures it (``controllerType=etcd``).

``EtcdConfig`` holds the ``etcd*`` keys of a controller's properties (RocketMQ-style
names; docs/controller-etcd.md lists them); ``open_etcd_backend`` makes the client,
the ``EtcdStateStore`` fenced by the ``EtcdLeadership``, and the leadership, sharing
one client. Check ``protocol.extras.require_etcd()`` before importing this module:
the client needs the ``controller`` extra (h11).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from controller.etcd import EtcdClient, parse_endpoints
from controller.etcd_leadership import DEFAULT_TTL, MAX_TTL, MIN_TTL, EtcdLeadership
from controller.etcd_store import DEFAULT_KEY_PREFIX, EtcdStateStore
from protocol.config import ConfigError, PropertiesConfig

_PREFIX = re.compile(r"/[A-Za-z0-9._\-/]{0,199}")


@dataclass
class EtcdConfig(PropertiesConfig):
    # etcd's client URLs, ';' between them (http:// only)
    etcd_endpoints: str = "http://127.0.0.1:2379"
    # controllers with the same prefix share one state and elect one leader
    etcd_key_prefix: str = DEFAULT_KEY_PREFIX
    # the leader's lease, in whole seconds as etcd grants them
    etcd_lease_ttl_seconds: int = DEFAULT_TTL
    # each call to etcd, all endpoints tried included
    etcd_request_timeout_ms: int = 2000

    def validate(self) -> None:
        try:
            parse_endpoints(self.etcd_endpoints)
        except ValueError as e:
            raise ConfigError(f"etcdEndpoints: {e}") from None
        if not _PREFIX.fullmatch(self.etcd_key_prefix):
            raise ConfigError(f"etcdKeyPrefix {self.etcd_key_prefix!r}: a path starting with "
                              "'/', of letters, digits and . _ - /, at most 200 characters")
        if not MIN_TTL <= self.etcd_lease_ttl_seconds <= MAX_TTL:
            raise ConfigError(f"etcdLeaseTtlSeconds {self.etcd_lease_ttl_seconds}: "
                              f"{MIN_TTL} to {MAX_TTL}")
        if not 100 <= self.etcd_request_timeout_ms < self.etcd_lease_ttl_seconds * 1000:
            raise ConfigError(f"etcdRequestTimeoutMs {self.etcd_request_timeout_ms}: at least 100"
                              " and below the lease TTL")

    @classmethod
    def of_controller(cls, props: dict[str, Any]) -> EtcdConfig:
        """The ``etcd*`` keys of a controller's properties (any case); others ignored."""
        return cls.from_properties({k: v for k, v in props.items()
                                    if k.lower().startswith("etcd")})


@dataclass(frozen=True)
class EtcdBackend:
    client: EtcdClient
    store: EtcdStateStore
    leadership: EtcdLeadership

    async def aclose(self) -> None:
        await self.store.aclose()


def open_etcd_backend(config: EtcdConfig, identity: str) -> EtcdBackend:
    """The store and the leadership for a controller known to others as
    ``identity`` (its address, say): saves are fenced by the leadership."""
    client = EtcdClient(config.etcd_endpoints, timeout=config.etcd_request_timeout_ms / 1000)
    leadership = EtcdLeadership(client, identity, config.etcd_key_prefix,
                                ttl=config.etcd_lease_ttl_seconds)
    store = EtcdStateStore(client, config.etcd_key_prefix, fence=leadership)
    return EtcdBackend(client, store, leadership)


__all__ = ["EtcdBackend", "EtcdConfig", "open_etcd_backend"]
