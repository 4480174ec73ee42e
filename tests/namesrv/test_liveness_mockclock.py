"""Name-server liveness in virtual time: a silent broker goes after 120 s, not before."""

from __future__ import annotations

import trio
import trio.testing

from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from namesrv.route_info import RouteInfoManager
from protocol.route import DataVersion, TopicConfig


def register(routes: RouteInfoManager, name: str, addr: str, now: float, version: int = 1) -> None:
    routes.register_broker("C", addr, name, 0, addr, {"T": TopicConfig("T", 4, 4)},
                           DataVersion(version, version), None, now)


async def test_silent_broker_dropped_after_window(autojump_clock: trio.testing.MockClock) -> None:
    controller = NamesrvController(NamesrvConfig(listen_port=0))
    routes = controller.routes
    async with trio.open_nursery() as nursery:
        nursery.start_soon(controller.scan_loop)
        register(routes, "a", "127.0.0.1:1", trio.current_time())
        register(routes, "b", "127.0.0.1:2", trio.current_time())
        # broker b keeps registering every 30 s; broker a falls silent
        for _ in range(3):
            await trio.sleep(30)
            register(routes, "b", "127.0.0.1:2", trio.current_time())
        await trio.sleep(29.9)  # t = 119.9 s: several scans have run
        assert "127.0.0.1:1" in routes.broker_live_table
        await trio.sleep(10.2)  # the first scan after 120 s drops it
        assert "127.0.0.1:1" not in routes.broker_live_table
        assert "127.0.0.1:2" in routes.broker_live_table
        route = routes.pickup_topic_route_data("T")
        assert route is not None and [q.broker_name for q in route.queue_datas] == ["b"]
        nursery.cancel_scope.cancel()


async def test_scan_interval_and_window_are_configurable(autojump_clock: trio.testing.MockClock) -> None:
    cfg = NamesrvConfig(listen_port=0, scan_not_active_broker_interval=1000,
                        broker_channel_expired_time=5000)
    controller = NamesrvController(cfg)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(controller.scan_loop)
        register(controller.routes, "a", "127.0.0.1:1", trio.current_time())
        await trio.sleep(4.5)
        assert controller.routes.broker_live_table
        await trio.sleep(2)
        assert not controller.routes.broker_live_table
        assert controller.routes.pickup_topic_route_data("T") is None
        nursery.cancel_scope.cancel()


def test_route_tables() -> None:
    routes = RouteInfoManager()
    register(routes, "a", "h:1", 0.0)
    routes.register_broker("C", "h:2", "a", 1, "h:3", {}, DataVersion(1, 1), None, 0.0)
    r = routes.register_broker("C", "h:2", "a", 1, "h:3", {}, DataVersion(1, 1), None, 0.0)
    assert r.master_addr == "h:1" and r.ha_server_addr == "h:1"
    route = routes.pickup_topic_route_data("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: "h:1", 1: "h:2"}
    info = routes.get_all_cluster_info()
    assert info["clusterAddrTable"] == {"C": ["a"]}
    assert routes.get_all_topic_list() == ["T"]
    assert routes.wipe_write_perm_of_broker("a") == 1
    assert routes.topic_queue_table["T"]["a"].perm == 4
    # a new data version without the topic removes it
    routes.register_broker("C", "h:1", "a", 0, "h:1", {"U": TopicConfig("U")}, DataVersion(2, 2), None, 1.0)
    assert routes.get_all_topic_list() == ["U"]
    routes.delete_topic("U")
    assert routes.get_all_topic_list() == []
    routes.unregister_broker("C", "h:2", "a", 1)
    routes.unregister_broker("C", "h:1", "a", 0)
    assert routes.broker_addr_table == {} and routes.cluster_addr_table == {}


def test_connection_destroyed_drops_broker() -> None:
    routes = RouteInfoManager()
    conn = object()
    routes.register_broker("C", "h:1", "a", 0, "h:1", {"T": TopicConfig("T")}, DataVersion(1, 1), conn, 0.0)
    assert routes.on_connection_destroyed(object()) == []
    assert routes.on_connection_destroyed(conn) == ["h:1"]
    assert routes.pickup_topic_route_data("T") is None and routes.broker_addr_table == {}
