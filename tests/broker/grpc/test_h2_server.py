"""The HTTP/2 edge (broker/grpc/h2_server.py) driven in process over trio's in-memory
streams by a bare h2 client: one write per unary answer, its limits (streams, header list),
flow control both ways, a client's reset, the idle timeout on trio's MockClock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import trio
import trio.testing

from broker.grpc.framing import MessageDecoder, encode_message
from broker.grpc.h2_server import H2GrpcConnection
from broker.grpc.server import Call, GrpcApp, Method

PATH = "/t.S/"
release = trio.Event()
started: list[str] = []
cancelled: list[str] = []


async def echo(call: Call) -> None:
    await call.send(await call.recv_one())


async def big(call: Call) -> None:
    await call.recv_one()
    await call.send(b"b" * 5000)


async def hold_then_read(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A bare ASGI app that reads nothing of its request until ``release``."""
    started.append(scope["path"])
    await release.wait()
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body", False):
            break
    await send({"type": "http.response.start", "status": 200, "trailers": True,
                "headers": [(b"content-type", b"application/grpc")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
    await send({"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")]})


async def forever(call: Call) -> None:
    started.append(call.method)
    try:
        await trio.sleep_forever()
    finally:
        cancelled.append(call.method)


def app() -> GrpcApp:
    return GrpcApp({PATH + "Echo": Method(echo), PATH + "Big": Method(big),
                    PATH + "Forever": Method(forever, waits=True)})


class Peer:
    """The client end: an h2 client connection over an in-memory stream."""

    def __init__(self, stream: trio.abc.HalfCloseableStream, window: int | None = None) -> None:
        self.stream = stream
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        if window is not None:
            self.conn.local_settings = h2.settings.Settings(client=True, initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.conn.initiate_connection()
        self.events: list[Any] = []
        self.closed = False

    async def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            await self.stream.send_all(data)

    def open(self, method: str, body: bytes | None = None, *,
             extra: list[tuple[str, str]] | None = None) -> int:
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                                     (":path", PATH + method), (":authority", "x"),
                                     ("content-type", "application/grpc"), ("te", "trailers"),
                                     *(extra or [])])
        if body is not None:
            for at in range(0, len(body), 16384):
                self.conn.send_data(sid, body[at:at + 16384], end_stream=at + 16384 >= len(body))
        return sid

    async def pump(self, until: Callable[[], bool], ack: bool = True) -> None:
        """Read and answer (settings, pings, window updates) until ``until()`` or EOF."""
        while not until():
            data = await self.stream.receive_some(65536)
            if not data:
                self.closed = True
                return
            for event in self.conn.receive_data(data):
                self.events.append(event)
                if ack and isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                        event.stream_id)
            await self.flush()

    def of(self, sid: int, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind) and
                getattr(e, "stream_id", None) == sid]

    def ended(self, sid: int) -> bool:
        return bool(self.of(sid, h2.events.StreamEnded) or self.of(sid, h2.events.StreamReset))

    def body(self, sid: int) -> list[bytes]:
        decoder = MessageDecoder()
        return decoder.feed(b"".join(e.data for e in self.of(sid, h2.events.DataReceived)))

    def status(self, sid: int) -> bytes:
        (trailers,) = self.of(sid, h2.events.TrailersReceived)
        return dict(trailers.headers)[b"grpc-status"]


class CountingStream(trio.abc.HalfCloseableStream):
    """The server's end, counting its writes."""

    def __init__(self, inner: trio.abc.HalfCloseableStream) -> None:
        self.inner = inner
        self.writes = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes += 1
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def served(window: int | None = None, idle_s: float = 120.0, max_streams: int = 100,
                 asgi: Any = None, connection_window: int = 1 << 20,
                 ) -> AsyncIterator[tuple[Peer, CountingStream]]:
    client_end, server_end = trio.testing.memory_stream_pair()
    counted = CountingStream(server_end)
    conn = H2GrpcConnection(asgi or app(), counted, max_streams=max_streams,
                            max_header_list_size=4096, stream_window=65535,
                            connection_window=connection_window, idle_timeout_s=idle_s,
                            client=("127.0.0.1", 5555), server=("127.0.0.1", 1))
    peer = Peer(client_end, window)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        await peer.flush()
        yield peer, counted
        nursery.cancel_scope.cancel()


async def test_unary_answer_is_one_write_headers_message_trailers() -> None:
    async with served() as (peer, server):
        await peer.pump(lambda: any(isinstance(e, h2.events.RemoteSettingsChanged)
                                    for e in peer.events))
        await trio.testing.wait_all_tasks_blocked()
        before = server.writes
        sid = peer.open("Echo", encode_message(b"hello"))
        await peer.flush()
        with trio.fail_after(5):
            await peer.pump(lambda: peer.ended(sid))
        assert server.writes - before == 1
        kinds = [type(e).__name__ for e in peer.events if getattr(e, "stream_id", 0) == sid]
        assert kinds == ["ResponseReceived", "DataReceived", "TrailersReceived", "StreamEnded"]
        assert peer.body(sid) == [b"hello"]
        assert peer.status(sid) == b"0"


async def test_calls_past_max_streams_end_the_connection_with_goaway() -> None:
    async with served(max_streams=3) as (peer, _server):
        for _ in range(4):  # the client has not read the server's limit yet: it sends all
            peer.open("Forever")
        await peer.flush()
        with trio.fail_after(5):
            await peer.pump(lambda: False)
        (goaway,) = [e for e in peer.events if isinstance(e, h2.events.ConnectionTerminated)]
        assert goaway.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR
        assert peer.closed


async def test_oversized_header_list_ends_the_connection() -> None:
    started.clear()
    async with served() as (peer, _server):
        peer.open("Forever", encode_message(b"x"), extra=[("x-big", "v" * 5000)])
        await peer.flush()
        with trio.fail_after(5):
            await peer.pump(lambda: False)
        assert any(isinstance(e, h2.events.ConnectionTerminated) for e in peer.events)
        assert peer.closed and started == []  # nothing was handled
        assert not any(isinstance(e, h2.events.ResponseReceived) for e in peer.events)


async def test_answer_larger_than_the_clients_window_waits_for_its_updates() -> None:
    async with served(window=1000) as (peer, _server):
        sid = peer.open("Big", encode_message(b"?"))
        await peer.flush()
        with trio.fail_after(5):
            await peer.pump(lambda: sum(len(e.data) for e in peer.of(sid, h2.events.DataReceived))
                            >= 1000, ack=False)
            await trio.testing.wait_all_tasks_blocked()
            got = sum(len(e.data) for e in peer.of(sid, h2.events.DataReceived))
            assert got == 1000 and not peer.ended(sid)  # the window is spent: the server waits
            for e in peer.of(sid, h2.events.DataReceived):
                peer.conn.acknowledge_received_data(e.flow_controlled_length, sid)
            await peer.flush()
            await peer.pump(lambda: peer.ended(sid))
        assert peer.body(sid) == [b"b" * 5000]
        assert peer.status(sid) == b"0"


async def test_request_data_is_acknowledged_only_as_the_app_reads_it() -> None:
    global release
    release = trio.Event()
    started.clear()
    async with served(asgi=hold_then_read) as (peer, _server):
        sid = peer.open("Hold", encode_message(b"r" * 40000))
        await peer.flush()
        with trio.fail_after(5):
            await peer.pump(lambda: bool(started))
            await trio.testing.wait_all_tasks_blocked()
            # the app has read nothing: none of the stream's window is given back (h2 gives
            # it back once over half of it is read)
            assert peer.conn.local_flow_control_window(sid) == 65535 - 40005
            release.set()
            await peer.pump(lambda: peer.ended(sid))
        assert peer.body(sid) == [b"r" * 40000]
        assert any(isinstance(e, h2.events.WindowUpdated) and e.stream_id == sid
                   for e in peer.events)


async def test_unread_data_of_a_reset_call_gives_its_connection_window_back() -> None:
    global release
    release = trio.Event()
    started.clear()
    async with served(asgi=hold_then_read, connection_window=65535) as (peer, _server):
        sid = peer.open("Hold", encode_message(b"r" * 40000))
        await peer.flush()
        with trio.fail_after(5):
            await peer.pump(lambda: bool(started))
            await trio.testing.wait_all_tasks_blocked()
            assert peer.conn.outbound_flow_control_window == 65535 - 40005
            peer.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
            await peer.flush()
            await peer.pump(lambda: peer.conn.outbound_flow_control_window == 65535)


async def test_client_reset_cancels_a_waiting_handler() -> None:
    started.clear()
    cancelled.clear()
    async with served() as (peer, _server):
        sid = peer.open("Forever", encode_message(b"x"))
        await peer.flush()
        with trio.fail_after(5):
            await peer.pump(lambda: bool(started))
            peer.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
            await peer.flush()
            await trio.testing.wait_all_tasks_blocked()
        assert cancelled == [PATH + "Forever"]


async def test_idle_connection_closed_after_idle_timeout(
        autojump_clock: trio.testing.MockClock) -> None:
    async with served(idle_s=30.0) as (peer, _server):
        sid = peer.open("Echo", encode_message(b"x"))
        await peer.flush()
        await peer.pump(lambda: peer.ended(sid))
        answered = trio.current_time()
        await peer.pump(lambda: False)  # until the server closes
        assert peer.closed
        assert trio.current_time() - answered >= 30.0
        assert any(isinstance(e, h2.events.ConnectionTerminated) for e in peer.events)
