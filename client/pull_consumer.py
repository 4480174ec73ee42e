"""PullConsumer: the caller chooses queues and offsets (RocketMQ's DefaultMQPullConsumer).

``pull`` asks the broker for messages at an offset and answers at once
(``suspendTimeoutMillis=0``, no long polling). The broker filters by tag hash;
the client drops messages whose tag string is not subscribed (hash
collisions), as RocketMQ's PullAPIWrapper does. Offsets are the caller's to
keep; ``update_consume_offset`` / ``fetch_consume_offset`` store them on the
broker for the group.

A queue is read from the broker the previous pull of it suggested (a master
sends cold reads to its slave), else its master, else a slave: while a master
is down its queues are read from the slave, and offsets and queue offsets go
to the slave too (``client.consumer_api``).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import structlog
import trio

from client.config import ClientConfig, merge_config
from client.consumer_api import ConsumerAPI
from client.credentials import AclCredentials
from client.errors import MQClientError
from client.instance import (
    DEFAULT_POLL_NAME_SERVER_INTERVAL,
    DEFAULT_REQUEST_TIMEOUT,
    MQClientInstance,
    client_namesrv_addr,
)
from client.instance_user import InstanceUser, LifecycleState
from client.pull_result import PullResult
from client.range_reader import (
    DEFAULT_IN_FLIGHT,
    OffsetMoved,
    RangeChunk,
    read_range,
    skip_to_min,
)
from client.subscription import MessageSelector, SubscriptionData, subscription_of
from client.validators import check_group
from protocol.message import MessageQueue
from protocol.namespace import unwrap, wrap
from protocol.route import MASTER_ID
from protocol.trio.tls import ClientTls

log = structlog.get_logger("client.pull_consumer")


class ReadSetup(NamedTuple):
    """``PullConsumer.read_setup``: where and how to pull one queue."""

    addr: str
    sub: SubscriptionData
    timeout: float  # a pull's
    connect_timeout: float
    tls: ClientTls | None
    credentials: AclCredentials | None

DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"


class PullConsumer(InstanceUser):
    """A pull consumer on trio.

    Use ``async with PullConsumer("group", "ns1:9876") as c:`` or
    ``await start()`` / ``await shutdown()``.

    Args:
        group: consumer group name (``^[%|a-zA-Z0-9_-]+$``).
        namesrv_addr: name servers, ``;``-separated (default: the NAMESRV_ADDR
            environment variable, else 127.0.0.1:9876).
        pull_timeout: default seconds for one pull.
        request_timeout: seconds for offset and route requests.
        poll_name_server_interval: seconds between route refreshes.
        instance_name: the client instance to share (default: the process id);
            another name makes another client, with connections of its own.
        config: a ``client.config.ClientConfig`` (name servers, credentials, TLS,
            request timeout, instance name); the matching keywords are merged
            into it (a contradiction is a TypeError).

    Raises MQClientError for an invalid group name or setting.
    """

    KIND = "pull consumer"

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        pull_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        request_timeout: float | None = None,
        poll_name_server_interval: float = DEFAULT_POLL_NAME_SERVER_INTERVAL,
        credentials: AclCredentials | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        use_tls: bool = False,
        tls_ca_path: str | None = None,
        tls_cert_path: str | None = None,
        tls_key_path: str | None = None,
        instance_name: str | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        check_group(group, DEFAULT_CONSUMER_GROUP)
        self.config = merge_config(
            config, namesrv_addr=namesrv_addr, credentials=credentials, access_key=access_key,
            secret_key=secret_key, use_tls=use_tls, tls_ca_path=tls_ca_path,
            tls_cert_path=tls_cert_path, tls_key_path=tls_key_path,
            request_timeout=request_timeout, instance_name=instance_name)
        self.credentials = self.config.credentials
        self.tls = self.config.client_tls()
        if pull_timeout <= 0:
            raise MQClientError("timeouts must be positive")
        # ClientConfig.namespace: the group and queues on the wire are the namespaced
        # names; queues answered and pulled messages are named without it
        self.namespace = self.config.namespace or ""
        self.group = wrap(self.namespace, group)
        self.namesrv_addr = client_namesrv_addr(self.config.namesrv_addr)
        self.pull_timeout = pull_timeout
        self.request_timeout = self.config.timeout_or(DEFAULT_REQUEST_TIMEOUT)
        self.poll_name_server_interval = poll_name_server_interval
        self.instance_name = self.config.instance_name
        super().__init__()
        self._api: ConsumerAPI | None = None
        self._log = log.bind(group=group, namesrv=self.namesrv_addr)

    # ---- lifecycle (start, shutdown, async with: InstanceUser) --------------------

    def _on_started(self, instance: MQClientInstance) -> None:
        self._api = ConsumerAPI(instance, self.group)

    def _running_api(self) -> ConsumerAPI:
        if self._state is not LifecycleState.RUNNING or self._api is None:
            raise MQClientError(f"the consumer is not running ({self._state.value})")
        return self._api

    # ---- queues -----------------------------------------------------------------

    async def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic``, sorted, fetched from the name servers now.

        Raises MQClientError when the topic does not exist or has no readable queue.
        """
        queues = await self._running_instance().fetch_subscribe_queues(
            wrap(self.namespace, topic))
        if not self.namespace:
            return queues
        return [dataclasses.replace(q, topic=unwrap(self.namespace, q.topic)) for q in queues]

    def _wire(self, mq: MessageQueue) -> MessageQueue:
        """A queue the user named as the broker knows it (its topic namespaced)."""
        if not self.namespace:
            return mq
        return dataclasses.replace(mq, topic=wrap(self.namespace, mq.topic))

    # ---- pull -------------------------------------------------------------------

    async def pull(
        self,
        mq: MessageQueue,
        sub_expression: str | MessageSelector | None,
        offset: int,
        max_nums: int,
        timeout: float | None = None,
    ) -> PullResult:
        """Pull up to ``max_nums`` messages of ``mq`` from ``offset``.

        ``sub_expression``: ``"*"``/``""``/None for all, ``"tagA || tagB"``, or
        a MessageSelector (``MessageSelector.by_sql(...)``: the broker filters
        by message properties; it answers SYSTEM_ERROR without
        ``enablePropertyFilter``).

        Raises:
            MQClientError: bad arguments or expression, consumer not running,
                unknown broker, connection failure or timeout, undecodable body.
            MQBrokerError: a response code other than the four pull outcomes
                (e.g. TOPIC_NOT_EXIST, NO_PERMISSION, SUBSCRIPTION_PARSE_FAILED).
        """
        api = self._running_api()
        if offset < 0:
            raise MQClientError(f"offset must be >= 0, got {offset}")
        if max_nums <= 0:
            raise MQClientError(f"max_nums must be > 0, got {max_nums}")
        mq = self._wire(mq)
        sub, timeout = self._pull_args(mq, sub_expression, timeout)
        result = await api.pull(mq, sub, offset, max_nums, timeout=timeout)
        if self.namespace:
            for msg in result.msg_found_list:
                msg.topic = unwrap(self.namespace, msg.topic)
        return result

    def _pull_args(self, mq: MessageQueue, sub_expression: str | MessageSelector | None,
                   timeout: float | None) -> tuple[SubscriptionData, float]:
        """The parsed expression and the pull timeout. Raises MQClientError."""
        if timeout is not None and not timeout > 0:
            raise MQClientError(f"timeout must be positive, got {timeout}")
        try:
            sub = subscription_of(mq.topic, sub_expression)
        except ValueError as exc:
            raise MQClientError(str(exc)) from exc
        return sub, self.pull_timeout if timeout is None else timeout

    async def read_range(
        self,
        mq: MessageQueue,
        sub_expression: str | MessageSelector | None,
        start: int,
        end: int,
        send: trio.MemorySendChannel[RangeChunk],
        *,
        batch_size: int = 32,
        in_flight: int = DEFAULT_IN_FLIGHT,
        timeout: float | None = None,
        on_offset_moved: OffsetMoved = skip_to_min,
    ) -> int:
        """Read offsets ``[start, end)`` of ``mq`` with ``in_flight`` pulls of up
        to ``batch_size`` at once, sending undecoded ``RangeChunk``s to ``send``
        in offset order (``client.range_reader``). Returns the offset reading
        stopped at: ``end``, or less when the queue ended first.

        Raises MQClientError on bad arguments and whatever a pull raises
        (MQClientError / MQBrokerError, or ``on_offset_moved``'s error)."""
        api = self._running_api()
        if start < 0 or end < start:
            raise MQClientError(f"bad range [{start}, {end})")
        if batch_size <= 0 or in_flight <= 0:
            raise MQClientError("batch_size and in_flight must be positive")
        mq = self._wire(mq)  # (its chunks' records keep the namespaced topic)
        sub, timeout = self._pull_args(mq, sub_expression, timeout)
        return await read_range(
            api, mq, sub, start, end, send, timeout=timeout,
            batch_size=batch_size, in_flight=in_flight, on_offset_moved=on_offset_moved,
        )

    async def read_setup(self, mq: MessageQueue, sub_expression: str | MessageSelector | None,
                         timeout: float | None = None) -> ReadSetup:
        """What a reader with a connection of its own needs to pull ``mq``
        (``client.direct_range``): the broker's address (the master, else a
        slave, fetching the route if needed), the parsed expression, the pull
        timeout, and the client's TLS settings and credentials. Raises MQClientError."""
        api = self._running_api()
        mq = self._wire(mq)
        sub, timeout = self._pull_args(mq, sub_expression, timeout)
        addr, _ = await api.instance.require_broker_addr(
            mq.broker_name, mq.topic, master_only=False,
            broker_id=api.pull_from.get(mq, MASTER_ID))
        return ReadSetup(addr, sub, timeout, self.request_timeout, api.instance.tls,
                         api.instance.credentials)

    # ---- offsets ----------------------------------------------------------------

    async def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        """Store the group's next offset of ``mq`` on the queue's master broker,
        or on a slave while the master is not in the routes.

        Raises MQClientError (broker unknown, connection failure, negative
        offset) or MQBrokerError (the broker refused)."""
        await self._running_api().update_consume_offset(self._wire(mq), offset,
                                                        self.request_timeout)

    async def fetch_consume_offset(self, mq: MessageQueue) -> int:
        """The group's offset of ``mq`` as the broker answers it: the stored
        one, 0 for a group with none while the queue's first message is still
        in memory (RocketMQ's rule), or -1 (QUERY_NOT_FOUND). Reads the master,
        or a slave when there is no master. Raises MQClientError / MQBrokerError."""
        return await self._running_api().fetch_consume_offset(self._wire(mq))

    async def max_offset(self, mq: MessageQueue) -> int:
        """The queue's max offset (the next offset to be written), from the
        master, else a slave. Raises MQClientError / MQBrokerError."""
        return await self._running_api().max_offset(self._wire(mq))

    async def min_offset(self, mq: MessageQueue) -> int:
        """The queue's smallest offset still stored. Raises MQClientError / MQBrokerError."""
        return await self._running_api().min_offset(self._wire(mq))

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of ``mq`` stored at or after ``timestamp_ms``. Raises
        MQClientError / MQBrokerError."""
        return await self._running_api().search_offset(self._wire(mq), timestamp_ms)
