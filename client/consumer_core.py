"""ConsumerCore: what push and lite-pull consumers share (RocketMQ's
RebalanceImpl plus the pull half of DefaultMQPushConsumerImpl).

- Subscriptions (topic -> expression) and the process-queue table: one
  ProcessQueue and one pull task per queue the consumer owns.
- Rebalance: clustering consumers split each topic's queues among the
  group's members with an allocation strategy (``client.rebalance``);
  broadcasting consumers take every queue. A queue dropped from this member
  stops being pulled, its offset is persisted and forgotten (orderly: after
  the running batch finishes, then the broker lock is released); a new queue
  starts from the offset the broker answers or, when it has none
  (QUERY_NOT_FOUND), from ``consume_from_where``. A broker answers 0 for a
  group with no stored offset while the queue's first message is still in
  memory (RocketMQ 4.x's rule, broker/new_group_offset.py), so a new group of
  a young topic reads it from the start, whatever ``consume_from_where``.
- Pull tasks: long polling (the broker holds an empty pull up to 15 s), the
  group's offset piggybacked on each pull, flow control (pause a queue above
  ``pull_threshold_for_queue`` cached messages, ``pull_threshold_size_for_queue``
  MiB or a span of ``consume_concurrently_max_span`` offsets), 3 s back-off
  after an error.
- Stuck pulls (push consumers, RocketMQ's CONSUME_PASSIVELY): a queue whose
  pull task has not gone round its loop for ``pull_max_idle_s`` (120 s) is
  dropped at the next rebalance (its task cancelled and awaited, its offset
  persisted, its process queue forgotten) and taken again at once from the
  persisted offset, with a new task (RocketMQ's isPullExpired in
  updateProcessQueueTableInRebalance). Lite pull consumers
  (CONSUME_ACTIVELY) are left alone, as in RocketMQ.

Every pull task runs in its own cancel scope: dropping a queue (rebalance,
expiry, seek) cancels it and waits for it to end, so no task outlives the
queue it pulled.

Subclasses say what happens to pulled messages (``_on_pulled``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from abc import abstractmethod
from collections.abc import Sequence
from enum import Enum
from typing import Any

import structlog
import trio

from client.config import ClientConfig
from client.consume_stats import ConsumeStats
from client.consumer_api import PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUSPEND, ConsumerAPI
from client.consumer_types import ConsumeFromWhere, MessageModel, parse_consume_timestamp
from client.errors import MQBrokerError, MQClientError
from client.hooks import ConsumeMessageHook, consume_hooks
from client.instance import (
    DEFAULT_HEARTBEAT_BROKER_INTERVAL,
    DEFAULT_PERSIST_CONSUMER_OFFSET_INTERVAL,
    DEFAULT_POLL_NAME_SERVER_INTERVAL,
    DEFAULT_REBALANCE_INTERVAL,
    DEFAULT_REQUEST_TIMEOUT,
    MQClientInstance,
    client_namesrv_addr,
)
from client.metrics import ClientMetrics
from client.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from client.process_queue import PULL_MAX_IDLE_TIME, ProcessQueue
from client.pull_result import PullStatus
from client.rebalance import AllocateStrategy, allocate_averagely
from client.running_info import (
    PROP_CLIENT_VERSION,
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    PROP_NAMESERVER_ADDR,
    client_version,
    mq_entry,
    process_queue_info,
    stacks,
)
from client.service import ServiceNursery
from client.subscription import MessageSelector, SubscriptionData, subscription_of
from client.trace import CONSUME, AsyncTraceDispatcher, ConsumeMessageTraceHook, check_trace_topic
from client.validators import check_group
from protocol.message import MessageExt, MessageQueue
from protocol.names import RETRY_GROUP_TOPIC_PREFIX
from protocol.namespace import unwrap, wrap

BROKER_SUSPEND_MAX_TIME_MILLIS = 15_000
CONSUMER_TIMEOUT_WHEN_SUSPEND = 30.0
PULL_TIME_DELAY_WHEN_EXCEPTION = 3.0
PULL_TIME_DELAY_WHEN_FLOW_CONTROL = 0.05
# s a dropped queue's cancelled pull task is waited for (it ends at its next checkpoint)
PULL_TASK_STOP_WAIT = 1.0
MiB = 1024 * 1024


class ConsumerState(Enum):
    CREATED = "created"
    RUNNING = "running"
    STOPPING = "stopping"
    SHUTDOWN = "shutdown"


class _PullTask:
    """One queue's pull task: the cancel scope it runs in, set when it has ended."""

    __slots__ = ("scope", "done")

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.done = trio.Event()


class ConsumerCore:
    consume_type = "CONSUME_PASSIVELY"
    orderly = False

    def __init__(
        self,
        group: str,
        config: ClientConfig,
        *,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        consume_timestamp: Any,
        allocate_strategy: AllocateStrategy | None,
        pull_batch_size: int,
        pull_threshold_for_queue: int,
        pull_threshold_size_for_queue: int,
        consume_concurrently_max_span: int,
        poll_name_server_interval: float,
        heartbeat_broker_interval: float,
        rebalance_interval: float,
        persist_consumer_offset_interval: float,
        offset_store_dir: str | os.PathLike[str] | None,
        logger_name: str,
        metrics: ClientMetrics | None = None,
        pull_max_idle_s: float = PULL_MAX_IDLE_TIME,
        enable_msg_trace: bool = False,
        customized_trace_topic: str | None = None,
    ) -> None:
        check_group(group, "DEFAULT_CONSUMER")
        self.enable_msg_trace = bool(enable_msg_trace)
        self.customized_trace_topic = check_trace_topic(customized_trace_topic)
        # name servers, credentials, TLS, request timeout, instance name (client/config.py)
        self.config = config
        self.credentials = config.credentials
        self.tls = config.client_tls()
        request_timeout = config.timeout_or(DEFAULT_REQUEST_TIMEOUT)
        if not isinstance(message_model, MessageModel):
            raise MQClientError("message_model must be a MessageModel")
        if not isinstance(consume_from_where, ConsumeFromWhere):
            raise MQClientError("consume_from_where must be a ConsumeFromWhere")
        for name, value in (("pull_batch_size", pull_batch_size),
                            ("pull_threshold_for_queue", pull_threshold_for_queue),
                            ("pull_threshold_size_for_queue", pull_threshold_size_for_queue),
                            ("consume_concurrently_max_span", consume_concurrently_max_span)):
            if type(value) is not int or value < 1:
                raise MQClientError(f"{name} must be a positive integer, got {value!r}")
        if pull_batch_size > 1024:
            raise MQClientError("pull_batch_size must be at most 1024")
        if (isinstance(pull_max_idle_s, bool) or not isinstance(pull_max_idle_s, int | float)
                or not 0 < pull_max_idle_s < float("inf")):
            raise MQClientError(f"pull_max_idle_s must be a positive number of seconds, "
                                f"got {pull_max_idle_s!r}")
        # ClientConfig.namespace: the group and topics on the wire are the namespaced
        # names; the messages a user sees are named without it (_reset_retry_topic)
        self.namespace = config.namespace or ""
        self.group = wrap(self.namespace, group)
        self.namesrv_addr = client_namesrv_addr(config.namesrv_addr)
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = parse_consume_timestamp(consume_timestamp)
        self.allocate_strategy: AllocateStrategy = allocate_strategy or allocate_averagely
        self.instance_name = config.instance_name
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.request_timeout = request_timeout
        self.poll_name_server_interval = poll_name_server_interval
        self.heartbeat_broker_interval = heartbeat_broker_interval
        self.rebalance_interval = rebalance_interval
        self.persist_consumer_offset_interval = persist_consumer_offset_interval
        self.offset_store_dir = offset_store_dir
        self.pull_max_idle_s = float(pull_max_idle_s)
        self._metrics = metrics
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, _PullTask] = {}
        self._state = ConsumerState.CREATED
        self._instance: MQClientInstance | None = None
        self._api: ConsumerAPI | None = None
        self._offset_store: OffsetStore | None = None
        self._service: ServiceNursery | None = None
        self._space: dict[MessageQueue, trio.Event] = {}
        self._rebalance_lock = trio.Lock()
        self._log = structlog.get_logger(logger_name).bind(group=group,
                                                           namesrv=self.namesrv_addr)
        self._consume_hooks = consume_hooks(self._log)
        self.trace_dispatcher: AsyncTraceDispatcher | None = None
        # pull and consume figures by topic (mqadmin consumerStatus)
        self.stats = ConsumeStats()
        self.start_timestamp_ms = 0

    # ---- defaults shared by subclasses' signatures --------------------------------

    DEFAULTS: dict[str, Any] = {
        "poll_name_server_interval": DEFAULT_POLL_NAME_SERVER_INTERVAL,
        "heartbeat_broker_interval": DEFAULT_HEARTBEAT_BROKER_INTERVAL,
        "rebalance_interval": DEFAULT_REBALANCE_INTERVAL,
        "persist_consumer_offset_interval": DEFAULT_PERSIST_CONSUMER_OFFSET_INTERVAL,
    }

    # ---- hooks and trace ----------------------------------------------------------

    def register_consume_message_hook(self, hook: ConsumeMessageHook) -> None:
        """Call ``hook`` around every listener call (client/hooks.py). Raises
        MQClientError for an object without the hook's methods."""
        self._consume_hooks.register(hook)

    async def _start_trace(self) -> None:
        """With ``enable_msg_trace``: the trace dispatcher and its hook."""
        if not self.enable_msg_trace:
            return
        dispatcher = AsyncTraceDispatcher(
            self.group, CONSUME, self.namesrv_addr, self.customized_trace_topic,
            credentials=self.credentials, tls=self.tls)
        await dispatcher.start()
        self.trace_dispatcher = dispatcher
        self._consume_hooks.register(ConsumeMessageTraceHook(dispatcher))

    async def _stop_trace(self) -> None:
        """Once nothing consumes any more: what the dispatcher holds is sent."""
        if self.trace_dispatcher is not None:
            await self.trace_dispatcher.shutdown()

    # ---- subscriptions ----------------------------------------------------------

    def _subscribe(self, topic: str, selector: str | MessageSelector | None) -> None:
        """Subscribe ``topic`` with a tag expression or a MessageSelector; the
        subscription's version is the time it was made, as RocketMQ's (a
        broker keeps the newest a group's heart-beats carry)."""
        if not isinstance(topic, str) or not topic:
            raise MQClientError("topic must be a non-empty string")
        try:
            sub = subscription_of(topic, selector)
        except ValueError as exc:
            shown = selector.expression if isinstance(selector, MessageSelector) else selector
            raise MQClientError(f"bad subscription expression {shown!r}: {exc}") from exc
        if self.namespace:
            topic = wrap(self.namespace, topic)
            sub = dataclasses.replace(sub, topic=topic)
        self.subscriptions[topic] = dataclasses.replace(sub, sub_version=int(time.time() * 1000))

    @property
    def retry_topic(self) -> str:
        return RETRY_GROUP_TOPIC_PREFIX + self.group

    def subscribed_topics(self) -> set[str]:
        return set(self.subscriptions)

    def consumer_data(self) -> dict[str, Any]:
        return {
            "groupName": self.group,
            "consumeType": self.consume_type,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "unitMode": False,
            "subscriptionDataSet": [
                {
                    "topic": s.topic,
                    "subString": s.sub_string,
                    "tagsSet": sorted(s.tags_set or ()),
                    "codeSet": sorted(s.code_set or ()),
                    "expressionType": s.expression_type,
                    "subVersion": s.sub_version,
                }
                for s in self.subscriptions.values()
            ],
        }

    # ---- lifecycle --------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._state is ConsumerState.RUNNING

    @property
    def client_id(self) -> str:
        return self._running_instance().client_id

    def _running_instance(self) -> MQClientInstance:
        if self._instance is None or self._state is not ConsumerState.RUNNING:
            raise MQClientError(f"the consumer is not running ({self._state.value})")
        return self._instance

    def _check_start(self) -> None:
        if self._state is not ConsumerState.CREATED:
            raise MQClientError(f"the consumer is {self._state.value}; it can be started once")

    async def _start_core(self) -> None:
        self._instance = await MQClientInstance.acquire(
            self.namesrv_addr,
            request_timeout=self.request_timeout,
            poll_name_server_interval=self.poll_name_server_interval,
            instance_name=self.instance_name,
            heartbeat_broker_interval=self.heartbeat_broker_interval,
            rebalance_interval=self.rebalance_interval,
            persist_consumer_offset_interval=self.persist_consumer_offset_interval,
            credentials=self.credentials,
            tls=self.tls,
        )
        instance = self._instance
        self._log = self._log.bind(client_id=instance.client_id)
        try:
            self._api = ConsumerAPI(instance, self.group)
            if self.message_model is MessageModel.BROADCASTING:
                path = LocalFileOffsetStore.default_path(
                    self.offset_store_dir, instance.client_id, self.group)
                self._offset_store = LocalFileOffsetStore(self.group, path)
            else:
                self._offset_store = RemoteBrokerOffsetStore(self._api, self.request_timeout)
            await self._offset_store.load()
            self._service = ServiceNursery(f"consumer[{self.group}]")
            await self._service.start()
            instance.register_consumer(self)
        except BaseException:
            with trio.CancelScope(shield=True):
                if self._service is not None:
                    await self._service.stop()
                await instance.release()
            self._state = ConsumerState.SHUTDOWN
            raise
        self._state = ConsumerState.RUNNING
        self.start_timestamp_ms = int(time.time() * 1000)
        for topic in sorted(self.subscriptions):
            try:
                await instance.update_topic_route(topic)
            except (MQClientError, MQBrokerError) as exc:
                self._log.warning("no route for subscribed topic yet", topic=topic, error=str(exc))
        try:
            await self._check_client_in_broker()
        except BaseException:
            await self._shutdown_core()
            raise
        await instance.send_heartbeat_to_all_brokers()
        await self.do_rebalance()

    async def _check_client_in_broker(self) -> None:
        """Before the first heart-beat, ask a broker of each topic with a
        subscription other than tags whether it filters by it (RocketMQ's
        checkClientInBroker): a broker without ``enablePropertyFilter``, or an
        expression it refuses, stops ``start`` with MQBrokerError."""
        assert self._api is not None
        instance = self._running_instance()
        for sub in self.subscriptions.values():
            if sub.sql is None:
                continue
            mqs = instance.subscribe_queues(sub.topic) or []
            found = next((f for f in (instance.find_broker_addr_in_admin(mq.broker_name)
                                      for mq in mqs) if f is not None), None)
            if found is not None:  # no route yet: the pulls will say
                await self._api.check_client_in_broker(found[0], sub)

    async def _shutdown_core(self) -> None:
        """Stop pulling and consuming, persist offsets, leave the group."""
        self._state = ConsumerState.STOPPING
        with trio.CancelScope(shield=True):
            async with self._rebalance_lock:  # let a running rebalance finish first
                for pq in self.process_queue_table.values():
                    pq.dropped = True
            if self._service is not None:
                await self._service.stop()  # every pull task with it
            self._pull_tasks.clear()
            await self._before_leave()
            if self._offset_store is not None:
                with trio.move_on_after(self.request_timeout + 1):
                    await self._offset_store.persist_all(set(self.process_queue_table))
            self.process_queue_table.clear()
            if self._instance is not None:
                with trio.move_on_after(self.request_timeout + 1):
                    await self._instance.unregister_consumer(self.group)
                await self._instance.release()
        self._state = ConsumerState.SHUTDOWN

    async def _before_leave(self) -> None:
        """Hook: after pulling stopped, before offsets are persisted."""

    # ---- rebalance ---------------------------------------------------------------

    async def do_rebalance(self) -> None:
        """One rebalance of every subscribed topic (the instance calls this
        every ``rebalance_interval`` s and on NOTIFY_CONSUMER_IDS_CHANGED)."""
        if self._state is not ConsumerState.RUNNING:
            return
        async with self._rebalance_lock:
            for topic in sorted(self.subscriptions):
                await self._rebalance_topic(topic)
            for mq in [mq for mq in self.process_queue_table if mq.topic not in self.subscriptions]:
                await self._drop_queue(mq, "topic no longer subscribed")

    async def _rebalance_topic(self, topic: str) -> None:
        instance = self._running_instance()
        mqs = instance.subscribe_queues(topic)
        if not mqs or topic == self.retry_topic:
            # a retry topic appears broker by broker as members heartbeat or
            # send back: look it up every round
            try:
                await instance.update_topic_route(topic)
            except (MQClientError, MQBrokerError) as exc:
                self._log.warning("rebalance: route lookup failed", topic=topic, error=str(exc))
            mqs = instance.subscribe_queues(topic)
            if not mqs:
                if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                    self._log.warning("rebalance: topic has no readable queue", topic=topic)
                return
        if self.message_model is MessageModel.BROADCASTING:
            allocated = set(mqs)
        else:
            assert self._api is not None
            cids = await self._api.consumer_ids(topic)
            if instance.client_id not in cids:
                # a broker we had not heartbeated yet (new subscription or route)
                await instance.send_heartbeat_to_all_brokers()
                cids = await self._api.consumer_ids(topic)
            if not cids:
                self._log.warning("rebalance: no consumer id list from the brokers", topic=topic)
                return
            if instance.client_id not in cids:
                # The brokers have not seen our heartbeat yet; the next round will.
                self._log.info("rebalance: this client is not in the group yet", topic=topic)
                return
            try:
                allocated = set(self.allocate_strategy(instance.client_id, mqs, cids))
            except Exception as exc:
                self._log.error("allocation strategy failed", topic=topic, error=str(exc))
                return
        await self._update_process_queue_table(topic, allocated)

    async def _update_process_queue_table(self, topic: str, allocated: set[MessageQueue]) -> None:
        changed = False
        now = trio.current_time()
        for mq in [mq for mq in self.process_queue_table if mq.topic == topic]:
            if mq not in allocated:
                if await self._drop_queue(mq, "not allocated any more"):
                    changed = True
                continue
            pq = self.process_queue_table.get(mq)
            if pq is not None and self._pull_expired(pq, now):
                # a pull task stuck somewhere: drop the queue (offset persisted
                # first) and take it again below, from that offset, with a new task
                self._log.warning("no pull for too long, the queue is taken again",
                                  mq=str(mq), idle_s=round(now - pq.last_pull_time, 1),
                                  pull_max_idle_s=self.pull_max_idle_s)
                if await self._drop_queue(mq, "pull expired"):
                    changed = True
        for mq in sorted(allocated):
            pq = self.process_queue_table.get(mq)
            if pq is not None and pq.dropped:
                # a release that could not finish earlier: finish it, then take it again
                if not await self._drop_queue(mq, "released before taking it again"):
                    continue
                pq = None
            if pq is None and await self._add_queue(mq):
                changed = True
        if changed:
            self._log.info(
                "rebalance changed the queues", topic=topic,
                queues=sorted(f"{m.broker_name}:{m.queue_id}" for m in self.process_queue_table
                              if m.topic == topic),
            )

    async def _add_queue(self, mq: MessageQueue, offset: int | None = None) -> bool:
        assert self._offset_store is not None
        if not await self._prepare_queue(mq):
            return False
        if offset is None:
            self._offset_store.remove_offset(mq)
            try:
                offset = await self.compute_pull_from_where(mq)
            except (MQClientError, MQBrokerError) as exc:
                self._log.warning("cannot compute where to pull from", mq=str(mq), error=str(exc))
                return False
        if self._state is not ConsumerState.RUNNING:
            return False
        pq = ProcessQueue(trio.current_time())
        if self._needs_lock():
            # _prepare_queue locked it on the broker
            pq.locked = True
            pq.last_lock_time = trio.current_time()
        self.process_queue_table[mq] = pq
        self._offset_store.update_offset(mq, offset)
        assert self._service is not None
        task = self._pull_tasks[mq] = _PullTask()
        self._service.start_soon(self._pull_loop, mq, pq, offset, task)
        self._log.debug("queue added", mq=str(mq), offset=offset)
        return True

    async def _prepare_queue(self, mq: MessageQueue) -> bool:
        """Hook before a queue is taken (orderly: lock it on the broker)."""
        return True

    def _needs_lock(self) -> bool:
        """Whether queues are locked on the broker before they are consumed."""
        return False

    def _pull_expired(self, pq: ProcessQueue, now: float) -> bool:
        """A push consumer's queue whose pull task has been idle too long."""
        return (self.consume_type == "CONSUME_PASSIVELY" and not pq.dropped
                and pq.pull_expired(now, self.pull_max_idle_s))

    async def _stop_pull(self, mq: MessageQueue) -> None:
        """Cancel ``mq``'s pull task and wait (bounded) until it has ended."""
        task = self._pull_tasks.pop(mq, None)
        if task is None:
            return
        task.scope.cancel()
        with trio.move_on_after(PULL_TASK_STOP_WAIT):
            await task.done.wait()
            return
        # it ends at its next checkpoint, at the latest with the consumer's nursery
        self._log.warning("cancelled pull task has not ended yet", mq=str(mq))

    async def _drop_queue(self, mq: MessageQueue, why: str) -> bool:
        """Stop pulling ``mq`` (its task cancelled and awaited); persist and
        forget its offset. False when it cannot be released yet (orderly: a
        batch is still being consumed)."""
        pq = self.process_queue_table.get(mq)
        if pq is None:
            return True
        pq.dropped = True
        await self._stop_pull(mq)
        if not await self._release_queue(mq, pq):
            return False
        self.process_queue_table.pop(mq, None)
        pq.clear()
        self._log.info("queue dropped", mq=str(mq), why=why)
        return True

    async def _release_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        assert self._offset_store is not None
        await self._offset_store.persist(mq)
        self._offset_store.remove_offset(mq)
        return True

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """The offset the broker answers for the group (stored, or 0 for a queue
        whose first message is still in memory), else where a new group starts:
        ``consume_from_where`` (a retry topic always from 0), as RocketMQ's
        RebalancePushImpl.computePullFromWhere."""
        assert self._offset_store is not None and self._api is not None
        last = await self._offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        if last >= 0:
            return last
        if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return 0
        cfw = self.consume_from_where
        if cfw is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return 0
        if cfw is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            return await self._api.search_offset(mq, self.consume_timestamp_ms)
        return await self._api.max_offset(mq)

    async def persist_consumer_offset(self) -> None:
        if self._offset_store is not None and self._state is ConsumerState.RUNNING:
            await self._offset_store.persist_all(set(self.process_queue_table))

    # ---- pulling -------------------------------------------------------------------

    def _flow_controlled(self, pq: ProcessQueue) -> str | None:
        if pq.msg_count > self.pull_threshold_for_queue:
            return "count"
        if pq.msg_size > self.pull_threshold_size_for_queue * MiB:
            return "size"
        if not self.orderly and pq.max_span > self.consume_concurrently_max_span:
            return "span"
        return None

    def _wake_puller(self, mq: MessageQueue) -> None:
        ev = self._space.pop(mq, None)
        if ev is not None:
            ev.set()

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, offset: int,
                         task: _PullTask) -> None:
        try:
            with task.scope:  # cancelled when the queue is dropped (_stop_pull)
                await self._pull_queue(mq, pq, offset)
        except Exception:
            # A bug must not take the consumer's other tasks down: this queue
            # stops being pulled and is taken again at the next rebalance.
            self._log.exception("pull task failed", mq=str(mq))
            pq.dropped = True
            if self.process_queue_table.get(mq) is pq:
                self.process_queue_table.pop(mq, None)
        finally:
            task.done.set()
            if self._pull_tasks.get(mq) is task:
                del self._pull_tasks[mq]

    async def _pull_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        assert self._api is not None and self._offset_store is not None
        api = self._api
        store = self._offset_store
        clustering = self.message_model is MessageModel.CLUSTERING
        paused = 0
        while not pq.dropped and self._state is ConsumerState.RUNNING:
            # the task is alive (RocketMQ's pullMessage sets it first thing,
            # paused or not): a queue is pull-expired only when this stops
            pq.last_pull_time = trio.current_time()
            why = self._flow_controlled(pq)
            if why is not None:
                if paused % 1000 == 0:
                    self._log.info("flow control: pulling paused", mq=str(mq), why=why,
                                   cached=pq.msg_count, cached_mib=round(pq.msg_size / MiB, 1))
                paused += 1
                ev = self._space.setdefault(mq, trio.Event())
                with trio.move_on_after(1.0):
                    await ev.wait()
                continue
            if not pq.locked and self._needs_lock():
                await trio.sleep(PULL_TIME_DELAY_WHEN_EXCEPTION)
                continue
            sub = self.subscriptions.get(mq.topic)
            if sub is None:
                return
            commit_offset = store.table.get(mq, 0) if clustering else 0
            sys_flag = PULL_FLAG_SUSPEND | (PULL_FLAG_COMMIT_OFFSET if commit_offset > 0 else 0)
            started = trio.current_time()
            try:
                result = await api.pull(
                    mq, sub, offset, self.pull_batch_size,
                    timeout=CONSUMER_TIMEOUT_WHEN_SUSPEND, sys_flag=sys_flag,
                    commit_offset=commit_offset,
                    suspend_timeout_millis=BROKER_SUSPEND_MAX_TIME_MILLIS,
                )
            except (MQClientError, MQBrokerError) as exc:
                if not pq.dropped:
                    self._log.warning("pull failed", mq=str(mq), offset=offset, error=str(exc))
                    instance = self._instance
                    if instance is not None and not isinstance(exc, MQBrokerError):
                        # the broker is unreachable: a failover may have named a new master
                        await instance.refresh_route_after_failure(
                            mq.topic, trio.current_time() + instance.request_timeout)
                    await trio.sleep(PULL_TIME_DELAY_WHEN_EXCEPTION)
                continue
            if pq.dropped:
                return
            now = trio.current_time()
            self.stats.pulled(mq.topic, now, now - started, len(result.msg_found_list))
            status = result.pull_status
            if status is PullStatus.FOUND:
                offset = result.next_begin_offset
                if result.msg_found_list:
                    self._on_pulled(mq, pq, result.msg_found_list)
                elif pq.is_empty() and self._advance_when_idle():
                    store.update_offset(mq, offset, increase_only=True)
            elif status is PullStatus.OFFSET_ILLEGAL:
                self._log.warning("pull offset illegal, moving on", mq=str(mq), offset=offset,
                                  next_offset=result.next_begin_offset,
                                  min_offset=result.min_offset, max_offset=result.max_offset)
                offset = result.next_begin_offset
                pq.clear()
                store.update_offset(mq, offset)
                await store.persist(mq)
            else:  # NO_NEW_MSG, NO_MATCHED_MSG
                offset = result.next_begin_offset
                if pq.is_empty() and self._advance_when_idle():
                    store.update_offset(mq, offset, increase_only=True)
            await trio.lowlevel.checkpoint()

    def _advance_when_idle(self) -> bool:
        """Whether a queue with nothing cached may commit past filtered-out messages."""
        return True

    @abstractmethod
    def _on_pulled(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Pulled messages of ``mq`` (never empty)."""

    # ---- helpers ---------------------------------------------------------------------

    def _wire(self, mq: MessageQueue) -> MessageQueue:
        """A queue the user named as the broker knows it (its topic namespaced)."""
        if not self.namespace:
            return mq
        return dataclasses.replace(mq, topic=wrap(self.namespace, mq.topic))

    def _user_queue(self, mq: MessageQueue) -> MessageQueue:
        """A queue as the user names it (its topic without the namespace)."""
        if not self.namespace:
            return mq
        return dataclasses.replace(mq, topic=unwrap(self.namespace, mq.topic))

    def _reset_retry_topic(self, msgs: Sequence[MessageExt]) -> None:
        """Messages from the group's retry topic show their original topic; with a
        namespace, every message shows its topic without it."""
        retry = self.retry_topic
        namespace = self.namespace
        for msg in msgs:
            if msg.topic == retry:
                origin = msg.properties.get("RETRY_TOPIC")
                if origin:
                    msg.topic = origin
            if namespace:
                msg.topic = unwrap(namespace, msg.topic)

    def _commit_offset(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        if offset >= 0 and not pq.dropped and self._offset_store is not None:
            self._offset_store.update_offset(mq, offset, increase_only=True)

    # ---- what admins ask of a consumer ---------------------------------------------

    def running_properties(self) -> dict[str, str]:
        """The consumer's settings as RocketMQ's ConsumerRunningInfo shows them
        (subclasses add theirs)."""
        return {
            "consumerGroup": self.group, "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "consumeTimestamp": str(self.consume_timestamp_ms),
            "allocateMessageQueueStrategy": getattr(self.allocate_strategy, "__name__",
                                                    type(self.allocate_strategy).__name__),
            "pullBatchSize": str(self.pull_batch_size),
            "pullThresholdForQueue": str(self.pull_threshold_for_queue),
            "pullThresholdSizeForQueue": str(self.pull_threshold_size_for_queue),
            "consumeConcurrentlyMaxSpan": str(self.consume_concurrently_max_span),
            "instanceName": self.instance_name or "",
            PROP_NAMESERVER_ADDR: self.namesrv_addr,
            PROP_CONSUME_TYPE: self.consume_type,
            PROP_CONSUME_ORDERLY: "true" if self.orderly else "false",
            PROP_CLIENT_VERSION: client_version(),
            PROP_CONSUMER_START_TIMESTAMP: str(self.start_timestamp_ms),
        }

    def running_info(self, jstack: bool = False) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO's body (client/running_info.py)."""
        now, now_ms = trio.current_time(), int(time.time() * 1000)
        offsets = self.offset_table()
        self.stats.forget(set(self.subscriptions))
        body: dict[str, Any] = {
            "properties": self.running_properties(),
            "subscriptionSet": [
                {"topic": s.topic, "subString": s.sub_string, "classFilterMode": False,
                 "tagsSet": sorted(s.tags_set or ()), "expressionType": "TAG"}
                for _, s in sorted(self.subscriptions.items())],
            "mqTable": [mq_entry(mq, process_queue_info(pq, offsets.get(mq, -1), now, now_ms))
                        for mq, pq in sorted(self.process_queue_table.items())],
            "statusTable": self.stats.status(now),
        }
        if jstack:
            body["jstack"] = stacks()
        return body

    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: the broker moved the group's offsets of
        ``topic`` (mqadmin skipAccumulatedMessage, resetOffsetByTime). The queues of
        ``offsets`` this consumer holds stop at once (what is cached or being consumed
        is neither committed nor pulled further), take their new offsets (written
        back to the broker, after any commit of the old ones already on its way),
        are released, and the next rebalance (asked for now) pulls them from there."""
        if self._state is not ConsumerState.RUNNING or self._offset_store is None:
            return
        store = self._offset_store
        async with self._rebalance_lock:
            held = [mq for mq in self.process_queue_table if mq.topic == topic and mq in offsets]
            for mq in held:
                self.process_queue_table[mq].dropped = True
                store.remove_offset(mq)  # forget what was written: the new one goes out
                store.update_offset(mq, offsets[mq])
            for mq in held:
                await self._drop_queue(mq, "offset reset by an admin")
        self._log.info("offsets reset by an admin", topic=topic,
                       queues={f"{mq.broker_name}:{mq.queue_id}": offsets[mq] for mq in held})
        self._running_instance().rebalance_immediately()

    def offset_table(self) -> dict[MessageQueue, int]:
        """The offsets this consumer holds in memory now (a copy)."""
        return {} if self._offset_store is None else dict(self._offset_store.table)

    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this consumer pulls now, sorted."""
        return sorted(self.process_queue_table)

