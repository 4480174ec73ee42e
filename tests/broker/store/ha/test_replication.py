"""A master store and a slave store joined through HAConnection and HAClient
in plain Python: every byte goes through the wire codecs, split at random."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from broker.store import DefaultMessageStore, MessageExtBrokerInner, PutMessageStatus
from broker.store.commit_log import SCHEDULE_TOPIC
from broker.store.ha.ha_client import HAClient, ReplicaAppendError, TransferOffsetError
from broker.store.ha.ha_connection import (
    HAConnection,
    SlaveInvalidError,
    is_slave_ok,
    push_to_slave_max_offset,
)
from broker.store.ha.transfer import (
    HAProtocolError,
    ReportDecoder,
    TransferDecoder,
    encode_report,
    encode_transfer,
)
from broker.store.status import StoreError
from protocol.message import properties_to_string
from tests.broker.store.helpers import inner, make_config, open_store

CL_SIZE = 4096


class Link:
    """One master-slave connection: the two cores, the codecs, and the bytes
    in flight each way, delivered in random pieces."""

    def __init__(self, master: DefaultMessageStore, slave: DefaultMessageStore,
                 batch_size: int, rng: random.Random, now: float = 0.0) -> None:
        self.master, self.slave, self.rng, self.now = master, slave, rng, now
        self.conn = HAConnection(master, batch_size)
        # as the HA service: an empty slave starts where the master's answer said
        self.client = HAClient(slave, first_offset=master.get_min_phy_offset())
        self.conn.connected(now)
        self.client.connected(now)
        self.reports, self.transfers = ReportDecoder(), TransferDecoder()
        self.to_master, self.to_slave = bytearray(), bytearray()
        self.frames = 0

    def _deliver(self, buf: bytearray) -> bytes:
        n = self.rng.randint(0, len(buf))
        piece = bytes(buf[:n])
        del buf[:n]
        return piece

    def step(self) -> bool:
        """One round each way; whether anything other than a heartbeat moved."""
        moved = False
        report = self.client.report_due(self.now)
        if report is not None:
            self.to_master += encode_report(report)
        for off in self.reports.feed(self._deliver(self.to_master)):
            self.conn.on_report(off, self.now)
        transfer = self.conn.next_transfer(self.now)
        if transfer is not None:
            self.to_slave += encode_transfer(*transfer)
            moved = moved or bool(transfer[1])
        for off, data in self.transfers.feed_joined(self._deliver(self.to_slave)):
            self.client.on_transfer(off, data, self.now)
            self.frames += 1
        return moved or bool(self.to_master) or bool(self.to_slave) or report is not None

    def sync(self, max_steps: int = 1_000_000) -> None:
        """Until the slave holds and has acknowledged everything."""
        for _ in range(max_steps):
            self.now += 0.001
            self.step()
            if (self.conn.acked_offset == self.master.get_max_phy_offset()
                    and not self.to_master and not self.to_slave):
                return
        raise AssertionError("replication did not converge")


def delayed(level: int, body: bytes) -> MessageExtBrokerInner:
    props = {"DELAY": str(level), "REAL_TOPIC": "T0", "REAL_QID": "1", "KEYS": "late"}
    return MessageExtBrokerInner(
        topic=SCHEDULE_TOPIC, queue_id=level - 1, flag=0, body=body,
        properties_string=properties_to_string(props), keys="late",
        born_timestamp=1, born_host="10.0.0.1:1234",
    )


def put_some(store: DefaultMessageStore, rng: random.Random, n: int, start: int = 0) -> None:
    i = start
    while i < start + n:
        topic, qid = f"T{rng.randrange(4)}", rng.randrange(3)
        body = rng.randbytes(rng.randint(0, 400))
        r = rng.random()
        if r < 0.1:
            batch = [inner(topic, qid, body + bytes([k]), tags="B", keys=f"k{i + k}")
                     for k in range(rng.randint(2, 5))]
            result = store.put_messages(batch)
            i += len(batch)
        elif r < 0.12:
            result = store.put_message(delayed(rng.randint(1, 4), body))
            i += 1
        else:
            result = store.put_message(inner(topic, qid, body, tags=rng.choice(["A", "B", None]),
                                             keys=f"k{i}"))
            i += 1
        assert result.put_message_status is PutMessageStatus.PUT_OK


def files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def pull_all(store: DefaultMessageStore, topic: str, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    while True:
        r = store.get_message("g", topic, queue_id, offset, 32, None)
        if not r.buffers and r.next_begin_offset == offset:
            return out
        out.extend(bytes(b) for b in r.buffers)
        if r.next_begin_offset == offset:
            return out
        offset = r.next_begin_offset


def queues(store: DefaultMessageStore) -> list[tuple[str, int]]:
    return sorted((t, q) for t, qs in store.consume_queue_table.items() for q in qs)


def assert_replica(master: DefaultMessageStore, slave: DefaultMessageStore) -> None:
    """The slave's log equals the master's byte for byte, and so does
    everything built from it."""
    end = master.get_max_phy_offset()
    assert slave.get_max_phy_offset() == end
    assert slave.get_min_phy_offset() == master.get_min_phy_offset()
    offset = master.get_min_phy_offset()
    while offset < end:
        chunk = master.get_raw(offset, 1 << 20)
        assert chunk and slave.get_raw(offset, 1 << 20) == chunk, offset
        offset += len(chunk)
    assert files(slave.root / "commitlog") == files(master.root / "commitlog")
    assert queues(slave) == queues(master)
    for topic, qid in queues(master):
        assert slave.get_min_offset_in_queue(topic, qid) == master.get_min_offset_in_queue(topic, qid)
        assert slave.get_max_offset_in_queue(topic, qid) == master.get_max_offset_in_queue(topic, qid)
        assert pull_all(slave, topic, qid) == pull_all(master, topic, qid)
    assert files(slave.root / "consumequeue") == files(master.root / "consumequeue")
    assert slave.commit_log.topic_queue_table == master.commit_log.topic_queue_table
    assert slave.reput_offset == end and not slave.dispatch_behind


@pytest.mark.parametrize("batch_size", [97, 1000, 32 * 1024])
def test_slave_is_a_byte_for_byte_copy(tmp_path: Path, batch_size: int) -> None:
    rng = random.Random(batch_size)
    master = open_store(make_config(tmp_path / "m", cl_size=CL_SIZE))
    slave = open_store(make_config(tmp_path / "s", cl_size=CL_SIZE))
    heard: dict[tuple[str, int], int] = {}
    slave.dispatch_listeners.append(lambda t, q, n: heard.__setitem__((t, q), n))
    link = Link(master, slave, batch_size, rng)
    for _ in range(30):  # puts and replication interleaved, caught up now and then
        put_some(master, rng, 100)
        for _ in range(rng.randint(0, 40)):
            link.step()
        if rng.random() < 0.3:
            link.sync()
    link.sync()
    assert len(master.commit_log.mapped_file_queue.files) > 100  # many files, many BLANKs
    assert_replica(master, slave)
    # long polls on the slave heard of every queue's newest message
    assert heard == {(t, q): master.get_max_offset_in_queue(t, q) for t, q in queues(master)}
    # the index was built by the slave's own dispatch
    assert slave.query_message("T0", "late", 100, 0, 2**62) == \
        master.query_message("T0", "late", 100, 0, 2**62) == []
    assert len(slave.query_message(SCHEDULE_TOPIC, "late", 1000, 0, 2**62)) == len(
        master.query_message(SCHEDULE_TOPIC, "late", 1000, 0, 2**62)) > 0
    assert slave.query_message("T1", "k17", 5, 0, 2**62) == master.query_message("T1", "k17", 5, 0, 2**62)
    # the SYNC_MASTER view of it
    assert link.conn.acked_offset == master.get_max_phy_offset()
    assert link.conn.lag(master.get_max_phy_offset()) == 0
    assert is_slave_ok([link.conn], master.get_max_phy_offset() + 100)
    assert push_to_slave_max_offset([link.conn]) == master.get_max_phy_offset()
    master.shutdown()
    slave.shutdown()


def test_a_record_cut_by_a_batch_waits_for_its_rest(tmp_path: Path) -> None:
    master = open_store(make_config(tmp_path / "m", cl_size=CL_SIZE))
    slave = open_store(make_config(tmp_path / "s", cl_size=CL_SIZE))
    assert master.put_message(inner("T", 0, b"x" * 300, keys="a")).ok
    conn, client = HAConnection(master, batch_size=100), HAClient(slave)
    conn.on_report(client.report_due(0.0) or 0)
    offset, data = conn.next_transfer(0.0) or (-1, b"")
    client.on_transfer(offset, data)
    assert slave.get_max_phy_offset() == 100
    assert slave.reput_offset == 0 and slave.get_max_offset_in_queue("T", 0) == 0
    assert slave.reput()  # nothing to dispatch yet, and no complaint
    assert client.report_due(0.1) == 100  # a report after every append
    while (t := conn.next_transfer(1.0)) is not None and t[1]:
        client.on_transfer(*t)
    assert slave.get_max_offset_in_queue("T", 0) == 1
    assert pull_all(slave, "T", 0) == pull_all(master, "T", 0)
    master.shutdown()
    slave.shutdown()


def test_slave_restart_resumes_from_its_own_end(tmp_path: Path) -> None:
    rng = random.Random(5)
    mconf, sconf = make_config(tmp_path / "m", cl_size=CL_SIZE), make_config(tmp_path / "s", cl_size=CL_SIZE)
    master, slave = open_store(mconf), open_store(sconf)
    put_some(master, rng, 800)
    link = Link(master, slave, 333, rng)
    # part of the way, stopping inside a record a batch cut
    while slave.get_max_phy_offset() * 2 < master.get_max_phy_offset() or not slave.dispatch_behind:
        link.step()
    assert 0 < slave.get_max_phy_offset() < master.get_max_phy_offset()
    cut = slave.get_max_phy_offset()
    assert slave.reput_offset < cut
    slave.shutdown()  # a clean restart: a record cut short is dropped by recovery
    slave = open_store(sconf)
    assert slave.get_max_phy_offset() == slave.reput_offset < cut  # the cut record is gone
    put_some(master, rng, 800, start=800)
    link = Link(master, slave, 333, rng, now=10.0)
    assert link.conn.request_offset is None
    resumed = slave.get_max_phy_offset()
    link.sync()
    assert link.conn.request_offset == resumed
    assert_replica(master, slave)
    # an abnormal stop (no clean shutdown) and the master's restart too
    put_some(master, rng, 300, start=1600)
    while not slave.dispatch_behind:
        link.step()
    slave.running = False  # crash: the abort file stays
    slave.store_lock.release()
    slave.commit_log.close()
    slave = open_store(sconf)
    master.shutdown()
    master = open_store(mconf)
    link = Link(master, slave, 32 * 1024, rng, now=20.0)
    link.sync()
    assert_replica(master, slave)
    master.shutdown()
    slave.shutdown()


def test_empty_slave_of_a_master_whose_first_files_are_gone(tmp_path: Path) -> None:
    rng = random.Random(7)
    master = open_store(make_config(tmp_path / "m", cl_size=CL_SIZE))
    master.reconfigure(dataclasses.replace(master.config, file_reserved_time=0))
    put_some(master, rng, 600)
    assert master.clean_expired_files(now_ms=2**62, hour=0, manual=True) > 0
    assert master.get_min_phy_offset() > 0
    slave = open_store(make_config(tmp_path / "s", cl_size=CL_SIZE))
    link = Link(master, slave, 1000, rng)
    link.sync()
    assert link.conn.request_offset == 0
    assert slave.get_min_phy_offset() == master.get_min_phy_offset()
    end = master.get_max_phy_offset()
    offset = master.get_min_phy_offset()
    while offset < end:
        chunk = master.get_raw(offset, 1 << 20)
        assert chunk and slave.get_raw(offset, 1 << 20) == chunk
        offset += len(chunk)
    for topic, qid in queues(slave):  # queues start where the master's files start
        assert slave.get_max_offset_in_queue(topic, qid) == master.get_max_offset_in_queue(topic, qid)
        assert pull_all(slave, topic, qid) == pull_all(master, topic, qid)[-len(pull_all(slave, topic, qid)):]
    assert slave.commit_log.topic_queue_table == {
        k: v for k, v in master.commit_log.topic_queue_table.items() if k in {
            f"{t}-{q}" for t, q in queues(slave)}}
    master.shutdown()
    slave.shutdown()


def test_a_slave_longer_than_its_master_is_refused(tmp_path: Path) -> None:
    rng = random.Random(9)
    big = open_store(make_config(tmp_path / "big", cl_size=CL_SIZE))
    put_some(big, rng, 200)
    slave = open_store(make_config(tmp_path / "s", cl_size=CL_SIZE))
    Link(big, slave, 32 * 1024, rng).sync()
    small = open_store(make_config(tmp_path / "small", cl_size=CL_SIZE))
    put_some(small, rng, 20)
    before = files(slave.root / "commitlog")
    conn, client = HAConnection(small), HAClient(slave)
    with pytest.raises(SlaveInvalidError, match="slave log longer than master"):
        conn.on_report(client.report_due(0.0) or 0)
    assert conn.invalid and conn.next_transfer(1.0) is None
    with pytest.raises(SlaveInvalidError):
        conn.on_report(0)
    assert not is_slave_ok([conn], small.get_max_phy_offset())
    assert files(slave.root / "commitlog") == before
    for s in (big, slave, small):
        s.shutdown()


def test_a_slave_behind_the_masters_oldest_file_is_refused(tmp_path: Path) -> None:
    rng = random.Random(11)
    master = open_store(make_config(tmp_path / "m", cl_size=CL_SIZE))
    master.reconfigure(dataclasses.replace(master.config, file_reserved_time=0))
    put_some(master, rng, 300)
    conn = HAConnection(master)
    conn.on_report(100)  # a slave that holds the first 100 bytes
    master.clean_expired_files(now_ms=2**62, hour=0, manual=True)
    with pytest.raises(SlaveInvalidError, match="too far behind"):
        conn.next_transfer(0.0)
    with pytest.raises(SlaveInvalidError, match="too far behind"):
        HAConnection(master).on_report(100)
    master.shutdown()


def test_a_frame_not_at_the_slaves_end_is_refused(tmp_path: Path) -> None:
    rng = random.Random(13)
    master = open_store(make_config(tmp_path / "m", cl_size=CL_SIZE))
    slave = open_store(make_config(tmp_path / "s", cl_size=CL_SIZE))
    put_some(master, rng, 100)
    link = Link(master, slave, 500, rng)
    for _ in range(20):
        link.step()
    end = slave.get_max_phy_offset()
    assert 0 < end < master.get_max_phy_offset()
    before = files(slave.root)
    client = HAClient(slave)
    good = master.get_raw(end, 200) or b""
    for offset, data in [(end + 1, good), (end - 1, good), (end + CL_SIZE, good), (0, good),
                         (end - 5, b"")]:
        with pytest.raises(TransferOffsetError):
            client.on_transfer(offset, data)
    # the right offset, bytes that are not the master's records (checked at
    # the first record header they hold)
    with pytest.raises(ReplicaAppendError, match="no record at commit-log offset"):
        HAClient(slave).on_transfer(end, b"\x00" * 3000)
    assert slave.get_max_phy_offset() == end and files(slave.root) == before
    # a heartbeat at our end is fine; so is one at first_offset while the log is empty
    client.on_transfer(end, b"")
    empty = open_store(make_config(tmp_path / "e", cl_size=CL_SIZE))
    HAClient(empty, first_offset=3 * CL_SIZE).on_transfer(3 * CL_SIZE, b"")
    with pytest.raises(ReplicaAppendError):  # not the start of a file
        HAClient(empty, first_offset=100).on_transfer(100, good)
    assert empty.get_max_phy_offset() == 0
    with pytest.raises(StoreError):
        slave.append_replica(end + 1, good)
    link.sync()  # the connection that follows the rules still does
    assert_replica(master, slave)
    for s in (master, slave, empty):
        s.shutdown()


def test_a_master_with_another_file_size_is_caught(tmp_path: Path) -> None:
    rng = random.Random(17)
    master = open_store(make_config(tmp_path / "m", cl_size=CL_SIZE))
    put_some(master, rng, 200)
    slave = open_store(make_config(tmp_path / "s", cl_size=CL_SIZE * 2))
    link = Link(master, slave, 32 * 1024, rng)
    with pytest.raises(ReplicaAppendError, match="mapedFileSizeCommitLog"):
        link.sync()
    # what was taken ends before the first file end the two disagree on
    assert slave.get_max_phy_offset() <= CL_SIZE
    master.shutdown()
    slave.shutdown()


def test_protocol_misuse_by_a_slave(tmp_path: Path) -> None:
    master = open_store(make_config(tmp_path / "m", cl_size=CL_SIZE))
    for i in range(10):
        assert master.put_message(inner("T", 0, b"x" * 50, keys=f"k{i}")).ok
    conn = HAConnection(master, batch_size=64)
    assert conn.next_transfer(0.0) is None  # nothing before the first report
    conn.on_report(0)
    offset, data = conn.next_transfer(0.0) or (-1, b"")
    assert (offset, len(data)) == (0, 64)
    conn.on_report(64)
    with pytest.raises(HAProtocolError, match="went back"):
        conn.on_report(10)
    with pytest.raises(HAProtocolError, match="past what was sent"):
        conn.on_report(200)
    master.shutdown()


def test_heartbeats_and_reports_follow_the_clock(tmp_path: Path) -> None:
    master = open_store(make_config(tmp_path / "m", cl_size=CL_SIZE))
    slave = open_store(make_config(tmp_path / "s", cl_size=CL_SIZE))
    conn = HAConnection(master, heartbeat_interval=5.0, housekeeping_interval=20.0)
    client = HAClient(slave, heartbeat_interval=5.0, housekeeping_interval=20.0)
    conn.connected(0.0)
    client.connected(0.0)
    assert client.report_due(0.0) == 0  # at once on a new connection
    assert client.report_due(1.0) is None and client.next_report_at() == 5.0
    conn.on_report(0, now=0.0)
    assert conn.next_transfer(0.0) == (0, b"")  # idle: a heartbeat at once ...
    assert conn.next_transfer(4.9) is None and conn.next_heartbeat_at() == 5.0
    assert conn.next_transfer(5.0) == (0, b"")  # ... and every 5 s
    assert master.put_message(inner("T", 0, b"data")).ok
    t = conn.next_transfer(5.1)
    assert t is not None and t[0] == 0 and len(t[1]) == master.get_max_phy_offset()
    assert conn.next_transfer(5.2) is None
    client.on_transfer(*t, now=5.1)
    assert client.report_due(5.1) == master.get_max_phy_offset()  # after the append
    assert client.report_due(9.0) is None
    assert client.report_due(10.1) == master.get_max_phy_offset()  # heartbeat report
    assert not conn.idle_too_long(19.9) and conn.idle_too_long(20.0)
    conn.on_report(master.get_max_phy_offset(), now=10.1)
    assert not conn.idle_too_long(30.0)
    assert not client.idle_too_long(25.0) and client.idle_too_long(25.1)
    master.shutdown()
    slave.shutdown()


def test_an_empty_slave_takes_its_first_bytes_only_where_its_master_said(tmp_path: Path) -> None:
    """Row 12: an empty slave's first transfer must start at the offset the
    master's answer gave (its oldest file), never at another file start: a
    (fake) master's first transfer at 1000 x the file size is refused, nothing
    is written, and the slave then follows the real master from its start."""
    rng = random.Random(17)
    master = open_store(make_config(tmp_path / "m", cl_size=CL_SIZE))
    slave = open_store(make_config(tmp_path / "s", cl_size=CL_SIZE))
    put_some(master, rng, 50)
    before = files(slave.root / "commitlog")
    good = master.get_raw(0, 2000) or b""
    assert good
    fake = HAClient(slave, first_offset=0)  # the answer said the log starts at 0
    for offset in (1000 * CL_SIZE, CL_SIZE, 3 * CL_SIZE):
        for data in (good, b""):
            with pytest.raises(TransferOffsetError):
                fake.on_transfer(offset, data)
    assert slave.get_max_phy_offset() == 0 and files(slave.root / "commitlog") == before
    # a slave not told where the master's log starts takes nothing but its own end
    with pytest.raises(TransferOffsetError):
        HAClient(slave).on_transfer(1000 * CL_SIZE, good)
    # told it starts at the second file, an empty slave takes nothing at its own end (0)
    told = HAClient(slave, first_offset=CL_SIZE)
    for data in (good, b""):
        with pytest.raises(TransferOffsetError, match=f"is empty: its master's log starts "
                                                      f"at {CL_SIZE}"):
            told.on_transfer(0, data)
    assert slave.get_max_phy_offset() == 0 and files(slave.root / "commitlog") == before
    link = Link(master, slave, 1000, rng)
    link.sync()
    assert_replica(master, slave)
    master.shutdown()
    slave.shutdown()
