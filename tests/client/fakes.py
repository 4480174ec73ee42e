"""In-process fake name server and brokers for the client tests.

Both are ``protocol.trio.RemotingServer``s on 127.0.0.1, port 0, with sync
handlers that speak the wire contract of protocol/README.md. The fake broker
stores real commit-log records (``protocol.record.encode_record``) in memory,
filters pulls by tag hash like the real one, and keeps consumer offsets.
Tests steer them through plain attributes (``send_code``, ``routes``...) and
inspect what they received (``requests``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import trio

from client.subscription import parse_sub_expression, tag_codes
from protocol.batch import decode_batch
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.hashing import tags_hash_code
from protocol.headers import (
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetRouteInfoRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)
from protocol.message import PROPERTY_TAGS, properties_to_string, string_to_properties
from protocol.record import encode_msg_id, encode_record, pack_host
from protocol.route import PERM_RW, BrokerData, QueueData, TopicRouteData
from protocol.trio import HandlerTable, RemotingConnection, RemotingServer

CLUSTER = "DefaultCluster"

# Codes a fake broker may answer to a send while still storing the message.
STORED_CODES = {
    ResponseCode.SUCCESS,
    ResponseCode.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE,
}


def closed_port_addr() -> str:
    """An address on 127.0.0.1 nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


class FakeBroker:
    """A broker answering SEND_MESSAGE, SEND_BATCH_MESSAGE, PULL_MESSAGE and the
    offset requests from memory."""

    def __init__(self, name: str, cluster: str = CLUSTER) -> None:
        self.name = name
        self.cluster = cluster
        self.handlers = HandlerTable()
        self.server = RemotingServer(self.handlers, "127.0.0.1", 0)
        self.requests: list[RemotingCommand] = []
        # Steering.
        self.send_code: int = ResponseCode.SUCCESS
        self.send_remark: str | None = None
        self.pull_code: int | None = None  # force this response code on pulls
        self.suggest_which_broker_id = 0
        self.silent = False  # accept requests but never answer
        # QUERY_CONSUMER_OFFSET's answer for a group with no stored offset
        # (a real broker's 0 for a queue whose first message is in memory);
        # None: QUERY_NOT_FOUND
        self.new_group_offset: int | None = None
        # State.
        self.queues: dict[tuple[str, int], list[tuple[bytes, int]]] = defaultdict(list)
        self.min_offsets: dict[tuple[str, int], int] = {}
        self.consumer_offsets: dict[tuple[str, str, int], int] = {}
        self.phys_offset = 0
        h = self.handlers
        h.register(RequestCode.SEND_MESSAGE, self._send)
        h.register(RequestCode.SEND_BATCH_MESSAGE, self._send_batch)
        h.register(RequestCode.PULL_MESSAGE, self._pull)
        h.register(RequestCode.QUERY_CONSUMER_OFFSET, self._query_offset)
        h.register(RequestCode.UPDATE_CONSUMER_OFFSET, self._update_offset)
        h.register(RequestCode.GET_MAX_OFFSET, self._max_offset)
        h.register(RequestCode.GET_MIN_OFFSET, self._min_offset)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.server.serve)

    def requests_of(self, code: int) -> list[RemotingCommand]:
        return [r for r in self.requests if r.code == code]

    # ---- store --------------------------------------------------------------------

    def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        tags: str | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        sys_flag: int = 0,
    ) -> tuple[str, int]:
        """Store a message as the real broker would; returns (offset msgId, queue offset)."""
        props = dict(properties or {})
        if tags is not None:
            props[PROPERTY_TAGS] = tags
        return self._store(topic, queue_id, flag, body, properties_to_string(props), sys_flag)

    def _store(
        self, topic: str, queue_id: int, flag: int, body: bytes, props_text: str, sys_flag: int = 0
    ) -> tuple[str, int]:
        key = (topic, queue_id)
        queue = self.queues[key]
        queue_offset = self.min_offsets.get(key, 0) + len(queue)
        store_host = pack_host(self.addr)
        record = encode_record(
            topic=topic.encode(),
            queue_id=queue_id,
            flag=flag,
            body=body,
            properties=props_text.encode(),
            sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000),
            born_host=pack_host("127.0.0.1:1"),
            store_timestamp=int(time.time() * 1000),
            store_host=store_host,
            reconsume_times=0,
            prepared_transaction_offset=0,
            queue_offset=queue_offset,
            physical_offset=self.phys_offset,
        )
        msg_id = encode_msg_id(store_host, self.phys_offset)
        self.phys_offset += len(record)
        tags = string_to_properties(props_text).get(PROPERTY_TAGS)
        queue.append((record, tags_hash_code(tags)))
        return msg_id, queue_offset

    # ---- handlers -----------------------------------------------------------------

    def _send_refused(self, cmd: RemotingCommand) -> RemotingCommand | None:
        if self.send_code in STORED_CODES:
            return None
        return cmd.response(self.send_code, self.send_remark or f"fake {self.name} refuses")

    def _send(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        self.requests.append(cmd)
        if self.silent:
            return None
        refused = self._send_refused(cmd)
        if refused is not None:
            return refused
        h = SendMessageRequestHeader.from_fields(cmd.ext_fields)
        assert cmd.body is not None
        msg_id, offset = self._store(h.topic, h.queue_id, h.flag, cmd.body, h.properties)
        header = SendMessageResponseHeader(msg_id, h.queue_id, offset)
        return cmd.response(self.send_code, self.send_remark, ext_fields=header.to_fields())

    def _send_batch(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        self.requests.append(cmd)
        if self.silent:
            return None
        refused = self._send_refused(cmd)
        if refused is not None:
            return refused
        h = SendMessageRequestHeader.from_fields(cmd.ext_fields)
        items = decode_batch(cmd.body or b"")
        ids = []
        first = -1
        for flag, body, props in items:
            msg_id, offset = self._store(h.topic, h.queue_id, flag, body, props)
            ids.append(msg_id)
            first = offset if first < 0 else first
        header = SendMessageResponseHeader(",".join(ids), h.queue_id, first)
        return cmd.response(self.send_code, self.send_remark, ext_fields=header.to_fields())

    def _pull(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        self.requests.append(cmd)
        if self.silent:
            return None
        h = PullMessageRequestHeader.from_fields(cmd.ext_fields)
        try:
            codes = tag_codes(parse_sub_expression(h.subscription))
        except ValueError as exc:
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        key = (h.topic, h.queue_id)
        queue = self.queues.get(key, [])
        lo = self.min_offsets.get(key, 0)
        hi = lo + len(queue)

        def answer(code: int, next_offset: int, body: bytes | None = None) -> RemotingCommand:
            header = PullMessageResponseHeader(self.suggest_which_broker_id, next_offset, lo, hi)
            if self.pull_code is not None:
                code = self.pull_code
            return cmd.response(code, None, ext_fields=header.to_fields(), body=body)

        offset = h.queue_offset
        if offset < lo:
            return answer(ResponseCode.PULL_OFFSET_MOVED, lo)
        if offset > hi:
            return answer(ResponseCode.PULL_OFFSET_MOVED, hi)
        if offset == hi:
            return answer(ResponseCode.PULL_NOT_FOUND, offset)
        found: list[bytes] = []
        pos = offset
        while pos < hi and len(found) < h.max_msg_nums:
            record, code = queue[pos - lo]
            if codes is None or code in codes:
                found.append(record)
            pos += 1
        if not found:
            return answer(ResponseCode.PULL_RETRY_IMMEDIATELY, pos)
        return answer(ResponseCode.SUCCESS, pos, b"".join(found))

    def _query_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        self.requests.append(cmd)
        h = QueryConsumerOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.consumer_offsets.get((h.consumer_group, h.topic, h.queue_id),
                                           self.new_group_offset)
        if offset is None:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first"
            )
        return cmd.response(
            ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).to_fields()
        )

    def _update_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        self.requests.append(cmd)
        h = UpdateConsumerOffsetRequestHeader.from_fields(cmd.ext_fields)
        self.consumer_offsets[(h.consumer_group, h.topic, h.queue_id)] = h.commit_offset
        return cmd.response(ResponseCode.SUCCESS)

    def _max_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        self.requests.append(cmd)
        h = GetMaxOffsetRequestHeader.from_fields(cmd.ext_fields)
        key = (h.topic, h.queue_id)
        offset = self.min_offsets.get(key, 0) + len(self.queues.get(key, []))
        return cmd.response(
            ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).to_fields()
        )

    def _min_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        self.requests.append(cmd)
        h = GetMinOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.min_offsets.get((h.topic, h.queue_id), 0)
        return cmd.response(
            ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).to_fields()
        )


BrokerRef = FakeBroker | tuple[str, str]


class FakeNameServer:
    """Answers GET_ROUTEINFO_BY_TOPIC from ``routes`` (TOPIC_NOT_EXIST otherwise)."""

    def __init__(self) -> None:
        self.handlers = HandlerTable()
        self.server = RemotingServer(self.handlers, "127.0.0.1", 0)
        self.routes: dict[str, TopicRouteData] = {}
        self.route_requests: list[str] = []
        self.handlers.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.server.serve)

    def set_route(
        self,
        topic: str,
        brokers: Iterable[BrokerRef],
        queues: int = 4,
        perm: int = PERM_RW,
        read_queues: int | None = None,
        slaves: dict[str, str] | None = None,
    ) -> TopicRouteData:
        """Route ``topic`` to ``brokers`` (FakeBrokers or (name, master addr) pairs),
        ``queues`` write queues each; ``slaves`` maps broker name -> slave addr."""
        qds: list[QueueData] = []
        bds: list[BrokerData] = []
        for ref in brokers:
            name, addr = (ref.name, ref.addr) if isinstance(ref, FakeBroker) else ref
            qds.append(
                QueueData(name, queues if read_queues is None else read_queues, queues, perm)
            )
            addrs = {0: addr} if addr else {}
            if slaves and name in slaves:
                addrs[1] = slaves[name]
            bds.append(BrokerData(CLUSTER, name, addrs))
        route = TopicRouteData(queue_datas=qds, broker_datas=bds)
        self.routes[topic] = route
        return route

    def _route(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        topic = GetRouteInfoRequestHeader.from_fields(cmd.ext_fields).topic
        self.route_requests.append(topic)
        route = self.routes.get(topic)
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        return cmd.response(ResponseCode.SUCCESS, body=pack_body(route.to_dict()))


class FakeCluster:
    """One fake name server and brokers ``broker-a``, ``broker-b``, ...

    ``TopicTest`` is routed to every broker with 4 queues each.
    """

    TOPIC = "TopicTest"

    def __init__(self, brokers: int = 2) -> None:
        self.namesrv = FakeNameServer()
        self.brokers = [FakeBroker(f"broker-{chr(ord('a') + i)}") for i in range(brokers)]

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.addr

    def broker(self, name: str) -> FakeBroker:
        return next(b for b in self.brokers if b.name == name)

    async def start(self, nursery: trio.Nursery) -> None:
        await self.namesrv.start(nursery)
        for b in self.brokers:
            await b.start(nursery)
        self.namesrv.set_route(self.TOPIC, self.brokers)


class ThreadedCluster:
    """A FakeCluster served by its own trio loop on a thread (for blocking-API tests).

    ``call(fn, *args)`` runs a plain function in that loop (to read or steer
    the fakes safely); ``stop()`` ends the loop and joins the thread.
    """

    def __init__(self, brokers: int = 2) -> None:
        self.cluster = FakeCluster(brokers)
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="fake-cluster", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> ThreadedCluster:
        self._thread.start()
        if not self._ready.wait(10) or self._token is None:
            raise RuntimeError(f"fake cluster did not start: {self.error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _main(self) -> None:
        try:
            trio.run(self._async_main)
        except BaseException as exc:
            self.error = exc
        finally:
            self._ready.set()

    async def _async_main(self) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            await self.cluster.start(nursery)
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def call(self, fn: Any, *args: Any) -> Any:
        assert self._token is not None
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def stop(self) -> None:
        if self._token is not None and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join(10)
