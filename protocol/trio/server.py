"""RemotingServer: accepts connections and serves them with a handler table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
import trio

from protocol.frame import DEFAULT_MAX_FRAME_SIZE
from protocol.trio.connection import HandlerTable, RemotingConnection

log = structlog.get_logger("remoting.server")


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
    ) -> None:
        self.handlers = handlers
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.connections: set[RemotingConnection] = set()
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
        log.info("listening", host=self.host, port=self.port)
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            task_status.started(self.port)

    async def _handle(self, stream: trio.SocketStream) -> None:
        """Serve one accepted connection; nothing raised here ends the server."""
        try:
            await self._serve_connection(stream)
        except Exception:
            log.exception("connection handler failed", peer=peer_name(stream))
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        try:
            stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, True)
        except OSError:
            pass
        conn = RemotingConnection(
            stream, self.handlers, remote_addr=peer_name(stream), max_frame_size=self.max_frame_size
        )
        self.connections.add(conn)
        for cb in self._on_close:
            conn.on_close(cb)
        conn.on_close(self.connections.discard)
        for cb in self._on_open:
            cb(conn)
        await conn.run()
