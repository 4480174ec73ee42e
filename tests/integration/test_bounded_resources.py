"""Misbehaving clients against a real broker (issue 14): what they can make it
hold is bounded, it answers SYSTEM_BUSY rather than queueing, and it closes
what it should. Mechanisms are asserted; times only with wide margins."""

from __future__ import annotations

import socket

import trio

from bench.attacks import heartbeat_body
from broker.pull_processor import FLAG_SUBSCRIPTION
from client import Message, Producer, SendStatus
from client.admin import MQAdmin
from protocol.body import pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.headers import PullMessageRequestHeader
from protocol.trio.client import RemotingClient
from protocol.trio.memory import rss_bytes
from tests.integration.cluster import Cluster, Daemon
from tests.waits import routed, wait_until

TOPIC = "BoundTopic"
MiB = 1024 * 1024


async def setup(cluster: Cluster, **props: object) -> tuple[Daemon, Daemon]:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, True, **props)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
    return ns, broker


async def probe(ns: str, n: int) -> list[SendStatus]:
    """A normal client's sends while an attack goes on."""
    out = []
    async with Producer("bound-probe", ns, send_msg_timeout=10) as p:
        for i in range(n):
            out.append((await p.send(Message(TOPIC, b"probe-%d" % i))).send_status)
    return out


def frame(code: int, opaque: int, fields: dict[str, object] | None = None,
          body: bytes | None = None) -> bytes:
    cmd = RemotingCommand(code=code, opaque=opaque, ext_fields=fields or {}, body=body)
    return encode_frame(cmd.encode())


async def test_a_client_that_never_reads_its_pulls(cluster: Cluster) -> None:
    ns, broker = await setup(cluster, serverChannelMaxIdleTimeSeconds=3)
    async with Producer("bound-fill", ns.addr) as p:
        for _ in range(40):
            await p.send_batch([Message(TOPIC, b"x" * 1024) for _ in range(50)])
    assert broker.proc is not None
    start_rss = rss_bytes(broker.proc.pid)
    assert start_rss is not None
    pull = PullMessageRequestHeader("bound-reader", TOPIC, 0, 0, 32,
                                    sys_flag=FLAG_SUBSCRIPTION).to_fields()
    request = frame(RequestCode.PULL_MESSAGE, 1, pull)  # 32 x 1 KiB answered, never read
    s = socket.create_connection(("127.0.0.1", broker.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    s.setblocking(False)
    written = 0
    peak = start_rss
    closed = False
    statuses: list[SendStatus] = []
    async with trio.open_nursery() as nursery:
        async def normal_client() -> None:
            statuses.extend(await probe(ns.addr, 50))

        nursery.start_soon(normal_client)
        with trio.move_on_after(60):
            stalled_since = trio.current_time()
            while True:
                try:
                    written += s.send(request * 64)
                    stalled_since = trio.current_time()
                except BlockingIOError:
                    if trio.current_time() - stalled_since > 1:  # the broker stopped reading
                        peak = max(peak, rss_bytes(broker.proc.pid) or 0)
                    await trio.sleep(0.05)
                except OSError:  # reset: the broker closed us
                    closed = True
                    break
    s.close()
    assert closed, "the broker kept a connection whose peer reads nothing"
    assert statuses == [SendStatus.SEND_OK] * 50
    # the broker read a few MiB of requests at most before it stopped reading
    assert peak - start_rss < 4 * MiB + 100 * MiB
    assert written < 64 * MiB

    async def rss_back() -> bool:
        now = rss_bytes(broker.proc.pid) if broker.proc else None
        return now is not None and now < start_rss + 100 * MiB

    await wait_until(rss_back, 30, "the broker's memory back near where it was")


async def test_a_heartbeat_flood_is_answered_busy_and_sends_go_on(cluster: Cluster) -> None:
    ns, broker = await setup(cluster, heartbeatLanePercent=5)
    body = pack_body({"clientID": "flood@1", "producerDataSet": [{"groupName": "flood-g"}],
                      "consumerDataSet": []})
    busy = ok = 0
    statuses: list[SendStatus] = []
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        async def normal_client() -> None:
            statuses.extend(await probe(ns.addr, 100))
            done.set()

        nursery.start_soon(normal_client)
        stream = await trio.open_tcp_stream("127.0.0.1", broker.port)
        decoder = FrameDecoder()
        with trio.move_on_after(30):
            opaque = 0
            while not (done.is_set() and busy and ok):
                batch = b"".join(frame(RequestCode.HEART_BEAT, opaque + i, body=body)
                                 for i in range(200))
                opaque += 200
                await stream.send_all(batch)
                got = 0
                while got < 200:
                    for payload in decoder.feed(await stream.receive_some(1 << 20)):
                        r = RemotingCommand.decode(payload)
                        busy += r.code == ResponseCode.SYSTEM_BUSY
                        ok += r.code == ResponseCode.SUCCESS
                        got += 1
        await stream.aclose()
    assert statuses == [SendStatus.SEND_OK] * 100
    assert busy > 0 and ok > 0  # answered, some refused: never silence


async def test_idle_half_frame_and_too_many_connections(cluster: Cluster) -> None:
    ns, broker = await setup(cluster, serverChannelMaxIdleTimeSeconds=2,
                             frameReadTimeoutSeconds=1, maxConnectionsPerAddress=40)
    half = []
    for _ in range(3):
        s = await trio.open_tcp_stream("127.0.0.1", broker.port)
        await s.send_all(encode_frame(b"y" * MiB)[:5])  # a 1 MiB frame, one byte given
        half.append(s)
    idle = [await trio.open_tcp_stream("127.0.0.1", broker.port) for _ in range(10)]

    async def closed_by_broker(stream: trio.SocketStream) -> float:
        with trio.fail_after(30):
            assert await stream.receive_some(10) == b""
        return trio.current_time()

    t0 = trio.current_time()
    half_closed = [await closed_by_broker(s) - t0 for s in half]
    idle_closed = [await closed_by_broker(s) - t0 for s in idle]
    assert max(half_closed) < min(idle_closed)  # 1 s for a frame, 2 s of silence
    # past the limit per address a connection is closed at once, with a log line
    many = [await trio.open_tcp_stream("127.0.0.1", broker.port) for _ in range(60)]
    refused = 0

    async def ended(stream: trio.SocketStream) -> None:
        nonlocal refused
        with trio.move_on_after(0.5):  # well within the 2 s idle timeout
            if await stream.receive_some(10) == b"":
                refused += 1

    async with trio.open_nursery() as nursery:
        for s in many:
            nursery.start_soon(ended, s)
    assert refused == 20
    assert "too many connections from one address" in broker.log_text()
    for s in [*half, *idle, *many]:
        await s.aclose()
    # and the broker still serves
    assert await probe(ns.addr, 5) == [SendStatus.SEND_OK] * 5


async def test_ten_thousand_new_consumer_groups_register(cluster: Cluster) -> None:
    ns, broker = await setup(cluster)
    groups = [f"NewGroup{i}" for i in range(10_000)]
    pending = list(groups)
    busy = 0
    statuses: list[SendStatus] = []

    async def normal_client() -> None:
        statuses.extend(await probe(ns.addr, 100))

    async def member(k: int) -> None:
        """One client connection: first heart beats of its share of the groups,
        each a clustering consumer of the topic; SYSTEM_BUSY is tried again."""
        nonlocal busy
        stream = await trio.open_tcp_stream("127.0.0.1", broker.port)
        decoder = FrameDecoder()
        mine = pending[k::4]
        opaque = 0
        while mine:
            batch, mine = mine[:64], mine[64:]
            await stream.send_all(b"".join(
                frame(RequestCode.HEART_BEAT, opaque + i,
                      body=heartbeat_body(f"c{k}@{g}", consumer_group=g, topic=TOPIC))
                for i, g in enumerate(batch)))
            answers: dict[int, int] = {}
            while len(answers) < len(batch):
                for payload in decoder.feed(await stream.receive_some(1 << 20)):
                    r = RemotingCommand.decode(payload)
                    if r.is_response:  # not the broker's NOTIFY_CONSUMER_IDS_CHANGED
                        answers[r.opaque - opaque] = r.code
            retry = [g for i, g in enumerate(batch) if answers[i] == ResponseCode.SYSTEM_BUSY]
            assert all(c in (ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY)
                       for c in answers.values())
            busy += len(retry)
            if retry:
                await trio.sleep(0.2)
            mine = retry + mine
            opaque += len(batch)
        await stream.aclose()

    # a bound against a hang, not a speed test: the figure is mqbench attack groups'
    with trio.fail_after(180):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(normal_client)
            for k in range(4):
                nursery.start_soon(member, k)
    assert statuses == [SendStatus.SEND_OK] * 100
    async with RemotingClient() as rc:
        r = await rc.invoke(broker.addr, RemotingCommand.request(
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 10)
        table = unpack_body(r.body)["subscriptionGroupTable"]
    assert set(groups) <= set(table)
    retry_topics = {f"%RETRY%{g}" for g in groups}
    async with MQAdmin(ns.addr) as admin:
        async def all_listed() -> bool:
            return retry_topics <= set(await admin.topic_list())

        await wait_until(all_listed, 30, "every retry topic listed by the name server")
