"""HAService: the trio edge of master/slave replication (RocketMQ's HAService).

The cores are pure (broker/store/ha/): ``HAConnection`` decides what a master
sends one slave, ``HAClient`` applies what a slave receives, ``transfer.py``
frames the bytes. This module owns the sockets and the time:

- Master: a listener on ``haListenPort``; per slave, a reader task (reports
  in, ``HAConnection.on_report``; every report advances the SYNC_MASTER
  waiters) and a writer task (``next_transfer`` out, woken by new commit-log
  data or its heartbeat time). A slave silent for ``haHousekeepingInterval``
  is closed.
- Slave: one task connecting to the master's HA address (``haMasterAddress``
  or the name server's answer), reporting its max offset at connect, after
  every append and every ``haSendHeartbeatInterval``, and appending what
  arrives. Any failure closes the connection, is logged, and the slave
  reconnects after a back-off, resuming from its own max offset.
- SYNC_MASTER: ``wait_slave(next_offset)`` returns a waiter (one
  ``OffsetWaiters`` for every send, released by the best slave's
  acknowledgement), or one finished SLAVE_NOT_AVAILABLE when no slave is
  within ``haSlaveFallbehindMax``.

Nothing here runs on a send's path but ``wait_slave`` and ``notify_new_data``:
a slow or frozen slave never slows sends to an ASYNC_MASTER.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
import trio

from broker.config import BrokerConfig
from broker.store import DefaultMessageStore
from broker.store.ha.ha_client import HAClient
from broker.store.ha.ha_connection import HAConnection, is_slave_ok, push_to_slave_max_offset
from broker.store.ha.transfer import (
    HAProtocolError,
    HelloCheck,
    HelloDecoder,
    NonceCache,
    ReportDecoder,
    TransferDecoder,
    check_hello,
    encode_hello,
    encode_report,
    encode_transfer,
    make_hello,
)
from broker.store.offset_waiters import Waiter
from broker.store.status import PutMessageStatus
from broker.waiting_sends import WaitingSends
from protocol.trio.client import split_addr
from protocol.trio.daemon import first_leaf
from protocol.trio.errors import RemotingConnectError
from protocol.trio.server import peer_name
from protocol.trio.service import Guard, describe
from protocol.trio.tls import accept, connect

if TYPE_CHECKING:
    from broker.acl.plain import AclConfig

RECEIVE_CHUNK = 256 * 1024
HELLO_TIMEOUT = 10.0  # s a new slave connection has to send its hello
SEND_COALESCE = 256 * 1024  # bytes of transfers gathered into one send
RECONNECT_BACKOFF = 1.0
# what a network or a peer can do to an HA connection: logged without a traceback
EXPECTED_FAILURES = (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                     trio.TooSlowError, HAProtocolError, ValueError)


class HAService:
    def __init__(self, config: BrokerConfig, store: DefaultMessageStore) -> None:
        self.config = config
        self.store = store
        self.log = structlog.get_logger("broker.ha").bind(broker=config.broker_name)
        self.connections: set[HAConnection] = set()
        self.sends = WaitingSends(PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
                                  config.sync_flush_timeout / 1000,
                                  Guard(self.log, "slave acks"), "flush slave timeout")
        self.waiters = self.sends.waiters
        self.heartbeat = config.ha_send_heartbeat_interval / 1000
        self.housekeeping = config.ha_housekeeping_interval / 1000
        self._data = trio.Event()
        self._master_changed = trio.Event()
        # TLS on the HA link: the master's listener as the remoting port's, the
        # slave's connection with tls.enable
        self._tls = config.server_tls()
        self._tls_server = self._tls.context()
        client_tls = config.client_tls()
        self._tls_client = client_tls.context() if client_tls is not None else None
        # a slave's master HA address: haMasterAddress, else the name server's answer
        self.master_ha_addr: str | None = config.ha_master_address or None
        self.client: HAClient | None = None  # a slave's current connection
        self._appended = trio.Event()  # set by a slave's reader after an append
        self.port: int | None = None
        # a master with aclEnable: the accounts in force (set by the controller); a
        # slave's hello must then be signed by an admin account
        self.acl_config: Callable[[], AclConfig | None] | None = None
        self._nonces = NonceCache()
        self._refusals = Guard(self.log, "HA accept")

    # ---- used by the send path and the controller -------------------------------------

    def notify_new_data(self, *_: Any) -> None:
        """The commit log grew: wake the writers (an append listener)."""
        ev, self._data = self._data, trio.Event()
        ev.set()

    def wait_slave(self, next_offset: int) -> Waiter:
        """A SYNC_MASTER send ending at ``next_offset``: done once a slave
        acknowledged it, FLUSH_SLAVE_TIMEOUT after syncFlushTimeout, or at once
        SLAVE_NOT_AVAILABLE when no slave is close enough."""
        if not is_slave_ok(self.connections, next_offset, self.config.ha_slave_fallbehind_max):
            return Waiter.finished(PutMessageStatus.SLAVE_NOT_AVAILABLE, next_offset)
        return self.sends.add(next_offset)

    def set_master_ha_addr(self, addr: str | None) -> None:
        """The name server told a slave its master's HA address."""
        if self.config.ha_master_address or not addr or addr == self.master_ha_addr:
            return
        self.log.info("master HA address", addr=addr)
        self.master_ha_addr = addr
        ev, self._master_changed = self._master_changed, trio.Event()
        ev.set()

    def status(self) -> dict[str, Any]:
        """Runtime figures for brokerStatus."""
        master_max = self.store.get_max_phy_offset()
        out: dict[str, Any] = {"maxOffset": master_max}
        if self.config.is_slave:
            out["masterHaAddress"] = self.master_ha_addr
            out["masterOffset"] = self.client.master_offset if self.client else None
            out["lag"] = (max(0, self.client.master_offset - master_max)
                          if self.client else None)
        else:
            out["slaves"] = [{"ackedOffset": c.acked_offset, "behind": c.lag(master_max)}
                             for c in self.connections]
            out["waitingSends"] = len(self.waiters)
        return out

    # ---- master ----------------------------------------------------------------------

    async def run_master(self, port: int | None = None,
                         task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on haListenPort (or ``port``) until cancelled; reports the bound port."""
        host = "127.0.0.1" if self.config.broker_ip1 == "127.0.0.1" else "0.0.0.0"
        listeners = await trio.open_tcp_listeners(
            self.config.ha_port if port is None else port, host=host)
        self.port = listeners[0].socket.getsockname()[1]
        self.log.info("HA listening", port=self.port)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.sends.run_expiry)
                await nursery.start(trio.serve_listeners, self._serve_slave, listeners)
                task_status.started(self.port)
        finally:
            self.waiters.fail_all(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    async def _serve_slave(self, socket_stream: trio.SocketStream) -> None:
        peer = peer_name(socket_stream)
        stream = await accept(socket_stream, self._tls, self._tls_server, peer=peer,
                              first_byte_timeout=self.housekeeping,
                              handshake_timeout=min(10.0, self.housekeeping),
                              max_frame_size=0, answer_plain=False)
        if stream is None:
            return
        try:
            rest = await self._receive_hello(stream, peer)
        except Exception as exc:
            # anyone reaching the port can repeat this: rate-limited per host and reason
            reason = describe(first_leaf(exc))
            self._refusals.note("HA connection refused", (peer.rpartition(":")[0], reason),
                                slave=peer, error=reason)
            with trio.move_on_after(1):
                await stream.aclose()
            return
        conn = HAConnection(self.store, self.config.ha_transfer_batch_size,
                            self.heartbeat, self.housekeeping)
        conn.connected(trio.current_time())
        self.connections.add(conn)
        self.log.info("slave connected", slave=peer)
        try:
            async with stream, trio.open_nursery() as nursery:
                nursery.start_soon(self._read_reports, conn, stream, nursery.cancel_scope,
                                   rest)
                nursery.start_soon(self._write_transfers, conn, stream)
        except Exception as exc:
            self.log.warning("slave connection closed", slave=peer,
                             error=describe(first_leaf(exc)))
        finally:
            self.connections.discard(conn)
            self.log.info("slave disconnected", slave=peer, acked_offset=conn.acked_offset)

    def _admin_secret(self) -> Callable[[str], str | None] | None:
        """With aclEnable: an admin account's secret by access key (None: no such admin)."""
        if self.acl_config is None:
            return None
        acl = self.acl_config()

        def secret(key: str) -> str | None:
            account = acl.accounts.get(key) if acl is not None else None
            return account.secret_key if account is not None and account.admin else None
        return secret

    async def _receive_hello(self, stream: trio.abc.Stream, peer: str) -> bytes:
        """The slave's hello, within HELLO_TIMEOUT; HAProtocolError when refused.
        Returns the bytes that followed it (the first reports)."""
        decoder = HelloDecoder()
        with trio.move_on_after(min(HELLO_TIMEOUT, self.housekeeping)):
            while True:
                data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    raise HAProtocolError("closed before its hello")
                got = decoder.feed(data)
                if got is None:
                    continue
                hello, rest = got
                now_ms = int(time.time() * 1000)
                check = HelloCheck(self.config.broker_name, self.config.broker_cluster_name)
                refused = check_hello(hello, check, now_ms, self._admin_secret())
                if refused is None and not self._nonces.accept(hello.fields["nonce"], now_ms):
                    refused = "hello replayed (its nonce was seen already)"
                if refused is not None:
                    raise HAProtocolError(refused)
                self.log.info("slave hello accepted", slave=peer,
                              access_key=hello.access_key)
                return rest
        raise HAProtocolError(f"no hello within {min(HELLO_TIMEOUT, self.housekeeping):.0f}s")

    async def _read_reports(self, conn: HAConnection, stream: trio.abc.Stream,
                            scope: trio.CancelScope, first: bytes = b"") -> None:
        decoder = ReportDecoder()
        pending = first
        data: bytes | bytearray
        while True:
            with trio.move_on_after(self.housekeeping):
                if pending:
                    data, pending = pending, b""
                else:
                    data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    scope.cancel()
                    return
                now = trio.current_time()
                for offset in decoder.feed(data):
                    conn.on_report(offset, now)
                self.waiters.advance(push_to_slave_max_offset(self.connections))
                self.notify_new_data()  # the first report tells the writer where to start
                continue
            if conn.idle_too_long(trio.current_time()):
                raise TimeoutError(f"slave silent for {self.housekeeping:.0f}s")

    async def _write_transfers(self, conn: HAConnection, stream: trio.abc.Stream) -> None:
        while True:
            data_event = self._data
            now = trio.current_time()
            frames: list[bytes] = []
            size = 0
            while size < SEND_COALESCE:
                t = conn.next_transfer(now)
                if t is None:
                    break
                frame = encode_transfer(*t)
                frames.append(frame)
                size += len(frame)
                if len(frame) == 12:  # a heartbeat: nothing more to send now
                    break
            if frames:
                await stream.send_all(b"".join(frames))
                continue
            at = conn.next_heartbeat_at()
            with trio.move_on_at(at if at is not None else now + self.heartbeat):
                await data_event.wait()

    # ---- slave -----------------------------------------------------------------------

    async def run_slave(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Follow the master until cancelled: connect, stream, reconnect."""
        task_status.started()
        guard = Guard(self.log, "replicate from master")
        while True:
            addr = self.master_ha_addr
            if addr is None:
                with trio.move_on_after(RECONNECT_BACKOFF):
                    await self._master_changed.wait()
                continue
            await guard.run(self._follow_logged, addr)
            with trio.move_on_after(RECONNECT_BACKOFF):
                await self._master_changed.wait()

    async def _follow_logged(self, addr: str) -> None:
        """Follow once; the network's own failures (the master gone or silent,
        refused frames) are one warning line, anything else goes to the guard."""
        try:
            await self._follow(addr)
        except Exception as exc:
            leaf = first_leaf(exc)
            if not isinstance(leaf, EXPECTED_FAILURES):
                raise
            self.log.warning("replication from the master stopped, reconnecting", master=addr,
                             error=describe(leaf), offset=self.store.get_max_phy_offset())

    async def _follow(self, addr: str) -> None:
        host, port = split_addr(addr)
        with trio.fail_after(3):
            sock = await trio.open_tcp_stream(host, port)
        stream: trio.abc.Stream = sock
        if self._tls_client is not None:
            try:
                stream = await connect(sock, self._tls_client, addr, 3)
            except RemotingConnectError as exc:
                raise ConnectionError(str(exc)) from exc
        cred = self.config.broker_credentials()
        hello = make_hello(self.config.broker_name, self.config.broker_cluster_name,
                           int(time.time() * 1000), secrets.token_hex(12),
                           cred.access_key if cred else None, cred.secret_key if cred else None)
        with trio.fail_after(3):
            await stream.send_all(encode_hello(hello))
        client = self.client = HAClient(self.store, self.heartbeat, self.housekeeping,
                                        self.config.maped_file_size_commit_log)
        client.connected(trio.current_time())
        self._appended = trio.Event()
        self.log.info("connected to master", master=addr, offset=self.store.get_max_phy_offset())
        try:
            async with stream, trio.open_nursery() as nursery:
                nursery.start_soon(self._read_transfers, client, stream, nursery.cancel_scope)
                nursery.start_soon(self._report_loop, client, stream)
        finally:
            self.client = None

    async def _read_transfers(self, client: HAClient, stream: trio.abc.Stream,
                              scope: trio.CancelScope) -> None:
        decoder = TransferDecoder(max(self.config.ha_transfer_batch_size * 2, 4 << 20))
        while True:
            with trio.move_on_after(self.housekeeping):
                data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    raise ConnectionError("the master closed the HA connection")
                now = trio.current_time()
                for offset, body in decoder.feed(data):
                    client.on_transfer(offset, body, now)
                self._appended.set()  # the report loop tells the master at once
                continue
            if client.idle_too_long(trio.current_time()):
                scope.cancel()
                raise TimeoutError(f"master silent for {self.housekeeping:.0f}s")

    async def _report_loop(self, client: HAClient, stream: trio.abc.Stream) -> None:
        """The only sender on a slave's connection: reports at connect, after
        appends, and every heartbeat interval."""
        while True:
            appended = self._appended
            report = client.report_due(trio.current_time())
            if report is not None:
                await stream.send_all(encode_report(report))
            if appended.is_set():
                self._appended = trio.Event()
                continue
            at = client.next_report_at()
            with trio.move_on_at(at if at is not None else trio.current_time() + self.heartbeat):
                await appended.wait()

