"""HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, CHECK_CLIENT_CONFIG,
LOCK/UNLOCK_BATCH_MQ."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from acl.plain import Need, Perm, group_resource
from protocol.client_data import (
    CLIENT_ID_MAX_LENGTH,
    CheckClientRequestBody,
    HeartbeatData,
    LockBatchRequestBody,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.filter_sql import (
    SQL92,
    SqlParseError,
    compile_sql,
    is_tag_type,
    unsupported_remark,
)
from protocol.names import InvalidNameError, group_problem, retry_topic
from protocol.route import PERM_RW
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.controller import BrokerController


def _mq_dicts(mqs: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "brokerName": b, "queueId": q} for t, b, q in mqs]


class ClientManageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller
        self.notifications_dropped = 0  # NOTIFY_CONSUMER_IDS_CHANGED to members not reading

    def heart_beat(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        # the whole body is checked before anything is registered
        hb = HeartbeatData.from_wire(cmd.decode_body())
        cid = hb.client_id
        now = trio.current_time()
        c = self.controller
        for group in hb.producer_groups:
            c.producer_manager.register(group, cid, conn, now)
        refused: list[str] = []
        for d in hb.consumers:
            group = d.group_name
            sub_cfg = c.subscription_group_manager.find(group)
            if sub_cfg is None:
                refused.append(f"subscription group {group} does not exist")
                continue
            if d.message_model == "BROADCASTING" and not sub_cfg.consume_broadcast_enable:
                refused.append(f"subscription group {group} does not allow broadcasting")
                continue
            if d.message_model == "CLUSTERING":
                # the group's retry topic exists before its first failure, so it has a route
                try:
                    retry = retry_topic(group)
                except InvalidNameError as exc:
                    refused.append(str(exc))
                    continue
                if c.topic_config_manager.get(retry) is None:
                    c.topic_config_manager.create_topic_in_send_back(
                        retry, max(1, sub_cfg.retry_queue_nums), PERM_RW)
                    c.trigger_register()
            if c.consumer_manager.register(group, cid, conn, now, d.to_dict()):
                self.notify_consumer_ids_changed(group)
        if refused:
            return cmd.response(ResponseCode.NO_PERMISSION, "; ".join(refused))
        return cmd.response(ResponseCode.SUCCESS)

    def unregister_client(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        cid = f.get("clientID")
        if not isinstance(cid, str) or len(cid) > CLIENT_ID_MAX_LENGTH:
            raise RemoteProtocolError("UNREGISTER_CLIENT needs clientID (at most "
                                      f"{CLIENT_ID_MAX_LENGTH} characters)")
        # an empty group means none (RocketMQ's clients send both, one of them empty)
        producer, group = f.get("producerGroup") or None, f.get("consumerGroup") or None
        for key, value in (("producerGroup", producer), ("consumerGroup", group)):
            if value is not None and group_problem(value) is not None:
                raise RemoteProtocolError(f"UNREGISTER_CLIENT: field {key!r}: {group_problem(value)}")
        if isinstance(producer, str):
            self.controller.producer_manager.unregister(producer, cid)
        if isinstance(group, str) and self.controller.consumer_manager.unregister(group, cid):
            self.notify_consumer_ids_changed(group)
        return cmd.response(ResponseCode.SUCCESS)

    def get_consumer_list_by_group(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup")
        if group_problem(group) is not None:
            raise RemoteProtocolError(f"GET_CONSUMER_LIST_BY_GROUP: field 'consumerGroup': "
                                      f"{group_problem(group)}")
        assert isinstance(group, str)
        ids = self.controller.consumer_manager.client_ids(group)
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer of group {group} online")
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body({"consumerIdList": ids}))

    def check_client_config(self, conn: RemotingConnection, cmd: RemotingCommand
                            ) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG (RocketMQ's checkClientConfig): whether the
        broker filters by the body's subscription. A tag subscription always;
        SQL92 only with ``enablePropertyFilter`` (SYSTEM_ERROR otherwise), and
        only an expression that compiles (SUBSCRIPTION_PARSE_FAILED, saying
        where it is wrong). A consumer asks before it starts."""
        body = CheckClientRequestBody.from_wire(cmd.decode_body())
        sub = body.subscription
        if sub is None or is_tag_type(sub.expression_type):
            return cmd.response(ResponseCode.SUCCESS)
        if sub.expression_type != SQL92 or not self.controller.config.enable_property_filter:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                unsupported_remark(sub.expression_type))
        try:
            compile_sql(sub.sub_string)
        except SqlParseError as exc:
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return cmd.response(ResponseCode.SUCCESS)

    def _lock_refusal(self, conn: RemotingConnection, cmd: RemotingCommand,
                      body: LockBatchRequestBody) -> RemotingCommand | None:
        """ACL: SUB on the group the body names and on the topic of each queue
        (the guard does not read bodies), so one group cannot lock or free
        another's ordered queues."""
        needs = [Need(group_resource(body.consumer_group), Perm.SUB)]
        needs += [Need(t, Perm.SUB) for t in dict.fromkeys(t for t, _, _ in body.mq_set)]
        refused = self.controller.acl_check.refusal(conn, cmd, needs)
        return None if refused is None else cmd.response(ResponseCode.NO_PERMISSION,
                                                         refused.remark)

    def lock_batch_mq(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.from_wire(cmd.decode_body())
        refused = self._lock_refusal(conn, cmd, body)
        if refused is not None:
            return refused
        held = self.controller.lock_manager.try_lock_batch(
            body.consumer_group, body.mq_set, body.client_id, trio.current_time())
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body({"lockOKMQSet": _mq_dicts(held)}))

    def unlock_batch_mq(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.from_wire(cmd.decode_body())
        refused = self._lock_refusal(conn, cmd, body)
        if refused is not None:
            return refused
        self.controller.lock_manager.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return cmd.response(ResponseCode.SUCCESS)

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Tell every member of ``group`` to rebalance (oneway). A member that
        reads nothing (owed more than the write high-water mark) is not told:
        the notice is dropped and counted; it rebalances on its own timer."""
        for conn in self.controller.consumer_manager.connections(group):
            if not conn.closed and not conn.offer(RemotingCommand.request(
                    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group},
                    oneway=True)):
                self.notifications_dropped += 1
