"""A SYNC_MASTER + SYNC_FLUSH pair of real daemons: the master killed -9 and
restarted begins its epoch after its slave said hello; the slave then killed
-9 and restarted must be accepted again (the master once refused it for good:
"the slave's log is not a prefix of the master's ... epoch 2 ... the other
lacks", and every send ended SLAVE_NOT_AVAILABLE)."""

from __future__ import annotations

from collections import Counter

from client import Message, MQBrokerError, MQClientError, Producer, SendStatus
from client.admin import MQAdmin
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster
from tests.integration.ha_reads import drain_queue, max_offsets, topic_readable
from tests.integration.test_ha import create_topic, once_each, pair, same_max_offset
from tests.integration.test_ha_lineage import ha
from tests.waits import wait_until

TOPIC, QUEUES = "HaEpochTopic", 2


async def test_the_slave_is_accepted_after_the_master_and_then_the_slave_are_killed(
        cluster: Cluster) -> None:
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "SYNC_MASTER", flushDiskType="SYNC_FLUSH",
                         haMasterStartWaitMs=10_000)
    await create_topic(ns.addr, master, TOPIC, QUEUES)
    async with RemotingClient() as rc:
        await wait_until(lambda: topic_readable(rc, slave.addr, TOPIC), 20,
                         "the topic on the slave")
    acked: list[bytes] = []
    probes = 0

    async def writes_come_back(p: Producer, what: str) -> None:
        """Wait until a send is SEND_OK (the slave acknowledges again)."""
        async def ok() -> bool:
            nonlocal probes
            probes += 1
            try:
                r = await p.send(Message(TOPIC, f"probe-{probes}".encode()))
            except (MQClientError, MQBrokerError):
                return False
            return r.send_status == SendStatus.SEND_OK
        await wait_until(ok, 60, what, interval=0.2)

    async def send_round(p: Producer, tag: str, n: int) -> None:
        for i in range(n):
            body = f"{tag}-{i:04d}|".encode() + b"e" * 300
            r = await p.send(Message(TOPIC, body))
            assert r.send_status == SendStatus.SEND_OK, (tag, i, r)
            acked.append(body)

    async with Producer("ha-epoch", ns.addr, retry_times_when_send_failed=0) as p, \
            MQAdmin(ns.addr) as admin:
        await writes_come_back(p, "the slave acknowledging")
        await send_round(p, "first", 200)

        master.kill()
        master.start(timeout=30)  # waits for its slave's hello, then begins epoch 2
        await writes_come_back(p, "writes after the master's restart")
        await send_round(p, "second", 200)  # epoch 2's bytes, on the slave's connection

        slave.kill()
        slave.start(timeout=30)  # its hello now describes epoch 2's bytes
        await writes_come_back(p, "writes after the slave's restart")
        await send_round(p, "third", 200)

        m_ha = await ha(admin, master)
        assert m_ha["refusedSlaves"] == 0, m_ha
        assert m_ha["epoch"] >= 2, m_ha
        await wait_until(same_max_offset(admin, master, slave), 20, "the slave caught up")
        s_ha = await ha(admin, slave)
        assert s_ha["link"] == "accepted" and s_ha["epoch"] == m_ha["epoch"], s_ha
    assert "not a prefix" not in master.log_text()
    assert "epoch sent to the slave" in master.log_text()

    async with RemotingClient() as rc:
        ends = await max_offsets(rc, master.addr, TOPIC, QUEUES)
        assert ends == await max_offsets(rc, slave.addr, TOPIC, QUEUES)
        for addr in (master.addr, slave.addr):  # nothing lost, nothing twice, on either
            got: Counter[bytes] = Counter()
            for q in range(QUEUES):
                got.update(await drain_queue(rc, addr, TOPIC, q, ends[q]))
            missing, doubled = once_each(got, acked)
            assert not missing and not doubled, (addr, missing[:3], doubled[:3])
