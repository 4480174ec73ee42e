"""What a server connection queues for a peer that does not read (issue 48):
requests it starts are dropped past the write high-water mark, answers past
``owed_cap`` close the connection."""

from __future__ import annotations

import socket

import trio
import trio.testing

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import encode_frame
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.limits import ConnectionLimits
from protocol.trio.server import RemotingServer
from tests.waits import at_least, wait_until

KiB = 1024
HELLO, DEFER = 1, 2
NOTICE = 40  # a broker-initiated oneway (NOTIFY_CONSUMER_IDS_CHANGED's code)
BODY = 16 * KiB


def request(code: int, opaque: int) -> bytes:
    return encode_frame(RemotingCommand(code=code, opaque=opaque).encode())


def silent_peer(port: int) -> socket.socket:
    """A peer with a small receive buffer that never reads."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * KiB)
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    return s


async def one_connection(server: RemotingServer) -> RemotingConnection:
    await wait_until(lambda: server.connections, 10, "a connection", interval=0.01)
    (conn,) = server.connections
    return conn


async def test_requests_to_a_peer_that_reads_nothing_are_dropped_past_the_high_water_mark(
) -> None:
    limits = ConnectionLimits(write_high_water=256 * KiB, write_low_water=64 * KiB)
    handlers = HandlerTable()
    handlers.register(HELLO, lambda conn, cmd: cmd.response(ResponseCode.SUCCESS))
    server = RemotingServer(handlers, limits=limits)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        s = silent_peer(port)
        s.send(request(HELLO, 1))
        conn = await one_connection(server)
        n = 1000  # 16 MiB of notices, none read
        for i in range(n):
            conn.send_response(RemotingCommand.request(NOTICE, {"i": str(i)}, b"n" * BODY,
                                                       oneway=True))
        await trio.testing.wait_all_tasks_blocked(0.2)
        # what is queued stays under the mark (plus the one frame that crossed it)
        assert 0 < conn.owed <= limits.write_high_water + BODY + KiB
        assert 0 < conn.dropped_requests < n and conn.dropped_bytes >= conn.dropped_requests * BODY
        assert not conn.takes_requests
        cmd = RemotingCommand.request(NOTICE, {}, b"n" * BODY, oneway=True)
        assert conn.offer(cmd) is False
        assert not conn.closed  # a peer slow to read its notices is not cut off for it
        # the peer reads: room again
        s.setblocking(True)
        s.settimeout(10)
        with trio.fail_after(10):
            while conn.owed:
                await trio.to_thread.run_sync(s.recv, 1 << 20)
        assert conn.takes_requests
        assert conn.offer(RemotingCommand.request(NOTICE, {}, b"n" * BODY, oneway=True))
        s.close()
        nursery.cancel_scope.cancel()


async def test_a_peer_that_never_reads_its_answers_is_closed_past_the_cap() -> None:
    # cap: 4 x the high-water mark = 256 KiB
    limits = ConnectionLimits(write_high_water=64 * KiB, write_low_water=16 * KiB, max_owed=0)
    held: list[tuple[RemotingConnection, RemotingCommand]] = []
    handlers = HandlerTable()

    def defer(conn: RemotingConnection, cmd: RemotingCommand) -> None:
        held.append((conn, cmd))  # answered later, like a held pull

    handlers.register(DEFER, defer)
    server = RemotingServer(handlers, limits=limits)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        s = silent_peer(port)
        s.send(b"".join(request(DEFER, i) for i in range(100)))
        await wait_until(at_least(lambda: len(held), 100), 10, "100 requests held",
                         interval=0.01)
        conn = held[0][0]
        for c, cmd in held:  # 100 x 16 KiB of answers the peer never reads
            c.send_response(cmd.response(ResponseCode.SUCCESS, body=b"a" * BODY))
        assert conn.closed
        assert "does not read its answers" in conn.close_reason
        await wait_until(lambda: not server.connections, 10, "no connection left", interval=0.01)
        s.close()
        nursery.cancel_scope.cancel()


def test_owed_cap_is_never_under_four_high_water_marks() -> None:
    assert ConnectionLimits().owed_cap == 64 * 1024 * KiB
    big = ConnectionLimits(write_high_water=32 * 1024 * KiB, write_low_water=KiB)
    assert big.owed_cap == 128 * 1024 * KiB and big.problem() is None
