"""GrpcServer's TLS on a real loopback socket: TLS (ALPN h2) and plaintext on one permissive
port; an enforcing port closes a plaintext client unanswered; a disabled one offers no TLS;
a peer that sends nothing is dropped after the first-byte bound (MockClock)."""

from __future__ import annotations

import ssl

import trio
import trio.testing

from broker.grpc.server import GrpcApp, GrpcServer, Method
from protocol.trio.tls import DISABLED, ENFORCING, PERMISSIVE, ServerTls
from tests.broker.grpc.test_server_h2 import Client, echo
from tests.tls_certs import Certs, tls_certs_fixture  # noqa: F401 (the tls_certs fixture)


def server(certs: Certs, mode: str, **options: float) -> GrpcServer:
    tls = ServerTls(mode=mode, cert_path=certs.server_cert, key_path=certs.server_key)
    return GrpcServer(GrpcApp({"/t.S/Echo": Method(echo)}), "127.0.0.1", 0, tls=tls,
                      **options)


def client_context(certs: Certs) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=certs.ca)
    ctx.set_alpn_protocols(["h2"])
    return ctx


async def tls_stream(port: int, certs: Certs) -> trio.SSLStream[trio.SocketStream]:
    stream = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port), client_context(certs),
                            server_hostname="127.0.0.1")
    await stream.do_handshake()
    return stream


async def read_until_closed(stream: trio.abc.ReceiveStream) -> bytes:
    got = b""
    try:
        while data := await stream.receive_some(65536):
            got += data
    except trio.BrokenResourceError:  # reset: closed with our bytes unread
        pass
    return got


async def test_permissive_serves_tls_and_plaintext(tls_certs: Certs) -> None:
    srv = server(tls_certs, PERMISSIVE)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(srv.run)
        secure = await tls_stream(port, tls_certs)
        assert secure.selected_alpn_protocol() == "h2"
        _order, body, trailers = await Client(secure).call("Echo", b"over TLS")  # type: ignore[arg-type]
        assert trailers[b"grpc-status"] == b"0" and body.endswith(b"over TLS")
        plain = await trio.open_tcp_stream("127.0.0.1", port)
        _order, body, trailers = await Client(plain).call("Echo", b"in the clear")
        assert trailers[b"grpc-status"] == b"0" and body.endswith(b"in the clear")
        await secure.aclose()
        await plain.aclose()
        srv.stop()
    assert srv.refused == 0


async def test_enforcing_closes_plaintext(tls_certs: Certs) -> None:
    srv = server(tls_certs, ENFORCING)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(srv.run)
        plain = await trio.open_tcp_stream("127.0.0.1", port)
        await plain.send_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        assert await read_until_closed(plain) == b""  # no SETTINGS: not HTTP/2 served
        secure = await tls_stream(port, tls_certs)
        _order, _body, trailers = await Client(secure).call("Echo", b"x")  # type: ignore[arg-type]
        assert trailers[b"grpc-status"] == b"0"
        await secure.aclose()
        srv.stop()
    assert srv.refused == 1


async def test_disabled_offers_no_tls(tls_certs: Certs) -> None:
    srv = server(tls_certs, DISABLED)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(srv.run)
        stream = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port),
                                client_context(tls_certs), server_hostname="127.0.0.1")
        try:
            await stream.do_handshake()
            handshook = True
        except trio.BrokenResourceError:
            handshook = False
        assert not handshook
        srv.stop()


async def test_silent_peer_dropped(tls_certs: Certs,
                                   autojump_clock: trio.testing.MockClock) -> None:
    for mode in (PERMISSIVE, DISABLED):  # with TLS to sniff for, and without
        srv = server(tls_certs, mode, first_byte_timeout_s=10.0)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(srv.run)
            silent = await trio.open_tcp_stream("127.0.0.1", port)
            started = trio.current_time()
            assert await read_until_closed(silent) == b""
            assert 10.0 <= trio.current_time() - started < 60.0  # the bound, not idle's 120 s
            srv.stop()
        assert srv.refused == 1
