"""Controller mode on the wire (RocketMQ 5, RIP-44): the headers and bodies of
BROKER_HEARTBEAT (904) and CONTROLLER_* (1001-1013), with RocketMQ's names.

Shared by the controller (controller/), the brokers that talk to it and the admin
tool. Headers are ``protocol.headers.Header`` dataclasses (checked at decode);
bodies are plain dataclasses with ``to_dict``/``from_dict`` (camelCase keys, as
RocketMQ's JSON), and ``from_dict`` bounds every list it reads: a body from the
network may hold anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from protocol.errors import RemoteProtocolError
from protocol.headers import (
    Address,
    BrokerName,
    ClusterName,
    Header,
    Int32,
    MaxLen,
    NonNegInt32,
    NonNegInt64,
)
from protocol.names import broker_name_problem, shown

# RocketMQ's MixAll.FIRST_BROKER_CONTROLLER_ID: broker ids a controller hands out
# start here (0 is the master's id outside controller mode)
FIRST_BROKER_CONTROLLER_ID = 1
# replicas one broker name may have, and broker names one request may ask about
MAX_REPLICAS = 64
MAX_NAMES_PER_REQUEST = 1024
# RocketMQ's default electionPriority (brokers that set none): the lowest priority
DEFAULT_ELECTION_PRIORITY = 2**31 - 1

CheckCode = Annotated[str, MaxLen(512)]
IdList = Annotated[str, MaxLen(64 * 21)]


# ---- headers -------------------------------------------------------------------------


@dataclass(slots=True)
class BrokerHeartbeatRequestHeader(Header):
    """BROKER_HEARTBEAT (904), broker -> controller, usually oneway. ``brokerId`` is
    the id the controller gave the broker (absent before it has one)."""

    cluster_name: ClusterName
    broker_addr: Address
    broker_name: BrokerName
    broker_id: NonNegInt64 | None = None
    epoch: NonNegInt32 | None = None
    max_offset: NonNegInt64 | None = None
    confirm_offset: NonNegInt64 | None = None
    heartbeat_timeout_mills: NonNegInt64 | None = None
    election_priority: Int32 | None = None


@dataclass(slots=True)
class AlterSyncStateSetRequestHeader(Header):
    """CONTROLLER_ALTER_SYNC_STATE_SET (1001), master -> controller; the body is the
    proposed ``SyncStateSet`` with the epoch the master holds."""

    broker_name: BrokerName
    master_broker_id: NonNegInt64
    master_epoch: NonNegInt32
    invoke_time: NonNegInt64 | None = None


@dataclass(slots=True)
class AlterSyncStateSetResponseHeader(Header):
    new_sync_state_set_epoch: NonNegInt32 | None = None


@dataclass(slots=True)
class ElectMasterRequestHeader(Header):
    """CONTROLLER_ELECT_MASTER (1002): a broker (``brokerId`` its own, not
    designated: the policy chooses), an admin (``designateElect``: that very
    broker or nothing) or the controller itself (no ``brokerId``)."""

    broker_name: BrokerName
    cluster_name: Annotated[str, MaxLen(127)] = ""
    broker_id: NonNegInt64 | None = None
    designate_elect: bool = False
    invoke_time: NonNegInt64 | None = None


@dataclass(slots=True)
class ElectMasterResponseHeader(Header):
    master_broker_id: NonNegInt64 | None = None
    master_address: Annotated[str, MaxLen(300)] | None = None
    master_epoch: NonNegInt32 | None = None
    sync_state_set_epoch: NonNegInt32 | None = None


@dataclass(slots=True)
class RegisterBrokerToControllerRequestHeader(Header):
    """CONTROLLER_REGISTER_BROKER (1003): a broker that holds an id tells its address."""

    cluster_name: ClusterName
    broker_name: BrokerName
    broker_id: NonNegInt64
    broker_address: Address
    invoke_time: NonNegInt64 | None = None


@dataclass(slots=True)
class RegisterBrokerToControllerResponseHeader(Header):
    cluster_name: Annotated[str, MaxLen(127)] | None = None
    broker_name: Annotated[str, MaxLen(127)] | None = None
    master_broker_id: NonNegInt64 | None = None
    master_address: Annotated[str, MaxLen(300)] | None = None
    master_epoch: NonNegInt32 | None = None
    sync_state_set_epoch: NonNegInt32 | None = None


@dataclass(slots=True)
class GetReplicaInfoRequestHeader(Header):
    """CONTROLLER_GET_REPLICA_INFO (1004)."""

    broker_name: BrokerName


@dataclass(slots=True)
class GetReplicaInfoResponseHeader(Header):
    master_broker_id: NonNegInt64 | None = None
    master_address: Annotated[str, MaxLen(300)] | None = None
    master_epoch: NonNegInt32 | None = None


@dataclass(slots=True)
class GetMetaDataResponseHeader(Header):
    """CONTROLLER_GET_METADATA_INFO (1005)'s answer: who leads the controllers."""

    group: Annotated[str, MaxLen(255)] | None = None
    controller_leader_id: Annotated[str, MaxLen(255)] | None = None
    controller_leader_address: Annotated[str, MaxLen(300)] | None = None
    is_leader: bool = False
    peers: Annotated[str, MaxLen(4096)] | None = None


@dataclass(slots=True)
class NotifyBrokerRoleChangedRequestHeader(Header):
    """NOTIFY_BROKER_ROLE_CHANGED (1008), controller -> every replica of a broker
    name; the body is the new ``SyncStateSet``. No master: ``masterBrokerId`` absent."""

    master_epoch: NonNegInt32
    sync_state_set_epoch: NonNegInt32
    master_address: Annotated[str, MaxLen(300)] | None = None
    master_broker_id: NonNegInt64 | None = None


@dataclass(slots=True)
class CleanControllerBrokerDataRequestHeader(Header):
    """CLEAN_BROKER_DATA (1011): forget some replicas of a broker name (ids joined
    with ``;``), or the whole broker name when none are given. Living brokers only
    with ``isCleanLivingBroker``."""

    broker_name: BrokerName
    cluster_name: Annotated[str, MaxLen(127)] = ""
    broker_controller_ids_to_clean: IdList | None = None
    is_clean_living_broker: bool = False
    invoke_time: NonNegInt64 | None = None


@dataclass(slots=True)
class GetNextBrokerIdRequestHeader(Header):
    """CONTROLLER_GET_NEXT_BROKER_ID (1012)."""

    cluster_name: ClusterName
    broker_name: BrokerName


@dataclass(slots=True)
class GetNextBrokerIdResponseHeader(Header):
    cluster_name: Annotated[str, MaxLen(127)] | None = None
    broker_name: Annotated[str, MaxLen(127)] | None = None
    next_broker_id: NonNegInt64 | None = None


@dataclass(slots=True)
class ApplyBrokerIdRequestHeader(Header):
    """CONTROLLER_APPLY_BROKER_ID (1013): take ``appliedBrokerId``; the check code is
    ``address;timestamp`` and lets the same broker apply again after a restart."""

    cluster_name: ClusterName
    broker_name: BrokerName
    applied_broker_id: NonNegInt64
    register_check_code: CheckCode


@dataclass(slots=True)
class ApplyBrokerIdResponseHeader(Header):
    cluster_name: Annotated[str, MaxLen(127)] | None = None
    broker_name: Annotated[str, MaxLen(127)] | None = None


def parse_id_list(text: str | None) -> list[int]:
    """``brokerControllerIdsToClean`` ("1;2;3") as ids; RemoteProtocolError when one
    is not a non-negative integer or there are more than MAX_REPLICAS."""
    if text is None or not text.strip():
        return []
    parts = [p.strip() for p in text.split(";") if p.strip()]
    if len(parts) > MAX_REPLICAS:
        raise RemoteProtocolError(f"more than {MAX_REPLICAS} broker ids to clean")
    ids = []
    for part in parts:
        if not (part.isascii() and part.isdigit()) or len(part) > 19:
            raise RemoteProtocolError(f"broker id {shown(part)} is not a non-negative integer")
        ids.append(int(part))
    return ids


def check_code_address(code: str) -> str:
    """The address part of a register check code (``address;timestamp``)."""
    return code.split(";", 1)[0]


# ---- bodies ----------------------------------------------------------------------------


def _map(d: Any, what: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise RemoteProtocolError(f"{what}: expected a map")
    return d


def _int(d: dict[str, Any], key: str, what: str, default: int | None = None,
         lo: int = 0, hi: int = 2**63 - 1) -> int:
    value = d.get(key, default)
    if value is None:
        raise RemoteProtocolError(f"{what}: missing field {key!r}")
    if type(value) is not int or not lo <= value <= hi:
        raise RemoteProtocolError(f"{what}: field {key!r} must be an integer in {lo}..{hi}")
    return value


def _opt_int(d: dict[str, Any], key: str, what: str) -> int | None:
    return None if d.get(key) is None else _int(d, key, what)


def _opt_str(d: dict[str, Any], key: str, what: str, limit: int = 300) -> str | None:
    value = d.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise RemoteProtocolError(f"{what}: field {key!r} must be text of at most {limit} characters")
    return value


def _ids(value: Any, what: str) -> frozenset[int]:
    if not isinstance(value, list | tuple):
        raise RemoteProtocolError(f"{what}: expected a list of broker ids")
    if len(value) > MAX_REPLICAS:
        raise RemoteProtocolError(f"{what}: more than {MAX_REPLICAS} broker ids")
    out = set()
    for v in value:
        if type(v) is not int or v < 0:
            raise RemoteProtocolError(f"{what}: broker ids must be non-negative integers")
        out.add(v)
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class SyncStateSet:
    """The broker ids in sync with the master (the master among them) and the
    epoch of that set."""

    sync_state_set: frozenset[int]
    sync_state_set_epoch: int

    def to_dict(self) -> dict[str, Any]:
        return {"syncStateSet": sorted(self.sync_state_set),
                "syncStateSetEpoch": self.sync_state_set_epoch}

    @classmethod
    def from_dict(cls, d: Any) -> SyncStateSet:
        d = _map(d, "SyncStateSet")
        return cls(_ids(d.get("syncStateSet", []), "SyncStateSet"),
                   _int(d, "syncStateSetEpoch", "SyncStateSet", lo=0, hi=2**31 - 1))


@dataclass(frozen=True, slots=True)
class BrokerMemberGroup:
    """A broker name's replicas: ``brokerAddrs`` maps broker id to address."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "brokerName": self.broker_name,
                "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())}}

    @classmethod
    def from_dict(cls, d: Any) -> BrokerMemberGroup:
        d = _map(d, "BrokerMemberGroup")
        addrs = _map(d.get("brokerAddrs", {}), "BrokerMemberGroup.brokerAddrs")
        if len(addrs) > MAX_REPLICAS:
            raise RemoteProtocolError(f"BrokerMemberGroup: more than {MAX_REPLICAS} replicas")
        out: dict[int, str] = {}
        for k, v in addrs.items():
            key = str(k)
            if not (key.isascii() and key.isdigit()) or len(key) > 19 or not isinstance(v, str):
                raise RemoteProtocolError("BrokerMemberGroup: brokerAddrs maps ids to addresses")
            out[int(key)] = v
        return cls(_opt_str(d, "cluster", "BrokerMemberGroup") or "",
                   _opt_str(d, "brokerName", "BrokerMemberGroup") or "", out)


@dataclass(frozen=True, slots=True)
class ElectMasterResponseBody:
    broker_member_group: BrokerMemberGroup | None
    sync_state_set: frozenset[int]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"syncStateSet": sorted(self.sync_state_set)}
        if self.broker_member_group is not None:
            out["brokerMemberGroup"] = self.broker_member_group.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Any) -> ElectMasterResponseBody:
        d = _map(d, "ElectMasterResponseBody")
        group = d.get("brokerMemberGroup")
        return cls(BrokerMemberGroup.from_dict(group) if group is not None else None,
                   _ids(d.get("syncStateSet", []), "ElectMasterResponseBody"))


@dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    broker_name: str
    broker_id: int
    broker_address: str
    alive: bool

    def to_dict(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "brokerId": self.broker_id,
                "brokerAddress": self.broker_address, "alive": self.alive}

    @classmethod
    def from_dict(cls, d: Any) -> ReplicaIdentity:
        d = _map(d, "ReplicaIdentity")
        alive = d.get("alive", False)
        if not isinstance(alive, bool):
            raise RemoteProtocolError("ReplicaIdentity: alive must be a boolean")
        return cls(_opt_str(d, "brokerName", "ReplicaIdentity") or "",
                   _int(d, "brokerId", "ReplicaIdentity"),
                   _opt_str(d, "brokerAddress", "ReplicaIdentity") or "", alive)


@dataclass(frozen=True, slots=True)
class ReplicasInfo:
    """One broker name in CONTROLLER_GET_SYNC_STATE_DATA's answer."""

    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set_epoch: int
    in_sync_replicas: tuple[ReplicaIdentity, ...]
    not_in_sync_replicas: tuple[ReplicaIdentity, ...]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "masterEpoch": self.master_epoch, "syncStateSetEpoch": self.sync_state_set_epoch,
            "inSyncReplicas": [r.to_dict() for r in self.in_sync_replicas],
            "notInSyncReplicas": [r.to_dict() for r in self.not_in_sync_replicas]}
        if self.master_broker_id is not None:
            out["masterBrokerId"] = self.master_broker_id
        if self.master_address is not None:
            out["masterAddress"] = self.master_address
        return out

    @classmethod
    def from_dict(cls, d: Any) -> ReplicasInfo:
        d = _map(d, "ReplicasInfo")

        def replicas(key: str) -> tuple[ReplicaIdentity, ...]:
            raw = d.get(key, [])
            if not isinstance(raw, list) or len(raw) > MAX_REPLICAS:
                raise RemoteProtocolError(f"ReplicasInfo: {key} must be a list of at most "
                                          f"{MAX_REPLICAS} replicas")
            return tuple(ReplicaIdentity.from_dict(r) for r in raw)

        return cls(_opt_int(d, "masterBrokerId", "ReplicasInfo"),
                   _opt_str(d, "masterAddress", "ReplicasInfo"),
                   _int(d, "masterEpoch", "ReplicasInfo", 0),
                   _int(d, "syncStateSetEpoch", "ReplicasInfo", 0),
                   replicas("inSyncReplicas"), replicas("notInSyncReplicas"))


@dataclass(frozen=True, slots=True)
class BrokerReplicasInfo:
    """CONTROLLER_GET_SYNC_STATE_DATA's answer: broker name -> ReplicasInfo."""

    replicas_info_table: dict[str, ReplicasInfo]

    def to_dict(self) -> dict[str, Any]:
        return {"replicasInfoTable": {k: v.to_dict()
                                      for k, v in sorted(self.replicas_info_table.items())}}

    @classmethod
    def from_dict(cls, d: Any) -> BrokerReplicasInfo:
        table = _map(_map(d, "BrokerReplicasInfo").get("replicasInfoTable", {}),
                     "BrokerReplicasInfo.replicasInfoTable")
        if len(table) > MAX_NAMES_PER_REQUEST:
            raise RemoteProtocolError("BrokerReplicasInfo: too many broker names")
        return cls({str(k): ReplicasInfo.from_dict(v) for k, v in table.items()})


def broker_names_body(d: Any) -> list[str]:
    """CONTROLLER_GET_SYNC_STATE_DATA's request body: a list of broker names
    (at most MAX_NAMES_PER_REQUEST, each a valid name). RemoteProtocolError."""
    if not isinstance(d, list):
        raise RemoteProtocolError("the body must be a list of broker names")
    if len(d) > MAX_NAMES_PER_REQUEST:
        raise RemoteProtocolError(f"more than {MAX_NAMES_PER_REQUEST} broker names")
    for name in d:
        problem = broker_name_problem(name)
        if problem is not None:
            raise RemoteProtocolError(f"broker name: {problem}")
    return list(dict.fromkeys(d))


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int
    end_offset: int

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "startOffset": self.start_offset,
                "endOffset": self.end_offset}

    @classmethod
    def from_dict(cls, d: Any) -> EpochEntry:
        d = _map(d, "EpochEntry")
        return cls(_int(d, "epoch", "EpochEntry", hi=2**31 - 1),
                   _int(d, "startOffset", "EpochEntry", lo=-(2**63)),
                   _int(d, "endOffset", "EpochEntry", 2**63 - 1, lo=-(2**63)))


MAX_EPOCH_ENTRIES = 100_000


@dataclass(frozen=True, slots=True)
class EpochEntryCache:
    """GET_BROKER_EPOCH_CACHE (1007)'s answer, from a broker: its epoch file."""

    cluster_name: str
    broker_name: str
    broker_id: int
    epoch_list: tuple[EpochEntry, ...]
    max_offset: int

    def to_dict(self) -> dict[str, Any]:
        return {"clusterName": self.cluster_name, "brokerName": self.broker_name,
                "brokerId": self.broker_id, "epochList": [e.to_dict() for e in self.epoch_list],
                "maxOffset": self.max_offset}

    @classmethod
    def from_dict(cls, d: Any) -> EpochEntryCache:
        d = _map(d, "EpochEntryCache")
        raw = d.get("epochList", [])
        if not isinstance(raw, list) or len(raw) > MAX_EPOCH_ENTRIES:
            raise RemoteProtocolError("EpochEntryCache: epochList must be a bounded list")
        return cls(_opt_str(d, "clusterName", "EpochEntryCache") or "",
                   _opt_str(d, "brokerName", "EpochEntryCache") or "",
                   _int(d, "brokerId", "EpochEntryCache", 0),
                   tuple(EpochEntry.from_dict(e) for e in raw),
                   _int(d, "maxOffset", "EpochEntryCache", 0, lo=-(2**63)))

