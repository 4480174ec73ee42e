"""RemotingServer: accepts connections and serves them with a handler table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
import trio

from protocol.frame import DEFAULT_MAX_FRAME_SIZE
from protocol.trio.busy_poll import BusyPoll, active
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.limits import ConnectionLimits, Lanes, SharedBudget
from protocol.trio.service import Guard
from protocol.trio.tls import ServerTls, accept

# a TLS handshake (after its first byte) must complete within this, or
# frameReadTimeoutSeconds if shorter
HANDSHAKE_TIMEOUT_S = 10.0

log = structlog.get_logger("remoting.server")


SWEEP_EVERY_S = 1.0


def peer_name(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


class RemotingServer:
    """A TCP server; each accepted connection runs as a RemotingConnection."""

    def __init__(
        self,
        handlers: HandlerTable,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        limits: ConnectionLimits | None = None,
        budget: SharedBudget | None = None,
        lanes: Lanes | None = None,
        tls: ServerTls | None = None,
        busy_poll: BusyPoll | None = None,
    ) -> None:
        self.handlers = handlers
        # spin after each request instead of sleeping (protocol/trio/busy_poll.py)
        self.busy_poll = active(busy_poll)
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.limits = limits or ConnectionLimits()
        self.budget = budget or SharedBudget()
        self.lanes = lanes
        # TLS (protocol/trio/tls.py); the context is built here so that bad
        # settings fail the daemon's start with TlsConfigError
        self.tls = tls or ServerTls(mode="disabled")
        self._ssl_context = self.tls.context()
        self.connections: set[RemotingConnection] = set()
        self.per_host: dict[str, int] = {}
        self.refused = 0
        self.closed_by_limits = 0
        self._guard = Guard(log, "remoting server")
        self._on_open: list[Callable[[RemotingConnection], None]] = []
        self._on_close: list[Callable[[RemotingConnection], None]] = []

    def on_connection_open(self, cb: Callable[[RemotingConnection], None]) -> None:
        self._on_open.append(cb)

    def on_connection_closed(self, cb: Callable[[RemotingConnection], None]) -> None:
        self._on_close.append(cb)

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until cancelled; reports the bound port when ready."""
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        log.info("listening", host=self.host, port=self.port, tls_mode=self.tls.mode,
                 tls="on" if self._ssl_context is not None else "off")
        if self._ssl_context is None and self.tls.mode != "disabled":
            log.info("TLS is off: no tls.server.certPath/keyPath, plain connections only",
                     tls_mode=self.tls.mode)
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            nursery.start_soon(self._sweep_loop)
            if self.busy_poll is not None:
                nursery.start_soon(self.busy_poll.run)
            task_status.started(self.port)

    def sweep(self, now: float) -> int:
        """Close connections idle, stalled or stuck in a frame for too long
        (ConnectionLimits); returns how many."""
        closed = 0
        for conn in list(self.connections):
            reason = conn.expired(now)
            if reason is not None:
                self._guard.note("connection closed", key=("expired", reason.split()[0]),
                                 log_level="info", peer=conn.remote_addr, reason=reason)
                conn.close()
                closed += 1
        self.closed_by_limits += closed
        return closed

    async def _sweep_loop(self) -> None:
        every = min(SWEEP_EVERY_S, self.limits.frame_timeout / 4, self.limits.idle_timeout / 4)
        while True:
            await trio.sleep(every)
            await self._guard.run(self.sweep, trio.current_time())

    async def _handle(self, stream: trio.SocketStream) -> None:
        """Serve one accepted connection; nothing raised here ends the server."""
        try:
            await self._serve_connection(stream)
        except Exception:
            log.exception("connection handler failed", peer=peer_name(stream))
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        """Count the connection against its address, then TLS or plain."""
        try:
            stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, True)
        except OSError:
            pass
        peer = peer_name(stream)
        host = peer.rpartition(":")[0]
        limit = self.limits.max_connections_per_address
        if limit and self.per_host.get(host, 0) >= limit:
            self.refused += 1
            self._guard.note("connection refused: too many connections from one address",
                             key=("per-address", host), peer=peer, limit=limit,
                             hint="raise maxConnectionsPerAddress if this client is legitimate")
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()
            return
        self.per_host[host] = self.per_host.get(host, 0) + 1

        def gone(_conn: RemotingConnection | None = None) -> None:
            left = self.per_host.get(host, 1) - 1
            if left > 0:
                self.per_host[host] = left
            else:
                self.per_host.pop(host, None)

        try:
            served = await accept(
                stream, self.tls, self._ssl_context, peer=peer,
                first_byte_timeout=self.limits.idle_timeout,
                handshake_timeout=min(HANDSHAKE_TIMEOUT_S, self.limits.frame_timeout),
                max_frame_size=self.max_frame_size, note=self._guard.note)
        except BaseException:
            gone()
            raise
        if served is None:
            gone()
            return
        conn = RemotingConnection(
            served, self.handlers, remote_addr=peer, max_frame_size=self.max_frame_size,
            limits=self.limits, budget=self.budget, lanes=self.lanes,
            busy_poll=self.busy_poll,
        )
        conn.on_close(gone)
        self.connections.add(conn)
        for cb in self._on_close:
            conn.on_close(cb)
        conn.on_close(self.connections.discard)
        for cb in self._on_open:
            cb(conn)
        await conn.run()
