"""MQAdmin: the admin API behind ``mqadmin`` (RocketMQ's MQAdminExt), on trio.

A query for the name servers goes to one of them, picked at random and kept
while it answers; when it cannot be reached or times out the next ones are
tried (``protocol.namesrv_addr.NamesrvSelector``, as the SDK's client
instance). A change every name server must make (a topic deleted, a broker's
write permission wiped or given back) goes to all of them at once, each
bounded by the timeout: one dead name server neither delays nor stops the
others, and the error names it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import structlog
import trio

from client.config import ClientConfig, merge_config
from client.credentials import AclCredentials
from client.errors import MQClientError
from client.rebalance import allocate_averagely
from client.route_info import subscribe_queues, usable
from client.running_info import RunningInfo, RunningInfoError
from protocol import names
from protocol.body import pack_body, unpack_body
from protocol.client_data import ResetOffsetBody
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError, is_secret_key, mask_secrets, parse_properties
from protocol.errors import RemoteProtocolError
from protocol.headers import (
    CreateTopicRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetKVConfigRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader,
    PutKVConfigRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
)
from protocol.message import MessageExt, MessageQueue
from protocol.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, RMQ_SYS_TRACE_TOPIC
from protocol.namesrv_addr import (
    NAMESRV_ADDR_ENV,
    NamesrvSelector,
    NoNamesrvAnswered,
    ask_in_turn,
    resolve_namesrv_addr,
    split_namesrv_addr,
)
from protocol.record import decode_msg_id, decode_records
from protocol.route import MASTER_ID, PERM_MAX, PERM_RW, BrokerData, TopicConfig, TopicRouteData
from protocol.topic_attributes import format_changes
from protocol.trace_data import TraceContext, TraceView, decode, trace_views
from protocol.trio.client import RemotingClient, split_addr
from protocol.trio.errors import RemotingError
from protocol.trio.tls import TlsConfigError, client_tls_from_env

log = structlog.get_logger("client.admin")

DEFAULT_TIMEOUT = 5.0
# what a broker gives a consumer to answer GET_CONSUMER_RUNNING_INFO
# (broker/broker_to_client.py RELAY_TIMEOUT_S), on top of the admin's own timeout
RELAY_TIMEOUT_S = 5.0
SKIP_ALL = -1  # a reset's timestamp: past the last message (skipAccumulatedMessage)

# VIEW_BROKER_STATS_DATA's statsName values (RocketMQ's BrokerStatsManager).
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
# most trace records of one message a trace query reads (a message consumed by many
# groups, retried many times, has a few hundred)
MAX_TRACE_RECORDS = 4096

def is_system_topic(topic: str) -> bool:
    """A topic statsAll skips by default (the broker's own, or a retry or dead-letter topic)."""
    return names.is_system_topic(topic) or topic.startswith((RETRY_GROUP_TOPIC_PREFIX,
                                                             DLQ_GROUP_TOPIC_PREFIX))


def format_properties(props: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


class MQAdminError(Exception):
    """An admin request failed; the message says which and why."""


@dataclass(frozen=True, slots=True)
class StatsItem:
    """One window of a broker statistic: total, per second, average per increment."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0

    @classmethod
    def from_dict(cls, d: Any) -> StatsItem:
        if not isinstance(d, dict):
            return cls()
        return cls(int(d.get("sum", 0) or 0), float(d.get("tps", 0) or 0.0),
                   float(d.get("avgpt", 0) or 0.0))


@dataclass(frozen=True, slots=True)
class BrokerStatsData:
    """VIEW_BROKER_STATS_DATA: a statistic over the last minute, hour and day."""

    minute: StatsItem = field(default_factory=StatsItem)
    hour: StatsItem = field(default_factory=StatsItem)
    day: StatsItem = field(default_factory=StatsItem)

    @classmethod
    def from_dict(cls, d: Any) -> BrokerStatsData:
        if not isinstance(d, dict):
            raise MQAdminError("broker stats answered without statsMinute/statsHour/statsDay")
        return cls(StatsItem.from_dict(d.get("statsMinute")), StatsItem.from_dict(d.get("statsHour")),
                   StatsItem.from_dict(d.get("statsDay")))

    def sum_24h(self) -> int:
        """RocketMQ's compute24HourSum: the day's sum, else the hour's, else the minute's."""
        for item in (self.day, self.hour, self.minute):
            if item.sum:
                return item.sum
        return 0


@dataclass(frozen=True, slots=True)
class ProducerConnection:
    client_id: str
    client_addr: str
    language: str
    version: Any

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProducerConnection:
        return cls(str(d.get("clientId", "")), str(d.get("clientAddr", "")),
                   str(d.get("language", "")), d.get("version", ""))

    def to_dict(self) -> dict[str, Any]:
        return {"clientId": self.client_id, "clientAddr": self.client_addr,
                "language": self.language, "version": self.version}


@dataclass(frozen=True, slots=True)
class TopicGroupStats:
    """One row of statsAll: a topic, one of its consumer groups (None: no consumer)."""

    topic: str
    group: str | None
    accumulation: int | None
    in_tps: float
    out_tps: float | None
    in_msg_24h: int
    out_msg_24h: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class QueueStatus:
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class PermChange:
    """updateTopicPerm on one master: the perm it had, the config it has now
    (``changed`` False: it had the new perm already, nothing was sent)."""

    broker_addr: str
    broker_name: str
    old_perm: int
    config: TopicConfig
    changed: bool


@dataclass(frozen=True, slots=True)
class CleanResult:
    """cleanExpiredCQ / cleanUnusedTopic on one broker: the queues removed and the
    topics kept, with why (lists capped by the broker, counts whole)."""

    broker_addr: str
    removed: list[tuple[str, int]]
    removed_count: int
    kept: list[tuple[str, str]]
    kept_count: int

    @classmethod
    def from_body(cls, addr: str, body: Any) -> CleanResult:
        try:
            return cls(addr, [(str(r["topic"]), int(r["queueId"])) for r in body["removed"]],
                       int(body["removedCount"]),
                       [(str(r["topic"]), str(r["reason"])) for r in body["kept"]],
                       int(body["keptCount"]))
        except (TypeError, KeyError, ValueError) as exc:
            raise MQAdminError(f"{addr}: the clean-up report is unreadable: {exc!r}") from exc

    def to_dict(self) -> dict[str, Any]:
        return {"brokerAddr": self.broker_addr,
                "removed": [{"topic": t, "queueId": q} for t, q in self.removed],
                "removedCount": self.removed_count,
                "kept": [{"topic": t, "reason": r} for t, r in self.kept],
                "keptCount": self.kept_count}


class MQAdmin:
    """Admin operations against a name-server list. Use ``async with MQAdmin(addr)``;
    ``addr`` None: the NAMESRV_ADDR environment variable. ``config``: a
    ``client.config.ClientConfig``; the keywords are merged into it (a
    contradiction is a TypeError). Raises MQAdminError for a bad setting."""

    def __init__(self, namesrv_addr: str | None = None, timeout: float | None = None, *,
                 credentials: AclCredentials | None = None, access_key: str | None = None,
                 secret_key: str | None = None, use_tls: bool = False,
                 tls_ca_path: str | None = None, tls_cert_path: str | None = None,
                 tls_key_path: str | None = None, config: ClientConfig | None = None) -> None:
        # ``config`` (client/config.py) with the keywords merged in; ``timeout`` is
        # its request_timeout (default DEFAULT_TIMEOUT)
        try:
            self.config = merge_config(
                config, namesrv_addr=namesrv_addr, request_timeout=timeout,
                credentials=credentials, access_key=access_key, secret_key=secret_key,
                use_tls=use_tls, tls_ca_path=tls_ca_path, tls_cert_path=tls_cert_path,
                tls_key_path=tls_key_path)
        except MQClientError as exc:
            raise MQAdminError(str(exc)) from None
        resolved = resolve_namesrv_addr(self.config.namesrv_addr)
        if resolved is None:
            raise MQAdminError(f"no name server address given (pass one or set {NAMESRV_ADDR_ENV})")
        self.namesrv_list = split_namesrv_addr(resolved)
        if not self.namesrv_list:
            raise MQAdminError("no name server address given")
        for addr in self.namesrv_list:
            try:
                split_addr(addr)
            except ValueError as exc:
                raise MQAdminError(f"bad name server address: {exc}") from None
        self._namesrvs = NamesrvSelector(self.namesrv_list)
        self.timeout = self.config.timeout_or(DEFAULT_TIMEOUT)
        self.credentials = self.config.credentials
        # TLS: use_tls (with a CA, and a certificate for need.client.auth servers),
        # else ROCKETMQ_TLS_ENABLE/ROCKETMQ_TLS_CA/... (protocol/trio/tls.py)
        try:
            self.tls = self.config.client_tls() or client_tls_from_env()
            self._client = RemotingClient(credentials=self.credentials, tls=self.tls)
        except (MQClientError, TlsConfigError) as exc:
            raise MQAdminError(str(exc)) from exc

    async def __aenter__(self) -> MQAdmin:
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._client.__aexit__(*exc)

    # ---- plumbing ----------------------------------------------------------------

    async def _invoke(self, addr: str, cmd: RemotingCommand,
                      timeout: float | None = None) -> RemotingCommand:
        try:
            return await self._client.invoke(addr, cmd, timeout or self.timeout)
        except RemotingError as exc:
            raise MQAdminError(f"{addr}: {exc}") from exc

    async def _invoke_namesrv(self, cmd_factory: Any) -> RemotingCommand:
        """One name server's answer: the current one, else the next that answers."""
        async def ask(addr: str) -> RemotingCommand:
            return await self._client.invoke(addr, cmd_factory(), self.timeout)

        try:
            _, resp = await ask_in_turn(self._namesrvs, ask, RemotingError)
        except NoNamesrvAnswered as exc:
            raise MQAdminError(f"no name server answered: {exc}") from None
        return resp

    async def _on_every_namesrv(self, cmd_factory: Any, what: str) -> dict[str, RemotingCommand]:
        """The same request to every name server at once; name server -> its
        (successful) answer. Raises MQAdminError, once all have been tried, when
        any failed or refused, naming those and the ones done."""
        done: dict[str, RemotingCommand] = {}
        errors: dict[str, str] = {}

        async def one(addr: str) -> None:
            try:
                done[addr] = self._check(await self._invoke(addr, cmd_factory()),
                                         f"{what} on name server {addr}")
            except MQAdminError as exc:
                errors[addr] = str(exc)

        async with trio.open_nursery() as nursery:
            for addr in self.namesrv_list:
                nursery.start_soon(one, addr)
        if errors:
            ok = ", ".join(a for a in self.namesrv_list if a in done) or "none"
            raise MQAdminError("; ".join(errors[a] for a in self.namesrv_list if a in errors)
                               + f" (done on: {ok})")
        return {a: done[a] for a in self.namesrv_list}

    @staticmethod
    def _check(resp: RemotingCommand, what: str) -> RemotingCommand:
        if resp.code != ResponseCode.SUCCESS:
            name = ResponseCode(resp.code).name if resp.code in ResponseCode._value2member_map_ else resp.code
            raise MQAdminError(f"{what} failed: {name}: {resp.remark or ''}".rstrip(": "))
        return resp

    # ---- name server queries -----------------------------------------------------

    async def broker_runtime_info(self, addr: str) -> dict[str, Any]:
        """A broker's runtime figures (GET_BROKER_RUNTIME_INFO)."""
        cmd = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        body = self._check(await self._invoke(addr, cmd), "brokerStatus").decode_body()
        table = body.get("table") if isinstance(body, dict) else None
        if not isinstance(table, dict):
            raise MQAdminError(f"{addr}: brokerStatus answered without a table")
        return table

    async def cluster_info(self) -> dict[str, Any]:
        resp = await self._invoke_namesrv(
            lambda: RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        )
        body = unpack_body(self._check(resp, "clusterList").body)
        return {
            "brokerAddrTable": {
                n: BrokerData.from_dict(b) for n, b in body.get("brokerAddrTable", {}).items()
            },
            "clusterAddrTable": body.get("clusterAddrTable", {}),
        }

    async def master_addrs(self, cluster: str) -> dict[str, str]:
        """brokerName -> master address of every broker in ``cluster``."""
        info = await self.cluster_info()
        names = info["clusterAddrTable"].get(cluster)
        if not names:
            raise MQAdminError(f"cluster {cluster!r} has no broker registered")
        out = {}
        for name in names:
            bd = info["brokerAddrTable"].get(name)
            if bd is not None and bd.master_addr():
                out[name] = bd.master_addr()
        return out

    async def topic_list(self) -> list[str]:
        resp = await self._invoke_namesrv(
            lambda: RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        )
        return list(unpack_body(self._check(resp, "topicList").body).get("topicList", []))

    async def topic_route(self, topic: str) -> TopicRouteData:
        fields = GetRouteInfoRequestHeader(topic).to_fields()
        resp = await self._invoke_namesrv(
            lambda: RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, dict(fields))
        )
        return TopicRouteData.from_dict(unpack_body(self._check(resp, "topicRoute").body))

    # ---- topics --------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = PERM_RW,
        order: bool = False,
        attributes: Mapping[str, str | None] | None = None,
    ) -> list[str]:
        """Create or update ``topic`` on one broker or every master of a cluster.
        ``attributes``: changes of its attributes (a value sets a key, None
        removes it; protocol/topic_attributes.py), the others kept.

        Returns the broker addresses updated. Raises MQAdminError.
        """
        if broker_addr:
            addrs = [broker_addr]
        elif cluster:
            addrs = sorted((await self.master_addrs(cluster)).values())
        else:
            raise MQAdminError("give a cluster (-c) or a broker address (-b)")
        fields = CreateTopicRequestHeader(
            topic=topic, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums,
            perm=perm, order=order,
            attributes=format_changes(attributes) if attributes else None,
        ).to_fields()
        for addr in addrs:
            cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, dict(fields))
            self._check(await self._invoke(addr, cmd), f"updateTopic on {addr}")
        return addrs

    async def delete_topic(self, topic: str, cluster: str) -> None:
        fields = DeleteTopicRequestHeader(topic).to_fields()
        for addr in sorted((await self.master_addrs(cluster)).values()):
            cmd = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, dict(fields))
            self._check(await self._invoke(addr, cmd), f"deleteTopic on {addr}")
        await self._on_every_namesrv(
            lambda: RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, dict(fields)),
            "deleteTopic")

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        route = await self.topic_route(topic)
        fields = GetTopicStatsInfoRequestHeader(topic).to_fields()
        out: list[QueueStatus] = []
        for bd in route.broker_datas:
            addr = bd.select_addr()
            if addr is None:
                continue
            cmd = RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, dict(fields))
            body = unpack_body(self._check(await self._invoke(addr, cmd), f"topicStatus on {addr}").body)
            for row in body.get("offsetTable", []):
                out.append(QueueStatus(row["brokerName"], row["queueId"], row["minOffset"],
                                       row["maxOffset"], row["lastUpdateTimestamp"]))
        return sorted(out, key=lambda q: (q.broker_name, q.queue_id))

    async def topic_config(self, addr: str, topic: str) -> TopicConfig:
        """The topic's config on one broker (GET_TOPIC_CONFIG); MQAdminError
        (TOPIC_NOT_EXIST) when the broker has none."""
        cmd = RemotingCommand.request(RequestCode.GET_TOPIC_CONFIG,
                                      GetTopicConfigRequestHeader(topic).to_fields())
        body = self._check(await self._invoke(addr, cmd), f"getTopicConfig on {addr}").decode_body()
        try:
            cfg = TopicConfig.from_dict(body)
        except RemoteProtocolError as exc:
            raise MQAdminError(f"{addr}: getTopicConfig answered an unreadable config: "
                               f"{exc}") from exc
        if cfg.topic_name != topic:
            raise MQAdminError(f"{addr}: getTopicConfig answered topic {cfg.topic_name!r}")
        return cfg

    async def update_topic_perm(self, topic: str, perm: int, *, broker_addr: str | None = None,
                                cluster: str | None = None) -> list[PermChange]:
        """RocketMQ's updateTopicPerm: the topic's permission on one master
        (``broker_addr``, which must be a master in the topic's route) or on
        every master of ``cluster`` holding the topic. Each broker's own config
        (queue counts, order, flags) is read and sent back with the new perm."""
        if not 0 <= perm <= PERM_MAX:
            raise MQAdminError(f"perm must be within 0..{PERM_MAX} (2 W, 4 R, 6 RW), not {perm}")
        route = await self.topic_route(topic)
        masters = {a: bd.broker_name for bd in route.broker_datas if (a := bd.master_addr())}
        if broker_addr:
            if broker_addr not in masters:
                raise MQAdminError(f"{broker_addr} is not the master of a broker in the route of "
                                   f"{topic} (masters: {', '.join(sorted(masters)) or 'none'})")
            targets = {broker_addr: masters[broker_addr]}
        elif cluster:
            in_cluster = set((await self.master_addrs(cluster)).values())
            targets = {a: n for a, n in masters.items() if a in in_cluster}
            if not targets:
                raise MQAdminError(f"no master of cluster {cluster} holds the topic {topic}")
        else:
            raise MQAdminError("give a cluster (-c) or a broker address (-b)")
        changes = []
        for addr, name in sorted(targets.items()):
            old = await self.topic_config(addr, topic)
            if old.perm == perm:
                changes.append(PermChange(addr, name, old.perm, old, False))
                continue
            new = replace(old, perm=perm)
            fields = CreateTopicRequestHeader(
                topic=topic, read_queue_nums=new.read_queue_nums,
                write_queue_nums=new.write_queue_nums, perm=perm,
                topic_filter_type=new.topic_filter_type, topic_sys_flag=new.topic_sys_flag,
                order=new.order).to_fields()
            cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
            self._check(await self._invoke(addr, cmd), f"updateTopicPerm on {addr}")
            changes.append(PermChange(addr, name, old.perm, new, True))
        return changes

    async def topic_clusters(self, topic: str) -> list[str]:
        """The clusters of the brokers in the topic's route (RocketMQ's
        getTopicClusterList, which looks at the first broker only)."""
        route = await self.topic_route(topic)
        info = await self.cluster_info()
        names = {bd.broker_name for bd in route.broker_datas}
        return sorted(c for c, members in info["clusterAddrTable"].items()
                      if names & set(members))

    async def broker_addrs(self, cluster: str | None, *, masters_only: bool) -> list[str]:
        """The brokers of ``cluster`` (None: of every cluster), masters and slaves
        or masters only. MQAdminError when the cluster has no broker."""
        info = await self.cluster_info()
        clusters = info["clusterAddrTable"]
        if cluster is not None and not clusters.get(cluster):
            raise MQAdminError(f"cluster {cluster!r} has no broker registered")
        addrs: set[str] = set()
        for cname, members in clusters.items():
            if cluster is not None and cname != cluster:
                continue
            for name in members:
                bd = info["brokerAddrTable"].get(name)
                if bd is None:
                    continue
                addrs |= {a for bid, a in bd.broker_addrs.items()
                          if not masters_only or bid == MASTER_ID}
        return sorted(addrs)

    async def clean_expired_consume_queue(self, addr: str) -> CleanResult:
        """CLEAN_EXPIRED_CONSUMEQUEUE: the broker removes the queues whose messages
        are all gone, of topics nothing refers to (broker/store/queue_cleanup.py)."""
        cmd = RemotingCommand.request(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)
        resp = self._check(await self._invoke(addr, cmd), f"cleanExpiredCQ on {addr}")
        return CleanResult.from_body(addr, resp.decode_body())

    async def clean_unused_topic(self, addr: str) -> CleanResult:
        """CLEAN_UNUSED_TOPIC: the broker (a master) removes the queues of topics
        nothing refers to (no topic config, no offsets, no subscriber...)."""
        cmd = RemotingCommand.request(RequestCode.CLEAN_UNUSED_TOPIC)
        resp = self._check(await self._invoke(addr, cmd), f"cleanUnusedTopic on {addr}")
        return CleanResult.from_body(addr, resp.decode_body())

    # ---- messages ------------------------------------------------------------------

    async def query_consume_queue(self, topic: str, queue_id: int, index: int, count: int, *,
                                  broker_addr: str | None = None, group: str | None = None
                                  ) -> tuple[str, dict[str, Any]]:
        """QUERY_CONSUME_QUEUE on ``broker_addr`` (default: the master of the first
        broker, by name, in the topic's route): (address, body)."""
        if broker_addr is None:
            route = await self.topic_route(topic)
            addrs = [a for bd in sorted(route.broker_datas, key=lambda b: b.broker_name)
                     if (a := bd.select_addr())]
            if not addrs:
                raise MQAdminError(f"no broker in the route of {topic}")
            broker_addr = addrs[0]
        fields = QueryConsumeQueueRequestHeader(topic, queue_id, index, count, group).to_fields()
        cmd = RemotingCommand.request(RequestCode.QUERY_CONSUME_QUEUE, fields)
        resp = self._check(await self._invoke(broker_addr, cmd), f"queryCq on {broker_addr}")
        body = resp.decode_body()
        if not isinstance(body, dict) or not isinstance(body.get("queueData"), list):
            raise MQAdminError(f"{broker_addr}: queryCq answered without queueData")
        if resp.remark:
            body["remark"] = resp.remark
        return broker_addr, body


    async def broker_addr(self, topic: str, broker_name: str) -> str:
        route = await self.topic_route(topic)
        for bd in route.broker_datas:
            if bd.broker_name == broker_name and bd.select_addr():
                return bd.select_addr()  # type: ignore[return-value]
        raise MQAdminError(f"broker {broker_name!r} not in the route of {topic!r}")

    async def search_offset(self, topic: str, broker_name: str, queue_id: int, timestamp_ms: int) -> int:
        """First offset of a queue whose store time is at or after ``timestamp_ms``."""
        addr = await self.broker_addr(topic, broker_name)
        fields = SearchOffsetRequestHeader(topic, queue_id, timestamp_ms).to_fields()
        cmd = RemotingCommand.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields)
        resp = self._check(await self._invoke(addr, cmd), "searchOffset")
        return int(resp.ext_fields["offset"])

    async def view_message(self, msg_id: str) -> MessageExt:
        """The message with an offset msgId (store host + commit-log offset)."""
        try:
            addr, offset = decode_msg_id(msg_id)
        except ValueError as exc:
            raise MQAdminError(f"bad message id {msg_id!r}: {exc}") from exc
        cmd = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID,
                                      ViewMessageRequestHeader(offset).to_fields())
        resp = self._check(await self._invoke(addr, cmd), f"queryMsgById on {addr}")
        return decode_records(resp.body or b"", verify_crc=True)[0]

    async def query_by_key(self, topic: str, key: str, max_num: int = 64,
                           begin_ms: int = 0, end_ms: int = 2**62) -> list[MessageExt]:
        """Messages of ``topic`` indexed under ``key`` (KEYS or UNIQ_KEY), newest first."""
        route = await self.topic_route(topic)
        fields = QueryMessageRequestHeader(topic, key, max_num, begin_ms, end_ms).to_fields()
        out: list[MessageExt] = []
        for bd in route.broker_datas:
            addr = bd.select_addr()
            if addr is None:
                continue
            cmd = RemotingCommand.request(RequestCode.QUERY_MESSAGE, dict(fields))
            resp = await self._invoke(addr, cmd)
            if resp.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            self._check(resp, f"queryMsgByKey on {addr}")
            out += decode_records(resp.body or b"", verify_crc=True)
        out.sort(key=lambda m: m.store_timestamp, reverse=True)
        return out[:max_num]

    async def query_msg_trace(self, msg_id: str, trace_topic: str = RMQ_SYS_TRACE_TOPIC,
                              max_num: int = 64, begin_ms: int = 0, end_ms: int = 2**62
                              ) -> list[TraceView]:
        """The trace of a message (RocketMQ's queryMsgTraceById): the trace
        messages of ``trace_topic`` indexed under ``msg_id`` (QUERY_MESSAGE by
        key; at most ``max_num``, newest first), their records of ``msg_id``,
        oldest first (protocol/trace_data.py: ``trace_views``)."""
        if not msg_id or " " in msg_id:
            raise MQAdminError(f"bad message id {names.shown(msg_id)}")
        msgs = await self.query_by_key(trace_topic, msg_id, max_num, begin_ms, end_ms)
        records: list[tuple[str, TraceContext]] = []
        for m in msgs:  # anyone may write the trace topic: what is built is bounded
            left = MAX_TRACE_RECORDS - len(records)
            if left <= 0:
                break
            host = str(m.born_host).rpartition(":")[0] or str(m.born_host)
            text = m.body.decode("utf-8", errors="replace")
            records += [(host, ctx) for ctx in decode(text, msg_id, left)]
        return trace_views(msg_id, records)

    # ---- consumers -----------------------------------------------------------------

    async def _cluster_masters(self) -> list[str]:
        info = await self.cluster_info()
        return sorted({bd.master_addr() for bd in info["brokerAddrTable"].values() if bd.master_addr()})

    async def consume_stats(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        """Per queue: brokerOffset, consumerOffset, lag (brokerOffset - consumerOffset)."""
        rows: list[dict[str, Any]] = []
        fields: dict[str, Any] = {"consumerGroup": group}
        if topic:
            fields["topic"] = topic
        for addr in await self._cluster_masters():
            cmd = RemotingCommand.request(RequestCode.GET_CONSUME_STATS, dict(fields))
            body = unpack_body(self._check(await self._invoke(addr, cmd), f"consumerProgress on {addr}").body)
            for row in body.get("offsetTable", []):
                row["lag"] = row["brokerOffset"] - row["consumerOffset"]
                rows.append(row)
        return sorted(rows, key=lambda r: (r["topic"], r["brokerName"], r["queueId"]))

    async def consume_tps(self, group: str, topic: str | None = None) -> float:
        """Messages per second the group pulled over the last minute, every master
        together (RocketMQ's ConsumeStats.consumeTps; 0 from a broker without it)."""
        fields: dict[str, Any] = {"consumerGroup": group}
        if topic:
            fields["topic"] = topic
        total = 0.0
        for addr in await self._cluster_masters():
            cmd = RemotingCommand.request(RequestCode.GET_CONSUME_STATS, dict(fields))
            resp = self._check(await self._invoke(addr, cmd), f"consumerProgress on {addr}")
            tps = unpack_body(resp.body).get("consumeTps", 0)
            if isinstance(tps, (int, float)):
                total += float(tps)
        return total

    async def consumer_connection(self, group: str) -> list[dict[str, Any]]:
        out = []
        for addr in await self._cluster_masters():
            cmd = RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                          {"consumerGroup": group})
            resp = await self._invoke(addr, cmd)
            if resp.code == ResponseCode.SUCCESS:
                body = unpack_body(resp.body)
                out.append({"broker": addr, **body})
        if not out:
            raise MQAdminError(f"the consumer group {group} is not online")
        return out

    async def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int
                                   ) -> list[tuple[str, int, int]]:
        """Set the group's offsets of every queue of ``topic`` to the first message
        stored at or after ``timestamp_ms`` (mqadmin resetOffsetByTime), either way.
        Each master of the topic does it (INVOKE_BROKER_TO_RESET_OFFSET, forced): it
        commits them as an admin's reset (counted: its slaves take them even when
        they go back) and tells the group's online consumers, which take them at once
        instead of writing their old offsets back. A broker that answers
        CONSUMER_NOT_ONLINE (RocketMQ's, for a group with no consumer online) gets
        them committed here, queue by queue, as RocketMQ's tool falls back to
        resetOffsetByTimeOld. Returns (broker, queue, offset) rows."""
        return await self.reset_offset_by_broker(group, topic, timestamp_ms, force=True,
                                                 offline_fallback=True)

    async def _commit_reset_by_time(self, group: str, topic: str, broker_name: str,
                                    addr: str, timestamp_ms: int) -> list[tuple[str, int, int]]:
        """The old way of resetOffsetByTime on one broker: each read queue's offset at
        ``timestamp_ms`` committed as an admin's reset (UPDATE_CONSUMER_OFFSET
        adminReset); what no consumer is told."""
        route = await self.topic_route(topic)
        rows = []
        for qd in route.queue_datas:
            if qd.broker_name != broker_name or not usable(qd):
                continue
            for qid in range(qd.read_queue_nums):
                offset = await self.search_offset(topic, broker_name, qid, timestamp_ms)
                fields = UpdateConsumerOffsetRequestHeader(group, topic, qid, offset,
                                                           admin_reset=True).to_fields()
                cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, fields)
                self._check(await self._invoke(addr, cmd), "resetOffsetByTime")
                rows.append((broker_name, qid, offset))
        return rows

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        fields = WipeWritePermOfBrokerRequestHeader(broker_name).to_fields()
        answers = await self._on_every_namesrv(
            lambda: RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, dict(fields)),
            "wipeWritePerm")
        return {a: int(r.ext_fields.get("wipeTopicCount", 0)) for a, r in answers.items()}

    async def add_write_perm(self, broker_name: str) -> dict[str, int]:
        """Give a broker's topics their write permission back on every name server
        (ADD_WRITE_PERM_OF_BROKER); name server -> topics changed."""
        fields = WipeWritePermOfBrokerRequestHeader(broker_name).to_fields()
        answers = await self._on_every_namesrv(
            lambda: RemotingCommand.request(RequestCode.ADD_WRITE_PERM_OF_BROKER, dict(fields)),
            "addWritePerm")
        return {a: int(r.ext_fields.get("addTopicCount", 0)) for a, r in answers.items()}

    # ---- broker configuration and statistics ----------------------------------------

    async def get_broker_config(self, addr: str) -> dict[str, str]:
        """A broker's configuration (GET_BROKER_CONFIG), key -> value text; a secret's
        value (protocol.config.is_secret_key) masked even when the broker shows it
        (an older broker does)."""
        cmd = RemotingCommand.request(RequestCode.GET_BROKER_CONFIG)
        resp = self._check(await self._invoke(addr, cmd), f"getBrokerConfig on {addr}")
        return _shown_config(resp, f"{addr}: getBrokerConfig")

    async def update_broker_config(self, addr: str, props: dict[str, str]) -> None:
        """Change keys of a running broker (UPDATE_BROKER_CONFIG); the broker persists
        them to its config file. Raises MQAdminError naming a key it refuses; a secret
        key is refused before anything is sent (the broker refuses it too)."""
        cmd = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG,
                                      body=_config_changes(props, "broker"))
        self._check(await self._invoke(addr, cmd), f"updateBrokerConfig on {addr}")

    async def view_broker_stats_data(self, addr: str, stats_name: str, stats_key: str
                                     ) -> BrokerStatsData:
        """One statistic of a broker (VIEW_BROKER_STATS_DATA); MQAdminError when the
        broker has none under that name and key."""
        cmd = RemotingCommand.request(RequestCode.VIEW_BROKER_STATS_DATA,
                                      {"statsName": stats_name, "statsKey": stats_key})
        resp = self._check(await self._invoke(addr, cmd), f"viewBrokerStatsData on {addr}")
        return BrokerStatsData.from_dict(resp.decode_body())

    async def query_topic_consume_by_who(self, addr: str, topic: str) -> list[str]:
        """The consumer groups a broker knows for ``topic`` (QUERY_TOPIC_CONSUME_BY_WHO)."""
        cmd = RemotingCommand.request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
        body = self._check(await self._invoke(addr, cmd), f"queryTopicConsumeByWho on {addr}"
                           ).decode_body()
        groups = body.get("groupList", []) if isinstance(body, dict) else []
        return sorted(str(g) for g in groups)

    async def producer_connection(self, group: str, topic: str) -> list[ProducerConnection]:
        """The producers of ``group`` connected to the masters of ``topic``'s route
        (GET_PRODUCER_CONNECTION_LIST), one entry per client id. Raises MQAdminError
        when no broker knows the group."""
        route = await self.topic_route(topic)
        seen: dict[str, ProducerConnection] = {}
        refusals: list[str] = []
        for bd in route.broker_datas:
            addr = bd.master_addr()
            if not addr:
                continue
            cmd = RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                          {"producerGroup": group})
            resp = await self._invoke(addr, cmd)
            if resp.code != ResponseCode.SUCCESS:
                refusals.append(f"{addr}: {resp.remark or resp.code}")
                continue
            body = resp.decode_body()
            for c in body.get("connectionSet", []) if isinstance(body, dict) else []:
                conn = ProducerConnection.from_dict(c)
                seen.setdefault(conn.client_id, conn)
        if not seen:
            why = "; ".join(refusals) or f"no master broker in the route of {topic}"
            raise MQAdminError(f"the producer group {group} is not online: {why}")
        return sorted(seen.values(), key=lambda c: c.client_id)

    async def stats_all(self, topic: str | None = None, *, include_system: bool = False
                        ) -> list[TopicGroupStats]:
        """RocketMQ's statsAll: per topic (every topic the name servers know, or
        ``topic``) and consumer group, in/out TPS over the last minute, messages in
        and out over 24 hours and the group's accumulation (consume-stats lag).
        A topic without a consumer group gets one row with ``group`` None."""
        topics = [topic] if topic else sorted(await self.topic_list())
        rows: list[TopicGroupStats] = []
        for t in topics:
            if topic is None and not include_system and is_system_topic(t):
                continue
            try:
                route = await self.topic_route(t)
            except MQAdminError:
                if topic:
                    raise
                continue  # deleted meanwhile
            masters = sorted({a for bd in route.broker_datas if (a := bd.master_addr())})
            in_tps, in_24h = 0.0, 0
            groups: set[str] = set()
            for addr in masters:
                try:
                    put = await self.view_broker_stats_data(addr, TOPIC_PUT_NUMS, t)
                except MQAdminError:
                    put = BrokerStatsData()  # nothing put yet on this broker
                in_tps += put.minute.tps
                in_24h += put.sum_24h()
                try:
                    groups.update(await self.query_topic_consume_by_who(addr, t))
                except MQAdminError:
                    pass
            if not groups:
                rows.append(TopicGroupStats(t, None, None, in_tps, None, in_24h, None))
                continue
            for group in sorted(groups):
                out_tps, out_24h = 0.0, 0
                for addr in masters:
                    try:
                        got = await self.view_broker_stats_data(addr, GROUP_GET_NUMS, f"{t}@{group}")
                    except MQAdminError:
                        continue
                    out_tps += got.minute.tps
                    out_24h += got.sum_24h()
                try:
                    accumulation = sum(r["lag"] for r in await self.consume_stats(group, t))
                except MQAdminError:
                    accumulation = 0
                rows.append(TopicGroupStats(t, group, accumulation, in_tps, out_tps, in_24h, out_24h))
        return rows

    # ---- subscription groups, group offsets, consumers, KV and name server config ----
    # (mqadmin updateSubGroup, deleteSubGroup, consumerStatus, cloneGroupOffset,
    # skipAccumulatedMessage, allocateMQ, updateOrderConf, updateKvConfig,
    # deleteKvConfig, getNamesrvConfig, updateNamesrvConfig)

    async def subscription_groups(self, addr: str) -> dict[str, dict[str, Any]]:
        """A broker's subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG): name ->
        SubscriptionGroupConfig map."""
        cmd = RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        body = self._check(await self._invoke(addr, cmd), f"subscription groups of {addr}"
                           ).decode_body()
        table = body.get("subscriptionGroupTable") if isinstance(body, dict) else None
        if not isinstance(table, dict):
            raise MQAdminError(f"{addr}: the subscription groups are not a map")
        return {str(k): v for k, v in table.items() if isinstance(v, dict)}

    async def update_subscription_group(self, addr: str, config: dict[str, Any]) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ``config`` (RocketMQ's
        SubscriptionGroupConfig fields) replaces the group's on ``addr``."""
        cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                      body=pack_body(config))
        self._check(await self._invoke(addr, cmd), f"updateSubGroup on {addr}")

    async def delete_subscription_group(self, addr: str, group: str) -> None:
        """DELETE_SUBSCRIPTIONGROUP; MQAdminError (SUBSCRIPTION_GROUP_NOT_EXIST) when
        the broker has no such group."""
        cmd = RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": group})
        self._check(await self._invoke(addr, cmd), f"deleteSubGroup on {addr}")

    async def _topic_masters(self, topic: str) -> list[tuple[str, str]]:
        """(broker name, master address) of each broker of ``topic``'s route."""
        route = await self.topic_route(topic)
        masters = sorted((bd.broker_name, a) for bd in route.broker_datas
                         if (a := bd.master_addr()))
        if not masters:
            raise MQAdminError(f"no master broker in the route of {topic}")
        return masters

    async def reset_offset_by_broker(self, group: str, topic: str, timestamp_ms: int,
                                     force: bool = True, offline_fallback: bool = False
                                     ) -> list[tuple[str, int, int]]:
        """INVOKE_BROKER_TO_RESET_OFFSET on every master of ``topic``: the group's
        offsets go to the first message stored at or after ``timestamp_ms`` (-1:
        past the last message, everything accumulated skipped; without ``force``
        only backwards), committed by each broker as an admin's reset and taken by
        the group's online consumers at once. ``offline_fallback``: a broker that
        answers CONSUMER_NOT_ONLINE gets the offsets at ``timestamp_ms`` committed
        queue by queue instead. Returns (broker, queue, offset) rows."""
        fields = ResetOffsetRequestHeader(topic, group, timestamp_ms, force).to_fields()
        rows: list[tuple[str, int, int]] = []
        for name, addr in await self._topic_masters(topic):
            cmd = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, dict(fields))
            resp = await self._invoke(addr, cmd)
            if offline_fallback and resp.code == ResponseCode.CONSUMER_NOT_ONLINE:
                rows += await self._commit_reset_by_time(group, topic, name, addr, timestamp_ms)
                continue
            self._check(resp, f"resetOffset on {addr}")
            try:
                body = ResetOffsetBody.from_wire(resp.decode_body())
            except RemoteProtocolError as exc:
                raise MQAdminError(f"{addr}: resetOffset answered an unreadable body: {exc}"
                                   ) from exc
            rows += [(mq.broker_name or name, mq.queue_id, o)
                     for mq, o in sorted(body.offsets.items())]
        return rows

    async def skip_accumulated(self, group: str, topic: str,
                               force: bool = True) -> list[tuple[str, int, int]]:
        """mqadmin skipAccumulatedMessage: every queue of ``topic`` to its max offset."""
        return await self.reset_offset_by_broker(group, topic, SKIP_ALL, force)

    async def clone_group_offset(self, src: str, dest: str, topic: str
                                 ) -> list[tuple[str, int, int]]:
        """``dest``'s offsets of ``topic`` set to ``src``'s, queue by queue (each an
        admin's reset: slaves take it even backwards); queues where ``src`` has no
        offset are left alone. MQAdminError when ``src`` has none at all. Returns
        (broker, queue, offset) rows."""
        route = await self.topic_route(topic)
        rows: list[tuple[str, int, int]] = []
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if not usable(qd):
                continue
            addr = await self.broker_addr(topic, qd.broker_name)
            for qid in range(qd.read_queue_nums):
                # the group's stored offset only (not the 0 a new group is answered)
                query = QueryConsumerOffsetRequestHeader(src, topic, qid,
                                                         set_zero_if_not_found=False).to_fields()
                resp = await self._invoke(addr, RemotingCommand.request(
                    RequestCode.QUERY_CONSUMER_OFFSET, query))
                if resp.code == ResponseCode.QUERY_NOT_FOUND:
                    continue
                offset = int(self._check(resp, f"cloneGroupOffset on {addr}")
                             .ext_fields.get("offset", -1))
                if offset < 0:
                    continue
                fields = UpdateConsumerOffsetRequestHeader(dest, topic, qid, offset,
                                                           admin_reset=True).to_fields()
                cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, fields)
                self._check(await self._invoke(addr, cmd), f"cloneGroupOffset on {addr}")
                rows.append((qd.broker_name, qid, offset))
        if not rows:
            raise MQAdminError(f"the consumer group {src} has no offset of topic {topic}")
        return rows

    async def consumer_running_info(self, group: str, client_id: str | None = None,
                                    jstack: bool = False) -> dict[str, RunningInfo | str]:
        """GET_CONSUMER_RUNNING_INFO of each online client of ``group`` (or only
        ``client_id``), asked through a broker the client is connected to: client id
        -> its RunningInfo, or why it could not be had. MQAdminError when the group
        (or that client) is not online."""
        via: dict[str, str] = {}
        for b in await self.consumer_connection(group):
            for c in b.get("connectionSet") or []:
                if isinstance(c, dict) and isinstance(c.get("clientId"), str):
                    via.setdefault(c["clientId"], b["broker"])
        if client_id is not None:
            if client_id not in via:
                raise MQAdminError(f"the consumer {client_id} of group {group} is not online")
            via = {client_id: via[client_id]}
        out: dict[str, RunningInfo | str] = {}
        for cid, addr in sorted(via.items()):
            fields = GetConsumerRunningInfoRequestHeader(group, cid, jstack).to_fields()
            cmd = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, fields)
            try:
                resp = self._check(await self._invoke(addr, cmd, self.timeout + RELAY_TIMEOUT_S),
                                   f"consumerStatus of {cid} via {addr}")
                out[cid] = RunningInfo.from_body(resp.decode_body())
            except (MQAdminError, RemoteProtocolError, RunningInfoError) as exc:
                if client_id is not None:
                    raise MQAdminError(str(exc)) from exc
                out[cid] = str(exc)
        return out

    async def allocate_mq(self, topic: str, client_ids: list[str]
                          ) -> dict[str, list[MessageQueue]]:
        """mqadmin allocateMQ: how ``topic``'s readable queues split among consumers
        with these ids (averagely, as a group's members sort their ids)."""
        ids = [i for i in dict.fromkeys(client_ids) if i]
        if not ids:
            raise MQAdminError("give at least one consumer id (-i a,b,c)")
        mqs = subscribe_queues(topic, await self.topic_route(topic))
        return {cid: allocate_averagely(cid, mqs, ids) for cid in ids}

    async def put_kv_config(self, namespace: str, key: str, value: str) -> list[str]:
        """PUT_KV_CONFIG on every name server; their addresses."""
        fields = PutKVConfigRequestHeader(namespace, key, value).to_fields()
        done = await self._on_every_namesrv(
            lambda: RemotingCommand.request(RequestCode.PUT_KV_CONFIG, dict(fields)),
            "updateKvConfig")
        return list(done)

    async def delete_kv_config(self, namespace: str, key: str) -> list[str]:
        """DELETE_KV_CONFIG on every name server (a missing key is no error)."""
        fields = DeleteKVConfigRequestHeader(namespace, key).to_fields()
        done = await self._on_every_namesrv(
            lambda: RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, dict(fields)),
            "deleteKvConfig")
        return list(done)

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        """GET_KV_CONFIG from the first name server that answers; None when unset."""
        fields = GetKVConfigRequestHeader(namespace, key).to_fields()
        resp = await self._invoke_namesrv(
            lambda: RemotingCommand.request(RequestCode.GET_KV_CONFIG, dict(fields)))
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        value = self._check(resp, "getKvConfig").ext_fields.get("value")
        return value if isinstance(value, str) else None

    async def get_namesrv_config(self) -> dict[str, dict[str, str]]:
        """GET_NAMESRV_CONFIG of every name server: address -> key -> value, secrets
        masked."""
        answers = await self._on_every_namesrv(
            lambda: RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG), "getNamesrvConfig")
        return {a: _shown_config(r, f"{a}: getNamesrvConfig") for a, r in answers.items()}

    async def update_namesrv_config(self, props: dict[str, str]) -> dict[str, str | None]:
        """UPDATE_NAMESRV_CONFIG on every name server: address -> its remark (None,
        or why the change is not persisted). A secret key is refused before anything
        is sent; a key a name server cannot change at run time is refused by it."""
        body = _config_changes(props, "name server")
        answers = await self._on_every_namesrv(
            lambda: RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=body),
            "updateNamesrvConfig")
        return {a: r.remark or None for a, r in answers.items()}

    # ---- ACL administration (plain_acl.yml on the brokers; admin accounts only) -----

    async def acl_targets(self, broker_addr: str | None = None,
                          cluster: str | None = None) -> list[str]:
        """``broker_addr``, or every master of ``cluster`` (RocketMQ's -b / -c)."""
        if broker_addr:
            return [broker_addr]
        if cluster:
            return sorted(set((await self.master_addrs(cluster)).values()))
        raise MQAdminError("give a cluster (-c) or a broker address (-b)")

    async def update_acl_config(self, addr: str, access_key: str, *,
                                secret_key: str | None = None,
                                white_remote_address: str | None = None,
                                admin: bool | None = None,
                                default_topic_perm: str | None = None,
                                default_group_perm: str | None = None,
                                topic_perms: list[str] | None = None,
                                group_perms: list[str] | None = None) -> None:
        """UPDATE_AND_CREATE_ACL_CONFIG: create the account or update the fields given
        (RocketMQ's createAndUpdatePlainAccessConfig); ``admin`` None keeps an existing
        account's flag (a new account is not admin)."""
        fields: dict[str, str] = {"accessKey": access_key}
        if admin is not None:
            fields["admin"] = "true" if admin else "false"
        for name, value in (("secretKey", secret_key),
                            ("whiteRemoteAddress", white_remote_address),
                            ("defaultTopicPerm", default_topic_perm),
                            ("defaultGroupPerm", default_group_perm)):
            if value is not None:
                fields[name] = value
        if topic_perms is not None:
            fields["topicPerms"] = ",".join(topic_perms)
        if group_perms is not None:
            fields["groupPerms"] = ",".join(group_perms)
        cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, fields)
        self._check(await self._invoke(addr, cmd), f"updateAclConfig on {addr}")

    async def delete_acl_config(self, addr: str, access_key: str) -> None:
        """DELETE_ACL_CONFIG (RocketMQ's deletePlainAccessConfig)."""
        cmd = RemotingCommand.request(RequestCode.DELETE_ACL_CONFIG, {"accessKey": access_key})
        self._check(await self._invoke(addr, cmd), f"deleteAclConfig on {addr}")

    async def update_global_white_addrs(self, addr: str, addresses: list[str]) -> None:
        """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: the list replaces the broker's."""
        cmd = RemotingCommand.request(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                                      {"globalWhiteAddrs": ",".join(addresses)})
        self._check(await self._invoke(addr, cmd), f"updateGlobalWhiteAddr on {addr}")

    async def acl_config_version(self, addr: str) -> AclConfigVersion:
        """GET_BROKER_CLUSTER_ACL_INFO: the broker's ACL file data version."""
        cmd = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
        resp = self._check(await self._invoke(addr, cmd), f"clusterAclConfigVersion on {addr}")
        return AclConfigVersion.from_fields(resp.ext_fields or {}, addr)

    async def acl_config(self, addr: str) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_ACL_CONFIG: globalWhiteAddrs and plainAccessConfigs."""
        cmd = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
        resp = self._check(await self._invoke(addr, cmd), f"getAclConfig on {addr}")
        body = unpack_body(resp.body)
        if not isinstance(body, dict):
            raise MQAdminError(f"{addr}: the ACL config is not a map")
        return body


def _shown_config(resp: RemotingCommand, what: str) -> dict[str, str]:
    """A GET_BROKER_CONFIG / GET_NAMESRV_CONFIG answer, key -> value text; a secret's
    value (protocol.config.is_secret_key) masked even when the daemon shows it (an
    older one does)."""
    try:
        return mask_secrets(parse_properties((resp.body or b"").decode("utf-8", errors="replace")))
    except ConfigError as exc:
        raise MQAdminError(f"{what} answered unreadable properties: {exc}") from exc


def _config_changes(props: dict[str, str], daemon: str) -> bytes:
    """UPDATE_BROKER_CONFIG's / UPDATE_NAMESRV_CONFIG's body. MQAdminError, before
    anything is sent, for no key, a bad key or value, or a secret key (the daemon
    refuses it too)."""
    if not props:
        raise MQAdminError("no key to update")
    for key in props:
        if not key or "=" in key or "\n" in key:
            raise MQAdminError(f"bad config key {key!r}")
        if is_secret_key(key):
            raise MQAdminError(f"{key} holds a secret: a secret cannot be changed over the "
                               f"wire (set it in the {daemon}'s config file and restart it)")
    for value in props.values():
        if "\n" in value:
            raise MQAdminError("a config value cannot hold a line break")
    return format_properties(props).encode()


@dataclass(frozen=True, slots=True)
class AclConfigVersion:
    """One broker's row of clusterAclConfigVersion."""

    cluster_name: str
    broker_name: str
    broker_addr: str
    counter: int
    timestamp: int

    @classmethod
    def from_fields(cls, fields: dict[str, Any], addr: str) -> AclConfigVersion:
        try:
            version = json.loads(str(fields.get("version") or "{}"))
        except ValueError:
            version = None
        if not isinstance(version, dict):
            raise MQAdminError(f"{addr}: clusterAclConfigVersion answered an unreadable version")
        counter, ts = version.get("counter", 0), version.get("timestamp", 0)
        return cls(str(fields.get("clusterName") or ""), str(fields.get("brokerName") or ""),
                   str(fields.get("brokerAddr") or addr),
                   counter if isinstance(counter, int) else 0, ts if isinstance(ts, int) else 0)
