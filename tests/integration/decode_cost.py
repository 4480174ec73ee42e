"""What one hostile frame costs a live daemon: the frames of the finding
(16 MiB of empty msgpack arrays in the remark, the same in extFields, a JSON
header of ``[[],[],...]``) and the same in a heart-beat's body (which the
ACL decodes before it checks the signature), sent on raw connections, while
another client's request is timed.

    python -m tests.integration.decode_cost        # prints the figures
    python -m tests.integration.decode_cost --acl  # the broker with its ACL on

starts a name server and a broker in a temporary directory and reports, per
daemon and frame: the answer, the daemon's peak RSS growth (VmHWM after
less VmRSS before, in /proc/PID/status, the peak reset before each frame),
and how long another connection waited for a GET_BROKER_CLUSTER_INFO (name
server) or GET_BROKER_RUNTIME_INFO (broker) sent while the frame was being
handled; then the same with 20 such frames sent at once on 20 connections.
The integration test (test_decode_limits.py) asserts on the answers.
"""

from __future__ import annotations

import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import trio

from protocol.codecs import detect
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import DEFAULT_MAX_FRAME_SIZE, FRAME_HEADER, FrameDecoder
from protocol.trio.client import RemotingClient

MiB = 1024 * 1024
# the largest payload a daemon takes (its max_frame_size)
PAYLOAD = DEFAULT_MAX_FRAME_SIZE


def msgpack_remark_frame() -> bytes:
    """[0, 1, 0, <array of N empty arrays>, {}, nil, 1]: a request (code 0,
    opaque 1) whose remark is ~16 M empty arrays."""
    head, tail = b"\x97\x00\x01\x00", b"\x80\xc0\x01"
    n = PAYLOAD - len(head) - 5 - len(tail)
    payload = head + b"\xdd" + struct.pack(">I", n) + b"\x90" * n + tail
    return FRAME_HEADER.pack(len(payload)) + payload


def msgpack_ext_frame() -> bytes:
    """[0, 1, 0, nil, {"k": <array of N empty arrays>}, nil, 1]."""
    head, tail = b"\x97\x00\x01\x00\xc0\x81\xa1k", b"\xc0\x01"
    n = PAYLOAD - len(head) - 5 - len(tail)
    payload = head + b"\xdd" + struct.pack(">I", n) + b"\x90" * n + tail
    return FRAME_HEADER.pack(len(payload)) + payload


def json_header_frame() -> bytes:
    """RocketMQ's format, a JSON header of ``[[],[],...]`` as long as the
    header length (24 bits) and the frame allow."""
    n = (min(PAYLOAD - 4, 0xFFFFFF) - 2) // 3
    header = b"[" + b"[]," * (n - 1) + b"[]]"
    payload = struct.pack(">I", len(header)) + header
    return FRAME_HEADER.pack(len(payload)) + payload


def msgpack_heartbeat_frame() -> bytes:
    """A HEART_BEAT (34; the ACL decodes its body before the signature is
    checked) whose msgpack body is ~16 M empty arrays."""
    n = PAYLOAD - 64
    body = b"\xdd" + struct.pack(">I", n) + b"\x90" * n
    payload = RemotingCommand(code=RequestCode.HEART_BEAT, opaque=1, body=body).encode()
    return framed(payload)


def json_heartbeat_frame() -> bytes:
    """A HEART_BEAT in RocketMQ's format whose JSON body is ``[[],[],...]``."""
    from protocol.codecs import ROCKETMQ_JSON

    head = ROCKETMQ_JSON.encode(RemotingCommand(code=RequestCode.HEART_BEAT, opaque=1))
    n = (PAYLOAD - len(head) - 2) // 3
    body = b"[" + b"[]," * (n - 1) + b"[]]"
    return framed(head + body)


def framed(payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload)) + payload


FRAMES = {"msgpack-remark": msgpack_remark_frame, "msgpack-extFields": msgpack_ext_frame,
          "json-header": json_header_frame, "msgpack-heartbeat-body": msgpack_heartbeat_frame,
          "json-heartbeat-body": json_heartbeat_frame}


def rss_kib(pid: int, key: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} for {pid}")


def reset_peak(pid: int) -> int:
    """Reset the peak RSS (VmHWM) of ``pid`` to its RSS now (Linux's
    clear_refs 5); returns that RSS."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return rss_kib(pid)


def peak_kib(pid: int) -> int:
    """The most ``pid`` held since reset_peak."""
    return rss_kib(pid, "VmHWM")


async def send_frame(port: int, frame: bytes, timeout: float = 60.0) -> RemotingCommand | None:
    """Send ``frame`` on a new connection; the command answered, or None if
    the daemon closed the connection without one."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    decoder = FrameDecoder()
    async with stream:
        with trio.fail_after(timeout):
            try:
                await stream.send_all(frame)
            except trio.BrokenResourceError:
                return None
            while True:
                try:
                    data = await stream.receive_some(65536)
                except trio.BrokenResourceError:  # closed with bytes unread: a reset
                    return None
                if not data:
                    return None
                frames = decoder.feed(data)
                if frames:
                    return detect(frames[0]).decode(frames[0])


def probe_code(daemon: str) -> int:
    return (RequestCode.GET_BROKER_CLUSTER_INFO if daemon == "namesrv"
            else RequestCode.GET_BROKER_RUNTIME_INFO)


# the answers a probe may get: SUCCESS, or NO_PERMISSION from a broker with
# its ACL on (the probe is not signed; an answer is what is timed)
PROBE_ANSWERS = {ResponseCode.SUCCESS}


async def probe(rc: RemotingClient, addr: str, code: int) -> float:
    """Seconds another client waits for an answer to ``code``; asserts it is
    one of PROBE_ANSWERS."""
    started = time.perf_counter()
    resp = await rc.invoke(addr, RemotingCommand.request(code), timeout=60)
    assert resp.code in PROBE_ANSWERS, resp
    return time.perf_counter() - started


@dataclass
class Outcome:
    answers: list[RemotingCommand | None]
    rss_growth_kib: int
    probe_max_s: float


async def attack(pid: int, port: int, daemon: str, frame: bytes, conns: int = 1) -> Outcome:
    """Send ``frame`` on ``conns`` connections at once while probing the
    daemon from another connection every 20 ms; the answers, the peak VmRSS
    growth and the longest probe."""
    addr = f"127.0.0.1:{port}"
    code = probe_code(daemon)
    answers: list[RemotingCommand | None] = []
    start = reset_peak(pid)
    worst = 0.0
    done = trio.Event()
    async with RemotingClient() as rc:
        await probe(rc, addr, code)  # connected before the attack

        async def one() -> None:
            answers.append(await send_frame(port, frame))

        async def prober() -> None:
            nonlocal worst
            while not done.is_set():
                worst = max(worst, await probe(rc, addr, code))
                await trio.sleep(0.02)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(prober)
            async with trio.open_nursery() as senders:
                for _ in range(conns):
                    senders.start_soon(one)
            done.set()
        worst = max(worst, await probe(rc, addr, code))
    return Outcome(answers, peak_kib(pid) - start, worst)


def describe(answer: RemotingCommand | None) -> str:
    if answer is None:
        return "connection closed"
    return f"code {answer.code}: {(answer.remark or '')[:70]}"


ACL_YAML = """accounts:
  - accessKey: rocketmq2
    secretKey: '12345678'
    admin: true
"""


async def report(acl: bool) -> None:
    """With ``acl``, the broker runs with its ACL on (one admin account) and
    only the broker is measured."""
    from tests.integration.cluster import Cluster

    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp))
        try:
            ns = cluster.namesrv()
            targets = []
            if acl:
                acl_file = Path(tmp) / "plain_acl.yml"
                acl_file.write_text(ACL_YAML)
                broker = cluster.broker("broker-a", ns.addr, aclEnable="true",
                                        aclPlainFile=acl_file)
                PROBE_ANSWERS.add(ResponseCode.NO_PERMISSION)
                targets = [("broker", broker)]
            else:
                broker = cluster.broker("broker-a", ns.addr)
                targets = [("namesrv", ns), ("broker", broker)]
            print(f"ACL {'on' if acl else 'off'}", flush=True)
            for daemon, d in targets:
                assert d.proc is not None
                for name, make in FRAMES.items():
                    frame = make()
                    for conns in (1, 20):
                        out = await attack(d.proc.pid, d.port, daemon, frame, conns)
                        kinds = sorted({describe(a) for a in out.answers})
                        print(f"{daemon:8s} {name:18s} x{conns:<2d} RSS +{out.rss_growth_kib / 1024:7.1f}"
                              f" MiB  other client's longest wait {out.probe_max_s * 1000:7.1f} ms"
                              f"  answer: {'; '.join(kinds)}", flush=True)
                assert d.proc.poll() is None, f"{daemon} exited"
        finally:
            cluster.close()


if __name__ == "__main__":
    trio.run(report, "--acl" in sys.argv[1:])
    sys.exit(0)
