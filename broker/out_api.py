"""BrokerOuterAPI: the broker's requests to name servers.

Registration never raises for one name server's sake: whatever fails for an
address (connection, timeout, a refusal, a body the frame cannot carry, a
bug) is logged, rate-limited, and the next period tries again.

Registration is incremental with name servers that take it. The first
registration to a name server carries the whole topic table (and says
``incrementalCapable``); a name server answering ``incrementalOk`` then gets
only the topics changed since the last registration it took (``incremental``,
the body's ``baseDataVersion`` naming what it should hold, ``deletedTopics``
the topics gone), and the periodic registration is a keep-alive carrying
nothing or only changes. A name server that does not hold the base (it
restarted, dropped the broker, ...) answers ``needFull`` and gets the whole
table at once. An old name server never answers ``incrementalOk`` and keeps
getting whole tables. Whole tables are copied on the event loop and encoded
(msgpack, zlib above 1 MiB) in a worker thread, once for every name server
that needs the same one.

Every name server on ``namesrvAddr`` is registered with, each on its own and
each request bounded by ``registerBrokerTimeoutMills`` (more for a large
table): ``register_broker_all`` asks several at once, and the controller runs
one registration loop per name server, so a name server that hangs holds up
nothing but its own loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
import trio

from broker.config import BrokerConfig
from protocol.body import compress_body, pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.crc import crc32
from protocol.errors import RemoteProtocolError
from protocol.headers import (
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from protocol.names import shown
from protocol.route import PERM_RW, BrokerData, DataVersion, TopicConfig, TopicRouteData
from protocol.trio.client import RemotingClient
from protocol.trio.errors import RemotingError
from protocol.trio.service import Guard, describe

FRAME_SLACK = 64 * 1024  # room for the command's header fields around the body
COMPRESS_ABOVE = 1024 * 1024  # registration bodies larger than this go compressed
# An incremental registration carries at most this many changes, or half the table if
# more; beyond that the whole table goes.
INCREMENTAL_MAX_CHANGES = 1000
# Encoded inline below this many topics, in a worker thread above.
ENCODE_INLINE_TOPICS = 2000
# Seconds added to registerBrokerTimeoutMills per topic of a whole table: the name
# server applies a large table in chunks.
TIMEOUT_PER_TOPIC_S = 1 / 20_000


class TopicSource(Protocol):
    """What registration reads of the topic manager (broker/topic_config_manager.py)."""

    seq: int
    data_version: DataVersion
    table: dict[str, TopicConfig]

    def changes_since(self, seq: int) -> tuple[dict[str, TopicConfig], list[str]] | None: ...


@dataclass(slots=True)
class NamesrvView:
    """What one name server holds of this broker's topics, as of the last
    registration it took: the topic change number and data version then, and
    whether it takes incremental registrations."""

    seq: int
    version: DataVersion
    incremental: bool


@dataclass(slots=True)
class RegisterBody:
    body: bytes
    compressed: bool
    crc: int
    topics: int  # topic configs it carries
    seq: int = 0  # the topic change number it brings a name server to
    version: DataVersion | None = None  # the data version it brings a name server to
    names: tuple[str, ...] = ()  # its longest topic names (for a too-large report)


def encode_register_body(wire: dict[str, Any], always_compress: bool) -> RegisterBody:
    """msgpack; zlib when asked or above COMPRESS_ABOVE (RocketMQ's compressed
    registration: retry and DLQ topic tables shrink ~10x)."""
    table = wire.get("topicConfigTable")
    body = pack_body(wire)
    compressed = always_compress or len(body) > COMPRESS_ABOVE
    crc = 0
    if compressed:
        body = compress_body(body)
        crc = crc32(body) & 0x7FFFFFFF
    names = tuple(sorted(table, key=len, reverse=True)[:3]) if isinstance(table, dict) else ()
    return RegisterBody(body, compressed, crc, len(table) if isinstance(table, dict) else 0,
                        names=names)


def _topics_wire(table: dict[str, TopicConfig], broker_perm: int | None) -> dict[str, Any]:
    """Topic configs on the wire; a broker that is not both readable and
    writable (``brokerPermission``) registers every topic with its permission,
    as RocketMQ's registerBrokerAll, so routes show it."""
    if broker_perm is None:
        return {n: c.to_dict() for n, c in table.items()}
    out = {}
    for n, c in table.items():
        d = c.to_dict()
        d["perm"] = broker_perm
        out[n] = d
    return out


def full_wire(table: dict[str, TopicConfig], version: DataVersion,
              broker_perm: int | None = None) -> dict[str, Any]:
    """The whole table (dataVersion first: a name server reads it before the table)."""
    return {"dataVersion": version.to_dict(),
            "topicConfigTable": _topics_wire(table, broker_perm)}


def incremental_wire(changed: dict[str, TopicConfig], deleted: list[str], version: DataVersion,
                     base: DataVersion, broker_perm: int | None = None) -> dict[str, Any]:
    return {"dataVersion": version.to_dict(), "baseDataVersion": base.to_dict(),
            "topicConfigTable": _topics_wire(changed, broker_perm),
            "deletedTopics": list(deleted)}


def _copy(v: DataVersion) -> DataVersion:
    return DataVersion(v.timestamp, v.counter)


class BrokerOuterAPI:
    def __init__(self, config: BrokerConfig, client: RemotingClient) -> None:
        self.config = config
        self.client = client
        self.log = structlog.get_logger("broker.outer").bind(broker=config.broker_name)
        self.guard = Guard(self.log, "register")
        # a slave's master HA address, from the latest registration answer
        self.master_ha_addr: str | None = None
        self.master_addr: str | None = None
        # name server address -> what it holds of this broker's topics
        self.views: dict[str, NamesrvView] = {}
        self.full_registrations = 0  # whole tables sent (tests, figures)
        self.incremental_registrations = 0
        # the whole table last encoded from the topic manager (its seq and data
        # version inside): shared by the registrations under way that need it,
        # dropped when none is left
        self._full: RegisterBody | None = None
        # the bound gRPC port once served (enableGrpc), carried by every registration
        self.grpc_port: int | None = None
        # controller mode: the masterEpoch and SyncStateSet epoch of the role taken,
        # carried by every registration (the name server keeps the newer master)
        self.master_epoch: int | None = None
        self.sync_state_set_epoch: int | None = None
        self._full_lock = trio.Lock()
        self._registering = 0

    def _header(self, body: RegisterBody, ha_server_addr: str | None,
                incremental: bool) -> dict[str, Any]:
        header = RegisterBrokerRequestHeader(
            broker_name=self.config.broker_name,
            broker_addr=self.config.broker_addr,
            cluster_name=self.config.broker_cluster_name,
            broker_id=self.config.broker_id,
            ha_server_addr=ha_server_addr,
            incremental=incremental,
            incremental_capable=True,
            grpc_port=self.grpc_port,
            master_epoch=self.master_epoch,
            sync_state_set_epoch=self.sync_state_set_epoch,
        )
        if body.compressed:
            header.compressed = True
            header.body_crc32 = body.crc
        return header.to_fields()

    async def _encode(self, wire: dict[str, Any] | Callable[[], dict[str, Any]],
                      topics: int) -> RegisterBody:
        """The body of ``wire`` (or of what it builds): built and encoded inline
        when small, else in a worker thread (``wire`` must then read nothing
        the event loop changes)."""
        always = self.config.compressed_register

        def build() -> RegisterBody:
            return encode_register_body(wire() if callable(wire) else wire, always)

        if topics <= ENCODE_INLINE_TOPICS:
            return build()
        return await trio.to_thread.run_sync(build)

    def _fits(self, body: RegisterBody) -> bool:
        limit = self.config.max_frame_size - FRAME_SLACK
        if len(body.body) <= limit:
            return True
        self.guard.note("registration too large for a frame, not sent", "too-large",
                        log_level="error", bytes=len(body.body), limit=limit,
                        topics=body.topics, longest_topics=[shown(n) for n in body.names])
        return False

    async def _full_of(self, source: TopicSource, broker_perm: int | None) -> RegisterBody | None:
        """The whole table of ``source`` as it is now, encoded (once for every
        name server needing it while the table does not change); None when it
        does not fit in a frame (reported)."""
        async with self._full_lock:
            full = self._full
            if full is None or full.seq != source.seq:
                # copied now (configs are never changed in place), encoded in a thread
                seq, version = source.seq, _copy(source.data_version)
                copy = dict(source.table)
                full = await self._encode(lambda: full_wire(copy, version, broker_perm), len(copy))
                full.seq, full.version = seq, version
                self._full = full
            return full if self._fits(full) else None

    async def register_broker_all(self, topics: dict[str, object] | TopicSource,
                                  ha_server_addr: str | None = None,
                                  addrs: list[str] | None = None) -> int:
        """Register with every name server (or those of ``addrs``) at once;
        returns how many accepted.

        ``topics`` is the topic manager (incremental where a name server takes
        it), or a whole table on the wire (``to_wire()``: always sent whole).
        ``ha_server_addr`` is advertised only when given: a broker whose HA
        service does not listen (yet) has none. Raises only when the request
        cannot be built (the table does not pack); the caller logs that and
        retries next period."""
        source = None if isinstance(topics, dict) else topics
        targets = self.config.namesrv_addr_list if addrs is None else addrs
        perm = self.config.broker_permission
        broker_perm = perm if (perm & PERM_RW) != PERM_RW else None
        wire_body: list[RegisterBody | None] = []
        wire_lock = trio.Lock()

        async def full_body() -> RegisterBody | None:
            if source is not None:
                return await self._full_of(source, broker_perm)
            async with wire_lock:  # a table on the wire: encoded once per call
                if not wire_body:
                    assert isinstance(topics, dict)
                    table = topics.get("topicConfigTable")
                    built = await self._encode(topics,
                                               len(table) if isinstance(table, dict) else 0)
                    wire_body.append(built if self._fits(built) else None)
                return wire_body[0]

        # incremental bodies, all taken now, before any await: one consistent state
        delta_wires: dict[str, tuple[dict[str, Any], int]] = {}
        if source is not None:
            seq, version = source.seq, _copy(source.data_version)
            for addr in targets:
                view = self.views.get(addr)
                if view is None or not view.incremental:
                    continue
                changes = source.changes_since(view.seq)
                if changes is None:
                    continue
                changed, deleted = changes
                count = len(changed) + len(deleted)
                if count > max(INCREMENTAL_MAX_CHANGES, len(source.table) // 2):
                    continue
                delta_wires[addr] = (incremental_wire(changed, deleted, version, view.version,
                                                      broker_perm), count)
        deltas: dict[str, RegisterBody] = {}
        for addr, (delta, count) in delta_wires.items():
            deltas[addr] = body = await self._encode(delta, count)
            body.seq, body.version = seq, version
        ok = 0

        async def one(addr: str) -> None:
            nonlocal ok
            delta = deltas.get(addr)
            if delta is not None and self._fits(delta):
                answer = await self._send(addr, delta, ha_server_addr, True)
                if answer is None:
                    return
                if not answer.need_full:
                    self.incremental_registrations += 1
                    ok += 1
                    self._took(addr, delta, answer)
                    return
                self.guard.note("name server asked for the whole topic table", ("full", addr),
                                log_level="info", namesrv=addr)
            body = await full_body()
            if body is None:
                return
            answer = await self._send(addr, body, ha_server_addr, False)
            if answer is None:
                return
            self.full_registrations += 1
            ok += 1
            if source is not None:
                self._took(addr, body, answer)

        self._registering += 1
        try:
            async with trio.open_nursery() as nursery:
                for addr in targets:
                    nursery.start_soon(one, addr)
        finally:
            self._registering -= 1
            if not self._registering:
                self._full = None
        return ok

    def _took(self, addr: str, body: RegisterBody, answer: RegisterBrokerResponseHeader) -> None:
        """``addr`` took ``body``: it now holds the state the body brought."""
        if body.version is not None:
            self.views[addr] = NamesrvView(body.seq, body.version, answer.incremental_ok)

    async def _send(self, addr: str, body: RegisterBody, ha_server_addr: str | None,
                    incremental: bool) -> RegisterBrokerResponseHeader | None:
        """One REGISTER_BROKER; the answer's header, or None (logged) when it failed."""
        fields = self._header(body, ha_server_addr, incremental)
        cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body.body)
        timeout = self.config.register_broker_timeout_ms / 1000 + body.topics * TIMEOUT_PER_TOPIC_S
        try:
            resp = await self.client.invoke(addr, cmd, timeout)
        except RemotingError as exc:
            self.guard.note("register to name server failed", ("remoting", addr),
                            namesrv=addr, error=describe(exc))
            return None
        except Exception as exc:  # e.g. the frame cannot carry it: logged, retried
            self.guard.failed(exc, "register to name server failed", namesrv=addr)
            return None
        if resp.code != ResponseCode.SUCCESS:
            self.guard.note("name server refused registration", ("refused", addr, resp.code),
                            namesrv=addr, code=resp.code, remark=shown(resp.remark or "", 200))
            return None
        try:
            answer = RegisterBrokerResponseHeader.from_fields(resp.ext_fields)
        except RemoteProtocolError as exc:
            self.guard.note("bad registration answer", ("answer", addr), namesrv=addr,
                            error=str(exc))
            return RegisterBrokerResponseHeader()
        if answer.ha_server_addr:
            self.master_ha_addr = answer.ha_server_addr
        if answer.master_addr:
            self.master_addr = answer.master_addr
        return answer

    async def broker_ids(self, addr: str, broker_name: str) -> set[int]:
        """The broker ids the name server at ``addr`` lists for ``broker_name``
        (GET_BROKER_CLUSTER_INFO); RemotingError or RemoteProtocolError on failure."""
        resp = await self.client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO),
            self.config.register_broker_timeout_ms / 1000)
        if resp.code != ResponseCode.SUCCESS:
            raise RemoteProtocolError(f"cluster info refused: {resp.code}")
        body = unpack_body(resp.body)
        table = body.get("brokerAddrTable") if isinstance(body, dict) else None
        entry = table.get(broker_name) if isinstance(table, dict) else None
        if entry is None:
            return set()
        return set(BrokerData.from_dict(entry).broker_addrs)

    async def topic_route(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic`` from the first name server that answers
        (GET_ROUTEINFO_BY_TOPIC; None: it knows no such topic). Raises the last
        failure when none answers."""
        failure: Exception = RemoteProtocolError("no name server configured")
        for addr in self.config.namesrv_addr_list:
            try:
                resp = await self.client.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                  GetRouteInfoRequestHeader(topic).to_fields()),
                    self.config.register_broker_timeout_ms / 1000)
            except Exception as exc:  # RemotingError and friends: ask the next one
                failure = exc
                continue
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            if resp.code != ResponseCode.SUCCESS:
                failure = RemoteProtocolError(f"route of {topic} refused: {resp.code}")
                continue
            return TopicRouteData.from_dict(unpack_body(resp.body))
        raise failure

    async def unregister_broker_all(self) -> None:
        header = UnRegisterBrokerRequestHeader(
            broker_name=self.config.broker_name,
            broker_addr=self.config.broker_addr,
            cluster_name=self.config.broker_cluster_name,
            broker_id=self.config.broker_id,
        ).to_fields()

        async def one(addr: str) -> None:
            cmd = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, dict(header))
            try:
                await self.client.invoke(addr, cmd, 3.0)
                self.log.info("unregistered from name server", namesrv=addr)
            except Exception as exc:
                self.log.warning("unregister failed", namesrv=addr, error=describe(exc))

        async with trio.open_nursery() as nursery:
            for addr in self.config.namesrv_addr_list:
                nursery.start_soon(one, addr)
