"""Master/slave replication between real daemons on 127.0.0.1."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import trio

from client import Message, MessageQueue, MQBrokerError, MQClientError, Producer, SendStatus
from client.admin import MQAdmin
from protocol.body import pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.record import decode_msg_id
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster, Daemon
from tests.integration.ha_reads import (
    commit_log_bytes,
    drain_queue,
    log_end,
    max_offsets,
    queue_max_offset,
    record_at,
    topic_readable,
)
from tests.waits import routed, wait_until

TOPIC = "HaTopic"
CL_FILE = 256 * 1024


def commit_log(store: Path) -> bytes:
    files = sorted((store / "commitlog").iterdir())
    return b"".join(f.read_bytes() for f in files if f.name.isdigit())


def pair(cluster: Cluster, ns: str, role: str, start_slave: bool = True,
         **props: object) -> tuple[Daemon, Daemon]:
    common: dict[str, Any] = {"mapedFileSizeCommitLog": CL_FILE,
                              "mapedFileSizeConsumeQueue": 20 * 1000,
                              "slaveSyncInterval": 300, **props}
    master = cluster.broker("broker-a", ns, brokerRole=role, **common)
    slave = cluster.broker("broker-a-s", ns, start=start_slave, brokerName="broker-a",
                           brokerId=1, brokerRole="SLAVE", **common)
    return master, slave


async def test_sync_master_replicates_and_refuses_without_slave(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "SYNC_MASTER")
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=master.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
        route = await admin.topic_route(TOPIC)
        addrs = {bd.broker_name: bd.broker_addrs for bd in route.broker_datas}
        assert addrs["broker-a"] == {0: master.addr, 1: slave.addr}

    async with Producer("ha-producer", ns.addr) as producer:
        # the slave connects after its first registration: wait until a send is SEND_OK
        async def replicated() -> bool:
            r = await producer.send(Message(TOPIC, b"probe"))
            return r.send_status == SendStatus.SEND_OK
        await wait_until(replicated, 20, "a slave acknowledging sends")
        bodies: list[bytes] = []
        for i in range(300):
            body = f"m-{i}".encode() * 20
            r = await producer.send(Message(TOPIC, body))
            assert r.send_status == SendStatus.SEND_OK, r
            bodies.append(body)

        # the slave serves the same messages (its topic copied from the master)
        async with RemotingClient() as rc:
            end = await queue_max_offset(rc, master.addr, TOPIC, 0)

            async def slave_has_topic() -> bool:
                return await topic_readable(rc, slave.addr, TOPIC)
            await wait_until(slave_has_topic, 20, "the topic copied to the slave")
            from_slave = await drain_queue(rc, slave.addr, TOPIC, 0, end)
        assert from_slave[-len(bodies):] == bodies
        # consumer offsets committed on the master arrive on the slave
        async with RemotingClient() as rc:
            up = {"consumerGroup": "ha-group", "topic": TOPIC, "queueId": 0, "commitOffset": 42}
            updated = await rc.invoke(master.addr, RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET, up), 5)
            assert updated.code == ResponseCode.SUCCESS

            async def offset_on_slave() -> bool:
                q = {"consumerGroup": "ha-group", "topic": TOPIC, "queueId": 0}
                resp = await rc.invoke(slave.addr, RemotingCommand.request(
                    RequestCode.QUERY_CONSUMER_OFFSET, q), 5)
                return resp.code == ResponseCode.SUCCESS and resp.ext_fields["offset"] == 42
            await wait_until(offset_on_slave, 20, "the master's consumer offset on the slave")
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
        await wait_until(refused, 20, "SLAVE_NOT_AVAILABLE without a slave")

        # the slave comes back and catches up from its own offset
        slave.start()
        await wait_until(replicated, 30, "the slave acknowledging again")
    assert master.proc is not None and master.proc.poll() is None


async def test_cluster_list_and_broker_status_show_roles_and_replication(
        cluster: Cluster) -> None:
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "ASYNC_MASTER")
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=master.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
        async with Producer("ha-status", ns.addr) as producer:
            for _ in range(20):
                await producer.send(Message(TOPIC, b"x" * 100))

        async def caught_up() -> bool:
            m = await admin.broker_runtime_info(master.addr)
            slaves = m["ha"]["slaves"]
            return bool(slaves) and slaves[0]["behind"] == 0 and slaves[0]["ackedOffset"] > 0
        await wait_until(caught_up, 20, "the slave acknowledging everything")
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


# ---- acknowledgements, catch-up, a lost master disk, a frozen slave (issue 12) -------------

BIG_FILE = 4 * 1024 * 1024  # commit-log files of the catch-up test: 100,000 messages roll them


def store_of(cluster: Cluster, daemon: Daemon) -> Path:
    return cluster.root / f"store-{daemon.name}"


async def create_topic(ns: str, master: Daemon, topic: str, queues: int) -> None:
    async with MQAdmin(ns) as admin:
        await admin.create_topic(topic, broker_addr=master.addr, read_queue_nums=queues,
                                 write_queue_nums=queues)
        await wait_until(routed(admin, topic), 10, "topic routed")


async def slave_acknowledging(producer: Producer, topic: str) -> None:
    """The slave connects after its first registration: wait for a SEND_OK."""
    async def ok() -> bool:
        r = await producer.send(Message(topic, b"probe"))
        return r.send_status == SendStatus.SEND_OK
    await wait_until(ok, 20, "a slave acknowledging sends")


def same_max_offset(admin: MQAdmin, master: Daemon, slave: Daemon) -> Callable[[], Awaitable[bool]]:
    """A predicate: the slave's commit log ends where the master's does."""
    async def check() -> bool:
        m = await admin.broker_runtime_info(master.addr)
        s = await admin.broker_runtime_info(slave.addr)
        return bool(s["commitLogMaxOffset"] == m["commitLogMaxOffset"])
    return check


def once_each(got: Counter[bytes], sent: Iterable[bytes]) -> tuple[list[bytes], list[bytes]]:
    """What of ``sent`` is missing from ``got``, and what ``got`` holds twice or more."""
    missing = [b for b in sent if got[b] == 0]
    doubled = [b for b, n in got.items() if n > 1]
    return missing, doubled


async def test_sync_master_send_ok_covers_the_message_on_the_slave_and_a_frozen_slave_is_dropped(
        cluster: Cluster) -> None:
    topic = "HaAckTopic"
    ns = cluster.namesrv()
    # long enough for a loaded machine, short enough for the frozen part to be quick
    master, slave = pair(cluster, ns.addr, "SYNC_MASTER", syncFlushTimeout=2500)
    m_store, s_store = store_of(cluster, master), store_of(cluster, slave)
    await create_topic(ns.addr, master, topic, queues=2)
    async with (Producer("ha-acks", ns.addr) as producer, MQAdmin(ns.addr) as admin,
                RemotingClient() as rc):
        await slave_acknowledging(producer, topic)

        async def send_covered(body: bytes) -> None:
            r = await producer.send(Message(topic, body))
            assert r.send_status == SendStatus.SEND_OK, r
            # at once on the slave: the same record bytes in its log, its max
            # offset past them, the message dispatched to its consume queue
            assert r.offset_msg_id is not None
            _, phy = decode_msg_id(r.offset_msg_id)
            record = record_at(m_store, phy, CL_FILE)
            assert record and record_at(s_store, phy, CL_FILE) == record, phy
            s = await admin.broker_runtime_info(slave.addr)
            assert s["commitLogMaxOffset"] >= phy + len(record)
            qid = r.message_queue.queue_id
            assert await queue_max_offset(rc, slave.addr, topic, qid) > r.queue_offset

        # ~1 KiB bodies: the 256 KiB commit-log files roll on both sides
        for i in range(300):
            await send_covered(f"ack-{i:04d}|".encode() + b"a" * 1000)

        # a frozen slave acknowledges nothing: after haSlaveSilentMs (1 s) without
        # progress it is unavailable, the waiting sends end SLAVE_NOT_AVAILABLE (not
        # FLUSH_SLAVE_TIMEOUT after syncFlushTimeout), and so does the next one at once
        slave.freeze()
        outcomes: list[tuple[SendStatus, float]] = []

        async def send_frozen(i: int) -> None:
            t0 = trio.current_time()
            r = await producer.send(Message(topic, f"frozen-{i}".encode()))
            outcomes.append((r.send_status, trio.current_time() - t0))

        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(send_frozen, i)
        assert [s for s, _ in outcomes] == [SendStatus.SLAVE_NOT_AVAILABLE] * 3, outcomes
        assert all(0.9 <= took < 2.4 for _, took in outcomes), outcomes
        outcomes.clear()
        await send_frozen(3)
        assert outcomes[0][0] == SendStatus.SLAVE_NOT_AVAILABLE, outcomes
        assert outcomes[0][1] < 0.9, outcomes  # no wait for a slave known to be silent

        # thawed, it catches up (the timed-out messages were stored on the master)
        # and sends are SEND_OK again, each covered on the slave
        slave.thaw()

        async def acknowledged_again() -> bool:  # as the master sees it: not silent
            slaves = (await admin.broker_runtime_info(master.addr))["ha"]["slaves"]
            return bool(slaves) and slaves[0]["behind"] == 0 and not slaves[0]["silent"]
        await wait_until(acknowledged_again, 20, "the thawed slave caught up")
        for i in range(20):
            await send_covered(f"thawed-{i}".encode())
    m_log, s_log = commit_log_bytes(m_store, CL_FILE), commit_log_bytes(s_store, CL_FILE)
    assert len(m_log) > CL_FILE and s_log == m_log


async def test_empty_slave_catches_up_and_resumes_after_kill_9_mid_stream(
        cluster: Cluster) -> None:
    topic, queues, count, batch = "HaCatchUp", 4, 100_000, 500
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "ASYNC_MASTER", start_slave=False,
                         mapedFileSizeCommitLog=BIG_FILE,
                         mapedFileSizeConsumeQueue=20 * 10_000,
                         maxTransferCountOnMessageInMemory=1000)
    m_store, s_store = store_of(cluster, master), store_of(cluster, slave)
    await create_topic(ns.addr, master, topic, queues)
    bodies = [f"{i:06d}|".encode() + b"c" * 100 for i in range(count)]

    async with Producer("ha-catch-up", ns.addr) as producer:
        async def fill(queue_id: int) -> None:
            mq = MessageQueue(topic, "broker-a", queue_id)
            for start in range(queue_id * batch, count, queues * batch):
                msgs = [Message(topic, b) for b in bodies[start:start + batch]]
                r = await producer.send_batch(msgs, mq)
                assert r.send_status == SendStatus.SEND_OK, r

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for q in range(queues):
                    nursery.start_soon(fill, q)
    total = log_end(m_store)
    assert total > 4 * BIG_FILE

    # an empty slave starts streaming from offset 0; kill -9 it a third of the way
    slave.start()

    async def a_third_replicated() -> bool:
        return log_end(s_store) > total // 3
    await wait_until(a_third_replicated, 30, "the slave a third of the way", interval=0.01)
    slave.freeze()
    reached = log_end(s_store)
    assert reached < total, "the slave was to be killed mid-stream"
    slave.kill()
    slave.start()

    async with MQAdmin(ns.addr) as admin:
        await wait_until(same_max_offset(admin, master, slave), 30, "the restarted slave caught up")
    assert commit_log_bytes(s_store, BIG_FILE) == commit_log_bytes(m_store, BIG_FILE)
    # it resumed from its own offset (after recovery), not from the start
    resumed = re.findall(r"connected to master.*?offset=(\d+)", slave.log_text())
    assert len(resumed) >= 2 and int(resumed[-1]) > 0, resumed

    got: Counter[bytes] = Counter()
    async with RemotingClient() as rc:
        await wait_until(lambda: topic_readable(rc, slave.addr, topic), 10, "the topic on the slave")
        ends = await max_offsets(rc, slave.addr, topic, queues)
        assert ends == await max_offsets(rc, master.addr, topic, queues)
        assert sum(ends) == count
        for q in range(queues):
            got.update(await drain_queue(rc, slave.addr, topic, q, ends[q], batch=1000))
    missing, doubled = once_each(got, bodies)
    assert not missing and not doubled, (len(missing), len(doubled))


async def test_sync_master_sync_flush_every_send_ok_survives_losing_the_master_disk(
        cluster: Cluster) -> None:
    topic, queues, producers, per_producer, kill_at = "HaSurvivor", 4, 4, 400, 600
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "SYNC_MASTER", flushDiskType="SYNC_FLUSH")
    await create_topic(ns.addr, master, topic, queues)
    async with RemotingClient() as rc:
        await wait_until(lambda: topic_readable(rc, slave.addr, topic), 10, "the topic on the slave")

    acked: list[bytes] = []
    attempted: list[bytes] = []
    enough = trio.Event()

    async def produce(k: int) -> None:
        # no retries: a body is sent at most once, so a second copy on the slave
        # could only come from replication
        async with Producer(f"ha-survivor-{k}", ns.addr, retry_times_when_send_failed=0) as p:
            for i in range(per_producer):
                body = f"p{k}-{i:04d}|".encode() + b"s" * 200
                attempted.append(body)
                try:
                    r = await p.send(Message(topic, body))
                except (MQClientError, MQBrokerError):
                    return  # the master is gone
                assert r.send_status == SendStatus.SEND_OK, r
                acked.append(body)
                if len(acked) >= kill_at:
                    enough.set()

    async with Producer("ha-survivor-probe", ns.addr) as probe:
        await slave_acknowledging(probe, topic)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for k in range(producers):
                nursery.start_soon(produce, k)
            await enough.wait()
            master.kill()  # mid-stream: sends are in flight
            shutil.rmtree(store_of(cluster, master))
    assert kill_at <= len(acked) < producers * per_producer

    got: Counter[bytes] = Counter()
    async with RemotingClient() as rc:
        ends = await max_offsets(rc, slave.addr, topic, queues)
        for q in range(queues):
            got.update(await drain_queue(rc, slave.addr, topic, q, ends[q]))
    del got[b"probe"]
    missing, doubled = once_each(got, acked)
    assert not missing and not doubled, (missing[:5], doubled[:5])
    # what the slave holds beyond the acknowledged sends was in flight at the kill
    assert set(got) <= set(attempted)


async def test_async_master_keeps_serving_sends_with_its_slave_frozen(cluster: Cluster) -> None:
    topic = "HaFrozenSlave"
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "ASYNC_MASTER")
    m_store, s_store = store_of(cluster, master), store_of(cluster, slave)
    await create_topic(ns.addr, master, topic, queues=2)
    async with Producer("ha-frozen", ns.addr) as producer, MQAdmin(ns.addr) as admin:
        r = await producer.send(Message(topic, b"before"))
        assert r.send_status == SendStatus.SEND_OK
        await wait_until(same_max_offset(admin, master, slave), 20, "the slave following")

        slave.freeze()
        # ~10 MiB, more than the sockets between them buffer: the master's HA
        # writer blocks, its sends must not
        with trio.fail_after(60):
            for i in range(100):
                msgs = [Message(topic, f"b{i:03d}-{j:03d}|".encode() + b"f" * 1000)
                        for j in range(100)]
                r = await producer.send_batch(msgs)
                assert r.send_status == SendStatus.SEND_OK, r
            for i in range(200):
                r = await producer.send(Message(topic, f"single-{i}".encode() * 50))
                assert r.send_status == SendStatus.SEND_OK, r
        assert log_end(m_store) - log_end(s_store) > 8 * 1024 * 1024

        slave.thaw()
        await wait_until(same_max_offset(admin, master, slave), 30, "the thawed slave caught up")
    assert commit_log_bytes(s_store, CL_FILE) == commit_log_bytes(m_store, CL_FILE)


async def test_slave_copies_messages_queues_and_metadata(cluster: Cluster) -> None:
    """Issue test 2: 20,000 messages, consume queues equal, pulls from the slave the
    same; topics, consumer offsets, subscription groups and delay offsets arrive."""
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "ASYNC_MASTER")
    topic, queues = "HaCopy", 4
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(topic, broker_addr=master.addr, read_queue_nums=queues,
                                 write_queue_nums=queues)
        await wait_until(routed(admin, topic), 10, "topic routed")
    sent: Counter[bytes] = Counter()
    async with Producer("ha-copy", ns.addr) as producer:
        mqs = [MessageQueue(topic, "broker-a", q) for q in range(queues)]
        for i in range(200):
            batch = [Message(topic, f"c{i:03d}-{j:03d}|".encode() + b"c" * 200)
                     for j in range(100)]
            r = await producer.send_batch(batch, mqs[i % queues])
            assert r.send_status == SendStatus.SEND_OK
            sent.update(m.body for m in batch)
        delayed = Message(topic, b"delayed")
        delayed.delay_time_level = 1
        assert (await producer.send(delayed)).send_status == SendStatus.SEND_OK
    assert sum(sent.values()) == 20_000

    async with RemotingClient() as rc:
        async def call(addr: str, code: int, fields: dict[str, Any] | None = None,
                       body: bytes | None = None) -> Any:
            r = await rc.invoke(addr, RemotingCommand.request(code, fields, body), 5)
            assert r.code == ResponseCode.SUCCESS, r
            return unpack_body(r.body) if r.body else None

        await call(master.addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                   body=pack_body({"groupName": "ha-copy-group", "retryMaxTimes": 3}))
        await call(master.addr, RequestCode.UPDATE_CONSUMER_OFFSET,
                   {"consumerGroup": "ha-copy-group", "topic": topic, "queueId": 1,
                    "commitOffset": 17})

        async def delivered() -> bool:  # the delayed message reached its topic on the master
            table = (await call(master.addr, RequestCode.GET_ALL_DELAY_OFFSET))["offsetTable"]
            return table.get("1") == 1
        await wait_until(delivered, 20, "the delayed message delivered")

        async def copied() -> bool:
            m = await admin_status(ns.addr, master.addr)
            s = await admin_status(ns.addr, slave.addr)
            if s["commitLogMaxOffset"] != m["commitLogMaxOffset"]:
                return False
            groups = (await call(slave.addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
            group = groups["subscriptionGroupTable"].get("ha-copy-group")
            delay = await call(slave.addr, RequestCode.GET_ALL_DELAY_OFFSET)
            offsets = await call(slave.addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
            return (group is not None and group["retryMaxTimes"] == 3
                    and delay["offsetTable"].get("1") == 1
                    and offsets["offsetTable"].get(f"{topic}@ha-copy-group") == {"1": 17})
        await wait_until(copied, 30, "log and metadata on the slave")

        # consume queues are equal file for file, and the slave serves every message once
        ends = await max_offsets(rc, master.addr, topic, queues)
        assert await max_offsets(rc, slave.addr, topic, queues) == ends
        for q in range(queues):
            m_dir = cluster.root / "store-broker-a" / "consumequeue" / topic / str(q)
            s_dir = cluster.root / "store-broker-a-s" / "consumequeue" / topic / str(q)
            m_files = {p.name: p.read_bytes() for p in m_dir.iterdir()}
            assert m_files == {p.name: p.read_bytes() for p in s_dir.iterdir()}
        got: Counter[bytes] = Counter()
        for q in range(queues):
            got.update(await drain_queue(rc, slave.addr, topic, q, ends[q], batch=1000))
        assert got == sent + Counter({b"delayed": 1})


async def admin_status(ns: str, addr: str) -> dict[str, Any]:
    async with MQAdmin(ns) as admin:
        return await admin.broker_runtime_info(addr)
