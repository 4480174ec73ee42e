"""RemotingServer: accepts connections and serves them with a handler table."""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog
import trio

from protocol.frame import DEFAULT_MAX_FRAME_SIZE
from protocol.trio import waiting_room
from protocol.trio.busy_poll import BusyPoll, active
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.limits import ConnectionLimits, Lanes, SharedBudget
from protocol.trio.preauth import PreAuth
from protocol.trio.service import Guard
from protocol.trio.tls import ServerTls, accept
from protocol.trio.waiting_room import Silent, WaitingRoom

# a TLS handshake (after its first byte) must complete within this, or
# frameReadTimeoutSeconds if shorter
HANDSHAKE_TIMEOUT_S = 10.0

log = structlog.get_logger("remoting.server")


SWEEP_EVERY_S = 1.0

# Most connections taken from a listen queue per wakeup of the accept loop.
# trio's own loop takes one per scheduler round, so a new client waited behind
# every connection queued before it (2,000 queued: 0.2-1.5 s). 256 empties a
# burst in a few rounds while other tasks still run between batches.
ACCEPT_BATCH = 256
# accept() failures that mean "out of file descriptors or memory": wait a
# little (as trio.serve_listeners does) instead of spinning on the queue
ACCEPT_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_PAUSE_S = 0.1


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
        preauth: PreAuth | None = None,
    ) -> None:
        self.handlers = handlers
        # ACL on: what a connection may hold before it is authenticated
        # (protocol/trio/preauth.py); None: no such limits
        self.preauth = preauth
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
        # accepted connections whose peer has sent nothing yet: no
        # RemotingConnection is built for one until it does. They wait in
        # the room (Linux), else each in a task of its own (_silent_tasks).
        self._room: WaitingRoom | None = None
        self._silent_tasks = 0
        self._guard = Guard(log, "remoting server")
        self._on_open: list[Callable[[RemotingConnection], None]] = []
        self._on_close: list[Callable[[RemotingConnection], None]] = []

    @property
    def silent(self) -> int:
        """Accepted connections whose peer has sent nothing yet."""
        return (len(self._room) if self._room is not None else 0) + self._silent_tasks

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
            if waiting_room.AVAILABLE:
                self._room = WaitingRoom(self.limits.idle_timeout)
                nursery.start_soon(self._room.run, partial(self._spoke, nursery),
                                   self._expired_silent)
            for listener in listeners:
                nursery.start_soon(self._accept_loop, listener, nursery)
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

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Take the connections queued on ``listener`` (up to ACCEPT_BATCH per
        round) and put each in the waiting room (or start its task). The
        per-address limit is applied here, so a refused connection costs
        nothing more."""
        # the plain socket under trio's (as RemotingConnection's fast path):
        # one non-blocking accept() per queued connection, no checkpoint each
        raw: socket.socket = getattr(listener.socket, "_sock")  # noqa: B009
        try:
            while True:
                await trio.lowlevel.wait_readable(raw)
                for _ in range(ACCEPT_BATCH):
                    try:
                        sock, addr = raw.accept()
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        if exc.errno in ACCEPT_RESOURCE_ERRORS:
                            self._guard.note("accept failed, pausing", key=("accept", exc.errno),
                                             log_level="warning", error=str(exc),
                                             hint="raise the open files limit (ulimit -n)")
                            await trio.sleep(ACCEPT_PAUSE_S)
                            break
                        continue  # the peer left before it was taken (ECONNABORTED)
                    self._accepted(sock, addr, nursery)
        finally:
            raw.close()

    def _accepted(self, sock: socket.socket, addr: Any, nursery: trio.Nursery) -> None:
        """Count one accepted connection against its address, or refuse it."""
        host, port = (str(addr[0]), addr[1]) if isinstance(addr, tuple) else ("?", "?")
        peer = f"{host}:{port}"
        limit = self.limits.max_connections_per_address
        if limit and self.per_host.get(host, 0) >= limit:
            self.refused += 1
            self._guard.note("connection refused: too many connections from one address",
                             key=("per-address", host), peer=peer, limit=limit,
                             hint="raise maxConnectionsPerAddress if this client is legitimate")
            sock.close()
            return
        self.per_host[host] = self.per_host.get(host, 0) + 1
        if self._room is not None:
            self._room.add(sock, peer, host, trio.current_time())
        else:
            nursery.start_soon(self._handle, sock, peer, host, True)

    def _spoke(self, nursery: trio.Nursery, entry: Silent) -> None:
        """A connection of the waiting room sent its first byte (or closed)."""
        nursery.start_soon(self._handle, entry.sock, entry.peer, entry.host, False)

    def _expired_silent(self, entry: Silent) -> None:
        entry.sock.close()
        self._gone(entry.host)
        self._note_silent(entry.peer)

    def _note_silent(self, peer: str) -> None:
        self.closed_by_limits += 1
        self._guard.note("connection closed", key=("expired", "silent"), log_level="info",
                         peer=peer, reason=f"nothing received for {self.limits.idle_timeout:g}s")

    def _gone(self, host: str) -> None:
        left = self.per_host.get(host, 1) - 1
        if left > 0:
            self.per_host[host] = left
        else:
            self.per_host.pop(host, None)

    async def _handle(self, sock: socket.socket, peer: str, host: str, wait_first: bool) -> None:
        """Serve one accepted connection (``wait_first``: after its first byte,
        when it did not wait in the room); nothing raised here ends the server."""
        counted = True

        def gone(_conn: RemotingConnection | None = None) -> None:
            nonlocal counted
            if counted:
                counted = False
                self._gone(host)

        tsock = trio.socket.from_stdlib_socket(sock)
        try:
            await self._serve_connection(tsock, peer, gone, wait_first)
        except Exception:
            log.exception("connection handler failed", peer=peer)
        finally:
            tsock.close()
            gone()

    async def _serve_connection(self, tsock: trio.socket.SocketType, peer: str,
                                gone: Callable[[RemotingConnection], None],
                                wait_first: bool) -> None:
        """Serve a connection, TLS or plain, once its peer has sent a first
        byte. Until then it is an entry of the waiting room (or, without
        one, this task waiting): a burst of silent connections builds no
        RemotingConnection each (nor is swept), and a client that speaks is
        not served after all of them."""
        if wait_first:
            self._silent_tasks += 1
            try:
                with trio.move_on_after(self.limits.idle_timeout) as wait:
                    await trio.lowlevel.wait_readable(tsock)
            finally:
                self._silent_tasks -= 1
            if wait.cancelled_caught:
                self._note_silent(peer)
                return
        idle = self.limits.idle_timeout
        stream = trio.SocketStream(tsock)  # sets TCP_NODELAY
        served = await accept(
            stream, self.tls, self._ssl_context, peer=peer,
            first_byte_timeout=idle,
            handshake_timeout=min(HANDSHAKE_TIMEOUT_S, self.limits.frame_timeout),
            max_frame_size=self.max_frame_size, note=self._guard.note)
        if served is None:
            return
        conn = RemotingConnection(
            served, self.handlers, remote_addr=peer, max_frame_size=self.max_frame_size,
            limits=self.limits, budget=self.budget, lanes=self.lanes,
            busy_poll=self.busy_poll, preauth=self.preauth,
        )
        conn.on_close(gone)
        self.connections.add(conn)
        for cb in self._on_close:
            conn.on_close(cb)
        conn.on_close(self.connections.discard)
        for cb in self._on_open:
            cb(conn)
        await conn.run()
