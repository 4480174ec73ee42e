"""Before a connection is authenticated (ACL on; protocol/trio/preauth.py): a frame's
header read from the start of its payload, the verdicts on a frame held in part, the
turn to finish a frame in two budgets at once, and connections (in memory, and over
TLS) that are refused after their header, authenticated by a request let in, or held
within the shared pre-auth budget."""

from __future__ import annotations

import struct
from typing import Any

import pytest
import trio
import trio.testing

from protocol.acl import sign_fields
from protocol.codecs import MSGPACK, ROCKETMQ_BINARY, ROCKETMQ_JSON
from protocol.codecs.base import MAX_HEADER_BYTES, Codec
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import FrameTooLargeError, RemoteProtocolError
from protocol.frame import FrameDecoder, encode_frame
from protocol.trio.client import RemotingClient
from protocol.trio.connection import PRE_AUTH_CHUNK, HandlerTable, RemotingConnection
from protocol.trio.limits import SharedBudget, may_finish_all
from protocol.trio.preauth import (
    READ,
    Judgement,
    PreAuth,
    Verdict,
    carries_signature,
    pre_auth_frame_cap,
)
from protocol.trio.server import RemotingServer
from protocol.trio.tls import ClientTls
from tests.protocol.test_tls_detect import server_tls
from tests.tls_certs import Certs, tls_certs_fixture  # noqa: F401 (the tls_certs fixture)

KiB = 1024
MiB = 1024 * KiB
SEND = 10
SIGNED = sign_fields({"a": "group", "b": "Topic"}, b"body", "someone1", "secret12")
UNSIGNED = {"a": "group", "b": "Topic"}
REFUSED = "No accessKey is configured"


def request(codec: Codec, fields: dict[str, Any], body: bytes | None, opaque: int = 7,
            remark: str | None = None) -> bytes:
    cmd = RemotingCommand(code=SEND, opaque=opaque, remark=remark, ext_fields=dict(fields),
                          body=body, codec=codec)
    return codec.encode(cmd)


# ---- codecs: a header from the start of a payload ------------------------------------------


CODECS = [MSGPACK, ROCKETMQ_JSON, ROCKETMQ_BINARY]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("remark", [None, "r" * 10_000], ids=["short", "long-remark"])
def test_a_header_is_read_from_any_prefix_that_holds_it(codec: Codec, remark: str | None
                                                        ) -> None:
    payload = request(codec, SIGNED, b"b" * 70_000, remark=remark)
    whole = codec.decode(payload)
    before_body = len(payload) - 70_000
    cuts = range(before_body + 1)
    ends = [n for n in cuts if codec.decode_header(payload[:n]) is not None]
    assert ends  # the body is not needed
    end = ends[0]
    assert ends == list(range(end, before_body + 1))  # None until the header is in, then always
    for n in (end, len(payload)):
        head = codec.decode_header(payload[:n])
        assert head is not None and head.body is None
        assert (head.code, head.opaque, head.flag, head.remark, head.ext_fields) == \
            (whole.code, whole.opaque, whole.flag, whole.remark, whole.ext_fields)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_a_header_past_the_limit_is_refused_from_its_prefix(codec: Codec) -> None:
    payload = request(codec, UNSIGNED, None, remark="r" * (MAX_HEADER_BYTES + 10))
    if codec is MSGPACK:  # told when the prefix runs past the limit
        assert codec.decode_header(payload[:MAX_HEADER_BYTES // 2]) is None
    else:  # RocketMQ's header length comes first
        with pytest.raises(RemoteProtocolError, match="above the limit"):
            codec.decode_header(payload[:4])
    with pytest.raises(RemoteProtocolError):
        codec.decode_header(payload[:MAX_HEADER_BYTES + 64])


def test_garbage_is_refused_from_its_prefix() -> None:
    with pytest.raises(RemoteProtocolError):
        MSGPACK.decode_header(b"\xc1\x00\x00")
    with pytest.raises(RemoteProtocolError):
        ROCKETMQ_JSON.decode_header(struct.pack(">I", 5) + b"[1,2]")
    with pytest.raises(RemoteProtocolError):
        ROCKETMQ_JSON.decode_header(struct.pack(">I", 0x07000010))  # no such type


def test_the_decoder_shows_the_length_and_start_of_a_frame_held_in_part() -> None:
    payload = bytes(range(256)) * 40
    frame = encode_frame(payload)
    d = FrameDecoder()
    assert d.declared is None and d.head(10) == b""
    d.feed(frame[:2])
    assert d.declared is None and d.head(10) == b""
    d.feed(frame[2:5])
    assert d.declared == len(payload) and d.head(10) == payload[:1]
    d.feed(frame[5:100])
    assert d.head(10) == payload[:10] and d.head(1000) == payload[:96]
    d.drop()
    assert d.buffered == 0 and d.declared is None
    with pytest.raises(FrameTooLargeError):
        d.feed(b"more")


# ---- verdicts (pure) -------------------------------------------------------------------------


class Gate:
    """An ACL that trusts ``trusted`` addresses and refuses what is not signed."""

    def __init__(self, *trusted: str) -> None:
        self.trusted = set(trusted)
        self.judged: list[RemotingCommand] = []

    def trusts(self, remote_addr: str) -> bool:
        return remote_addr in self.trusted

    def judge(self, conn: Any, cmd: RemotingCommand) -> Judgement:
        self.judged.append(cmd)
        if carries_signature(cmd.ext_fields):
            return READ
        answer = None if cmd.is_oneway else cmd.response(ResponseCode.NO_PERMISSION, REFUSED)
        return Judgement(Verdict.REFUSE, answer)


class Peer:
    remote_addr = "10.0.0.9:4242"


def never(opaque: int) -> bool:
    return False


def partial(pre: PreAuth, frame_payload: bytes, declared: int | None = None,
            expects: Any = never, cut: int | None = None) -> Judgement:
    head = frame_payload[:cut] if cut is not None else frame_payload
    return pre.judge_partial(Peer(), declared if declared is not None else len(frame_payload),
                             head, None, expects)


def test_the_verdicts_on_a_frame_held_in_part() -> None:
    gate = Gate()
    pre = PreAuth(gate, 1 * MiB, SharedBudget(4 * MiB))
    unsigned = request(ROCKETMQ_JSON, UNSIGNED, None)
    signed = request(MSGPACK, SIGNED, None)
    assert pre.judge_partial(Peer(), None, b"", None, never).verdict is Verdict.MORE
    assert partial(pre, unsigned, cut=0).verdict is Verdict.MORE
    assert partial(pre, unsigned, cut=20).verdict is Verdict.MORE  # the header is not all in
    # unsigned, of any size: refused with the ACL's answer, in the request's codec
    for declared in (100, 16 * MiB):
        refused = partial(pre, unsigned, declared)
        assert refused.verdict is Verdict.REFUSE and refused.answer is not None
        assert refused.answer.code == ResponseCode.NO_PERMISSION
        assert refused.answer.opaque == 7 and refused.answer.remark == REFUSED
        assert refused.answer.codec is ROCKETMQ_JSON
    # signed: read on, within the frame cap; above it refused, saying why
    assert partial(pre, signed, 1 * MiB).verdict is Verdict.READ
    big = partial(pre, signed, 1 * MiB + 1)
    assert big.verdict is Verdict.REFUSE and big.answer is not None
    assert big.answer.code == ResponseCode.SYSTEM_ERROR
    assert "aclPreAuthMaxFrameBytes" in (big.answer.remark or "")
    oneway = request(MSGPACK, SIGNED, None)
    cmd = MSGPACK.decode(oneway)
    cmd.flag |= 0x2
    assert partial(pre, MSGPACK.encode(cmd), 2 * MiB).verdict is Verdict.CLOSE
    # a response: read only if this side waits for it
    answer = MSGPACK.encode(RemotingCommand(code=0, opaque=5, flag=1))
    assert partial(pre, answer).verdict is Verdict.CLOSE
    assert partial(pre, answer, expects=lambda o: o == 5).verdict is Verdict.READ
    # garbage closes; a trusted address is trusted whatever it sends
    assert partial(pre, b"\xc1\x00\x00\x00").verdict is Verdict.CLOSE
    gate.trusted.add(Peer.remote_addr)
    assert partial(pre, b"\xc1", 16 * MiB).verdict is Verdict.TRUST


def test_a_signature_is_an_access_key_and_a_signature() -> None:
    assert carries_signature(SIGNED)
    assert not carries_signature(None) and not carries_signature(UNSIGNED)
    assert not carries_signature({"AccessKey": "k"})
    assert not carries_signature({"AccessKey": "", "Signature": ""})  # the C++ client's empty ones
    assert not carries_signature({"AccessKey": "k", "Signature": 5})


def test_the_default_frame_cap_is_a_header_and_a_body() -> None:
    assert pre_auth_frame_cap(4 * MiB) == MAX_HEADER_BYTES + 4 * MiB + 64 * KiB


def test_the_turn_to_finish_is_taken_in_every_budget_or_none() -> None:
    a, b = SharedBudget(10), SharedBudget(10)
    assert may_finish_all("x", [a, b])
    assert a.finishing == b.finishing == "x"
    assert may_finish_all("x", [a, b])  # still its turn
    assert not may_finish_all("y", [b])
    a.finished("x")
    # b is still x's: y takes no turn in a either (no two connections each hold one)
    assert not may_finish_all("y", [a, b]) and a.finishing is None
    b.finished("x")
    assert may_finish_all("y", [a, b]) and a.finishing == b.finishing == "y"


# ---- connections (in memory) -----------------------------------------------------------------


def authenticating_table(seen: list[int]) -> HandlerTable:
    """SEND: a request let in authenticates its connection (as the daemons' guard)."""
    t = HandlerTable()

    def send(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(len(cmd.body or b""))
        if carries_signature(cmd.ext_fields) and cmd.ext_fields.get("Signature") != "bad":
            conn.authenticate()
            return cmd.response(ResponseCode.SUCCESS)
        return cmd.response(ResponseCode.NO_PERMISSION, "checked")

    t.register(SEND, send)
    return t


async def read_answers(stream: trio.abc.Stream, n: int) -> tuple[list[RemotingCommand], bool]:
    """``n`` answers (fewer if the stream ends), and whether it ended."""
    decoder = FrameDecoder()
    got: list[RemotingCommand] = []
    with trio.fail_after(5):
        while len(got) < n:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return got, True
            if not data:
                return got, True
            got += [RemotingCommand.decode(p) for p in decoder.feed(data)]
    return got, False


def closed(conn: RemotingConnection) -> trio.Event:
    event = trio.Event()
    if conn.closed:
        event.set()
    conn.on_close(lambda _conn: event.set())
    return event


async def ended(stream: trio.abc.Stream) -> bool:
    with trio.fail_after(5):
        while True:
            try:
                if not await stream.receive_some(65536):
                    return True
            except trio.BrokenResourceError:
                return True


def frame_of(fields: dict[str, str], size: int, opaque: int) -> bytes:
    body = b"b" * size
    return encode_frame(MSGPACK.encode(RemotingCommand(
        code=SEND, opaque=opaque, ext_fields=dict(fields), body=body)), 32 * MiB)


async def test_an_unsigned_frame_is_refused_after_its_header_its_body_never_read() -> None:
    seen: list[int] = []
    pre = PreAuth(Gate(), 1 * MiB, SharedBudget(4 * MiB))
    server, client = trio.testing.memory_stream_pair()
    conn = RemotingConnection(server, authenticating_table(seen), remote_addr="p:1",
                              preauth=pre, budget=SharedBudget())
    frame = frame_of(UNSIGNED, 16 * MiB - KiB, 3)  # above the frame cap too: the ACL answers
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        await client.send_all(frame[:100 * KiB])
        (answer,), _ = await read_answers(client, 1)
        assert (answer.opaque, answer.code, answer.remark) == \
            (3, ResponseCode.NO_PERMISSION, REFUSED)
        assert await ended(client)  # told that nothing more is read
        assert pre.budget.used == 0 and not conn.closed  # lingering: what comes is dropped
        await client.send_all(frame[100 * KiB:600 * KiB])
        await client.send_eof()
        with trio.fail_after(5):
            await closed(conn).wait()
        assert seen == [] and not conn.authenticated
        assert pre.budget.used == 0


async def test_a_signed_request_is_read_whole_and_then_normal_limits_apply() -> None:
    seen: list[int] = []
    pre = PreAuth(Gate(), 1 * MiB, SharedBudget(4 * MiB))
    server, client = trio.testing.memory_stream_pair()
    conn = RemotingConnection(server, authenticating_table(seen), remote_addr="p:1",
                              preauth=pre, budget=SharedBudget())
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        # a bad signature is refused by the check, not on its header: the connection lives
        bad = {**SIGNED, "Signature": "bad"}
        await client.send_all(frame_of(bad, 900 * KiB, 1))
        (answer,), _ = await read_answers(client, 1)
        assert answer.code == ResponseCode.NO_PERMISSION and answer.remark == "checked"
        assert not conn.authenticated and not conn.closed
        # the first request let in authenticates: a larger frame then passes, and an
        # unsigned one is left to the handler (as the ACL's guard leaves it)
        await client.send_all(frame_of(SIGNED, 900 * KiB, 2))
        await client.send_all(frame_of(SIGNED, 3 * MiB, 3))
        await client.send_all(frame_of(UNSIGNED, 10, 4))
        answers, _ = await read_answers(client, 3)
        assert [(a.opaque, a.code) for a in answers] == [
            (2, ResponseCode.SUCCESS), (3, ResponseCode.SUCCESS), (4, ResponseCode.NO_PERMISSION)]
        assert conn.authenticated and not conn.closed
        assert seen == [900 * KiB, 900 * KiB, 3 * MiB, 10]
        assert pre.budget.used == 0
        nursery.cancel_scope.cancel()


async def test_a_signed_frame_above_the_cap_is_refused_before_its_body() -> None:
    pre = PreAuth(Gate(), 1 * MiB, SharedBudget(4 * MiB))
    server, client = trio.testing.memory_stream_pair()
    conn = RemotingConnection(server, authenticating_table([]), remote_addr="p:1",
                              preauth=pre, budget=SharedBudget())
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        await client.send_all(frame_of(SIGNED, 2 * MiB, 9)[:64 * KiB])
        (answer,), _ = await read_answers(client, 1)
        assert answer.code == ResponseCode.SYSTEM_ERROR and answer.opaque == 9
        assert "aclPreAuthMaxFrameBytes" in (answer.remark or "")
        assert await ended(client)
        nursery.cancel_scope.cancel()


async def test_a_trusted_address_is_authenticated_before_its_first_frame_is_in() -> None:
    seen: list[int] = []
    pre = PreAuth(Gate("white:1"), 1 * MiB, SharedBudget(4 * MiB))
    server, client = trio.testing.memory_stream_pair()
    conn = RemotingConnection(server, authenticating_table(seen), remote_addr="white:1",
                              preauth=pre, budget=SharedBudget())
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        await client.send_all(frame_of(UNSIGNED, 3 * MiB, 1))
        (answer,), _ = await read_answers(client, 1)
        assert answer.code == ResponseCode.NO_PERMISSION and answer.remark == "checked"
        assert conn.authenticated and seen == [3 * MiB]
        nursery.cancel_scope.cancel()


async def test_partial_frames_before_authentication_stay_within_the_pre_auth_budget() -> None:
    """Six connections each send most of a signed 512 KiB frame: together they hold no
    more than the 1 MiB budget, the frame of the one whose turn it is to complete it,
    and a read each; completed, each is answered in turn."""
    pre = PreAuth(Gate(), 1 * MiB, SharedBudget(1 * MiB))
    daemon_budget = SharedBudget()
    conns: list[RemotingConnection] = []
    clients: list[Any] = []
    frames = [frame_of(SIGNED, 512 * KiB, i) for i in range(6)]
    most = 480 * KiB
    peak = 0
    async with trio.open_nursery() as nursery:
        for _ in frames:
            server, client = trio.testing.memory_stream_pair()
            conn = RemotingConnection(server, authenticating_table([]), remote_addr="p:1",
                                      preauth=pre, budget=daemon_budget)
            await nursery.start(conn.run)
            conns.append(conn)
            clients.append(client)
        for client, frame in zip(clients, frames, strict=True):
            for at in range(0, most, 32 * KiB):  # in pieces, as a slow sender
                await client.send_all(frame[at:at + 32 * KiB])
                await trio.testing.wait_all_tasks_blocked()
                peak = max(peak, pre.budget.used)
        bound = pre.budget.max_bytes + 512 * KiB + len(frames) * PRE_AUTH_CHUNK
        assert pre.budget.over and peak <= bound
        assert daemon_budget.used == pre.budget.used  # counted in the daemon's budget too
        held = [c._buffered for c in conns]
        assert sum(1 for h in held if h >= most) < len(frames)  # some were held back
        for client, frame in zip(clients, frames, strict=True):
            await client.send_all(frame[most:])
        answered = []
        for client in clients:
            (answer,), _ = await read_answers(client, 1)
            answered.append((answer.opaque, answer.code))
            peak = max(peak, pre.budget.used)
        assert answered == [(i, ResponseCode.SUCCESS) for i in range(len(frames))]
        assert peak <= bound
        assert all(c.authenticated for c in conns)
        assert pre.budget.used == 0 and daemon_budget.used == 0
        nursery.cancel_scope.cancel()


# ---- over TLS (a server on loopback) --------------------------------------------------------


async def test_over_tls_an_unsigned_request_is_answered_before_the_close(tls_certs: Certs
                                                                         ) -> None:
    pre = PreAuth(Gate(), 1 * MiB, SharedBudget(4 * MiB))
    seen: list[int] = []
    server = RemotingServer(authenticating_table(seen), tls=server_tls(tls_certs, "enforcing"),
                            preauth=pre)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        addr = f"127.0.0.1:{port}"
        async with RemotingClient(tls=ClientTls(ca_path=tls_certs.ca)) as rc:
            conn = await rc.get_connection(addr)
            gone = closed(conn)
            cmd = RemotingCommand.request(SEND, dict(UNSIGNED), b"x" * (200 * KiB))
            answer = await rc.invoke(addr, cmd, 5)
            assert answer.code == ResponseCode.NO_PERMISSION and answer.remark == REFUSED
            with trio.fail_after(5):
                await gone.wait()  # the server closed it
            # signed: read whole, let in, and the connection lives on
            signed = RemotingCommand.request(SEND, dict(SIGNED), b"x" * (900 * KiB))
            assert (await rc.invoke(addr, signed, 5)).code == ResponseCode.SUCCESS
            again = RemotingCommand.request(SEND, dict(UNSIGNED), b"x")
            assert (await rc.invoke(addr, again, 5)).code == ResponseCode.NO_PERMISSION
            assert len(server.connections) == 1
            assert next(iter(server.connections)).authenticated
        assert seen == [900 * KiB, 1]
        nursery.cancel_scope.cancel()
