"""MQClientInstance: the per-process connection hub for one name-server list.

As RocketMQ's MQClientInstance: producers and consumers of a process that use
the same name servers share one instance (``acquire`` / ``release``, with
reference counting; the registry is per trio run). It owns:

- a ``RemotingClient`` (one connection per broker or name server address);
- the name-server list (``"a:9876;b:9876"``; ``NAMESRV_ADDR`` when none is
  given, ``client_namesrv_addr``): one name server is picked at random when
  the instance is made and asked while it answers; when it cannot be reached
  or does not answer within the request's timeout the next ones are tried in
  turn, and the first that answers is kept (``protocol.namesrv_addr``);
- the route cache: topic -> TopicRouteData, the publish info (writable
  queues) and subscribe queues derived from it, and broker name -> addresses.
  Routes are refreshed every ``poll_name_server_interval`` seconds by a
  background task and on demand;
- the ``TBW102`` fallback for publishing to a topic the name server does not
  know yet (the broker auto-creates it on the first send).

It also drives the consumers registered with it (``register_consumer``):
heartbeats to every broker every ``heartbeat_broker_interval`` s (30) and at
once when a consumer starts, a rebalance every ``rebalance_interval`` s (20)
and at once when a broker sends ``NOTIFY_CONSUMER_IDS_CHANGED``, and offset
persistence every ``persist_consumer_offset_interval`` s (5).

Transaction producers register a checker for their group
(``register_transaction_checker``): a broker's ``CHECK_TRANSACTION_STATE`` is
validated and handed to the checker of the message's ``PGROUP``. While any
producer or checker is registered, every broker address the instance learns
from a route gets a heartbeat at once, so a broker lists the producer
(``producerConnection``) and knows it before it asks about a transaction.

None of these background loops can stop the instance: an iteration that fails
is logged (a traceback once, repeats rate-limited, protocol/trio/service.py),
backed off, and the next period runs as usual.

The client id is ``<ip>@<instance name>``; the instance name defaults to the
process id, so two processes on one host are two clients. Give consumers in
one process different ``instance_name``s to make them different clients.

Every request is bounded by a timeout (``request_timeout``, 3 s default).
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from typing import Any, Protocol

import structlog
import trio

from client.credentials import AclCredentials
from client.errors import MQBrokerError, MQClientError
from client.publish_info import TopicPublishInfo
from client.route_info import (
    FailureRefreshes,
    default_topic_route,
    publish_queues,
    subscribe_queues,
)
from client.service import ServiceNursery
from client.uniq_id import local_ip
from client.validators import AUTO_CREATE_TOPIC_KEY
from protocol.body import pack_body, unpack_body
from protocol.client_data import ResetOffsetBody
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import ProtocolError
from protocol.headers import (
    CheckTransactionStateRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetRouteInfoRequestHeader,
    ResetOffsetRequestHeader,
)
from protocol.message import MessageConst, MessageExt, MessageQueue
from protocol.namesrv_addr import (
    NamesrvSelector,
    NoNamesrvAnswered,
    ask_in_turn,
    resolve_namesrv_addr,
    split_namesrv_addr,
)
from protocol.record import decode_record
from protocol.route import MASTER_ID, TopicRouteData
from protocol.trio import HandlerTable, RemotingClient, RemotingError, split_addr
from protocol.trio.busy_poll import BusyPoll, busy_poll_us_from_env, check_window_us
from protocol.trio.connection import RemotingConnection
from protocol.trio.errors import RemotingTimeoutError
from protocol.trio.memory import tune_malloc
from protocol.trio.service import Guard
from protocol.trio.tls import ClientTls, TlsConfigError, client_tls_from_env

log = structlog.get_logger("client.instance")

DEFAULT_NAMESRV_ADDR = "127.0.0.1:9876"
DEFAULT_REQUEST_TIMEOUT = 3.0
DEFAULT_POLL_NAME_SERVER_INTERVAL = 30.0
DEFAULT_TOPIC_QUEUE_NUMS = 4
DEFAULT_HEARTBEAT_BROKER_INTERVAL = 30.0
DEFAULT_REBALANCE_INTERVAL = 20.0
DEFAULT_PERSIST_CONSUMER_OFFSET_INTERVAL = 5.0


class ConsumerInner(Protocol):
    """What the instance needs of a consumer it drives."""

    group: str

    def consumer_data(self) -> dict[str, Any]:
        """The consumer's entry in a heartbeat's ``consumerDataSet``."""
        ...

    def subscribed_topics(self) -> set[str]: ...

    async def do_rebalance(self) -> None: ...

    async def persist_consumer_offset(self) -> None: ...

    def running_info(self, jstack: bool = False) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO's body (client/running_info.py)."""
        ...

    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: the broker moved the group's offsets."""
        ...


# Called on the event loop with (broker address, check header, half message);
# must not block (a transaction producer queues the check).
TransactionChecker = Callable[[str, CheckTransactionStateRequestHeader, MessageExt], None]

_INSTANCES: trio.lowlevel.RunVar[dict[str, MQClientInstance]] = trio.lowlevel.RunVar(
    "mq_client_instances"
)


# A heart beat answered SYSTEM_BUSY is tried again this many times, after
# about 0.5 s, 1 s, 2 s, ... (jittered), before the next period.
HEARTBEAT_BUSY_RETRIES = 4
HEARTBEAT_BUSY_BACKOFF = 0.5


def client_namesrv_addr(namesrv_addr: str | None) -> str:
    """The name servers a producer or consumer uses: ``namesrv_addr`` when given,
    else the ``NAMESRV_ADDR`` environment variable (as RocketMQ's clients), else
    ``127.0.0.1:9876``."""
    resolved = resolve_namesrv_addr(namesrv_addr, DEFAULT_NAMESRV_ADDR)
    assert resolved is not None
    return resolved


def parse_namesrv_addr(namesrv_addr: str) -> list[str]:
    """``"a:9876;b:9876"`` -> ``["a:9876", "b:9876"]``. Raises MQClientError."""
    if not isinstance(namesrv_addr, str):
        raise MQClientError("the name server address must be a string like 'host:9876;host2:9876'")
    addrs = split_namesrv_addr(namesrv_addr)
    if not addrs:
        raise MQClientError("no name server address given")
    for addr in addrs:
        try:
            split_addr(addr)
        except ValueError as exc:
            raise MQClientError(f"bad name server address {addr!r}: {exc}") from exc
    return addrs


def _registry_key(namesrv_addr: str, instance_name: str | None,
                  credentials: AclCredentials | None = None, tls: ClientTls | None = None) -> str:
    key = ";".join(parse_namesrv_addr(namesrv_addr)) + "|" + (instance_name or str(os.getpid()))
    if tls is not None:  # ... and the same TLS settings
        key += f"|tls:{tls.ca_path}|{tls.cert_path}|{tls.key_path}"
    if credentials is not None:  # instances are shared only by clients with the same keys
        key += f"|{credentials.access_key}|{hash((credentials.secret_key, credentials.security_token))}"
    return key


class _Flight:
    """One route update in progress; concurrent callers wait for it."""

    __slots__ = ("event", "result", "error", "finished")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: TopicRouteData | None = None
        self.error: Exception | None = None
        self.finished = False


class MQClientInstance:
    """Shared client state for one name-server list. Get one with ``acquire``."""

    def __init__(
        self,
        namesrv_addr: str,
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        poll_name_server_interval: float = DEFAULT_POLL_NAME_SERVER_INTERVAL,
        handlers: HandlerTable | None = None,
        instance_name: str | None = None,
        heartbeat_broker_interval: float = DEFAULT_HEARTBEAT_BROKER_INTERVAL,
        rebalance_interval: float = DEFAULT_REBALANCE_INTERVAL,
        persist_consumer_offset_interval: float = DEFAULT_PERSIST_CONSUMER_OFFSET_INTERVAL,
        credentials: AclCredentials | None = None,
        tls: ClientTls | None = None,
        busy_poll_us: int | None = None,
    ) -> None:
        self.credentials = credentials
        # µs to keep polling after each request instead of sleeping
        # (protocol/trio/busy_poll.py): ``busy_poll_us``, else ROCKETMQ_BUSY_POLL_US; 0: off.
        # A loop in a helper thread (the blocking client's) shares the GIL with
        # the application's threads, so it spins only when asked explicitly.
        try:
            if busy_poll_us is not None:
                self.busy_poll_us = check_window_us(busy_poll_us, "busy_poll_us")
            elif threading.current_thread() is threading.main_thread():
                self.busy_poll_us = busy_poll_us_from_env()
            else:
                self.busy_poll_us = 0
        except ValueError as exc:
            raise MQClientError(str(exc)) from None
        # TLS on every connection: ``tls``, else ROCKETMQ_TLS_ENABLE/ROCKETMQ_TLS_CA/...
        # (RocketMQ's clients: the tls.enable system property); None: plain
        self.tls = tls if tls is not None else client_tls_from_env()
        self.namesrv_addrs = parse_namesrv_addr(namesrv_addr)
        self.namesrv_addr = ";".join(self.namesrv_addrs)
        if request_timeout <= 0:
            raise MQClientError("request_timeout must be positive")
        if poll_name_server_interval <= 0:
            raise MQClientError("poll_name_server_interval must be positive")
        self.request_timeout = request_timeout
        self.poll_name_server_interval = poll_name_server_interval
        for name, value in (("heartbeat_broker_interval", heartbeat_broker_interval),
                            ("rebalance_interval", rebalance_interval),
                            ("persist_consumer_offset_interval", persist_consumer_offset_interval)):
            if not value > 0:
                raise MQClientError(f"{name} must be positive")
        self.heartbeat_broker_interval = heartbeat_broker_interval
        self.rebalance_interval = rebalance_interval
        self.persist_consumer_offset_interval = persist_consumer_offset_interval
        self.handlers = handlers or HandlerTable()
        self.handlers.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)
        self.handlers.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check_transaction)
        self.handlers.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_running_info)
        self.handlers.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset_offset)
        self.instance_name = instance_name or str(os.getpid())
        self.client_id = f"{local_ip()}@{self.instance_name}"
        self._consumers: dict[str, ConsumerInner] = {}
        self._producer_groups: set[str] = set()
        self._tx_checkers: dict[str, TransactionChecker] = {}
        self._prompt_heartbeat_addrs: set[str] = set()
        self._prompt_heartbeat_running = False
        self._rejoining: set[str] = set()  # broker addresses being re-joined (_rejoin)
        self._rebalance_event = trio.Event()
        self._namesrvs = NamesrvSelector(self.namesrv_addrs)
        self._service = ServiceNursery(f"MQClientInstance[{self.namesrv_addr}]")
        self._remoting: RemotingClient | None = None
        # Open connections by address (RemotingClient's pool, without an await per lookup).
        self._conns: dict[str, RemotingConnection] = {}
        self._state = "created"
        self._started = trio.Event()
        self._refs = 0
        # Route cache.
        self._routes: dict[str, TopicRouteData] = {}
        self._default_routes: dict[str, TopicRouteData] = {}
        self._publish: dict[str, TopicPublishInfo] = {}
        self._subscribe: dict[str, list[MessageQueue]] = {}
        self._broker_addrs: dict[str, dict[int, str]] = {}
        self._flights: dict[tuple[str, int | None], _Flight] = {}
        self._failure_refreshes = FailureRefreshes()
        self._log = log.bind(namesrv=self.namesrv_addr, client_id=self.client_id)
        self._refresh_guard = Guard(self._log, "route refresh")
        self._heartbeat_guard = Guard(self._log, "heartbeat")
        self._rebalance_guard = Guard(self._log, "rebalance")
        self._persist_guard = Guard(self._log, "persist consumer offsets")
        self._reset_guard = Guard(self._log, "reset offsets")

    # ---- registry ---------------------------------------------------------------

    @classmethod
    async def acquire(cls, namesrv_addr: str, **options: Any) -> MQClientInstance:
        """The running instance for ``namesrv_addr`` in this trio run, created and
        started if needed; adds a reference (``release`` it). ``options`` apply only
        when the instance is created. Raises MQClientError for a bad address."""
        tls = options.get("tls")
        if tls is None:
            tls = options["tls"] = client_tls_from_env()
        key = _registry_key(namesrv_addr, options.get("instance_name"),
                            options.get("credentials"), tls)
        try:
            table = _INSTANCES.get()
        except LookupError:
            table = {}
            _INSTANCES.set(table)
        inst = table.get(key)
        if inst is not None and inst._state in ("created", "starting", "running"):
            inst._refs += 1
            try:
                await inst._started.wait()
            except BaseException:
                inst._refs -= 1
                raise
            if inst._state != "running":
                inst._refs -= 1
                raise MQClientError(f"client instance for {key} failed to start")
            return inst
        inst = cls(namesrv_addr, **options)
        table[key] = inst
        inst._refs = 1
        try:
            await inst.start()
        except BaseException:
            inst._refs = 0
            if table.get(key) is inst:
                del table[key]
            raise
        return inst

    async def release(self) -> None:
        """Drop one reference; the last one shuts the instance down."""
        self._refs -= 1
        if self._refs > 0:
            return
        try:
            table = _INSTANCES.get()
        except LookupError:
            table = {}
        key = _registry_key(self.namesrv_addr, self.instance_name, self.credentials, self.tls)
        if table.get(key) is self:
            del table[key]
        await self.shutdown()

    # ---- lifecycle --------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._state == "running"

    async def start(self) -> None:
        """Open the remoting client and start the route refresh task."""
        if self._state != "created":
            raise MQClientError(f"client instance is {self._state}, it can be started once")
        self._state = "starting"
        tune_malloc()  # pull responses from the heap, not fresh mappings (protocol.trio.memory)
        try:
            await self._service.start()
            self._remoting = await self._service.start_task(self._run_remoting)
            self._service.start_soon(self._refresh_loop)
            self._service.start_soon(self._heartbeat_loop)
            self._service.start_soon(self._rebalance_loop)
            self._service.start_soon(self._persist_loop)
        except BaseException:
            self._state = "failed"
            self._started.set()
            with trio.CancelScope(shield=True):
                await self._service.stop()
            raise
        self._state = "running"
        self._started.set()
        self._log.info("client instance started")

    async def shutdown(self) -> None:
        """Stop the refresh task and close every connection. Idempotent."""
        if self._state in ("shutdown", "created"):
            self._state = "shutdown"
            return
        self._state = "shutdown"
        self._started.set()
        with trio.CancelScope(shield=True):
            if self._remoting is not None:
                # oneway requests still queued must reach the wire before we close
                with trio.move_on_after(2):
                    await self._remoting.drain()
            await self._service.stop()
        self._remoting = None
        self._conns.clear()
        self._log.info("client instance shut down")

    async def _run_remoting(self, task_status: trio.TaskStatus[RemotingClient]) -> None:
        try:
            remoting = RemotingClient(self.handlers, connect_timeout=self.request_timeout,
                                      credentials=self.credentials, tls=self.tls,
                                      busy_poll=BusyPoll(self.busy_poll_us))
        except TlsConfigError as exc:
            raise MQClientError(str(exc)) from exc
        async with remoting as rc:
            task_status.started(rc)
            await trio.sleep_forever()

    async def _refresh_loop(self) -> None:
        while True:
            await trio.sleep(self.poll_name_server_interval)
            await self._refresh_guard.run(self.refresh_routes)

    # ---- requests ---------------------------------------------------------------

    def _client(self) -> RemotingClient:
        rc = self._remoting
        if rc is None or self._state != "running":
            raise MQClientError("the client instance is not running (start the producer/consumer)")
        return rc

    async def _connection(self, addr: str, deadline: float) -> RemotingConnection:
        rc = self._client()
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        with trio.move_on_at(deadline):
            conn = self._conns[addr] = await rc.get_connection(addr)
            self._watch_broker_connection(addr, conn)
            return conn
        raise RemotingTimeoutError(f"connect to {addr} timed out")

    async def invoke(
        self, addr: str, cmd: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` and wait for the response, connecting if needed;
        the whole call is bounded by ``timeout`` (default ``request_timeout``).

        Raises RemotingError (connect failure, timeout, connection lost) and
        MQClientError when the instance is not running.
        """
        if timeout is None:
            timeout = self.request_timeout
        deadline = trio.current_time() + timeout
        conn = await self._connection(addr, deadline)
        self._client().sign(cmd)
        return await conn.invoke(cmd, max(deadline - trio.current_time(), 1e-3))

    async def invoke_oneway(
        self, addr: str, cmd: RemotingCommand, timeout: float | None = None
    ) -> None:
        """Send ``cmd`` without waiting for a response. Raises RemotingError."""
        if timeout is None:
            timeout = self.request_timeout
        conn = await self._connection(addr, trio.current_time() + timeout)
        self._client().sign(cmd)
        await conn.invoke_oneway(cmd)

    @property
    def current_namesrv(self) -> str:
        """The name server the next request goes to first."""
        return self._namesrvs.current

    async def invoke_namesrv(
        self, make_cmd: Callable[[], RemotingCommand], timeout: float | None = None
    ) -> tuple[str, RemotingCommand]:
        """Send a request to the current name server, moving on to the next ones
        while they cannot be reached or do not answer in time; the first that
        answers becomes the current one. Returns (address, response). Each name
        server gets ``timeout`` (default ``request_timeout``), so the call is
        bounded by that times the number of name servers. Raises MQClientError
        when none answers."""
        async def ask(addr: str) -> RemotingCommand:
            return await self.invoke(addr, make_cmd(), timeout)

        try:
            return await ask_in_turn(self._namesrvs, ask, RemotingError, self._log)
        except NoNamesrvAnswered as exc:
            raise MQClientError(f"no name server could be reached: {exc}") from None

    # ---- routes -----------------------------------------------------------------

    async def fetch_route_from_namesrv(
        self, topic: str, timeout: float | None = None
    ) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC; None when the name server says TOPIC_NOT_EXIST.

        Raises MQBrokerError for another error code, MQClientError when no name
        server answers or the route body cannot be decoded.
        """

        def make_cmd() -> RemotingCommand:
            return RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic).to_fields()
            )

        addr, response = await self.invoke_namesrv(make_cmd, timeout)
        if response.code == ResponseCode.SUCCESS:
            try:
                return TopicRouteData.from_dict(unpack_body(response.body))
            except (ProtocolError, ValueError, TypeError, AttributeError) as exc:
                raise MQClientError(f"bad route data for topic {topic} from {addr}: {exc}") from exc
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        raise MQBrokerError(
            response.code, response.remark, addr, context=f"get route of topic {topic}"
        )

    async def update_topic_route(
        self, topic: str, *, default_topic_queue_nums: int | None = None
    ) -> TopicRouteData | None:
        """Fetch ``topic``'s route from the name servers and update the cache.

        With ``default_topic_queue_nums`` (producers), a topic the name server
        does not know gets a publish-only route built from ``TBW102``'s. Returns
        the route, or None when the topic has none (the cache keeps what it had).
        Concurrent calls for the same topic share one request.
        Raises MQClientError / MQBrokerError as ``fetch_route_from_namesrv``.
        """
        key = (topic, default_topic_queue_nums)
        while True:
            flight = self._flights.get(key)
            if flight is None:
                break
            await flight.event.wait()
            if flight.finished:
                if flight.error is not None:
                    raise flight.error
                return flight.result
            # The task doing the update was cancelled: try ourselves.
        flight = self._flights[key] = _Flight()
        try:
            flight.result = await self._update_topic_route(topic, default_topic_queue_nums)
            flight.finished = True
            return flight.result
        except Exception as exc:
            flight.error = exc
            flight.finished = True
            raise
        finally:
            del self._flights[key]
            flight.event.set()

    async def _update_topic_route(
        self, topic: str, default_topic_queue_nums: int | None
    ) -> TopicRouteData | None:
        route = await self.fetch_route_from_namesrv(topic)
        if route is not None:
            self._set_route(topic, route)
            return route
        if default_topic_queue_nums is None:
            self._log.debug("topic has no route", topic=topic)
            return None
        default = await self.fetch_route_from_namesrv(AUTO_CREATE_TOPIC_KEY)
        if default is None:
            self._log.warning("topic has no route and there is no TBW102 route", topic=topic)
            return None
        route = default_topic_route(default, default_topic_queue_nums)
        self._set_default_route(topic, route)
        return route

    def _remember_brokers(self, route: TopicRouteData) -> None:
        # a broker first met gets a heartbeat at once when this client has producers:
        # it then lists them (producerConnection) and can ask them about transactions
        known = (set(self._broker_addr_list())
                 if self._tx_checkers or self._producer_groups else None)
        for bd in route.broker_datas:
            self._broker_addrs[bd.broker_name] = dict(bd.broker_addrs)
        if known is not None:
            self._heartbeat_soon(set(self._broker_addr_list()) - known)

    def _set_publish(self, topic: str, route: TopicRouteData, is_default: bool) -> None:
        old = self._publish.get(topic)
        self._publish[topic] = TopicPublishInfo(
            topic,
            publish_queues(topic, route),
            is_default=is_default,
            start_index=None if old is None else old.next_index,
        )

    def _set_route(self, topic: str, route: TopicRouteData) -> None:
        old = self._routes.get(topic)
        self._remember_brokers(route)
        if old == route and topic in self._publish and topic not in self._default_routes:
            return
        self._routes[topic] = route
        self._default_routes.pop(topic, None)
        self._set_publish(topic, route, False)
        self._subscribe[topic] = subscribe_queues(topic, route)
        self._log.info(
            "topic route updated",
            topic=topic,
            brokers=sorted(b.broker_name for b in route.broker_datas),
            publish_queues=len(self._publish[topic].queues),
            subscribe_queues=len(self._subscribe[topic]),
        )

    def _set_default_route(self, topic: str, route: TopicRouteData) -> None:
        self._remember_brokers(route)
        if topic in self._routes:
            return  # a real route is known; keep it
        old = self._default_routes.get(topic)
        self._default_routes[topic] = route
        if old == route and topic in self._publish:
            return
        self._set_publish(topic, route, True)
        self._log.info(
            "using TBW102 route for a new topic",
            topic=topic,
            publish_queues=len(self._publish[topic].queues),
        )

    async def refresh_route_after_failure(self, topic: str, deadline: float) -> None:
        """A request to one of ``topic``'s brokers failed (unreachable, connection
        lost, timed out): fetch the topic's route now, at most once a second per
        topic (``FailureRefreshes``) and not past ``deadline``, so that a producer
        or consumer finds a new master without waiting up to
        ``poll_name_server_interval``. Failures are logged, not raised."""
        if not self._failure_refreshes.due(topic, trio.current_time()):
            return
        with trio.move_on_at(deadline):
            try:
                await self.update_topic_route(topic)
            except MQClientError as exc:
                self._log.info("route refresh after a failure failed", topic=topic,
                               error=str(exc))

    async def refresh_routes(self) -> None:
        """Refresh every cached or subscribed topic's route once (what the
        periodic task does). Failures are logged, not raised."""
        topics = set(self._routes) | set(self._default_routes)
        for consumer in list(self._consumers.values()):
            topics |= consumer.subscribed_topics()
        for topic in sorted(topics):
            try:
                await self.update_topic_route(topic)
            except MQClientError as exc:
                self._log.warning("route refresh failed", topic=topic, error=str(exc))
            except Exception as exc:  # one topic's bug must not skip the others
                self._refresh_guard.failed(exc, "route refresh failed", topic=topic)

    def topic_route(self, topic: str) -> TopicRouteData | None:
        """The cached route of ``topic`` (not a TBW102-based one), or None."""
        return self._routes.get(topic)

    def publish_info(self, topic: str) -> TopicPublishInfo | None:
        """The cached publish info of ``topic``, or None."""
        return self._publish.get(topic)

    async def find_publish_info(
        self, topic: str, default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS
    ) -> TopicPublishInfo:
        """The publish info of ``topic``, fetching the route (with the TBW102
        fallback) when it is not cached or has no writable queue.

        Raises MQClientError when the topic has no writable queue.
        """
        info = self._publish.get(topic)
        if info is not None and info.queues:
            return info
        await self.update_topic_route(topic, default_topic_queue_nums=default_topic_queue_nums)
        info = self._publish.get(topic)
        if info is not None and info.queues:
            return info
        raise MQClientError(
            f"no route info of topic {topic}: it has no writable queue on the name servers "
            f"{self.namesrv_addr} and no TBW102 route to auto-create it"
        )

    def subscribe_queues(self, topic: str) -> list[MessageQueue] | None:
        """The cached readable queues of ``topic`` (sorted), or None."""
        queues = self._subscribe.get(topic)
        return None if queues is None else list(queues)

    async def fetch_subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Fetch ``topic``'s route now and return its readable queues, sorted.

        Raises MQClientError when the topic does not exist or has no readable
        queue (the TBW102 fallback never applies to consuming).
        """
        route = await self.update_topic_route(topic)
        if route is None:
            raise MQClientError(
                f"topic {topic} does not exist on the name servers {self.namesrv_addr}"
            )
        queues = self._subscribe.get(topic) or []
        if not queues:
            raise MQClientError(f"topic {topic} has no readable queue")
        return list(queues)

    # ---- brokers ----------------------------------------------------------------

    def find_broker_addr(self, broker_name: str) -> str | None:
        """The master address of ``broker_name`` from cached routes, or None."""
        addrs = self._broker_addrs.get(broker_name)
        return None if addrs is None else addrs.get(MASTER_ID)

    def find_broker_addr_for_read(
        self, broker_name: str, broker_id: int = MASTER_ID
    ) -> tuple[str, int] | None:
        """(address, broker id) to read from: ``broker_id`` if known, else the
        master, else the lowest-numbered slave. None when the broker is unknown."""
        addrs = self._broker_addrs.get(broker_name)
        if not addrs:
            return None
        for bid in (broker_id, MASTER_ID):
            addr = addrs.get(bid)
            if addr is not None:
                return addr, bid
        bid = min(addrs)
        return addrs[bid], bid

    def find_broker_addr_in_admin(self, broker_name: str) -> tuple[str, int] | None:
        """(address, broker id) for a group's offsets and queue offsets
        (RocketMQ's findBrokerAddressInAdmin): the master, else the
        lowest-numbered slave, so offsets committed while a master is down are
        kept by its slave. None when the broker is unknown."""
        return self.find_broker_addr_for_read(broker_name, MASTER_ID)

    async def require_broker_addr(
        self, broker_name: str, topic: str, *, master_only: bool = True, broker_id: int = MASTER_ID
    ) -> tuple[str, int]:
        """Like ``find_broker_addr`` / ``find_broker_addr_for_read``, fetching
        ``topic``'s route once when the broker is not known.
        Raises MQClientError when it still cannot be found."""
        for attempt in range(2):
            if master_only:
                addr = self.find_broker_addr(broker_name)
                if addr is not None:
                    return addr, MASTER_ID
            else:
                found = self.find_broker_addr_for_read(broker_name, broker_id)
                if found is not None:
                    return found
            if attempt == 0:
                await self.update_topic_route(topic)
        what = "master of broker" if master_only else "broker"
        raise MQClientError(f"the {what} {broker_name} (topic {topic}) is not in any route")

    # ---- consumers, producers, heartbeats -------------------------------------------

    def register_consumer(self, consumer: ConsumerInner) -> None:
        """Drive ``consumer`` (heartbeats, rebalance, offset persistence).
        Raises MQClientError when its group already has a consumer here."""
        if consumer.group in self._consumers:
            raise MQClientError(
                f"the consumer group {consumer.group} already has a consumer in client "
                f"{self.client_id}; use another group or another instance_name"
            )
        self._consumers[consumer.group] = consumer

    async def unregister_consumer(self, group: str) -> None:
        """Stop driving the group's consumer and tell every broker it left."""
        if self._consumers.pop(group, None) is not None:
            await self._unregister_client({"consumerGroup": group})

    def register_producer(self, group: str) -> None:
        self._producer_groups.add(group)

    async def unregister_producer(self, group: str) -> None:
        if group in self._producer_groups:
            self._producer_groups.discard(group)
            await self._unregister_client({"producerGroup": group})

    def _broker_addr_list(self) -> list[str]:
        return sorted({a for addrs in self._broker_addrs.values() for a in addrs.values()})

    async def _unregister_client(self, fields: dict[str, Any]) -> None:
        async def one(addr: str) -> None:
            cmd = RemotingCommand.request(
                RequestCode.UNREGISTER_CLIENT, {"clientID": self.client_id, **fields})
            try:
                await self.invoke(addr, cmd)
            except (RemotingError, MQClientError) as exc:
                self._log.warning("unregister client failed", broker=addr, error=str(exc))

        if self._state != "running":
            return
        async with trio.open_nursery() as nursery:
            for addr in self._broker_addr_list():
                nursery.start_soon(one, addr)

    # ---- transaction producers -------------------------------------------------------

    def register_transaction_checker(self, group: str, checker: TransactionChecker) -> None:
        """Hand the brokers' CHECK_TRANSACTION_STATE requests for ``group`` to
        ``checker``; every known broker gets a heartbeat at once (and, from now
        on, every broker address learned from a route). Raises MQClientError
        when the group already has a transaction producer here."""
        if group in self._tx_checkers:
            raise MQClientError(
                f"the producer group {group} already has a transaction producer in client "
                f"{self.client_id}; use another group or another instance_name"
            )
        self._tx_checkers[group] = checker
        self._heartbeat_soon(set(self._broker_addr_list()))

    def unregister_transaction_checker(self, group: str) -> None:
        """Stop handing checks to ``group``'s checker (later ones are dropped)."""
        self._tx_checkers.pop(group, None)

    def _on_check_transaction(self, conn: RemotingConnection, cmd: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE (oneway): validate, find the group's checker,
        hand the check over. A bad or unwanted check is logged and dropped: the
        broker asks again later."""
        broker = conn.remote_addr
        try:
            header = CheckTransactionStateRequestHeader.from_fields(cmd.ext_fields)
            if not cmd.body:
                raise ProtocolError("the check carries no message")
            msg = decode_record(cmd.body)
        except ProtocolError as exc:
            self._log.warning("malformed transaction check dropped", broker=broker,
                              error=str(exc))
            return
        group = msg.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP)
        checker = self._tx_checkers.get(group) if group else None
        if checker is None:
            self._log.warning("transaction check for a group without a transaction producer "
                              "here, dropped", broker=broker, group=group,
                              msg_id=msg.uniq_key, transaction_id=header.transaction_id)
            return
        try:
            checker(broker, header, msg)
        except Exception:
            self._log.exception("transaction checker failed", broker=broker, group=group)

    def _heartbeat_soon(self, addrs: set[str]) -> None:
        """Heartbeat ``addrs`` from a background task (one at a time; addresses
        added meanwhile join the next round)."""
        if not addrs or self._state != "running" or not self._service.running:
            return
        self._prompt_heartbeat_addrs |= addrs
        if not self._prompt_heartbeat_running:
            self._prompt_heartbeat_running = True
            self._service.start_soon(self._prompt_heartbeats)

    async def _prompt_heartbeats(self) -> None:
        try:
            while self._prompt_heartbeat_addrs:
                addrs = sorted(self._prompt_heartbeat_addrs)
                self._prompt_heartbeat_addrs.clear()
                await self._send_heartbeat(addrs)
        except Exception as exc:  # never into the instance's service nursery
            self._heartbeat_guard.failed(exc, "heartbeat to new brokers failed")
        finally:
            self._prompt_heartbeat_running = False

    def heartbeat_data(self) -> dict[str, Any]:
        return {
            "clientID": self.client_id,
            "producerDataSet": [{"groupName": g} for g in sorted(self._producer_groups)],
            "consumerDataSet": [c.consumer_data() for c in self._consumers.values()],
        }

    async def send_heartbeat_to_all_brokers(self) -> None:
        """HEART_BEAT to every known broker. Failures and refusals are logged."""
        await self._send_heartbeat(self._broker_addr_list())

    async def _send_heartbeat(self, addrs: list[str]) -> None:
        if not self._consumers and not self._producer_groups:
            return
        body = pack_body(self.heartbeat_data())
        async with trio.open_nursery() as nursery:
            for addr in addrs:
                nursery.start_soon(self._heartbeat_one, addr, body)

    async def _heartbeat_one(self, addr: str, body: bytes, quiet: bool = False) -> bool:
        """One HEART_BEAT; True when the broker took it. Failures are logged
        (``quiet``: at debug level), never raised."""
        for attempt in range(HEARTBEAT_BUSY_RETRIES + 1):
            cmd = RemotingCommand.request(RequestCode.HEART_BEAT, {}, body=body)
            try:
                response = await self.invoke(addr, cmd)
            except (RemotingError, MQClientError) as exc:
                (self._log.debug if quiet else self._log.warning)(
                    "heartbeat failed", broker=addr, error=str(exc))
                return False
            except Exception as exc:  # one broker's failure must not cancel the others
                self._heartbeat_guard.failed(exc, "heartbeat failed", broker=addr)
                return False
            if response.code != ResponseCode.SYSTEM_BUSY or attempt == HEARTBEAT_BUSY_RETRIES:
                break
            # the broker is shedding heart beats: try again soon, not in 30 s
            await trio.sleep(HEARTBEAT_BUSY_BACKOFF * 2**attempt * (0.5 + random.random()))
        if response.code != ResponseCode.SUCCESS:
            self._log.warning("heartbeat refused", broker=addr, code=response.code,
                              remark=response.remark)
            return False
        return True

    def _watch_broker_connection(self, addr: str, conn: RemotingConnection) -> None:
        """While a transaction producer runs, a broker must always know it (it
        asks producers it knows from heartbeats, on their connections): a new
        connection is heart-beaten at once, and a lost one is re-opened and
        heart-beaten (after a broker restart) without waiting for the next
        periodic heartbeat."""
        if not self._tx_checkers or addr not in self._broker_addr_list():
            return
        self._heartbeat_soon({addr})

        def closed(_conn: RemotingConnection) -> None:
            if (self._tx_checkers and self._state == "running" and self._service.running
                    and addr not in self._rejoining):
                self._rejoining.add(addr)
                self._service.start_soon(self._rejoin, addr)

        conn.on_close(closed)

    async def _rejoin(self, addr: str) -> None:
        """Reconnect and heartbeat ``addr`` until it answers, backing off, for
        at most one heartbeat interval (then the periodic heartbeat carries on)."""
        try:
            delay = 0.2
            give_up = trio.current_time() + self.heartbeat_broker_interval
            while self._tx_checkers and trio.current_time() < give_up:
                await trio.sleep(delay)
                if addr not in self._broker_addr_list():
                    return
                body = pack_body(self.heartbeat_data())
                if await self._heartbeat_one(addr, body, quiet=True):
                    self._log.info("broker connection re-opened for transaction checks",
                                   broker=addr)
                    return
                delay = min(delay * 2, 5.0)
        finally:
            self._rejoining.discard(addr)

    def rebalance_immediately(self) -> None:
        self._rebalance_event.set()

    def _on_ids_changed(self, conn: RemotingConnection, cmd: RemotingCommand) -> None:
        self._log.info("consumer ids changed", group=cmd.ext_fields.get("consumerGroup"),
                       broker=conn.remote_addr)
        self.rebalance_immediately()

    def _on_running_info(self, conn: RemotingConnection, cmd: RemotingCommand
                         ) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (a broker relays an admin's mqadmin consumerStatus)."""
        h = GetConsumerRunningInfoRequestHeader.from_fields(cmd.ext_fields)
        consumer = self._consumers.get(h.consumer_group)
        if consumer is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{h.consumer_group}> "
                                                           "not exist in this consumer")
        return cmd.response(ResponseCode.SUCCESS,
                            body=cmd.encode_body(consumer.running_info(h.jstack_enable)))

    def _on_reset_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (oneway): the broker moved a group's offsets
        of a topic (mqadmin skipAccumulatedMessage); the group's consumer takes them,
        for that broker's own queues only (a broker cannot move another's)."""
        h = ResetOffsetRequestHeader.from_fields(cmd.ext_fields)
        consumer = self._consumers.get(h.group)
        if consumer is None or not self._service.running:
            return
        body = ResetOffsetBody.from_wire(cmd.decode_body())
        sender = {name for name, addrs in self._broker_addrs.items()
                  if conn.remote_addr in addrs.values()}
        offsets = {mq: o for mq, o in body.offsets.items()
                   if mq.topic == h.topic and mq.broker_name in sender}
        if not offsets:
            return
        self._log.info("offset reset asked by the broker", group=h.group, topic=h.topic,
                       broker=conn.remote_addr, queues=len(offsets))
        self._service.start_soon(self._reset_guard.run, consumer.reset_offset, h.topic, offsets)

    async def do_rebalance(self) -> None:
        """Rebalance every registered consumer once. Failures are logged."""
        for consumer in list(self._consumers.values()):
            try:
                await consumer.do_rebalance()
            except (MQClientError, MQBrokerError, RemotingError) as exc:
                if not getattr(consumer, "running", True):
                    continue  # it began shutting down meanwhile: nothing went wrong
                self._log.warning("rebalance failed", group=consumer.group, error=str(exc))
            except Exception as exc:
                self._rebalance_guard.failed(exc, "rebalance failed", group=consumer.group)

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.heartbeat_broker_interval)
            await self._heartbeat_guard.run(self.send_heartbeat_to_all_brokers)

    async def _rebalance_loop(self) -> None:
        while True:
            with trio.move_on_after(self.rebalance_interval):
                await self._rebalance_event.wait()
            self._rebalance_event = trio.Event()
            # a failing round backs off, however often brokers ask for a rebalance
            await self._rebalance_guard.run(self.do_rebalance)

    async def persist_consumer_offsets(self) -> None:
        """Persist every registered consumer's offsets once. Failures are logged."""
        for consumer in list(self._consumers.values()):
            try:
                await consumer.persist_consumer_offset()
            except Exception as exc:
                self._persist_guard.failed(exc, "persisting offsets failed",
                                           group=consumer.group)

    async def _persist_loop(self) -> None:
        while True:
            await trio.sleep(self.persist_consumer_offset_interval)
            await self._persist_guard.run(self.persist_consumer_offsets)
