"""Topic and subscription-group administration and statistics on the remoting
wire: a thin adapter over ``AdminService`` (broker/service/admin.py, where
the rules live). Each handler decodes a header or body, calls the service
and encodes its answer; a change answered once durable returns None and is
answered through the callback the service calls."""

from __future__ import annotations

from broker.service.admin import AdminResult, AdminService, AdminStatus, Answer
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetTopicStatsInfoRequestHeader,
)
from protocol.names import group_problem, topic_problem
from protocol.route import TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig
from protocol.topic_attributes import AttributeProblem, parse_changes
from protocol.trio.connection import RemotingConnection

# the one table from the service's outcomes to this transport's codes
RESPONSE_CODES: dict[AdminStatus, int] = {
    AdminStatus.OK: ResponseCode.SUCCESS,
    AdminStatus.INVALID: ResponseCode.SYSTEM_ERROR,
    AdminStatus.NOT_DURABLE: ResponseCode.SYSTEM_ERROR,
    AdminStatus.TOPIC_NOT_EXIST: ResponseCode.TOPIC_NOT_EXIST,
    AdminStatus.GROUP_NOT_EXIST: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    AdminStatus.CONSUMER_NOT_ONLINE: ResponseCode.CONSUMER_NOT_ONLINE,
}


def _group_field(cmd: RemotingCommand, key: str) -> str:
    """A header field holding a group name; RemoteProtocolError unless valid."""
    group = cmd.ext_fields.get(key)
    problem = group_problem(group)
    if problem is not None:
        raise RemoteProtocolError(f"field {key!r}: {problem}")
    assert isinstance(group, str)
    return group


def _response(cmd: RemotingCommand, result: AdminResult) -> RemotingCommand:
    return cmd.response(RESPONSE_CODES[result.status], result.remark)


def topic_config_of(h: CreateTopicRequestHeader) -> TopicConfig:
    return TopicConfig(h.topic, h.read_queue_nums, h.write_queue_nums, h.perm,
                       h.topic_filter_type, h.topic_sys_flag, h.order)


class AdminBrokerProcessor:
    def __init__(self, service: AdminService) -> None:
        self.service = service

    @staticmethod
    def _later(cmd: RemotingCommand, result: AdminResult | None) -> RemotingCommand | None:
        """The response now, or None: the service answers through ``_answer``'s callback."""
        return None if result is None else _response(cmd, result)

    @staticmethod
    def _answer(conn: RemotingConnection, cmd: RemotingCommand) -> Answer:
        def answer(result: AdminResult) -> None:
            if not cmd.is_oneway:
                conn.send_response(_response(cmd, result))

        return answer

    def update_and_create_topic(self, conn: RemotingConnection, cmd: RemotingCommand
                                ) -> RemotingCommand | None:
        """Answered once the change is in the topic journal (durable), not before."""
        h = CreateTopicRequestHeader.from_fields(cmd.ext_fields)
        try:
            changes = parse_changes(h.attributes)
        except AttributeProblem as exc:
            return _response(cmd, AdminResult(AdminStatus.INVALID, str(exc)))
        result = self.service.update_and_create_topic(topic_config_of(h), self._answer(conn, cmd),
                                                      changes)
        return self._later(cmd, result)

    def delete_topic(self, conn: RemotingConnection, cmd: RemotingCommand
                     ) -> RemotingCommand | None:
        """Answered once the deletion is in the topic journal, as a creation."""
        h = DeleteTopicRequestHeader.from_fields(cmd.ext_fields)
        return self._later(cmd, self.service.delete_topic(h.topic, self._answer(conn, cmd)))

    def update_and_create_subscription_group(
        self, conn: RemotingConnection, cmd: RemotingCommand
    ) -> RemotingCommand | None:
        """Answered once the change is in the group journal (durable), not before."""
        try:
            cfg = SubscriptionGroupConfig.from_dict(cmd.decode_body())
        except ValueError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad subscription group: {exc}")
        result = self.service.update_and_create_group(cfg, self._answer(conn, cmd))
        return self._later(cmd, result)

    def get_all_subscription_group(
        self, conn: RemotingConnection, cmd: RemotingCommand
    ) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(self.service.all_groups()))

    def delete_subscription_group(
        self, conn: RemotingConnection, cmd: RemotingCommand
    ) -> RemotingCommand | None:
        """Answered once the deletion is in the group journal."""
        group = _group_field(cmd, "groupName")
        return self._later(cmd, self.service.delete_group(group, self._answer(conn, cmd)))

    def get_topic_stats_info(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetTopicStatsInfoRequestHeader.from_fields(cmd.ext_fields)
        queues = self.service.topic_stats(h.topic)
        if queues is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        table = [{"brokerName": q.broker_name, "queueId": q.queue_id, "minOffset": q.min_offset,
                  "maxOffset": q.max_offset, "lastUpdateTimestamp": q.last_update_timestamp}
                 for q in queues]
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body({"offsetTable": table}))

    def get_consume_stats(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        """Per queue of the group's topics: broker offset, consumer offset, lag."""
        group = _group_field(cmd, "consumerGroup")
        only = cmd.ext_fields.get("topic")
        if only is not None and topic_problem(only) is not None:
            raise RemoteProtocolError(f"GET_CONSUME_STATS: field 'topic': {topic_problem(only)}")
        stats = self.service.consume_stats(group, only if isinstance(only, str) else None)
        rows = [{"topic": r.topic, "brokerName": r.broker_name, "queueId": r.queue_id,
                 "brokerOffset": r.broker_offset, "consumerOffset": r.consumer_offset,
                 "lastTimestamp": r.last_timestamp} for r in stats.queues]
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(
            {"offsetTable": rows, "consumeTps": stats.consume_tps}))

    def get_consumer_connection_list(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        group = _group_field(cmd, "consumerGroup")
        found = self.service.consumer_connections(group)
        if found is None:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {
            "connectionSet": [{"clientId": c.client_id, "clientAddr": c.client_addr}
                              for c in found.connections],
            "subscriptionTable": found.subscriptions,
            "consumeType": found.consume_type, "messageModel": found.message_model,
            "consumeFromWhere": found.consume_from_where,
        }
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))

    def get_broker_runtime_info(self, conn: RemotingConnection, cmd: RemotingCommand
                                ) -> RemotingCommand:
        body = {"table": self.service.runtime_info()}
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))

    def get_all_consumer_offset(self, conn: RemotingConnection, cmd: RemotingCommand
                                ) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS,
                            body=cmd.encode_body(self.service.all_consumer_offsets()))

    def get_all_delay_offset(self, conn: RemotingConnection, cmd: RemotingCommand
                             ) -> RemotingCommand:
        table = self.service.all_delay_offsets()
        body = {"offsetTable": {str(k): v for k, v in table.items()}}
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))

    def get_all_topic_config(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS,
                            body=cmd.encode_body(self.service.all_topic_configs()))
