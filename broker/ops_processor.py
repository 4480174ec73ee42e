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

GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG are an adapter over ConfigService
(broker/service/config.py: which keys change at run time, where changes are
kept); a refused change is SYSTEM_ERROR with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.metrics import consume_pairs
from broker.service.config import ConfigService
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError, properties_body
from protocol.headers import (
    GetProducerConnectionListRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.controller import BrokerController


class OpsProcessor:
    def __init__(self, controller: BrokerController, config: ConfigService) -> None:
        self.controller = controller
        self.config = config

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
        return cmd.response(ResponseCode.SUCCESS, body=self.config.shown().encode())

    async def update_broker_config(self, conn: RemotingConnection, cmd: RemotingCommand
                                   ) -> RemotingCommand:
        try:
            await self.config.update(properties_body(cmd.body))
        except ConfigError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"UPDATE_BROKER_CONFIG: {exc}")
        except OSError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"UPDATE_BROKER_CONFIG: not applied, cannot write "
                                f"{self.config.written_to}: {exc}")
        return cmd.response(ResponseCode.SUCCESS)


__all__ = ["OpsProcessor"]
