"""The blocking facade: producer and consumers for plain (non-trio) Python.

    from client.blocking import Producer, Message

    with Producer("my_group", "127.0.0.1:9876") as producer:
        result = producer.send(Message("TopicTest", b"hello"))

Same constructor arguments and methods as the async classes, as plain
functions. All blocking objects of a process share one trio loop on a
background daemon thread (started with the first object, stopped and joined
when the last one shuts down); every call runs in it with
``trio.from_thread.run``. Objects may be used from several threads. Do not
call them from inside a send callback (that runs on the loop thread).

A PushConsumer's listener is a plain function run in a worker thread (at
most ``consume_thread_max`` at once), so it may block. So are a
TransactionProducer's listener methods: ``execute_local_transaction`` runs in
the thread that called ``send_message_in_transaction``,
``check_local_transaction`` in worker threads (at most ``check_workers``).

Every class takes the async classes' security keywords: ``credentials`` (or
``access_key``/``secret_key``) to sign requests for brokers with ACL, and
``use_tls``, ``tls_ca_path``, ``tls_cert_path``, ``tls_key_path`` for TLS.
Or one ``config=ClientConfig(...)`` (client/config.py) with those, the name
servers, the request timeout and the instance name.
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import trio

from client.config import ClientConfig
from client.consumer_types import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageModel,
)
from client.credentials import AclCredentials
from client.direct_range import DirectRangeReader, PullLink
from client.errors import MQBrokerError, MQClientError
from client.instance import (
    DEFAULT_POLL_NAME_SERVER_INTERVAL,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_TOPIC_QUEUE_NUMS,
)
from client.lite_pull_consumer import LitePullConsumer as AsyncLitePullConsumer
from client.loop_thread import LoopThread, acquire_loop, release_loop
from client.metrics import ClientMetrics
from client.producer import Producer as AsyncProducer
from client.pull_consumer import PullConsumer as AsyncPullConsumer
from client.pull_result import PullResult, PullStatus
from client.push_consumer import PushConsumer as AsyncPushConsumer
from client.range_reader import DEFAULT_IN_FLIGHT, OffsetMoved, RangeChunk, skip_to_min
from client.send_future import SendCallback
from client.send_result import SendResult, SendStatus
from client.subscription import MessageSelector
from client.transaction import (
    DEFAULT_CHECK_BACKLOG,
    DEFAULT_CHECK_WORKERS,
    LocalTransactionState,
    TransactionListener,
    TransactionSendResult,
    call_listener,
    check_listener,
)
from client.transaction import TransactionProducer as AsyncTransactionProducer
from client.validators import DEFAULT_MAX_MESSAGE_SIZE
from protocol.message import Message, MessageExt, MessageQueue

__all__ = [
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "LitePullConsumer",
    "MessageModel",
    "PushConsumer",
    "RangeChunk",
    "RangeReader",
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
    "LocalTransactionState",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
]

T = TypeVar("T")


class _BlockingClient:
    """start / shutdown / ``with`` around an async client object run in the shared loop."""

    _impl: AsyncProducer | AsyncPullConsumer | AsyncPushConsumer | AsyncLitePullConsumer

    def __init__(self) -> None:
        self._loop: LoopThread | None = None
        self._lock = threading.Lock()
        self._started = False

    def start(self) -> None:
        """Start the object in the shared loop thread (starting the thread if
        needed). Raises MQClientError if already started or the start fails."""
        with self._lock:
            if self._started:
                raise MQClientError(f"{type(self).__name__} can be started once")
            self._started = True
            loop = acquire_loop()
            try:
                loop.run(self._impl.start)
            except BaseException:
                release_loop()
                raise
            self._loop = loop

    def shutdown(self) -> None:
        """Shut down; the last blocking object stops the loop thread. Idempotent.

        After the loop thread is gone (the interpreter's exit stopped it, e.g.
        before a generator suspended in a ``with`` block is finalized) there is
        nothing left to close: its connections and tasks went with it."""
        with self._lock:
            self._started = True
            loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            if loop.alive:
                loop.run(self._impl.shutdown)
        finally:
            release_loop()

    def __enter__(self: T) -> T:
        self.start()  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _run(self, afn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        loop = self._loop
        if loop is None:
            raise MQClientError(f"the {type(self).__name__.lower()} is not running")
        if kwargs:
            return loop.run(functools.partial(afn, *args, **kwargs))
        return loop.run(afn, *args)


class Producer(_BlockingClient):
    """Blocking producer; arguments and errors as ``client.producer.Producer``."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        send_msg_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
        poll_name_server_interval: float = DEFAULT_POLL_NAME_SERVER_INTERVAL,
        async_send_workers: int = 64,
        async_send_backlog: int = 10_000,
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
        super().__init__()
        self._impl = self._producer = AsyncProducer(
            group,
            namesrv_addr,
            send_msg_timeout=send_msg_timeout,
            retry_times_when_send_failed=retry_times_when_send_failed,
            max_message_size=max_message_size,
            default_topic_queue_nums=default_topic_queue_nums,
            poll_name_server_interval=poll_name_server_interval,
            async_send_workers=async_send_workers,
            async_send_backlog=async_send_backlog,
            metrics=metrics,
            credentials=credentials,
            access_key=access_key,
            secret_key=secret_key,
            use_tls=use_tls,
            tls_ca_path=tls_ca_path,
            tls_cert_path=tls_cert_path,
            tls_key_path=tls_key_path,
            enable_msg_trace=enable_msg_trace,
            customized_trace_topic=customized_trace_topic,
            config=config,
        )

    @property
    def group(self) -> str:
        return self._producer.group

    def send(
        self, msg: Message, mq: MessageQueue | None = None, *, timeout: float | None = None
    ) -> SendResult:
        """Send and wait for the result. Raises MQClientError / MQBrokerError."""
        return self._run(self._producer.send, msg, mq, timeout=timeout)

    def send_batch(
        self,
        msgs: Iterable[Message],
        mq: MessageQueue | None = None,
        *,
        timeout: float | None = None,
    ) -> SendResult:
        """Send messages of one topic in one request. Raises as ``send``."""
        return self._run(self._producer.send_batch, list(msgs), mq, timeout=timeout)

    def recall_message(self, topic: str, handle_or_key: str,
                       timeout: float | None = None) -> str:
        """Cancel a pending timer message (``Producer.recall_message``)."""
        return self._run(self._producer.recall_message, topic, handle_or_key, timeout=timeout)

    def send_oneway(self, msg: Message, mq: MessageQueue | None = None) -> None:
        """Send without waiting for an answer. Raises MQClientError."""
        self._run(self._producer.send_oneway, msg, mq)

    def send_async(
        self,
        msg: Message,
        callback: SendCallback | None = None,
        *,
        mq: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> concurrent.futures.Future[SendResult]:
        """Queue a send; returns a ``concurrent.futures.Future`` of its SendResult.

        ``callback(result, exc)`` is called on the loop thread when it finishes
        (keep it short; do not call blocking client methods in it). Raises
        MQClientError at once for an invalid message or a stopped producer.
        """
        future, done = _bridge(callback)
        self._run(self._producer.send_async, msg, done, mq=mq, timeout=timeout)
        return future

    def send_batch_async(
        self,
        msgs: Iterable[Message],
        callback: SendCallback | None = None,
        *,
        mq: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> concurrent.futures.Future[SendResult]:
        """``send_batch`` asynchronously; see ``send_async``."""
        future, done = _bridge(callback)
        self._run(self._producer.send_batch_async, list(msgs), done, mq=mq, timeout=timeout)
        return future

    def send_encoded_batch_async(
        self,
        topic: str,
        body: bytes,
        callback: SendCallback | None = None,
        *,
        msg_id: str = "",
        mq: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> concurrent.futures.Future[SendResult]:
        """A batch body the caller encoded; see the async producer's
        ``send_encoded_batch_async`` and ``send_async``."""
        future, done = _bridge(callback)
        self._run(self._producer.send_encoded_batch_async, topic, body, done, msg_id=msg_id,
                  mq=mq, timeout=timeout)
        return future

    def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        """The writable queues of ``topic``. Raises MQClientError."""
        return self._run(self._producer.fetch_publish_message_queues, topic)


CHECK_THREAD_NAME = "rocketmq-tx-check"


class _ThreadedChecks:
    """The listener the async TransactionProducer gets: checks go to worker
    threads, at most ``workers`` at once."""

    def __init__(self, listener: TransactionListener, workers: int) -> None:
        self._listener = listener
        self._workers = workers
        self._limiter: trio.CapacityLimiter | None = None

    def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
        # not called: the blocking send runs it in the caller's thread
        return self._listener.execute_local_transaction(msg, arg)

    async def check_local_transaction(self, msg: MessageExt) -> Any:
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(self._workers)
        return await trio.to_thread.run_sync(
            self._listener.check_local_transaction, msg, limiter=self._limiter,
            thread_name=CHECK_THREAD_NAME)


class TransactionProducer(Producer):
    """Blocking transaction producer; arguments as
    ``client.transaction.TransactionProducer``, listener methods plain functions:
    ``execute_local_transaction`` runs in the caller's thread,
    ``check_local_transaction`` in worker threads (at most ``check_workers``)."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None,
        transaction_listener: TransactionListener,
        *,
        check_workers: int = DEFAULT_CHECK_WORKERS,
        check_backlog: int = DEFAULT_CHECK_BACKLOG,
        **options: Any,
    ) -> None:
        _BlockingClient.__init__(self)
        check_listener(transaction_listener)
        self.transaction_listener = transaction_listener
        self._impl = self._producer = self._tx = AsyncTransactionProducer(
            group,
            namesrv_addr,
            _ThreadedChecks(transaction_listener, check_workers),
            check_workers=check_workers,
            check_backlog=check_backlog,
            **options,
        )

    @property
    def checks_dropped(self) -> int:
        """Checks dropped because the backlog was full (or at shutdown)."""
        return self._tx.checks_dropped

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Send a half message, run ``execute_local_transaction(msg, arg)`` in
        this thread, tell the broker its state. Raises as the async method."""
        result = self._run(self._tx._send_half, msg)
        if result.send_status is SendStatus.SEND_OK:
            state, error = call_listener(
                self.transaction_listener.execute_local_transaction, (msg, arg),
                "execute_local_transaction", group=self._tx.group, msg_id=result.msg_id)
        else:
            state, error = LocalTransactionState.ROLLBACK_MESSAGE, None
        return self._run(self._tx._end_transaction, result, state, error)


class PullConsumer(_BlockingClient):
    """Blocking pull consumer; arguments and errors as ``client.pull_consumer.PullConsumer``."""

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
        super().__init__()
        self._impl = self._consumer = AsyncPullConsumer(
            group,
            namesrv_addr,
            pull_timeout=pull_timeout,
            request_timeout=request_timeout,
            poll_name_server_interval=poll_name_server_interval,
            credentials=credentials,
            access_key=access_key,
            secret_key=secret_key,
            use_tls=use_tls,
            tls_ca_path=tls_ca_path,
            tls_cert_path=tls_cert_path,
            tls_key_path=tls_key_path,
            instance_name=instance_name,
            config=config,
        )

    @property
    def group(self) -> str:
        return self._consumer.group

    def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of ``topic``, sorted. Raises MQClientError."""
        return self._run(self._consumer.fetch_subscribe_message_queues, topic)

    def pull(
        self,
        mq: MessageQueue,
        sub_expression: str | MessageSelector | None,
        offset: int,
        max_nums: int,
        timeout: float | None = None,
    ) -> PullResult:
        """Pull up to ``max_nums`` messages from ``offset``. Raises MQClientError /
        MQBrokerError."""
        return self._run(self._consumer.pull, mq, sub_expression, offset, max_nums, timeout)

    def read_range(
        self,
        mq: MessageQueue,
        sub_expression: str | MessageSelector | None,
        start: int,
        end: int,
        *,
        batch_size: int = 32,
        in_flight: int = DEFAULT_IN_FLIGHT,
        timeout: float | None = None,
        on_offset_moved: OffsetMoved = skip_to_min,
    ) -> RangeReader:
        """Read offsets ``[start, end)`` of ``mq`` with ``in_flight`` pulls at
        once (``client.range_reader``): iterate the returned RangeReader for
        lists of undecoded RangeChunks, in offset order; close it (or use
        ``with``) to stop early. ``on_offset_moved`` runs in the client loop
        thread."""
        loop = self._loop
        if loop is None:
            raise MQClientError("the pullconsumer is not running")
        reader = RangeReader(loop, in_flight)
        loop.spawn(reader.run, functools.partial(
            self._consumer.read_range, mq, sub_expression, start, end,
            batch_size=batch_size, in_flight=in_flight, timeout=timeout,
            on_offset_moved=on_offset_moved))
        return reader

    def read_range_here(
        self,
        mq: MessageQueue,
        sub_expression: str | MessageSelector | None,
        start: int,
        end: int,
        *,
        batch_size: int = 32,
        in_flight: int = DEFAULT_IN_FLIGHT,
        timeout: float | None = None,
        on_offset_moved: OffsetMoved = skip_to_min,
    ) -> DirectRangeReader:
        """``read_range`` in the calling thread, over a connection of the
        reader's own (``client.direct_range``): the pulls' answers are read
        when iteration asks for the next chunks, with no hand-over between
        threads. Same chunks, order and errors as ``read_range``;
        ``on_offset_moved`` runs in the calling thread. Raises MQClientError
        (bad arguments, no route to the queue's broker, connection failure)."""
        if start < 0 or end < start:
            raise MQClientError(f"bad range [{start}, {end})")
        setup = self._run(self._consumer.read_setup, mq, sub_expression, timeout)
        link = PullLink(setup.addr, connect_timeout=setup.connect_timeout, tls=setup.tls,
                        credentials=setup.credentials)
        try:
            return DirectRangeReader(link, self._consumer.group, mq, setup.sub, start, end,
                                     batch_size=batch_size, in_flight=in_flight,
                                     timeout=setup.timeout, on_offset_moved=on_offset_moved)
        except BaseException:
            link.close()
            raise

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        """Store the group's offset of ``mq`` on the broker."""
        self._run(self._consumer.update_consume_offset, mq, offset)

    def fetch_consume_offset(self, mq: MessageQueue) -> int:
        """The group's offset of ``mq`` as the broker answers it (see
        ``client.PullConsumer.fetch_consume_offset``), -1 if none."""
        return self._run(self._consumer.fetch_consume_offset, mq)

    def max_offset(self, mq: MessageQueue) -> int:
        """The queue's max offset (next to be written)."""
        return self._run(self._consumer.max_offset, mq)

    def min_offset(self, mq: MessageQueue) -> int:
        """The queue's min offset."""
        return self._run(self._consumer.min_offset, mq)


class RangeReader:
    """The blocking side of ``PullConsumer.read_range``: iterating yields lists
    of the RangeChunks ready at that moment (at least one), in offset order,
    and then raises the read's error, if any. ``reached`` is the offset the
    read stopped at once iteration has ended."""

    def __init__(self, loop: LoopThread, capacity: int) -> None:
        self._loop = loop
        self._send, self._receive = trio.open_memory_channel[RangeChunk](capacity)
        self._scope = trio.CancelScope()
        self._error: Exception | None = None
        self.reached: int | None = None

    async def run(self, read: Callable[[trio.MemorySendChannel[RangeChunk]], Awaitable[int]]
                  ) -> None:
        async with self._send:
            with self._scope:
                try:
                    self.reached = await read(self._send)
                except Exception as exc:
                    self._error = exc

    async def _next(self) -> list[RangeChunk]:
        try:
            chunks = [await self._receive.receive()]
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return []
        while True:
            try:
                chunks.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return chunks

    def __iter__(self) -> RangeReader:
        return self

    def __next__(self) -> list[RangeChunk]:
        chunks = self._loop.run(self._next)
        if chunks:
            return chunks
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        raise StopIteration

    async def _close(self) -> None:
        self._scope.cancel()
        await self._receive.aclose()

    def close(self) -> None:
        """Stop the read (pulls in flight are cancelled). Idempotent."""
        try:
            self._loop.run(self._close)
        except MQClientError:
            pass  # the loop has stopped: so has the read

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _BlockingConsumer(_BlockingClient):
    _consumer: AsyncPushConsumer | AsyncLitePullConsumer

    @property
    def group(self) -> str:
        return self._consumer.group

    def subscribe(self, topic: str, sub_expression: str | MessageSelector | None = "*") -> None:
        """Subscribe before ``start`` (or while running). Raises MQClientError."""
        if self._loop is None:
            self._consumer.subscribe(topic, sub_expression)
        else:
            self._run(_call_async, self._consumer.subscribe, topic, sub_expression)

    def assigned_queues(self) -> list[MessageQueue]:
        return self._consumer.assigned_queues()


class PushConsumer(_BlockingConsumer):
    """Blocking push consumer; arguments as ``client.push_consumer.PushConsumer``.
    The listener is a plain function, run in worker threads."""

    def __init__(self, group: str, namesrv_addr: str | None = None, **options: Any) -> None:
        super().__init__()
        self._impl = self._consumer = self._push = AsyncPushConsumer(group, namesrv_addr, **options)

    def register_message_listener(
        self, listener: Callable[[list[MessageExt], Any], Any], *, orderly: bool = False
    ) -> None:
        """``listener(msgs, context)`` -> ConsumeConcurrentlyStatus (or
        ConsumeOrderlyStatus with ``orderly=True``), called in a worker thread."""
        if not callable(listener):
            raise MQClientError("the message listener must be callable")
        limit = self._push.consume_thread_max
        holder: list[Any] = []

        async def in_thread(msgs: list[MessageExt], ctx: Any) -> Any:
            import trio

            if not holder:
                holder.append(trio.CapacityLimiter(limit))
            return await trio.to_thread.run_sync(listener, msgs, ctx, limiter=holder[0])

        self._push.register_message_listener(in_thread, orderly=orderly)


class LitePullConsumer(_BlockingConsumer):
    """Blocking lite pull consumer; arguments and methods as
    ``client.lite_pull_consumer.LitePullConsumer``."""

    def __init__(self, group: str, namesrv_addr: str | None = None, **options: Any) -> None:
        super().__init__()
        self._impl = self._consumer = self._lite = AsyncLitePullConsumer(group, namesrv_addr, **options)

    def assign(self, mqs: list[MessageQueue],
               sub_expression: str | MessageSelector | None = "*") -> None:
        if self._loop is None:
            self._lite.set_assignment(mqs, sub_expression)
        else:
            self._run(self._lite.assign, mqs, sub_expression)

    def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        return self._run(self._lite.poll, timeout)

    def seek(self, mq: MessageQueue, offset: int) -> None:
        self._run(self._lite.seek, mq, offset)

    def commit_sync(self) -> None:
        self._run(self._lite.commit_sync)

    def committed(self, mq: MessageQueue) -> int:
        return self._run(self._lite.committed, mq)

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self._lite.fetch_message_queues, topic)


async def _call_async(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _bridge(
    callback: SendCallback | None,
) -> tuple[concurrent.futures.Future[SendResult], SendCallback]:
    future: concurrent.futures.Future[SendResult] = concurrent.futures.Future()
    future.set_running_or_notify_cancel()

    def done(result: SendResult | None, exc: BaseException | None) -> None:
        if exc is not None:
            future.set_exception(exc)
        else:
            assert result is not None
            future.set_result(result)
        if callback is not None:
            callback(result, exc)

    return future, done
