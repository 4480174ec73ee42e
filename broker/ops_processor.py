"""OpsProcessor: what operators ask a broker (mqadmin's statsAll, brokerConsumeStats,
producerConnection, getBrokerConfig, updateBrokerConfig).

- VIEW_BROKER_STATS_DATA (315): header ``statsName``, ``statsKey`` -> body
  ``{"statsMinute"|"statsHour"|"statsDay": {"sum", "tps", "avgpt"}}`` (broker/stats.py);
- QUERY_TOPIC_CONSUME_BY_WHO (300): header ``topic`` -> ``{"groupList": [...]}``;
- GET_PRODUCER_CONNECTION_LIST (204): header ``producerGroup`` ->
  ``{"connectionSet": [{"clientId", "clientAddr", "language", "version"}]}``;
- GET_BROKER_CONFIG (26): body = the effective config, properties text (UTF-8),
  every secret's value (brokerSecretKey, ...) masked as ``******``; with ACL on,
  admin accounts only (acl/plain.py ADMIN_CODES);
- UPDATE_BROKER_CONFIG (25): body = properties text of the keys to change.

A secret key (protocol.config.is_secret_key) is refused by name before any other
check: a secret is set in the config file, never over the wire.

Only keys the broker reads again each time it uses them change at run time
(``RUNTIME_KEYS``); any other key, or a bad value, is refused naming it and
nothing is applied. Applied changes are kept in
``<storePathRootDir>/broker.conf.runtime`` (written atomically before the answer),
which the broker reads at start after its config file: they survive a
restart. A ``brokerPermission`` change re-registers with the name servers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from broker.config import BrokerConfig
from broker.metrics import consume_pairs
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError, parse_properties, properties_body, runtime_changes
from protocol.headers import (
    GetProducerConnectionListRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from protocol.route import PERM_MAX
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger("broker.ops")

RUNTIME_FILE = "broker.conf.runtime"

# RocketMQ key -> what re-reads it (every key here is read from the config at each use)
RUNTIME_KEYS: dict[str, str] = {
    "brokerPermission": "each send and pull (send_processor, pull_processor)",
    "autoCreateTopicEnable": "each send to an unknown topic",
    "autoCreateSubscriptionGroup": "each pull or heart-beat of an unknown group",
    "maxReconsumeTimes": "each subscription group created automatically",
    "maxMessageSize": "each send",
    "enablePropertyFilter": "each pull and CHECK_CLIENT_CONFIG of an SQL92 subscription",
    "longPollingEnable": "each pull that finds nothing",
    "longPollingMaxSuspendMillis": "each pull that finds nothing",
    "slaveReadEnable": "each pull's suggested broker",
    "accessMessageInMemoryMaxRatio": "each pull (cold-read test) and each offset query of a "
                                     "group with no offset (new-group start)",
    "rejectTransactionMessage": "each prepared send",
    "transactionTimeOut": "each transaction check",
    "transactionCheckMax": "each transaction check",
    "transactionMaxPendingPerGroup": "each prepared send",
    "fileReservedTime": "each clean-up run",
    "deleteWhen": "each clean-up run",
    "diskMaxUsedSpaceRatio": "each clean-up run",
    "recoverFromSlave": "each HA hello of a slave whose log is longer (a master's)",
    "haDiscardLog": "each refusal of the slave's log by its master (a slave's)",
    "haSlaveSilentMs": "each SYNC_MASTER send",
}

_POSITIVE = ("maxMessageSize", "longPollingMaxSuspendMillis", "fileReservedTime",
             "transactionTimeOut", "transactionCheckMax", "transactionMaxPendingPerGroup")


def render_properties(props: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(props.items()))


def check_runtime_changes(config: BrokerConfig, props: dict[str, str]) -> dict[str, str]:
    """The changes under their RocketMQ names, checked on a copy of ``config``:
    ConfigError naming the first key that cannot change at run time or whose
    value is bad. Nothing is applied."""
    changes, trial = runtime_changes(config, props, RUNTIME_KEYS, "broker")
    for name in changes:
        value = getattr(trial, _attr(name))
        if name in _POSITIVE and value <= 0:
            raise ConfigError(f"{name} must be positive, not {value}")
    perm = trial.broker_permission
    if not 0 <= perm <= PERM_MAX:
        raise ConfigError(f"brokerPermission must be within 0..{PERM_MAX}, not {perm}")
    if not 10 <= trial.disk_max_used_space_ratio <= 95:
        raise ConfigError("diskMaxUsedSpaceRatio must be within 10..95")
    if trial.max_message_size > trial.max_frame_size:
        raise ConfigError(f"maxMessageSize must not exceed maxFrameSize ({trial.max_frame_size})")
    return {name: trial.to_properties()[name] for name in changes}


def _attr(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def runtime_path(config: BrokerConfig) -> Path:
    return config.store_path(RUNTIME_FILE)


def load_runtime_overlay(config: BrokerConfig) -> dict[str, str]:
    """Apply ``<storePathRootDir>/broker.conf.runtime`` (what UPDATE_BROKER_CONFIG
    changed) over ``config``; returns it. ConfigError when it cannot be applied."""
    path = runtime_path(config)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    try:
        props = check_runtime_changes(config, parse_properties(text))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    config.update(props)
    log.info("runtime config changes applied", path=str(path), **props)
    return props


class OpsProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def view_broker_stats_data(self, conn: RemotingConnection, cmd: RemotingCommand
                               ) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.from_fields(cmd.ext_fields)
        windows = self.controller.stats.stats(h.stats_name, h.stats_key)
        if windows is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"The stats <{h.stats_name}> <{h.stats_key}> not exist")
        body = {name: snap.to_wire() for name, snap in windows.items()}
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))

    def query_topic_consume_by_who(self, conn: RemotingConnection, cmd: RemotingCommand
                                   ) -> RemotingCommand:
        h = QueryTopicConsumeByWhoRequestHeader.from_fields(cmd.ext_fields)
        groups = sorted({g for g, t in consume_pairs(self.controller) if t == h.topic}
                        | self.controller.consumer_offset_manager.groups_of_topic(h.topic))
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body({"groupList": groups}))

    def get_producer_connection_list(self, conn: RemotingConnection, cmd: RemotingCommand
                                     ) -> RemotingCommand:
        h = GetProducerConnectionListRequestHeader.from_fields(cmd.ext_fields)
        info = self.controller.producer_manager.groups.get(h.producer_group)
        if info is None or not info.clients:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"the producer group[{h.producer_group}] not exist")
        rows = []
        for ch in info.clients.values():
            attrs: dict[str, Any] = getattr(ch.conn, "attrs", {})
            rows.append({"clientId": ch.client_id,
                         "clientAddr": getattr(ch.conn, "remote_addr", ""),
                         "language": attrs.get("language", "OTHER"),
                         "version": attrs.get("version", 0)})
        rows.sort(key=lambda r: r["clientId"])
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body({"connectionSet": rows}))

    def get_broker_config(self, conn: RemotingConnection, cmd: RemotingCommand
                          ) -> RemotingCommand:
        text = self.controller.config.render() + "\n"
        return cmd.response(ResponseCode.SUCCESS, body=text.encode())

    async def update_broker_config(self, conn: RemotingConnection, cmd: RemotingCommand
                                   ) -> RemotingCommand:
        try:
            changes = check_runtime_changes(self.controller.config, properties_body(cmd.body))
        except ConfigError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"UPDATE_BROKER_CONFIG: {exc}")
        try:
            await self.controller.apply_runtime_config(changes)
        except OSError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"UPDATE_BROKER_CONFIG: not applied, cannot write "
                                f"{runtime_path(self.controller.config)}: {exc}")
        return cmd.response(ResponseCode.SUCCESS)


__all__ = ["RUNTIME_KEYS", "OpsProcessor", "check_runtime_changes", "load_runtime_overlay"]
