"""A connection decodes each frame once: a malformed request is answered
SYSTEM_ERROR from what the codec's refusal carries (MalformedRequestError),
never decoded a second time to find its code and opaque; a frame with
nothing to answer closes the connection. One log line each."""

from __future__ import annotations

import struct
from collections.abc import MutableMapping
from typing import Any

import trio
import trio.testing
from structlog.testing import capture_logs

from protocol.codecs import MSGPACK
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.trio.connection import HandlerTable, RemotingConnection

OK = 1


class CountingCodec:
    """The msgpack codec, counting decodes; peek_request must not be needed."""

    name = "msgpack"

    def __init__(self) -> None:
        self.decodes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(MSGPACK, name)

    def decode(self, payload: bytes) -> RemotingCommand:
        self.decodes += 1
        return MSGPACK.decode(payload)

    def peek_request(self, payload: bytes) -> tuple[int, int] | None:
        raise AssertionError("the frame was decoded twice")


def nested_remark(opaque: int, n: int = 200_000) -> bytes:
    """A request whose remark is ``n`` empty arrays."""
    return (b"\x97\x01" + b"\xce" + struct.pack(">I", opaque) + b"\x00\xdd"
            + struct.pack(">I", n) + b"\x90" * n + b"\x80\xc0\x01")


async def serve(frames: list[bytes], answers: int
                ) -> tuple[list[RemotingCommand], bool, int, list[MutableMapping[str, Any]]]:
    table = HandlerTable()
    table.register(OK, lambda conn, cmd: cmd.response(ResponseCode.SUCCESS, "fine"))
    server_side, client_side = trio.testing.memory_stream_pair()
    codec = CountingCodec()
    conn = RemotingConnection(server_side, table, remote_addr="test", codec=codec)  # type: ignore[arg-type]
    decoder = FrameDecoder()
    got: list[RemotingCommand] = []
    with capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            for frame in frames:
                await client_side.send_all(encode_frame(frame))
            with trio.fail_after(5):
                while len(got) < answers:
                    for payload in decoder.feed(await client_side.receive_some(65536)):
                        got.append(RemotingCommand.decode(payload))
                await trio.testing.wait_all_tasks_blocked()
            closed = conn.closed
            conn.close()
    return got, closed, codec.decodes, logs


async def test_malformed_requests_are_answered_from_one_decode() -> None:
    frames = [nested_remark(7), nested_remark(8), RemotingCommand(OK, 9).encode()]
    got, closed, decodes, logs = await serve(frames, 3)
    assert [(r.opaque, r.code) for r in got] == [
        (7, ResponseCode.SYSTEM_ERROR), (8, ResponseCode.SYSTEM_ERROR), (9, ResponseCode.SUCCESS)]
    assert got[0].remark is not None
    assert got[0].remark.startswith("malformed request: remark too large or not a scalar")
    assert not closed and decodes == 3
    # one line for the connection, not one per request
    lines = [e for e in logs if e["event"] == "malformed request answered SYSTEM_ERROR"]
    assert len(lines) == 1 and lines[0]["code"] == 1 and lines[0]["size"] == len(frames[0])


async def test_a_frame_with_nothing_to_answer_closes_the_connection() -> None:
    # a response whose remark is empty arrays: nobody to answer
    response = bytearray(nested_remark(7))
    response[7] = 0x01  # flag: response
    got, closed, decodes, logs = await serve([bytes(response)], 0)
    assert got == [] and closed and decodes == 1
    assert any(e["event"] == "undecodable frame, closing connection" for e in logs)
