"""Request handlers of the name server, keyed by request code.

REGISTER_BROKER is decoded and applied in steps (``register_steps``): the
body is inflated as it is read, READ_SIZE at a time, its topic table read
one entry at a time from a streaming body reader and checked in chunks, and
the route tables updated in chunks (RouteInfoManager.register_steps). A
small registration runs all steps at once; a large one runs as a task of its
connection with a checkpoint between steps (``pause``), so look-ups keep
being answered while a broker with 100,000 topics registers. Nothing is applied before the whole
body has been checked: a bad topic refuses the registration as a whole.

A registration or unregistration that conflicts with a live registration of
another connection is refused (NO_PERMISSION) and logged, rate-limited. A
broker address whose host is not the connection's peer host is only logged:
brokers behind NAT or with several interfaces register that way.
"""

from __future__ import annotations

import gc
import io
import ipaddress
import zlib
from collections.abc import Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import structlog

from namesrv.kv_config import KVConfigManager, kv_table_body
from namesrv.route_info import (
    DEFAULT_CHUNK,
    Registration,
    RouteInfoManager,
    drain,
    same_connection,
)
from protocol.codecs.base import READ_SIZE, UNKNOWN_LENGTH, BodyReader, Codec, NotAMapError
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, default_codec
from protocol.errors import ProtocolError, RemoteProtocolError
from protocol.headers import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    PutKVConfigRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from protocol.names import shown, topic_problem
from protocol.route import DEFAULT_MAX_QUEUE_NUMS, DataVersion, TopicConfig, topic_config_problem
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.errors import RemotingError
from protocol.trio.service import RepeatedErrors

log = structlog.get_logger("namesrv.processor")

# The KV namespace of ordered topics' queue layouts ("brokerName:queues;...").
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

# Plain bodies up to this many bytes (~100 topics) are applied inline; larger or
# compressed ones (a small one may inflate 1000-fold) in steps.
INLINE_BODY_MAX = 16 * 1024

Steps = Generator[None, None, Any]


@dataclass(slots=True)
class RegisterBody:
    """A REGISTER_BROKER body, decoded and checked."""

    topics: dict[str, TopicConfig] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    version: DataVersion = field(default_factory=DataVersion)
    base_version: DataVersion | None = None


class Inflating(io.RawIOBase):
    """A zlib body read as a stream: inflated as it is read, a read at a time,
    refusing more than ``max_size`` bytes out. Raises RemoteProtocolError (as
    protocol.body.decompress_body)."""

    def __init__(self, body: bytes, max_size: int) -> None:
        super().__init__()
        self._inflater = zlib.decompressobj()
        self._tail = body
        self.max_size = max_size
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        for _ in range(1 + len(self._tail)):  # each pass inflates or consumes input
            if self._inflater.eof:
                return 0
            try:
                out = self._inflater.decompress(self._tail, len(view))
            except zlib.error as exc:
                raise RemoteProtocolError(f"undecodable compressed body: {exc}") from exc
            self._tail = self._inflater.unconsumed_tail
            if out:
                self.total += len(out)
                if self.total > self.max_size:
                    raise RemoteProtocolError(
                        f"compressed body inflates past {self.max_size} bytes")
                view[:len(out)] = out
                return len(out)
            if not self._tail and not self._inflater.eof:
                break
        raise RemoteProtocolError("compressed body is truncated")


def _topic_entry(name: object, raw: object, max_queue_nums: int) -> TopicConfig:
    cfg = TopicConfig.from_dict(raw)
    problem = (topic_config_problem(cfg, max_queue_nums) if cfg.topic_name == name else
               f"topicConfigTable key {shown(name)} differs from its topicName")
    if problem is not None:
        raise RemoteProtocolError(f"REGISTER_BROKER refused: {problem}")
    return cfg


class _Paced:
    """A body stream read through, and when its parse takes a step: after
    every ``chunk`` entries of a map or list, and at the first entry after
    READ_SIZE more bytes have been read (inflated). A value may take 16 KiB
    (BODY_ENTRY) and the whitespace around it as much: a thousand of them,
    read in one step, held the loop for 160 ms."""

    def __init__(self, stream: io.RawIOBase | io.BytesIO, chunk: int) -> None:
        self._stream = stream
        self._chunk = chunk
        self.taken = 0  # bytes read
        self._stepped = 0  # ... at the last step

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size) or b""
        self.taken += len(data)
        return data

    def due(self, entry: int) -> bool:
        """Whether to take a step before ``entry`` (its index in its map or list)."""
        if (entry and entry % self._chunk == 0) or self.taken - self._stepped >= READ_SIZE:
            self._stepped = self.taken
            return True
        return False


def _entries(reader: BodyReader, n: int | None) -> Iterator[int]:
    """The indexes of the entries of a map or array whose header said ``n``."""
    if n is None:
        return
    if n != UNKNOWN_LENGTH:
        yield from range(n)
        return
    i = 0
    while reader.more():
        yield i
        i += 1


def parse_register_steps(stream: io.RawIOBase | io.BytesIO, out: RegisterBody,
                         max_queue_nums: int, chunk: int = DEFAULT_CHUNK,
                         codec: Codec | None = None) -> Steps:
    """Read a register body from ``stream`` (the plain bytes, or ``Inflating``)
    into ``out``, an entry at a time, yielding every ``chunk`` entries (topics,
    deleted names, the body's own keys) and every READ_SIZE bytes read
    (``_Paced``). The body is in ``codec`` (the request's; msgpack by
    default), read as a stream, never held whole. Each value (a topic's
    config, a dataVersion, an unknown key's value) is read within the codec's
    BODY_ENTRY limits, so no entry builds more than a few containers. Raises
    RemoteProtocolError on anything malformed or past those limits."""
    codec = codec or default_codec()
    paced = _Paced(stream, chunk)
    reader = codec.body_reader(paced)
    try:
        keys = reader.read_map_header()
    except NotAMapError as exc:
        raise RemoteProtocolError("register body must be a map") from exc
    for k in _entries(reader, keys):
        if paced.due(k):  # a body of millions of small unknown keys
            yield
        key = reader.unpack()
        if key == "topicConfigTable":
            try:
                n = reader.read_map_header()
            except NotAMapError:
                raise RemoteProtocolError("topicConfigTable must be a map") from None
            for i in _entries(reader, n):
                if paced.due(i):
                    yield
                name = reader.unpack()
                cfg = _topic_entry(name, reader.unpack(), max_queue_nums)
                out.topics[cfg.topic_name] = cfg
        elif key == "deletedTopics":
            # a name at a time, as the topics: the list may be as long
            try:
                n = reader.read_array_header()
            except RemoteProtocolError:
                raise RemoteProtocolError("deletedTopics must be a list of topic names") from None
            names: list[str] = []
            for i in _entries(reader, n):
                if paced.due(i):
                    yield
                name = reader.unpack()
                if not isinstance(name, str) or topic_problem(name) is not None:
                    raise RemoteProtocolError("deletedTopics must be a list of topic names")
                names.append(name)
            out.deleted = names
        elif key == "dataVersion":
            out.version = DataVersion.from_dict(reader.unpack())
        elif key == "baseDataVersion":
            out.base_version = DataVersion.from_dict(reader.unpack())
        else:
            reader.skip()
    if not reader.at_end():
        raise RemoteProtocolError("undecodable body: extra data after the body")


def release_steps(table: dict[str, Any], chunk: int) -> Steps:
    """Empty ``table`` a chunk at a time: freeing 100,000 entries at once
    would hold the loop for 10 ms and more."""
    for _ in range(len(table) // chunk + 1):
        for _ in range(min(chunk, len(table))):
            table.popitem()
        yield


def _host(addr: str) -> str:
    return addr.rpartition(":")[0].strip("[]")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class NamesrvProcessor:
    """Handlers over one RouteInfoManager; ``clock`` gives seconds (trio time).
    ``pause`` (a trio checkpoint, from the controller) lets a large
    registration run in steps; without it every registration runs at once."""

    def __init__(self, routes: RouteInfoManager, clock: Callable[[], float],
                 max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS,
                 max_register_body_size: int = 64 * 1024 * 1024, *,
                 pause: Callable[[], Awaitable[None]] | None = None,
                 chunk: int = DEFAULT_CHUNK, kv: KVConfigManager | None = None,
                 order_message_enable: bool = False) -> None:
        self.routes = routes
        self.kv = kv if kv is not None else KVConfigManager()
        # called after every KV config change (the controller persists the table)
        self.on_kv_change: Callable[[], None] = lambda: None
        # routes carry orderTopicConf from the ORDER_TOPIC_CONFIG namespace (RocketMQ's
        # orderMessageEnable)
        self.order_message_enable = order_message_enable
        self.clock = clock
        self.max_queue_nums = max_queue_nums
        self.max_register_body_size = max_register_body_size
        self.pause = pause
        self.chunk = max(1, chunk)
        self.refusals = RepeatedErrors()
        self.chunked_registrations = 0
        # operators' counters (namesrv/metrics.py)
        self.registrations = 0  # REGISTER_BROKER applied
        self.route_lookups = 0  # GET_ROUTEINFO_BY_TOPIC answered
        self.route_lookups_missed = 0  # ... with TOPIC_NOT_EXIST
        # requests refused by the ACL (aclEnable), by (request code, reason)
        self.acl_refusals: dict[tuple[int, str], int] = {}
        self._gc_holds = 0
        self._gc_was_enabled = True

    def record_acl_refusal(self, code: int, reason: str) -> None:
        key = (code, reason)
        self.acl_refusals[key] = self.acl_refusals.get(key, 0) + 1

    def handler_table(self) -> HandlerTable:
        table = HandlerTable()
        table.register(RequestCode.REGISTER_BROKER, self.register_broker)
        table.register(RequestCode.UNREGISTER_BROKER, self.unregister_broker)
        table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.get_route_info)
        table.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.get_cluster_info)
        table.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.get_all_topic_list)
        table.register(RequestCode.WIPE_WRITE_PERM_OF_BROKER, self.wipe_write_perm)
        table.register(RequestCode.ADD_WRITE_PERM_OF_BROKER, self.add_write_perm)
        table.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic)
        table.register(RequestCode.PUT_KV_CONFIG, self.put_kv_config)
        table.register(RequestCode.GET_KV_CONFIG, self.get_kv_config)
        table.register(RequestCode.DELETE_KV_CONFIG, self.delete_kv_config)
        table.register(RequestCode.GET_KVLIST_BY_NAMESPACE, self.get_kv_list_by_namespace)
        return table

    # ---- registration ------------------------------------------------------------

    def _note(self, event: str, key: object, level: str = "warning", **context: Any) -> None:
        """A log line, rate-limited per ``key`` (RepeatedErrors)."""
        decision = self.refusals.record((event, key), self.clock())
        if decision is None:
            return
        first, repeated = decision
        if not first:
            context["repeated"] = repeated
        getattr(log, level)(event, **context)

    def _refuse(self, conn: RemotingConnection, cmd: RemotingCommand, what: str,
                h: RegisterBrokerRequestHeader | UnRegisterBrokerRequestHeader,
                reason: str) -> RemotingCommand:
        peer = getattr(conn, "remote_addr", "?")
        self._note(f"{what} refused", (what, h.broker_name, h.broker_addr, _host(str(peer))),
                   broker=h.broker_name, addr=h.broker_addr, broker_id=h.broker_id,
                   cluster=h.cluster_name, peer=peer, reason=reason)
        return cmd.response(ResponseCode.NO_PERMISSION, f"{what} refused: {reason}")

    def _check_peer(self, conn: RemotingConnection, h: RegisterBrokerRequestHeader) -> None:
        peer = getattr(conn, "remote_addr", None)
        if not isinstance(peer, str) or ":" not in peer:
            return
        peer_host, host = _host(peer), _host(h.broker_addr)
        if peer_host == host or (_loopback(peer_host) and _loopback(host)):
            return
        self._note("broker address host differs from the connection's peer (NAT, several "
                   "interfaces?)", ("host", h.broker_addr, peer_host), level="info",
                   broker=h.broker_name, addr=h.broker_addr, peer=peer)

    def register_broker(self, conn: RemotingConnection, cmd: RemotingCommand
                        ) -> RemotingCommand | None:
        h = RegisterBrokerRequestHeader.from_fields(cmd.ext_fields)
        refused = self.routes.registration_conflict(h.cluster_name, h.broker_addr,
                                                    h.broker_name, h.broker_id, conn,
                                                    self.clock(), h.master_epoch)
        if refused is not None:  # before reading the body: a forger costs nothing
            return self._refuse(conn, cmd, "REGISTER_BROKER", h, refused)
        live = self.routes.broker_live_table.get(h.broker_addr)
        if h.incremental and (live is None or not same_connection(live.connection, conn)):
            return self._answer(cmd, h, need_full=True)  # without reading the body
        self._check_peer(conn, h)
        steps = self.register_steps(conn, cmd, h)
        if (self.pause is not None and isinstance(conn, RemotingConnection)
                and (len(cmd.body or b"") > INLINE_BODY_MAX or h.compressed)):
            try:
                conn.spawn(self._register_in_steps, conn, cmd, steps)
            except RemotingError:
                steps.close()  # the connection is closing: nobody to answer
            return None
        result: RemotingCommand = drain(steps)
        return result

    async def _register_in_steps(self, conn: RemotingConnection, cmd: RemotingCommand,
                                 steps: Steps) -> None:
        """Run ``steps`` with a checkpoint after each; answer as a sync handler would."""
        assert self.pause is not None
        self.chunked_registrations += 1
        self._gc_hold()
        try:
            while True:
                try:
                    next(steps)
                except StopIteration as stop:
                    response: RemotingCommand = stop.value
                    break
                await self.pause()
        except ProtocolError as exc:
            response = cmd.response(ResponseCode.SYSTEM_ERROR, f"bad request: {exc}")
        except Exception as exc:
            log.exception("REGISTER_BROKER failed", peer=conn.remote_addr)
            response = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            self._gc_release()
        if not cmd.is_oneway:
            conn.send_response(response)

    # The cycle collector's full collections walk every live object: with 100,000
    # topics' queue data, each is a pause of 50-100 ms, and a registration that
    # builds those tables triggers several. While large registrations apply, the
    # collector waits; after the last one, every object alive (the new tables
    # above all, acyclic and freed by reference counting when replaced) moves to
    # the permanent generation (gc.freeze, O(1)), which collections skip.
    # The price: cyclic garbage alive at that moment is never reclaimed (little:
    # a name server makes few cycles, and large registrations are rare).

    def _gc_hold(self) -> None:
        if self._gc_holds == 0:
            self._gc_was_enabled = gc.isenabled()
            gc.disable()
        self._gc_holds += 1

    def _gc_release(self) -> None:
        self._gc_holds -= 1
        if self._gc_holds == 0:
            gc.freeze()
            if self._gc_was_enabled:
                gc.enable()

    def register_steps(self, conn: RemotingConnection, cmd: RemotingCommand,
                       h: RegisterBrokerRequestHeader) -> Steps:
        """Decode and check the body, then apply it; returns the response."""
        body = RegisterBody()
        if cmd.body:
            raw = cmd.body
            stream: io.RawIOBase | io.BytesIO
            if h.compressed:
                if h.body_crc32 and zlib.crc32(raw) & 0x7FFFFFFF != h.body_crc32:
                    raise RemoteProtocolError("REGISTER_BROKER: bodyCrc32 does not match the body")
                stream = Inflating(raw, self.max_register_body_size)
            else:
                stream = io.BytesIO(raw)
            yield from parse_register_steps(stream, body, self.max_queue_nums, self.chunk,
                                            cmd.codec)
        reg = Registration(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id,
                           h.ha_server_addr, body.topics, body.version, h.incremental,
                           body.base_version, body.deleted, h.grpc_port, h.master_epoch)
        result = yield from self.routes.register_steps(reg, conn, self.clock(), self.chunk)
        if len(body.topics) > self.chunk:
            yield from release_steps(body.topics, self.chunk * 8)
        if result.refused is not None:
            return self._refuse(conn, cmd, "REGISTER_BROKER", h, result.refused)
        if result.superseded:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                "REGISTER_BROKER superseded: the broker registered again or "
                                "was removed while its topics were applied")
        self.registrations += 1
        return self._answer(cmd, h, result.ha_server_addr, result.master_addr,
                            need_full=result.need_full)

    @staticmethod
    def _answer(cmd: RemotingCommand, h: RegisterBrokerRequestHeader,
                ha_server_addr: str | None = None, master_addr: str | None = None,
                need_full: bool = False) -> RemotingCommand:
        out = RegisterBrokerResponseHeader(ha_server_addr, master_addr,
                                           incremental_ok=h.incremental_capable,
                                           need_full=need_full)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=out.to_fields())

    def unregister_broker(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.from_fields(cmd.ext_fields)
        refused = self.routes.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name,
                                                h.broker_id, conn, self.clock())
        if refused is not None:
            return self._refuse(conn, cmd, "UNREGISTER_BROKER", h, refused)
        return cmd.response(ResponseCode.SUCCESS)

    def get_route_info(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_fields(cmd.ext_fields)
        route = self.routes.pickup_topic_route_data(h.topic)
        self.route_lookups += 1
        if route is None:
            self.route_lookups_missed += 1
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {h.topic}"
            )
        if self.order_message_enable:
            route.order_topic_conf = self.kv.get(ORDER_TOPIC_CONFIG, h.topic)
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(route.to_dict()))

    def get_cluster_info(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(self.routes.get_all_cluster_info()))

    def get_all_topic_list(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        body = {"topicList": self.routes.get_all_topic_list()}
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))

    def wipe_write_perm(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = WipeWritePermOfBrokerRequestHeader.from_fields(cmd.ext_fields)
        count = self.routes.wipe_write_perm_of_broker(h.broker_name)
        out = WipeWritePermOfBrokerResponseHeader(count)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=out.to_fields())

    def add_write_perm(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        """ADD_WRITE_PERM_OF_BROKER: the inverse of WIPE_WRITE_PERM_OF_BROKER."""
        h = AddWritePermOfBrokerRequestHeader.from_fields(cmd.ext_fields)
        count = self.routes.add_write_perm_of_broker(h.broker_name)
        out = AddWritePermOfBrokerResponseHeader(count)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=out.to_fields())

    def delete_topic(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicRequestHeader.from_fields(cmd.ext_fields)
        self.routes.delete_topic(h.topic)
        return cmd.response(ResponseCode.SUCCESS)

    # ---- KV config (RocketMQ's KVConfigManager) ----------------------------------

    def put_kv_config(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = PutKVConfigRequestHeader.from_fields(cmd.ext_fields)
        try:
            self.kv.put(h.namespace, h.key, h.value)
        except ValueError as exc:
            self._note("PUT_KV_CONFIG refused", ("kv", str(exc)[:64]),
                       namespace=shown(h.namespace), kv_key=shown(h.key),
                       peer=getattr(conn, "remote_addr", "?"), reason=str(exc))
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"PUT_KV_CONFIG refused: {exc}")
        self._note("KV config item put", ("kv put", h.namespace), level="info",
                   namespace=shown(h.namespace), kv_key=shown(h.key))
        self.on_kv_change()
        return cmd.response(ResponseCode.SUCCESS)

    def get_kv_config(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetKVConfigRequestHeader.from_fields(cmd.ext_fields)
        value = self.kv.get(h.namespace, h.key)
        if value is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                f"No config item, Namespace: {h.namespace} Key: {h.key}")
        return cmd.response(ResponseCode.SUCCESS,
                            ext_fields=GetKVConfigResponseHeader(value).to_fields())

    def delete_kv_config(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteKVConfigRequestHeader.from_fields(cmd.ext_fields)
        if self.kv.delete(h.namespace, h.key):
            self._note("KV config item deleted", ("kv delete", h.namespace), level="info",
                       namespace=shown(h.namespace), kv_key=shown(h.key))
            self.on_kv_change()
        return cmd.response(ResponseCode.SUCCESS)

    def get_kv_list_by_namespace(self, conn: RemotingConnection, cmd: RemotingCommand
                                 ) -> RemotingCommand:
        h = GetKVListByNamespaceRequestHeader.from_fields(cmd.ext_fields)
        entries = self.kv.namespace(h.namespace)
        if entries is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                f"No config item, Namespace: {h.namespace}")
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(kv_table_body(entries)))
