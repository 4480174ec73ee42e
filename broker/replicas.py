"""The broker's side of controller mode, the pure core (RocketMQ 5's ReplicasManager).

A broker with ``enableControllerMode`` and ``controllerAddr`` does not choose its
role: the controller does. ``ReplicasCore`` holds what the broker knows of it and
turns every answer of the controller into one ``Decision``:

    FENCED -> REGISTERING -> (ELECTING) -> MASTER | SLAVE

- FENCED: started, no id from the controller yet. No writes, no registration with
  the name servers as a master (the broker serves reads only).
- REGISTERING: the id is held (applied, kept in ``storePathRootDir/brokerIdentity``);
  the broker registers with the controller and asks for its broker name's master.
- ELECTING: no live master: the broker asks the controller for an election.
- MASTER / SLAVE: the controller said so, at a ``masterEpoch``.

Every view of the controller carries its ``masterEpoch``: a view older than the
one acted on is stale and ignored (a late notification, a slow poll). A view at
the same epoch changes the role only when the broker has not taken one yet; a
master's SyncStateSet moves only to a higher SyncStateSet epoch.

``BrokerIdentity`` is the id file: JSON with a CRC, written to a temporary file,
fsynced and renamed (call ``save`` from a worker thread).
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from protocol.names import addr_problem

IDENTITY_FILE = "brokerIdentity"
MAX_IDENTITY_BYTES = 4096


class Phase(Enum):
    FENCED = "fenced"
    REGISTERING = "registering"
    ELECTING = "electing"
    MASTER = "master"
    SLAVE = "slave"


class Act(Enum):
    NOTHING = "nothing"  # the view changes nothing (or is stale: ``stale``)
    ELECT = "elect"  # no live master: ask for an election
    MASTER = "master"  # become (or stay, at a new epoch) the master
    SLAVE = "slave"  # follow ``master_id`` at ``master_address``
    SYNC_STATE = "sync-state"  # a master: take the newer SyncStateSet


@dataclass(frozen=True, slots=True)
class ControllerView:
    """What the controller said about this broker name: its master (None: none
    alive), the master's epoch and the SyncStateSet (members, epoch)."""

    master_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    act: Act
    view: ControllerView | None = None
    stale: bool = False  # the view was older than what the broker acted on
    reason: str = ""


def view_problem(view: ControllerView) -> str | None:
    """Why a view from the network cannot be acted on (None: it can)."""
    if view.master_id is not None:
        if view.master_id < 0:
            return f"bad master id {view.master_id}"
        if view.master_address is None:
            return "a master without an address"
        problem = addr_problem(view.master_address)
        if problem is not None:
            return f"master address: {problem}"
        if view.sync_state_set and view.master_id not in view.sync_state_set:
            return f"the master {view.master_id} is not in its SyncStateSet"
    if view.master_epoch < 0 or view.sync_state_set_epoch < 0:
        return "negative epoch"
    return None


class ReplicasCore:
    """What the broker knows of the controller's decisions (no I/O, no clock)."""

    def __init__(self) -> None:
        self.phase = Phase.FENCED
        self.broker_id: int | None = None  # the controller's id for this broker
        self.master_epoch = -1  # the epoch of the last role taken
        self.master_id: int | None = None
        self.master_address: str | None = None
        self.sync_state_set_epoch = -1
        self.stale_views = 0  # ignored because older (figures, tests)

    @property
    def fenced(self) -> bool:
        """True until the controller has given this broker a role."""
        return self.phase not in (Phase.MASTER, Phase.SLAVE)

    def got_id(self, broker_id: int) -> None:
        if broker_id < 1:
            raise ValueError(f"a controller's broker id is 1 or more, not {broker_id}")
        self.broker_id = broker_id
        if self.phase is Phase.FENCED:
            self.phase = Phase.REGISTERING

    def decide(self, view: ControllerView) -> Decision:
        """The step ``view`` asks for (the broker must hold an id)."""
        if self.broker_id is None:
            raise RuntimeError("the broker has no id from the controller yet")
        problem = view_problem(view)
        if problem is not None:
            return Decision(Act.NOTHING, view, reason=problem)
        if view.master_epoch < self.master_epoch:
            self.stale_views += 1
            return Decision(Act.NOTHING, view, stale=True,
                            reason=f"masterEpoch {view.master_epoch} is older than "
                                   f"{self.master_epoch}")
        if view.master_id is None:
            return Decision(Act.ELECT, view, reason="no live master")
        newer = view.master_epoch > self.master_epoch
        if view.master_id == self.broker_id:
            if self.phase is not Phase.MASTER or newer:
                return Decision(Act.MASTER, view, reason="elected")
            if view.sync_state_set and view.sync_state_set_epoch > self.sync_state_set_epoch:
                return Decision(Act.SYNC_STATE, view, reason="a newer SyncStateSet")
            return Decision(Act.NOTHING, view)
        if (self.phase is not Phase.SLAVE or newer or view.master_id != self.master_id
                or view.master_address != self.master_address):
            return Decision(Act.SLAVE, view, reason="another replica is master")
        return Decision(Act.NOTHING, view)

    def electing(self) -> None:
        if self.fenced:
            self.phase = Phase.ELECTING

    def applied(self, decision: Decision) -> None:
        """The broker made the change ``decision`` asked for."""
        view = decision.view
        if view is None or decision.act in (Act.NOTHING, Act.ELECT):
            return
        if decision.act is Act.SYNC_STATE:
            self.sync_state_set_epoch = max(self.sync_state_set_epoch, view.sync_state_set_epoch)
            return
        self.phase = Phase.MASTER if decision.act is Act.MASTER else Phase.SLAVE
        self.master_epoch = view.master_epoch
        self.master_id = view.master_id
        self.master_address = view.master_address
        self.sync_state_set_epoch = view.sync_state_set_epoch

    def sync_state_taken(self, epoch: int) -> None:
        """A master took the SyncStateSet of ``epoch`` (its own proposal's answer)."""
        self.sync_state_set_epoch = max(self.sync_state_set_epoch, epoch)

    def describe(self) -> dict[str, Any]:
        return {"phase": self.phase.value, "controllerBrokerId": self.broker_id,
                "masterEpoch": self.master_epoch, "masterId": self.master_id,
                "syncStateSetEpoch": self.sync_state_set_epoch}


# ---- the id file -----------------------------------------------------------------------


class IdentityError(ValueError):
    """The id file is damaged or belongs to another broker name."""


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """The id the controller gave this broker (``confirmed`` once applied) and the
    check code it was applied with (``address;timestamp``: the same broker may
    apply again after a crash between the two steps)."""

    cluster: str
    broker_name: str
    broker_id: int
    check_code: str
    confirmed: bool

    def encode(self) -> bytes:
        body = json.dumps({"cluster": self.cluster, "brokerName": self.broker_name,
                           "brokerId": self.broker_id, "checkCode": self.check_code,
                           "confirmed": self.confirmed}, sort_keys=True)
        return json.dumps({"crc": zlib.crc32(body.encode()), "body": body}).encode()

    @classmethod
    def decode(cls, data: bytes) -> BrokerIdentity:
        if len(data) > MAX_IDENTITY_BYTES:
            raise IdentityError("the broker identity file is too large")
        try:
            outer = json.loads(data)
            body = outer["body"]
            if not isinstance(body, str) or zlib.crc32(body.encode()) != outer["crc"]:
                raise IdentityError("the broker identity file's checksum does not match")
            d = json.loads(body)
            ident = cls(str(d["cluster"]), str(d["brokerName"]), d["brokerId"],
                        str(d["checkCode"]), d["confirmed"])
        except (ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, IdentityError):
                raise
            raise IdentityError(f"the broker identity file cannot be read: {exc}") from exc
        if type(ident.broker_id) is not int or ident.broker_id < 1 \
                or not isinstance(ident.confirmed, bool):
            raise IdentityError("the broker identity file holds a bad broker id")
        return ident

    @staticmethod
    def path(store_root: str | Path) -> Path:
        return Path(store_root) / IDENTITY_FILE

    @classmethod
    def load(cls, store_root: str | Path) -> BrokerIdentity | None:
        """The saved identity (None: none yet). IdentityError when damaged."""
        try:
            data = cls.path(store_root).read_bytes()
        except FileNotFoundError:
            return None
        return cls.decode(data)

    def save(self, store_root: str | Path) -> None:
        """Blocking: temporary file, fsync, rename, directory fsync."""
        path = self.path(store_root)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(self.encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


REGISTER_RETRY_FIRST_S = 0.5
REGISTER_RETRY_MAX_S = 5.0


class RegisterRetry:
    """Controller mode, one name server: how soon to register again while the last
    registration did not settle the role (RocketMQ 5 registers again on a role
    change). A master's registration not taken, or a slave's answer not naming the
    master the controller chose: again after 0.5 s, doubling up to 5 s; settled:
    the periodic interval (``None``)."""

    def __init__(self, first: float = REGISTER_RETRY_FIRST_S,
                 most: float = REGISTER_RETRY_MAX_S) -> None:
        self.first = first
        self.most = most
        self._next: float | None = None

    def settled(self, done: bool) -> None:
        """The outcome of a registration: settled or not."""
        if done:
            self._next = None
        elif self._next is None:
            self._next = self.first
        else:
            self._next = min(self.most, self._next * 2)

    def restart(self) -> None:
        """A role change: the next unsettled registration retries after ``first``."""
        self._next = None

    def wait(self) -> float | None:
        """Seconds until the next try, or None (the periodic interval)."""
        return self._next
