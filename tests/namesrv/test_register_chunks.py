"""A large registration is read and applied in steps, look-ups served between.

The processor's step generator is driven by hand (no trio): nothing is applied
before the whole body is checked, then the topics appear chunk by chunk; a
registration superseded or whose connection closed stops at its next step.
Last, the same over a real connection: a look-up sent after a large
REGISTER_BROKER is answered before it.
"""

from __future__ import annotations

import zlib
from collections.abc import Generator
from typing import Any

import pytest
import trio
import trio.testing

from namesrv.processor import Inflating, NamesrvProcessor, RegisterBody, parse_register_steps
from namesrv.route_info import RouteInfoManager, drain
from protocol.body import compress_body, pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import RegisterBrokerRequestHeader
from protocol.route import DataVersion, TopicConfig
from protocol.trio.connection import RemotingConnection

ADDR = "127.0.0.1:10911"


class Conn:
    closed = False

    def __init__(self, peer: str = "127.0.0.1:50001") -> None:
        self.remote_addr = peer


def register_cmd(names: list[str], counter: int = 1, bad_last: bool = False) -> RemotingCommand:
    table = {n: TopicConfig(n, 4, 4).to_dict() for n in names}
    if bad_last:
        table["Bad"] = dict(TopicConfig("Bad").to_dict(), writeQueueNums=10**6)
    body = compress_body(pack_body({"dataVersion": {"timestamp": 1, "counter": counter},
                                    "topicConfigTable": table}))
    header = RegisterBrokerRequestHeader(broker_name="broker-a", broker_addr=ADDR,
                                         cluster_name="C", broker_id=0, compressed=True,
                                         body_crc32=zlib.crc32(body) & 0x7FFFFFFF)
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_fields(), body)


def setup(chunk: int = 100) -> tuple[RouteInfoManager, NamesrvProcessor]:
    routes = RouteInfoManager()
    routes.register_broker("C", "127.0.0.1:20911", "broker-b", 0, None,
                           {"Other": TopicConfig("Other", 2, 2)}, DataVersion(1, 1),
                           Conn("127.0.0.1:60000"), 0.0)
    return routes, NamesrvProcessor(routes, lambda: 0.0, chunk=chunk)


def steps_of(processor: NamesrvProcessor, conn: Conn, cmd: RemotingCommand
             ) -> Generator[None, None, Any]:
    h = RegisterBrokerRequestHeader.from_fields(cmd.ext_fields)
    return processor.register_steps(conn, cmd, h)  # type: ignore[arg-type]


def mine(routes: RouteInfoManager) -> set[str]:
    return {t for t, q in routes.topic_queue_table.items() if "broker-a" in q}


def test_a_large_registration_is_checked_whole_then_applied_in_chunks() -> None:
    routes, processor = setup(chunk=100)
    conn = Conn()
    drain(steps_of(processor, conn, register_cmd(["Stale1", "Stale2"])))
    names = [f"T{i:05d}" for i in range(5000)]
    steps = steps_of(processor, conn, register_cmd(names, counter=2))
    seen: list[int] = []
    response = None
    for _ in range(10_000):
        try:
            next(steps)
        except StopIteration as stop:
            response = stop.value
            break
        # served between any two steps
        route = routes.pickup_topic_route_data("Other")
        assert route is not None and route.queue_datas[0].write_queue_nums == 2
        seen.append(len(mine(routes) - {"Stale1", "Stale2"}))
    assert response is not None and response.code == ResponseCode.SUCCESS
    assert len(seen) >= 100  # 5,000 topics read, then applied, 100 at a time
    assert seen[: len(seen) // 3] == [0] * (len(seen) // 3)  # nothing before the body is checked
    assert any(0 < n < 5000 for n in seen)  # then chunk by chunk
    assert mine(routes) == set(names)  # and the old topics gone at the end
    assert routes.broker_live_table[ADDR].data_version == DataVersion(1, 2)


def test_a_bad_topic_anywhere_refuses_the_whole_registration() -> None:
    routes, processor = setup()
    conn = Conn()
    drain(steps_of(processor, conn, register_cmd(["Keep"])))
    with pytest.raises(RemoteProtocolError, match="maxQueueNums"):
        drain(steps_of(processor, conn, register_cmd([f"T{i}" for i in range(3000)], 2,
                                                     bad_last=True)))
    assert mine(routes) == {"Keep"}


def test_a_registration_superseded_or_disconnected_stops_at_its_next_step() -> None:
    routes, processor = setup(chunk=100)
    conn = Conn()
    names = [f"T{i:05d}" for i in range(3000)]
    steps = steps_of(processor, conn, register_cmd(names))
    for _ in range(10_000):  # until it is half applied
        next(steps)
        if len(mine(routes)) > 1000:
            break
    drain(steps_of(processor, conn, register_cmd(["Newer"], counter=5)))
    assert mine(routes) == {"Newer"}
    response = drain(steps)
    assert response.code == ResponseCode.SYSTEM_ERROR and "superseded" in response.remark
    assert mine(routes) == {"Newer"}
    assert routes.broker_live_table[ADDR].data_version == DataVersion(1, 5)

    steps = steps_of(processor, conn, register_cmd(names, counter=6))
    for _ in range(10_000):
        next(steps)
        if len(mine(routes)) > 1000:
            break
    routes.on_connection_destroyed(conn)
    assert drain(steps).code == ResponseCode.SYSTEM_ERROR
    assert mine(routes) == set() and ADDR not in routes.broker_live_table
    assert routes.pickup_topic_route_data("Other") is not None


def test_compressed_bodies_are_inflated_as_read_and_bounded() -> None:
    def parse(body: bytes, max_size: int) -> RegisterBody:
        out = RegisterBody()
        drain(parse_register_steps(Inflating(body, max_size), out, 1024))
        return out

    names = [f"T{i:05d}" for i in range(20_000)]
    table = {n: TopicConfig(n).to_dict() for n in names}
    plain = pack_body({"topicConfigTable": table})
    assert list(parse(compress_body(plain), len(plain)).topics) == names
    with pytest.raises(RemoteProtocolError, match="inflates past"):
        parse(compress_body(plain), len(plain) - 1)
    with pytest.raises(RemoteProtocolError, match="inflates past"):  # a bomb
        parse(compress_body(pack_body({"pad": "x" * (32 * 1024 * 1024)})), 8 * 1024 * 1024)
    with pytest.raises(RemoteProtocolError, match="must be a map"):  # refused at once
        parse(compress_body(bytes(64 * 1024 * 1024)), 8 * 1024 * 1024)
    with pytest.raises(RemoteProtocolError, match="truncated"):
        parse(compress_body(plain)[:-100], 1 << 30)
    with pytest.raises(RemoteProtocolError, match="undecodable"):
        parse(b"not zlib", 1024)
    with pytest.raises(RemoteProtocolError, match="extra data"):
        parse(compress_body(plain + pack_body(1)), 1 << 30)


async def test_look_ups_are_answered_while_a_large_registration_applies() -> None:
    routes, _ = setup()
    processor = NamesrvProcessor(routes, trio.current_time, chunk=100,
                                 pause=trio.lowlevel.checkpoint)
    client_stream, server_stream = trio.testing.memory_stream_pair()
    server = RemotingConnection(server_stream, processor.handler_table(),
                                remote_addr="127.0.0.1:50001")
    client = RemotingConnection(client_stream, remote_addr="namesrv")
    done: list[str] = []
    names = [f"T{i:05d}" for i in range(20_000)]
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        await nursery.start(client.run)

        async def register() -> None:
            r = await client.invoke(register_cmd(names), 30)
            assert r.code == ResponseCode.SUCCESS, r.remark
            done.append("register")

        async def look_up() -> None:
            r = await client.invoke(RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Other"}), 30)
            assert r.code == ResponseCode.SUCCESS
            done.append("look-up")

        async with trio.open_nursery() as requests:
            requests.start_soon(register)
            with trio.fail_after(10):  # until the name server has begun applying it
                while processor.chunked_registrations == 0:
                    await trio.lowlevel.checkpoint()
            requests.start_soon(look_up)
        client.close()
        server.close()
    assert done == ["look-up", "register"]
    assert processor.chunked_registrations == 1
    assert mine(routes) == set(names)


def test_a_large_broker_gone_is_unrouted_at_once_and_removed_in_steps() -> None:
    routes = RouteInfoManager(deferred_removal=True)
    woken: list[int] = []
    routes.on_pending_removal = lambda: woken.append(1)
    a, b = Conn("127.0.0.1:50001"), Conn("127.0.0.1:50002")
    names = [f"T{i:05d}" for i in range(5000)]
    routes.register_broker("C", ADDR, "broker-a", 0, None,
                           {n: TopicConfig(n) for n in [*names, "Shared"]}, DataVersion(1, 1),
                           a, 0.0)
    routes.register_broker("C", "127.0.0.1:20911", "broker-b", 0, None,
                           {"Other": TopicConfig("Other"), "Shared": TopicConfig("Shared")},
                           DataVersion(1, 1), b, 0.0)
    routes.on_connection_destroyed(a)
    assert woken == [1] and "broker-a" in routes.pending_removals
    # not routed from now on, though its queue data is still to be removed
    assert routes.pickup_topic_route_data("T00001") is None
    shared = routes.pickup_topic_route_data("Shared")
    assert shared is not None and [q.broker_name for q in shared.queue_datas] == ["broker-b"]
    assert routes.get_all_topic_list() == ["Other", "Shared"]
    steps = sum(1 for _ in routes.removal_steps(chunk=500))
    assert steps >= 10 and not routes.pending_removals
    assert sorted(routes.topic_queue_table) == ["Other", "Shared"]

    # the master back while its old queue data is being removed: its table wins
    routes.register_broker("C", ADDR, "broker-a", 0, None, {n: TopicConfig(n) for n in names},
                           DataVersion(2, 2), a, 1.0)
    routes.on_connection_destroyed(a)
    removal = routes.removal_steps(chunk=500)
    next(removal)
    routes.register_broker("C", ADDR, "broker-a", 0, None, {"Back": TopicConfig("Back")},
                           DataVersion(3, 3), Conn("127.0.0.1:50003"), 2.0)
    assert drain(removal) is None and not routes.pending_removals
    assert sorted(routes.topic_queue_table) == ["Back", "Other", "Shared"]
