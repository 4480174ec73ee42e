"""bench/chaos/proxy.py: bytes pass, a blackhole holds them (and new
connections) until it heals, drop closes every connection."""

from __future__ import annotations

import trio
import trio.testing

from bench.chaos.proxy import Mode, TcpProxy

TIMEOUT = 10


async def echo_server(nursery: trio.Nursery) -> int:
    async def echo(stream: trio.SocketStream) -> None:
        async with stream:
            try:
                async for data in stream:
                    await stream.send_all(data)
            except trio.BrokenResourceError:
                pass

    listeners = await nursery.start(trio.serve_tcp, echo, 0)
    port: int = listeners[0].socket.getsockname()[1]
    return port


async def proxied(nursery: trio.Nursery) -> TcpProxy:
    port = await echo_server(nursery)
    proxy = TcpProxy("test", "127.0.0.2", 0, "127.0.0.1", port)
    await nursery.start(proxy.run)
    return proxy


async def roundtrip(stream: trio.SocketStream, data: bytes) -> bytes:
    await stream.send_all(data)
    got = b""
    while len(got) < len(data):
        chunk = await stream.receive_some()
        if not chunk:
            break
        got += chunk
    return got


async def test_pass_and_blackhole_then_heal() -> None:
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            proxy = await proxied(nursery)
            a = await trio.open_tcp_stream("127.0.0.2", proxy.listen_port)
            assert await roundtrip(a, b"hello") == b"hello"
            proxy.set_mode(Mode.BLACKHOLE)
            await a.send_all(b"held")
            b = await trio.open_tcp_stream("127.0.0.2", proxy.listen_port)  # accepted, held
            await b.send_all(b"new")
            # everything is parked: both connections wait at the gate, nothing echoed
            await trio.testing.wait_all_tasks_blocked()
            with trio.move_on_after(0) as cs:
                await a.receive_some()
            assert cs.cancelled_caught
            proxy.set_mode(Mode.PASS)
            got = b""
            while len(got) < 4:
                got += await a.receive_some()
            assert got == b"held"
            got = b""
            while len(got) < 3:
                got += await b.receive_some()
            assert got == b"new"
            assert proxy.accepted == 2
            await a.aclose()
            await b.aclose()
            nursery.cancel_scope.cancel()


async def test_drop_closes_connections_and_refuses_new_ones() -> None:
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            proxy = await proxied(nursery)
            a = await trio.open_tcp_stream("127.0.0.2", proxy.listen_port)
            assert await roundtrip(a, b"x") == b"x"
            proxy.set_mode(Mode.DROP)
            assert await a.receive_some() == b""  # closed by the proxy
            b = await trio.open_tcp_stream("127.0.0.2", proxy.listen_port)
            assert await b.receive_some() == b""  # closed at once
            assert proxy.connections == 0
            proxy.set_mode(Mode.PASS)
            c = await trio.open_tcp_stream("127.0.0.2", proxy.listen_port)
            assert await roundtrip(c, b"again") == b"again"
            for s in (a, b, c):
                await s.aclose()
            nursery.cancel_scope.cancel()


async def test_target_down_closes_the_client_connection() -> None:
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            with trio.socket.socket() as s:  # a port nobody listens on
                await s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            proxy = TcpProxy("test", "127.0.0.2", 0, "127.0.0.1", port)
            await nursery.start(proxy.run)
            a = await trio.open_tcp_stream("127.0.0.2", proxy.listen_port)
            assert await a.receive_some() == b""
            await a.aclose()
            nursery.cancel_scope.cancel()
