"""ConsumerAPI: the broker requests every consumer makes (RocketMQ's
PullAPIWrapper plus the consumer half of MQClientAPIImpl).

Bound to a client instance and a group. Pulls decode the records and drop
messages whose tag string is not subscribed (different tags can share a
hash). Every call is bounded by a timeout and raises MQClientError (cannot
reach the broker, bad response) or MQBrokerError (the broker refused).

Which broker of a group (a master and its slaves) each request goes to:

- pulls: the broker id the previous pull response of that queue suggested
  (``pull_from``; a master sends cold reads to a slave, a slave sends a
  caught-up consumer back), else the master, else the lowest-numbered slave,
  so a queue whose master is down is read from its slave. A pull that cannot
  reach its broker refreshes the topic's route at once, so the next one
  follows the name servers' view (a dead master dropped, a returning one back)
  without waiting for the periodic refresh;
- offsets (commit, query) and queue offsets (min, max, by time): the master,
  else a slave (RocketMQ's findBrokerAddressInAdmin): offsets committed while
  a master is down are kept by its slave;
- send-back and queue locks: the master only.
"""

from __future__ import annotations

import zlib
from typing import Any

import structlog
import trio

from client.errors import MQBrokerError, MQClientError
from client.instance import MQClientInstance
from client.pull_result import PULL_STATUS_BY_CODE, PullResult, PullStatus, RawPullResult
from client.subscription import SubscriptionData
from protocol.body import pack_body, unpack_body
from protocol.client_data import CheckClientRequestBody
from protocol.client_data import SubscriptionData as WireSubscription
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


def pull_request(group: str, mq: MessageQueue, sub: SubscriptionData, offset: int,
                 max_nums: int, *, sys_flag: int = 0, commit_offset: int = 0,
                 suspend_timeout_millis: int = 0) -> RemotingCommand:
    """A PULL_MESSAGE of up to ``max_nums`` records of ``mq`` from ``offset``."""
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=mq.topic,
        queue_id=mq.queue_id,
        queue_offset=offset,
        max_msg_nums=max_nums,
        # the broker filters by this subscription only with the flag (else it takes the
        # group's heart-beat subscription, which a pull consumer may not have sent)
        sys_flag=sys_flag | PULL_FLAG_SUBSCRIPTION,
        commit_offset=commit_offset,
        suspend_timeout_millis=suspend_timeout_millis,
        subscription=sub.sub_string,
        sub_version=sub.sub_version,
        expression_type=sub.expression_type,
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_fields())


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

    async def _admin(self, mq: MessageQueue) -> str:
        """The master of ``mq``'s broker, else one of its slaves."""
        addr, _ = await self.instance.require_broker_addr(
            mq.broker_name, mq.topic, master_only=False)
        return addr

    def admin_addr(self, mq: MessageQueue) -> str | None:
        """Where ``mq``'s offsets go now (``_admin`` from the cached routes)."""
        found = self.instance.find_broker_addr_in_admin(mq.broker_name)
        return None if found is None else found[0]

    async def _refresh_route(self, topic: str) -> None:
        """Fetch ``topic``'s route after a broker could not be reached; errors logged."""
        try:
            await self.instance.update_topic_route(topic)
        except (MQClientError, MQBrokerError) as exc:
            self._log.warning("route refresh after a failed pull failed", topic=topic,
                              error=str(exc))

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
        cmd = pull_request(self.group, mq, sub, offset, max_nums, sys_flag=sys_flag,
                           commit_offset=commit_offset,
                           suspend_timeout_millis=suspend_timeout_millis)
        try:
            response = await self.instance.invoke(addr, cmd, timeout)
        except RemotingError as exc:
            # the broker may be gone: let the next pull see the name servers' view
            await self._refresh_route(mq.topic)
            raise MQClientError(f"pull from {mq} failed: {exc}") from exc
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
            # one mapping for the whole pull, merged when a message's properties are read
            offsets = {_MIN_OFFSET: str(raw.min_offset), _MAX_OFFSET: str(raw.max_offset)}
            try:
                msgs = decode_records(raw.body, extra=offsets)
            except ProtocolError as exc:
                raise MQClientError(f"undecodable pull body from {raw.addr}: {exc}") from exc
            tags = sub.tags_set
            if tags is not None:
                msgs = [msg for msg in msgs if msg.properties.get(_TAGS) in tags]
            for msg in msgs:
                if msg.sys_flag & FLAG_COMPRESSED:
                    self._uncompress(msg)
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
    ) -> str:
        """Store the group's next offset of ``mq`` on the queue's master, or on a
        slave while the master is not in the routes. Returns the broker address."""
        if offset < 0:
            raise MQClientError(f"offset must be >= 0, got {offset}")
        addr = await self._admin(mq)
        header = UpdateConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id, offset)
        cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_fields())
        what = f"update consume offset of {mq}"
        response = await self._invoke(addr, cmd, timeout, what)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr, context=what)
        return addr

    async def fetch_consume_offset(self, mq: MessageQueue) -> int:
        """The group's offset of ``mq`` as the broker answers it (from the
        master, else a slave): stored, or 0 for a group with none while the
        queue's first message is in memory; -1 for QUERY_NOT_FOUND."""
        addr = await self._admin(mq)
        header = QueryConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id)
        cmd = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header.to_fields())
        what = f"query consume offset of {mq}"
        response = await self._invoke(addr, cmd, None, what)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return self._offset_of(response, addr, what)

    async def max_offset(self, mq: MessageQueue) -> int:
        """The queue's max offset (the next offset to be written), from the
        master, else a slave."""
        addr = await self._admin(mq)
        header = GetMaxOffsetRequestHeader(mq.topic, mq.queue_id)
        cmd = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, header.to_fields())
        what = f"get max offset of {mq}"
        return self._offset_of(await self._invoke(addr, cmd, None, what), addr, what)

    async def min_offset(self, mq: MessageQueue) -> int:
        """The queue's smallest offset still stored (master, else a slave)."""
        addr = await self._admin(mq)
        header = GetMinOffsetRequestHeader(mq.topic, mq.queue_id)
        cmd = RemotingCommand.request(RequestCode.GET_MIN_OFFSET, header.to_fields())
        what = f"get min offset of {mq}"
        return self._offset_of(await self._invoke(addr, cmd, None, what), addr, what)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of ``mq`` stored at or after ``timestamp_ms``
        (master, else a slave)."""
        addr = await self._admin(mq)
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
        """The group's members: every broker serving ``topic`` (masters and
        slaves) is asked and the lists are joined, so a broker that has just
        (re)started and not heard every member's heartbeat yet cannot shrink
        the group (a member that leaves or whose connection closes is dropped
        by every broker). Empty when none knows."""
        route = self.instance.topic_route(topic)
        if route is None:
            return []
        addrs = sorted({a for bd in route.broker_datas for a in bd.broker_addrs.values()})
        lists: list[list[str]] = []

        async def ask(addr: str) -> None:
            cmd = RemotingCommand.request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group})
            try:
                response = await self.instance.invoke(addr, cmd)
            except RemotingError as exc:
                self._log.warning("get consumer list failed", broker=addr, error=str(exc))
                return
            if response.code != ResponseCode.SUCCESS:
                return
            try:
                body = unpack_body(response.body)
            except ProtocolError as exc:
                self._log.warning("bad consumer list", broker=addr, error=str(exc))
                return
            ids = body.get("consumerIdList") if isinstance(body, dict) else None
            if isinstance(ids, list) and all(isinstance(i, str) for i in ids):
                lists.append(ids)

        async with trio.open_nursery() as nursery:
            for addr in addrs:
                nursery.start_soon(ask, addr)
        return sorted({i for ids in lists for i in ids})

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


    async def check_client_in_broker(self, addr: str, sub: SubscriptionData) -> None:
        """CHECK_CLIENT_CONFIG: whether the broker at ``addr`` filters by ``sub``.
        Raises MQBrokerError when it does not (SQL92 without
        ``enablePropertyFilter``, an expression it cannot compile)."""
        body = CheckClientRequestBody(self.instance.client_id, self.group, WireSubscription(
            sub.topic, sub.sub_string, sorted(sub.tags_set or ()), sorted(sub.code_set or ()),
            sub.expression_type, sub.sub_version))
        cmd = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, {},
                                      body=pack_body(body.to_dict()))
        what = f"check {sub.expression_type} subscription of {sub.topic} in broker"
        response = await self._invoke(addr, cmd, None, what)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr, context=what)


def _mq_dict(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}
