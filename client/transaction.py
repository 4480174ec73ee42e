"""Transactional messages, producer side (RocketMQ's TransactionMQProducer).

``send_message_in_transaction(msg, arg)`` sends ``msg`` as a half message
(sysFlag TRANSACTION_PREPARED_TYPE, properties ``TRAN_MSG`` and ``PGROUP``),
which consumers do not see. If the broker stored it (SEND_OK), the listener's
``execute_local_transaction(msg, arg)`` runs; its state goes to the broker in
a oneway END_TRANSACTION: COMMIT_MESSAGE delivers the message,
ROLLBACK_MESSAGE drops it, UNKNOW leaves it to a later check. Any other send
status rolls back without running the local transaction.

For a half message still open after a while, the broker sends
CHECK_TRANSACTION_STATE on this client's connection. The client instance
hands it to the producer of the message's group, which queues it (at most
``check_backlog``; beyond that a check is dropped with a warning, the broker
asks again later); ``check_workers`` tasks call the listener's
``check_local_transaction(msg)`` and answer each with END_TRANSACTION
(``fromTransactionCheck``) to the broker that asked.

A listener method that raises or returns something other than a
LocalTransactionState counts as UNKNOW (logged). Listener methods may be plain
functions (run on the event loop: keep them short) or ``async def``.

The broker asks only producers it knows from heartbeats. While a transaction
producer runs, its client instance heartbeats every broker it learns of at
once: after the first send to a broker, or after
``fetch_publish_message_queues(topic)`` for a process that only answers checks.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import structlog
import trio

from client.errors import MQClientError
from client.instance import MQClientInstance
from client.producer import Producer
from client.send_result import SendResult, SendStatus
from client.service import ServiceNursery
from protocol.codes import RequestCode
from protocol.command import RemotingCommand, cap_remark
from protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from protocol.message import Message, MessageConst, MessageExt
from protocol.namespace import unwrap
from protocol.record import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    decode_msg_id,
)
from protocol.trio import RemotingError

log = structlog.get_logger("client.transaction")

DEFAULT_CHECK_WORKERS = 1
DEFAULT_CHECK_BACKLOG = 2000


class LocalTransactionState(Enum):
    """The outcome of a local transaction (RocketMQ's names, UNKNOW included)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


# END_TRANSACTION's commitOrRollback for each state.
END_TYPE_BY_STATE: dict[LocalTransactionState, int] = {
    LocalTransactionState.COMMIT_MESSAGE: TRANSACTION_COMMIT_TYPE,
    LocalTransactionState.ROLLBACK_MESSAGE: TRANSACTION_ROLLBACK_TYPE,
    LocalTransactionState.UNKNOW: TRANSACTION_NOT_TYPE,
}


class TransactionListener(Protocol):
    """What a TransactionProducer calls. With the trio producer either method
    may be ``async def``; with ``client.blocking`` both are plain functions."""

    def execute_local_transaction(
        self, msg: Message, arg: Any
    ) -> LocalTransactionState | Awaitable[LocalTransactionState]:
        """Run the local transaction of a half message the broker stored."""
        ...

    def check_local_transaction(
        self, msg: MessageExt
    ) -> LocalTransactionState | Awaitable[LocalTransactionState]:
        """Say how the local transaction of ``msg`` (a half message the broker
        still holds) ended."""
        ...


@dataclass(frozen=True, slots=True)
class TransactionSendResult(SendResult):
    """A SendResult plus the state sent to the broker. ``transaction_id`` is
    the message's ``UNIQ_KEY`` (as ``msg_id``)."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


def check_listener(listener: object) -> None:
    """Raise MQClientError unless ``listener`` has both listener methods."""
    for name in ("execute_local_transaction", "check_local_transaction"):
        if not callable(getattr(listener, name, None)):
            raise MQClientError(f"the transaction listener has no callable {name}")


def as_state(value: object, what: str, **context: Any) -> LocalTransactionState:
    """``value`` if it is a LocalTransactionState, else UNKNOW (logged)."""
    if isinstance(value, LocalTransactionState):
        return value
    log.warning(f"{what} returned no LocalTransactionState, taken as UNKNOW",
                returned=repr(value)[:200], **context)
    return LocalTransactionState.UNKNOW


def call_listener(
    fn: Any, args: tuple[Any, ...], what: str, **context: Any
) -> tuple[LocalTransactionState, Exception | None]:
    """Call a plain listener method: (state, the exception it raised or None)."""
    try:
        value = fn(*args)
    except Exception as exc:
        log.exception(f"{what} failed, taken as UNKNOW", **context)
        return LocalTransactionState.UNKNOW, exc
    return as_state(value, what, **context), None


async def acall_listener(
    fn: Any, args: tuple[Any, ...], what: str, **context: Any
) -> tuple[LocalTransactionState, Exception | None]:
    """``call_listener`` for a method that may be ``async def``."""
    try:
        value = fn(*args)
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:
        log.exception(f"{what} failed, taken as UNKNOW", **context)
        return LocalTransactionState.UNKNOW, exc
    return as_state(value, what, **context), None


def _exc_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass(slots=True)
class _Check:
    broker_addr: str
    header: CheckTransactionStateRequestHeader
    msg: MessageExt


class TransactionProducer(Producer):
    """A Producer that also sends transactional messages, on trio.

    Args:
        group: producer group; the brokers ask this group's producers about
            open transactions, so every process of the group needs the listener.
        namesrv_addr: name servers, ``;``-separated (None: the NAMESRV_ADDR
            environment variable, else 127.0.0.1:9876).
        transaction_listener: a TransactionListener.
        check_workers: checks run at once.
        check_backlog: checks queued while the workers are busy; more are dropped.
        **options: the Producer options (send_msg_timeout, ...).

    One transaction producer per group and client instance. Raises
    MQClientError for a bad setting or listener.
    """

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
        super().__init__(group, namesrv_addr, **options)
        check_listener(transaction_listener)
        if not isinstance(check_workers, int) or check_workers < 1:
            raise MQClientError("check_workers must be at least 1")
        if not isinstance(check_backlog, int) or check_backlog < 0:
            raise MQClientError("check_backlog must be >= 0")
        self.transaction_listener = transaction_listener
        self.check_workers = check_workers
        self.check_backlog = check_backlog
        self.checks_dropped = 0
        self._check_tx: trio.MemorySendChannel[_Check] | None = None
        self._check_rx: trio.MemoryReceiveChannel[_Check] | None = None
        self._check_workers_left = 0
        self._check_workers_done: trio.Event | None = None

    async def __aenter__(self) -> TransactionProducer:
        await self.start()
        return self

    # ---- lifecycle --------------------------------------------------------------

    def _register(self, instance: MQClientInstance, service: ServiceNursery) -> None:
        instance.register_transaction_checker(self.group, self._on_check)
        try:
            super()._register(instance, service)
            tx, rx = trio.open_memory_channel[_Check](self.check_backlog)
            self._check_tx, self._check_rx = tx, rx
            self._check_workers_left = self.check_workers
            self._check_workers_done = trio.Event()
            for _ in range(self.check_workers):
                service.start_soon(self._check_worker, rx.clone())
        except BaseException:
            instance.unregister_transaction_checker(self.group)
            raise

    async def shutdown(self) -> None:
        """Stop taking checks: queued ones are dropped (the broker asks again),
        running ones get up to ``send_msg_timeout`` to finish; then as
        Producer.shutdown. Idempotent."""
        if self._check_tx is not None:
            if self._instance is not None:
                self._instance.unregister_transaction_checker(self.group)
            self._check_tx.close()
            self._check_tx = None
            with trio.CancelScope(shield=True):
                self._drop_queued_checks()
                if self._check_workers_done is not None:
                    with trio.move_on_after(self.send_msg_timeout):
                        await self._check_workers_done.wait()
        await super().shutdown()

    def _drop_queued_checks(self) -> None:
        rx = self._check_rx
        if rx is None:
            return
        dropped = 0
        while True:
            try:
                rx.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            dropped += 1
        rx.close()
        if dropped:
            self.checks_dropped += dropped
            self._log.warning("queued transaction checks dropped at shutdown", count=dropped)

    # ---- sending ----------------------------------------------------------------

    async def send_message_in_transaction(
        self, msg: Message, arg: Any = None
    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run the local transaction, tell the
        broker its state.

        Raises MQClientError (misuse, a delayed message, a batch, or the half
        message could not be sent) or MQBrokerError (the broker refused it);
        a failure to send the end is only logged (the broker checks later).
        """
        result = await self._send_half(msg)
        if result.send_status is SendStatus.SEND_OK:
            state, error = await acall_listener(
                self.transaction_listener.execute_local_transaction, (msg, arg),
                "execute_local_transaction", group=self.group, msg_id=result.msg_id)
        else:
            state, error = LocalTransactionState.ROLLBACK_MESSAGE, None
        return await self._end_transaction(result, state, error)

    async def _send_half(self, msg: Message) -> SendResult:
        """Step 1 (also used by client.blocking): the half message, a sync send."""
        if isinstance(msg, list | tuple):
            raise MQClientError("batches cannot be transactional; send one Message")
        if not isinstance(msg, Message):
            raise MQClientError(f"expected a Message, got {type(msg).__name__}")
        if msg.properties.get(MessageConst.PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
            raise MQClientError("a delayed message cannot be transactional "
                                "(remove its delay time level)")
        msg.properties[MessageConst.PROPERTY_TRANSACTION_PREPARED] = "true"
        msg.properties[MessageConst.PROPERTY_PRODUCER_GROUP] = self.group
        prepared = self._prepare_message(msg)
        prepared.fields["sysFlag"] = prepared.fields["sysFlag"] | TRANSACTION_PREPARED_TYPE
        self._running_instance()
        return await self._send(prepared, None, self._deadline(None))

    async def _end_transaction(
        self, result: SendResult, state: LocalTransactionState, error: Exception | None
    ) -> TransactionSendResult:
        """Step 3 (also used by client.blocking): END_TRANSACTION to the master
        of the broker holding the half message; failures are logged."""
        try:
            _, commit_log_offset = decode_msg_id(result.offset_msg_id or "")
        except ValueError as exc:
            self._log.error("cannot end the transaction: no commit-log offset in the send "
                            "result; the broker will check it", msg_id=result.msg_id,
                            offset_msg_id=result.offset_msg_id, error=str(exc))
        else:
            header = EndTransactionRequestHeader(
                producer_group=self.group,
                tran_state_table_offset=result.queue_offset,
                commit_log_offset=commit_log_offset,
                commit_or_rollback=END_TYPE_BY_STATE[state],
                from_transaction_check=False,
                msg_id=result.msg_id,
                transaction_id=result.msg_id,
            )
            remark = (None if error is None
                      else f"executeLocalTransactionBranch exception: {_exc_text(error)}")
            try:
                addr = await self._broker_addr(self._sending_instance(),
                                               result.message_queue)
            except MQClientError as exc:
                self._log.warning("cannot end the transaction: broker unknown; it will check",
                                  broker=result.message_queue.broker_name, error=str(exc),
                                  msg_id=result.msg_id)
            else:
                await self._send_end(addr, header, remark)
        return TransactionSendResult(
            send_status=result.send_status,
            msg_id=result.msg_id,
            message_queue=(self._user_queue(result.message_queue) if self.namespace
                           else result.message_queue),
            queue_offset=result.queue_offset,
            offset_msg_id=result.offset_msg_id,
            transaction_id=result.msg_id,
            local_transaction_state=state,
        )

    async def _send_end(
        self, addr: str, header: EndTransactionRequestHeader, remark: str | None
    ) -> None:
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_fields(),
                                      oneway=True)
        if remark is not None:
            cmd.remark = cap_remark(remark)
        try:
            await self._sending_instance().invoke_oneway(addr, cmd, self.send_msg_timeout)
        except (RemotingError, MQClientError) as exc:
            self._log.warning("END_TRANSACTION not sent; the broker will check", broker=addr,
                              msg_id=header.msg_id, error=str(exc))

    # ---- checks from brokers ----------------------------------------------------

    def _on_check(
        self, broker_addr: str, header: CheckTransactionStateRequestHeader, msg: MessageExt
    ) -> None:
        """The client instance's handler calls this on the event loop: queue the
        check, or drop it when the backlog is full."""
        tx = self._check_tx
        try:
            if tx is None:
                raise trio.ClosedResourceError
            tx.send_nowait(_Check(broker_addr, header, msg))
        except trio.WouldBlock:
            self.checks_dropped += 1
            self._log.warning("transaction check backlog full, check dropped (the broker asks "
                              "again)", backlog=self.check_backlog, broker=broker_addr,
                              msg_id=msg.uniq_key, transaction_id=header.transaction_id)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self.checks_dropped += 1
            self._log.info("transaction check dropped: the producer is shutting down",
                           broker=broker_addr, msg_id=msg.uniq_key)

    async def _check_worker(self, rx: trio.MemoryReceiveChannel[_Check]) -> None:
        try:
            async with rx:
                async for check in rx:
                    try:
                        await self._answer_check(check)
                    except Exception:  # one bad check must not stop the worker
                        self._log.exception("transaction check failed",
                                            broker=check.broker_addr)
        finally:
            self._check_workers_left -= 1
            if self._check_workers_left == 0 and self._check_workers_done is not None:
                self._check_workers_done.set()

    async def _answer_check(self, check: _Check) -> None:
        msg = check.msg
        if self.namespace:  # the listener sees the topic it sent to
            msg.topic = unwrap(self.namespace, msg.topic)
        uniq = msg.uniq_key or msg.msg_id
        state, error = await acall_listener(
            self.transaction_listener.check_local_transaction, (msg,),
            "check_local_transaction", group=self.group, msg_id=uniq,
            broker=check.broker_addr)
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=check.header.tran_state_table_offset,
            commit_log_offset=check.header.commit_log_offset,
            commit_or_rollback=END_TYPE_BY_STATE[state],
            from_transaction_check=True,
            msg_id=uniq,
            transaction_id=check.header.transaction_id,
        )
        remark = (None if error is None
                  else f"checkLocalTransactionState Exception: {_exc_text(error)}")
        await self._send_end(check.broker_addr, header, remark)
