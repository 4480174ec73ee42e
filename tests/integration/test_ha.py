"""Master/slave replication between real daemons on 127.0.0.1."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import trio

from client import Message, Producer, SendStatus
from client.admin import MQAdmin
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from protocol.record import decode_records
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster, Daemon
from tests.integration.waits import routed, wait_for

TOPIC = "HaTopic"
CL_FILE = 256 * 1024


def commit_log(store: Path) -> bytes:
    files = sorted((store / "commitlog").iterdir())
    return b"".join(f.read_bytes() for f in files if f.name.isdigit())


def pair(cluster: Cluster, ns: str, role: str, **props: object) -> tuple[Daemon, Daemon]:
    common: dict[str, object] = {"mapedFileSizeCommitLog": CL_FILE,
                                 "mapedFileSizeConsumeQueue": 20 * 1000,
                                 "slaveSyncInterval": 300, **props}
    master = cluster.broker("broker-a", ns, brokerRole=role, **common)
    slave = cluster.broker("broker-a-s", ns, brokerName="broker-a", brokerId=1,
                           brokerRole="SLAVE", **common)
    return master, slave


async def pull_all(addr: str, topic: str, queue_id: int, want: int) -> list[bytes]:
    """Every body of a queue read straight from the broker at ``addr``."""
    bodies: list[bytes] = []
    offset = 0
    async with RemotingClient() as rc:
        with trio.fail_after(30):
            while len(bodies) < want:
                h = PullMessageRequestHeader("ha-reader", topic, queue_id, offset, 32)
                r = await rc.invoke(addr, RemotingCommand.request(
                    RequestCode.PULL_MESSAGE, h.to_fields()), 5)
                if r.code == ResponseCode.SUCCESS:
                    assert r.body is not None
                    bodies += [m.body for m in decode_records(r.body)]
                    offset = PullMessageResponseHeader.from_fields(r.ext_fields).next_begin_offset
                else:
                    await trio.sleep(0.05)
    return bodies


async def test_sync_master_replicates_and_refuses_without_slave(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "SYNC_MASTER")
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=master.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_for(routed(admin, TOPIC), 10, "topic routed")
        route = await admin.topic_route(TOPIC)
        addrs = {bd.broker_name: bd.broker_addrs for bd in route.broker_datas}
        assert addrs["broker-a"] == {0: master.addr, 1: slave.addr}

    async with Producer("ha-producer", ns.addr) as producer:
        # the slave connects after its first registration: wait until a send is SEND_OK
        async def replicated() -> bool:
            r = await producer.send(Message(TOPIC, b"probe"))
            return r.send_status == SendStatus.SEND_OK
        await wait_for(replicated, 20, "a slave acknowledging sends")
        bodies: list[bytes] = []
        for i in range(300):
            body = f"m-{i}".encode() * 20
            r = await producer.send(Message(TOPIC, body))
            assert r.send_status == SendStatus.SEND_OK, r
            bodies.append(body)

        # the slave serves the same messages (its topic copied from the master)
        from_slave = await pull_all(slave.addr, TOPIC, 0, want=len(bodies) + 1)
        assert from_slave[-len(bodies):] == bodies
        # consumer offsets committed on the master arrive on the slave
        async with RemotingClient() as rc:
            up = {"consumerGroup": "ha-group", "topic": TOPIC, "queueId": 0, "commitOffset": 42}
            r = await rc.invoke(master.addr, RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET, up), 5)
            assert r.code == ResponseCode.SUCCESS

            async def offset_on_slave() -> bool:
                q = {"consumerGroup": "ha-group", "topic": TOPIC, "queueId": 0}
                resp = await rc.invoke(slave.addr, RemotingCommand.request(
                    RequestCode.QUERY_CONSUMER_OFFSET, q), 5)
                return resp.code == ResponseCode.SUCCESS and resp.ext_fields["offset"] == 42
            await wait_for(offset_on_slave, 20, "the master's consumer offset on the slave")
        # the slave's log is the master's byte for byte
        m_log = commit_log(cluster.root / "store-broker-a")
        s_log = commit_log(cluster.root / "store-broker-a-s")
        end = len(s_log.rstrip(b"\x00"))
        assert end > 0 and s_log[:end] == m_log[:end]

        # a slave refuses sends, naming itself a slave
        async with RemotingClient() as rc:
            h = {"producerGroup": "p", "topic": TOPIC, "queueId": 0}
            resp = await rc.invoke(slave.addr, RemotingCommand.request(
                RequestCode.SEND_MESSAGE, h, b"x"), 5)
            assert resp.code == ResponseCode.NO_PERMISSION and "slave" in (resp.remark or "")

        # no slave: the message is stored, the producer is told SLAVE_NOT_AVAILABLE
        slave.stop()

        async def refused() -> bool:
            r = await producer.send(Message(TOPIC, b"alone"))
            return r.send_status == SendStatus.SLAVE_NOT_AVAILABLE
        await wait_for(refused, 20, "SLAVE_NOT_AVAILABLE without a slave")

        # the slave comes back and catches up from its own offset
        slave.start()
        await wait_for(replicated, 30, "the slave acknowledging again")
    assert master.proc is not None and master.proc.poll() is None


async def test_cluster_list_and_broker_status_show_roles_and_replication(
        cluster: Cluster) -> None:
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "ASYNC_MASTER")
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=master.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_for(routed(admin, TOPIC), 10, "topic routed")
        async with Producer("ha-status", ns.addr) as producer:
            for _ in range(20):
                await producer.send(Message(TOPIC, b"x" * 100))

        async def caught_up() -> bool:
            m = await admin.broker_runtime_info(master.addr)
            slaves = m["ha"]["slaves"]
            return bool(slaves) and slaves[0]["behind"] == 0 and slaves[0]["ackedOffset"] > 0
        await wait_for(caught_up, 20, "the slave acknowledging everything")
        s = await admin.broker_runtime_info(slave.addr)
        assert s["brokerRole"] == "SLAVE" and s["brokerId"] == 1
        assert s["ha"]["masterHaAddress"] is not None and s["ha"]["lag"] == 0

    bin_dir = Path(sys.executable).parent
    out = subprocess.run([str(bin_dir / "mqadmin"), "clusterList", "-n", ns.addr],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert re.search(rf"broker-a\s+0\s+ASYNC_MASTER\s+{re.escape(master.addr)}", out), out
    assert re.search(rf"broker-a\s+1\s+SLAVE\s+{re.escape(slave.addr)}", out), out
    out = subprocess.run([str(bin_dir / "mqadmin"), "brokerStatus", "-n", ns.addr,
                          "-b", master.addr], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    assert re.search(r"slave0BehindBytes\s+: 0", out), out
