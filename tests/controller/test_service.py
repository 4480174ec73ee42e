"""ControllerService + ControllerProcessor in one process: requests through the
handlers (no sockets), time on trio's MockClock, the store in memory."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from controller.config import ControllerConfig
from controller.processor import STATUS_CODES
from controller.replicas import MasterView, Status, decode_state
from controller.service import ControllerService
from controller.state_store import AlwaysLeader, Leadership, StateStore
from protocol.body import pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
)
from protocol.errors import RemoteProtocolError
from protocol.headers import Header
from tests.controller.fakes import MemoryStore, NeverLeader, SwitchLeader
from tests.waits import wait_until

A = {1: "127.0.0.1:10911", 2: "127.0.0.1:10921", 3: "127.0.0.1:10931"}


class Conn:
    remote_addr = "127.0.0.1:5555"


class Notes:
    """Stands in for the Notifier: what would have been sent."""

    def __init__(self) -> None:
        self.views: list[MasterView] = []

    def notify(self, view: MasterView) -> None:
        self.views.append(view)


def config(**changes: Any) -> ControllerConfig:
    cfg = ControllerConfig()
    cfg.update({"brokerHeartbeatTimeout": "1000", "scanNotActiveBrokerInterval": "200",
                **changes})
    return cfg


async def call(svc: ControllerService, code: int, header: Header | None = None,
               body: Any = None) -> RemotingCommand:
    cmd = RemotingCommand.request(code, header.to_fields() if header is not None else {},
                                  pack_body(body) if body is not None else None)
    sync, async_ = svc.processor.handler_table().lookup(code)
    if sync is not None:
        response = sync(Conn(), cmd)  # type: ignore[arg-type]
    else:
        assert async_ is not None
        response = await async_(Conn(), cmd)  # type: ignore[arg-type]
    assert response is not None
    return response


async def started(nursery: trio.Nursery, store: StateStore | None = None,
                  leadership: Leadership | None = None, **cfg: Any
                  ) -> tuple[ControllerService, Notes]:
    svc = ControllerService(config(**cfg), store or MemoryStore(), leadership or AlwaysLeader(),
                            serve=False, advertised_addr="127.0.0.1:9878")
    await nursery.start(svc.run)
    await trio.testing.wait_all_tasks_blocked()
    notes = Notes()
    svc.notifier = notes  # type: ignore[assignment]
    return svc, notes


def beat(svc: ControllerService, broker_id: int, epoch: int = 0, offset: int = 0) -> None:
    h = BrokerHeartbeatRequestHeader(cluster_name="c", broker_addr=A[broker_id], broker_name="b",
                                     broker_id=broker_id, epoch=epoch, max_offset=offset)
    cmd = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, h.to_fields(), oneway=True)
    response = svc.processor.broker_heartbeat(Conn(), cmd)  # type: ignore[arg-type]
    assert response.code == ResponseCode.SUCCESS


async def join(svc: ControllerService, broker_id: int) -> RemotingCommand:
    """A broker's start in controller mode: next id, apply it, register."""
    r = await call(svc, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                   GetNextBrokerIdRequestHeader(cluster_name="c", broker_name="b"))
    assert int(r.ext_fields["nextBrokerId"]) == broker_id
    r = await call(svc, RequestCode.CONTROLLER_APPLY_BROKER_ID, ApplyBrokerIdRequestHeader(
        cluster_name="c", broker_name="b", applied_broker_id=broker_id,
        register_check_code=f"{A[broker_id]};1"))
    assert r.code == ResponseCode.SUCCESS, r.remark
    beat(svc, broker_id)
    return await call(svc, RequestCode.CONTROLLER_REGISTER_BROKER,
                      RegisterBrokerToControllerRequestHeader(
                          cluster_name="c", broker_name="b", broker_id=broker_id,
                          broker_address=A[broker_id]))


async def two_in_sync(svc: ControllerService) -> None:
    """Replicas 1 (master) and 2, both in the SyncStateSet."""
    for i in (1, 2):
        assert (await join(svc, i)).code == ResponseCode.SUCCESS
    r = await call(svc, RequestCode.CONTROLLER_ELECT_MASTER,
                   ElectMasterRequestHeader(broker_name="b", cluster_name="c", broker_id=1))
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["masterBrokerId"] == 1
    body = unpack_body(r.body)
    assert body["brokerMemberGroup"]["brokerAddrs"] == {"1": A[1], "2": A[2]}
    r = await call(svc, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                   AlterSyncStateSetRequestHeader(broker_name="b", master_broker_id=1,
                                                  master_epoch=1),
                   {"syncStateSet": [1, 2], "syncStateSetEpoch": 1})
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert r.ext_fields["newSyncStateSetEpoch"] == 2


def test_every_status_has_its_rocketmq_code() -> None:
    assert STATUS_CODES[Status.SUCCESS] == ResponseCode.SUCCESS
    assert STATUS_CODES[Status.FENCED_MASTER_EPOCH] == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    assert len(set(STATUS_CODES.values())) == len(Status)


async def test_silent_master_is_replaced_and_replicas_told(
        autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore()
    async with trio.open_nursery() as nursery:
        svc, notes = await started(nursery, store)
        await two_in_sync(svc)
        assert [v.master_id for v in notes.views] == [1]
        saved = decode_state(store.stored.data)  # type: ignore[union-attr]
        assert saved.broker_sets["b"].sync_state_set == {1, 2}
        # 2 keeps beating; 1 stops
        stop_at = trio.current_time()
        while trio.current_time() - stop_at < 0.9:
            beat(svc, 1, epoch=1, offset=100)
            beat(svc, 2, epoch=1, offset=100)
            await trio.sleep(0.1)
        last_beat_of_1 = trio.current_time()
        while len(notes.views) < 2:
            beat(svc, 2, epoch=1, offset=100)
            await trio.sleep(0.05)
        elected_after = trio.current_time() - last_beat_of_1
        assert 1.0 <= elected_after <= 1.0 + 0.2 + 0.1  # timeout + one scan interval
        view = notes.views[-1]
        assert (view.master_id, view.master_epoch, view.sync_state_set) == (2, 2, {2})
        assert view.addresses == {1: A[1], 2: A[2]}
        saved = decode_state(store.stored.data)  # type: ignore[union-attr]
        assert saved.broker_sets["b"].master_id == 2
        r = await call(svc, RequestCode.CONTROLLER_GET_REPLICA_INFO,
                       GetReplicaInfoRequestHeader(broker_name="b"))
        assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"]) == (2, 2)
        nursery.cancel_scope.cancel()


async def test_no_alive_replica_leaves_no_master(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        svc, notes = await started(nursery)
        await two_in_sync(svc)
        await trio.sleep(1.5)  # nobody beats
        bs = svc.state.broker_sets["b"]
        assert bs.master_id is None and bs.master_epoch == 2
        assert notes.views[-1].master_id is None
        # 2 comes back: the next scan elects it
        beat(svc, 2, epoch=1)
        await trio.sleep(0.25)
        assert svc.state.broker_sets["b"].master_id == 2
        assert notes.views[-1].master_id == 2
        nursery.cancel_scope.cancel()


async def test_master_never_heard_since_leading_is_replaced(
        autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore()
    async with trio.open_nursery() as nursery:
        first, _ = await started(nursery, store)
        await two_in_sync(first)
        first.request_shutdown()
    # a controller restarted on the same store hears only from replica 2
    async with trio.open_nursery() as nursery:
        svc, notes = await started(nursery, store)
        assert svc.state.broker_sets["b"].master_id == 1
        for _ in range(8):
            beat(svc, 2)
            await trio.sleep(0.1)
        assert notes.views == []  # within one timeout: the master is given its chance
        while not notes.views:
            beat(svc, 2)
            await trio.sleep(0.1)
        assert notes.views[-1].master_id == 2
        nursery.cancel_scope.cancel()


async def test_a_follower_answers_not_leader(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        svc, _ = await started(nursery, leadership=NeverLeader())
        r = await call(svc, RequestCode.CONTROLLER_APPLY_BROKER_ID, ApplyBrokerIdRequestHeader(
            cluster_name="c", broker_name="b", applied_broker_id=1,
            register_check_code=f"{A[1]};1"))
        assert r.code == ResponseCode.CONTROLLER_NOT_LEADER
        for code, header in ((RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                              GetNextBrokerIdRequestHeader(cluster_name="c", broker_name="b")),
                             (RequestCode.CONTROLLER_GET_REPLICA_INFO,
                              GetReplicaInfoRequestHeader(broker_name="b"))):
            assert (await call(svc, code, header)).code == ResponseCode.CONTROLLER_NOT_LEADER
        meta = await call(svc, RequestCode.CONTROLLER_GET_METADATA_INFO)
        assert meta.code == ResponseCode.SUCCESS and meta.ext_fields["isLeader"] is False
        beat(svc, 1)  # heart-beats are taken all the same
        assert svc.heartbeats.get("b", 1) is not None
        nursery.cancel_scope.cancel()


async def test_leadership_change_reloads_the_state(
        autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore()
    switch = SwitchLeader()
    async with trio.open_nursery() as nursery:
        other, _ = await started(nursery, store)
        svc, _ = await started(nursery, store, leadership=switch)
        await two_in_sync(other)  # written by the other controller
        assert "b" not in svc.state.broker_sets
        await switch.elect()
        assert svc.state.broker_sets["b"].sync_state_set == {1, 2}
        meta = await call(svc, RequestCode.CONTROLLER_GET_METADATA_INFO)
        assert meta.ext_fields["isLeader"] is True
        assert meta.ext_fields["controllerLeaderAddress"] == "127.0.0.1:9878"
        # the other one writes again (it still thinks it leads): this one's next save
        # conflicts, reloads and computes again
        r = await call(other, RequestCode.CLEAN_BROKER_DATA, CleanControllerBrokerDataRequestHeader(
            broker_name="b", broker_controller_ids_to_clean="2", is_clean_living_broker=True))
        assert r.code == ResponseCode.SUCCESS
        beat(svc, 1)
        saves = store.saves
        r = await call(svc, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                       AlterSyncStateSetRequestHeader(broker_name="b", master_broker_id=1,
                                                      master_epoch=1),
                       {"syncStateSet": [1], "syncStateSetEpoch": 2})
        # computed again on the reloaded state, where the set is {1} at epoch 3: stale
        assert r.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, r.remark
        assert svc.version == store.stored.version and store.saves == saves  # type: ignore[union-attr]
        await switch.lose()
        r = await call(svc, RequestCode.CONTROLLER_GET_REPLICA_INFO,
                       GetReplicaInfoRequestHeader(broker_name="b"))
        assert r.code == ResponseCode.CONTROLLER_NOT_LEADER
        nursery.cancel_scope.cancel()


async def test_unsaved_change_is_not_applied(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore()
    async with trio.open_nursery() as nursery:
        svc, notes = await started(nursery, store)
        await two_in_sync(svc)
        store.fail = "disk gone"
        r = await call(svc, RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(
            broker_name="b", broker_id=2, designate_elect=True))
        assert r.code == ResponseCode.SYSTEM_ERROR and "disk gone" in (r.remark or "")
        assert svc.state.broker_sets["b"].master_id == 1 and len(notes.views) == 1
        store.fail = None
        r = await call(svc, RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(
            broker_name="b", broker_id=2, designate_elect=True))
        assert r.code == ResponseCode.SUCCESS and notes.views[-1].master_id == 2
        nursery.cancel_scope.cancel()


async def test_hostile_requests(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        svc, _ = await started(nursery)
        await two_in_sync(svc)
        with pytest.raises(RemoteProtocolError):  # the connection answers SYSTEM_ERROR
            await call(svc, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                       AlterSyncStateSetRequestHeader(broker_name="b", master_broker_id=1,
                                                      master_epoch=1),
                       {"syncStateSet": list(range(100)), "syncStateSetEpoch": 2})
        with pytest.raises(RemoteProtocolError):
            await call(svc, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, None, {"b": 1})
        r = await call(svc, RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(
            broker_name="b", designate_elect=True))
        assert r.code == ResponseCode.CONTROLLER_INVALID_REQUEST
        r = await call(svc, RequestCode.CONTROLLER_ELECT_MASTER,
                       ElectMasterRequestHeader(broker_name="nobody"))
        assert r.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        r = await call(svc, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, None, ["b", "nobody"])
        table = unpack_body(r.body)["replicasInfoTable"]
        assert list(table) == ["b"]
        assert [x["brokerId"] for x in table["b"]["inSyncReplicas"]] == [1, 2]
        nursery.cancel_scope.cancel()


async def test_runtime_config(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        svc, _ = await started(nursery)
        cmd = RemotingCommand.request(RequestCode.UPDATE_CONTROLLER_CONFIG,
                                      body=b"brokerHeartbeatTimeout=3000\n")
        r = await svc.processor.update_controller_config(Conn(), cmd)  # type: ignore[arg-type]
        assert r.code == ResponseCode.SUCCESS
        assert svc.heartbeats.timeout_s == 3.0
        cmd = RemotingCommand.request(RequestCode.UPDATE_CONTROLLER_CONFIG,
                                      body=b"controllerStorePath=/tmp/x\n")
        r = await svc.processor.update_controller_config(Conn(), cmd)  # type: ignore[arg-type]
        assert r.code == ResponseCode.SYSTEM_ERROR and "cannot change" in (r.remark or "")
        r = await call(svc, RequestCode.GET_CONTROLLER_CONFIG)
        assert b"brokerHeartbeatTimeout=3000" in (r.body or b"")
        nursery.cancel_scope.cancel()


async def test_elected_while_the_store_is_unreadable_leads_once_it_reads(
        autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore()
    switch = SwitchLeader()
    async with trio.open_nursery() as nursery:
        svc, _ = await started(nursery, store, leadership=switch)
        store.fail_load = "etcd unreachable"
        nursery.start_soon(switch.elect)
        await trio.sleep(1)
        assert not svc.is_leader
        r = await call(svc, RequestCode.CONTROLLER_GET_REPLICA_INFO,
                       GetReplicaInfoRequestHeader(broker_name="b"))
        assert r.code == ResponseCode.CONTROLLER_NOT_LEADER
        store.fail_load = None
        await wait_until(lambda: svc.is_leader, 6, "leading once the state reads")
        nursery.cancel_scope.cancel()


def beat_over(svc: ControllerService, conn: Conn, broker_id: int, epoch: int = 1,
              offset: int = 100) -> None:
    h = BrokerHeartbeatRequestHeader(cluster_name="c", broker_addr=A[broker_id], broker_name="b",
                                     broker_id=broker_id, epoch=epoch, max_offset=offset)
    cmd = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, h.to_fields(), oneway=True)
    assert svc.processor.broker_heartbeat(conn, cmd).code == ResponseCode.SUCCESS  # type: ignore[arg-type]


async def test_master_whose_connection_closes_is_replaced_at_once(
        autojump_clock: trio.testing.MockClock) -> None:
    """RocketMQ's onBrokerChannelClose: a killed master's socket closes, and the
    controller elects without waiting out brokerHeartbeatTimeout."""
    async with trio.open_nursery() as nursery:
        svc, notes = await started(nursery, brokerHeartbeatTimeout="10000",
                                   scanNotActiveBrokerInterval="1000")
        await two_in_sync(svc)
        c1, c2 = Conn(), Conn()
        beat_over(svc, c1, 1)
        beat_over(svc, c2, 2)
        await trio.sleep(0.3)
        closed_at = trio.current_time()
        svc.on_connection_closed(c1)
        while len(notes.views) < 2:
            await trio.sleep(0.01)
        assert trio.current_time() - closed_at < 0.05  # not the 10 s timeout, not a scan tick
        assert (notes.views[-1].master_id, notes.views[-1].master_epoch) == (2, 2)
        nursery.cancel_scope.cancel()


async def test_an_old_connection_closing_after_a_reconnect_changes_nothing(
        autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        svc, notes = await started(nursery, brokerHeartbeatTimeout="10000",
                                   scanNotActiveBrokerInterval="1000")
        await two_in_sync(svc)
        old, new, c2 = Conn(), Conn(), Conn()
        beat_over(svc, old, 1)
        beat_over(svc, c2, 2)
        beat_over(svc, new, 1)  # the master reconnected and beat over its new connection
        svc.on_connection_closed(old)
        svc.on_connection_closed(Conn())  # nobody's connection
        await trio.sleep(2.5)  # two scans and more
        assert len(notes.views) == 1 and svc.state.broker_sets["b"].master_id == 1
        # a slave's connection closing elects nobody either
        svc.on_connection_closed(c2)
        await trio.sleep(2.5)
        assert len(notes.views) == 1 and svc.state.broker_sets["b"].master_id == 1
        nursery.cancel_scope.cancel()


async def test_an_election_the_store_cannot_save_is_tried_again(
        autojump_clock: trio.testing.MockClock) -> None:
    """The store failing during a scan's election (etcd killed) is no crash of the scan
    and no traceback: nothing changes, and the next scan elects once the store is back."""
    store = MemoryStore()
    async with trio.open_nursery() as nursery:
        svc, notes = await started(nursery, store, brokerHeartbeatTimeout="10000",
                                   scanNotActiveBrokerInterval="1000")
        await two_in_sync(svc)
        c1, c2 = Conn(), Conn()
        beat_over(svc, c1, 1)
        beat_over(svc, c2, 2)
        store.fail = "etcd: no endpoint answered"
        svc.on_connection_closed(c1)
        await trio.sleep(2.5)
        assert svc.state.broker_sets["b"].master_id == 1 and len(notes.views) == 1
        store.fail = None
        back = trio.current_time()
        while len(notes.views) < 2:
            beat_over(svc, c2, 2)
            await trio.sleep(0.1)
        assert trio.current_time() - back <= 1.2  # the next scan, not the 10 s timeout
        assert notes.views[-1].master_id == 2
        nursery.cancel_scope.cancel()
