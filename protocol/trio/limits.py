"""What a peer may make a connection hold, and the request lanes (pure, no I/O).

``ConnectionLimits`` bounds one connection: bytes owed to the peer (above
``write_high_water`` the connection stops reading requests until they drain
below ``write_low_water``), requests taken and not yet answered
(``max_in_flight``; more are answered SYSTEM_BUSY at once), and how long it
may stay silent (``idle_timeout``), owe bytes without the peer reading any
(``idle_timeout`` too) or hold a started frame (``frame_timeout``).
What it queues for a peer that does not read is bounded too: a request or
oneway this side starts (a transaction check, a rebalance notice) is dropped
while the peer is owed more than ``write_high_water``, and a connection owing
its peer more than ``owed_cap`` in answers (answers of requests already
taken, which back-pressure cannot hold back) is closed.

``SharedBudget`` bounds what all connections of a server hold together:
bytes owed to peers plus bytes of partial frames. Past ``max_bytes`` a
connection that holds any of it stops reading until the total is back under
the limit.

``Lanes`` is RocketMQ's per-request-type thread pools in a single event loop:
each request code belongs to a lane (send, pull, heartbeat, admin, ...);
a lane may use at most ``share`` of the loop's time over a short window,
and a request that waited in its connection longer than the lane's
``max_wait_ms`` is not run. Either way it is answered SYSTEM_BUSY, which
clients treat as "try again / another broker", so one kind of request never
starves the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

MiB = 1024 * 1024


@dataclass(slots=True)
class ConnectionLimits:
    write_high_water: int = 4 * MiB
    write_low_water: int = 1 * MiB
    max_in_flight: int = 4096
    idle_timeout: float = 120.0  # seconds
    frame_timeout: float = 30.0  # seconds
    max_connections_per_address: int = 0  # 0: no limit
    # Answers owed past this close the connection: the reader stops at
    # write_high_water, so only answers of requests taken before (held pulls,
    # at most max_in_flight of them) can add up beyond it. 64 MiB is 16 times
    # the default high-water mark, room for a burst of held pulls completing
    # at once toward a slow reader, and a bound on one peer that reads nothing.
    max_owed: int = 64 * MiB

    @property
    def owed_cap(self) -> int:
        """Bytes owed to a peer beyond which its connection is closed (never
        under 4 times the high-water mark, whatever that is set to)."""
        return max(self.max_owed, 4 * self.write_high_water)

    def problem(self) -> str | None:
        if not 0 < self.write_low_water <= self.write_high_water:
            return "the write low-water mark must be positive and at most the high-water mark"
        if self.max_in_flight <= 0:
            return "the in-flight request limit must be positive"
        if self.idle_timeout <= 0 or self.frame_timeout <= 0:
            return "timeouts must be positive"
        if self.max_connections_per_address < 0:
            return "the connection limit per address must not be negative"
        return None


class ConnectionKeys(Protocol):
    """The connection keys a daemon's config has (broker and name server alike)."""

    write_buffer_high_water_mark: int
    write_buffer_low_water_mark: int
    max_in_flight_requests_per_connection: int
    server_channel_max_idle_time_seconds: int
    frame_read_timeout_seconds: int
    max_connections_per_address: int


def limits_of(config: ConnectionKeys) -> ConnectionLimits:
    """A daemon config's connection keys as ConnectionLimits."""
    return ConnectionLimits(
        write_high_water=config.write_buffer_high_water_mark,
        write_low_water=config.write_buffer_low_water_mark,
        max_in_flight=config.max_in_flight_requests_per_connection,
        idle_timeout=float(config.server_channel_max_idle_time_seconds),
        frame_timeout=float(config.frame_read_timeout_seconds),
        max_connections_per_address=config.max_connections_per_address,
    )


@dataclass(slots=True)
class SharedBudget:
    """Bytes every connection of a server holds for its peers, together.
    ``waiters`` are called (once) when the total falls back under ``max_bytes``.

    Past the limit, one connection at a time, ``finishing``, may go on reading
    the frame it holds part of (and no further): partial frames alone would
    otherwise hold the budget with none of them able to complete (twenty
    16 MiB frames at once stalled until frameReadTimeoutSeconds)."""

    max_bytes: int = 256 * MiB
    used: int = 0
    waiters: list[Callable[[], None]] = field(default_factory=list)
    finishing: object | None = None

    def add(self, n: int) -> None:
        self.used += n
        if n < 0 and self.waiters and self.used <= self.max_bytes:
            waiters, self.waiters = self.waiters, []
            for wake in waiters:
                wake()

    @property
    def over(self) -> bool:
        return self.used > self.max_bytes

    def may_finish(self, owner: object) -> bool:
        """Whether ``owner``, holding part of a frame past the limit, may read
        the rest of it (it becomes ``finishing`` if no one is)."""
        if self.finishing is None:
            self.finishing = owner
        return self.finishing is owner

    def finished(self, owner: object) -> None:
        """``owner`` completed its frame (or closed): another may finish its own."""
        if self.finishing is owner:
            self.finishing = None
            waiters, self.waiters = self.waiters, []
            for wake in waiters:
                wake()


def may_finish_all(owner: object, budgets: Sequence[SharedBudget]) -> bool:
    """``may_finish`` in every one of ``budgets`` at once, or in none: a
    connection counted in several (the partial frame of a connection not yet
    authenticated counts in the daemon's budget and in the pre-auth one,
    protocol/trio/preauth.py) finishes its frame in all of them, so that two
    connections never each hold the turn of one budget and wait for the other."""
    if any(b.finishing is not None and b.finishing is not owner for b in budgets):
        return False
    for b in budgets:
        b.finishing = owner
    return True


@dataclass(slots=True)
class Lane:
    name: str
    share: float = 1.0  # most of the loop's time this lane may use per window
    max_wait_ms: int = 0  # 0: no limit
    busy_in_window: float = 0.0
    refused: int = 0


WINDOW_S = 0.1


@dataclass(slots=True)
class Lanes:
    """Request code -> lane; time used per lane in the current window."""

    lanes: dict[str, Lane] = field(default_factory=dict)
    by_code: dict[int, Lane] = field(default_factory=dict)
    default: Lane = field(default_factory=lambda: Lane("other"))
    window_start: float = 0.0

    def add(self, lane: Lane, codes: list[int]) -> None:
        self.lanes[lane.name] = lane
        for code in codes:
            self.by_code[int(code)] = lane

    def lane(self, code: int) -> Lane:
        return self.by_code.get(code, self.default)

    def _roll(self, now: float) -> None:
        if now - self.window_start >= WINDOW_S:
            self.window_start = now
            for lane in self.lanes.values():
                lane.busy_in_window = 0.0
            self.default.busy_in_window = 0.0

    def refusal(self, lane: Lane, now: float, received_at: float) -> str | None:
        """Why a request of ``lane`` received at ``received_at`` is not run
        now (SYSTEM_BUSY), or None to run it."""
        self._roll(now)
        waited_ms = (now - received_at) * 1000
        if lane.max_wait_ms and waited_ms > lane.max_wait_ms:
            lane.refused += 1
            return (f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period "
                    f"in queue: {waited_ms:.0f}ms, lane: {lane.name}")
        if lane.share < 1.0 and lane.busy_in_window > lane.share * WINDOW_S:
            lane.refused += 1
            return (f"[PCBUSY_CLEAN_QUEUE]broker busy, too many {lane.name} requests and system "
                    "thread pool busy, try again later")
        return None

    def ran(self, lane: Lane, seconds: float) -> None:
        lane.busy_in_window += seconds
