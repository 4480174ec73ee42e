"""Hook points around sends and consumption (RocketMQ's SendMessageHook and
ConsumeMessageHook), for message trace and for anything else that wants to
see every send and every listener call.

A producer calls its send hooks around each attempt of a send to a broker
(``register_send_message_hook``): ``send_message_before`` once the broker is
chosen, ``send_message_after`` with the result or the exception. A push
consumer calls its consume hooks around each listener call
(``register_consume_message_hook``). Oneway sends are not seen (there is no
result to see; RocketMQ calls only its before hooks for them).

Hooks run in the caller's task, on its path: they must be quick and never
block. A hook that raises is logged (rate-limited) and skipped; the send or the
consumption goes on as if it were not there. With no hook registered a send
or a listener call costs one falsy check.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import trio

from client.consumer_types import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus
from client.errors import MQClientError
from client.send_result import SendResult
from protocol.message import Message, MessageConst, MessageExt, MessageQueue
from protocol.trace_data import ConsumeReturnType, MessageType
from protocol.trio.service import Guard, error_key

_SUCCESS = (ConsumeConcurrentlyStatus.CONSUME_SUCCESS, ConsumeOrderlyStatus.SUCCESS)
_FAILED = (ConsumeConcurrentlyStatus.RECONSUME_LATER,
           ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT)


def message_type(msg: Message) -> MessageType:
    """What RocketMQ's producer records for a message: a transaction's half
    message, a delayed one, or a normal one."""
    props = msg.properties
    if props.get(MessageConst.PROPERTY_TRANSACTION_PREPARED) == "true":
        return MessageType.Trans_Msg_Half
    if props.get(MessageConst.PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
        return MessageType.Delay_Msg
    return MessageType.Normal_Msg


@dataclass(slots=True)
class SendMessageContext:
    """One attempt of a send (RocketMQ's SendMessageContext). ``messages`` is the
    message sent, or every message of a batch. ``born_ms`` (wall clock, ms) and
    ``started`` (trio clock) are taken when the attempt starts."""

    producer_group: str
    messages: Sequence[Message]
    mq: MessageQueue
    broker_addr: str
    batch: bool
    born_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    started: float = field(default_factory=trio.current_time)
    send_result: SendResult | None = None
    exception: BaseException | None = None
    # for a hook to keep what it needs between before and after (mqTraceContext)
    hook_data: dict[str, Any] = field(default_factory=dict)

    @property
    def msg_type(self) -> MessageType:
        return message_type(self.messages[0]) if self.messages else MessageType.Normal_Msg


@dataclass(slots=True)
class ConsumeMessageContext:
    """One listener call (RocketMQ's ConsumeMessageContext): filled in after it
    with ``success``, ``status`` (the listener's answer's name) and
    ``return_type`` (RocketMQ's ConsumeReturnType: what the answer was)."""

    consumer_group: str
    mq: MessageQueue
    msgs: Sequence[MessageExt]
    started: float = field(default_factory=trio.current_time)
    success: bool = False
    status: str = ""
    return_type: ConsumeReturnType | None = None
    hook_data: dict[str, Any] = field(default_factory=dict)

    def finish(self, result: object, raised: bool) -> None:
        """Record the listener's answer (``raised``: it raised instead)."""
        self.success = result in _SUCCESS
        if result in _SUCCESS:
            self.return_type = ConsumeReturnType.SUCCESS
        elif result in _FAILED:
            self.return_type = ConsumeReturnType.FAILED
        else:  # None or not a status: consumed again (RocketMQ: EXCEPTION or RETURNNULL)
            self.return_type = (ConsumeReturnType.EXCEPTION if raised
                                else ConsumeReturnType.RETURNNULL)
        self.status = getattr(result, "name", "") if result is not None else ""


class SendMessageHook(Protocol):
    def hook_name(self) -> str: ...

    def send_message_before(self, ctx: SendMessageContext) -> None: ...

    def send_message_after(self, ctx: SendMessageContext) -> None: ...


class ConsumeMessageHook(Protocol):
    def hook_name(self) -> str: ...

    def consume_message_before(self, ctx: ConsumeMessageContext) -> None: ...

    def consume_message_after(self, ctx: ConsumeMessageContext) -> None: ...


H = TypeVar("H", SendMessageHook, ConsumeMessageHook)


class HookList(Generic[H]):
    """The hooks of one client; calls them in order, each failure logged
    (rate-limited) and skipped. Falsy while empty."""

    def __init__(self, log: Any, what: str, methods: tuple[str, str]) -> None:
        self.hooks: list[H] = []
        self.guard = Guard(log, what)
        self.methods = methods

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def register(self, hook: H) -> None:
        """Add ``hook``; MQClientError unless it has the hook's methods."""
        for method in ("hook_name", *self.methods):
            if not callable(getattr(hook, method, None)):
                raise MQClientError(f"a {self.guard.service} hook needs a {method}() method")
        self.hooks.append(hook)

    def before(self, ctx: Any) -> None:
        self._call(self.methods[0], ctx)

    def after(self, ctx: Any) -> None:
        self._call(self.methods[1], ctx)

    def _call(self, method: str, ctx: Any) -> None:
        for hook in self.hooks:
            try:
                getattr(hook, method)(ctx)
            except Exception as exc:
                self._failed(hook, method, exc)

    def _failed(self, hook: object, method: str, exc: Exception) -> None:
        name = _name(hook)
        self.guard.failed(exc, "hook failed", key=(name, method, *error_key(exc)),
                          hook=name, method=method)


def send_hooks(log: Any) -> HookList[SendMessageHook]:
    return HookList(log, "send message", ("send_message_before", "send_message_after"))


def consume_hooks(log: Any) -> HookList[ConsumeMessageHook]:
    return HookList(log, "consume message",
                    ("consume_message_before", "consume_message_after"))


def _name(hook: object) -> str:
    try:
        return str(hook.hook_name())  # type: ignore[attr-defined]
    except Exception:
        return type(hook).__name__
