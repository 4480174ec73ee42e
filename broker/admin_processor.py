"""AdminBrokerProcessor: topic administration and statistics."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from broker.stats import GROUP_GET_NUMS, MSGS, BrokerStats
from broker.subscription_group_manager import SubscriptionGroupConfig
from broker.topic_validator import is_system_topic, validate_topic
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetTopicStatsInfoRequestHeader,
)
from protocol.names import group_problem, topic_problem
from protocol.route import PERM_MAX, TopicConfig
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.controller import BrokerController

try:
    from importlib.metadata import version as _dist_version

    VERSION = _dist_version("trio-rocketmq")
except Exception:  # not installed as a distribution (a checkout on sys.path)
    VERSION = "0+unknown"


def _group_field(cmd: RemotingCommand, key: str) -> str:
    """A header field holding a group name; RemoteProtocolError unless valid."""
    group = cmd.ext_fields.get(key)
    problem = group_problem(group)
    if problem is not None:
        raise RemoteProtocolError(f"field {key!r}: {problem}")
    assert isinstance(group, str)
    return group


def _tps_text(stats: BrokerStats, which: str) -> str:
    """RocketMQ's "putTps"/"getTps": messages per second over the last minute,
    hour and day (RocketMQ's own says 10 s, 1 min, 10 min: its windows differ)."""
    return " ".join(f"{stats.tps(which, w):.2f}" for w in ("statsMinute", "statsHour", "statsDay"))


def _runtime_text(ms: int) -> str:
    s = max(0, ms) // 1000
    return f"[ {s // 86400} days, {s % 86400 // 3600} hours, {s % 3600 // 60} minutes, {s % 60} seconds ]"


def runtime_figures(c: BrokerController) -> dict[str, object]:
    """GET_BROKER_RUNTIME_INFO's operator figures (mqadmin brokerStatus)."""
    stats = c.stats
    now_ms = int(time.time() * 1000)
    return {
        "putTps": _tps_text(stats, "put"),
        "getTps": _tps_text(stats, "get"),
        "putTps1m": stats.tps("put"),
        "getTps1m": stats.tps("get"),
        "msgPutTotal": stats.put_total[MSGS],
        "msgGetTotal": stats.get_total[MSGS],
        "msgPutTotalTodayNow": stats.put_total[MSGS],
        "msgGetTotalTodayNow": stats.get_total[MSGS],
        "bootTimestamp": c.boot_timestamp_ms,
        "runtime": _runtime_text(now_ms - c.boot_timestamp_ms),
        "version": VERSION,
        "commitLogDiskRatio": c.commit_log_disk_ratio(),
        "pageCacheLockTimeMills": 0,  # appends take no lock here
        "heldPulls": c.pull_hold_service.index.total,
        # what is queued for clients (issue 48: bounded for a peer that reads nothing)
        "connectionOwedMaxBytes": max((conn.owed for conn in c.server.connections), default=0),
        "requestsToClientsDropped": sum(conn.dropped_requests for conn in c.server.connections),
        "notificationsDropped": c.client_service.notifications_dropped,
        "startAcceptSendRequestTimeStamp": c.start_accept_send_timestamp_ms,
    }


class AdminBrokerProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def update_and_create_topic(self, conn: RemotingConnection, cmd: RemotingCommand
                                ) -> RemotingCommand | None:
        """Answered once the change is in the topic journal (durable), not
        before: the handler returns None and the controller answers then."""
        h = CreateTopicRequestHeader.from_fields(cmd.ext_fields)
        reason = validate_topic(h.topic)
        if reason is None and is_system_topic(h.topic):
            reason = f"the topic {h.topic!r} is a reserved system topic"
        if reason is not None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, reason)
        limit = self.controller.config.max_queue_nums
        if not (0 < h.read_queue_nums <= limit and 0 < h.write_queue_nums <= limit):
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"queue numbers must be within 1..{limit} (maxQueueNums)")
        if not 0 <= h.perm <= PERM_MAX:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"perm must be within 0..{PERM_MAX}")
        cfg = TopicConfig(
            h.topic, h.read_queue_nums, h.write_queue_nums, h.perm,
            h.topic_filter_type, h.topic_sys_flag, h.order,
        )
        seq = self.controller.topic_config_manager.put(cfg)
        self.controller.trigger_register()
        return self.controller.answer_when_topics_durable(conn, cmd, seq)

    def update_and_create_subscription_group(
        self, conn: RemotingConnection, cmd: RemotingCommand
    ) -> RemotingCommand:
        try:
            cfg = SubscriptionGroupConfig.from_dict(cmd.decode_body())
        except ValueError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad subscription group: {exc}")
        reason = group_problem(cfg.group_name)
        if reason is not None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, reason)
        limit = self.controller.config.max_queue_nums
        if cfg.retry_queue_nums > limit:  # the queues %RETRY%<group> is created with
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"retryQueueNums must be within 0..{limit} (maxQueueNums)")
        self.controller.subscription_group_manager.update(cfg)
        return cmd.response(ResponseCode.SUCCESS)

    def get_all_subscription_group(
        self, conn: RemotingConnection, cmd: RemotingCommand
    ) -> RemotingCommand:
        wire = self.controller.subscription_group_manager.to_wire()
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(wire))

    def delete_subscription_group(
        self, conn: RemotingConnection, cmd: RemotingCommand
    ) -> RemotingCommand:
        group = _group_field(cmd, "groupName")
        if not self.controller.subscription_group_manager.delete(group):
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group {group} does not exist")
        self.controller.stats.drop_group(group)
        return cmd.response(ResponseCode.SUCCESS)

    def delete_topic(self, conn: RemotingConnection, cmd: RemotingCommand
                     ) -> RemotingCommand | None:
        """Answered once the deletion is in the topic journal, as a creation."""
        h = DeleteTopicRequestHeader.from_fields(cmd.ext_fields)
        seq = self.controller.topic_config_manager.remove(h.topic)
        self.controller.delete_topic(h.topic)  # offsets, store files, registration
        if seq is None:
            return cmd.response(ResponseCode.SUCCESS)
        return self.controller.answer_when_topics_durable(conn, cmd, seq)

    def get_topic_stats_info(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetTopicStatsInfoRequestHeader.from_fields(cmd.ext_fields)
        cfg = self.controller.topic_config_manager.get(h.topic)
        if cfg is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        store = self.controller.message_store
        name = self.controller.config.broker_name
        table = []
        for qid in range(cfg.write_queue_nums):
            max_off = store.get_max_offset_in_queue(h.topic, qid)
            last = store.get_message_store_timestamp(h.topic, qid, max_off - 1) if max_off > 0 else 0
            table.append({
                "brokerName": name,
                "queueId": qid,
                "minOffset": store.get_min_offset_in_queue(h.topic, qid),
                "maxOffset": max_off,
                "lastUpdateTimestamp": last,
            })
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body({"offsetTable": table}))

    def get_consume_stats(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        """Per queue of the group's topics: broker offset, consumer offset, lag."""
        group = _group_field(cmd, "consumerGroup")
        only = cmd.ext_fields.get("topic")
        if only is not None and topic_problem(only) is not None:
            raise RemoteProtocolError(f"GET_CONSUME_STATS: field 'topic': {topic_problem(only)}")
        c = self.controller
        topics = {t for t in c.topic_config_manager.table
                  if group in c.consumer_offset_manager.groups_of_topic(t)}
        info = c.consumer_manager.groups.get(group)
        if info is not None:
            topics |= {t for t in info.subscriptions if t in c.topic_config_manager.table}
        if isinstance(only, str) and only:
            topics &= {only}
        store = c.message_store
        rows = []
        consume_tps = 0.0  # RocketMQ's ConsumeStats.consumeTps: GROUP_GET_NUMS over a minute
        for topic in sorted(topics):
            windows = c.stats.stats(GROUP_GET_NUMS, f"{topic}@{group}")
            if windows is not None:
                consume_tps += windows["statsMinute"].tps
            cfg = c.topic_config_manager.table[topic]
            for qid in range(cfg.read_queue_nums):
                broker_off = store.get_max_offset_in_queue(topic, qid)
                consumer_off = c.consumer_offset_manager.query_offset(group, topic, qid)
                last = (store.get_message_store_timestamp(topic, qid, consumer_off - 1)
                        if consumer_off > 0 else 0)
                rows.append({"topic": topic, "brokerName": c.config.broker_name, "queueId": qid,
                             "brokerOffset": broker_off, "consumerOffset": max(consumer_off, 0),
                             "lastTimestamp": last})
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(
            {"offsetTable": rows, "consumeTps": round(consume_tps, 2)}))

    def get_consumer_connection_list(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        group = _group_field(cmd, "consumerGroup")
        info = self.controller.consumer_manager.groups.get(group)
        if info is None:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {
            "connectionSet": [{"clientId": ch.client_id, "clientAddr": ch.conn.remote_addr}
                              for ch in info.clients.values()],
            "subscriptionTable": info.subscriptions,
            "consumeType": info.consume_type, "messageModel": info.message_model,
            "consumeFromWhere": info.consume_from_where,
        }
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))

    def get_broker_runtime_info(self, conn: RemotingConnection, cmd: RemotingCommand
                                ) -> RemotingCommand:
        """Runtime figures (mqadmin brokerStatus): role, offsets and, for HA, each
        slave's acknowledged offset on a master, the master and lag on a slave
        (and its metadata sync rounds)."""
        c = self.controller
        store = c.message_store
        table: dict[str, object] = {
            "brokerName": c.config.broker_name,
            "brokerId": c.role.current.broker_id,
            "brokerRole": c.role.current.broker_role.value,
            "flushDiskType": c.config.flush_disk_type.value,
            "commitLogMinOffset": store.get_min_phy_offset(),
            "commitLogMaxOffset": store.get_max_phy_offset(),
            "topics": len(c.topic_config_manager.table),
            "subscriptionGroups": len(c.subscription_group_manager.table),
            "haListenPort": c.ha_listen_port,
            "ha": c.ha_service.status(),
            **runtime_figures(c),
            **c.schedule_service.running_stats(),
        }
        if not c.role.is_slave:
            tx = c.transaction_service.status()
            table.update({
                "transactionCommitted": tx["committed"],
                "transactionRolledBack": tx["rolled_back"],
                "transactionChecks": tx["checks"],
                "transactionDiscarded": tx["discarded"],
                "transactionPending": tx["pending"],
                "transactionCheckPasses": tx["passes"],
                "transactionChecksDropped": tx["checks_dropped"],
                "transactionPrepareRefused": tx["refused_busy"],
                "transactionHalfCopies": tx["copies"],
            })
        else:
            table.update(c.slave_synchronize.status())
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body({"table": table}))

    def get_all_consumer_offset(self, conn: RemotingConnection, cmd: RemotingCommand
                                ) -> RemotingCommand:
        """Every committed offset (a slave's SlaveSynchronize)."""
        return cmd.response(
            ResponseCode.SUCCESS, body=cmd.encode_body(self.controller.consumer_offset_manager.to_wire()))

    def get_all_delay_offset(self, conn: RemotingConnection, cmd: RemotingCommand
                             ) -> RemotingCommand:
        """The schedule service's progress per delay level (a slave's SlaveSynchronize)."""
        table = self.controller.schedule_service.offset_table
        body = {"offsetTable": {str(k): v for k, v in table.items()}}
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))

    def get_all_topic_config(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(
            ResponseCode.SUCCESS, body=cmd.encode_body(self.controller.topic_config_manager.to_wire())
        )
