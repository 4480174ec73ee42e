"""A broker whose store fills a small tmpfs: writes are refused cleanly, the
broker lives on, every acknowledged message reads back exactly once, writes
resume once space is freed, and a restart keeps everything.

Needs root on Linux (it mounts a tmpfs); skipped otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from client import Message, Producer, PullConsumer, PullStatus, SendStatus
from client.admin import MQAdmin
from client.errors import MQBrokerError
from protocol.codes import ResponseCode
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPIC = "DiskFullTopic"
MiB = 1024 * 1024
TMPFS_SIZE = 48 * MiB
FILLER_SIZE = 12 * MiB
BODY_SIZE = 8 * 1024
MAX_SENDS = 2 * TMPFS_SIZE // BODY_SIZE  # the disk is full long before


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs mounted under tmp_path (unmounted afterwards)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root on Linux")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def body(i: int) -> bytes:
    head = b"msg-%06d-" % i
    return head + bytes([i % 251]) * (BODY_SIZE - len(head))


async def pull_everything(ns: str) -> dict[bytes, tuple[int, int]]:
    """Every message of TOPIC -> (queue id, queue offset); fails on a duplicate."""
    pulled: dict[bytes, tuple[int, int]] = {}
    async with PullConsumer("disk-full-check", ns) as consumer:
        for mq in await consumer.fetch_subscribe_message_queues(TOPIC):
            offset = 0
            for _ in range(100_000):
                r = await consumer.pull(mq, "*", offset, 32)
                if r.pull_status == PullStatus.NO_NEW_MSG:
                    break
                assert r.pull_status == PullStatus.FOUND, r
                for m in r.msg_found_list:
                    assert m.body not in pulled, "a message came back twice"
                    pulled[m.body] = (mq.queue_id, m.queue_offset)
                offset = r.next_begin_offset
    return pulled


async def test_disk_full_refuses_cleanly_and_recovers(cluster: Cluster, small_disk: Path) -> None:
    filler = small_disk / "filler"
    with open(filler, "wb") as f:  # real pages, freed later to make room
        for _ in range(FILLER_SIZE // MiB):
            f.write(b"\xaa" * MiB)
    try:
        await _scenario(cluster, small_disk, filler)
    finally:
        cluster.close()  # stop the broker before the tmpfs goes


async def _scenario(cluster: Cluster, disk: Path, filler: Path) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker(
        "broker-a", ns.addr, storePathRootDir=disk / "store",
        mapedFileSizeCommitLog=4 * MiB, mapedFileSizeConsumeQueue=20 * 1000,
        maxHashSlotNum=1000, maxIndexNum=5000,
        # only the allocation check refuses writes here, and nothing is cleaned
        diskSpaceWarningLevelRatio=100, diskSpaceCleanForciblyRatio=100,
        diskMaxUsedSpaceRatio=100,
    )
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=4,
                                 write_queue_nums=4)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")

    acked: dict[bytes, tuple[int, int]] = {}
    refusal: MQBrokerError | None = None
    # bodies go uncompressed: the test fills the disk with the bytes it sends
    async with Producer("disk-full-producer", ns.addr, retry_times_when_send_failed=0,
                        send_msg_timeout=10, compress_msg_body_over_howmuch=0) as producer:

        async def send(i: int) -> MQBrokerError | None:
            try:
                r = await producer.send(Message(TOPIC, body(i)))
            except MQBrokerError as exc:
                return exc
            assert r.send_status == SendStatus.SEND_OK
            acked[body(i)] = (r.message_queue.queue_id, r.queue_offset)
            return None

        i = 0
        while refusal is None and i < MAX_SENDS:
            refusal = await send(i)
            i += 1
        assert refusal is not None, f"{i} sends of {BODY_SIZE} bytes fitted on a {TMPFS_SIZE} disk"
        assert refusal.response_code == ResponseCode.SERVICE_NOT_AVAILABLE, refusal
        assert refusal.remark is not None and refusal.remark.startswith("disk full"), refusal
        assert len(acked) * BODY_SIZE > TMPFS_SIZE - FILLER_SIZE - 12 * MiB
        assert broker.proc is not None and broker.proc.poll() is None, "the broker died"
        for _ in range(3):  # refused again, cleanly, while nothing changes
            again = await send(i)
            i += 1
            assert again is not None and again.response_code == ResponseCode.SERVICE_NOT_AVAILABLE

        assert await pull_everything(ns.addr) == acked

        filler.unlink()  # space returns: the next put allocates the file it needs
        async def accepted() -> bool:
            nonlocal i
            i += 1
            return await send(i) is None
        await wait_until(accepted, 10, "sends accepted once space is back")
        for _ in range(200):
            i += 1
            assert await send(i) is None
    assert broker.proc.poll() is None
    assert await pull_everything(ns.addr) == acked

    assert broker.stop() == 0
    assert "Traceback" not in broker.log_text()
    assert not (disk / "store" / "abort").exists()
    broker.start()
    async with MQAdmin(ns.addr) as admin:
        await wait_until(routed(admin, TOPIC), 10, "broker back")
    with trio.fail_after(60):
        assert await pull_everything(ns.addr) == acked
    assert [p for p in (disk / "store").rglob("*.alloc")] == []
