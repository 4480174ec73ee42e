"""NamesrvConfig: the name server's settings, with RocketMQ's key names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from controller.config import ControllerConfig, is_etcd_key
from namesrv.kv_config import KVLimits
from protocol.config import ConfigError, PropertiesConfig, key_of, not_a_key
from protocol.route import DEFAULT_MAX_QUEUE_NUMS
from protocol.trio.limits import ConnectionLimits, limits_of
from protocol.trio.preauth import DEFAULT_PRE_AUTH_BUDGET, pre_auth_problem
from protocol.trio.tls import (
    ServerTls,
    TlsConfigError,
    normalize_server_tls,
    server_tls_of,
)


@dataclass(slots=True)
class NamesrvConfig(PropertiesConfig):
    listen_ip: str = "127.0.0.1"
    listen_port: int = 9876
    # Prometheus metrics over HTTP on this port of listenIp (0: off)
    metrics_port: int = 0
    # ms between liveness scans
    scan_not_active_broker_interval: int = 10_000
    # ms of silence after which a broker is dropped
    broker_channel_expired_time: int = 120_000
    max_frame_size: int = 16 * 1024 * 1024
    # most read/write queues a topic may have per broker; registrations beyond it are refused
    max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS
    # most bytes a compressed REGISTER_BROKER body may inflate to
    max_register_body_size: int = 64 * 1024 * 1024
    # topics a large REGISTER_BROKER reads or applies between two checkpoints (look-ups
    # are answered in between)
    register_apply_chunk: int = 128
    # the KV config's file (RocketMQ's kvConfig.json); empty: kept in memory only
    kv_config_path: str = ""
    # most namespaces, keys (all namespaces together) and characters the KV config holds
    kv_config_max_namespaces: int = 1024
    kv_config_max_keys: int = 100_000
    kv_config_max_chars: int = 64 * 1024 * 1024
    # routes carry their topic's ORDER_TOPIC_CONFIG KV value as orderTopicConf
    order_message_enable: bool = False
    # plain ACL (issue 18): requests are checked against plain_acl.yml, the broker's format
    acl_enable: bool = False
    # the accounts file; empty: plain_acl.yml beside the config file the name server was
    # started from, else in the working directory
    acl_plain_file: str = ""
    acl_reload_interval: int = 5000  # ms between checks of the accounts file's mtime
    # signatures bound to their request code and time (docs/security/signature-binding.md):
    # a bound signature's time must be within this many ms of the clock, either way
    acl_signature_window: int = 60_000
    # true: every signed request needs the binding, not only admin and destructive ones
    # (RocketMQ's own clients, which do not bind, are then refused)
    acl_strict_signature: bool = False
    # most bound data-path signatures remembered against replays (~220 bytes each)
    acl_replay_cache_size: int = 100_000
    # before a connection is authenticated (a request on it passed the ACL check;
    # docs/security/decoding-limits.md): the largest frame it may send (0: the header
    # limit, 256 KiB, + 4 MiB + 64 KiB), and the bytes of partial frames all
    # such connections may hold together
    acl_pre_auth_max_frame_bytes: int = 0
    acl_pre_auth_read_budget_bytes: int = DEFAULT_PRE_AUTH_BUDGET
    # connections (protocol/trio/limits.py), as the broker's keys
    server_channel_max_idle_time_seconds: int = 120
    frame_read_timeout_seconds: int = 30
    write_buffer_high_water_mark: int = 4 * 1024 * 1024
    write_buffer_low_water_mark: int = 1024 * 1024
    max_total_connection_buffer_bytes: int = 256 * 1024 * 1024
    max_in_flight_requests_per_connection: int = 4096
    max_connections_per_address: int = 1024
    # TLS (protocol/trio/tls.py; RocketMQ's tls.server.* keys): disabled | permissive
    # (TLS and plain on one port; plain only without a certificate) | enforcing
    tls_mode: str = "permissive"
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_server_trust_cert_path: str = ""  # the CA of client certificates
    tls_server_need_client_auth: str = "none"  # none | optional | require (true/false)
    # the controller (RocketMQ 5's controller mode) runs inside the name server and
    # answers on its port; its keys (controller/config.py: controllerStorePath,
    # brokerHeartbeatTimeout, enableElectUncleanMaster, ...) go in this same file
    enable_controller_in_namesrv: bool = False
    controller_config: ControllerConfig = not_a_key(ControllerConfig)

    def update(self, props: Mapping[str, Any], validate: bool = True) -> None:
        """As PropertiesConfig's; the keys only the controller has go to
        ``controller_config`` (keys both have, listenPort, scanNotActiveBrokerInterval
        and the connection keys, stay the name server's)."""
        theirs = _controller_only_keys()
        mine = {k: v for k, v in props.items() if not _is_controller_key(k, theirs)}
        PropertiesConfig.update(self, mine, validate)
        controller = {k: v for k, v in props.items() if _is_controller_key(k, theirs)}
        if controller:
            self.controller_config.update(controller, validate)

    def to_properties(self) -> dict[str, str]:
        out = PropertiesConfig.to_properties(self)
        if self.enable_controller_in_namesrv:
            theirs = _controller_only_keys()
            out.update({k: v for k, v in self.controller_config.to_properties().items()
                        if k.lower() in theirs})
        return out

    def server_tls(self) -> ServerTls:
        return server_tls_of(self)

    def connection_limits(self) -> ConnectionLimits:
        return limits_of(self)

    def kv_limits(self) -> KVLimits:
        return KVLimits(max_namespaces=self.kv_config_max_namespaces,
                        max_keys_per_namespace=self.kv_config_max_keys,
                        max_keys=self.kv_config_max_keys,
                        max_total_chars=self.kv_config_max_chars)

    def validate(self) -> None:
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError("metricsPort must be 0 (off) or a port")
        if self.acl_reload_interval <= 0:
            raise ConfigError(f"aclReloadInterval must be positive, not {self.acl_reload_interval}")
        for key, value in (("aclSignatureWindow", self.acl_signature_window),
                           ("aclReplayCacheSize", self.acl_replay_cache_size)):
            if value <= 0:
                raise ConfigError(f"{key} must be positive, not {value}")
        problem = pre_auth_problem(self)
        if problem is not None:
            raise ConfigError(problem)
        problem = self.connection_limits().problem()
        if problem is not None:
            raise ConfigError(f"connection limits: {problem}")
        try:
            normalize_server_tls(self)
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from exc
        for key in ("kv_config_max_namespaces", "kv_config_max_keys", "kv_config_max_chars"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key_of(key)} must not be negative")


def _controller_only_keys() -> frozenset[str]:
    """The controller's config keys the name server has not (lower case)."""
    mine = {key_of(f.name).lower() for f in fields(NamesrvConfig)}
    return frozenset(key_of(f.name).lower() for f in fields(ControllerConfig)
                     if key_of(f.name).lower() not in mine)


def _is_controller_key(key: str, theirs: frozenset[str]) -> bool:
    return key.lower() in theirs or is_etcd_key(key)
