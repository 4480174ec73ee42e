"""Forged registrations: a live registration belongs to its connection.

Pure RouteInfoManager and processor with stand-in connections: the real
broker's routes stay while its connection is open and its registration fresh;
once the connection closed or the registration expired, a broker registers
again under the same name and address.
"""

from __future__ import annotations

import structlog
from structlog.testing import capture_logs

from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader
from protocol.route import DataVersion, TopicConfig

ADDR = "127.0.0.1:10911"


class Conn:
    def __init__(self, peer: str) -> None:
        self.remote_addr = peer
        self.closed = False


def real(routes: RouteInfoManager, conn: Conn, now: float = 0.0) -> None:
    r = routes.register_broker("C", ADDR, "broker-a", 0, None, {"Real": TopicConfig("Real", 4, 4)},
                               DataVersion(1, 1), conn, now)
    assert r.refused is None


def forged(routes: RouteInfoManager, conn: Conn, now: float = 1.0, addr: str = ADDR,
           cluster: str = "C", broker_id: int = 0) -> str | None:
    return routes.register_broker(cluster, addr, "broker-a", broker_id, None, {},
                                  DataVersion(9, 9), conn, now).refused


def routes_real(routes: RouteInfoManager) -> bool:
    route = routes.pickup_topic_route_data("Real")
    return (route is not None and route.broker_datas[0].broker_addrs[0] == ADDR
            and [q.write_queue_nums for q in route.queue_datas] == [4])


def test_another_connection_cannot_replace_a_live_broker() -> None:
    routes = RouteInfoManager(channel_expired_s=120)
    broker, attacker = Conn("127.0.0.1:50001"), Conn("127.0.0.1:50002")
    real(routes, broker)
    assert "another live connection" in (forged(routes, attacker) or "")
    assert "another live connection" in (forged(routes, attacker, addr="127.0.0.1:1") or "")
    assert "cluster C" in (forged(routes, attacker, addr="127.0.0.1:1", cluster="X",
                                  broker_id=2) or "")
    assert routes_real(routes)
    assert routes.broker_live_table[ADDR].connection is broker
    # a slave of the broker on its own connection is no conflict
    slave = Conn("127.0.0.1:50003")
    assert forged(routes, slave, addr="127.0.0.1:10921", broker_id=1) is None
    assert routes_real(routes)
    # nor is the broker itself registering again
    real(routes, broker, now=30.0)
    # unregistering from another connection is refused too
    assert routes.unregister_broker("C", ADDR, "broker-a", 0, attacker, 31.0) is not None
    assert routes_real(routes)
    assert routes.unregister_broker("C", ADDR, "broker-a", 0, broker, 32.0) is None
    route = routes.pickup_topic_route_data("Real")  # the slave still serves it
    assert route is not None and route.broker_datas[0].broker_addrs == {1: "127.0.0.1:10921"}


def test_the_broker_registers_again_once_its_connection_closed_or_expired() -> None:
    routes = RouteInfoManager(channel_expired_s=120)
    old, new = Conn("127.0.0.1:50001"), Conn("127.0.0.1:50002")
    real(routes, old)
    old.closed = True  # closed but not yet removed (the close callback comes later)
    real(routes, new, now=1.0)
    assert routes.broker_live_table[ADDR].connection is new
    # silent past the window: another connection may take over before the scan ran
    newer = Conn("127.0.0.1:50003")
    assert forged(routes, newer, now=120.5) is not None
    assert forged(routes, newer, now=121.5) is None


def test_the_same_peer_endpoint_is_the_same_connection() -> None:
    """Two open TCP connections never share a peer host and port: a stand-in
    object per request from one peer is that peer's one connection."""
    routes = RouteInfoManager()
    real(routes, Conn("127.0.0.1:50001"))
    real(routes, Conn("127.0.0.1:50001"), now=1.0)
    assert forged(routes, Conn("127.0.0.1:50009")) is not None


def register_cmd(topics: dict[str, TopicConfig], broker_id: int = 0,
                 addr: str = ADDR, name: str = "broker-a") -> RemotingCommand:
    fields = RegisterBrokerRequestHeader(broker_name=name, broker_addr=addr,
                                         cluster_name="C", broker_id=broker_id).to_fields()
    body = pack_body({"topicConfigTable": {n: c.to_dict() for n, c in topics.items()},
                      "dataVersion": {"timestamp": 1, "counter": len(topics)}})
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body)


def test_the_processor_refuses_and_logs_forgeries_rate_limited() -> None:
    routes = RouteInfoManager()
    table = NamesrvProcessor(routes, lambda: 0.0).handler_table()
    register, _ = table.lookup(RequestCode.REGISTER_BROKER)
    unregister, _ = table.lookup(RequestCode.UNREGISTER_BROKER)
    assert register is not None and unregister is not None
    broker, attacker = Conn("127.0.0.1:50001"), Conn("127.0.0.1:50002")
    r = register(broker, register_cmd({"Real": TopicConfig("Real", 4, 4)}))  # type: ignore[arg-type]
    assert r is not None and r.code == ResponseCode.SUCCESS
    structlog.reset_defaults()
    with capture_logs() as logs:
        for _ in range(50):
            r = register(attacker, register_cmd({}))  # type: ignore[arg-type]
            assert r is not None and r.code == ResponseCode.NO_PERMISSION
            assert "REGISTER_BROKER refused" in (r.remark or "")
        fields = UnRegisterBrokerRequestHeader("broker-a", ADDR, "C", 0).to_fields()
        r = unregister(attacker, RemotingCommand.request(  # type: ignore[arg-type]
            RequestCode.UNREGISTER_BROKER, fields))
        assert r is not None and r.code == ResponseCode.NO_PERMISSION
    refusals = [e for e in logs if e["event"] == "REGISTER_BROKER refused"]
    assert len(refusals) == 1 and refusals[0]["peer"] == "127.0.0.1:50002"
    assert any(e["event"] == "UNREGISTER_BROKER refused" for e in logs)
    assert routes_real(routes)


def test_a_broker_address_on_another_host_is_logged_not_refused() -> None:
    """Behind NAT the advertised address is not the peer's: only a notice."""
    routes = RouteInfoManager()
    table = NamesrvProcessor(routes, lambda: 0.0).handler_table()
    register, _ = table.lookup(RequestCode.REGISTER_BROKER)
    assert register is not None
    with capture_logs() as logs:
        r = register(Conn("10.0.0.5:40000"),  # type: ignore[arg-type]
                     register_cmd({"T": TopicConfig("T")}, addr="203.0.113.7:10911"))
        assert r is not None and r.code == ResponseCode.SUCCESS
        r = register(Conn("127.0.0.1:40001"),  # type: ignore[arg-type]
                     register_cmd({"T": TopicConfig("T")}, addr="127.0.0.2:10911",
                                  name="broker-b"))
        assert r is not None and r.code == ResponseCode.SUCCESS
    notes = [e for e in logs if "differs from the connection's peer" in e["event"]]
    assert len(notes) == 1 and notes[0]["peer"] == "10.0.0.5:40000"
