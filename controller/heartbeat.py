"""Which replicas are alive: the last BROKER_HEARTBEAT of each (pure; time passed in).

RocketMQ's DefaultBrokerHeartbeatManager: per replica (broker name, broker id) the time
of its last heart-beat, its timeout, and what it said (epoch, max offset, confirm
offset, electionPriority), which the election ranks by. A replica is alive while
``now - last_seen <= timeout``; ``expire(now)`` takes out the replicas past it (the
controller's scan then elects for those that were masters).

The timeout is the broker's ``heartbeatTimeoutMills`` when it sends one, but never
more than the controller's ``brokerHeartbeatTimeout``: a broker may ask to be judged
dead sooner, not to hold off a failover. The table holds at most ``max_entries``
replicas: a heart-beat of a new replica past that is refused (the network is
hostile; a real deployment has a few hundred).

Each entry also keeps the connection its last heart-beat came over. When that
connection closes (``drop_channel``), the replica is taken out at once, as RocketMQ's
``onBrokerChannelClose``: a killed broker's sockets are closed by its kernel, so the
controller need not wait out the timeout. A replica that has already heart-beaten over
a newer connection (it restarted, or reconnected) is not touched by the old one closing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from controller.replicas import LiveInfo
from protocol.controller import DEFAULT_ELECTION_PRIORITY

DEFAULT_MAX_ENTRIES = 65_536
MIN_TIMEOUT_S = 0.05


@dataclass(slots=True)
class BrokerLive:
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    last_seen: float
    timeout: float  # seconds
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = DEFAULT_ELECTION_PRIORITY
    # the connection of the last heart-beat (identity only; None when not known)
    channel: object | None = field(default=None, compare=False)

    def alive_at(self, now: float) -> bool:
        return now - self.last_seen <= self.timeout

    def info(self) -> LiveInfo:
        return LiveInfo(self.epoch, self.max_offset, self.election_priority)


class HeartbeatTable:
    def __init__(self, timeout_s: float, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.timeout_s = timeout_s  # brokerHeartbeatTimeout (may change at run time)
        self.max_entries = max_entries
        self._live: dict[tuple[str, int], BrokerLive] = {}
        self.refused = 0

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[BrokerLive]:
        return iter(list(self._live.values()))

    def beat(self, now: float, cluster: str, broker_name: str, broker_id: int, address: str,
             *, epoch: int | None = None, max_offset: int | None = None,
             confirm_offset: int | None = None, timeout_ms: int | None = None,
             election_priority: int | None = None, channel: object | None = None) -> bool:
        """Record a heart-beat (that came over ``channel``); False when the table is
        full and this replica new."""
        key = (broker_name, broker_id)
        timeout = self.timeout_s
        if timeout_ms:
            timeout = max(MIN_TIMEOUT_S, min(timeout, timeout_ms / 1000))
        entry = self._live.get(key)
        if entry is None:
            if len(self._live) >= self.max_entries:
                self.refused += 1
                return False
            entry = self._live[key] = BrokerLive(cluster, broker_name, broker_id, address, now,
                                                 timeout)
        entry.cluster, entry.address, entry.last_seen, entry.timeout = (
            cluster, address, now, timeout)
        if channel is not None:
            entry.channel = channel
        if epoch is not None:
            entry.epoch = epoch
        if max_offset is not None:
            entry.max_offset = max_offset
        if confirm_offset is not None:
            entry.confirm_offset = confirm_offset
        if election_priority is not None:
            entry.election_priority = election_priority
        return True

    def get(self, broker_name: str, broker_id: int) -> BrokerLive | None:
        return self._live.get((broker_name, broker_id))

    def is_alive(self, now: float, broker_name: str, broker_id: int) -> bool:
        entry = self._live.get((broker_name, broker_id))
        return entry is not None and entry.alive_at(now)

    def expire(self, now: float) -> list[BrokerLive]:
        """Take out and return every replica silent past its timeout."""
        gone = [e for e in self._live.values() if not e.alive_at(now)]
        for e in gone:
            del self._live[(e.broker_name, e.broker_id)]
        return gone

    def drop_channel(self, channel: object) -> list[BrokerLive]:
        """Take out and return the replicas whose last heart-beat came over ``channel``
        (it closed)."""
        gone = [e for e in self._live.values() if e.channel is channel]
        for e in gone:
            del self._live[(e.broker_name, e.broker_id)]
        return gone

    def forget(self, broker_name: str, broker_ids: set[int] | None = None) -> None:
        """Drop replicas whose data was cleaned (all of ``broker_name`` when None)."""
        for key in [k for k in self._live if k[0] == broker_name
                    and (broker_ids is None or k[1] in broker_ids)]:
            del self._live[key]

    def at(self, now: float) -> LivenessAt:
        """The table as ``controller.replicas.Liveness`` at ``now``."""
        return LivenessAt(self, now)


class LivenessAt:
    """``HeartbeatTable`` seen at one instant (what the state machine asks)."""

    __slots__ = ("table", "now")

    def __init__(self, table: HeartbeatTable, now: float) -> None:
        self.table, self.now = table, now

    def live_info(self, broker_name: str, broker_id: int) -> LiveInfo | None:
        entry = self.table.get(broker_name, broker_id)
        if entry is None or not entry.alive_at(self.now):
            return None
        return entry.info()
