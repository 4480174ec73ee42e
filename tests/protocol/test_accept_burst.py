"""A burst of connections does not hold up a new client (issue row 16): queued
connections are accepted in batches, and a connection that sends nothing costs
a waiting task, not a RemotingConnection. Counted, not timed: scheduler rounds
(a trio Instrument) and the server's own counts.

``deploy/bench_accept.py`` gives the figures (a new connection's first request
with 2,000 idle connections open)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import trio
import trio.abc

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.client import RemotingClient
from protocol.trio.server import RemotingServer
from tests.protocol.test_connection_limits import ECHO, start, table

QUEUED = 600


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


async def test_a_queued_burst_is_accepted_in_a_few_scheduler_rounds() -> None:
    server = RemotingServer(table())
    rounds = Rounds()
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        with silent_connections(port, QUEUED):
            trio.lowlevel.add_instrument(rounds)
            try:
                with trio.fail_after(20):
                    while accepted(server) < QUEUED:
                        await trio.sleep(0)
            finally:
                trio.lowlevel.remove_instrument(rounds)
            # one accept per round took QUEUED rounds (and a new client waited
            # for all of them); batches of ACCEPT_BATCH take a handful
            assert rounds.rounds <= 20, rounds.rounds
        nursery.cancel_scope.cancel()


async def test_silent_connections_build_nothing_and_a_new_client_is_served() -> None:
    server = RemotingServer(table())
    async with trio.open_nursery() as nursery:
        port = await start(nursery, server)
        with silent_connections(port, QUEUED):
            async with RemotingClient() as rc:
                with trio.fail_after(20):
                    r = await rc.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO), 15)
                assert r.code == ResponseCode.SUCCESS
                with trio.fail_after(20):
                    while accepted(server) < QUEUED + 1:
                        await trio.sleep(0.01)
                # the client's connection is the only one served; the silent
                # ones are counted (per address) and wait for a first byte
                assert len(server.connections) == 1 and server.silent == QUEUED
                assert server.per_host["127.0.0.1"] == 1
                assert server.per_host["127.0.0.2"] == QUEUED // 200
        with trio.fail_after(20):  # closed by their peers: nothing left behind
            while server.silent or server.per_host:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
