"""What connections that never authenticate cost a live daemon with its ACL on
(issue 48: "before a connection is authenticated it gets a small read budget"),
sent on raw connections:

- ``unsigned``: 20 connections each announce a frame of ~16 MiB (half in the
  project's msgpack format, half in RocketMQ's JSON one), an unsigned request,
  and send its body 1 MiB at a time for as long as the daemon takes it;
- ``partial``: 20 connections each send a signed-looking 4 MiB SEND_MESSAGE (an
  access key no account has, a made-up signature) 64 KiB at a time, all at
  once, so that each holds part of its frame while the others arrive.

    python -m tests.integration.preauth_cost                 # prints the figures
    python -m tests.integration.preauth_cost --budget 8388608  # aclPreAuthReadBudgetBytes

starts a name server and a broker (both with aclEnable=true, default keys) in a
temporary directory and reports, per daemon and scenario: the answers, and the
daemon's peak RSS growth (VmHWM after, less VmRSS before, the peak reset first).
The integration test (test_acl_preauth.py) asserts on them.
"""

from __future__ import annotations

import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import trio

from protocol.codecs import MSGPACK, ROCKETMQ_JSON, detect
from protocol.codecs.base import Codec
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.frame import DEFAULT_MAX_FRAME_SIZE, FRAME_HEADER, FrameDecoder
from tests.integration.decode_cost import peak_kib, reset_peak

KiB = 1024
MiB = 1024 * KiB
CONNS = 20
# a made-up signature of an access key no account has: only a check of its body
# could refuse it
SIGNED_LOOKING = {"AccessKey": "nobody99", "Signature": "bm90IGEgc2lnbmF0dXJlIGF0IGFsbA=="}


def frame_start(codec: Codec, code: int, fields: dict[str, Any], body_len: int,
                opaque: int = 1) -> tuple[bytes, int]:
    """The start of a request frame whose body is ``body_len`` bytes, without the
    body: (the length prefix and everything before the body, the bytes left to
    send after it: the body and what follows)."""
    if codec is MSGPACK:
        head = msgpack.packb([code, opaque, 0, None, fields], use_bin_type=True)
        head = b"\x97" + head[1:] + b"\xc6" + struct.pack(">I", body_len)
        rest = body_len + 1  # the body, then the version (a fixint)
    else:
        head = codec.encode(RemotingCommand(code=code, opaque=opaque, ext_fields=dict(fields),
                                            codec=codec))
        rest = body_len
    return FRAME_HEADER.pack(len(head) + rest) + head, rest


@dataclass
class Sent:
    answer: RemotingCommand | None = None  # the first answer (None: closed without one)
    closed: bool = False


async def send_slowly(port: int, start: bytes, rest: int, piece: int,
                      timeout: float = 60.0) -> Sent:
    """Send ``start`` then ``rest`` zero bytes ``piece`` at a time on a new
    connection, reading its answer meanwhile; stops once the daemon closed it,
    or once everything was sent and answered."""
    out = Sent()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    answered = trio.Event()

    async def reader(cancel: trio.CancelScope) -> None:
        decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
        try:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    break
                frames = decoder.feed(data)
                if frames and out.answer is None:
                    out.answer = detect(frames[0]).decode(frames[0])
                    answered.set()
        except trio.BrokenResourceError:  # reset: closed with bytes unread
            pass
        out.closed = True
        answered.set()
        cancel.cancel()  # the daemon is done with it: stop sending

    async with stream:
        with trio.fail_after(timeout):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader, nursery.cancel_scope)
                try:
                    await stream.send_all(start)
                    zeros = b"\0" * piece
                    left = rest
                    while left > 0:
                        n = min(piece, left)
                        await stream.send_all(zeros[:n])
                        left -= n
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                await answered.wait()
                nursery.cancel_scope.cancel()
    return out


@dataclass
class Outcome:
    sent: list[Sent]
    rss_growth_kib: int


async def attack(pid: int, port: int, starts: list[tuple[bytes, int]], piece: int) -> Outcome:
    """Every frame of ``starts`` on its own connection, all at once; the peak RSS growth."""
    results: list[Sent] = []
    before = reset_peak(pid)

    async def one(start: bytes, rest: int) -> None:
        results.append(await send_slowly(port, start, rest, piece))

    async with trio.open_nursery() as nursery:
        for start, rest in starts:
            nursery.start_soon(one, start, rest)
    return Outcome(results, peak_kib(pid) - before)


def unsigned_frames(code: int) -> list[tuple[bytes, int]]:
    """``CONNS`` unsigned requests of ``code``, each announcing ~16 MiB, half
    msgpack and half RocketMQ JSON."""
    frames = []
    for i in range(CONNS):
        codec = MSGPACK if i % 2 else ROCKETMQ_JSON
        fields = {"topic": "PreAuthTopic", "producerGroup": "attacker"}
        frames.append(frame_start(codec, code, fields, DEFAULT_MAX_FRAME_SIZE - 4 * KiB))
    return frames


def partial_frames(code: int, body: int = 4 * MiB) -> list[tuple[bytes, int]]:
    """``CONNS`` signed-looking requests of ``code`` with a body of ``body`` bytes."""
    frames = []
    for i in range(CONNS):
        codec = MSGPACK if i % 2 else ROCKETMQ_JSON
        fields = {"topic": "PreAuthTopic", "producerGroup": "attacker", **SIGNED_LOOKING}
        frames.append(frame_start(codec, code, fields, body))
    return frames


def describe(s: Sent) -> str:
    if s.answer is None:
        return "closed, no answer"
    return f"code {s.answer.code}: {(s.answer.remark or '')[:60]}"


ACL_YAML = """globalWhiteRemoteAddresses:
  - 10.254.254.254
accounts:
  - accessKey: rocketmq2
    secretKey: '12345678'
    admin: true
"""


async def report(budget: int | None) -> None:
    """Each scenario against fresh daemons (memory a daemon once took stays with
    it, which would hide the next scenario's growth); ``budget``: their
    aclPreAuthReadBudgetBytes (None: the default)."""
    from tests.integration.cluster import Cluster

    for name, make, piece in (("unsigned", unsigned_frames, MiB),
                              ("partial", partial_frames, 64 * KiB)):
        with tempfile.TemporaryDirectory() as tmp:
            cluster = Cluster(Path(tmp))
            acl = Path(tmp) / "plain_acl.yml"
            acl.write_text(ACL_YAML)
            try:
                keys = {} if budget is None else {"aclPreAuthReadBudgetBytes": budget}
                ns = cluster.namesrv(aclEnable="true", aclPlainFile=acl, **keys)
                broker = cluster.broker("broker-a", ns.addr, True, aclEnable="true",
                                        aclPlainFile=acl, brokerAccessKey="rocketmq2",
                                        brokerSecretKey="12345678", **keys)
                for daemon, d, code in (("namesrv", ns, RequestCode.GET_ROUTEINFO_BY_TOPIC),
                                        ("broker", broker, RequestCode.SEND_MESSAGE)):
                    assert d.proc is not None
                    out = await attack(d.proc.pid, d.port, make(code), piece)
                    kinds = sorted({describe(s) for s in out.sent})
                    print(f"{daemon:8s} {name:9s} x{CONNS} RSS +{out.rss_growth_kib / 1024:6.1f} "
                          f"MiB  answers: {'; '.join(kinds)}", flush=True)
                    assert d.proc.poll() is None, f"{daemon} exited"
            finally:
                cluster.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    trio.run(report, int(args[args.index("--budget") + 1]) if "--budget" in args else None)
    sys.exit(0)
