"""Bad input to a real broker never stops it serving a well-behaved client."""

from __future__ import annotations

import struct

import msgpack
import trio

from client import Message, Producer, SendStatus
from client.admin import MQAdmin
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import encode_frame
from protocol.headers import SendMessageRequestHeader
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster
from tests.waits import at_least, routed, wait_until

TOPIC = "GoodTopic"


async def raw_exchange(port: int, data: bytes) -> bytes:
    """Send raw bytes, return whatever comes back before the server closes (or 2 s)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    got = b""
    async with stream:
        await stream.send_all(data)
        with trio.move_on_after(2):
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return got + b"<closed>"
                got += chunk
    return got


def send_header(topic: str) -> dict[str, object]:
    return SendMessageRequestHeader(producer_group="bad", topic=topic, queue_id=0).to_fields()


async def test_bad_input_is_refused_and_good_client_served(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, maxMessageSize=4096)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2, write_queue_nums=2)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")

    good_sent = 0
    stop = trio.Event()

    async def good_client() -> None:
        nonlocal good_sent
        async with Producer("good-producer", ns.addr) as producer:
            with trio.fail_after(60):
                while not stop.is_set() and good_sent < 5000:
                    r = await producer.send(Message(TOPIC, b"fine"))
                    assert r.send_status == SendStatus.SEND_OK
                    good_sent += 1
                    await trio.sleep(0.002)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(good_client)
        await wait_until(at_least(lambda: good_sent, 1), 10, "good client running")

        # garbage bytes: a declared length far above 16 MiB -> closed, no answer
        assert await raw_exchange(broker.port, b"\xff\xff\xff\xffgarbage") == b"<closed>"
        # oversize declared length just above the limit
        assert await raw_exchange(broker.port, struct.pack(">I", 16 * 1024 * 1024 + 1)) == b"<closed>"
        # a frame that is not msgpack -> closed
        assert await raw_exchange(broker.port, encode_frame(b"\xc1\xc1\xc1")) == b"<closed>"

        async with RemotingClient() as rc:
            # valid msgpack, wrong structure but readable code/opaque -> SYSTEM_ERROR
            conn = await rc.get_connection(broker.addr)
            payload = msgpack.packb([10, 4242, 0, None, "not-a-map", None, 1])
            data = await raw_exchange(broker.port, encode_frame(payload))
            resp = RemotingCommand.decode(data[4:4 + struct.unpack(">I", data[:4])[0]])
            assert resp.code == ResponseCode.SYSTEM_ERROR and resp.opaque == 4242

            # unknown request code
            r = await conn.invoke(RemotingCommand.request(9999), 3)
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and r.remark
            # wrong header type
            bad = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": 5}, b"x")
            r = await conn.invoke(bad, 3)
            assert r.code == ResponseCode.SYSTEM_ERROR and "producerGroup" in (r.remark or "")
            # oversize body
            big = RemotingCommand.request(RequestCode.SEND_MESSAGE, send_header(TOPIC), b"x" * 5000)
            r = await conn.invoke(big, 3)
            assert r.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize" in (r.remark or "")
            # invalid topic name
            r = await conn.invoke(
                RemotingCommand.request(RequestCode.SEND_MESSAGE, send_header("bad topic!"), b"x"), 3)
            assert r.code == ResponseCode.MESSAGE_ILLEGAL and "bad topic!" in (r.remark or "")
            # reserved system topic
            r = await conn.invoke(
                RemotingCommand.request(RequestCode.SEND_MESSAGE, send_header("SCHEDULE_TOPIC_XXXX"), b"x"), 3)
            assert r.code == ResponseCode.MESSAGE_ILLEGAL
            # the same connection still works
            r = await conn.invoke(
                RemotingCommand.request(RequestCode.SEND_MESSAGE, send_header(TOPIC), b"ok"), 3)
            assert r.code == ResponseCode.SUCCESS

        before = good_sent
        await wait_until(at_least(lambda: good_sent - before, 1), 10, "good client still served")
        stop.set()
    assert broker.proc is not None and broker.proc.poll() is None
