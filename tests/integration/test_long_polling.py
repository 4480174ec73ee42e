"""Long polling against a real broker: held pulls answered on arrival or at timeout."""

from __future__ import annotations

import time

import trio

from broker.pull_processor import FLAG_SUSPEND
from client import Message, Producer
from client.admin import MQAdmin
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import PullMessageRequestHeader
from protocol.record import decode_records
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster
from tests.integration.waits import routed, wait_for

TOPIC = "PollTopic"


def pull_cmd(offset: int, suspend_ms: int, expression: str = "*") -> RemotingCommand:
    h = PullMessageRequestHeader(consumer_group="poll", topic=TOPIC, queue_id=0, queue_offset=offset,
                                 max_msg_nums=32, sys_flag=FLAG_SUSPEND,
                                 suspend_timeout_millis=suspend_ms, subscription=expression)
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, h.to_fields())


async def test_held_pull_answered_on_arrival_and_at_timeout(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1, write_queue_nums=1)
        await wait_for(routed(admin, TOPIC), 10, "topic routed")
    async with RemotingClient() as rc, Producer("poll-producer", ns.addr) as producer:
        conn = await rc.get_connection(broker.addr)
        # nothing arrives: answered empty at the (short) suspend timeout, not before
        t0 = time.monotonic()
        r = await conn.invoke(pull_cmd(0, 800), 5)
        waited = time.monotonic() - t0
        assert r.code == ResponseCode.PULL_NOT_FOUND and 0.7 <= waited < 3

        # a send while the pull is held: answered within milliseconds of the send
        got: dict[str, object] = {}

        async def held_pull() -> None:
            got["resp"] = await conn.invoke(pull_cmd(0, 10_000), 15)
            got["at"] = time.monotonic()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(held_pull)
            await trio.sleep(0.5)
            assert "resp" not in got
            sent_at = time.monotonic()
            await producer.send(Message(TOPIC, b"wake up"))
        resp = got["resp"]
        assert isinstance(resp, RemotingCommand) and resp.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_records(resp.body or b"")] == [b"wake up"]
        assert float(got["at"]) - sent_at < 0.5  # type: ignore[arg-type]

        # a held pull with a tag filter ignores other tags and wakes on its own
        async def tagged_pull() -> None:
            got["tagged"] = await conn.invoke(pull_cmd(1, 10_000, "TagB"), 15)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(tagged_pull)
            await trio.sleep(0.3)
            await producer.send(Message(TOPIC, b"other", tags="TagA"))
            await trio.sleep(0.3)
            assert "tagged" not in got
            await producer.send(Message(TOPIC, b"mine", tags="TagB"))
        tagged = got["tagged"]
        assert isinstance(tagged, RemotingCommand) and tagged.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_records(tagged.body or b"")] == [b"mine"]
