"""RemotingClient: a pool of connections, one per address, opened on demand."""

from __future__ import annotations

from typing import Any

import structlog
import trio

from protocol.acl import sign_request
from protocol.codecs.base import Codec
from protocol.command import RemotingCommand
from protocol.frame import DEFAULT_MAX_FRAME_SIZE
from protocol.names import shown
from protocol.trio.busy_poll import BusyPoll, active
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.errors import RemotingConnectError
from protocol.trio.tls import ClientTls, connect

log = structlog.get_logger("remoting.client")

DEFAULT_CONNECT_TIMEOUT = 3.0


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address must be host:port, got {shown(addr)}")
    return host, int(port)


class RemotingClient:
    """Connections to many peers. Use as ``async with RemotingClient() as c``.

    Connections live in the client's nursery; requests from peers (e.g.
    NOTIFY_CONSUMER_IDS_CHANGED) are served with ``handlers``.
    """

    def __init__(
        self,
        handlers: HandlerTable | None = None,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        codec: Codec | None = None,
        credentials: Any = None,
        tls: ClientTls | None = None,
        busy_poll: BusyPoll | None = None,
    ) -> None:
        # spin after each request instead of sleeping (protocol/trio/busy_poll.py)
        self.busy_poll = active(busy_poll)
        # anything with access_key/secret_key/security_token: every request is
        # signed as RocketMQ's AclClientRPCHook does (None: unsigned)
        self.credentials = credentials
        # TLS on every connection (None: plain); bad files raise TlsConfigError here
        self.tls = tls
        self._ssl_context = tls.context() if tls is not None else None
        self.handlers = handlers or HandlerTable()
        # the wire format of every connection this client opens (None: msgpack)
        self.codec = codec
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self._conns: dict[str, RemotingConnection] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._nursery: trio.Nursery | None = None
        self._nursery_cm: Any = None

    async def __aenter__(self) -> RemotingClient:
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        if self.busy_poll is not None:
            self._nursery.start_soon(self.busy_poll.run)
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        if exc[0] is None:
            with trio.move_on_after(2):
                await self.drain()
        self.close()
        assert self._nursery_cm is not None
        return await self._nursery_cm.__aexit__(*exc)  # type: ignore[no-any-return]

    def close(self) -> None:
        for conn in list(self._conns.values()):
            conn.close()
        self._conns.clear()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def drain(self) -> None:
        """Wait until every connection has written what is queued (bound it with a timeout)."""
        for conn in list(self._conns.values()):
            await conn.drain()

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def get_connection(self, addr: str) -> RemotingConnection:
        """The open connection to ``addr``, connecting if needed.

        Raises RemotingConnectError.
        """
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        lock = self._locks.setdefault(addr, trio.Lock())
        async with lock:
            conn = self._conns.get(addr)
            if conn is not None and not conn.closed:
                return conn
            if self._nursery is None:
                raise RemotingConnectError("client is not started")
            try:
                host, port = split_addr(addr)
            except ValueError as exc:
                raise RemotingConnectError(str(exc)) from exc
            try:
                with trio.fail_after(self.connect_timeout):
                    stream = await trio.open_tcp_stream(host, port)
            except (OSError, trio.TooSlowError) as exc:
                raise RemotingConnectError(f"connect to {addr} failed: {exc}") from exc
            stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, True)
            served: trio.abc.Stream = stream
            if self._ssl_context is not None:
                served = await connect(stream, self._ssl_context, addr, self.connect_timeout)
            conn = RemotingConnection(
                served, self.handlers, remote_addr=addr, max_frame_size=self.max_frame_size,
                codec=self.codec, busy_poll=self.busy_poll,
            )
            conn.on_close(lambda c: self._forget(addr, c))
            await self._nursery.start(conn.run)
            self._conns[addr] = conn
            return conn

    def _forget(self, addr: str, conn: RemotingConnection) -> None:
        if self._conns.get(addr) is conn:
            del self._conns[addr]

    def sign(self, cmd: RemotingCommand) -> None:
        """Sign ``cmd`` with the client's credentials (header values become strings),
        its request code and the time bound into the signature (protocol/acl.py)."""
        cred = self.credentials
        if cred is None or not getattr(cred, "access_key", None):
            return
        cmd.ext_fields = sign_request(cmd.ext_fields or {}, cmd.body, cmd.code, cred.access_key,
                                      cred.secret_key, getattr(cred, "security_token", None))

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        conn = await self.get_connection(addr)
        self.sign(cmd)
        return await conn.invoke(cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.get_connection(addr)
        self.sign(cmd)
        await conn.invoke_oneway(cmd)
