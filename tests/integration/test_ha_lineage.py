"""Replication never splices two logs (real daemons on 127.0.0.1).

The canonical recovery: the master's disk is replaced and the master restarts
empty while its slave holds every acknowledged message. The master must not
take writes over the longer slave (they would land at offsets the slave
already holds, and the slave would append them after its own bytes); it is
restored from the slave (recoverFromSlave) or the slave discards its log
(haDiscardLog). A slave whose log another master wrote is refused, never
appended to.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections import Counter

import pytest

from client import Message, MQBrokerError, MQClientError, Producer, SendStatus
from client.admin import MQAdmin, MQAdminError
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.client import RemotingClient
from tests.integration.cluster import BIN, Cluster, Daemon
from tests.integration.ha_reads import (
    commit_log_bytes,
    drain_queue,
    max_offsets,
    topic_readable,
)
from tests.integration.test_ha import (
    CL_FILE,
    create_topic,
    once_each,
    pair,
    same_max_offset,
    store_of,
)
from tests.waits import wait_until

GROUP = "lineage-group"


def bodies(tag: str, n: int, variable: bool, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        size = rnd.randrange(20, 3000) if variable else 400
        head = f"{tag}-{i:05d}|".encode()
        out.append(head + b"v" * max(0, size - len(head)))
    return out


async def send_all(ns: str, topic: str, items: list[bytes]) -> list[bytes]:
    """Send each body once (no retries); the SEND_OK ones."""
    acked: list[bytes] = []
    async with Producer(f"lineage-{random.randrange(10**9)}", ns, retry_times_when_send_failed=0
                        ) as p:
        for body in items:
            try:
                r = await p.send(Message(topic, body))
            except (MQClientError, MQBrokerError):
                continue
            if r.send_status == SendStatus.SEND_OK:
                acked.append(body)
    return acked


async def read_all(addr: str, topic: str, queues: int) -> Counter[bytes]:
    got: Counter[bytes] = Counter()
    async with RemotingClient() as rc:
        ends = await max_offsets(rc, addr, topic, queues)
        for q in range(queues):
            got.update(await drain_queue(rc, addr, topic, q, ends[q]))
    return got


async def consumer_offset(addr: str, topic: str, queue: int) -> int | None:
    async with RemotingClient() as rc:
        q = {"consumerGroup": GROUP, "topic": topic, "queueId": queue}
        resp = await rc.invoke(addr, RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET, q), 5)
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else None


async def commit_offset(addr: str, topic: str, queue: int, offset: int) -> None:
    async with RemotingClient() as rc:
        up = {"consumerGroup": GROUP, "topic": topic, "queueId": queue, "commitOffset": offset}
        resp = await rc.invoke(addr, RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET, up), 5)
    assert resp.code == ResponseCode.SUCCESS, resp


async def direct_send(addr: str, topic: str) -> RemotingCommand:
    async with RemotingClient() as rc:
        h = {"producerGroup": "p", "topic": topic, "queueId": 0}
        return await rc.invoke(addr, RemotingCommand.request(
            RequestCode.SEND_MESSAGE, h, b"refused?"), 5)


async def ha(admin: MQAdmin, d: Daemon) -> dict:
    try:
        table = await admin.broker_runtime_info(d.addr)
    except MQAdminError:  # a connection from before the daemon restarted: once more
        table = await admin.broker_runtime_info(d.addr)
    return table["ha"]


def restart_empty(cluster: Cluster, master: Daemon) -> None:
    master.kill()
    shutil.rmtree(store_of(cluster, master))
    master.start(timeout=30)


@pytest.mark.parametrize("role, variable", [("ASYNC_MASTER", False), ("SYNC_MASTER", True)])
async def test_empty_master_takes_no_writes_until_restored_from_its_slave(
        cluster: Cluster, role: str, variable: bool) -> None:
    topic, queues = "LineageTopic", 2
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, role)
    m_store, s_store = store_of(cluster, master), store_of(cluster, slave)
    await create_topic(ns.addr, master, topic, queues)
    async with RemotingClient() as rc:
        await wait_until(lambda: topic_readable(rc, slave.addr, topic), 20, "topic on the slave")
    old = bodies("old", 1500, variable, 1)
    async with MQAdmin(ns.addr) as admin:
        # SYNC_MASTER: the slave connects after its first registration
        await wait_until(lambda: _slave_connected(admin, master), 20, "the slave connected")
        acked_old = await send_all(ns.addr, topic, old)
        assert len(acked_old) == len(old)
        await commit_offset(master.addr, topic, 0, 100)
        await wait_until(same_max_offset(admin, master, slave), 20, "the slave caught up")

        async def offset_on_slave() -> bool:
            return await consumer_offset(slave.addr, topic, 0) == 100
        await wait_until(offset_on_slave, 20, "the group's offset on the slave")
        slave_log = commit_log_bytes(s_store, CL_FILE)

        restart_empty(cluster, master)  # its disk replaced: the slave holds everything

        # the master heard the slave before taking writes: it is behind, it says so
        m_ha = await ha(admin, master)
        assert m_ha["writable"] is False, m_ha
        assert "slave log longer than master" in m_ha["writeFence"], m_ha

        async def slave_refused() -> bool:
            return (await ha(admin, slave))["link"] == "refused"
        await wait_until(slave_refused, 20, "the slave told its log is refused")
        # an operator re-creates the topic: sends are still refused, naming the cause
        await admin.create_topic(topic, broker_addr=master.addr, read_queue_nums=queues,
                                 write_queue_nums=queues)
        resp = await direct_send(master.addr, topic)
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE, resp
        assert "slave log longer than master" in (resp.remark or ""), resp.remark
        refused_new = await send_all(ns.addr, topic, bodies("refused", 50, variable, 2))
        assert refused_new == []
        # the slave kept its log, its topic and the group's offset
        assert commit_log_bytes(s_store, CL_FILE) == slave_log
        assert await consumer_offset(slave.addr, topic, 0) == 100
        async with RemotingClient() as rc:
            assert await topic_readable(rc, slave.addr, topic)

        # the operator restores the master from its slave
        await admin.update_broker_config(master.addr, {"recoverFromSlave": "true"})

        async def writable() -> bool:
            return bool((await ha(admin, master))["writable"])
        await wait_until(writable, 30, "the master restored and taking writes")
        assert commit_log_bytes(m_store, CL_FILE) == slave_log
        assert await consumer_offset(master.addr, topic, 0) == 100  # the tables came too

        async def following() -> bool:  # SYNC_MASTER: SEND_OK needs the slave back
            return (await ha(admin, slave))["link"] == "accepted" and \
                await _slave_connected(admin, master)
        await wait_until(following, 20, "the slave following the restored master")
        new = bodies("new", 800, variable, 3)
        acked_new = await send_all(ns.addr, topic, new)
        assert len(acked_new) == len(new)
        await wait_until(same_max_offset(admin, master, slave), 20, "the slave caught up again")
        assert (await ha(admin, slave))["link"] == "accepted"

    m_log, s_log = commit_log_bytes(m_store, CL_FILE), commit_log_bytes(s_store, CL_FILE)
    assert s_log == m_log and s_log.startswith(slave_log)
    for addr in (slave.addr, master.addr):
        got = await read_all(addr, topic, queues)
        missing, doubled = once_each(got, acked_old + acked_new)
        assert not missing and not doubled, (addr, missing[:3], doubled[:3])


async def _slave_connected(admin: MQAdmin, master: Daemon) -> bool:
    return bool((await ha(admin, master))["slaves"])


async def test_a_slave_another_master_wrote_is_refused_never_appended_then_discarded(
        cluster: Cluster) -> None:
    """The slave is away while the master comes back empty (nothing can warn it)
    and takes writes: the returning slave's log differs below its end. It is
    refused on both sides and keeps its bytes until the operator discards them."""
    topic, queues = "DivergedTopic", 2
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "ASYNC_MASTER", haMasterStartWaitMs=1500)
    m_store, s_store = store_of(cluster, master), store_of(cluster, slave)
    await create_topic(ns.addr, master, topic, queues)
    async with MQAdmin(ns.addr) as admin:
        await wait_until(lambda: _slave_connected(admin, master), 20, "the slave connected")
        assert len(await send_all(ns.addr, topic, bodies("old", 1000, True, 4))) == 1000
        await wait_until(same_max_offset(admin, master, slave), 20, "the slave caught up")
        slave.stop()
        slave_log = commit_log_bytes(s_store, CL_FILE)
        restart_empty(cluster, master)  # waits haMasterStartWaitMs for the listed slave
        assert (await ha(admin, master))["writable"] is True
        await admin.create_topic(topic, broker_addr=master.addr, read_queue_nums=queues,
                                 write_queue_nums=queues)
        acked = await send_all(ns.addr, topic, bodies("new", 1500, True, 5))
        assert len(acked) == 1500
        assert len(commit_log_bytes(m_store, CL_FILE)) > len(slave_log)

        slave.start()

        async def refused() -> bool:
            return (await ha(admin, master))["refusedSlaves"] >= 1
        await wait_until(refused, 20, "the master refusing the slave")
        m_ha, s_ha = await ha(admin, master), await ha(admin, slave)
        assert "not a prefix" in m_ha["lastRefusal"] or "differ" in m_ha["lastRefusal"], m_ha
        assert s_ha["link"] == "refused" and s_ha["linkReason"], s_ha
        assert not m_ha["slaves"], m_ha  # not streaming to it
        assert commit_log_bytes(s_store, CL_FILE) == slave_log  # nothing appended
        assert "slave's log refused" in master.log_text()
        assert "the master refused this slave's log" in slave.log_text()
        out = subprocess.run([str(BIN / "mqadmin"), "haStatus", "-n", ns.addr],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        rows = {line.split()[2]: line for line in out.splitlines()[1:] if line.strip()}
        assert " refused " in rows[slave.addr] and "prefix" in rows[slave.addr], out
        assert " writable " in rows[master.addr] and "refused" in rows[master.addr], out

        # the operator discards the slave's log: it copies the master's
        await admin.update_broker_config(slave.addr, {"haDiscardLog": "true"})
        await wait_until(same_max_offset(admin, master, slave), 30, "the slave copied the master")
        assert (await ha(admin, slave))["link"] == "accepted"
        conf = await admin.get_broker_config(slave.addr)
        assert conf["haDiscardLog"] == "false"  # once

    assert commit_log_bytes(s_store, CL_FILE) == commit_log_bytes(m_store, CL_FILE)
    got = await read_all(slave.addr, topic, queues)
    missing, doubled = once_each(got, acked)
    assert not missing and not doubled, (missing[:3], doubled[:3])



async def test_restore_from_the_slave_survives_kill_9_of_the_master_midway(
        cluster: Cluster) -> None:
    """recoverFromSlave copies the slave's log in pieces (1 KiB transfers here):
    the master killed in the middle restarts with a prefix of the slave's log,
    is behind again, and resumes from its own end. Byte-identical at the end."""
    topic, queues = "RestoreTopic", 2
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "ASYNC_MASTER", haTransferBatchSize=1024,
                         recoverFromSlave="true")
    m_store, s_store = store_of(cluster, master), store_of(cluster, slave)
    await create_topic(ns.addr, master, topic, queues)
    async with RemotingClient() as rc:
        await wait_until(lambda: topic_readable(rc, slave.addr, topic), 20, "topic on the slave")
    items = bodies("big", 12_000, False, 6)
    async with Producer("restore-batch", ns.addr) as p:
        for i in range(0, len(items), 100):
            r = await p.send_batch([Message(topic, b) for b in items[i:i + 100]])
            assert r.send_status == SendStatus.SEND_OK, r
    async with MQAdmin(ns.addr) as admin:
        await wait_until(same_max_offset(admin, master, slave), 30, "the slave caught up")
        target = (await admin.broker_runtime_info(slave.addr))["commitLogMaxOffset"]
        slave_log = commit_log_bytes(s_store, CL_FILE)
        master.kill()
        shutil.rmtree(store_of(cluster, master))
        master.start(timeout=60)  # restores at its start: the config asks for it

        async def midway() -> int:
            try:
                at = (await admin.broker_runtime_info(master.addr))["commitLogMaxOffset"]
            except MQAdminError:
                return 0
            return int(at) if at > 0 else 0
        at = await wait_until(midway, 30, "the restore under way", interval=0.002)
        master.kill()
        assert 0 < at < target, (at, target)  # killed in the middle
        partial = commit_log_bytes(m_store, CL_FILE)
        assert slave_log.startswith(partial)  # only the slave's bytes, in place

        master.start(timeout=60)

        async def writable() -> bool:
            return bool((await ha(admin, master))["writable"])
        await wait_until(writable, 60, "the master restored after its kill")
    assert commit_log_bytes(m_store, CL_FILE) == slave_log
    got = await read_all(master.addr, topic, queues)
    missing, doubled = once_each(got, items)
    assert not missing and not doubled, (missing[:3], doubled[:3])


async def test_a_returning_master_takes_its_slaves_newer_offsets_before_writes(
        cluster: Cluster) -> None:
    """Offsets committed to the slave while the master was down are on the
    master when it starts taking writes: taken at the slave's hello, not left
    to a metadata round (slaveSyncInterval is a minute here)."""
    topic = "OffsetsBack"
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "ASYNC_MASTER", slaveSyncInterval=60_000)
    await create_topic(ns.addr, master, topic, 2)
    async with RemotingClient() as rc:
        await wait_until(lambda: topic_readable(rc, slave.addr, topic), 90, "topic on the slave")
    await commit_offset(master.addr, topic, 0, 10)
    master.stop()
    await commit_offset(slave.addr, topic, 0, 500)  # consumers went on on the slave
    await commit_offset(slave.addr, topic, 1, 300)
    master.start(timeout=30)  # started: its slave heard, writes taken
    async with MQAdmin(ns.addr) as admin:
        assert (await ha(admin, master))["writable"] is True
    assert await consumer_offset(master.addr, topic, 0) == 500
    assert await consumer_offset(master.addr, topic, 1) == 300
    assert "consumer offsets taken from the slave" in master.log_text()
