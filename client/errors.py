"""Errors raised by the client SDK, as RocketMQ's MQClientException / MQBrokerException.

``MQClientError`` is the one base a caller needs to catch: misuse (bad topic,
empty body, not started), no route for a topic, connection failures and
timeouts, every retry failed. ``MQBrokerError`` is the subclass for a server
(broker or name server) that answered with a non-success response code; it
carries that code and the server's remark.
"""

from __future__ import annotations

from typing import Any

from protocol.codes import ResponseCode


class MQClientError(Exception):
    """Base of every error raised by the client SDK."""


def _as_response_code(code: int) -> ResponseCode | int:
    try:
        return ResponseCode(code)
    except ValueError:
        return int(code)


class MQBrokerError(MQClientError):
    """A broker or name server answered with a non-success response code.

    Attributes:
        response_code: the ``ResponseCode`` (a plain int if the code is unknown).
        remark: the server's error text ("" if it sent none).
        addr: the server's address, when known.
    """

    def __init__(
        self,
        response_code: int,
        remark: str | None,
        addr: str | None = None,
        *,
        context: str | None = None,
    ) -> None:
        self.response_code: ResponseCode | int = _as_response_code(response_code)
        self.remark: str = remark or ""
        self.addr = addr
        self.context = context
        code = self.response_code
        name = code.name if isinstance(code, ResponseCode) else "UNKNOWN"
        text = f"CODE: {name} ({int(code)}), REMARK: {self.remark or '-'}"
        if addr:
            text += f", SERVER: {addr}"
        if context:
            text = f"{context}: {text}"
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_broker_error,
            (int(self.response_code), self.remark, self.addr, self.context),
        )


def _rebuild_broker_error(
    code: int, remark: str, addr: str | None, context: str | None
) -> MQBrokerError:
    return MQBrokerError(code, remark, addr, context=context)
