"""RemotingConnection.after_answers: work a handler leaves until its answer is
written (the broker's indexing of a send). It must run after the answer is on
the socket, before the connection handles the next frame of the same chunk,
and before the reader lets any other task run; a failure is logged and the
connection goes on."""

from __future__ import annotations

import socket

import trio

from protocol.codecs.msgpack_codec import MSGPACK
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.server import RemotingServer

DEFER, ASYNC_DEFER, FAIL = 11, 12, 13


def frame(code: int, opaque: int) -> bytes:
    return encode_frame(MSGPACK.encode(RemotingCommand(code, opaque)))


class Peer:
    """A plain client socket on the test's side."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.decoder = FrameDecoder(1 << 20)

    def ready_bytes(self) -> int:
        try:
            return len(self.sock.recv(1 << 16, socket.MSG_PEEK))
        except BlockingIOError:
            return 0

    async def answers(self, n: int) -> list[RemotingCommand]:
        got: list[RemotingCommand] = []
        with trio.fail_after(10):
            while len(got) < n:
                await trio.lowlevel.wait_readable(self.sock)
                got += [MSGPACK.decode(f) for f in self.decoder.feed(self.sock.recv(1 << 16))]
        return got


async def test_work_runs_after_the_answer_is_written_and_before_the_next_frame() -> None:
    events: list[str] = []
    peer: list[Peer] = []
    others_ran = 0

    def handler(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        events.append(f"handle {cmd.opaque}")

        def work() -> None:
            # the answers queued so far are on the socket already, unless a
            # later frame of the same chunk comes first (then none is written yet)
            events.append(f"after {cmd.opaque} ready={peer[0].ready_bytes() > 0} "
                          f"others={others_ran}")

        conn.after_answers(work)
        return cmd.response(ResponseCode.SUCCESS)

    other_started = trio.Event()

    async def other_task() -> None:
        nonlocal others_ran
        other_started.set()
        while True:
            others_ran += 1
            await trio.lowlevel.checkpoint()

    t = HandlerTable()
    t.register(DEFER, handler)
    server = RemotingServer(t)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        peer.append(Peer(port))
        # one request alone: its work runs once its answer is readable
        peer[0].sock.sendall(frame(DEFER, 1))
        assert [c.opaque for c in await peer[0].answers(1)] == [1]
        assert events == ["handle 1", "after 1 ready=True others=0"]
        events.clear()
        # three in one chunk: each one's work before the next frame is handled,
        # and no other task runs between a handler and its work
        nursery.start_soon(other_task)
        await other_started.wait()
        peer[0].sock.sendall(frame(DEFER, 2) + frame(DEFER, 3) + frame(DEFER, 4))
        assert [c.opaque for c in await peer[0].answers(3)] == [2, 3, 4]
        assert [e.split(" ready")[0] for e in events] == [
            "handle 2", "after 2", "handle 3", "after 3", "handle 4", "after 4"]
        seen = {e.split("others=")[1] for e in events if e.startswith("after")}
        assert len(seen) == 1  # the other task did not run in between
        assert events[-1].startswith("after 4 ready=True")  # the last: after the write
        peer[0].sock.close()
        nursery.cancel_scope.cancel()


async def test_a_failing_work_is_logged_and_the_connection_goes_on() -> None:
    ran: list[str] = []

    def failing(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        def work() -> None:
            ran.append("failing")
            raise RuntimeError("boom")

        conn.after_answers(work)
        conn.after_answers(lambda: ran.append("next"))
        return cmd.response(ResponseCode.SUCCESS)

    async def async_handler(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        await trio.lowlevel.checkpoint()
        conn.after_answers(lambda: ran.append("at once"))  # outside a chunk
        ran.append("returned")
        return cmd.response(ResponseCode.SUCCESS)

    t = HandlerTable()
    t.register(FAIL, failing)
    t.register(ASYNC_DEFER, async_handler)
    server = RemotingServer(t)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        peer = Peer(port)
        peer.sock.sendall(frame(FAIL, 1))
        assert [c.code for c in await peer.answers(1)] == [ResponseCode.SUCCESS]
        peer.sock.sendall(frame(FAIL, 2) + frame(ASYNC_DEFER, 3))
        got = await peer.answers(2)
        assert sorted(c.opaque for c in got) == [2, 3]
        assert ran == ["failing", "next", "failing", "next", "at once", "returned"]
        peer.sock.close()
        nursery.cancel_scope.cancel()
