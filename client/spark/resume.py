"""Reading a planned queue range to its end across broker failures, without
Spark or sockets.

A Spark task reads one queue range ``[start, end)`` that the driver planned
from the offsets the brokers gave it. When the queue's master dies under the
read (killed, its host gone), its connection fails; the name servers drop the
master from the routes as soon as its connection to them closes, and the
queue's slave (brokerId 1) holds the same queue at the same offsets. So a
failed read is opened again where it stopped, with fresh routes: the master
while it is routed, else the slave; a master that comes back is routed again
and read again. A read that ends short of ``end`` (a slave that has not yet
copied the last messages of an async master) is a failure too: the range was
planned from offsets a broker reported, so the messages exist and the read
waits for them rather than hand Spark a partition with a gap.

``RetryWindow`` decides when to try again (doubling delays) and when to give
up: after ``timeout`` seconds without progress. ``read_planned`` drives the
reads; the opening of a read, the clock and the sleep are the caller's.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TypeVar

from client.errors import MQBrokerError, MQClientError
from client.range_reader import RangeChunk
from protocol.trio.tls import TlsConfigError

# the first retry's delay, doubled on each failure in a row up to MAX_DELAY
FIRST_DELAY = 0.1
MAX_DELAY = 2.0
DEFAULT_RETRY_TIMEOUT = 60.0


class ShortReadError(MQClientError):
    """A range read ended before its planned end: the broker read from holds
    fewer messages than the broker that reported the offsets (a lagging slave)."""


class RangeReadError(RuntimeError):
    """A planned range could not be read for a whole retry window."""


@dataclass
class RetryWindow:
    """When to try again after a failure, and when to give up.

    ``failed(now)`` returns the delay before the next attempt, or None once
    ``timeout`` seconds have passed since the first failure with no
    ``progressed()`` call in between. Delays start at ``first_delay`` and
    double up to ``max_delay``; progress starts both over."""

    timeout: float = DEFAULT_RETRY_TIMEOUT
    first_delay: float = FIRST_DELAY
    max_delay: float = MAX_DELAY

    def __post_init__(self) -> None:
        if self.timeout < 0 or self.first_delay <= 0 or self.max_delay < self.first_delay:
            raise ValueError(f"bad retry window {self}")
        self._since: float | None = None  # the first failure since the last progress
        self._delay = self.first_delay
        self.failures = 0  # in all, for logs

    def progressed(self) -> None:
        self._since = None
        self._delay = self.first_delay

    def failed(self, now: float) -> float | None:
        self.failures += 1
        if self._since is None:
            self._since = now
        left = self._since + self.timeout - now
        if left <= 0:
            return None
        delay = min(self._delay, left)
        self._delay = min(self._delay * 2, self.max_delay)
        return delay

    @property
    def failing_since(self) -> float | None:
        return self._since


def retryable(exc: BaseException) -> bool:
    """A failure another attempt may get past: the broker could not be reached
    or answered late, or no route names it yet (MQClientError), or a short
    read. A broker's refusal (MQBrokerError: no permission, no such topic) and
    a certificate that fails verification or TLS settings that cannot work
    are final: trying again changes nothing."""
    if not isinstance(exc, MQClientError) or isinstance(exc, MQBrokerError):
        return False
    seen: BaseException | None = exc
    for _ in range(16):  # the chain of causes, bounded
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError | TlsConfigError):
            return False
        seen = seen.__cause__ or seen.__context__
    return "certificate verification failed" not in str(exc)


T = TypeVar("T")

OpenRead = Callable[[int, int], AbstractContextManager[Iterable[list[RangeChunk]]]]


def read_planned(open_read: OpenRead, start: int, end: int, window: RetryWindow, *,
                 clock: Callable[[], float], sleep: Callable[[float], None],
                 on_retry: Callable[[int, BaseException, float], None] | None = None,
                 must_reach: int | None = None,
                 what: str = "the range") -> Iterator[list[RangeChunk]]:
    """The chunks of ``[start, end)`` in offset order, each offset once.

    ``open_read(offset, attempt)`` opens a read of ``[offset, end)`` (attempt
    0 first; a later attempt should fetch fresh routes) whose iteration yields
    lists of RangeChunks. When opening or iterating raises a ``retryable``
    error, or the read ends before ``must_reach`` (default ``end``: offsets a
    broker reported; past them, an end the caller asked for beyond the queue's,
    the read may end where the queue does), it is opened again from the end
    of the last chunk yielded after ``window``'s delay (``on_retry(offset,
    error, delay)`` is told first); when the window gives up, RangeReadError
    says which offsets and why. Other errors propagate as they are."""
    reach = end if must_reach is None else min(must_reach, end)
    offset = start
    attempt = 0
    while True:
        error: BaseException
        try:
            with open_read(offset, attempt) as read:
                for chunks in read:
                    if chunks:
                        reached = chunks[-1].next_offset
                        if reached > offset:
                            window.progressed()
                        offset = max(offset, reached)
                    yield chunks
            if offset >= reach:
                return
            error = ShortReadError(f"the read of {what} ended at offset {offset}, "
                                   f"short of {reach}")
        except MQClientError as exc:
            if not retryable(exc):
                raise
            error = exc
        delay = window.failed(clock())
        if delay is None:
            raise RangeReadError(
                f"{what}: offsets {offset} to {end} could not be read for "
                f"{window.timeout:g} s (neither the master nor a slave answered with "
                f"them): {error}") from error
        if on_retry is not None:
            on_retry(offset, error, delay)
        sleep(delay)
        attempt += 1


def retry_call(call: Callable[[], T], window: RetryWindow, *, clock: Callable[[], float],
                  sleep: Callable[[float], None],
                  on_retry: Callable[[BaseException, float], None] | None = None,
                  what: str = "the call") -> T:
    """``call()``, tried again after ``window``'s delays while it raises a
    ``retryable`` error; RangeReadError once the window gives up."""
    while True:
        try:
            result = call()
        except MQClientError as exc:
            if not retryable(exc):
                raise
            delay = window.failed(clock())
            if delay is None:
                raise RangeReadError(f"{what} failed for {window.timeout:g} s: {exc}") from exc
            if on_retry is not None:
                on_retry(exc, delay)
            sleep(delay)
            continue
        window.progressed()
        return result


__all__ = ["DEFAULT_RETRY_TIMEOUT", "RangeReadError", "RetryWindow", "ShortReadError",
           "read_planned", "retry_call", "retryable"]
