"""The broker's side of controller mode: the pure ReplicasCore (tables), the id
file, and ReplicasManager against real ControllerServices in process (their
handlers called directly: no sockets), on trio's MockClock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.replicas import (
    Act,
    BrokerIdentity,
    ControllerView,
    IdentityError,
    Phase,
    RegisterRetry,
    ReplicasCore,
)
from broker.replicas_manager import (
    ControllerClient,
    ControllerUnavailable,
    ReplicaHooks,
    ReplicasManager,
)
from broker.store.ha.sync_state import Proposal
from controller.service import ControllerService
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError
from protocol.controller import EpochEntryCache, NotifyBrokerRoleChangedRequestHeader
from protocol.trio.errors import RemotingConnectError
from tests.controller.fakes import MemoryStore, NeverLeader
from tests.controller.test_service import Conn, Notes, config

# ---- the core ---------------------------------------------------------------------------


def core_with_id(broker_id: int = 2) -> ReplicasCore:
    core = ReplicasCore()
    assert core.phase is Phase.FENCED and core.fenced
    core.got_id(broker_id)
    assert core.phase is Phase.REGISTERING and core.fenced
    return core


def view(master: int | None, epoch: int, members: tuple[int, ...] = (), sss_epoch: int = 1,
         addr: str | None = None) -> ControllerView:
    if master is not None and addr is None:
        addr = f"127.0.0.1:{10000 + master}"
    return ControllerView(master, addr, epoch, frozenset(members), sss_epoch)


def test_no_id_no_decision() -> None:
    with pytest.raises(RuntimeError):
        ReplicasCore().decide(view(1, 1, (1,)))
    with pytest.raises(ValueError):
        ReplicasCore().got_id(0)


@pytest.mark.parametrize(("v", "act"), [
    (view(None, 0), Act.ELECT),  # nobody was ever elected
    (view(None, 3), Act.ELECT),  # the master died, nobody took over
    (view(2, 1, (2,)), Act.MASTER),  # this broker (id 2) is the master
    (view(1, 1, (1, 2)), Act.SLAVE),  # another one is
])
def test_first_decision_from_replica_info(v: ControllerView, act: Act) -> None:
    core = core_with_id(2)
    d = core.decide(v)
    assert d.act is act and not d.stale
    if act is Act.ELECT:
        core.electing()
        assert core.phase is Phase.ELECTING and core.fenced
    core.applied(d)
    assert core.fenced == (act is Act.ELECT)


def test_slave_to_master_and_back_in_epoch_order() -> None:
    core = core_with_id(2)
    core.applied(core.decide(view(1, 1, (1, 2))))
    assert core.phase is Phase.SLAVE and core.master_id == 1 and core.master_epoch == 1
    # the same answer again: nothing to do
    assert core.decide(view(1, 1, (1, 2))).act is Act.NOTHING
    # the master died, this one was elected at epoch 2
    d = core.decide(view(2, 2, (2,), sss_epoch=2))
    assert d.act is Act.MASTER
    core.applied(d)
    assert core.phase is Phase.MASTER and core.master_epoch == 2 and core.sync_state_set_epoch == 2
    # a late notification of epoch 1 is stale: ignored, counted
    late = core.decide(view(1, 1, (1, 2)))
    assert late.act is Act.NOTHING and late.stale and core.stale_views == 1
    # the SyncStateSet grew: a master takes a newer one only
    assert core.decide(view(2, 2, (2, 1), sss_epoch=3)).act is Act.SYNC_STATE
    core.applied(core.decide(view(2, 2, (2, 1), sss_epoch=3)))
    assert core.sync_state_set_epoch == 3
    assert core.decide(view(2, 2, (2,), sss_epoch=2)).act is Act.NOTHING
    # a newer epoch elects another: this one follows it
    d = core.decide(view(3, 3, (3,), sss_epoch=4))
    assert d.act is Act.SLAVE
    core.applied(d)
    assert core.phase is Phase.SLAVE and core.master_id == 3


def test_re_elected_at_a_newer_epoch_is_a_new_term() -> None:
    core = core_with_id(1)
    core.applied(core.decide(view(1, 1, (1,))))
    assert core.decide(view(1, 1, (1,))).act is Act.NOTHING
    assert core.decide(view(1, 4, (1,), sss_epoch=5)).act is Act.MASTER


def test_the_master_moving_address_is_followed() -> None:
    core = core_with_id(2)
    core.applied(core.decide(view(1, 1, (1, 2))))
    moved = view(1, 1, (1, 2), addr="127.0.0.1:20000")
    assert core.decide(moved).act is Act.SLAVE


@pytest.mark.parametrize("bad", [
    ControllerView(1, None, 1, frozenset({1})),  # a master without an address
    ControllerView(1, "not an address", 1, frozenset({1})),
    ControllerView(1, "127.0.0.1:1", 1, frozenset({2, 3})),  # master not in its set
    ControllerView(None, None, -1),
])
def test_a_bad_view_is_not_acted_on(bad: ControllerView) -> None:
    core = core_with_id(2)
    d = core.decide(bad)
    assert d.act is Act.NOTHING and d.reason and core.fenced


# ---- the id file ------------------------------------------------------------------------


def test_identity_round_trip_and_damage(tmp_path: Path) -> None:
    assert BrokerIdentity.load(tmp_path) is None
    ident = BrokerIdentity("c", "b", 3, "127.0.0.1:1;5", True)
    ident.save(tmp_path)
    assert BrokerIdentity.load(tmp_path) == ident
    path = BrokerIdentity.path(tmp_path)
    data = bytearray(path.read_bytes())
    data[data.index(b"3")] = ord("4")  # the id changed under the checksum
    path.write_bytes(bytes(data))
    with pytest.raises(IdentityError):
        BrokerIdentity.load(tmp_path)
    path.write_bytes(b"x" * 5000)
    with pytest.raises(IdentityError):
        BrokerIdentity.load(tmp_path)
    path.write_bytes(b'{"crc": 0, "body": 5}')
    with pytest.raises(IdentityError):
        BrokerIdentity.load(tmp_path)


# ---- the keys ---------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value"), [
    ("controllerAddr", "nohost"),
    ("controllerAddr", "127.0.0.1:99999"),
    ("controllerHeartBeatTimeoutMills", "10"),
    ("brokerHeartbeatInterval", "0"),
    ("brokerElectionPriority", "-1"),
    ("syncBrokerMetadataPeriod", "1"),
])
def test_controller_keys_checked(key: str, value: str) -> None:
    cfg = BrokerConfig()
    with pytest.raises(ConfigError, match=key):
        cfg.update({key: value})


def test_heartbeat_interval_shorter_than_timeout() -> None:
    cfg = BrokerConfig()
    cfg.update({"enableControllerMode": "true", "controllerAddr": "127.0.0.1:9878",
                "brokerHeartbeatInterval": "2000", "controllerHeartBeatTimeoutMills": "1500"},
               validate=False)
    with pytest.raises(ConfigError, match="brokerHeartbeatInterval"):
        cfg.validate()
    cfg.update({"brokerHeartbeatInterval": "500",
                "controllerAddr": "127.0.0.1:9878; 127.0.0.1:9879;127.0.0.1:9878"})
    cfg.validate()
    assert cfg.controller_addr_list == ["127.0.0.1:9878", "127.0.0.1:9879"]


# ---- the manager against controllers in process ------------------------------------------


class InProcessClient:
    """A RemotingClient whose addresses are ControllerServices in this process;
    an address missing from ``services`` (or in ``down``) cannot be reached."""

    def __init__(self, services: dict[str, ControllerService]) -> None:
        self.services = services
        self.down: set[str] = set()
        self.asked: list[tuple[str, int]] = []

    def _service(self, addr: str) -> ControllerService:
        if addr in self.down or addr not in self.services:
            raise RemotingConnectError(f"connect to {addr} refused")
        return self.services[addr]

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        await trio.lowlevel.checkpoint()
        svc = self._service(addr)
        self.asked.append((addr, cmd.code))
        sync, async_ = svc.processor.handler_table().lookup(cmd.code)
        response = (sync(Conn(), cmd) if sync is not None  # type: ignore[arg-type]
                    else await async_(Conn(), cmd))  # type: ignore[arg-type,misc]
        assert response is not None
        return response

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        await self.invoke(addr, cmd, 1.0)


class Broker:
    """The hooks of one broker: what the manager made it."""

    def __init__(self, name: str) -> None:
        self.addr = name
        self.role = "fenced"
        self.master_epochs: list[int] = []
        self.followed: list[str | None] = []
        self.sync_state: tuple[int, frozenset[int], int] | None = None

    async def become_master(self, v: ControllerView) -> None:
        await trio.lowlevel.checkpoint()
        self.role = "master"
        self.master_epochs.append(v.master_epoch)
        self.sync_state = (v.master_id or 0, v.sync_state_set, v.sync_state_set_epoch)

    async def become_slave(self, v: ControllerView) -> None:
        await trio.lowlevel.checkpoint()
        self.role = "slave"
        self.followed.append(v.master_address)

    def set_sync_state(self, master: int, members: frozenset[int], epoch: int) -> None:
        self.sync_state = (master, members, epoch)

    def hooks(self) -> ReplicaHooks:
        return ReplicaHooks(broker_addr=lambda: self.addr, max_offset=lambda: 0,
                            confirm_offset=lambda: 0, epoch=lambda: 0,
                            become_master=self.become_master, become_slave=self.become_slave,
                            set_sync_state=self.set_sync_state)


def broker_config(root: Path, controllers: str, **more: str) -> BrokerConfig:
    cfg = BrokerConfig()
    cfg.update({"brokerName": "b", "brokerClusterName": "c", "enableControllerMode": "true",
                "controllerAddr": controllers, "storePathRootDir": str(root),
                "brokerHeartbeatInterval": "200", "controllerHeartBeatTimeoutMills": "1000",
                "syncBrokerMetadataPeriod": "1000", **more})
    cfg.validate()
    return cfg


async def controllers(nursery: trio.Nursery, leader: str, follower: str | None = None
                      ) -> dict[str, ControllerService]:
    out = {}
    for addr, leadership in ((leader, None), (follower, NeverLeader())):
        if addr is None:
            continue
        kwargs: dict[str, Any] = {"leadership": leadership} if leadership else {}
        from controller.state_store import AlwaysLeader
        svc = ControllerService(config(brokerHeartbeatTimeout="1000"), MemoryStore(),
                                kwargs.get("leadership") or AlwaysLeader(), serve=False,
                                advertised_addr=addr)
        await nursery.start(svc.run)
        svc.notifier = Notes()  # type: ignore[assignment]  # what would have been sent
        out[addr] = svc
    await trio.testing.wait_all_tasks_blocked()
    return out


async def test_three_brokers_first_is_master_others_follow(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        svcs = await controllers(nursery, "ctl-1:9878", "ctl-2:9878")
        client = InProcessClient(svcs)
        # the follower is listed first: its NOT_LEADER moves the broker on
        addrs = "ctl-2:9878;ctl-1:9878"
        brokers = [Broker(f"127.0.0.1:{10911 + 10 * i}") for i in range(3)]
        managers = []
        for i, b in enumerate(brokers):
            m = ReplicasManager(broker_config(tmp_path / f"s{i}", addrs),
                                client, b.hooks())  # type: ignore[arg-type]
            managers.append(m)
            await nursery.start(m.run)
            with trio.fail_after(10):
                await m.role_known.wait()
        assert [b.role for b in brokers] == ["master", "slave", "slave"]
        assert [m.core.broker_id for m in managers] == [1, 2, 3]
        assert brokers[0].master_epochs == [1] and brokers[0].sync_state == (1, frozenset({1}), 1)
        assert brokers[1].followed == [brokers[0].addr] == brokers[2].followed
        assert all(m.controllers.leader == "ctl-1:9878" for m in managers)
        # the ids are kept on disk, confirmed
        ident = BrokerIdentity.load(tmp_path / "s2")
        assert ident is not None and ident.broker_id == 3 and ident.confirmed
        # heart-beats reach both controllers (each keeps its own liveness table)
        await trio.sleep(1)
        assert all(m.heartbeats_sent > 2 for m in managers)
        assert svcs["ctl-2:9878"].heartbeats.get("b", 1) is not None

        # the master proposes a bigger SyncStateSet: the controller's answer is applied
        managers[0].propose(Proposal(1, frozenset({1, 2, 3}), 1, added=frozenset({2, 3})))
        await trio.testing.wait_all_tasks_blocked()
        assert brokers[0].sync_state == (1, frozenset({1, 2, 3}), 2)

        # the master stops heart-beating (its manager ends): the controller elects
        # another and the others learn it by their poll (notifications not wired here)
        managers[0]._nursery.cancel_scope.cancel()  # type: ignore[union-attr]
        with trio.fail_after(30):
            while "master" not in (brokers[1].role, brokers[2].role):
                await trio.sleep(0.1)
        new = 1 if brokers[1].role == "master" else 2
        other = 3 - new
        assert brokers[new].master_epochs == [2]
        with trio.fail_after(30):
            while brokers[other].followed[-1] != brokers[new].addr:
                await trio.sleep(0.1)

        # a stale notification is ignored, a current one makes the broker ask now
        stale = NotifyBrokerRoleChangedRequestHeader(master_epoch=1, sync_state_set_epoch=1)
        assert not managers[other].notified(stale)
        assert managers[other].stale_notifications == 1
        current = NotifyBrokerRoleChangedRequestHeader(master_epoch=2, sync_state_set_epoch=3)
        asked = len(client.asked)
        assert managers[other].notified(current)
        await trio.testing.wait_all_tasks_blocked()
        assert (("ctl-1:9878", RequestCode.CONTROLLER_GET_REPLICA_INFO)
                in client.asked[asked:])
        nursery.cancel_scope.cancel()


async def test_a_restart_keeps_the_id_and_a_refused_id_is_replaced(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        svcs = await controllers(nursery, "ctl:9878")
        client = InProcessClient(svcs)
        # an unconfirmed id another replica took meanwhile: dropped, a new one applied
        BrokerIdentity("c", "b", 1, "127.0.0.1:1;1", False).save(tmp_path / "x")
        first = Broker("127.0.0.1:10911")
        m1 = ReplicasManager(broker_config(tmp_path / "a", "ctl:9878"), client,
                             first.hooks())  # type: ignore[arg-type]
        await nursery.start(m1.run)
        m2 = ReplicasManager(broker_config(tmp_path / "x", "ctl:9878"), client,
                             Broker("127.0.0.1:10921").hooks())  # type: ignore[arg-type]
        await nursery.start(m2.run)
        with trio.fail_after(10):
            await m2.role_known.wait()
        assert (m1.core.broker_id, m2.core.broker_id) == (1, 2)
        # a restart of the first: the same id, without asking for one
        m1._nursery.cancel_scope.cancel()  # type: ignore[union-attr]
        asked = len(client.asked)
        again = Broker("127.0.0.1:10911")
        m3 = ReplicasManager(broker_config(tmp_path / "a", "ctl:9878"), client,
                             again.hooks())  # type: ignore[arg-type]
        await nursery.start(m3.run)
        assert m3.core.broker_id == 1
        assert not any(code in (RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                                RequestCode.CONTROLLER_APPLY_BROKER_ID)
                       for _, code in client.asked[asked:])
        nursery.cancel_scope.cancel()


async def test_no_controller_leaves_the_broker_fenced(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    client = InProcessClient({})
    b = Broker("127.0.0.1:10911")
    m = ReplicasManager(broker_config(tmp_path, "ctl:9878"), client,
                        b.hooks())  # type: ignore[arg-type]
    with trio.move_on_after(30):
        await m.run()
    assert b.role == "fenced" and m.core.fenced and m.core.broker_id is None
    with pytest.raises(ControllerUnavailable):
        await ControllerClient(client, ["a:1", "b:2"]).invoke(  # type: ignore[arg-type]
            RequestCode.CONTROLLER_GET_METADATA_INFO, {})


async def test_hostile_notification_fields_are_refused() -> None:
    from protocol.errors import RemoteProtocolError
    for fields in ({"masterEpoch": "-1", "syncStateSetEpoch": "0"},
                   {"masterEpoch": "x", "syncStateSetEpoch": "0"},
                   {"syncStateSetEpoch": "0"}):
        with pytest.raises(RemoteProtocolError):
            NotifyBrokerRoleChangedRequestHeader.from_fields(fields)
    assert ResponseCode.CONTROLLER_NOT_LEADER == 2007


# ---- the broker's handlers ---------------------------------------------------------------


@pytest.fixture
def plain_broker(tmp_path: Path) -> Iterator[BrokerController]:
    c = BrokerController(BrokerConfig(
        store_path_root_dir=str(tmp_path / "store"), listen_port=0,
        maped_file_size_commit_log=1 << 20, maped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64, max_index_num=256))
    c._load()
    try:
        yield c
    finally:
        c._persist_and_close()


def handle(c: BrokerController, code: int, fields: dict[str, Any]) -> RemotingCommand:
    sync, _ = c.server.handlers.lookup(code)
    assert sync is not None
    response = sync(Conn(), RemotingCommand.request(code, fields))  # type: ignore[arg-type]
    assert response is not None
    return response


def test_a_broker_not_in_controller_mode_refuses_role_notifications(
        plain_broker: BrokerController) -> None:
    r = handle(plain_broker, RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
               {"masterEpoch": "3", "syncStateSetEpoch": "1", "masterBrokerId": "1",
                "masterAddress": "127.0.0.1:1"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "not in controller mode" in (r.remark or "")
    assert plain_broker.role.current.broker_id == 0  # nothing moved


def test_broker_epoch_cache_is_its_epoch_history(plain_broker: BrokerController) -> None:
    store = plain_broker.message_store
    store.epochs.begin(0)
    store.epochs.begin(0, 4)  # a second epoch (5) from the same offset
    r = handle(plain_broker, RequestCode.GET_BROKER_EPOCH_CACHE, {})
    assert r.code == ResponseCode.SUCCESS
    cache = EpochEntryCache.from_dict(r.decode_body())
    assert cache.broker_name == plain_broker.config.broker_name
    assert [(e.epoch, e.start_offset, e.end_offset) for e in cache.epoch_list] == \
        [(5, 0, store.get_max_phy_offset())]
    assert cache.max_offset == store.get_max_phy_offset()


# ---- RegisterRetry (controller mode: registering again until the role is settled) ----


def test_register_retry_doubles_to_its_bound_while_unsettled() -> None:
    r = RegisterRetry(first=0.5, most=5.0)
    assert r.wait() is None  # settled so far: the periodic interval
    waits = []
    for _ in range(7):
        r.settled(False)
        waits.append(r.wait())
    assert waits == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


def test_register_retry_settled_or_role_change_starts_over() -> None:
    r = RegisterRetry(first=0.5, most=5.0)
    for _ in range(4):
        r.settled(False)
    r.settled(True)
    assert r.wait() is None
    r.settled(False)
    assert r.wait() == 0.5
    r.settled(False)
    r.restart()  # a role change: the next miss retries soon again
    assert r.wait() is None
    r.settled(False)
    assert r.wait() == 0.5
