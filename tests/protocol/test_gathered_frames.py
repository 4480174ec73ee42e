"""Frames sent in pieces: a large body leaves as its own piece (Codec.encode_parts,
frame_parts) and a socket write that stops short leaves the rest (unsent)."""

from __future__ import annotations

import socket

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codecs.base import GATHER_MIN
from protocol.codecs.msgpack_codec import MSGPACK
from protocol.codecs.rocketmq import ROCKETMQ_BINARY, ROCKETMQ_JSON
from protocol.codes import ResponseCode
from protocol.command import FLAG_RESPONSE, RemotingCommand
from protocol.errors import LocalProtocolError
from protocol.frame import FrameDecoder, encode_frame, frame_parts, unsent
from protocol.trio.client import RemotingClient
from protocol.trio.connection import HandlerTable
from protocol.trio.server import RemotingServer

CODECS = (MSGPACK, ROCKETMQ_JSON, ROCKETMQ_BINARY)
SIZES = (0, 1, 255, 256, 65_535, GATHER_MIN - 1, GATHER_MIN, GATHER_MIN + 1, 65_536, 300_000)

bodies = st.one_of(
    st.none(),
    st.sampled_from(SIZES).map(lambda n: bytes(range(256)) * (n // 256) + b"z" * (n % 256)),
    st.binary(max_size=300),
)
ext_fields = st.dictionaries(st.text(alphabet="abcdefgXYZ", min_size=1, max_size=8),
                             st.one_of(st.text(max_size=20), st.integers(-(2**31), 2**31 - 1)),
                             max_size=5)


@settings(max_examples=150, deadline=None)
@given(codec=st.sampled_from(CODECS), body=bodies, ext=ext_fields,
       code=st.integers(0, 32767), opaque=st.integers(0, 2**31 - 1),
       flag=st.sampled_from([0, FLAG_RESPONSE, 2]), remark=st.one_of(st.none(), st.text(max_size=30)))
def test_parts_join_to_the_encoding_and_a_large_body_is_not_copied(
        codec: object, body: bytes | None, ext: dict, code: int, opaque: int, flag: int,
        remark: str | None) -> None:
    cmd = RemotingCommand(code, opaque, flag, remark, dict(ext), body, codec=codec)  # type: ignore[arg-type]
    whole = cmd.encode()
    parts = cmd.encode_parts()
    assert b"".join(parts) == whole
    decoded = cmd.wire_codec.decode(whole)
    assert (decoded.code, decoded.opaque, decoded.body or None) == (code, opaque, body or None)
    if body is not None and len(body) >= GATHER_MIN:
        assert any(p is body for p in parts)  # sent as it is, not copied into a frame
    else:
        assert len(parts) == 1


def test_a_body_that_is_not_bytes_is_copied_into_the_frame() -> None:
    for codec in CODECS:
        for body in (bytearray(b"q" * 70_000), memoryview(b"r" * 70_000)):
            cmd = RemotingCommand(7, 9, 0, None, {}, body, codec=codec)  # type: ignore[arg-type]
            parts = cmd.encode_parts()
            assert len(parts) == 1 and parts[0] == cmd.encode()


def test_a_command_that_cannot_be_encoded_raises_the_same_in_parts() -> None:
    big = b"b" * 70_000
    for cmd in (RemotingCommand(1, 2, 0, None, {"k": object()}, big),
                RemotingCommand(1, 2, 0, None, {}, big, codec=ROCKETMQ_BINARY, version=2**20)):
        errors = []
        for encode in (cmd.encode, cmd.encode_parts):
            try:
                encode()
            except Exception as exc:
                errors.append(type(exc))
        assert len(errors) == 2 and errors[0] is errors[1]


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=6), st.integers(0, 4096))
def test_frame_parts_is_encode_frame_in_pieces(parts: list[bytes], limit: int) -> None:
    payload = b"".join(parts)
    try:
        expected = encode_frame(payload, limit)
    except LocalProtocolError as exc:
        try:
            frame_parts(parts, limit)
        except LocalProtocolError as again:
            assert str(again) == str(exc)
        else:
            raise AssertionError("frame_parts took a frame encode_frame refused")
        return
    assert b"".join(frame_parts(parts, limit)) == expected


@given(st.lists(st.binary(max_size=50), max_size=8), st.data())
def test_unsent_is_what_follows_the_bytes_sent(pieces: list[bytes], data: st.DataObject) -> None:
    whole = b"".join(pieces)
    sent = data.draw(st.integers(0, len(whole)))
    rest = unsent(list(pieces), sent)
    assert b"".join(rest) == whole[sent:]
    assert all(len(p) for p in rest[:1])  # never starts with an empty piece
    assert unsent(list(pieces), len(whole)) == []


# ---- over a socket that takes a little at a time ----------------------------------------

ANSWER = 5


def answer_body(opaque: int) -> bytes:
    """A different body per request, most of them large (some below GATHER_MIN)."""
    size = (opaque * 7919) % 200_000 + (0 if opaque % 3 else GATHER_MIN)
    return (opaque.to_bytes(4, "big") * (size // 4 + 1))[:size]


def answers() -> HandlerTable:
    t = HandlerTable()
    t.register(ANSWER, lambda conn, cmd: cmd.response(ResponseCode.SUCCESS,
                                                      body=answer_body(cmd.opaque)))
    return t


async def test_large_answers_arrive_whole_and_in_order_through_a_slow_reader() -> None:
    server = RemotingServer(answers())
    n = 60
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        for codec in (MSGPACK, ROCKETMQ_JSON):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the server's sends stop short
            s.connect(("127.0.0.1", port))
            s.setblocking(False)
            requests = b"".join(
                encode_frame(codec.encode(RemotingCommand(ANSWER, i)))  # type: ignore[attr-defined]
                for i in range(1, n + 1))
            s.sendall(requests)
            decoder = FrameDecoder(1 << 20)
            got: list[RemotingCommand] = []
            with trio.fail_after(30):
                while len(got) < n:
                    await trio.lowlevel.wait_readable(s)
                    chunk = s.recv(3000)  # a little at a time
                    assert chunk
                    got += [codec.decode(f) for f in decoder.feed(chunk)]  # type: ignore[attr-defined]
            assert [c.opaque for c in got] == list(range(1, n + 1))
            for c in got:
                assert c.code == ResponseCode.SUCCESS and c.body == answer_body(c.opaque)
            s.close()
        nursery.cancel_scope.cancel()


async def test_a_client_sends_large_requests_whole() -> None:
    t = HandlerTable()
    t.register(ANSWER, lambda conn, cmd: cmd.response(ResponseCode.SUCCESS, body=cmd.body[::-1]))
    server = RemotingServer(t)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        async with RemotingClient() as rc:
            addr = f"127.0.0.1:{port}"
            results: dict[int, bytes] = {}

            async def call(i: int) -> None:
                body = answer_body(i)
                r = await rc.invoke(addr, RemotingCommand.request(ANSWER, body=body), 10)
                results[i] = r.body or b""

            async with trio.open_nursery() as calls:
                for i in range(1, 41):
                    calls.start_soon(call, i)
            assert results == {i: answer_body(i)[::-1] for i in range(1, 41)}
        nursery.cancel_scope.cancel()

