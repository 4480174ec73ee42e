"""PushConsumer: the broker's messages delivered to a listener (RocketMQ's
DefaultMQPushConsumer).

    consumer = PushConsumer("group", namesrv_addr="127.0.0.1:9876")
    consumer.subscribe("TopicTest", "TagA || TagB")
    consumer.register_message_listener(listener)   # (msgs, context) -> status
    async with consumer: ...

Concurrently (default): a listener returns CONSUME_SUCCESS or
RECONSUME_LATER (None and an exception count as RECONSUME_LATER). Failed
messages go back to the broker (CONSUMER_SEND_MSG_BACK: ``%RETRY%<group>``
after the level's delay, ``%DLQ%<group>`` past ``max_reconsume_times``); one
that cannot be sent back is consumed again locally 5 s later. Broadcasting
consumers do not retry: a failed message is logged and skipped.

Orderly (``register_message_listener(listener, orderly=True)``): one batch
of a queue at a time, in offset order, while this client holds the broker's
lock on the queue (renewed every 20 s). SUSPEND_CURRENT_QUEUE_A_MOMENT puts
the batch back and retries it after ``suspend_current_queue_time_millis``;
past ``max_reconsume_times`` (unlimited by default) a message goes to the DLQ.

The committed offset of a queue is the lowest offset not yet consumed, so a
crash re-delivers, never skips. The listener may be a plain function (runs
on the event loop: keep it short) or a coroutine function.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable
from typing import Any

import trio

from client.config import ClientConfig, merge_config
from client.consumer_core import ConsumerCore, ConsumerState
from client.consumer_types import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageListener,
    MessageModel,
)
from client.credentials import AclCredentials
from client.errors import MQBrokerError, MQClientError
from client.hooks import ConsumeMessageContext
from client.metrics import EXCEPTION, ClientMetrics, status_name
from client.process_queue import PULL_MAX_IDLE_TIME, REBALANCE_LOCK_INTERVAL, ProcessQueue
from client.rebalance import AllocateStrategy
from client.running_info import PROP_THREADPOOL_CORE_SIZE
from client.subscription import MessageSelector
from protocol.message import MessageExt, MessageQueue
from protocol.namespace import wrap
from protocol.trio.service import Guard

# what a synchronous listener returns (a bad status is warned about after)
_STATUS_TYPES = frozenset({ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, type(None)})

SEND_BACK_FAILED_RETRY_DELAY = 5.0
_DEF = ConsumerCore.DEFAULTS


class PushConsumer(ConsumerCore):
    """A push consumer on trio. See the module docstring.

    Args (RocketMQ's names in snake_case):
        group: consumer group.
        namesrv_addr: name servers, ``;``-separated (default: the NAMESRV_ADDR
            environment variable, else 127.0.0.1:9876).
        message_model: CLUSTERING (default) or BROADCASTING.
        consume_from_where: where a group with no offset on the broker starts
            (last offset by default). As with RocketMQ, the broker answers 0
            for a queue whose first message is still in memory, so a new group
            reads such a queue from its start (docs/compatibility.md).
        consume_timestamp: for CONSUME_FROM_TIMESTAMP: ms, ``yyyyMMddHHmmss``
            or a datetime (default: half an hour ago).
        allocate_strategy: ``client.rebalance`` function (averagely by default).
        instance_name: client instance name (default: the process id).
        consume_thread_max: consume tasks (concurrently; 20).
        consume_message_batch_max_size: messages per listener call (1).
        pull_batch_size: messages per pull (32).
        pull_threshold_for_queue / pull_threshold_size_for_queue: flow control
            per queue, messages (1000) and MiB (100).
        max_reconsume_times: attempts before the DLQ; -1 = the group's
            setting on the broker (16) for concurrently, unlimited for orderly.
        suspend_current_queue_time_millis: orderly pause after a failure (1000).
        offset_store_dir: broadcasting offsets' directory (~/.rocketmq_offsets).
        pull_max_idle_s: a queue whose pull task has not run for this long
            (stuck) is dropped at the next rebalance, its offset persisted, and
            taken again with a new task (120; RocketMQ's pullMaxIdleTime).
        metrics: a ``client.metrics.ClientMetrics``: messages consumed by the
            listener's answer, listener latency, failures (None: no metrics, no cost).
        enable_msg_trace: record every listener call (SubBefore, SubAfter) in
            the trace topic (RocketMQ's enableMsgTrace; docs/trace.md).
        customized_trace_topic: the trace topic (default ``RMQ_SYS_TRACE_TOPIC``).
        config: a ``client.config.ClientConfig`` (name servers, credentials, TLS,
            request timeout, instance name); the matching keywords are merged
            into it (a contradiction is a TypeError).
    """

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
        consume_thread_max: int = 20,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        suspend_current_queue_time_millis: int = 1000,
        offset_store_dir: str | os.PathLike[str] | None = None,
        pull_max_idle_s: float = PULL_MAX_IDLE_TIME,
        request_timeout: float | None = None,
        poll_name_server_interval: float = _DEF["poll_name_server_interval"],
        heartbeat_broker_interval: float = _DEF["heartbeat_broker_interval"],
        rebalance_interval: float = _DEF["rebalance_interval"],
        persist_consumer_offset_interval: float = _DEF["persist_consumer_offset_interval"],
        metrics: ClientMetrics | None = None,
        credentials: AclCredentials | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        use_tls: bool = False,
        tls_ca_path: str | None = None,
        tls_cert_path: str | None = None,
        tls_key_path: str | None = None,
        enable_msg_trace: bool = False,
        customized_trace_topic: str | None = None,
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
            consume_concurrently_max_span=consume_concurrently_max_span,
            poll_name_server_interval=poll_name_server_interval,
            heartbeat_broker_interval=heartbeat_broker_interval,
            rebalance_interval=rebalance_interval,
            persist_consumer_offset_interval=persist_consumer_offset_interval,
            offset_store_dir=offset_store_dir, logger_name="client.push_consumer",
            metrics=metrics, pull_max_idle_s=pull_max_idle_s,
            enable_msg_trace=enable_msg_trace,
            customized_trace_topic=customized_trace_topic,
        )
        for name, value in (("consume_thread_max", consume_thread_max),
                            ("consume_message_batch_max_size", consume_message_batch_max_size)):
            if type(value) is not int or not 1 <= value <= 1024:
                raise MQClientError(f"{name} must be an integer within 1..1024, got {value!r}")
        if type(max_reconsume_times) is not int or max_reconsume_times < -1:
            raise MQClientError("max_reconsume_times must be -1 or a non-negative integer")
        if type(suspend_current_queue_time_millis) is not int or suspend_current_queue_time_millis < 0:
            raise MQClientError("suspend_current_queue_time_millis must be >= 0")
        self.consume_thread_max = consume_thread_max
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.max_reconsume_times = max_reconsume_times
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        self._listener: MessageListener | None = None
        self._listener_is_async = False
        self.orderly = False
        self._consume_tx: trio.MemorySendChannel[tuple[MessageQueue, ProcessQueue, list[MessageExt]]] | None = None
        self._consume_locks: dict[MessageQueue, trio.Lock] = {}
        # background tasks (lock renewal, orderly consume) survive their own bugs
        self._guard = Guard(self._log, "push consumer")

    # ---- configuration ---------------------------------------------------------------

    def subscribe(self, topic: str, sub_expression: str | MessageSelector | None = "*") -> None:
        """Subscribe to ``topic`` with ``"*"``, ``"tagA || tagB"`` or a
        MessageSelector (``MessageSelector.by_sql("a > 5")``). Raises
        MQClientError for a bad topic or expression. Call before ``start``
        (or later: the next rebalance picks it up); ``start`` raises
        MQBrokerError when a broker does not filter by an SQL92 subscription."""
        self._subscribe(topic, sub_expression)
        if self._instance is not None and self.running:
            self._instance.rebalance_immediately()

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(wrap(self.namespace, topic), None)
        if self._instance is not None and self.running:
            self._instance.rebalance_immediately()

    def register_message_listener(self, listener: MessageListener, *, orderly: bool = False) -> None:
        """``listener(msgs, context)`` returns ConsumeConcurrentlyStatus, or with
        ``orderly=True`` ConsumeOrderlyStatus; it may be ``async``."""
        if not callable(listener):
            raise MQClientError("the message listener must be callable")
        if self._state is not ConsumerState.CREATED:
            raise MQClientError("register the listener before start()")
        self._listener = listener
        call = type(listener).__call__ if not inspect.isroutine(listener) else listener
        self._listener_is_async = inspect.iscoroutinefunction(call)
        self.orderly = orderly

    # ---- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start consuming. Raises MQClientError without a listener or
        subscription, when already started, or for a bad name-server address."""
        self._check_start()
        if self._listener is None:
            raise MQClientError("register a message listener before start()")
        if not self.subscriptions:
            raise MQClientError("subscribe to at least one topic before start()")
        if self.message_model is MessageModel.CLUSTERING:
            self._subscribe(self.retry_topic, "*")
        # pulled batches wait here until the consume tasks start
        tx, rx = trio.open_memory_channel[tuple[MessageQueue, ProcessQueue, list[MessageExt]]](
            float("inf"))
        self._consume_tx = tx
        try:
            await self._start_trace()
            try:
                await self._start_core()
            except BaseException:
                await self._stop_trace()
                raise
            self._guard.log = self._log  # now bound with the client id
            assert self._service is not None
            if not self.orderly:
                for _ in range(self.consume_thread_max):
                    self._service.start_soon(self._consume_worker, rx.clone())
            elif self.message_model is MessageModel.CLUSTERING:
                self._service.start_soon(self._lock_loop)
        finally:
            rx.close()
        self._log.info("push consumer started", orderly=self.orderly,
                       model=self.message_model.value, topics=sorted(self.subscriptions))

    async def shutdown(self) -> None:
        """Stop pulling and consuming, persist offsets, leave the group.
        Idempotent; safe from a cancelled task."""
        if self._state is not ConsumerState.RUNNING:
            self._state = ConsumerState.SHUTDOWN
            return
        await self._shutdown_core()
        await self._stop_trace()
        self._log.info("push consumer shut down")

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    # ---- dispatch ------------------------------------------------------------------------

    def _on_pulled(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        dispatch = pq.put_messages(msgs)
        if self.orderly:
            if dispatch:
                assert self._service is not None
                self._service.start_soon(self._consume_orderly, mq, pq)
            return
        assert self._consume_tx is not None
        size = self.consume_message_batch_max_size
        if self._listener_is_async and len(msgs) > size:
            for i in range(0, len(msgs), size):
                self._consume_tx.send_nowait((mq, pq, msgs[i:i + size]))
        else:
            self._consume_tx.send_nowait((mq, pq, msgs))

    async def _call_listener(self, msgs: list[MessageExt], ctx: Any) -> Any:
        """The listener's answer (None when it raised), between the consume hooks
        when there are any."""
        assert self._listener is not None
        hooks = self._consume_hooks
        hook_ctx: ConsumeMessageContext | None = None
        if hooks.hooks:  # a list: the usual, empty case costs one truth test
            hook_ctx = ConsumeMessageContext(self.group, ctx.message_queue, msgs)
            hooks.before(hook_ctx)
        metrics = self._metrics
        start = trio.current_time()
        # the queue's topic (a retry queue's messages show their original topic)
        mq = getattr(ctx, "message_queue", None)
        topic = mq.topic if isinstance(mq, MessageQueue) else msgs[0].topic
        try:
            result = self._listener(msgs, ctx)
            # a plain status is the usual answer: no awaitable check (an ABC's) for it
            if self._listener_is_async or (type(result) not in _STATUS_TYPES
                                           and inspect.isawaitable(result)):
                assert isinstance(result, Awaitable)
                result = await result
        except Exception as exc:
            self._log.warning("message listener raised", error=repr(exc),
                              msg_ids=[m.msg_id for m in msgs[:8]])
            now = trio.current_time()
            self.stats.consumed(topic, now, now - start, 0, len(msgs))
            if metrics is not None:
                metrics.consume_done(self.group, msgs, EXCEPTION, now - start)
            if hook_ctx is not None:
                hook_ctx.finish(None, raised=True)
                hooks.after(hook_ctx)
            return None
        now = trio.current_time()
        ok = result in (ConsumeConcurrentlyStatus.CONSUME_SUCCESS, ConsumeOrderlyStatus.SUCCESS)
        self.stats.consumed(topic, now, now - start, len(msgs) if ok else 0, 0 if ok else len(msgs))
        if metrics is not None:
            metrics.consume_done(self.group, msgs, status_name(result), now - start)
        if hook_ctx is not None:
            hook_ctx.finish(result, raised=False)
            hooks.after(hook_ctx)
        return result

    def running_properties(self) -> dict[str, str]:
        return {
            **super().running_properties(),
            "consumeThreadMax": str(self.consume_thread_max),
            "consumeMessageBatchMaxSize": str(self.consume_message_batch_max_size),
            "maxReconsumeTimes": str(self.max_reconsume_times),
            "suspendCurrentQueueTimeMillis": str(self.suspend_current_queue_time_millis),
            PROP_THREADPOOL_CORE_SIZE: str(self.consume_thread_max),
        }

    # ---- concurrently ----------------------------------------------------------------------

    async def _consume_worker(
        self, rx: trio.MemoryReceiveChannel[tuple[MessageQueue, ProcessQueue, list[MessageExt]]]
    ) -> None:
        async with rx:
            async for mq, pq, msgs in rx:
                size = self.consume_message_batch_max_size
                try:
                    # only the retry queue's messages show another topic (or, with a
                    # namespace, every message: its topic without the namespace)
                    if mq.topic == self.retry_topic or self.namespace:
                        self._reset_retry_topic(msgs)
                    for i in range(0, len(msgs), size):
                        if pq.dropped:
                            break
                        await self._consume_concurrently(mq, pq, msgs[i:i + size])
                    pq.last_consume_time = trio.current_time()
                except Exception:
                    # a bug here must not stop the consumer; the messages stay
                    # uncommitted and come back after a restart or rebalance
                    self._log.exception("consume task failed", mq=str(mq))

    async def _consume_concurrently(
        self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]
    ) -> None:
        ctx = ConsumeConcurrentlyContext(self._user_queue(mq))  # as the user names it
        status = await self._call_listener(msgs, ctx)
        if not isinstance(status, ConsumeConcurrentlyStatus):
            if status is not None:
                self._log.warning("listener returned a bad status, reconsume later",
                                  status=repr(status))
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack = min(ctx.ack_index, len(msgs) - 1)
        else:
            ack = -1
        failed = msgs[ack + 1:]
        if not failed:
            self._commit_offset(mq, pq, pq.remove_messages(msgs))
            self._wake_puller(mq)
            return
        if self.message_model is MessageModel.BROADCASTING:
            for msg in failed:
                self._log.warning("broadcast message failed, dropped", msg_id=msg.msg_id,
                                  mq=str(mq))
            self._commit_offset(mq, pq, pq.remove_messages(msgs))
            self._wake_puller(mq)
            return
        local_retry: list[MessageExt] = []
        for msg in failed:
            if not await self._send_back(msg, mq, ctx.delay_level_when_next_consume):
                msg.reconsume_times += 1
                local_retry.append(msg)
        retry_ids = {id(m) for m in local_retry}
        done = [m for m in msgs if id(m) not in retry_ids]
        self._commit_offset(mq, pq, pq.remove_messages(done))
        self._wake_puller(mq)
        if local_retry and self._service is not None and self._state is ConsumerState.RUNNING:
            self._service.start_soon(self._consume_later, mq, pq, local_retry)

    async def _send_back(self, msg: MessageExt, mq: MessageQueue, delay_level: int) -> bool:
        assert self._api is not None
        max_times = None if self.max_reconsume_times < 0 else self.max_reconsume_times
        shown = msg.topic
        msg.topic = wrap(self.namespace, shown)  # the broker's name (a namespace's)
        try:
            with trio.fail_after(self.request_timeout + 1):
                await self._api.send_back(msg, mq.broker_name, delay_level, max_times)
            if MessageQueue(self.retry_topic, mq.broker_name, 0) not in self.process_queue_table:
                # the retry queue may be new on that broker: pick it up now
                assert self._instance is not None
                self._instance.rebalance_immediately()
            return True
        except (MQClientError, MQBrokerError, trio.TooSlowError) as exc:
            self._log.warning("send back failed, will consume again locally",
                              msg_id=msg.msg_id, mq=str(mq), error=str(exc))
            return False
        finally:
            msg.topic = shown

    async def _consume_later(
        self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]
    ) -> None:
        await trio.sleep(SEND_BACK_FAILED_RETRY_DELAY)
        if not pq.dropped and self._consume_tx is not None:
            try:
                self._consume_tx.send_nowait((mq, pq, msgs))
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass  # shutting down: the messages stay uncommitted and come back

    # ---- orderly ------------------------------------------------------------------------------

    def _consume_lock(self, mq: MessageQueue) -> trio.Lock:
        lock = self._consume_locks.get(mq)
        if lock is None:
            lock = self._consume_locks[mq] = trio.Lock()
        return lock

    async def _consume_orderly(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """The queue's orderly consume task. A bug in one round is logged and the
        round starts again after a back-off, with the messages it had taken."""
        while True:
            try:
                await self._consume_orderly_round(mq, pq)
                return
            except Exception as exc:
                self._guard.failed(exc, "orderly consume failed", mq=str(mq))
                if pq.consuming:
                    pq.make_message_to_consume_again(list(pq.consuming.values()))
                if pq.dropped or self._state is not ConsumerState.RUNNING:
                    pq.consuming_flag = False
                    return
                await self._guard.pause()

    async def _consume_orderly_round(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        clustering = self.message_model is MessageModel.CLUSTERING
        async with self._consume_lock(mq):
            while not pq.dropped and self._state is ConsumerState.RUNNING:
                if clustering and (not pq.locked or pq.lock_expired(trio.current_time())):
                    if not await self._lock_queues(mq.broker_name, mq.topic, [mq]):
                        await trio.sleep(0.5)
                        continue
                msgs = pq.take_messages(self.consume_message_batch_max_size)
                if not msgs:
                    return
                self._reset_retry_topic(msgs)
                ctx = ConsumeOrderlyContext(self._user_queue(mq))
                status = await self._call_listener(msgs, ctx)
                if not isinstance(status, ConsumeOrderlyStatus):
                    if status is not None:
                        self._log.warning("orderly listener returned a bad status, suspending",
                                          status=repr(status))
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                pq.last_consume_time = trio.current_time()
                if pq.dropped:
                    return
                if status is ConsumeOrderlyStatus.SUCCESS or await self._give_up(mq, msgs):
                    offset = pq.commit()
                    if offset >= 0 and self._offset_store is not None:
                        self._offset_store.update_offset(mq, offset)
                    self._wake_puller(mq)
                    await trio.lowlevel.checkpoint()
                    continue
                pq.make_message_to_consume_again(msgs)
                pause = ctx.suspend_current_queue_time_millis
                if pause < 0:
                    pause = self.suspend_current_queue_time_millis
                await trio.sleep(pause / 1000)
            pq.consuming_flag = False

    async def _give_up(self, mq: MessageQueue, msgs: list[MessageExt]) -> bool:
        """Orderly failure: True when every message has reached
        ``max_reconsume_times`` and was sent to the DLQ."""
        if self.max_reconsume_times < 0:
            return False
        if any(m.reconsume_times < self.max_reconsume_times for m in msgs):
            return False
        for msg in msgs:
            if not await self._send_back(msg, mq, -1):
                return False
        return True

    async def _lock_queues(self, broker_name: str, topic: str, mqs: list[MessageQueue]) -> bool:
        """Lock ``mqs`` (one broker) on the broker; marks their process queues.
        True when all are held."""
        assert self._api is not None
        try:
            held = await self._api.lock_batch(broker_name, topic, mqs)
        except (MQClientError, MQBrokerError) as exc:
            self._log.warning("lock queues failed", broker=broker_name, error=str(exc))
            return False
        now = trio.current_time()
        for mq in mqs:
            pq = self.process_queue_table.get(mq)
            if pq is None:
                continue
            pq.locked = mq in held
            if pq.locked:
                pq.last_lock_time = now
        return all(mq in held for mq in mqs)

    async def _lock_loop(self) -> None:
        while True:
            await trio.sleep(REBALANCE_LOCK_INTERVAL)
            await self._guard.run(self._lock_all)

    async def _lock_all(self) -> None:
        """Renew the locks of every queue this consumer holds (orderly, clustering)."""
        by_broker: dict[tuple[str, str], list[MessageQueue]] = {}
        for mq in list(self.process_queue_table):
            by_broker.setdefault((mq.broker_name, mq.topic), []).append(mq)
        for (broker, topic), mqs in sorted(by_broker.items()):
            await self._lock_queues(broker, topic, mqs)

    async def _prepare_queue(self, mq: MessageQueue) -> bool:
        if not self._needs_lock():
            return True
        assert self._api is not None
        try:
            held = await self._api.lock_batch(mq.broker_name, mq.topic, [mq])
        except (MQClientError, MQBrokerError) as exc:
            self._log.warning("lock queue failed", mq=str(mq), error=str(exc))
            return False
        if mq not in held:
            self._log.info("queue still locked by another consumer, will retry", mq=str(mq))
            return False
        return True

    def _needs_lock(self) -> bool:
        return self.orderly and self.message_model is MessageModel.CLUSTERING

    async def _release_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        if not self._needs_lock():
            return await super()._release_queue(mq, pq)
        with trio.move_on_after(1.0):
            async with self._consume_lock(mq):
                await super()._release_queue(mq, pq)
                assert self._api is not None
                try:
                    await self._api.unlock_batch(mq.broker_name, mq.topic, [mq])
                except (MQClientError, MQBrokerError) as exc:
                    self._log.warning("unlock queue failed", mq=str(mq), error=str(exc))
                self._consume_locks.pop(mq, None)
                return True
        self._log.info("queue busy, release it at the next rebalance", mq=str(mq))
        return False

    async def _before_leave(self) -> None:
        if not self._needs_lock():
            return
        assert self._api is not None
        by_broker: dict[tuple[str, str], list[MessageQueue]] = {}
        for mq in self.process_queue_table:
            by_broker.setdefault((mq.broker_name, mq.topic), []).append(mq)
        for (broker, topic), mqs in sorted(by_broker.items()):
            with trio.move_on_after(self.request_timeout):
                try:
                    await self._api.unlock_batch(broker, topic, mqs)
                except (MQClientError, MQBrokerError) as exc:
                    self._log.warning("unlock queues failed", broker=broker, error=str(exc))
