"""SendFuture: the result holder returned by ``Producer.send_async``.

Completed by the producer's send workers, never by a task of its own, so
thousands can be outstanding at little cost: a trio Event is only made when
somebody ``await``s it, and callbacks run inline when it completes.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
import trio

from client.errors import MQClientError
from client.send_result import SendResult

log = structlog.get_logger("client.send_future")

SendCallback = Callable[[SendResult | None, BaseException | None], object]


class SendFuture:
    """The eventual SendResult of one asynchronous send.

    ``await fut.wait()`` returns the result or raises the send's error
    (MQClientError / MQBrokerError). ``add_done_callback(cb)`` calls
    ``cb(result, exc)`` once it is done (at once if already done).
    """

    __slots__ = ("_done", "_result", "_exc", "_event", "_callbacks")

    def __init__(self) -> None:
        self._done = False
        self._result: SendResult | None = None
        self._exc: BaseException | None = None
        self._event: trio.Event | None = None
        self._callbacks: list[SendCallback] | None = None

    def done(self) -> bool:
        return self._done

    def result(self) -> SendResult:
        """The result; raises the send's error, or MQClientError if not done yet."""
        if not self._done:
            raise MQClientError("the send is not finished yet")
        if self._exc is not None:
            raise self._exc
        assert self._result is not None
        return self._result

    def exception(self) -> BaseException | None:
        """The send's error (None on success). Raises MQClientError if not done."""
        if not self._done:
            raise MQClientError("the send is not finished yet")
        return self._exc

    async def wait(self) -> SendResult:
        """Wait until the send finishes; return its result or raise its error."""
        if not self._done:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        return self.result()

    def add_done_callback(self, callback: SendCallback) -> None:
        """Call ``callback(result, exc)`` when done (now if already done).
        An exception raised by the callback is logged and ignored."""
        if self._done:
            _call(callback, self._result, self._exc)
            return
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)

    # ---- completion (producer side) ---------------------------------------------

    def set_result(self, result: SendResult) -> None:
        self._finish(result, None)

    def set_exception(self, exc: BaseException) -> None:
        self._finish(None, exc)

    def _finish(self, result: SendResult | None, exc: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        self._result = result
        self._exc = exc
        if self._event is not None:
            self._event.set()
        callbacks = self._callbacks
        if callbacks:
            self._callbacks = None
            for cb in callbacks:
                _call(cb, result, exc)

    def __repr__(self) -> str:
        if not self._done:
            return "<SendFuture pending>"
        if self._exc is not None:
            return f"<SendFuture failed: {self._exc!r}>"
        return f"<SendFuture done: {self._result!r}>"


def _call(callback: SendCallback, result: SendResult | None, exc: BaseException | None) -> None:
    try:
        callback(result, exc)
    except Exception:
        log.exception("send callback raised")
