"""A burst of connections does not hold up a new client (issue row 16): queued
connections are accepted in batches, and a connection that sends nothing costs
an entry of the waiting room (or, without epoll, a waiting task), not a
RemotingConnection. Counted, not timed: scheduler rounds (a trio Instrument)
and the server's own counts. Each server test runs with the waiting room and
with the per-task fallback.

``bench/accept.py`` gives the figures (a new connection's first request
with 2,000 idle connections open)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio
import trio.abc
import trio.testing

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.trio import waiting_room
from protocol.trio.client import RemotingClient
from protocol.trio.limits import ConnectionLimits
from protocol.trio.server import RemotingServer
from protocol.trio.waiting_room import Silent, WaitingRoom
from tests.protocol.test_connection_limits import ECHO, start, table
from tests.waits import at_least, wait_until

QUEUED = 600


@pytest.fixture(params=["room", "tasks"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "tasks":
        monkeypatch.setattr(waiting_room, "AVAILABLE", False)
    elif not waiting_room.AVAILABLE:
        pytest.skip("no select.epoll here: the server waits with a task per connection")
    return str(request.param)


class Rounds(trio.abc.Instrument):
    """Counts the scheduler's rounds (one I/O poll each)."""

    def __init__(self) -> None:
        self.rounds = 0

    def before_io_wait(self, timeout: float) -> None:
        self.rounds += 1


@contextmanager
def silent_connections(port: int, n: int) -> Iterator[list[socket.socket]]:
    """``n`` connections from 127.0.0.2 .. 127.0.0.201 that send nothing; made
    with blocking calls, so while the caller's trio loop is held up they only
    queue in the server's listen backlog (the kernel completes the handshakes)."""
    socks = []
    try:
        for i in range(n):
            s = socket.socket()
            socks.append(s)
            s.bind((f"127.0.0.{2 + i % 200}", 0))
            s.connect(("127.0.0.1", port))
        yield socks
    finally:
        for s in socks:
            s.close()


def accepted(server: RemotingServer) -> int:
    return sum(server.per_host.values())


async def test_a_queued_burst_is_accepted_in_a_few_scheduler_rounds(mode: str) -> None:
    server = RemotingServer(table())
    rounds = Rounds()
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        with silent_connections(port, QUEUED):
            trio.lowlevel.add_instrument(rounds)
            try:
                await wait_until(at_least(lambda: accepted(server), QUEUED), 20,
                                 "the queued burst accepted", interval=0)
            finally:
                trio.lowlevel.remove_instrument(rounds)
            # one accept per round took QUEUED rounds (and a new client waited
            # for all of them); batches of ACCEPT_BATCH take a handful
            assert rounds.rounds <= 20, rounds.rounds
        nursery.cancel_scope.cancel()


async def test_silent_connections_build_nothing_and_a_new_client_is_served(mode: str) -> None:
    server = RemotingServer(table())
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        with silent_connections(port, QUEUED):
            async with RemotingClient() as rc:
                with trio.fail_after(20):
                    r = await rc.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO), 15)
                assert r.code == ResponseCode.SUCCESS
                await wait_until(at_least(lambda: accepted(server), QUEUED + 1), 20,
                                 "the silent connections and the client accepted", interval=0.01)
                # the client's connection is the only one served; the silent
                # ones are counted (per address) and wait for a first byte
                assert len(server.connections) == 1 and server.silent == QUEUED
                assert server.per_host["127.0.0.1"] == 1
                assert server.per_host["127.0.0.2"] == QUEUED // 200
        await wait_until(lambda: not (server.silent or server.per_host), 20,
                         "nothing left behind once their peers closed them", interval=0.01)
        nursery.cancel_scope.cancel()


async def test_silent_connections_are_closed_after_the_idle_timeout(mode: str) -> None:
    server = RemotingServer(table(), limits=ConnectionLimits(idle_timeout=0.3))
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        with silent_connections(port, 3) as socks:
            t0 = trio.current_time()
            await wait_until(at_least(lambda: server.closed_by_limits, 3), 10,
                             "the silent connections closed", interval=0.01)
            assert trio.current_time() - t0 >= 0.25
            for s in socks:
                s.settimeout(5)
                assert s.recv(10) == b""  # closed by the server
            assert server.silent == 0 and not server.per_host and not server.connections
        nursery.cancel_scope.cancel()


def test_the_waiting_room_hands_on_readable_sockets_and_expires_the_rest() -> None:
    if not waiting_room.AVAILABLE:
        pytest.skip("no select.epoll here")
    pairs = [socket.socketpair() for _ in range(4)]
    ready: list[str] = []
    expired: list[tuple[str, float]] = []

    async def main() -> None:
        room = WaitingRoom(timeout=10.0)
        for i, (a, _b) in enumerate(pairs[:3]):
            room.add(a, f"p{i}", "h", trio.current_time())
        def on_expired(e: Silent) -> None:
            expired.append((e.peer, trio.current_time()))
            e.sock.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(room.run, lambda e: ready.append(e.peer), on_expired)
            pairs[1][1].send(b"x")  # p1 speaks
            await trio.sleep(5)
            room.add(pairs[3][0], "p3", "h", trio.current_time())
            assert ready == ["p1"] and expired == [] and len(room) == 3
            await trio.sleep(6)  # p0 and p2 expire at 10 s; p3 at 15 s
            assert [p for p, _ in expired] == ["p0", "p2"]
            assert all(10.0 <= t < 10.5 for _, t in expired)
            pairs[3][1].close()  # EOF is readable too
            await trio.sleep(1)
            assert ready == ["p1", "p3"] and len(room) == 0
            nursery.cancel_scope.cancel()

    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.01))
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def test_the_waiting_room_closes_what_it_holds_when_stopped() -> None:
    if not waiting_room.AVAILABLE:
        pytest.skip("no select.epoll here")
    a, b = socket.socketpair()

    async def main() -> None:
        room = WaitingRoom(timeout=10.0)
        room.add(a, "p", "h", trio.current_time())
        with trio.move_on_after(1):
            await room.run(lambda e: None, lambda e: None)
        assert len(room) == 0 and a.fileno() == -1
        c, d = socket.socketpair()
        room.add(c, "late", "h", trio.current_time())  # after run(): closed at once
        assert c.fileno() == -1 and len(room) == 0
        d.close()

    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.01))
    finally:
        a.close()
        b.close()

