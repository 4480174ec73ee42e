"""ControllerConfig: the controller's settings, with RocketMQ 5's ControllerConfig names
where RocketMQ has the key (controllerStorePath, scanNotActiveBrokerInterval,
enableElectUncleanMaster, notifyBrokerRoleChanged, controllerType) and ours beside them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol.config import ConfigError, PropertiesConfig, not_a_key
from protocol.controller import MAX_REPLICAS
from protocol.trio.limits import ConnectionLimits, limits_of
from protocol.trio.preauth import DEFAULT_PRE_AUTH_BUDGET, pre_auth_problem
from protocol.trio.tls import (
    ClientTls,
    ServerTls,
    TlsConfigError,
    normalize_server_tls,
    server_tls_of,
)

CONTROLLER_TYPES = ("file", "etcd")


def is_etcd_key(key: str) -> bool:
    """The etcd backend's keys (etcdEndpoints, ...: controller/etcd_backend.py's
    EtcdConfig checks them, when controllerType=etcd)."""
    return key.lower().startswith("etcd")

# the keys UPDATE_CONTROLLER_CONFIG may change while the controller runs
RUNTIME_KEYS = {
    "enableElectUncleanMaster": "elections consider replicas out of the SyncStateSet",
    "notifyBrokerRoleChanged": "replicas are told of a new master",
    "brokerHeartbeatTimeout": "ms of silence after which a replica is dead",
    "scanNotActiveBrokerInterval": "ms between scans for silent masters",
}


@dataclass(frozen=True)
class ControllerCredentials:
    """The controller's own account (controllerAccessKey/controllerSecretKey)."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:  # never show the secret
        return f"ControllerCredentials(access_key={self.access_key!r}, secret_key='***')"


@dataclass(slots=True)
class ControllerConfig(PropertiesConfig):
    listen_ip: str = "127.0.0.1"
    # mqcontroller's port (RocketMQ's standalone controller: listenPort); the
    # controller inside a name server serves on the name server's port
    listen_port: int = 9878
    # file: one controller, its state in controllerStorePath; etcd: several sharing one
    # etcd (controller/etcd.py), one leading at a time
    controller_type: str = "file"
    # the directory of the state file (controllerType=file)
    controller_store_path: str = "~/store/controller"
    # ms between scans for masters whose heart-beats stopped (RocketMQ: 5000; a
    # scan costs a pass over the liveness table, and this bounds how late a
    # failover starts after brokerHeartbeatTimeout)
    scan_not_active_broker_interval: int = 1000
    # ms without a heart-beat after which a replica is dead (a broker's own
    # heartbeatTimeoutMills, when it sends one, may only shorten it)
    broker_heartbeat_timeout: int = 10_000
    # elect a replica out of the SyncStateSet when none in it is alive (messages
    # acknowledged by the old master may be lost)
    enable_elect_unclean_master: bool = False
    # tell every replica of a broker name (NOTIFY_BROKER_ROLE_CHANGED) of its new master
    notify_broker_role_changed: bool = True
    # ms a notification may take before it is given up (the broker learns at its
    # next registration instead)
    notify_broker_role_changed_timeout: int = 3000
    # most broker names and replicas per name the controller holds
    controller_max_broker_names: int = 4096
    controller_max_replicas: int = MAX_REPLICAS
    # most replicas the liveness table tracks
    controller_max_heartbeat_entries: int = 65_536
    max_frame_size: int = 4 * 1024 * 1024
    # connections (protocol/trio/limits.py), as the name server's keys
    server_channel_max_idle_time_seconds: int = 120
    frame_read_timeout_seconds: int = 30
    write_buffer_high_water_mark: int = 4 * 1024 * 1024
    write_buffer_low_water_mark: int = 1024 * 1024
    max_in_flight_requests_per_connection: int = 1024
    max_connections_per_address: int = 1024
    # plain ACL on mqcontroller's port (controller/acl.py), the name server's keys and
    # plain_acl.yml format; inside a name server its own keys apply instead
    acl_enable: bool = False
    # the accounts file; empty: plain_acl.yml beside the config file (-c), else in the
    # working directory
    acl_plain_file: str = ""
    acl_reload_interval: int = 5000  # ms between checks of the accounts file's mtime
    # signatures bound to their request code and time (docs/security/signature-binding.md)
    acl_signature_window: int = 60_000
    acl_strict_signature: bool = False
    acl_replay_cache_size: int = 100_000
    # before a connection is authenticated (docs/security/decoding-limits.md): its
    # largest frame (0: the header limit + CONTROLLER_PRE_AUTH_BODY + 64 KiB), and the
    # bytes of partial frames all such connections may hold together
    acl_pre_auth_max_frame_bytes: int = 0
    acl_pre_auth_read_budget_bytes: int = DEFAULT_PRE_AUTH_BUDGET
    # TLS on mqcontroller's port (protocol/trio/tls.py; the name server's tls.server.*
    # keys): disabled | permissive (TLS and plain on one port; plain only without a
    # certificate) | enforcing
    tls_mode: str = "permissive"
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_server_trust_cert_path: str = ""  # the CA of client certificates
    tls_server_need_client_auth: str = "none"  # none | optional | require (true/false)
    # the controller's own calls to brokers (NOTIFY_BROKER_ROLE_CHANGED): over TLS with
    # tls.enable (the broker's keys), signed with this account when set (brokers with
    # aclEnable refuse unsigned ones; they learn their role from their next poll then)
    tls_enable: bool = False
    tls_client_trust_cert_path: str = ""  # empty: the system's CAs
    tls_client_cert_path: str = ""  # for brokers with tls.server.need.client.auth
    tls_client_key_path: str = ""
    controller_access_key: str = ""
    controller_secret_key: str = ""
    # the etcd* keys as given (controllerType=etcd reads them with EtcdConfig, which
    # needs the controller extra: not imported here)
    etcd_properties: dict[str, str] = not_a_key(dict)

    def update(self, props: Mapping[str, Any], validate: bool = True) -> None:
        """As PropertiesConfig's; the ``etcd*`` keys are kept for the etcd backend."""
        for key, value in props.items():
            if is_etcd_key(key):
                self.etcd_properties[key] = str(value).strip()
        PropertiesConfig.update(self, {k: v for k, v in props.items() if not is_etcd_key(k)},
                                validate)

    def to_properties(self) -> dict[str, str]:
        out = PropertiesConfig.to_properties(self)
        out.update(self.etcd_properties)
        return out

    def connection_limits(self) -> ConnectionLimits:
        return limits_of(self)

    def server_tls(self) -> ServerTls:
        return server_tls_of(self)

    def client_tls(self) -> ClientTls | None:
        """TLS for the controller's calls to brokers (None: plain, tls.enable=false)."""
        if not self.tls_enable:
            return None
        return ClientTls(ca_path=self.tls_client_trust_cert_path,
                         cert_path=self.tls_client_cert_path, key_path=self.tls_client_key_path)

    def credentials(self) -> ControllerCredentials | None:
        """controllerAccessKey/controllerSecretKey as RemotingClient(credentials=...)
        takes them (None: unsigned)."""
        if not self.controller_access_key:
            return None
        return ControllerCredentials(self.controller_access_key, self.controller_secret_key)

    def validate(self) -> None:
        if self.controller_type not in CONTROLLER_TYPES:
            raise ConfigError(f"controllerType must be one of {', '.join(CONTROLLER_TYPES)}, "
                              f"not {self.controller_type!r}")
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort {self.listen_port} is not a port")
        for key, value in (("scanNotActiveBrokerInterval", self.scan_not_active_broker_interval),
                           ("brokerHeartbeatTimeout", self.broker_heartbeat_timeout),
                           ("notifyBrokerRoleChangedTimeout",
                            self.notify_broker_role_changed_timeout),
                           ("controllerMaxBrokerNames", self.controller_max_broker_names),
                           ("controllerMaxHeartbeatEntries",
                            self.controller_max_heartbeat_entries)):
            if value <= 0:
                raise ConfigError(f"{key} must be positive, not {value}")
        if not 1 <= self.controller_max_replicas <= MAX_REPLICAS:
            raise ConfigError(f"controllerMaxReplicas must be within 1..{MAX_REPLICAS}")
        problem = self.connection_limits().problem()
        if problem is not None:
            raise ConfigError(f"connection limits: {problem}")
        if self.acl_reload_interval <= 0:
            raise ConfigError(f"aclReloadInterval must be positive, not {self.acl_reload_interval}")
        for key, value in (("aclSignatureWindow", self.acl_signature_window),
                           ("aclReplayCacheSize", self.acl_replay_cache_size)):
            if value <= 0:
                raise ConfigError(f"{key} must be positive, not {value}")
        problem = pre_auth_problem(self)
        if problem is not None:
            raise ConfigError(problem)
        try:
            normalize_server_tls(self)
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from exc
        if bool(self.tls_client_cert_path) != bool(self.tls_client_key_path):
            raise ConfigError("tls.client.certPath and tls.client.keyPath must be given together")
        if bool(self.controller_access_key) != bool(self.controller_secret_key):
            raise ConfigError("controllerAccessKey and controllerSecretKey go together: set "
                              "both or neither")
