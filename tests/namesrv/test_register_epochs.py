"""Controller mode: of two live brokerId 0 registrations of one broker name, the
name server keeps the higher masterEpoch (RocketMQ's #6316). An old master cut off
from the controller still reaches the name server; the master the controller
elected next replaces it, and a slave's registration answer names the new one.
Without epochs (not in controller mode) the live registration still wins."""

from __future__ import annotations

import structlog
from structlog.testing import capture_logs

from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager, supersedes
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import RegisterBrokerRequestHeader, RegisterBrokerResponseHeader
from protocol.route import DataVersion, TopicConfig

OLD, NEW, SLAVE = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"
OLD_HA, NEW_HA = "127.0.0.1:10912", "127.0.0.1:10922"
TOPICS = {"T": TopicConfig("T", 4, 4)}


class Conn:
    def __init__(self, peer: str) -> None:
        self.remote_addr = peer
        self.closed = False


def reg(routes: RouteInfoManager, conn: Conn, addr: str, broker_id: int,
        epoch: int | None, now: float = 0.0, ha: str | None = None) -> str | None:
    r = routes.register_broker("C", addr, "broker-a", broker_id, ha, TOPICS,
                               DataVersion(1, 1), conn, now, master_epoch=epoch)
    return r.refused


def master_of(routes: RouteInfoManager) -> str | None:
    route = routes.pickup_topic_route_data("T")
    assert route is not None
    return route.broker_datas[0].broker_addrs.get(0)


def test_supersedes_needs_both_epochs_and_a_higher_one() -> None:
    assert supersedes(3, 2)
    assert not supersedes(2, 2)
    assert not supersedes(1, 2)
    assert not supersedes(None, 2)
    assert not supersedes(3, None)
    assert not supersedes(None, None)


def test_a_higher_epoch_replaces_the_live_master_and_the_stale_one_is_refused() -> None:
    routes = RouteInfoManager(channel_expired_s=120)
    old, new, slave = Conn("127.0.0.1:50001"), Conn("127.0.0.1:50002"), Conn("127.0.0.1:50003")
    assert reg(routes, old, OLD, 0, 1, ha=OLD_HA) is None
    assert reg(routes, new, NEW, 2, 1, ha=NEW_HA) is None  # a slave under epoch 1
    assert reg(routes, slave, SLAVE, 3, 1) is None
    # the controller elected NEW (epoch 2) while OLD, cut off from it, still registers
    structlog.reset_defaults()
    with capture_logs() as logs:
        assert reg(routes, new, NEW, 0, 2, now=5.0, ha=NEW_HA) is None
    assert master_of(routes) == NEW
    assert OLD not in routes.broker_live_table  # demoted: gone from the route
    assert any(e["event"] == "master replaced by a higher masterEpoch"
               and e["old_addr"] == OLD and e["epoch"] == 2 for e in logs)
    route = routes.pickup_topic_route_data("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: NEW, 3: SLAVE}
    # the stale master registering again is refused while epoch 2 holds the name
    refused = reg(routes, old, OLD, 0, 1, now=6.0, ha=OLD_HA)
    assert refused is not None and "stale" in refused and "masterEpoch 2" in refused
    assert master_of(routes) == NEW and OLD not in routes.broker_live_table
    # the remaining slave learns the new master (and its HA address)
    r = routes.register_broker("C", SLAVE, "broker-a", 3, None, TOPICS, DataVersion(1, 1),
                               slave, 7.0, master_epoch=2)
    assert r.refused is None and r.master_addr == NEW and r.ha_server_addr == NEW_HA
    # healed, the old master comes back as a slave of the new one
    assert reg(routes, old, OLD, 1, 2, now=8.0) is None
    route = routes.pickup_topic_route_data("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: NEW, 1: OLD, 3: SLAVE}


def test_an_equal_or_lower_epoch_never_replaces_a_live_master() -> None:
    routes = RouteInfoManager(channel_expired_s=120)
    old, new = Conn("127.0.0.1:50001"), Conn("127.0.0.1:50002")
    assert reg(routes, old, OLD, 0, 4) is None
    for epoch in (4, 3, 0):
        refused = reg(routes, new, NEW, 0, epoch, now=1.0)
        assert refused is not None and "stale" in refused, epoch
    assert master_of(routes) == OLD and NEW not in routes.broker_live_table


def test_without_epochs_the_live_registration_still_wins() -> None:
    """A broker not in controller mode (or an older one) sends no epoch: the
    registrations conflict as before, whichever side carries one."""
    for held, claim in ((None, None), (None, 9), (1, None)):
        routes = RouteInfoManager(channel_expired_s=120)
        old, new = Conn("127.0.0.1:50001"), Conn("127.0.0.1:50002")
        assert reg(routes, old, OLD, 0, held) is None
        refused = reg(routes, new, NEW, 0, claim, now=1.0)
        assert refused is not None and "another live connection" in refused, (held, claim)
        assert master_of(routes) == OLD
        # once the old registration expired, the other takes the id as before
        assert reg(routes, new, NEW, 0, claim, now=121.5) is None
        assert master_of(routes) == NEW


def test_the_epoch_counts_only_for_brokerId_0() -> None:
    routes = RouteInfoManager(channel_expired_s=120)
    a, b = Conn("127.0.0.1:50001"), Conn("127.0.0.1:50002")
    assert reg(routes, a, OLD, 1, 1) is None
    refused = reg(routes, b, NEW, 1, 9, now=1.0)
    assert refused is not None and "another live connection" in refused


def register_cmd(addr: str, broker_id: int, epoch: int | None,
                 ha: str | None = None) -> RemotingCommand:
    fields = RegisterBrokerRequestHeader(broker_name="broker-a", broker_addr=addr,
                                         cluster_name="C", broker_id=broker_id,
                                         ha_server_addr=ha, master_epoch=epoch,
                                         sync_state_set_epoch=epoch).to_fields()
    body = pack_body({"topicConfigTable": {n: c.to_dict() for n, c in TOPICS.items()},
                      "dataVersion": {"timestamp": 1, "counter": 1}})
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body)


def test_the_processor_takes_the_epoch_from_the_header() -> None:
    routes = RouteInfoManager()
    table = NamesrvProcessor(routes, lambda: 0.0).handler_table()
    register, _ = table.lookup(RequestCode.REGISTER_BROKER)
    assert register is not None
    old, new, slave = Conn("127.0.0.1:50001"), Conn("127.0.0.1:50002"), Conn("127.0.0.1:50003")
    fields = register_cmd(OLD, 0, 1).ext_fields
    assert str(fields["masterEpoch"]) == "1" and str(fields["syncStateSetEpoch"]) == "1"
    r = register(old, register_cmd(OLD, 0, 1, OLD_HA))  # type: ignore[arg-type]
    assert r is not None and r.code == ResponseCode.SUCCESS
    r = register(new, register_cmd(NEW, 0, 2, NEW_HA))  # type: ignore[arg-type]
    assert r is not None and r.code == ResponseCode.SUCCESS
    assert routes.broker_addr_table["broker-a"].broker_addrs[0] == NEW
    structlog.reset_defaults()
    with capture_logs() as logs:
        r = register(old, register_cmd(OLD, 0, 1, OLD_HA))  # type: ignore[arg-type]
    assert r is not None and r.code == ResponseCode.NO_PERMISSION and "stale" in (r.remark or "")
    assert any(e["event"] == "REGISTER_BROKER refused" for e in logs)
    r = register(slave, register_cmd(SLAVE, 3, 2))  # type: ignore[arg-type]
    assert r is not None and r.code == ResponseCode.SUCCESS
    answer = RegisterBrokerResponseHeader.from_fields(r.ext_fields)
    assert answer.master_addr == NEW and answer.ha_server_addr == NEW_HA
    # an older broker's header has no epoch: decoded as None
    plain = RegisterBrokerRequestHeader.from_fields(register_cmd(OLD, 0, None).ext_fields)
    assert plain.master_epoch is None and plain.sync_state_set_epoch is None
