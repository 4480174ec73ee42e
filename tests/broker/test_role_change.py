"""A running broker changes role (controller.change_role): two real
BrokerControllers in this process, stores in tmp, on free loopback ports,
switch master -> slave -> master. Sends in flight are answered, nothing
acknowledged is lost, the old role's tasks are gone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import BrokerConfig, BrokerRole
from broker.controller import SLAVE_FENCE, BrokerController
from broker.role import RoleError
from broker.store.ha.ha_connection import HAConnection
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import SendMessageRequestHeader
from protocol.route import TopicConfig
from protocol.trio.client import RemotingClient
from tests.broker.fakes import FakeConn
from tests.integration.cluster import free_port
from tests.integration.ha_reads import drain_queue, queue_max_offset, topic_readable
from tests.waits import wait_until

A, S, M = BrokerRole.ASYNC_MASTER, BrokerRole.SYNC_MASTER, BrokerRole.SLAVE
TOPIC = "RoleChange"
SLAVE_REMARK = "the broker[broker-a] is a slave, sending message is forbidden"
# what a send may be answered while the broker it went to changes role
IN_FLIGHT_CODES = {ResponseCode.SUCCESS, ResponseCode.NO_PERMISSION,
                   ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SLAVE_NOT_AVAILABLE}


def config(root: Path, port: int, role: BrokerRole, broker_id: int,
           **more: Any) -> BrokerConfig:
    return BrokerConfig(
        store_path_root_dir=str(root), broker_name="broker-a", broker_role=role,
        broker_id=broker_id, listen_port=port, maped_file_size_commit_log=1 << 20,
        maped_file_size_consume_queue=1000 * 20, max_hash_slot_num=64, max_index_num=256,
        slave_sync_interval=200, **more)


def ha_addr(c: BrokerController) -> str:
    return f"127.0.0.1:{c.config.ha_port}"


async def send(rc: RemotingClient, addr: str, body: bytes) -> RemotingCommand:
    fields = SendMessageRequestHeader(producer_group="p", topic=TOPIC, queue_id=0).to_fields()
    with trio.fail_after(15):  # answered, never left hanging
        return await rc.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE, fields,
                                                             body), 15)


async def send_all(rc: RemotingClient, addr: str, bodies: list[bytes]) -> list[bytes]:
    acked = []
    for body in bodies:
        r = await send(rc, addr, body)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        acked.append(body)
    return acked


async def during(change: Callable[[], Awaitable[Any]], rc: RemotingClient,
                 targets: list[str], tag: str, senders: int = 3) -> list[bytes]:
    """Run ``change`` while sends to ``targets`` are in flight: senders
    (``senders`` per target) send one after another from before the change
    (some acknowledged first) until one more after it; every send is
    answered with a code a role change allows. Returns the bodies
    acknowledged."""
    acked: list[bytes] = []
    codes: list[int] = []
    changed = False
    flowing = trio.Event()

    async def sender(addr: str, n: int) -> None:
        for i in range(10_000):
            last = changed
            body = f"{tag}-{n}-{i}".encode()
            r = await send(rc, addr, body)
            codes.append(r.code)
            if r.code == ResponseCode.SUCCESS:
                acked.append(body)
                if len(acked) >= 2 * senders:
                    flowing.set()
            if last:
                return
            await trio.sleep(0.002)  # pacing, not waiting: refusals come back fast

    async with trio.open_nursery() as nursery:
        for n, addr in enumerate(targets * senders):
            nursery.start_soon(sender, addr, n)
        await flowing.wait()
        await change()
        changed = True
    assert set(codes) <= IN_FLIGHT_CODES, codes
    assert ResponseCode.SUCCESS in codes and len(set(codes)) > 1, codes
    return acked


def slave_connected(c: BrokerController) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return bool(c.ha_service.connections)
    return check


def same_log(a: BrokerController, b: BrokerController) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return a.message_store.get_max_phy_offset() == b.message_store.get_max_phy_offset()
    return check


async def readable(rc: RemotingClient, c: BrokerController) -> list[bytes]:
    end = await queue_max_offset(rc, c.config.broker_addr, TOPIC, 0)
    return await drain_queue(rc, c.config.broker_addr, TOPIC, 0, end)


def assert_master(c: BrokerController) -> None:
    assert not c.role.is_slave and c.config.broker_role is not M and c.config.broker_id == 0
    assert c.message_store.write_fence is None and c.ha_listen_port == c.config.ha_port
    assert c.role_runner.groups_started - c.role_runner.groups_ended == 1


def assert_slave(c: BrokerController, broker_id: int) -> None:
    assert c.role.is_slave and c.config.broker_role is M and c.config.broker_id == broker_id
    assert c.message_store.write_fence == SLAVE_FENCE
    assert c.ha_listen_port is None and not c.ha_service.connections
    assert len(c.ha_service.waiters) == 0
    names = c.role_runner.group_tasks()
    assert any(n.endswith("run_slave") for n in names)
    assert not any("run_master" in n or "schedule" in n.lower() for n in names), names
    assert c.role_runner.groups_started - c.role_runner.groups_ended == 1


async def test_master_to_slave_to_master_loses_nothing(tmp_path: Path) -> None:
    x = BrokerController(config(tmp_path / "x", free_port(2), A, 0))
    y_port = free_port(2)
    y = BrokerController(config(tmp_path / "y", y_port, M, 1,
                                ha_master_address=f"127.0.0.1:{x.config.ha_port}"))
    acked: list[bytes] = []
    with trio.fail_after(90):
        async with RemotingClient() as rc, trio.open_nursery() as nursery:
            await nursery.start(x.run)
            x.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
            await nursery.start(y.run)
            # the slave's master, remoting address too (metadata sync) without a name server
            await y.change_role(M, 1, x.config.broker_addr, ha_addr(x))
            acked += await send_all(rc, x.config.broker_addr, [b"a-%d" % i for i in range(20)])
            await wait_until(same_log(x, y), 20, "the slave holding the master's log")
            await wait_until(lambda: topic_readable(rc, y.config.broker_addr, TOPIC), 20,
                           "the topic copied to the slave")
            await wait_until(slave_connected(x), 20, "the slave connected")
            master_tasks = x.role_runner.group_tasks()
            assert_master(x)

            # 1. x stands down while sends are in flight: the slave takes what it stored
            acked += await during(lambda: x.change_role(M, 2, y.config.broker_addr, ha_addr(y)),
                                  rc, [x.config.broker_addr], "b")
            assert_slave(x, 2)
            assert await same_log(x, y)()  # a clean hand-over: y holds every byte x has
            r = await send(rc, x.config.broker_addr, b"refused")
            assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, SLAVE_REMARK)

            # 2. y takes over; x follows it, refuses sends, serves pulls
            await y.change_role(A, 0)
            assert_master(y)
            acked += await send_all(rc, y.config.broker_addr, [b"c-%d" % i for i in range(20)])
            await wait_until(same_log(x, y), 20, "x holding its new master's log")
            assert x.ha_service.master_accepted and x.ha_service.link == "accepted"
            assert sorted(await readable(rc, x)) == sorted(acked)
            r = await send(rc, x.config.broker_addr, b"refused")
            assert r.code == ResponseCode.NO_PERMISSION

            # 3. back: y stands down and x takes writes again, sends in flight to both
            async def switch_back() -> None:
                await y.change_role(M, 1, x.config.broker_addr, ha_addr(x))
                await x.change_role(A, 0)

            acked += await during(switch_back, rc, [x.config.broker_addr, y.config.broker_addr],
                                  "d")
            assert_master(x)
            assert_slave(y, 1)
            acked += await send_all(rc, x.config.broker_addr, [b"e-%d" % i for i in range(20)])
            await wait_until(same_log(x, y), 20, "y holding x's log again")
            assert len(x.ha_service.connections) == 1  # x's HA master side serves y
            # the same services as before, nothing left over from the other roles
            assert x.role_runner.group_tasks() == master_tasks
            assert x.role.epoch == 2 and y.role.epoch == 3
            for c in (x, y):  # every acknowledged message, once, on both
                bodies = await readable(rc, c)
                assert sorted(b for b in bodies if b in set(acked)) == sorted(acked)
                assert len(bodies) == len(set(bodies))
            x.request_shutdown()
            y.request_shutdown()


async def test_a_standing_down_master_answers_the_sends_waiting_for_a_slave(
        tmp_path: Path) -> None:
    """SYNC_MASTER sends waiting for a slave when the broker becomes a slave:
    those the slave acknowledges while the master stands down are answered
    SUCCESS, the rest SLAVE_NOT_AVAILABLE (stored, not known replicated)."""
    c = BrokerController(config(tmp_path, 0, S, 0, sync_flush_timeout=30_000,
                                ha_slave_silent_ms=100))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(c.run)
            c.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
            ha = c.ha_service
            slave = HAConnection(c.message_store)  # a slave as the master sees it
            slave.connected(trio.current_time())
            slave.on_report(c.message_store.get_max_phy_offset(), trio.current_time())
            ha.connections.add(slave)
            handler, _ = c._handler_table().lookup(RequestCode.SEND_MESSAGE)
            assert handler is not None
            conn = FakeConn()
            fields = SendMessageRequestHeader(producer_group="p", topic=TOPIC,
                                              queue_id=0).to_fields()
            ends = []
            for i in range(4):
                cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, b"w-%d" % i)
                assert handler(conn, cmd) is None  # type: ignore[arg-type]  # waits for the slave
                ends.append(c.message_store.get_max_phy_offset())
            assert len(ha.waiters) == 4 and conn.sent == []

            async def slave_acks_half() -> None:
                # the slave acknowledges the first two sends while the master drains
                while len(ha.waiters) < 5:  # the four sends and the hand-over's own
                    await trio.sleep(0)
                slave.acked_offset = ends[1]  # what its reader task records
                ha.waiters.advance(ends[1])
                # then it falls silent: the silence check ends the rest
                slave.silent_confirmed = True

            nursery.start_soon(slave_acks_half)
            with pytest.raises(RoleError, match="a slave needs a brokerId above 0"):
                await c.change_role(M, 0)
            await c.change_role(M, 1)
            assert [r.code for r in conn.sent] == [ResponseCode.SUCCESS] * 2 + [
                ResponseCode.SLAVE_NOT_AVAILABLE] * 2
            assert len(ha.waiters) == 0 and c.role.is_slave
            c.request_shutdown()


async def test_a_change_registers_at_once_and_slaves_find_the_new_master(
        tmp_path: Path) -> None:
    """With a name server: each change registers the new brokerId at once; a
    slave learns its (new) master's address from the registration's answer."""
    ns = NamesrvController(NamesrvConfig(listen_port=0))
    with trio.fail_after(60):
        async with RemotingClient() as rc, trio.open_nursery() as nursery:
            await nursery.start(ns.run)
            ns_addr = f"127.0.0.1:{ns.port}"
            x = BrokerController(config(tmp_path / "x", free_port(2), A, 0, namesrv_addr=ns_addr))
            y = BrokerController(config(tmp_path / "y", free_port(2), M, 1, namesrv_addr=ns_addr))

            def ids() -> dict[int, str]:
                return dict(ns.routes.broker_addr_table["broker-a"].broker_addrs)

            await nursery.start(x.run)
            x.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
            await nursery.start(y.run)
            await wait_until(slave_connected(x), 20, "y following x")
            assert ids() == {0: x.config.broker_addr, 1: y.config.broker_addr}
            acked = await send_all(rc, x.config.broker_addr, [b"a-%d" % i for i in range(5)])

            await x.change_role(M, 2)
            assert ids() == {1: y.config.broker_addr, 2: x.config.broker_addr}
            assert await same_log(x, y)()
            # y becomes the master; x (listed by the name server) is heard before y writes
            await y.change_role(A, 0)
            assert ids() == {0: y.config.broker_addr, 2: x.config.broker_addr}
            assert ns.routes.broker_live_table[y.config.broker_addr].ha_server_addr == ha_addr(y)
            assert ns.routes.broker_live_table[x.config.broker_addr].ha_server_addr is None
            assert y.ha_service.heard == {2: "accept"}
            acked += await send_all(rc, y.config.broker_addr, [b"b-%d" % i for i in range(5)])
            await wait_until(same_log(x, y), 20, "x following y")
            assert x.ha_service.master_ha_addr == ha_addr(y)
            assert x.slave_synchronize.master_addr() == y.config.broker_addr
            assert sorted(await readable(rc, x)) == sorted(acked)
            x.request_shutdown()
            y.request_shutdown()
            ns.request_shutdown()
