"""The controller's state and every change to it, as pure functions (no trio, no I/O).

Per broker name (a "broker set", RocketMQ's BrokerReplicaInfo + SyncStateInfo): its
cluster, its replicas (broker id -> address and the check code the id was applied
with), the master's id, ``masterEpoch``, the SyncStateSet and ``syncStateSetEpoch``.

Each operation takes a ``ControllerState`` (immutable) and a request, and returns a
``Result``: a ``Status`` (the wire maps it to RocketMQ's response code, one table in
controller/processor.py), a remark, the new state (the same object when nothing
changed), what the caller answers with (``value``) and the broker names whose
replicas must be told of a new master (``notify``). The caller saves a changed state
before it answers or notifies.

Invariants, kept by every operation:
- masterEpoch only grows; it grows by one at each election (a new master, or none
  when the master died and no replica could take over);
- syncStateSetEpoch only grows; it grows by one at each change of the set;
- a broker set with a master has it in its SyncStateSet; the SyncStateSet holds
  only registered replicas.

Who is alive is the caller's to say (``Liveness``: controller/heartbeat.py's table at
``now``); so is the election's tie-break data (epoch, max offset, priority).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Generic, Protocol, TypeVar

from protocol.controller import (
    DEFAULT_ELECTION_PRIORITY,
    FIRST_BROKER_CONTROLLER_ID,
    MAX_REPLICAS,
    check_code_address,
)
from protocol.names import addr_problem, broker_name_problem, cluster_name_problem, shown

STATE_FORMAT = 1
DEFAULT_MAX_BROKER_NAMES = 4096


class Status(Enum):
    """What an operation came to; the names are RocketMQ's response codes without
    their ``CONTROLLER_`` prefix."""

    SUCCESS = "SUCCESS"
    FENCED_MASTER_EPOCH = "FENCED_MASTER_EPOCH"
    FENCED_SYNC_STATE_SET_EPOCH = "FENCED_SYNC_STATE_SET_EPOCH"
    INVALID_MASTER = "INVALID_MASTER"
    INVALID_REPLICAS = "INVALID_REPLICAS"
    MASTER_NOT_AVAILABLE = "MASTER_NOT_AVAILABLE"
    INVALID_REQUEST = "INVALID_REQUEST"
    BROKER_NOT_ALIVE = "BROKER_NOT_ALIVE"
    BROKER_METADATA_NOT_EXIST = "BROKER_METADATA_NOT_EXIST"
    INVALID_CLEAN_BROKER_METADATA = "INVALID_CLEAN_BROKER_METADATA"
    BROKER_NEED_TO_BE_REGISTERED = "BROKER_NEED_TO_BE_REGISTERED"
    MASTER_STILL_EXIST = "MASTER_STILL_EXIST"
    ELECT_MASTER_FAILED = "ELECT_MASTER_FAILED"
    ALTER_SYNC_STATE_SET_FAILED = "ALTER_SYNC_STATE_SET_FAILED"
    BROKER_ID_INVALID = "BROKER_ID_INVALID"


class StateFormatError(ValueError):
    """Saved state that cannot be read back (damaged, or of another format)."""


@dataclass(frozen=True, slots=True)
class Replica:
    broker_id: int
    address: str
    check_code: str = ""  # "address;timestamp" the id was applied with


@dataclass(frozen=True, slots=True)
class BrokerSet:
    cluster: str
    broker_name: str
    replicas: Mapping[int, Replica] = field(default_factory=dict)
    master_id: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    @property
    def never_elected(self) -> bool:
        return self.master_epoch == 0 and self.master_id is None

    def address(self, broker_id: int | None) -> str | None:
        replica = self.replicas.get(broker_id) if broker_id is not None else None
        return replica.address if replica is not None else None

    def view(self) -> MasterView:
        return MasterView(self.cluster, self.broker_name, self.master_id,
                          self.address(self.master_id), self.master_epoch,
                          self.sync_state_set, self.sync_state_set_epoch,
                          {i: r.address for i, r in self.replicas.items()})


@dataclass(frozen=True, slots=True)
class MasterView:
    """What a broker set tells its replicas and the tools: its master and set."""

    cluster: str
    broker_name: str
    master_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    addresses: Mapping[int, str]


@dataclass(frozen=True, slots=True)
class ControllerState:
    broker_sets: Mapping[str, BrokerSet] = field(default_factory=dict)

    def get(self, broker_name: str) -> BrokerSet | None:
        return self.broker_sets.get(broker_name)

    def with_set(self, bs: BrokerSet) -> ControllerState:
        sets = dict(self.broker_sets)
        sets[bs.broker_name] = bs
        return ControllerState(sets)

    def without(self, broker_name: str) -> ControllerState:
        sets = dict(self.broker_sets)
        sets.pop(broker_name, None)
        return ControllerState(sets)


@dataclass(frozen=True, slots=True)
class LiveInfo:
    """What the last heart-beat of a replica said (controller/heartbeat.py)."""

    epoch: int = 0
    max_offset: int = 0
    election_priority: int = DEFAULT_ELECTION_PRIORITY


class Liveness(Protocol):
    def live_info(self, broker_name: str, broker_id: int) -> LiveInfo | None:
        """The replica's last heart-beat if it is alive now, else None."""
        ...


class AllAlive:
    """Every replica alive with no heart-beat data (tests, tools)."""

    def live_info(self, broker_name: str, broker_id: int) -> LiveInfo | None:
        return LiveInfo()


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    state: ControllerState
    status: Status = Status.SUCCESS
    remark: str | None = None
    value: T | None = None
    notify: tuple[str, ...] = ()  # broker names whose replicas learn of a new master
    changed: bool = False

    @property
    def ok(self) -> bool:
        return self.status is Status.SUCCESS


@dataclass(frozen=True, slots=True)
class Limits:
    max_broker_names: int = DEFAULT_MAX_BROKER_NAMES
    max_replicas: int = MAX_REPLICAS


def _refuse(state: ControllerState, status: Status, remark: str,
            value: T | None = None) -> Result[T]:
    return Result(state, status, remark, value)


def _changed(state: ControllerState, value: T | None = None, notify: tuple[str, ...] = (),
             status: Status = Status.SUCCESS, remark: str | None = None) -> Result[T]:
    return Result(state, status, remark, value, notify, True)


def _cluster_mismatch(bs: BrokerSet, cluster: str) -> str | None:
    if cluster and cluster != bs.cluster:
        return (f"broker name {bs.broker_name} belongs to cluster {bs.cluster}, "
                f"not {shown(cluster)}")
    return None


# ---- broker ids -----------------------------------------------------------------------


def next_broker_id(state: ControllerState, broker_name: str) -> int:
    """CONTROLLER_GET_NEXT_BROKER_ID: the id a new replica of ``broker_name`` should
    apply for (the first: 1)."""
    bs = state.get(broker_name)
    if bs is None or not bs.replicas:
        return FIRST_BROKER_CONTROLLER_ID
    return max(bs.replicas) + 1


def apply_broker_id(state: ControllerState, cluster: str, broker_name: str, broker_id: int,
                    check_code: str, limits: Limits = Limits()) -> Result[None]:
    """CONTROLLER_APPLY_BROKER_ID: give ``broker_id`` to the broker whose check code
    (``address;timestamp``) is given. A new broker name starts at id 1; an id already
    given is given again only to the same check code (the same broker, restarted)."""
    for problem in (cluster_name_problem(cluster), broker_name_problem(broker_name)):
        if problem is not None:
            return _refuse(state, Status.INVALID_REQUEST, problem)
    address = check_code_address(check_code)
    problem = addr_problem(address)
    if problem is not None:
        return _refuse(state, Status.INVALID_REQUEST,
                       f"registerCheckCode must start with the broker's address: {problem}")
    if broker_id < FIRST_BROKER_CONTROLLER_ID:
        return _refuse(state, Status.BROKER_ID_INVALID,
                       f"broker ids start at {FIRST_BROKER_CONTROLLER_ID}, not {broker_id}")
    bs = state.get(broker_name)
    replica = Replica(broker_id, address, check_code)
    if bs is None:
        if broker_id != FIRST_BROKER_CONTROLLER_ID:
            return _refuse(state, Status.BROKER_ID_INVALID,
                           f"broker name {broker_name} is not registered: its first broker "
                           f"applies for id {FIRST_BROKER_CONTROLLER_ID}, not {broker_id}")
        if len(state.broker_sets) >= limits.max_broker_names:
            return _refuse(state, Status.INVALID_REQUEST,
                           f"the controller holds {len(state.broker_sets)} broker names "
                           f"(controllerMaxBrokerNames); clean some first")
        return _changed(state.with_set(BrokerSet(cluster, broker_name, {broker_id: replica})))
    mismatch = _cluster_mismatch(bs, cluster)
    if mismatch is not None:
        return _refuse(state, Status.INVALID_REQUEST, mismatch)
    held = bs.replicas.get(broker_id)
    if held is not None:
        if held.check_code != check_code:
            return _refuse(state, Status.BROKER_ID_INVALID,
                           f"broker id {broker_id} of {broker_name} is held by another "
                           f"broker ({held.address})")
        return Result(state)  # the same broker again: nothing changes
    if len(bs.replicas) >= limits.max_replicas:
        return _refuse(state, Status.INVALID_REQUEST,
                       f"broker name {broker_name} has {len(bs.replicas)} replicas, the most "
                       f"allowed")
    replicas = dict(bs.replicas)
    replicas[broker_id] = replica
    return _changed(state.with_set(replace(bs, replicas=replicas)))


# ---- registration and look-ups ---------------------------------------------------------


def register_broker(state: ControllerState, cluster: str, broker_name: str, broker_id: int,
                    address: str, liveness: Liveness) -> Result[MasterView]:
    """CONTROLLER_REGISTER_BROKER: a replica holding ``broker_id`` says where it
    listens (its address is updated when it moved); the answer is its broker set's
    master (only when alive) and SyncStateSet."""
    bs = state.get(broker_name)
    if bs is None:
        return _refuse(state, Status.BROKER_NEED_TO_BE_REGISTERED,
                       f"broker name {broker_name} has no broker id applied yet")
    mismatch = _cluster_mismatch(bs, cluster)
    if mismatch is not None:
        return _refuse(state, Status.INVALID_REQUEST, mismatch)
    held = bs.replicas.get(broker_id)
    if held is None:
        return _refuse(state, Status.BROKER_NEED_TO_BE_REGISTERED,
                       f"broker id {broker_id} of {broker_name} was not applied for")
    changed = False
    if held.address != address:
        replicas = dict(bs.replicas)
        replicas[broker_id] = replace(held, address=address)
        bs = replace(bs, replicas=replicas)
        state = state.with_set(bs)
        changed = True
    view = bs.view()
    if view.master_id is not None and liveness.live_info(broker_name, view.master_id) is None:
        view = replace(view, master_id=None, master_address=None)
    return Result(state, value=view, changed=changed)


def replica_info(state: ControllerState, broker_name: str) -> Result[MasterView]:
    """CONTROLLER_GET_REPLICA_INFO."""
    bs = state.get(broker_name)
    if bs is None:
        return _refuse(state, Status.BROKER_METADATA_NOT_EXIST,
                       f"broker name {broker_name} is unknown to the controller")
    return Result(state, value=bs.view())


# ---- the SyncStateSet ----------------------------------------------------------------


def alter_sync_state_set(state: ControllerState, broker_name: str, master_id: int,
                         master_epoch: int, new_set: Iterable[int], sync_state_set_epoch: int,
                         liveness: Liveness) -> Result[MasterView]:
    """CONTROLLER_ALTER_SYNC_STATE_SET: the master (``master_id`` at ``master_epoch``)
    shrinks or expands its SyncStateSet from the one of ``sync_state_set_epoch``.
    Refused when either epoch is stale, when the asker is not the master, when a member
    is not a replica or not alive, or when the master is left out of the new set."""
    wanted = frozenset(new_set)
    bs = state.get(broker_name)
    if bs is None:
        return _refuse(state, Status.ALTER_SYNC_STATE_SET_FAILED,
                       f"broker name {broker_name} is unknown to the controller")
    if bs.master_id is None or bs.master_id != master_id:
        return _refuse(state, Status.INVALID_MASTER,
                       f"the master of {broker_name} is {bs.master_id}, not {master_id}")
    if master_epoch != bs.master_epoch:
        return _refuse(state, Status.FENCED_MASTER_EPOCH,
                       f"masterEpoch of {broker_name} is {bs.master_epoch}, not {master_epoch}")
    if sync_state_set_epoch != bs.sync_state_set_epoch:
        return _refuse(state, Status.FENCED_SYNC_STATE_SET_EPOCH,
                       f"syncStateSetEpoch of {broker_name} is {bs.sync_state_set_epoch}, "
                       f"not {sync_state_set_epoch}")
    if wanted == bs.sync_state_set:
        return _refuse(state, Status.ALTER_SYNC_STATE_SET_FAILED,
                       "the new SyncStateSet is the current one")
    for member in sorted(wanted):
        if member not in bs.replicas:
            return _refuse(state, Status.INVALID_REPLICAS,
                           f"broker id {member} is not a replica of {broker_name}")
        if liveness.live_info(broker_name, member) is None:
            return _refuse(state, Status.BROKER_NOT_ALIVE,
                           f"broker id {member} of {broker_name} is not alive")
    if bs.master_id not in wanted:
        return _refuse(state, Status.ALTER_SYNC_STATE_SET_FAILED,
                       f"the new SyncStateSet leaves out the master ({bs.master_id})")
    bs = replace(bs, sync_state_set=wanted, sync_state_set_epoch=bs.sync_state_set_epoch + 1)
    return _changed(state.with_set(bs), bs.view())


# ---- elections -----------------------------------------------------------------------


def _best(broker_name: str, candidates: Iterable[int], liveness: Liveness) -> int | None:
    """The alive candidate with the highest epoch, then the highest max offset, then
    the highest priority (the lowest electionPriority number), then the lowest id."""
    ranked = []
    for broker_id in candidates:
        info = liveness.live_info(broker_name, broker_id)
        if info is not None:
            ranked.append((-info.epoch, -info.max_offset, info.election_priority, broker_id))
    return min(ranked)[3] if ranked else None


def choose_master(bs: BrokerSet, liveness: Liveness, unclean: bool,
                  preferred: int | None = None) -> int | None:
    """RocketMQ's DefaultElectPolicy: among the alive SyncStateSet members (then, only
    when ``unclean``, among all alive replicas): the old master when it is alive and
    nothing else is asked for; ``preferred`` alone when given; else ``_best``."""
    pools = [bs.sync_state_set]
    if unclean:
        pools.append(frozenset(bs.replicas))
    for pool in pools:
        alive = {i for i in pool
                 if i in bs.replicas and liveness.live_info(bs.broker_name, i) is not None}
        if not alive:
            continue
        if bs.master_id in alive and preferred in (None, bs.master_id):
            return bs.master_id
        if preferred is not None:
            if preferred in alive:
                return preferred
            continue
        return _best(bs.broker_name, alive, liveness)
    return None


def elect_master(state: ControllerState, broker_name: str, broker_id: int | None,
                 designate: bool, liveness: Liveness, unclean: bool = False
                 ) -> Result[MasterView]:
    """CONTROLLER_ELECT_MASTER.

    - ``broker_id`` None: the controller asks (its master stopped heart-beating);
    - ``designate``: an admin wants ``broker_id`` as master, or nothing;
    - else a replica (``broker_id``) asks for an election: the first ever makes it
      master; later ones follow the policy (``choose_master``).

    A new master: masterEpoch + 1, SyncStateSet = {new master} with its epoch + 1,
    every replica notified. The alive master chosen again: MASTER_STILL_EXIST, nothing
    changes. Nobody electable: when the controller asked, the dead master is dropped
    (masterEpoch + 1, MASTER_NOT_AVAILABLE, replicas notified that there is none);
    else ELECT_MASTER_FAILED and nothing changes."""
    bs = state.get(broker_name)
    if bs is None:
        return _refuse(state, Status.BROKER_NEED_TO_BE_REGISTERED,
                       f"broker name {broker_name} is unknown to the controller")
    if broker_id is not None and broker_id not in bs.replicas:
        return _refuse(state, Status.BROKER_NEED_TO_BE_REGISTERED,
                       f"broker id {broker_id} is not a replica of {broker_name}")
    new: int | None
    if bs.never_elected:  # nothing was ever written: any replica may lead
        if broker_id is None:
            new = _best(broker_name, bs.replicas, liveness)
        elif not designate or liveness.live_info(broker_name, broker_id) is not None:
            new = broker_id  # the first replica to ask (or the one designated) leads
        else:
            new = None
    else:
        new = choose_master(bs, liveness, unclean, broker_id if designate else None)
    if new is not None and new == bs.master_id:
        return Result(state, Status.MASTER_STILL_EXIST,
                      f"the master of {broker_name} ({new}) is alive: no election",
                      bs.view())
    if new is not None:
        bs = replace(bs, master_id=new, master_epoch=bs.master_epoch + 1,
                     sync_state_set=frozenset({new}),
                     sync_state_set_epoch=bs.sync_state_set_epoch + 1)
        return _changed(state.with_set(bs), bs.view(), (broker_name,))
    if broker_id is None and bs.master_id is not None:
        dead = bs.master_id
        bs = replace(bs, master_id=None, master_epoch=bs.master_epoch + 1)
        return _changed(state.with_set(bs), bs.view(), (broker_name,),
                        Status.MASTER_NOT_AVAILABLE,
                        f"the master of {broker_name} ({dead}) is down and no replica of "
                        f"its SyncStateSet is alive to take over")
    why = (f"broker {broker_id} of {broker_name} is not an alive member of its "
           f"SyncStateSet" if designate else f"no alive replica of {broker_name} can be "
           f"elected")
    return Result(state, Status.ELECT_MASTER_FAILED if broker_id is not None
                  else Status.MASTER_NOT_AVAILABLE, why, bs.view())


# ---- cleaning ------------------------------------------------------------------------


def clean_broker_data(state: ControllerState, cluster: str, broker_name: str,
                      broker_ids: Iterable[int], clean_living: bool,
                      liveness: Liveness) -> Result[None]:
    """CLEAN_BROKER_DATA: forget replicas ``broker_ids`` of ``broker_name`` (none
    given: the whole broker name). A living replica only with ``clean_living``.
    Forgetting the master leaves the set without one (masterEpoch + 1); a set left
    with no replica is forgotten."""
    bs = state.get(broker_name)
    if bs is None:
        return _refuse(state, Status.INVALID_CLEAN_BROKER_METADATA,
                       f"broker name {broker_name} is unknown to the controller")
    mismatch = _cluster_mismatch(bs, cluster)
    if mismatch is not None:
        return _refuse(state, Status.INVALID_CLEAN_BROKER_METADATA, mismatch)
    ids = frozenset(broker_ids) or frozenset(bs.replicas)
    if not clean_living:
        living = sorted(i for i in ids if i in bs.replicas
                        and liveness.live_info(broker_name, i) is not None)
        if living:
            return _refuse(state, Status.INVALID_CLEAN_BROKER_METADATA,
                           f"broker ids {living} of {broker_name} are alive "
                           f"(isCleanLivingBroker to clean them anyway)")
    replicas = {i: r for i, r in bs.replicas.items() if i not in ids}
    if not replicas:
        return _changed(state.without(broker_name))
    master_id, master_epoch = bs.master_id, bs.master_epoch
    if master_id in ids:
        master_id, master_epoch = None, master_epoch + 1
    sync = bs.sync_state_set - ids
    sync_epoch = bs.sync_state_set_epoch + (1 if sync != bs.sync_state_set else 0)
    bs = replace(bs, replicas=replicas, master_id=master_id, master_epoch=master_epoch,
                 sync_state_set=sync, sync_state_set_epoch=sync_epoch)
    return _changed(state.with_set(bs))


# ---- saved form ----------------------------------------------------------------------


def encode_state(state: ControllerState) -> bytes:
    """The state as JSON bytes (``format`` says which layout), for the StateStore."""
    sets = []
    for name in sorted(state.broker_sets):
        bs = state.broker_sets[name]
        sets.append({
            "clusterName": bs.cluster, "brokerName": bs.broker_name,
            "masterBrokerId": bs.master_id, "masterEpoch": bs.master_epoch,
            "syncStateSet": sorted(bs.sync_state_set),
            "syncStateSetEpoch": bs.sync_state_set_epoch,
            "replicas": [{"brokerId": r.broker_id, "brokerAddress": r.address,
                          "registerCheckCode": r.check_code}
                         for _, r in sorted(bs.replicas.items())],
        })
    return json.dumps({"format": STATE_FORMAT, "brokerSets": sets},
                      separators=(",", ":")).encode()


def _field(d: object, key: str, typ: type, where: str) -> object:
    if not isinstance(d, dict) or key not in d:
        raise StateFormatError(f"{where}: missing {key!r}")
    value = d[key]
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise StateFormatError(f"{where}: {key!r} must be {typ.__name__}")
    return value


def _count(value: object, key: str, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise StateFormatError(f"{where}: {key!r} must be a non-negative integer")
    return value


def decode_state(data: bytes) -> ControllerState:
    """``encode_state``'s bytes back; StateFormatError for anything else."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise StateFormatError(f"not JSON: {exc}") from None
    fmt = _field(doc, "format", int, "state")
    if fmt != STATE_FORMAT:
        raise StateFormatError(f"state format {fmt} is not {STATE_FORMAT} (written by "
                               f"another version?)")
    raw_sets = _field(doc, "brokerSets", list, "state")
    assert isinstance(raw_sets, list)
    sets: dict[str, BrokerSet] = {}
    for raw in raw_sets:
        name = _field(raw, "brokerName", str, "broker set")
        assert isinstance(name, str) and isinstance(raw, dict)
        where = f"broker set {shown(name)}"
        if name in sets:
            raise StateFormatError(f"{where} appears twice")
        replicas: dict[int, Replica] = {}
        raw_replicas = _field(raw, "replicas", list, where)
        assert isinstance(raw_replicas, list)
        for r in raw_replicas:
            rid = _count(_field(r, "brokerId", int, where), "brokerId", where)
            addr = _field(r, "brokerAddress", str, where)
            code = _field(r, "registerCheckCode", str, where)
            assert isinstance(addr, str) and isinstance(code, str)
            replicas[rid] = Replica(rid, addr, code)
        master = raw.get("masterBrokerId")
        if master is not None:
            master = _count(master, "masterBrokerId", where)
        sync_raw = _field(raw, "syncStateSet", list, where)
        assert isinstance(sync_raw, list)
        sync = frozenset(_count(i, "syncStateSet", where) for i in sync_raw)
        if not sync <= set(replicas) or (master is not None and master not in replicas):
            raise StateFormatError(f"{where}: its master or SyncStateSet names a broker id "
                                   f"that is not a replica")
        cluster = _field(raw, "clusterName", str, where)
        assert isinstance(cluster, str)
        sets[name] = BrokerSet(
            cluster, name, replicas, master,
            _count(_field(raw, "masterEpoch", int, where), "masterEpoch", where), sync,
            _count(_field(raw, "syncStateSetEpoch", int, where), "syncStateSetEpoch", where))
    return ControllerState(sets)
