"""A loopback TCP proxy that can cut what passes through it on command.

The chaos checker puts one in front of every port of the master (remoting,
HA) and one between the master and the name server: the master registers
the proxies' address (brokerIP1), so clients and slaves reach it only
through them, and a partition is a mode switch:

- PASS: bytes flow both ways;
- BLACKHOLE: nothing moves (a connection keeps what it read, new connections
  are accepted and held); back to PASS, everything held flows on, as after a
  network partition healed before TCP gave up;
- DROP: every connection is closed, new ones are closed at once.
"""

from __future__ import annotations

import enum
from typing import Any

import structlog
import trio

CHUNK = 64 * 1024
MAX_CONNECTIONS = 1024  # past it a new connection is closed at once


class Mode(enum.Enum):
    PASS = "pass"
    BLACKHOLE = "blackhole"
    DROP = "drop"


class TcpProxy:
    """Listens on ``listen_host:listen_port`` (0: any free port), forwards
    each connection to ``target_host:target_port``."""

    def __init__(self, name: str, listen_host: str, listen_port: int, target_host: str,
                 target_port: int) -> None:
        self.name = name
        self.listen_host, self.listen_port = listen_host, listen_port
        self.target_host, self.target_port = target_host, target_port
        self.mode = Mode.PASS
        self._open = trio.Event()
        self._open.set()
        self._conns: set[trio.CancelScope] = set()
        self.accepted = 0  # connections accepted so far (tests, logs)
        self.log = structlog.get_logger("chaos.proxy").bind(proxy=name)

    @property
    def connections(self) -> int:
        return len(self._conns)

    def set_mode(self, mode: Mode) -> None:
        if mode is self.mode:
            return
        self.log.info("proxy mode", mode=mode.value, connections=len(self._conns))
        self.mode = mode
        if mode is Mode.PASS:
            self._open.set()
            return
        if self._open.is_set():
            self._open = trio.Event()
        if mode is Mode.DROP:
            for scope in list(self._conns):
                scope.cancel()

    async def _gate(self) -> None:
        """Until bytes may pass (PASS); Cancelled when the connection is dropped."""
        while self.mode is not Mode.PASS:
            await self._open.wait()

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; reports the bound port."""
        listeners = await trio.open_tcp_listeners(self.listen_port, host=self.listen_host)
        self.listen_port = listeners[0].socket.getsockname()[1]
        self.log.info("proxy listening", port=self.listen_port,
                      target=f"{self.target_host}:{self.target_port}")
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._serve, listeners)
            task_status.started(self.listen_port)

    async def _serve(self, downstream: trio.SocketStream) -> None:
        async with downstream:
            if self.mode is Mode.DROP or len(self._conns) >= MAX_CONNECTIONS:
                return
            self.accepted += 1
            with trio.CancelScope() as scope:
                self._conns.add(scope)
                try:
                    await self._gate()
                    try:
                        upstream = await trio.open_tcp_stream(self.target_host, self.target_port)
                    except OSError:
                        return  # the target is down: the client sees the connection close
                    async with upstream, trio.open_nursery() as nursery:
                        nursery.start_soon(self._pump, downstream, upstream, nursery.cancel_scope)
                        nursery.start_soon(self._pump, upstream, downstream, nursery.cancel_scope)
                finally:
                    self._conns.discard(scope)

    async def _pump(self, src: trio.SocketStream, dst: trio.SocketStream,
                    done: trio.CancelScope) -> None:
        """src -> dst until either side closes; then the whole connection ends."""
        try:
            while True:
                data = await src.receive_some(CHUNK)
                if not data:
                    break
                await self._gate()
                await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            done.cancel()
