"""ConsumerAPI: the broker requests every consumer makes (RocketMQ's
PullAPIWrapper plus the consumer half of MQClientAPIImpl).

Bound to a client instance and a group. Pulls decode the records and drop
messages whose tag string is not subscribed (different tags can share a
hash). Every call is bounded by a timeout and raises MQClientError (cannot
reach the broker, bad response) or MQBrokerError (the broker refused).
"""

from __future__ import annotations

import zlib
from typing import Any

import structlog

from client.errors import MQBrokerError, MQClientError
from client.instance import MQClientInstance
from client.pull_result import PULL_STATUS_BY_CODE, PullResult, PullStatus, RawPullResult
from client.subscription import SubscriptionData
from protocol.body import pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import ProtocolError
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from protocol.message import MessageConst, MessageExt, MessageQueue
from protocol.record import FLAG_COMPRESSED, decode_records
from protocol.route import MASTER_ID
from protocol.trio import RemotingError

log = structlog.get_logger("client.consumer_api")

# sysFlag bits of a pull request (RocketMQ's PullSysFlag).
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4

_MIN_OFFSET = MessageConst.PROPERTY_MIN_OFFSET
_MAX_OFFSET = MessageConst.PROPERTY_MAX_OFFSET
_TAGS = MessageConst.PROPERTY_TAGS


class ConsumerAPI:
    def __init__(self, instance: MQClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        # Which broker id to read each queue from next (the broker's suggestion).
        self.pull_from: dict[MessageQueue, int] = {}
        self._log = log.bind(group=group, client_id=instance.client_id)

    async def _invoke(
        self, addr: str, cmd: RemotingCommand, timeout: float | None, what: str
    ) -> RemotingCommand:
        try:
            return await self.instance.invoke(addr, cmd, timeout)
        except RemotingError as exc:
            raise MQClientError(f"{what} failed: {exc}") from exc

    async def _master(self, mq: MessageQueue) -> str:
        addr, _ = await self.instance.require_broker_addr(mq.broker_name, mq.topic)
        return addr

    # ---- pull -------------------------------------------------------------------

    async def pull_raw(
        self,
        mq: MessageQueue,
        sub: SubscriptionData,
        offset: int,
        max_nums: int,
        *,
        timeout: float,
        sys_flag: int = 0,
        commit_offset: int = 0,
        suspend_timeout_millis: int = 0,
    ) -> RawPullResult:
        """One PULL_MESSAGE, the records left undecoded (``RawPullResult.body``;
        the broker filtered by tag hash only). With ``PULL_FLAG_SUSPEND`` the
        broker holds an empty pull up to ``suspend_timeout_millis``;
        ``timeout`` must exceed it."""
        addr, _ = await self.instance.require_broker_addr(
            mq.broker_name, mq.topic, master_only=False,
            broker_id=self.pull_from.get(mq, MASTER_ID),
        )
        header = PullMessageRequestHeader(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=sys_flag,
            commit_offset=commit_offset,
            suspend_timeout_millis=suspend_timeout_millis,
            subscription=sub.sub_string,
            sub_version=0,
            expression_type="TAG",
        )
        cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_fields())
        response = await self._invoke(addr, cmd, timeout, f"pull from {mq}")
        status = PULL_STATUS_BY_CODE.get(response.code)
        if status is None:
            raise MQBrokerError(response.code, response.remark, addr, context=f"pull from {mq}")
        try:
            rh = PullMessageResponseHeader.from_fields(response.ext_fields)
        except ProtocolError as exc:
            raise MQClientError(f"bad pull response from {addr}: {exc}") from exc
        self.pull_from[mq] = rh.suggest_which_broker_id
        if status is PullStatus.OFFSET_ILLEGAL:
            self._log.info(
                "pull offset illegal", mq=str(mq), offset=offset,
                next_begin_offset=rh.next_begin_offset, min_offset=rh.min_offset,
                max_offset=rh.max_offset,
            )
        body = response.body if status is PullStatus.FOUND and response.body else b""
        return RawPullResult(status, rh.next_begin_offset, rh.min_offset, rh.max_offset, body,
                             addr)

    async def pull(
        self,
        mq: MessageQueue,
        sub: SubscriptionData,
        offset: int,
        max_nums: int,
        *,
        timeout: float,
        sys_flag: int = 0,
        commit_offset: int = 0,
        suspend_timeout_millis: int = 0,
    ) -> PullResult:
        """One PULL_MESSAGE, decoded, messages with unsubscribed tags dropped."""
        raw = await self.pull_raw(
            mq, sub, offset, max_nums, timeout=timeout, sys_flag=sys_flag,
            commit_offset=commit_offset, suspend_timeout_millis=suspend_timeout_millis,
        )
        msgs: list[MessageExt] = []
        if raw.body:
            try:
                decoded = decode_records(raw.body)
            except ProtocolError as exc:
                raise MQClientError(f"undecodable pull body from {raw.addr}: {exc}") from exc
            tags = sub.tags_set
            min_text = str(raw.min_offset)
            max_text = str(raw.max_offset)
            for msg in decoded:
                props = msg.properties
                if tags is not None and props.get(_TAGS) not in tags:
                    continue
                if msg.sys_flag & FLAG_COMPRESSED:
                    self._uncompress(msg)
                props[_MIN_OFFSET] = min_text
                props[_MAX_OFFSET] = max_text
                msgs.append(msg)
        return PullResult(raw.pull_status, raw.next_begin_offset, raw.min_offset,
                          raw.max_offset, msgs)

    def _uncompress(self, msg: MessageExt) -> None:
        try:
            msg.body = zlib.decompress(msg.body)
        except zlib.error as exc:
            self._log.warning("cannot uncompress message body", error=str(exc))

    # ---- offsets ----------------------------------------------------------------

    async def update_consume_offset(
        self, mq: MessageQueue, offset: int, timeout: float | None = None
    ) -> None:
        """Store the group's next offset of ``mq`` on the queue's master."""
        if offset < 0:
            raise MQClientError(f"offset must be >= 0, got {offset}")
        addr = await self._master(mq)
        header = UpdateConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id, offset)
        cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_fields())
        what = f"update consume offset of {mq}"
        response = await self._invoke(addr, cmd, timeout, what)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr, context=what)

    async def fetch_consume_offset(self, mq: MessageQueue) -> int:
        """The group's stored offset of ``mq``, or -1 when the broker has none."""
        addr, _ = await self.instance.require_broker_addr(
            mq.broker_name, mq.topic, master_only=False)
        header = QueryConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id)
        cmd = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header.to_fields())
        what = f"query consume offset of {mq}"
        response = await self._invoke(addr, cmd, None, what)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return self._offset_of(response, addr, what)

    async def max_offset(self, mq: MessageQueue) -> int:
        """The queue's max offset (the next offset to be written)."""
        addr = await self._master(mq)
        header = GetMaxOffsetRequestHeader(mq.topic, mq.queue_id)
        cmd = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, header.to_fields())
        what = f"get max offset of {mq}"
        return self._offset_of(await self._invoke(addr, cmd, None, what), addr, what)

    async def min_offset(self, mq: MessageQueue) -> int:
        """The queue's smallest offset still stored."""
        addr = await self._master(mq)
        header = GetMinOffsetRequestHeader(mq.topic, mq.queue_id)
        cmd = RemotingCommand.request(RequestCode.GET_MIN_OFFSET, header.to_fields())
        what = f"get min offset of {mq}"
        return self._offset_of(await self._invoke(addr, cmd, None, what), addr, what)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of ``mq`` stored at or after ``timestamp_ms``."""
        addr = await self._master(mq)
        header = SearchOffsetRequestHeader(mq.topic, mq.queue_id, timestamp_ms)
        cmd = RemotingCommand.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header.to_fields())
        what = f"search offset of {mq} by time"
        return self._offset_of(await self._invoke(addr, cmd, None, what), addr, what)

    @staticmethod
    def _offset_of(response: RemotingCommand, addr: str, what: str) -> int:
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr, context=what)
        try:
            return OffsetResponseHeader.from_fields(response.ext_fields).offset
        except ProtocolError as exc:
            raise MQClientError(f"{what}: bad response from {addr}: {exc}") from exc

    # ---- retry ------------------------------------------------------------------

    async def send_back(
        self, msg: MessageExt, broker_name: str, delay_level: int, max_reconsume_times: int | None
    ) -> None:
        """CONSUMER_SEND_MSG_BACK: the broker re-stores ``msg`` in the group's
        retry topic (or the DLQ past ``max_reconsume_times``, or at once when
        ``delay_level`` is -1)."""
        addr, _ = await self.instance.require_broker_addr(broker_name, msg.topic)
        header = ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset,
            group=self.group,
            delay_level=delay_level,
            origin_msg_id=msg.uniq_key or msg.msg_id,
            origin_topic=msg.topic,
            max_reconsume_times=max_reconsume_times,
        )
        cmd = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_fields())
        what = f"send back message {msg.msg_id}"
        response = await self._invoke(addr, cmd, None, what)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr, context=what)

    # ---- group membership and locks ----------------------------------------------

    async def consumer_ids(self, topic: str) -> list[str]:
        """The group's members as seen by a broker serving ``topic`` (the first
        by name, so every member asks the same one). Empty when none knows."""
        route = self.instance.topic_route(topic)
        if route is None:
            return []
        for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = bd.broker_addrs.get(MASTER_ID) or next(iter(bd.broker_addrs.values()), None)
            if addr is None:
                continue
            cmd = RemotingCommand.request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group})
            try:
                response = await self.instance.invoke(addr, cmd)
            except RemotingError as exc:
                self._log.warning("get consumer list failed", broker=addr, error=str(exc))
                continue
            if response.code != ResponseCode.SUCCESS:
                continue
            body = unpack_body(response.body)
            ids = body.get("consumerIdList") if isinstance(body, dict) else None
            if isinstance(ids, list) and all(isinstance(i, str) for i in ids):
                return sorted(ids)
        return []

    async def _lock_request(
        self, code: RequestCode, broker_name: str, topic: str, mqs: list[MessageQueue]
    ) -> tuple[str, RemotingCommand]:
        addr, _ = await self.instance.require_broker_addr(broker_name, topic)
        body = {
            "consumerGroup": self.group,
            "clientId": self.instance.client_id,
            "mqSet": [_mq_dict(mq) for mq in mqs],
        }
        cmd = RemotingCommand.request(code, {}, body=pack_body(body))
        what = f"{'lock' if code == RequestCode.LOCK_BATCH_MQ else 'unlock'} queues on {broker_name}"
        response = await self._invoke(addr, cmd, None, what)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr, context=what)
        return addr, response

    async def lock_batch(self, broker_name: str, topic: str, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ on ``broker_name``'s master; the queues now held."""
        _, response = await self._lock_request(RequestCode.LOCK_BATCH_MQ, broker_name, topic, mqs)
        data = unpack_body(response.body)
        held = data.get("lockOKMQSet") if isinstance(data, dict) else None
        out: set[MessageQueue] = set()
        for it in held if isinstance(held, list) else []:
            if isinstance(it, dict):
                out.add(MessageQueue(str(it.get("topic")), str(it.get("brokerName")),
                                     int(it.get("queueId", -1))))
        return out

    async def unlock_batch(self, broker_name: str, topic: str, mqs: list[MessageQueue]) -> None:
        await self._lock_request(RequestCode.UNLOCK_BATCH_MQ, broker_name, topic, mqs)


def _mq_dict(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}
