"""HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, LOCK/UNLOCK_BATCH_MQ."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from broker.topic_validator import RETRY_GROUP_TOPIC_PREFIX
from protocol.body import pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.route import PERM_RW
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.controller import BrokerController


def _mq_tuples(items: Any) -> list[tuple[str, str, int]]:
    if not isinstance(items, list):
        raise RemoteProtocolError("mqSet must be an array")
    out = []
    for it in items:
        if not (isinstance(it, dict) and isinstance(it.get("topic"), str)
                and isinstance(it.get("brokerName"), str) and type(it.get("queueId")) is int):
            raise RemoteProtocolError("mqSet entries need topic, brokerName, queueId")
        out.append((it["topic"], it["brokerName"], it["queueId"]))
    return out


def _mq_dicts(mqs: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "brokerName": b, "queueId": q} for t, b, q in mqs]


class ClientManageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def heart_beat(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        body = unpack_body(cmd.body)
        if not isinstance(body, dict) or not isinstance(body.get("clientID"), str):
            raise RemoteProtocolError("heartbeat body needs clientID")
        cid = body["clientID"]
        now = trio.current_time()
        c = self.controller
        for p in body.get("producerDataSet") or []:
            if isinstance(p, dict) and isinstance(p.get("groupName"), str):
                c.producer_manager.register(p["groupName"], cid, conn, now)
        refused: list[str] = []
        for d in body.get("consumerDataSet") or []:
            if not (isinstance(d, dict) and isinstance(d.get("groupName"), str)):
                continue
            group = d["groupName"]
            sub_cfg = c.subscription_group_manager.find(group)
            if sub_cfg is None:
                refused.append(f"subscription group {group} does not exist")
                continue
            if d.get("messageModel") == "BROADCASTING" and not sub_cfg.consume_broadcast_enable:
                refused.append(f"subscription group {group} does not allow broadcasting")
                continue
            if d.get("messageModel", "CLUSTERING") == "CLUSTERING":
                # the group's retry topic exists before its first failure, so it has a route
                retry = RETRY_GROUP_TOPIC_PREFIX + group
                if c.topic_config_manager.get(retry) is None:
                    c.topic_config_manager.create_topic_in_send_back(
                        retry, max(1, sub_cfg.retry_queue_nums), PERM_RW)
                    c.trigger_register()
            if c.consumer_manager.register(group, cid, conn, now, d):
                self.notify_consumer_ids_changed(group)
        if refused:
            return cmd.response(ResponseCode.NO_PERMISSION, "; ".join(refused))
        return cmd.response(ResponseCode.SUCCESS)

    def unregister_client(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        cid = f.get("clientID")
        if not isinstance(cid, str):
            raise RemoteProtocolError("UNREGISTER_CLIENT needs clientID")
        if isinstance(f.get("producerGroup"), str):
            self.controller.producer_manager.unregister(f["producerGroup"], cid)
        group = f.get("consumerGroup")
        if isinstance(group, str) and self.controller.consumer_manager.unregister(group, cid):
            self.notify_consumer_ids_changed(group)
        return cmd.response(ResponseCode.SUCCESS)

    def get_consumer_list_by_group(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup")
        if not isinstance(group, str):
            raise RemoteProtocolError("GET_CONSUMER_LIST_BY_GROUP needs consumerGroup")
        ids = self.controller.consumer_manager.client_ids(group)
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer of group {group} online")
        return cmd.response(ResponseCode.SUCCESS, body=pack_body({"consumerIdList": ids}))

    def lock_batch_mq(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        body = unpack_body(cmd.body)
        if not isinstance(body, dict):
            raise RemoteProtocolError("lock body must be a map")
        held = self.controller.lock_manager.try_lock_batch(
            str(body.get("consumerGroup")), _mq_tuples(body.get("mqSet")),
            str(body.get("clientId")), trio.current_time())
        return cmd.response(ResponseCode.SUCCESS, body=pack_body({"lockOKMQSet": _mq_dicts(held)}))

    def unlock_batch_mq(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        body = unpack_body(cmd.body)
        if not isinstance(body, dict):
            raise RemoteProtocolError("unlock body must be a map")
        self.controller.lock_manager.unlock_batch(
            str(body.get("consumerGroup")), _mq_tuples(body.get("mqSet")), str(body.get("clientId")))
        return cmd.response(ResponseCode.SUCCESS)

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Tell every member of ``group`` to rebalance (oneway)."""
        for conn in self.controller.consumer_manager.connections(group):
            if not conn.closed:
                conn.send_response(RemotingCommand.request(
                    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True))
