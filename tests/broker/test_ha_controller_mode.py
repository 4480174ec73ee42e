"""Controller mode on a master's HA service (no controller yet: the
SyncStateSet is set through ``set_sync_state_set``): what acknowledges a
SYNC_MASTER send (minInSyncReplicas, allAckInSyncStateSet), the
IN_SYNC_REPLICAS_NOT_ENOUGH refusal, and the non-controller rule unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.config import BrokerConfig, BrokerRole
from broker.ha_service import CONFIRM_LINGER, HAService
from broker.send_processor import PUT_STATUS_TO_CODE
from broker.store import DefaultMessageStore
from broker.store.ha.ha_connection import HAConnection
from broker.store.ha.sync_state import SyncStateError, SyncStateSet
from broker.store.ha.transfer import TransferDecoder
from broker.store.status import PutMessageStatus
from protocol.batch import encode_batch
from protocol.codes import ResponseCode
from tests.broker.store.helpers import inner, make_config, open_store

S = PutMessageStatus


def master(tmp_path: Path, *, controller: bool = True, min_in_sync: int = 1,
           all_ack: bool = False, slaves: tuple[int, ...] = (1, 2),
           ) -> tuple[DefaultMessageStore, HAService, dict[int, HAConnection]]:
    config: BrokerConfig = make_config(tmp_path, cl_size=1 << 20)
    config.broker_role = BrokerRole.SYNC_MASTER
    config.enable_controller_mode = controller
    config.min_in_sync_replicas = min_in_sync
    config.all_ack_in_sync_state_set = all_ack
    store = open_store(config)
    ha = HAService(config, store)
    conns: dict[int, HAConnection] = {}
    for broker_id in slaves:
        conn = HAConnection(store, 1 << 16)
        conn.broker_id = broker_id
        conn.connected(0.0)
        conn.on_report(0, 0.0)
        ha.connections.add(conn)
        conns[broker_id] = conn
    return store, ha, conns


def put(store: DefaultMessageStore, body: bytes = b"x" * 100) -> int:
    r = store.put_message(inner("T", 0, body))
    assert r.ok, r
    return store.get_max_phy_offset()


def ack(ha: HAService, conn: HAConnection, offset: int) -> None:
    """The slave was sent up to ``offset`` and acknowledges it."""
    now = trio.current_time()
    while (t := conn.next_transfer(now)) is not None and t[1]:
        pass
    conn.on_report(offset, now)
    ha.reported(conn, now)


def sss(*members: int, epoch: int = 1) -> SyncStateSet:
    return SyncStateSet(0, frozenset({0, *members}), epoch)


async def test_min_in_sync_replicas_counts_the_master_and_members_only(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    store, ha, conns = master(tmp_path, min_in_sync=2)
    ha.set_sync_state_set(sss(1, epoch=1))  # slave 2 connected but not in the set
    end = put(store)
    w = ha.wait_slave(end)
    assert w.status is None
    ack(ha, conns[2], end)  # outside the SyncStateSet: counts for nothing
    assert w.status is None
    ack(ha, conns[1], end)
    assert w.status is S.PUT_OK
    store.shutdown()


async def test_min_in_sync_replicas_one_is_the_master_alone(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    store, ha, _ = master(tmp_path, min_in_sync=1)
    ha.set_sync_state_set(sss(1, 2))
    assert ha.wait_slave(put(store)).status is S.PUT_OK
    store.shutdown()


async def test_all_ack_waits_for_every_member_and_a_shrink_releases(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    store, ha, conns = master(tmp_path, min_in_sync=1, all_ack=True)
    ha.set_sync_state_set(sss(1, 2, epoch=4))
    end = put(store)
    w = ha.wait_slave(end)
    ack(ha, conns[1], end)
    assert w.status is None  # member 2 has not
    # the controller takes 2 out of the set: everyone left holds it
    ha.set_sync_state_set(sss(1, epoch=5))
    assert w.status is S.PUT_OK
    with pytest.raises(SyncStateError):
        ha.set_sync_state_set(sss(1, 2, epoch=4))
    store.shutdown()


async def test_a_send_not_held_by_enough_members_times_out(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    store, ha, conns = master(tmp_path, min_in_sync=3)
    ha.set_sync_state_set(sss(1, 2))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ha.sends.run_expiry)
        nursery.start_soon(ha.run_silence_check)
        end = put(store)
        w = ha.wait_slave(end)
        ack(ha, conns[1], end)
        t0 = trio.current_time()
        done = trio.Event()
        w.on_done(lambda _w: done.set())
        await done.wait()
        # syncFlushTimeout (5 s); silence never ends it in controller mode
        assert w.status is S.FLUSH_SLAVE_TIMEOUT and trio.current_time() - t0 >= 5
        nursery.cancel_scope.cancel()
    store.shutdown()


async def test_a_set_smaller_than_min_in_sync_replicas_refuses_the_put(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    store, ha, _ = master(tmp_path, min_in_sync=2)
    before = store.get_max_phy_offset()
    r = store.put_message(inner("T", 0, b"x"))  # no SyncStateSet yet
    assert r.put_message_status is S.IN_SYNC_REPLICAS_NOT_ENOUGH and "no SyncStateSet" in r.detail
    ha.set_sync_state_set(sss(epoch=2))  # the master alone
    kw: dict[str, Any] = {"sys_flag": 0, "born_timestamp": 1, "born_host": "127.0.0.1:5",
                          "reconsume_times": 0}
    # the compiled batch path steps aside; the others answer
    assert store.put_batch_body("T", 0, encode_batch([(0, b"x", "")]), **kw) is None
    batch = store.put_batch("T", 0, [(0, b"x", "")], **kw)
    assert batch is not None
    for attempt in (store.put_message(inner("T", 0, b"x")),
                    store.put_together([inner("T", 0, b"x")])[0], batch):
        assert attempt.put_message_status is S.IN_SYNC_REPLICAS_NOT_ENOUGH
        assert "has 1 of minInSyncReplicas=2" in attempt.detail
    assert store.get_max_phy_offset() == before  # nothing written
    assert PUT_STATUS_TO_CODE[S.IN_SYNC_REPLICAS_NOT_ENOUGH] == (
        ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough")
    ha.set_sync_state_set(sss(1, epoch=3))
    end = put(store)
    # the set shrank between the put and its wait: answered at once
    ha.set_sync_state_set(sss(epoch=4))
    assert ha.wait_slave(end).status is S.IN_SYNC_REPLICAS_NOT_ENOUGH
    # an ASYNC_MASTER (the live role says so) takes the put
    ha.sync_master = lambda: False
    assert store.put_message(inner("T", 0, b"x")).ok
    store.shutdown()


async def test_without_controller_mode_the_best_slave_releases_as_before(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    store, ha, conns = master(tmp_path, controller=False, min_in_sync=3, all_ack=True)
    assert store.replicas_check is None  # no extra work on the put path
    end = put(store)
    w = ha.wait_slave(end)
    assert w.status is None
    ack(ha, conns[2], end)  # no SyncStateSet, no minInSyncReplicas: one slave is enough
    assert w.status is S.PUT_OK
    store.shutdown()


# ---- shrink and expand on the master, in virtual time ------------------------------------


def joined(ha: HAService, conn: HAConnection) -> None:
    """What the HA service does when a slave's connection streams."""
    from broker.store.ha.sync_state import CatchUp
    assert conn.broker_id is not None
    ha.catch_up.setdefault(conn.broker_id, CatchUp(trio.current_time()))


async def test_a_lagging_member_is_proposed_out_and_back_in_once_caught_up(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    from broker.store.ha.sync_state import Proposal
    store, ha, conns = master(tmp_path, min_in_sync=1)
    proposals: list[Proposal] = []
    ha.on_sync_state_proposal = proposals.append
    ha.set_sync_state_set(sss(1, 2, epoch=3))
    for conn in conns.values():
        joined(ha, conn)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ha.run_sync_state_check)
        # slave 1 keeps up every 0.5 s; slave 2 stops acknowledging
        t0 = trio.current_time()
        while not proposals:
            end = put(store)
            now = trio.current_time()
            ha.catch_up[1].on_sent(end, now)
            ha.catch_up[2].on_sent(end, now)
            ack(ha, conns[1], end)
            await trio.sleep(0.5)
        took = trio.current_time() - t0
        # haMaxTimeSlaveNotCatchup (15 s), checked every second
        assert 15.0 < took <= 16.5, took
        assert proposals == [Proposal(0, frozenset({0, 1}), 3, removed=frozenset({2}))]
        # the controller's answer: 2 is out; the confirm offset is what 0 and 1 hold
        ha.set_sync_state_set(sss(1, epoch=4))
        assert ha.confirm_offset() == store.get_max_phy_offset()
        status = ha.status()
        assert status["syncStateSet"] == {"masterId": 0, "syncStateSet": [0, 1],
                                          "syncStateSetEpoch": 4}
        assert status["confirmOffset"] == store.get_max_phy_offset()
        await trio.sleep(3)
        assert len(proposals) == 1  # nothing more to change meanwhile
        # slave 2 catches up to the confirm offset (in this epoch): proposed back
        end = store.get_max_phy_offset()
        ack(ha, conns[2], end)
        await trio.sleep(1.1)
        assert proposals[-1] == Proposal(0, frozenset({0, 1, 2}), 4, added=frozenset({2}))
        nursery.cancel_scope.cancel()
    store.shutdown()


async def test_a_member_that_never_connects_has_its_grace_then_leaves(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    store, ha, _ = master(tmp_path, slaves=())
    ha.set_sync_state_set(sss(5, epoch=1))
    assert ha.check_sync_state(trio.current_time()) is None  # just became master
    await trio.sleep(15.5)
    p = ha.check_sync_state(trio.current_time())
    assert p is not None and p.removed == {5} and p.members == {0}
    # a broker that stands down forgets its set and its slaves
    ha.take_role(slave=True)
    assert ha.sync_state.current is None and not ha.catch_up
    assert ha.check_sync_state(trio.current_time()) is None
    store.shutdown()


# ---- a master and a slave over 127.0.0.1: acks, confirm offset, dispatch -----------------


async def test_consumers_see_only_what_the_sync_state_set_holds(tmp_path: Path) -> None:
    from tests.waits import wait_until
    store, ha, _ = master(tmp_path / "m", min_in_sync=2, slaves=())
    scfg = make_config(tmp_path / "s", cl_size=1 << 20)
    scfg.broker_role, scfg.broker_id = BrokerRole.SLAVE, 1
    scfg.enable_controller_mode = True
    slave_store = open_store(scfg)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(ha.run_master, 0)
        scfg.ha_master_address = f"127.0.0.1:{port}"
        slave = HAService(scfg, slave_store)
        slave_scope = trio.CancelScope()

        async def follow() -> None:
            with slave_scope:
                await slave.run_slave()
        nursery.start_soon(follow)
        ha.set_sync_state_set(sss(1, epoch=1))
        await wait_until(lambda: any(c.broker_id == 1 for c in ha.connections), 10,
                         "the slave connected")
        end = put(store)
        w = ha.wait_slave(end)
        done = trio.Event()
        w.on_done(lambda _w: done.set())
        with trio.fail_after(10):
            await done.wait()
        assert w.status is S.PUT_OK
        # the master dispatches once both hold it; the slave once its master says so
        await wait_until(lambda: store.get_max_offset_in_queue("T", 0) == 1, 10,
                         "the master's consumers see the message")
        await wait_until(lambda: slave_store.get_max_offset_in_queue("T", 0) == 1, 10,
                         "the slave's consumers see it")
        assert slave_store.dispatch_limit == end
        # the slave stops: a new message is stored on the master, not shown; the
        # master proposes it out when its connection closes (no periodic check runs
        # here: RocketMQ's removeConnection), not haMaxTimeSlaveNotCatchup later
        from broker.store.ha.sync_state import Proposal
        proposals: list[Proposal] = []
        ha.on_sync_state_proposal = proposals.append
        slave_scope.cancel()
        await wait_until(lambda: not ha.connections, 10, "the slave gone")
        assert proposals == [Proposal(0, frozenset({0}), 1, removed=frozenset({1}))]
        second = put(store)
        await trio.testing.wait_all_tasks_blocked()
        assert store.get_max_offset_in_queue("T", 0) == 1 and store.reput_offset == end
        # the controller takes the slave out: the master alone holds the set
        ha.set_sync_state_set(sss(epoch=2))
        await wait_until(lambda: store.get_max_offset_in_queue("T", 0) == 2, 10,
                         "shown once the set shrank")
        assert store.reput_offset == second
        nursery.cancel_scope.cancel()
    store.shutdown()
    slave_store.shutdown()


# ---- the confirm offset rides transfers (CONFIRM_LINGER) -------------------------------------


async def test_a_confirm_offset_rides_the_next_transfer_or_goes_alone_after_the_linger(
        tmp_path: Path, mock_clock: trio.testing.MockClock) -> None:
    """A slave's report moves the confirm offset; it is not sent alone at once
    but with the next transfer, or alone once CONFIRM_LINGER passed."""
    clock = mock_clock
    store, ha, conns = master(tmp_path, min_in_sync=2, slaves=(1,))
    ha.set_sync_state_set(sss(1))
    conn = conns[1]
    conn.wants_confirm = True
    here, there = trio.testing.memory_stream_pair()
    decoder = TransferDecoder(1 << 20, confirm=True)
    got: list[tuple[int, bytes]] = []

    async def slave() -> None:
        while data := await there.receive_some(1 << 20):
            got.extend(decoder.feed_joined(data))

    async def receive() -> None:
        """Until the writer and the slave's side wait (what was sent is read)."""
        await trio.testing.wait_all_tasks_blocked()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slave)
        nursery.start_soon(ha._write_transfers, conn, here)
        first = put(store)
        ha.notify_new_data()
        await receive()
        assert got and got[-1][0] + len(got[-1][1]) == first
        assert decoder.confirm_offset == 0  # nothing acknowledged yet: rides the transfer
        # the slave acknowledges: the confirm offset moves, nothing goes out alone yet
        conn.on_report(first, trio.current_time())
        ha.reported(conn, trio.current_time())
        ha.notify_new_data()
        await receive()
        assert decoder.confirm_offset == 0
        # a new put within the linger: its transfer carries the confirm offset
        clock.jump(CONFIRM_LINGER / 2)
        second = put(store)
        ha.notify_new_data()
        await receive()
        assert got[-1][0] + len(got[-1][1]) == second and decoder.confirm_offset == first
        # acknowledged, and no transfer follows: it goes alone once the linger passed
        conn.on_report(second, trio.current_time())
        ha.reported(conn, trio.current_time())
        ha.notify_new_data()
        await receive()
        assert decoder.confirm_offset == first
        clock.jump(CONFIRM_LINGER * 0.9)
        await receive()
        assert decoder.confirm_offset == first
        clock.jump(CONFIRM_LINGER * 0.2)
        await receive()
        assert decoder.confirm_offset == second
        nursery.cancel_scope.cancel()
    store.shutdown()
