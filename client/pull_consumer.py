"""PullConsumer: the caller chooses queues and offsets (RocketMQ's DefaultMQPullConsumer).

``pull`` asks the broker for messages at an offset and answers at once
(``suspendTimeoutMillis=0``, no long polling). The broker filters by tag hash;
the client drops messages whose tag string is not subscribed (hash
collisions), as RocketMQ's PullAPIWrapper does. Offsets are the caller's to
keep; ``update_consume_offset`` / ``fetch_consume_offset`` store them on the
broker for the group.
"""

from __future__ import annotations

import zlib
from enum import Enum

import structlog
import trio

from client.errors import MQBrokerError, MQClientError
from client.instance import (
    DEFAULT_POLL_NAME_SERVER_INTERVAL,
    DEFAULT_REQUEST_TIMEOUT,
    MQClientInstance,
)
from client.pull_result import PULL_STATUS_BY_CODE, PullResult, PullStatus
from client.subscription import build_subscription
from client.validators import check_group
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import ProtocolError
from protocol.headers import (
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from protocol.message import MessageConst, MessageExt, MessageQueue
from protocol.record import FLAG_COMPRESSED, decode_records
from protocol.route import MASTER_ID
from protocol.trio import RemotingError

log = structlog.get_logger("client.pull_consumer")

DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
_MIN_OFFSET = MessageConst.PROPERTY_MIN_OFFSET
_MAX_OFFSET = MessageConst.PROPERTY_MAX_OFFSET


class _State(Enum):
    CREATED = "created"
    RUNNING = "running"
    SHUTDOWN = "shutdown"


class PullConsumer:
    """A pull consumer on trio.

    Use ``async with PullConsumer("group", "ns1:9876") as c:`` or
    ``await start()`` / ``await shutdown()``.

    Args:
        group: consumer group name (``^[%|a-zA-Z0-9_-]+$``).
        namesrv_addr: name servers, ``;``-separated.
        pull_timeout: default seconds for one pull.
        request_timeout: seconds for offset and route requests.
        poll_name_server_interval: seconds between route refreshes.

    Raises MQClientError for an invalid group name or setting.
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str = "127.0.0.1:9876",
        *,
        pull_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        poll_name_server_interval: float = DEFAULT_POLL_NAME_SERVER_INTERVAL,
    ) -> None:
        check_group(group, DEFAULT_CONSUMER_GROUP)
        if pull_timeout <= 0 or request_timeout <= 0:
            raise MQClientError("timeouts must be positive")
        self.group = group
        self.namesrv_addr = namesrv_addr
        self.pull_timeout = pull_timeout
        self.request_timeout = request_timeout
        self.poll_name_server_interval = poll_name_server_interval
        self._state = _State.CREATED
        self._instance: MQClientInstance | None = None
        # Which broker id to pull each queue from next (the broker's suggestion).
        self._pull_from: dict[MessageQueue, int] = {}
        self._log = log.bind(group=group, namesrv=namesrv_addr)

    # ---- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the shared client instance. Raises MQClientError if already
        started or the name-server address is invalid."""
        if self._state is not _State.CREATED:
            raise MQClientError(f"the consumer is {self._state.value}; it can be started once")
        self._instance = await MQClientInstance.acquire(
            self.namesrv_addr,
            request_timeout=self.request_timeout,
            poll_name_server_interval=self.poll_name_server_interval,
        )
        self._state = _State.RUNNING
        self._log.info("pull consumer started")

    async def shutdown(self) -> None:
        """Release the client instance. Idempotent; safe from a cancelled task."""
        if self._state is not _State.RUNNING:
            self._state = _State.SHUTDOWN
            return
        self._state = _State.SHUTDOWN
        if self._instance is not None:
            with trio.CancelScope(shield=True):
                await self._instance.release()
        self._log.info("pull consumer shut down")

    async def __aenter__(self) -> PullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def _running_instance(self) -> MQClientInstance:
        if self._state is not _State.RUNNING or self._instance is None:
            raise MQClientError(f"the consumer is not running ({self._state.value})")
        return self._instance

    async def _invoke(
        self, addr: str, cmd: RemotingCommand, timeout: float, what: str
    ) -> RemotingCommand:
        try:
            return await self._running_instance().invoke(addr, cmd, timeout)
        except RemotingError as exc:
            raise MQClientError(f"{what} failed: {exc}") from exc

    # ---- queues -----------------------------------------------------------------

    async def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic``, sorted, fetched from the name servers now.

        Raises MQClientError when the topic does not exist or has no readable queue.
        """
        return await self._running_instance().fetch_subscribe_queues(topic)

    # ---- pull -------------------------------------------------------------------

    async def pull(
        self,
        mq: MessageQueue,
        sub_expression: str | None,
        offset: int,
        max_nums: int,
        timeout: float | None = None,
    ) -> PullResult:
        """Pull up to ``max_nums`` messages of ``mq`` from ``offset``.

        ``sub_expression``: ``"*"``/``""``/None for all, or ``"tagA || tagB"``.

        Raises:
            MQClientError: bad arguments or expression, consumer not running,
                unknown broker, connection failure or timeout, undecodable body.
            MQBrokerError: a response code other than the four pull outcomes
                (e.g. TOPIC_NOT_EXIST, NO_PERMISSION, SUBSCRIPTION_PARSE_FAILED).
        """
        instance = self._running_instance()
        if offset < 0:
            raise MQClientError(f"offset must be >= 0, got {offset}")
        if max_nums <= 0:
            raise MQClientError(f"max_nums must be > 0, got {max_nums}")
        if timeout is not None and not timeout > 0:
            raise MQClientError(f"timeout must be positive, got {timeout}")
        try:
            sub = build_subscription(mq.topic, sub_expression)
        except ValueError as exc:
            raise MQClientError(str(exc)) from exc
        addr, broker_id = await instance.require_broker_addr(
            mq.broker_name,
            mq.topic,
            master_only=False,
            broker_id=self._pull_from.get(mq, MASTER_ID),
        )
        header = PullMessageRequestHeader(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=0,
            commit_offset=0,
            suspend_timeout_millis=0,
            subscription=sub.sub_string,
            sub_version=0,
            expression_type="TAG",
        )
        cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_fields())
        response = await self._invoke(
            addr, cmd, self.pull_timeout if timeout is None else timeout, f"pull from {mq}"
        )
        status = PULL_STATUS_BY_CODE.get(response.code)
        if status is None:
            raise MQBrokerError(response.code, response.remark, addr, context=f"pull from {mq}")
        try:
            rh = PullMessageResponseHeader.from_fields(response.ext_fields)
        except ProtocolError as exc:
            raise MQClientError(f"bad pull response from {addr}: {exc}") from exc
        self._pull_from[mq] = rh.suggest_which_broker_id
        msgs: list[MessageExt] = []
        if status is PullStatus.FOUND and response.body:
            try:
                decoded = decode_records(response.body)
            except ProtocolError as exc:
                raise MQClientError(f"undecodable pull body from {addr}: {exc}") from exc
            tags = sub.tags_set
            min_text = str(rh.min_offset)
            max_text = str(rh.max_offset)
            for msg in decoded:
                if tags is not None and msg.properties.get(MessageConst.PROPERTY_TAGS) not in tags:
                    continue
                if msg.sys_flag & FLAG_COMPRESSED:
                    self._uncompress(msg)
                props = msg.properties
                props[_MIN_OFFSET] = min_text
                props[_MAX_OFFSET] = max_text
                msgs.append(msg)
        elif status is PullStatus.OFFSET_ILLEGAL:
            self._log.info(
                "pull offset illegal",
                mq=str(mq),
                offset=offset,
                next_begin_offset=rh.next_begin_offset,
                min_offset=rh.min_offset,
                max_offset=rh.max_offset,
            )
        return PullResult(status, rh.next_begin_offset, rh.min_offset, rh.max_offset, msgs)

    def _uncompress(self, msg: MessageExt) -> None:
        try:
            msg.body = zlib.decompress(msg.body)
        except zlib.error as exc:
            self._log.warning("cannot uncompress message body", error=str(exc))

    # ---- offsets ----------------------------------------------------------------

    async def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        """Store the group's next offset of ``mq`` on the queue's master broker.

        Raises MQClientError (no master, connection failure, negative offset) or
        MQBrokerError (the broker refused)."""
        if offset < 0:
            raise MQClientError(f"offset must be >= 0, got {offset}")
        instance = self._running_instance()
        addr, _ = await instance.require_broker_addr(mq.broker_name, mq.topic)
        header = UpdateConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id, offset)
        cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_fields())
        response = await self._invoke(
            addr, cmd, self.request_timeout, f"update consume offset of {mq}"
        )
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(
                response.code, response.remark, addr, context=f"update consume offset of {mq}"
            )

    async def fetch_consume_offset(self, mq: MessageQueue) -> int:
        """The group's stored offset of ``mq``, or -1 when the broker has none
        (QUERY_NOT_FOUND). Reads the master, or a slave when there is no master.
        Raises MQClientError / MQBrokerError."""
        instance = self._running_instance()
        addr, _ = await instance.require_broker_addr(mq.broker_name, mq.topic, master_only=False)
        header = QueryConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id)
        cmd = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header.to_fields())
        what = f"query consume offset of {mq}"
        response = await self._invoke(addr, cmd, self.request_timeout, what)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return self._offset_of(response, addr, what)

    async def max_offset(self, mq: MessageQueue) -> int:
        """The queue's max offset (the next offset to be written). Raises
        MQClientError / MQBrokerError."""
        return await self._queue_offset(mq, RequestCode.GET_MAX_OFFSET, "max")

    async def min_offset(self, mq: MessageQueue) -> int:
        """The queue's smallest offset still stored. Raises MQClientError / MQBrokerError."""
        return await self._queue_offset(mq, RequestCode.GET_MIN_OFFSET, "min")

    async def _queue_offset(self, mq: MessageQueue, code: RequestCode, which: str) -> int:
        instance = self._running_instance()
        addr, _ = await instance.require_broker_addr(mq.broker_name, mq.topic)
        header: GetMaxOffsetRequestHeader | GetMinOffsetRequestHeader
        if code == RequestCode.GET_MAX_OFFSET:
            header = GetMaxOffsetRequestHeader(mq.topic, mq.queue_id)
        else:
            header = GetMinOffsetRequestHeader(mq.topic, mq.queue_id)
        cmd = RemotingCommand.request(code, header.to_fields())
        what = f"get {which} offset of {mq}"
        response = await self._invoke(addr, cmd, self.request_timeout, what)
        return self._offset_of(response, addr, what)

    @staticmethod
    def _offset_of(response: RemotingCommand, addr: str, what: str) -> int:
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr, context=what)
        try:
            return OffsetResponseHeader.from_fields(response.ext_fields).offset
        except ProtocolError as exc:
            raise MQClientError(f"{what}: bad response from {addr}: {exc}") from exc
