"""QueueAdminProcessor: what mqadmin asks of a broker's topics and consume queues
(``updateTopicPerm``, ``queryCq``, ``cleanExpiredCQ``, ``cleanUnusedTopic``).

- GET_TOPIC_CONFIG (351, RocketMQ 5.x): header ``topic`` -> body TopicConfig
  (``topicName``, ``readQueueNums``, ``writeQueueNums``, ``perm``,
  ``topicFilterType``, ``topicSysFlag``, ``order``); TOPIC_NOT_EXIST when the
  broker has no such topic.
- QUERY_CONSUME_QUEUE (321): header ``topic``, ``queueId``, ``index``, ``count``
  (1..QUERY_CQ_MAX_COUNT), ``consumerGroup``? -> body ``{"minQueueIndex",
  "maxQueueIndex", "queueData": [{"index", "physicOffset", "physicSize",
  "tagsCode", "eval"?}], "subscriptionData"?, "filterData"?}``. ``eval`` (with a
  group): whether the group's subscription selects the entry by its tags hash,
  as a pull filters. SYSTEM_ERROR when the queue does not exist.
- CLEAN_EXPIRED_CONSUMEQUEUE (306) and CLEAN_UNUSED_TOPIC (316): no header ->
  body ``{"removed": [{"topic", "queueId"}], "removedCount", "kept": [{"topic",
  "reason"}], "keptCount"}``; what goes and what stays: broker/store/queue_cleanup.py.
  A slave refuses CLEAN_UNUSED_TOPIC: its topic table is a copy of its master's
  that may lag (a topic's first messages can reach it before its config does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from broker.store.queue_cleanup import (
    CleanPlan,
    KeepRule,
    expired_queues,
    keep_rule,
    unused_topics,
)
from broker.topic_validator import is_system_topic
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.filter import parse_sub_expression, tag_codes
from protocol.headers import GetTopicConfigRequestHeader, QueryConsumeQueueRequestHeader
from protocol.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger("broker.queue_admin")

# entries one QUERY_CONSUME_QUEUE answers at most (20 bytes each on disk)
QUERY_CQ_MAX_COUNT = 1000


class QueueAdminProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller
        self.log = log.bind(broker=controller.config.broker_name)

    def get_topic_config(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetTopicConfigRequestHeader.from_fields(cmd.ext_fields)
        cfg = self.controller.topic_config_manager.get(h.topic)
        if cfg is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(cfg.to_dict()))

    def query_consume_queue(self, conn: RemotingConnection, cmd: RemotingCommand
                            ) -> RemotingCommand:
        h = QueryConsumeQueueRequestHeader.from_fields(cmd.ext_fields)
        if not 0 < h.count <= QUERY_CQ_MAX_COUNT:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"count must be within 1..{QUERY_CQ_MAX_COUNT}, not {h.count}")
        found = self.controller.message_store.consume_queue_entries(h.topic, h.queue_id, h.index,
                                                                    h.count)
        if found is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!")
        lo, hi, entries = found
        body: dict[str, object] = {"minQueueIndex": lo, "maxQueueIndex": hi}
        codes: set[int] | None = None
        evaluate = False
        if h.consumer_group is not None:
            info = self.controller.consumer_manager.groups.get(h.consumer_group)
            sub = info.subscriptions.get(h.topic) if info is not None else None
            if sub is None:
                body["filterData"] = f"{h.consumer_group}@{h.topic} is not online!"
            else:
                body["subscriptionData"] = sub
                try:
                    text = sub.get("subString")
                    codes = tag_codes(parse_sub_expression(text if isinstance(text, str) else None))
                    evaluate = True
                except ValueError as exc:
                    body["filterData"] = f"the subscription cannot be evaluated: {exc}"
        rows = []
        for index, phys, size, tag in entries:
            row: dict[str, object] = {"index": index, "physicOffset": phys, "physicSize": size,
                                      "tagsCode": tag}
            if evaluate:
                row["eval"] = codes is None or tag in codes
            rows.append(row)
        body["queueData"] = rows
        remark = None if entries else f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!"
        return cmd.response(ResponseCode.SUCCESS, remark, body=cmd.encode_body(body))

    def clean_expired_consume_queue(self, conn: RemotingConnection, cmd: RemotingCommand
                                    ) -> RemotingCommand:
        store = self.controller.message_store
        min_phy = store.get_min_phy_offset()
        plan = expired_queues(store.consume_queue_facts(), min_phy, self.keep_rule())
        return self._carry_out(cmd, plan, "expired consume queues cleaned", min_phy=min_phy)

    def clean_unused_topic(self, conn: RemotingConnection, cmd: RemotingCommand
                           ) -> RemotingCommand:
        if self.controller.role.is_slave:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                "a slave does not clean unused topics: its topic table is a copy of its "
                "master's that may lag behind the messages it receives (clean the master; "
                "cleanExpiredCQ is safe on a slave)")
        plan = unused_topics(self.controller.message_store.consume_queue_facts(),
                             self.keep_rule())
        return self._carry_out(cmd, plan, "unused topics cleaned")

    def _carry_out(self, cmd: RemotingCommand, plan: CleanPlan, event: str,
                   **context: object) -> RemotingCommand:
        removed = self.controller.message_store.remove_consume_queues(plan.remove)
        topics = sorted({t for t, _ in plan.remove})
        self.log.warning(event, removed_queues=removed, topics=topics[:20],
                         topic_count=len(topics), kept=len(plan.kept), **context)
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(plan.report()))

    def keep_rule(self) -> KeepRule:
        """What keeps a topic's queues (queue_cleanup.Keep), from the broker's
        tables as they are now."""
        c = self.controller
        with_offsets = {key.partition("@")[0] for key in c.consumer_offset_manager.offset_table}
        subscribed = {t for info in c.consumer_manager.groups.values() for t in info.subscriptions}
        groups = c.subscription_group_manager.table

        def group_topic(topic: str) -> bool:
            for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
                if topic.startswith(prefix) and topic[len(prefix):] in groups:
                    return True
            return False

        return keep_rule(lambda t: t in c.topic_config_manager.table, is_system_topic,
                         with_offsets.__contains__, subscribed.__contains__, group_topic)
