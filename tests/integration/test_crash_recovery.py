"""kill -9 of a broker under load: every acknowledged message survives, indexes match."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig
from broker.store import DefaultMessageStore, StoreConfig
from client import Message, Producer, PullConsumer, PullStatus, SendStatus
from client.admin import MQAdmin
from protocol.record import RecordStatus, check_record, decode_record
from tests.integration.cluster import Cluster
from tests.waits import at_least, routed, wait_until

TOPIC = "CrashTopic"


def store_consistency(root: Path) -> int:
    """Open the store offline; every consume-queue entry matches the commit log."""
    store = DefaultMessageStore(StoreConfig.from_broker(BrokerConfig(
        store_path_root_dir=str(root), maped_file_size_commit_log=256 * 1024,
        maped_file_size_consume_queue=20 * 2000, max_hash_slot_num=50_000,
        max_index_num=200_000)))
    assert store.load()
    by_queue: dict[tuple[str, int], list[tuple[int, int, int]]] = defaultdict(list)
    for mf in store.commit_log.mapped_file_queue.files:
        pos = 0
        while pos < mf.wrote_position:
            c = check_record(mf.mm, pos, mf.wrote_position)
            if c.status is RecordStatus.BLANK:
                break
            assert c.status is RecordStatus.MESSAGE, c
            m = decode_record(mf.mm, pos, verify_crc=True)
            by_queue[(m.topic, m.queue_id)].append((m.queue_offset, m.commit_log_offset, m.store_size))
            pos += c.size
    total = 0
    for (topic, qid), recs in by_queue.items():
        cq = store.find_consume_queue(topic, qid)
        assert [r[0] for r in recs] == list(range(len(recs))), (topic, qid)
        assert cq.max_offset_in_queue == len(recs)
        entries = cq.get_entries(0, len(recs))
        got = list(entries)
        while len(got) < len(recs):
            got += cq.get_entries(len(got), len(recs) - len(got))
        assert [(p, s) for p, s, _t in got] == [(r[1], r[2]) for r in recs]
        total += len(recs)
    store.commit_log.close()
    for q in store._all_consume_queues():
        q.close()
    store.store_lock.release()
    return total


@pytest.mark.parametrize(("flush", "warm"), [("SYNC_FLUSH", False), ("SYNC_FLUSH", True),
                                             ("ASYNC_FLUSH", False)])
async def test_kill_9_under_load(cluster: Cluster, flush: str, warm: bool) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, flushDiskType=flush,
                            mapedFileSizeCommitLog=256 * 1024,
                            mapedFileSizeConsumeQueue=20 * 2000,
                            warmMapedFileEnable=str(warm).lower())
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=4, write_queue_nums=4)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")

    acked: dict[bytes, tuple[int, int]] = {}
    stop = trio.Event()

    async def producer(pid: int) -> None:
        async with Producer(f"crash-producer-{pid}", ns.addr, retry_times_when_send_failed=0,
                            send_msg_timeout=2) as p:
            i = 0
            while not stop.is_set() and i < 20_000:
                body = b"p%d-%d-" % (pid, i) + bytes([i % 256]) * (i % 700)
                try:
                    if i % 3 == 0:
                        r = await p.send_batch([Message(TOPIC, body + b"-b%d" % j) for j in range(8)])
                        bodies = [body + b"-b%d" % j for j in range(8)]
                    else:
                        r = await p.send(Message(TOPIC, body))
                        bodies = [body]
                except Exception:
                    return  # the broker is gone
                if r.send_status == SendStatus.SEND_OK:
                    for k, b in enumerate(bodies):
                        acked[b] = (r.message_queue.queue_id, r.queue_offset + k)
                i += 1

    async with trio.open_nursery() as nursery:
        for pid in range(4):
            nursery.start_soon(producer, pid)
        await wait_until(at_least(lambda: len(acked), 3000), 30, "load running")
        broker.kill()  # SIGKILL while sends are in flight
        stop.set()
    assert (Path(cluster.root) / "store-broker-a" / "abort").exists()

    broker.start()
    async with MQAdmin(ns.addr) as admin:
        await wait_until(routed(admin, TOPIC), 10, "broker back")
    pulled: dict[bytes, tuple[int, int]] = {}
    async with PullConsumer("crash-check", ns.addr) as consumer:
        for mq in await consumer.fetch_subscribe_message_queues(TOPIC):
            offset = 0
            while True:
                r = await consumer.pull(mq, "*", offset, 32)
                if r.pull_status != PullStatus.FOUND:
                    break
                for m in r.msg_found_list:
                    assert m.body not in pulled, "a message came back twice"
                    pulled[m.body] = (mq.queue_id, m.queue_offset)
                offset = r.next_begin_offset
    missing = [b for b in acked if b not in pulled]
    assert not missing, f"{len(missing)} acknowledged messages lost"
    for body, where in acked.items():
        assert pulled[body] == where
    broker.stop()
    assert store_consistency(Path(cluster.root) / "store-broker-a") == len(pulled)
