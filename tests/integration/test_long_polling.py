"""Long polling against a real broker: held pulls answered on arrival or at
timeout; thousands of holds whose tags match nothing cost sends nothing; a
pull over a bound on held pulls is answered at once."""

from __future__ import annotations

import contextlib
import time

import trio
import trio.testing

from broker.pull_processor import FLAG_SUBSCRIPTION, FLAG_SUSPEND
from client import Message, Producer, SendStatus
from client.admin import MQAdmin
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    GetMaxOffsetRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from protocol.record import decode_records
from protocol.trio.client import RemotingClient
from protocol.trio.connection import RemotingConnection
from protocol.trio.errors import RemotingConnectError
from tests.integration.cluster import Cluster, free_port
from tests.integration.test_metrics import scrape, value
from tests.waits import routed, wait_until

TOPIC = "PollTopic"


def pull_cmd(offset: int, suspend_ms: int, expression: str = "*") -> RemotingCommand:
    h = PullMessageRequestHeader(consumer_group="poll", topic=TOPIC, queue_id=0, queue_offset=offset,
                                 max_msg_nums=32, sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION,
                                 suspend_timeout_millis=suspend_ms, subscription=expression)
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, h.to_fields())


async def test_held_pull_answered_on_arrival_and_at_timeout(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    metrics = free_port(1)
    broker = cluster.broker("broker-a", ns.addr, metricsPort=metrics)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1, write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")

    async def held_pulls(n: int) -> bool:
        """The broker holds ``n`` pulls (its metrics' gauge)."""
        held = value(await scrape(metrics), "rocketmq_brokeruntime_pull_requests_held")
        return held == n

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
            await wait_until(lambda: held_pulls(1), 10, "the pull held")
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
            await wait_until(lambda: held_pulls(1), 10, "the tagged pull held")
            await producer.send(Message(TOPIC, b"other", tags="TagA"))
            # its arrival was seen (the max offset counts it) and no wake-up answered
            # the held pull: that answer would have come first on this connection
            assert await max_offset(conn, TOPIC) == 2
            await trio.testing.wait_all_tasks_blocked()
            assert "tagged" not in got
            assert await held_pulls(1)
            await producer.send(Message(TOPIC, b"mine", tags="TagB"))
        tagged = got["tagged"]
        assert isinstance(tagged, RemotingCommand) and tagged.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_records(tagged.body or b"")] == [b"mine"]


# ---- many holds, bounds ---------------------------------------------------------------

CROWD = "PollCrowd"
HOLD_MS = 60_000  # the broker allows it (longPollingMaxSuspendMillis); the test closes first


def crowd_pull(offset: int, tags: str, suspend_ms: int = HOLD_MS) -> RemotingCommand:
    h = PullMessageRequestHeader(consumer_group="crowd", topic=CROWD, queue_id=0,
                                 queue_offset=offset, max_msg_nums=32,
                                 sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION,
                                 suspend_timeout_millis=suspend_ms, subscription=tags)
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, h.to_fields())


async def max_offset(conn: RemotingConnection, topic: str = CROWD) -> int:
    """GET_MAX_OFFSET of the topic's queue 0. Also a marker: a connection's
    requests are handled in order, so once it is answered every pull sent
    before it on ``conn`` was held or answered, and so was every held pull a
    message stored before it (its arrival dispatched) would wake."""
    r = await conn.invoke(RemotingCommand.request(
        RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(topic, 0).to_fields()), 30)
    assert r.code == ResponseCode.SUCCESS, r
    return OffsetResponseHeader.from_fields(r.ext_fields).offset


class Pulls:
    """Pulls in flight; their answers as they come."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.answers: list[tuple[str, RemotingCommand]] = []
        self.arrived = trio.Event()

    def start(self, name: str, conn: RemotingConnection, cmd: RemotingCommand) -> None:
        async def one() -> None:
            try:
                r = await conn.invoke(cmd, HOLD_MS / 1000 + 30)
            except RemotingConnectError:
                return  # the test closed the connection
            self.answers.append((name, r))
            self.arrived.set()
        self.nursery.start_soon(one)

    def of(self, name: str) -> list[RemotingCommand]:
        return [r for n, r in self.answers if n == name]


async def crowd_topic(ns_addr: str, broker_addr: str) -> None:
    async with MQAdmin(ns_addr) as admin:
        await admin.create_topic(CROWD, broker_addr=broker_addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, CROWD), 10, "topic routed")


async def test_thousands_of_holds_for_other_tags_do_not_slow_sends(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, longPollingMaxSuspendMillis=HOLD_MS)
    await crowd_topic(ns.addr, broker.addr)
    holds, per_conn = 5_000, 1_000  # under maxHeldPullsPerConnection (1,024)
    async with contextlib.AsyncExitStack() as stack:
        producer = await stack.enter_async_context(Producer("crowd-producer", ns.addr))
        assert (await producer.send(Message(CROWD, b"before", tags="Other"))).send_status \
            is SendStatus.SEND_OK
        clients = [await stack.enter_async_context(RemotingClient())
                   for _ in range(holds // per_conn + 1)]
        conns = [await rc.get_connection(broker.addr) for rc in clients]
        start = await max_offset(conns[0])
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                pulls = Pulls(nursery)
                for conn in conns[:-1]:
                    for _ in range(per_conn):
                        pulls.start("crowd", conn, crowd_pull(start, "NoSuch || Nothing"))
                pulls.start("match", conns[-1], crowd_pull(start, "Match"))
                for conn in conns:
                    assert await max_offset(conn) == start  # every pull taken: held
                assert pulls.answers == []

                sent = []
                with trio.fail_after(20):  # ~0.2 ms each on a quiet machine; 623 ms before
                    for i in range(200):
                        sent.append(await producer.send(Message(CROWD, b"o%d" % i, tags="Other")))
                assert [r.send_status for r in sent] == [SendStatus.SEND_OK] * 200
                for conn in conns:
                    assert await max_offset(conn) == start + 200
                assert pulls.answers == []  # nothing for them: still held

                await producer.send(Message(CROWD, b"for you", tags="Match"))
                with trio.fail_after(10):
                    while not pulls.of("match"):  # bounded by the fail_after
                        pulls.arrived = trio.Event()
                        await pulls.arrived.wait()
                (got,) = pulls.of("match")
                assert got.code == ResponseCode.SUCCESS
                assert [m.body for m in decode_records(got.body or b"")] == [b"for you"]
                assert pulls.of("crowd") == []
                nursery.cancel_scope.cancel()  # the connections close: the broker drops the holds


async def held_or_answered(pulls: Pulls, name: str, conn: RemotingConnection,
                           offset: int) -> bool:
    """Send one pull on ``conn``: True when it is held, False when it was answered
    at once (its answer comes before that of a request sent after it)."""
    before = len(pulls.of(name))
    pulls.start(name, conn, crowd_pull(offset, "*"))
    await trio.testing.wait_all_tasks_blocked()  # the pull is on its way
    await max_offset(conn)
    await trio.testing.wait_all_tasks_blocked()  # an answer that came is recorded
    return len(pulls.of(name)) == before


async def test_a_pull_over_the_bounds_is_answered_at_once(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, longPollingMaxSuspendMillis=HOLD_MS,
                            maxHeldPullsPerConnection=100, maxHeldPulls=150)
    await crowd_topic(ns.addr, broker.addr)
    async with RemotingClient() as one, RemotingClient() as two, RemotingClient() as three:
        a = await one.get_connection(broker.addr)
        b = await two.get_connection(broker.addr)
        c = await three.get_connection(broker.addr)
        start = await max_offset(a)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                pulls = Pulls(nursery)
                for _ in range(100):
                    pulls.start("a", a, crowd_pull(start, "*"))
                assert await max_offset(a) == start and pulls.answers == []
                pulls.start("a", a, crowd_pull(start, "*"))  # the connection's 101st
                with trio.fail_after(10):  # at once, not after its 60 s suspend time
                    while not pulls.of("a"):  # bounded by the fail_after
                        pulls.arrived = trio.Event()
                        await pulls.arrived.wait()
                (r,) = pulls.of("a")
                assert r.code == ResponseCode.PULL_NOT_FOUND
                assert PullMessageResponseHeader.from_fields(r.ext_fields).next_begin_offset \
                    == start
                # the broker's 151st
                for _ in range(50):
                    pulls.start("b", b, crowd_pull(start, "*"))
                assert await max_offset(b) == start and pulls.of("b") == []
                assert not await held_or_answered(pulls, "b", b, start)
                # a closed connection's holds are dropped: its places are free again
                one.close_connection(broker.addr)

                async def c_can_hold() -> bool:
                    return await held_or_answered(pulls, "c", c, start)
                await wait_until(c_can_hold, 20, "holds of the closed connection dropped")
                assert len(pulls.of("b")) == 1  # the refused one: b's 50 holds are still held
                nursery.cancel_scope.cancel()
