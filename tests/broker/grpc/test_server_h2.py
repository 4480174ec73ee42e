"""GrpcServer on a real loopback socket, driven by a bare HTTP/2 client (h2): a connection
carries more calls than hypercorn's default keep-alive request cap, each answered with
headers, a message and trailers; a call past its grpc-timeout ends DEADLINE_EXCEEDED."""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
import trio

from broker.grpc.framing import MessageDecoder, encode_message
from broker.grpc.h2_server import H2GrpcConnection
from broker.grpc.server import Call, GrpcApp, GrpcServer, Method
from tests.waits import wait_until

CALLS = 1010  # more than the 1,000 requests hypercorn (the edge before) allowed a connection


async def echo(call: Call) -> None:
    await call.send(await call.recv_one())


async def slow(call: Call) -> None:
    await call.recv_one()
    await trio.sleep_forever()


class Client:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()

    async def flush(self) -> None:
        await self.stream.send_all(self.conn.data_to_send())

    async def call(self, method: str, payload: bytes,
                   timeout: str | None = None) -> tuple[list[Any], bytes, dict[bytes, bytes]]:
        sid = self.conn.get_next_available_stream_id()
        headers = [(":method", "POST"), (":scheme", "http"), (":path", f"/t.S/{method}"),
                   (":authority", "127.0.0.1"), ("content-type", "application/grpc"),
                   ("te", "trailers")]
        if timeout:
            headers.append(("grpc-timeout", timeout))
        self.conn.send_headers(sid, headers)
        self.conn.send_data(sid, encode_message(payload), end_stream=True)
        await self.flush()
        order: list[Any] = []
        body = b""
        trailers: dict[bytes, bytes] = {}
        while not trailers:
            data = await self.stream.receive_some(65536)
            assert data, "the server closed the connection"
            for event in self.conn.receive_data(data):
                if getattr(event, "stream_id", sid) != sid:
                    continue
                if isinstance(event, h2.events.ResponseReceived):
                    order.append("headers")
                elif isinstance(event, h2.events.DataReceived):
                    order.append("data")
                    body += event.data
                    self.conn.acknowledge_received_data(event.flow_controlled_length, sid)
                elif isinstance(event, h2.events.TrailersReceived):
                    order.append("trailers")
                    trailers = {bytes(k): bytes(v) for k, v in event.headers}
            await self.flush()
        return order, body, trailers


async def test_many_calls_on_one_connection_and_a_deadline() -> None:
    server = GrpcServer(GrpcApp({"/t.S/Echo": Method(echo), "/t.S/Slow": Method(slow)}),
                        "127.0.0.1", 0)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        client = Client(stream)
        await client.flush()
        with trio.fail_after(30):
            for i in range(CALLS):
                order, body, trailers = await client.call("Echo", b"m%d" % i)
                assert order[0] == "headers" and order[-1] == "trailers"
                assert MessageDecoder().feed(body) == [b"m%d" % i]
                assert trailers[b"grpc-status"] == b"0"
            order, body, trailers = await client.call("Slow", b"x", timeout="50m")
        assert order == ["headers", "trailers"] and body == b""
        assert trailers[b"grpc-status"] == b"4"
        assert server.app.calls == CALLS + 1
        # the call's task ends just after its trailers are written
        await wait_until(lambda: server.app.active == 0, 5, "every call's task ended")
        await stream.aclose()
        server.stop()


async def test_a_failing_connection_is_logged_and_the_server_serves_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    original = H2GrpcConnection._request
    failed: list[int] = []

    def first_request_fails(self: H2GrpcConnection, event: Any, nursery: trio.Nursery) -> None:
        if not failed:
            failed.append(event.stream_id)
            raise RuntimeError("a bug in the edge")
        original(self, event, nursery)

    monkeypatch.setattr(H2GrpcConnection, "_request", first_request_fails)
    server = GrpcServer(GrpcApp({"/t.S/Echo": Method(echo)}), "127.0.0.1", 0)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        with trio.fail_after(10):
            broken = Client(await trio.open_tcp_stream("127.0.0.1", port))
            await broken.flush()
            with pytest.raises((AssertionError, trio.BrokenResourceError)):  # closed or reset
                await broken.call("Echo", b"lost")
            client = Client(await trio.open_tcp_stream("127.0.0.1", port))
            await client.flush()
            order, body, trailers = await client.call("Echo", b"served")
        assert failed == [1]
        assert MessageDecoder().feed(body) == [b"served"] and trailers[b"grpc-status"] == b"0"
        await wait_until(lambda: server.connections == 1, 5, "the failed connection gone")
        await client.stream.aclose()
        server.stop()
