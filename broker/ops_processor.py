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

The first three are an adapter over OpsService (broker/service/ops.py: the
statistics, who consumes a topic, a producer group's members); what only this
transport knows stays here: a producer's address, and the language and
version its heart-beat's connection remembers (broker/client_manage_processor.py).
GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG are an adapter over ConfigService
(broker/service/config.py: which keys change at run time, where changes are
kept); a refused change is SYSTEM_ERROR with the reason.
"""

from __future__ import annotations

from typing import Any

from broker.service.config import ConfigService
from broker.service.ops import Member, OpsService
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError, properties_body
from protocol.headers import (
    GetProducerConnectionListRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from protocol.trio.connection import RemotingConnection


def connection_row(member: Member) -> dict[str, Any]:
    """A producer's row of GET_PRODUCER_CONNECTION_LIST, from its connection."""
    attrs: dict[str, Any] = getattr(member.channel, "attrs", {})
    return {"clientId": member.client_id,
            "clientAddr": getattr(member.channel, "remote_addr", ""),
            "language": attrs.get("language", "OTHER"),
            "version": attrs.get("version", 0)}


class OpsProcessor:
    def __init__(self, ops: OpsService, config: ConfigService) -> None:
        self.ops = ops
        self.config = config

    def view_broker_stats_data(self, conn: RemotingConnection, cmd: RemotingCommand
                               ) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.from_fields(cmd.ext_fields)
        windows = self.ops.stats(h.stats_name, h.stats_key)
        if windows is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"The stats <{h.stats_name}> <{h.stats_key}> not exist")
        body = {name: snap.to_wire() for name, snap in windows.items()}
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))

    def query_topic_consume_by_who(self, conn: RemotingConnection, cmd: RemotingCommand
                                   ) -> RemotingCommand:
        h = QueryTopicConsumeByWhoRequestHeader.from_fields(cmd.ext_fields)
        groups = self.ops.groups_of_topic(h.topic)
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body({"groupList": groups}))

    def get_producer_connection_list(self, conn: RemotingConnection, cmd: RemotingCommand
                                     ) -> RemotingCommand:
        h = GetProducerConnectionListRequestHeader.from_fields(cmd.ext_fields)
        members = self.ops.producers(h.producer_group)
        if members is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"the producer group[{h.producer_group}] not exist")
        rows = [connection_row(m) for m in members]
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
