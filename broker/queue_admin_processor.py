"""QueueAdminProcessor: what mqadmin asks of a broker's topics and consume queues
(``updateTopicPerm``, ``queryCq``, ``cleanExpiredCQ``, ``cleanUnusedTopic``) on the
remoting wire, a thin adapter over ``QueryService`` (broker/service/queries.py,
where the rules live); codes by broker/query_processor.py's table.

- GET_TOPIC_CONFIG (351, RocketMQ 5.x): header ``topic`` -> body TopicConfig
  (``topicName``, ``readQueueNums``, ``writeQueueNums``, ``perm``,
  ``topicFilterType``, ``topicSysFlag``, ``order``); TOPIC_NOT_EXIST when the
  broker has no such topic.
- QUERY_CONSUME_QUEUE (321): header ``topic``, ``queueId``, ``index``, ``count``
  (1..1000, QUERY_CQ_MAX_COUNT), ``consumerGroup``? -> body ``{"minQueueIndex",
  "maxQueueIndex", "queueData": [{"index", "physicOffset", "physicSize",
  "tagsCode", "eval"?}], "subscriptionData"?, "filterData"?}``. ``eval`` (with a
  group): whether the group's subscription selects the entry by its tags hash,
  as a pull filters. SYSTEM_ERROR when the queue does not exist.
- CLEAN_EXPIRED_CONSUMEQUEUE (306) and CLEAN_UNUSED_TOPIC (316): no header ->
  body ``{"removed": [{"topic", "queueId"}], "removedCount", "kept": [{"topic",
  "reason"}], "keptCount"}``; what goes and what stays: broker/store/queue_cleanup.py.
  Their handlers are async: the removed queues' files are deleted in a worker
  thread. A slave refuses CLEAN_UNUSED_TOPIC.
"""

from __future__ import annotations

from broker.query_processor import QUERY_STATUS_TO_CODE
from broker.service.queries import (
    CleanOutcome,
    ConsumeQueueQuery,
    QueryService,
    QueryStatus,
)
from protocol.command import RemotingCommand
from protocol.headers import GetTopicConfigRequestHeader, QueryConsumeQueueRequestHeader
from protocol.trio.connection import RemotingConnection


class QueueAdminProcessor:
    def __init__(self, service: QueryService) -> None:
        self.service = service

    def get_topic_config(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetTopicConfigRequestHeader.from_fields(cmd.ext_fields)
        out = self.service.topic_config(h.topic)
        code = QUERY_STATUS_TO_CODE[out.status]
        if out.config is None:
            return cmd.response(code, out.remark)
        return cmd.response(code, out.remark, body=cmd.encode_body(out.config.to_dict()))

    def query_consume_queue(self, conn: RemotingConnection, cmd: RemotingCommand
                            ) -> RemotingCommand:
        h = QueryConsumeQueueRequestHeader.from_fields(cmd.ext_fields)
        out = self.service.consume_queue(ConsumeQueueQuery(h.topic, h.queue_id, h.index, h.count,
                                                           h.consumer_group))
        code = QUERY_STATUS_TO_CODE[out.status]
        if out.status is not QueryStatus.OK:
            return cmd.response(code, out.remark)
        body: dict[str, object] = {"minQueueIndex": out.min_index,
                                   "maxQueueIndex": out.max_index}
        if out.subscription is not None:
            body["subscriptionData"] = out.subscription
        if out.filter_note is not None:
            body["filterData"] = out.filter_note
        rows = []
        for e in out.entries:
            row: dict[str, object] = {"index": e.index, "physicOffset": e.physic_offset,
                                      "physicSize": e.physic_size, "tagsCode": e.tags_code}
            if e.selected is not None:
                row["eval"] = e.selected
            rows.append(row)
        body["queueData"] = rows
        return cmd.response(code, out.remark, body=cmd.encode_body(body))

    async def clean_expired_consume_queue(self, conn: RemotingConnection, cmd: RemotingCommand
                                          ) -> RemotingCommand:
        return self._cleaned(cmd, await self.service.clean_expired())

    async def clean_unused_topic(self, conn: RemotingConnection, cmd: RemotingCommand
                                 ) -> RemotingCommand:
        return self._cleaned(cmd, await self.service.clean_unused())

    @staticmethod
    def _cleaned(cmd: RemotingCommand, out: CleanOutcome) -> RemotingCommand:
        code = QUERY_STATUS_TO_CODE[out.status]
        if out.status is not QueryStatus.OK:
            return cmd.response(code, out.remark)
        return cmd.response(code, out.remark, body=cmd.encode_body(out.plan.report()))
