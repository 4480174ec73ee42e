"""A slave holds the bytes of a record a transfer cuts short until the rest
arrives (HAClient with ``max_record_size``): its files only ever end with
whole records, so a slave killed at any moment recovers exactly to the end it
reported and resumes byte for byte.

Without that, a record cut inside its topic or properties passes recovery's
checks (the body CRC covers only the body): the slave recovered past bytes it
never received, then appended the master's next records after a hole of
zeros (found by tests/integration/test_ha.py killing a catching-up slave)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from broker.store import DefaultMessageStore
from broker.store.ha.ha_client import HAClient, ReplicaAppendError, whole_records
from broker.store.ha.ha_connection import HAConnection
from protocol.record import encode_blank
from tests.broker.store.ha.test_replication import CL_SIZE, Link, assert_replica, put_some
from tests.broker.store.helpers import inner, make_config, open_store


def holding_link(master: DefaultMessageStore, slave: DefaultMessageStore, batch_size: int,
                 rng: random.Random, now: float = 0.0) -> Link:
    link = Link(master, slave, batch_size, rng, now)
    link.client = HAClient(slave, max_record_size=CL_SIZE,
                           first_offset=master.get_min_phy_offset())
    link.client.connected(now)
    return link


def crash(store: DefaultMessageStore) -> None:
    """Stop as kill -9 does: nothing flushed or checkpointed, the abort file
    stays (the files are closed only so that many crashes use no more fds)."""
    store.running = False
    store.commit_log.close()
    for queues in store.consume_queue_table.values():
        for cq in queues.values():
            cq.close()
    if store.index_service is not None:
        store.index_service.close()
    store.store_lock.release()


def test_whole_records_counts_only_complete_records() -> None:
    a, b = encode_blank(20), encode_blank(12)
    assert whole_records(b"", 100) == 0
    assert whole_records(a[:3], 100) == 0  # not even a size yet
    assert whole_records(a[:19], 100) == 0
    assert whole_records(a, 100) == 20
    assert whole_records(a + b[:11], 100) == 20
    assert whole_records(a + b, 100) == 32
    # sizes no record has: all of it goes on, for the store to refuse
    assert whole_records(a + b"\x00" * 30, 100) == 50
    assert whole_records(encode_blank(200)[:50], 100) == 50


def test_a_record_cut_inside_its_properties_never_reaches_the_file(tmp_path: Path) -> None:
    mconf, sconf = make_config(tmp_path / "m", cl_size=CL_SIZE), make_config(tmp_path / "s", cl_size=CL_SIZE)
    master, slave = open_store(mconf), open_store(sconf)
    assert master.put_message(inner("T", 0, b"first", keys="k" * 40)).ok
    first = master.get_max_phy_offset()
    assert master.put_message(inner("T", 0, b"second", keys="k" * 40)).ok
    size = master.get_max_phy_offset() - first
    # one transfer: the first record and the second but its last 3 bytes (properties)
    conn, client = HAConnection(master, batch_size=first + size - 3), HAClient(slave, max_record_size=CL_SIZE)
    conn.on_report(client.report_due(0.0) or 0)
    offset, data = conn.next_transfer(0.0) or (-1, b"")
    client.on_transfer(offset, data)
    assert slave.get_max_phy_offset() == first == slave.reput_offset
    assert client.report_due(0.1) == first  # what it reports is what its files hold
    conn.on_report(first)
    assert len(client.held) == size - 3 and client.held_at == first
    crash(slave)
    slave = open_store(sconf)
    assert slave.get_max_phy_offset() == first  # recovery finds no cut record
    link = holding_link(master, slave, 32 * 1024, random.Random(1), now=1.0)
    link.sync()
    assert_replica(master, slave)
    master.shutdown()
    slave.shutdown()


@pytest.mark.parametrize("batch_size", [61, 333, 1500])
def test_killed_anywhere_a_slave_recovers_to_its_reported_end(tmp_path: Path,
                                                              batch_size: int) -> None:
    rng = random.Random(batch_size)
    mconf, sconf = make_config(tmp_path / "m", cl_size=CL_SIZE), make_config(tmp_path / "s", cl_size=CL_SIZE)
    master, slave = open_store(mconf), open_store(sconf)
    put_some(master, rng, 600)
    link = holding_link(master, slave, batch_size, rng)
    cuts = crashes = 0
    while slave.get_max_phy_offset() < master.get_max_phy_offset():
        link.step()
        # after every transfer the files end with a whole record, all dispatched
        end = slave.get_max_phy_offset()
        assert slave.reput_offset == end and not slave.dispatch_behind
        cuts += bool(link.client.held)
        if link.client.held and cuts % 2 and crashes < 4:  # killed holding a cut record
            crash(slave)
            slave = open_store(sconf)
            assert slave.get_max_phy_offset() == end
            crashes += 1
            link = holding_link(master, slave, batch_size, rng, now=link.now + 1)
    assert crashes >= 3
    link.sync()
    assert_replica(master, slave)
    master.shutdown()
    slave.shutdown()


def test_bytes_that_are_no_records_are_still_refused(tmp_path: Path) -> None:
    slave = open_store(make_config(tmp_path / "s", cl_size=CL_SIZE))
    with pytest.raises(ReplicaAppendError):
        HAClient(slave, max_record_size=CL_SIZE).on_transfer(0, b"\x00" * 3000)
    assert slave.get_max_phy_offset() == 0
    slave.shutdown()
