"""LitePullConsumer: ``poll()`` messages; the consumer pulls in the background
(RocketMQ's DefaultLitePullConsumer).

    async with LitePullConsumer("group", namesrv_addr="127.0.0.1:9876") as c:
        c.subscribe("TopicTest", "*")        # or c.assign([...queues...])
        msgs = await c.poll(timeout=1.0)

``subscribe`` lets the group rebalance queues among its members (as push
consumers do); ``assign`` takes the given queues and no part in rebalancing.
Background tasks pull each owned queue into a buffer (flow control per queue
and in all). ``poll`` returns one pulled batch (up to ``pull_batch_size``
messages) or ``[]`` after ``timeout``. With ``auto_commit`` (default), what
``poll`` returned counts as consumed and the offsets are written every
``auto_commit_interval`` s (5); otherwise ``commit_sync()`` commits what has
been polled so far. ``seek(mq, offset)`` moves a queue: buffered messages of
it are thrown away and pulling restarts at ``offset``.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from client.config import ClientConfig, merge_config
from client.consumer_core import ConsumerCore, ConsumerState
from client.consumer_types import ConsumeFromWhere, MessageModel
from client.credentials import AclCredentials
from client.errors import MQClientError
from client.metrics import POLLED, ClientMetrics
from client.offset_store import ReadOffsetType
from client.process_queue import ProcessQueue
from client.rebalance import AllocateStrategy
from client.subscription import MessageSelector
from protocol.message import MessageExt, MessageQueue
from protocol.namespace import wrap

_DEF = ConsumerCore.DEFAULTS
_Request = tuple[MessageQueue, ProcessQueue, list[MessageExt]]


class LitePullConsumer(ConsumerCore):
    """A lite pull consumer on trio. See the module docstring.

    Args: as PushConsumer's where they share a name, plus ``auto_commit``,
    ``auto_commit_interval`` (s) and ``pull_threshold_for_all`` (buffered
    messages in all queues, 10,000). ``metrics`` (a ``client.metrics.ClientMetrics``)
    counts the messages ``poll`` returns (status POLLED).
    """

    consume_type = "CONSUME_ACTIVELY"

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: Any = None,
        allocate_strategy: AllocateStrategy | None = None,
        instance_name: str | None = None,
        auto_commit: bool = True,
        auto_commit_interval: float = _DEF["persist_consumer_offset_interval"],
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        pull_threshold_for_all: int = 10_000,
        offset_store_dir: str | os.PathLike[str] | None = None,
        request_timeout: float | None = None,
        poll_name_server_interval: float = _DEF["poll_name_server_interval"],
        heartbeat_broker_interval: float = _DEF["heartbeat_broker_interval"],
        rebalance_interval: float = _DEF["rebalance_interval"],
        metrics: ClientMetrics | None = None,
        credentials: AclCredentials | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        use_tls: bool = False,
        tls_ca_path: str | None = None,
        tls_cert_path: str | None = None,
        tls_key_path: str | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        super().__init__(
            group, merge_config(
                config, namesrv_addr=namesrv_addr, credentials=credentials, access_key=access_key,
                secret_key=secret_key, use_tls=use_tls, tls_ca_path=tls_ca_path,
                tls_cert_path=tls_cert_path, tls_key_path=tls_key_path,
                request_timeout=request_timeout, instance_name=instance_name),
            message_model=message_model,
            consume_from_where=consume_from_where, consume_timestamp=consume_timestamp,
            allocate_strategy=allocate_strategy,
            pull_batch_size=pull_batch_size, pull_threshold_for_queue=pull_threshold_for_queue,
            pull_threshold_size_for_queue=pull_threshold_size_for_queue,
            consume_concurrently_max_span=2**31,
            poll_name_server_interval=poll_name_server_interval,
            heartbeat_broker_interval=heartbeat_broker_interval,
            rebalance_interval=rebalance_interval,
            persist_consumer_offset_interval=auto_commit_interval,
            offset_store_dir=offset_store_dir, logger_name="client.lite_pull_consumer",
            metrics=metrics,
        )
        if type(pull_threshold_for_all) is not int or pull_threshold_for_all < 1:
            raise MQClientError("pull_threshold_for_all must be a positive integer")
        self.auto_commit = bool(auto_commit)
        self.pull_threshold_for_all = pull_threshold_for_all
        self._assigned: list[MessageQueue] | None = None
        self._buffered = 0
        self._polled: dict[MessageQueue, int] = {}
        tx, rx = trio.open_memory_channel[_Request](float("inf"))
        self._tx: trio.MemorySendChannel[_Request] = tx
        self._rx: trio.MemoryReceiveChannel[_Request] = rx

    # ---- subscribe / assign ---------------------------------------------------------

    def subscribe(self, topic: str, sub_expression: str | MessageSelector | None = "*") -> None:
        """Consume ``topic`` with queues rebalanced among the group, selecting
        by a tag expression or a MessageSelector. Raises MQClientError after
        ``assign`` or for a bad topic/expression; ``start`` raises MQBrokerError
        when a broker does not filter by an SQL92 subscription."""
        if self._assigned is not None:
            raise MQClientError("subscribe and assign cannot be mixed")
        self._subscribe(topic, sub_expression)
        if self._instance is not None and self.running:
            self._instance.rebalance_immediately()

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(wrap(self.namespace, topic), None)
        if self._instance is not None and self.running:
            self._instance.rebalance_immediately()

    async def assign(self, mqs: list[MessageQueue],
                     sub_expression: str | MessageSelector | None = "*") -> None:
        """Consume exactly ``mqs`` (no rebalancing). Queues no longer listed are
        dropped (offsets persisted). Raises MQClientError after ``subscribe``."""
        self.set_assignment(mqs, sub_expression)
        if self.running:
            await self.do_rebalance()

    def set_assignment(self, mqs: list[MessageQueue],
                       sub_expression: str | MessageSelector | None = "*") -> None:
        """``assign`` without taking effect until the next rebalance (or start)."""
        if self.subscriptions and self._assigned is None:
            raise MQClientError("subscribe and assign cannot be mixed")
        if not all(isinstance(mq, MessageQueue) for mq in mqs):
            raise MQClientError("assign takes a list of MessageQueue")
        self._assigned = sorted({self._wire(mq) for mq in mqs})
        self.subscriptions.clear()
        for topic in sorted({mq.topic for mq in self._assigned}):
            self._subscribe(topic, sub_expression)

    async def _rebalance_topic(self, topic: str) -> None:
        if self._assigned is None:
            await super()._rebalance_topic(topic)
            return
        await self._update_process_queue_table(
            topic, {mq for mq in self._assigned if mq.topic == topic})

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start pulling. Raises MQClientError when already started or the
        name-server address is invalid."""
        self._check_start()
        await self._start_core()
        self._log.info("lite pull consumer started", topics=sorted(self.subscriptions),
                       assigned=self._assigned is not None)

    async def shutdown(self) -> None:
        """Stop pulling, commit (auto commit) and leave the group. Idempotent."""
        if self._state is not ConsumerState.RUNNING:
            self._state = ConsumerState.SHUTDOWN
            return
        if not self.auto_commit:
            # only what was committed explicitly counts
            self._polled.clear()
        await self._shutdown_core()
        self._log.info("lite pull consumer shut down")

    async def __aenter__(self) -> LitePullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    # ---- buffer ------------------------------------------------------------------------------

    def _flow_controlled(self, pq: ProcessQueue) -> str | None:
        if self._buffered > self.pull_threshold_for_all:
            return "all"
        return super()._flow_controlled(pq)

    def _advance_when_idle(self) -> bool:
        return self.auto_commit

    def _on_pulled(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        pq.put_messages(msgs)
        self._buffered += len(msgs)
        self._tx.send_nowait((mq, pq, msgs))

    async def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """The next pulled batch, or ``[]`` when nothing came within ``timeout`` s."""
        self._running_instance()
        if not timeout >= 0:
            raise MQClientError("timeout must be >= 0")
        with trio.move_on_after(timeout):
            while True:
                mq, pq, msgs = await self._rx.receive()
                self._buffered -= len(msgs)
                if pq.dropped:
                    continue  # seeked or rebalanced away
                offset = pq.remove_messages(msgs)
                self._wake_puller(mq)
                if self.auto_commit:
                    self._commit_offset(mq, pq, offset)
                else:
                    self._polled[mq] = offset
                self._reset_retry_topic(msgs)
                if self._metrics is not None:
                    self._metrics.consume_done(self.group, msgs, POLLED, None)
                return msgs
        return []

    # ---- offsets ----------------------------------------------------------------------------

    async def commit_sync(self) -> None:
        """Commit the offsets of everything polled so far, now, to the broker
        (clustering) or the local file (broadcasting)."""
        self._running_instance()
        assert self._offset_store is not None
        for mq, offset in list(self._polled.items()):
            pq = self.process_queue_table.get(mq)
            if pq is not None and not pq.dropped:
                self._offset_store.update_offset(mq, offset)
        self._polled.clear()
        await self._offset_store.persist_all(set(self.process_queue_table))

    async def committed(self, mq: MessageQueue) -> int:
        """The offset committed for ``mq`` in the store (-1 when none). As
        RocketMQ's, a broker answers 0 for a clustering group with none while
        the queue's first message is still in memory."""
        self._running_instance()
        assert self._offset_store is not None
        return await self._offset_store.read_offset(self._wire(mq),
                                                    ReadOffsetType.READ_FROM_STORE)

    async def persist_consumer_offset(self) -> None:
        if self.auto_commit:
            await super().persist_consumer_offset()

    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """As ConsumerCore's; what was polled but not committed of those queues is
        forgotten (commit_sync must not write the old offsets back)."""
        await super().reset_offset(topic, offsets)
        for mq in offsets:  # polled from the old queues (poll skips them once dropped)
            if mq.topic == topic:
                self._polled.pop(mq, None)

    def running_properties(self) -> dict[str, str]:
        return {**super().running_properties(), "autoCommit": str(self.auto_commit).lower(),
                "pullThresholdForAll": str(self.pull_threshold_for_all)}

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Consume ``mq`` from ``offset`` on: buffered messages of it are dropped.
        Raises MQClientError when ``mq`` is not owned now or ``offset`` is
        outside [min offset, max offset]."""
        self._running_instance()
        assert self._api is not None and self._offset_store is not None
        mq = self._wire(mq)
        pq = self.process_queue_table.get(mq)
        if pq is None or pq.dropped:
            raise MQClientError(f"{mq} is not assigned to this consumer now")
        lo, hi = await self._api.min_offset(mq), await self._api.max_offset(mq)
        if not lo <= offset <= hi:
            raise MQClientError(f"seek offset {offset} of {mq} is outside [{lo}, {hi}]")
        async with self._rebalance_lock:
            pq.dropped = True
            await self._stop_pull(mq)
            pq.clear()
            self.process_queue_table.pop(mq, None)
            self._polled.pop(mq, None)
            self._offset_store.update_offset(mq, offset)
            await self._add_queue(mq, offset)
        self._log.info("seek", mq=str(mq), offset=offset)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        assert self._api is not None
        await self.seek(mq, await self._api.min_offset(self._wire(mq)))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        assert self._api is not None
        await self.seek(mq, await self._api.max_offset(self._wire(mq)))

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` (from the name servers now)."""
        queues = await self._running_instance().fetch_subscribe_queues(
            wrap(self.namespace, topic))
        return [self._user_queue(q) for q in queues]
