"""gRPC endpoints in routes: a broker's registration carries its gRPC port, the name
server's route hands it on (``grpcPorts``), QueryRoute answers every broker serving gRPC."""

from __future__ import annotations

from typing import Any

import pytest

from broker.grpc.messaging import others_queues
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from namesrv.route_info import RouteInfoManager
from protocol.errors import RemoteProtocolError
from protocol.headers import RegisterBrokerRequestHeader
from protocol.route import PERM_RW, BrokerData, DataVersion, QueueData, TopicConfig, TopicRouteData
from tests.broker.grpc.test_messaging import call, service


def test_broker_data_carries_grpc_ports_only_when_there_are_some() -> None:
    plain = BrokerData("C", "b", {0: "10.0.0.1:10911"})
    assert "grpcPorts" not in plain.to_dict()
    assert BrokerData.from_dict(plain.to_dict()) == plain
    served = BrokerData("C", "b", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}, {0: 8081})
    assert served.to_dict()["grpcPorts"] == {0: 8081}
    assert BrokerData.from_dict(served.to_dict()) == served
    assert BrokerData.from_dict({**served.to_dict(), "grpcPorts": {"0": 8081}}) == served
    for bad in ({0: 0}, {0: 70000}, {0: "8081"}, {"x": 8081}):
        with pytest.raises(RemoteProtocolError):
            BrokerData.from_dict({**served.to_dict(), "grpcPorts": bad})


def test_register_header_grpc_port_bounded() -> None:
    h = RegisterBrokerRequestHeader("b", "10.0.0.1:10911", "C", 0, grpc_port=8081)
    assert RegisterBrokerRequestHeader.from_fields(h.to_fields()).grpc_port == 8081
    with pytest.raises(RemoteProtocolError):
        RegisterBrokerRequestHeader.from_fields({**h.to_fields(), "grpcPort": "0"})


def test_name_server_route_names_each_members_grpc_port() -> None:
    routes = RouteInfoManager()
    topics = {"T": TopicConfig("T", 4, 4)}
    routes.register_broker("C", "10.0.0.1:10911", "a", 0, None, topics, DataVersion(), None, 0.0,
                           grpc_port=8081)
    routes.register_broker("C", "10.0.0.2:10911", "a", 1, None, topics, DataVersion(), None, 0.0)
    routes.register_broker("C", "10.0.0.3:10911", "b", 0, None, topics, DataVersion(), None, 0.0,
                           grpc_port=9081)
    route = routes.pickup_topic_route_data("T")
    assert route is not None
    assert {bd.broker_name: bd.grpc_ports for bd in route.broker_datas} == \
        {"a": {0: 8081}, "b": {0: 9081}}


def route(*brokers: tuple[str, dict[int, str], dict[int, int]]) -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData(name, 2, 2, PERM_RW) for name, _, _ in brokers],
        broker_datas=[BrokerData("C", name, addrs, ports) for name, addrs, ports in brokers])


def test_other_brokers_queues() -> None:
    r = route(("broker-a", {0: "10.0.0.1:10911"}, {0: 8081}),
              ("b", {0: "10.0.0.2:10911"}, {0: 9081}),
              ("no-grpc", {0: "10.0.0.3:10911"}, {}),
              ("slave-only", {1: "[::1]:10911"}, {1: 7000}))
    queues = others_queues(r, "T", "broker-a", "")
    got = [(q.broker.name, q.broker.id, q.id, q.permission,
            q.broker.endpoints.addresses[0].host, q.broker.endpoints.addresses[0].port)
           for q in queues]
    assert got == [("b", 0, 0, pb.READ_WRITE, "10.0.0.2", 9081),
                   ("b", 0, 1, pb.READ_WRITE, "10.0.0.2", 9081),
                   ("slave-only", 1, 0, pb.READ, "::1", 7000),
                   ("slave-only", 1, 1, pb.READ, "::1", 7000)]
    assert queues[-1].broker.endpoints.scheme == pb.IPv6


async def test_query_route_adds_the_name_servers_brokers() -> None:
    asked: list[str] = []

    async def lookup(topic: str) -> TopicRouteData | None:
        asked.append(topic)
        return route(("b", {0: "10.0.0.2:10911"}, {0: 9081}))

    svc, _, _, _ = service()
    svc.routes = lookup
    _, (raw,) = await call(svc, "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name="T")))
    answer = spb.QueryRouteResponse.FromString(raw)
    assert asked == ["T"]
    assert [(q.broker.name, q.id) for q in answer.message_queues] == [
        ("broker-a", 0), ("broker-a", 1), ("broker-a", 2), ("broker-a", 3), ("b", 0), ("b", 1)]


async def test_query_route_without_name_servers_answers_its_own_queues() -> None:
    async def down(topic: str) -> Any:
        raise OSError("connection refused")

    svc, _, _, _ = service()
    svc.routes = down
    _, (raw,) = await call(svc, "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name="T")))
    answer = spb.QueryRouteResponse.FromString(raw)
    assert answer.status.code == pb.OK
    assert {q.broker.name for q in answer.message_queues} == {"broker-a"}
