"""The SyncStateSet of controller mode (RocketMQ 5, RIP-44): the pure cores.

A broker group in controller mode has one master and a SyncStateSet: the
broker ids (the master's among them) whose logs hold everything the master
acknowledged. The controller owns it; the master only proposes changes
(ALTER_SYNC_STATE_SET) and applies what the controller answers. Every
accepted change has a higher epoch.

- ``SyncStateSet``: the value (master id, members, epoch); ``SyncStateHolder``
  the live one, with observers, as ``broker.role.RoleState`` holds the role.
- ``needed_acks`` / ``offset_held_by``: when a send is acknowledged
  (minInSyncReplicas, allAckInSyncStateSet) and so the confirm offset: the
  highest offset enough members hold.
- ``CatchUp`` / ``SyncStateDecider``: the master's shrink and expand
  proposals. A member whose log has not caught up with the master's for
  haMaxTimeSlaveNotCatchup is proposed out, and a member whose HA connection
  closed at once (RocketMQ's AutoSwitchHAService.removeConnection); a slave outside whose log
  reached the confirm offset in the current epoch is proposed back in. One
  proposal is in flight at a time.

No sockets, clocks or trio: time is passed in, proposals go to a callback.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

MAX_BROKER_ID = 2**31 - 1
MAX_MEMBERS = 64  # more replicas than any broker group has
# haMaxTimeSlaveNotCatchup (ms): a member not caught up this long is proposed out
DEFAULT_MAX_NOT_CATCHUP_MS = 15_000
MAX_SAMPLES = 1024  # (when, master end) points kept per slave to date its catch-up


class SyncStateError(ValueError):
    """A SyncStateSet that cannot be, or a change older than the one in force."""


@dataclass(frozen=True, slots=True)
class SyncStateSet:
    """The broker ids in sync with the master (the master's among them), at ``epoch``."""

    master_id: int
    members: frozenset[int]
    epoch: int

    def __post_init__(self) -> None:
        problem = sync_state_problem(self.master_id, self.members, self.epoch)
        if problem is not None:
            raise SyncStateError(problem)

    @property
    def slaves(self) -> frozenset[int]:
        return self.members - {self.master_id}

    def describe(self) -> dict[str, object]:
        return {"masterId": self.master_id, "syncStateSet": sorted(self.members),
                "syncStateSetEpoch": self.epoch}


def sync_state_problem(master_id: object, members: object, epoch: object) -> str | None:
    """Why these cannot make a SyncStateSet (None: they can). Values may come
    from the network: every type and bound is checked."""
    if not _broker_id(master_id):
        return f"bad master id {master_id!r}"
    if not isinstance(members, (set, frozenset)):
        return "the members must be a set of broker ids"
    if not 0 < len(members) <= MAX_MEMBERS:
        return f"a SyncStateSet has 1..{MAX_MEMBERS} members, not {len(members)}"
    bad = [m for m in members if not _broker_id(m)]
    if bad:
        return f"bad member id {bad[0]!r}"
    if master_id not in members:
        return f"the master {master_id} is not in the SyncStateSet {sorted(members)}"
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < 2**62:
        return f"bad SyncStateSet epoch {epoch!r}"
    return None


def _broker_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_BROKER_ID


SyncStateObserver = Callable[[SyncStateSet | None, SyncStateSet], None]


class SyncStateHolder:
    """The live SyncStateSet of a master (None before the controller told one)."""

    def __init__(self, initial: SyncStateSet | None = None) -> None:
        self.current = initial
        self._observers: list[SyncStateObserver] = []

    def observe(self, observer: SyncStateObserver) -> None:
        """``observer(old, new)`` is called at every change, once the live value moved."""
        self._observers.append(observer)

    def set(self, new: SyncStateSet) -> bool:
        """Take ``new`` (True) unless it is the value in force (False). A lower
        epoch, or the same epoch with other members or another master,
        raises SyncStateError: the change is stale (the controller's epoch
        grows at every change of the group, elections included). ``clear``
        starts a new term (the broker's role changed)."""
        old = self.current
        if old == new:
            return False
        if old is not None:
            if new.epoch < old.epoch:
                raise SyncStateError(f"SyncStateSet epoch {new.epoch} is older than the "
                                     f"epoch in force {old.epoch}")
            if new.epoch == old.epoch:
                raise SyncStateError(
                    f"SyncStateSet epoch {new.epoch} already holds {sorted(old.members)} "
                    f"(master {old.master_id}), not {sorted(new.members)} "
                    f"(master {new.master_id})")
        self.current = new
        for observer in self._observers:
            observer(old, new)
        return True

    def clear(self) -> None:
        """No SyncStateSet (the broker stopped being a master)."""
        self.current = None


# ---- when a send is acknowledged -------------------------------------------------------


def needed_acks(sss: SyncStateSet, min_in_sync: int, all_ack: bool) -> int:
    """How many members (the master counting) must hold a send: all of them
    (allAckInSyncStateSet), else minInSyncReplicas."""
    return len(sss.members) if all_ack else max(1, min_in_sync)


def replicas_short(sss: SyncStateSet | None, min_in_sync: int) -> str | None:
    """Why sends are refused IN_SYNC_REPLICAS_NOT_ENOUGH (None: they are not)."""
    if sss is None:
        return "no SyncStateSet yet: the controller has not confirmed this master"
    if len(sss.members) < min_in_sync:
        return (f"in-sync replicas not enough: the SyncStateSet {sorted(sss.members)} has "
                f"{len(sss.members)} of minInSyncReplicas={min_in_sync}")
    return None


def offset_held_by(sss: SyncStateSet, master_end: int, acked: Mapping[int, int],
                   need: int) -> int:
    """The highest offset at least ``need`` members hold: the master holds
    ``master_end``, a slave what it acknowledged (``acked`` by broker id; a
    member missing there holds nothing). ``need`` above the members: 0."""
    held = sorted((master_end if m == sss.master_id else min(acked.get(m, 0), master_end)
                   for m in sss.members), reverse=True)
    if need <= 0:
        return master_end
    if need > len(held):
        return 0
    return held[need - 1]


# ---- shrink and expand (the master's side) ----------------------------------------------


class CatchUp:
    """When one slave last held everything the master had: each transfer
    notes (when, the master's end); a report that acknowledges an end dates
    the catch-up at that transfer's time, and an acknowledgement of the
    master's present end dates it now."""

    def __init__(self, now: float, connected: bool = True) -> None:
        self.last_caught_up = now  # a new connection starts its grace period now
        self.connected = connected  # a slave gone keeps its date: it leaves once it is old
        # its connection closed (not merely never seen since this master began): a
        # member leaves at once, as RocketMQ's removeConnection proposes
        self.dropped = False
        self.acked = 0
        self.samples: deque[tuple[float, int]] = deque()

    def on_sent(self, master_end: int, now: float) -> None:
        s = self.samples
        if s and s[-1][1] >= master_end:
            return  # the earlier point of the same end dates a catch-up as well
        s.append((now, master_end))
        if len(s) > MAX_SAMPLES:  # an older point lost only dates a catch-up later
            s.popleft()

    def on_report(self, acked: int, master_end: int, now: float) -> None:
        self.acked = max(self.acked, acked)
        s = self.samples
        while s and s[0][1] <= acked:
            when, _end = s.popleft()
            self.last_caught_up = max(self.last_caught_up, when)
        if acked >= master_end:
            self.last_caught_up = now
            s.clear()


@dataclass(frozen=True, slots=True)
class Proposal:
    """A change the master asks the controller for (ALTER_SYNC_STATE_SET)."""

    master_id: int
    members: frozenset[int]
    epoch: int  # the SyncStateSet epoch the proposal starts from
    removed: frozenset[int] = frozenset()
    added: frozenset[int] = frozenset()


@dataclass
class SyncStateDecider:
    """The master's shrink and expand decisions (RocketMQ's
    AutoSwitchHAService.maybeShrinkSyncStateSet / maybeExpandInSyncStateSet).

    ``tick`` looks at the slaves (``CatchUp`` by broker id: the connected ones)
    and proposes at most one change, handed to ``propose``; no other is made
    until the controller's answer changes the set (``tick`` sees a new epoch)
    or ``retry_s`` passed."""

    propose: Callable[[Proposal], None]
    max_not_catchup_s: float = DEFAULT_MAX_NOT_CATCHUP_MS / 1000
    retry_s: float = 5.0
    pending: Proposal | None = None
    pending_at: float = 0.0
    proposed: list[Proposal] = field(default_factory=list)  # the latest few, for status

    def decide(self, now: float, sss: SyncStateSet, slaves: Mapping[int, CatchUp],
               confirm_offset: int, epoch_start: int) -> Proposal | None:
        """The change due now (pure: nothing remembered). Members unknown to
        ``slaves``, whose connection closed (``dropped``), or not caught up for
        max_not_catchup_s (connected or not) leave; a connected slave outside the set whose acknowledged offset
        reached the confirm offset and the current epoch's start
        (``epoch_start``) joins."""
        removed = frozenset(m for m in sss.slaves
                            if m not in slaves or slaves[m].dropped
                            or now - slaves[m].last_caught_up > self.max_not_catchup_s)
        added = frozenset(b for b, c in slaves.items()
                          if b not in sss.members and b != sss.master_id and c.connected
                          and c.acked >= confirm_offset and c.acked >= epoch_start
                          and now - c.last_caught_up <= self.max_not_catchup_s)
        if not removed and not added:
            return None
        members = (sss.members - removed) | added
        if len(members) > MAX_MEMBERS:
            return None
        return Proposal(sss.master_id, frozenset(members), sss.epoch, removed, added)

    def tick(self, now: float, sss: SyncStateSet, slaves: Mapping[int, CatchUp],
             confirm_offset: int, epoch_start: int) -> Proposal | None:
        """``decide``, proposed unless a proposal from this epoch is in flight."""
        p = self.pending
        if p is not None and p.epoch == sss.epoch and now - self.pending_at < self.retry_s:
            return None
        self.pending = None
        proposal = self.decide(now, sss, slaves, confirm_offset, epoch_start)
        if proposal is None:
            return None
        self.pending, self.pending_at = proposal, now
        self.proposed = [*self.proposed[-7:], proposal]
        self.propose(proposal)
        return proposal


def members_acked(connections: Iterable[tuple[int | None, int]]) -> dict[int, int]:
    """Broker id -> the highest offset its connections acknowledged (a slave
    reconnecting may hold two for a moment); connections with no id skipped."""
    out: dict[int, int] = {}
    for broker_id, acked in connections:
        if broker_id is not None and acked > out.get(broker_id, -1):
            out[broker_id] = acked
    return out
