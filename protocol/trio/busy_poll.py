"""BusyPoll: keep the event loop polling for a while after each request.

An idle trio loop blocks in ``epoll_wait``; the next frame then wakes a halted
CPU, and a request served right after waking costs several times the CPU of one
served by a warm loop. On the 2-core VM this project is measured on, the same
single-send handler took 29-40 µs back to back and 88-109 µs with a 300 µs sleep
between sends. A round trip pays that twice (the broker, then the client).

With a window set, each connection ``touch()``es its process's BusyPoll when it
reads a chunk or queues a frame, and ``run()`` keeps one task yielding (a
scheduling round, ``epoll_wait`` with no timeout) until the window has passed
since the last touch; then it parks until the next one. It is CPU traded for
latency, as an idle strategy that spins (Aeron's, the LMAX disruptor's): a
process at a few hundred requests a second stays busy, a process under load is
busy anyway, an idle one sleeps as before. Off (window 0) by default:
``busyPollMicros`` on the broker, ``ROCKETMQ_BUSY_POLL_US`` (or
``MQClientInstance(busy_poll_us=...)``) on a client.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio

ENV_BUSY_POLL_US = "ROCKETMQ_BUSY_POLL_US"
MAX_BUSY_POLL_US = 1_000_000  # a second: a longer window is a mistake, not a choice


def busy_poll_us_from_env(env: dict[str, str] | None = None) -> int:
    """The client window from ROCKETMQ_BUSY_POLL_US (0 when unset). Raises
    ValueError naming the variable when it is not a whole number within range.
    Pure given ``env``."""
    raw = (dict(os.environ) if env is None else env).get(ENV_BUSY_POLL_US, "").strip()
    if not raw:
        return 0
    return check_window_us(int(raw) if raw.isascii() and raw.isdigit() else -1, ENV_BUSY_POLL_US)


def check_window_us(value: int, name: str) -> int:
    """``value`` when it is a window in µs (0..MAX_BUSY_POLL_US), else ValueError."""
    if not isinstance(value, int) or isinstance(value, bool) or not \
            0 <= value <= MAX_BUSY_POLL_US:
        raise ValueError(f"{name} must be a whole number of µs within 0..{MAX_BUSY_POLL_US}, "
                         f"not {value!r}")
    return value


def active(busy_poll: BusyPoll | None) -> BusyPoll | None:
    """``busy_poll`` when it has a window, else None (what its users keep)."""
    return busy_poll if busy_poll is not None and busy_poll.enabled else None


class BusyPoll:
    """Run ``run()`` in a nursery; ``touch()`` on activity. With a window of 0
    it is off: ``touch()`` does nothing and ``run()`` returns at once."""

    def __init__(self, window_us: int) -> None:
        self.window = check_window_us(window_us, "the busy-poll window") / 1e6
        self._until = -1.0  # trio clock: spin while now < this
        self._parked: trio.Event | None = None
        self._paused = 0
        self.spins = 0  # scheduling rounds spent polling (tests, metrics)

    @property
    def enabled(self) -> bool:
        return self.window > 0

    def touch(self) -> None:
        """Activity now: poll for the window from here."""
        if self.window <= 0:
            return
        self._until = trio.current_time() + self.window
        if not self._paused:
            self._unpark()

    def pause(self) -> None:
        """Stop polling until as many ``resume()`` calls: a thread of this
        process is running work the loop waits for (a group commit's fsync),
        and a spinning loop would keep the CPU, and the GIL, from it."""
        self._paused += 1

    def resume(self) -> None:
        if self._paused <= 0:
            raise RuntimeError("BusyPoll.resume() without a pause()")
        self._paused -= 1
        if not self._paused and self.window > 0:
            self._unpark()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """``pause()`` for the block (e.g. around ``trio.to_thread.run_sync``)."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def _unpark(self) -> None:
        parked = self._parked
        if parked is not None:
            self._parked = None
            parked.set()

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if self.window <= 0:
            return
        checkpoint = trio.lowlevel.checkpoint
        clock = trio.current_time
        while True:
            if not self._paused and clock() < self._until:
                self.spins += 1
                await checkpoint()
            else:
                parked = self._parked = trio.Event()
                await parked.wait()
