"""Route data exchanged between brokers, name servers and clients.

Each type converts to and from a plain dict (camelCase keys, as RocketMQ's
JSON) so it travels in a msgpack body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocol.errors import RemoteProtocolError
from protocol.names import topic_problem
from protocol.topic_attributes import checked_attributes

# Permission bits, as RocketMQ's PermName.
PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1
PERM_RW = PERM_READ | PERM_WRITE
PERM_MAX = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT
# Queue counts a route may carry (name server, broker and client: maxQueueNums).
DEFAULT_MAX_QUEUE_NUMS = 1024

MASTER_ID = 0


def is_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def is_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def perm_to_string(perm: int) -> str:
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-") + (
        "X" if perm & PERM_INHERIT else "-"
    )


def _get(d: Any, key: str, typ: type, default: Any = None) -> Any:
    if not isinstance(d, dict):
        raise RemoteProtocolError("expected a map")
    value = d.get(key, default)
    if value is None and default is None:
        raise RemoteProtocolError(f"missing field {key!r}")
    if typ is int and type(value) is bool:
        raise RemoteProtocolError(f"field {key!r}: expected int")
    if not isinstance(value, typ):
        raise RemoteProtocolError(f"field {key!r}: expected {typ.__name__}")
    return value


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_RW
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    # RocketMQ 5's topic attributes (protocol/topic_attributes.py): message.type
    attributes: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
        }
        if self.attributes:  # written only when set: older readers see what they knew
            d["attributes"] = dict(self.attributes)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> TopicConfig:
        return cls(
            topic_name=_get(d, "topicName", str),
            read_queue_nums=_get(d, "readQueueNums", int, 16),
            write_queue_nums=_get(d, "writeQueueNums", int, 16),
            perm=_get(d, "perm", int, PERM_RW),
            topic_filter_type=_get(d, "topicFilterType", str, "SINGLE_TAG"),
            topic_sys_flag=_get(d, "topicSysFlag", int, 0),
            order=_get(d, "order", bool, False),
            attributes=_attributes(d),
        )


def _attributes(d: Any) -> dict[str, str]:
    try:
        return checked_attributes(d.get("attributes") if isinstance(d, dict) else None,
                                  "topic config: attributes")
    except ValueError as exc:
        raise RemoteProtocolError(str(exc)) from None


def topic_config_problem(cfg: TopicConfig, max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS) -> str | None:
    """None when ``cfg`` may enter a route table, else why not."""
    problem = topic_problem(cfg.topic_name)
    if problem is not None:
        return problem
    return queue_counts_problem(cfg.topic_name, cfg.read_queue_nums, cfg.write_queue_nums,
                                cfg.perm, max_queue_nums)


def queue_counts_problem(topic: str, read: int, write: int, perm: int,
                         max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS) -> str | None:
    if not (0 <= read <= max_queue_nums and 0 <= write <= max_queue_nums):
        return (f"topic {topic}: queue numbers {read}/{write} are outside "
                f"0..{max_queue_nums} (maxQueueNums)")
    if not 0 <= perm <= PERM_MAX:
        return f"topic {topic}: perm {perm} is outside 0..{PERM_MAX}"
    return None


@dataclass(slots=True)
class QueueData:
    """One broker's queues of a topic in a route.

    Its topic flag travels under both names clients read: ``topicSynFlag``
    (RocketMQ's Java QueueData up to 4.8, and the Go and other clients) and
    ``topicSysFlag`` (Java 4.9 on, and 5.x); JSON readers skip the name they
    do not know. Either is read, ``topicSysFlag`` first."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicSynFlag": self.topic_sys_flag,
            "topicSysFlag": self.topic_sys_flag,
        }

    @classmethod
    def from_dict(cls, d: Any) -> QueueData:
        flag_key = "topicSynFlag" if isinstance(d, dict) and "topicSysFlag" not in d \
            else "topicSysFlag"
        return cls(
            broker_name=_get(d, "brokerName", str),
            read_queue_nums=_get(d, "readQueueNums", int),
            write_queue_nums=_get(d, "writeQueueNums", int),
            perm=_get(d, "perm", int),
            topic_sys_flag=_get(d, flag_key, int, 0),
        )


@dataclass(slots=True)
class BrokerData:
    """One broker name's members. ``grpc_ports`` (broker id -> port): the members
    serving apache.rocketmq.v2 gRPC on their address's host (enableGrpc), sent as
    ``grpcPorts`` only when there is one (RocketMQ's clients skip a name they do
    not know)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    grpc_ports: dict[int, int] = field(default_factory=dict)

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def select_addr(self) -> str | None:
        """The master's address, or any slave's when there is no master."""
        addr = self.broker_addrs.get(MASTER_ID)
        if addr is None and self.broker_addrs:
            addr = self.broker_addrs[min(self.broker_addrs)]
        return addr

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": dict(self.broker_addrs),
        }
        if self.grpc_ports:
            out["grpcPorts"] = dict(self.grpc_ports)
        return out

    @classmethod
    def from_dict(cls, d: Any) -> BrokerData:
        addrs = _get(d, "brokerAddrs", dict, {})
        out: dict[int, str] = {}
        for k, v in addrs.items():
            if not isinstance(v, str):
                raise RemoteProtocolError("broker address must be a string")
            try:
                out[int(k)] = v
            except (TypeError, ValueError) as exc:
                raise RemoteProtocolError(f"bad broker id {k!r}") from exc
        ports: dict[int, int] = {}
        for k, v in _get(d, "grpcPorts", dict, {}).items():
            try:
                bid, port = int(k), v
            except (TypeError, ValueError) as exc:
                raise RemoteProtocolError(f"bad broker id {k!r}") from exc
            if type(port) is not int or not 0 < port <= 65535:
                raise RemoteProtocolError(f"bad gRPC port {port!r}")
            ports[bid] = port
        return cls(_get(d, "cluster", str), _get(d, "brokerName", str), out, ports)


@dataclass(slots=True)
class TopicRouteData:
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    order_topic_conf: str | None = None
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As RocketMQ's TopicRouteData in JSON: ``brokerAddrs`` keys are broker
        ids (strings in JSON, numbers in msgpack; ``from_dict`` reads both);
        ``orderTopicConf`` only when there is one (fastjson leaves nulls out)."""
        out: dict[str, Any] = {}
        if self.order_topic_conf is not None:
            out["orderTopicConf"] = self.order_topic_conf
        out["queueDatas"] = [q.to_dict() for q in self.queue_datas]
        out["brokerDatas"] = [b.to_dict() for b in self.broker_datas]
        out["filterServerTable"] = self.filter_server_table
        return out

    @classmethod
    def from_dict(cls, d: Any) -> TopicRouteData:
        queue_datas = [QueueData.from_dict(q) for q in _get(d, "queueDatas", list, [])]
        conf = d.get("orderTopicConf")
        if conf is not None and not isinstance(conf, str):
            raise RemoteProtocolError("field 'orderTopicConf': expected str")
        return cls(
            queue_datas=queue_datas,
            broker_datas=[BrokerData.from_dict(b) for b in _get(d, "brokerDatas", list, [])],
            order_topic_conf=conf or None,
            filter_server_table=_get(d, "filterServerTable", dict, {}),
        )


@dataclass(slots=True)
class DataVersion:
    """Changes whenever a table changes, so name servers and slaves notice."""

    timestamp: int = 0
    counter: int = 0

    def next_version(self, now_ms: int) -> None:
        self.timestamp = now_ms
        self.counter += 1

    def to_dict(self) -> dict[str, int]:
        return {"timestamp": self.timestamp, "counter": self.counter}

    @classmethod
    def from_dict(cls, d: Any) -> DataVersion:
        if not isinstance(d, dict):
            return cls()
        ts, counter = d.get("timestamp", 0), d.get("counter", 0)
        return cls(ts if type(ts) is int else 0, counter if type(counter) is int else 0)
