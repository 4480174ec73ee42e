"""The handshake's judgement on real stores (no sockets): epochs follow the
bytes, an empty master is behind, another lineage diverges, a silent slave is
noticed, and a discarded slave copies afresh."""

from __future__ import annotations

import random
from pathlib import Path

from broker.store import DefaultMessageStore
from broker.store.ha.epochs import Verdict, judge
from broker.store.ha.ha_client import HAClient
from broker.store.ha.ha_connection import HAConnection, is_slave_ok
from broker.store.status import PutMessageStatus
from tests.broker.store.ha.test_replication import Link, put_some
from tests.broker.store.helpers import inner, make_config, open_store

CL_SIZE = 4096


def stores(tmp_path: Path, *names: str) -> list[DefaultMessageStore]:
    return [open_store(make_config(tmp_path / n, cl_size=CL_SIZE)) for n in names]


def follow(master: DefaultMessageStore, slave: DefaultMessageStore, rng: random.Random) -> Link:
    """A link whose slave copies the master's epochs as the bytes arrive (as
    HAService wires it after an accepting answer)."""
    link = Link(master, slave, 512, rng)
    epochs = list(master.epochs.entries)
    link.client.before_append = lambda end: slave.epochs.follow(epochs, end)
    return link


def verdict(master: DefaultMessageStore, slave: DefaultMessageStore) -> Verdict:
    return judge(master.log_view(), slave.log_view(), master.crc_range).verdict


def test_a_slave_copies_the_epochs_and_is_accepted_again(tmp_path: Path) -> None:
    rng = random.Random(1)
    master, slave = stores(tmp_path, "m", "s")
    master.epochs.begin(0)
    put_some(master, rng, 60)
    follow(master, slave, rng).sync()
    assert slave.epochs.entries == master.epochs.entries
    assert slave.epochs.store_id != master.epochs.store_id  # each store its own id
    # the master restarts and begins a new epoch; the slave is still a prefix
    master.epochs.begin(master.get_max_phy_offset())
    put_some(master, rng, 30)
    assert verdict(master, slave) is Verdict.ACCEPT
    follow(master, slave, rng).sync()
    assert slave.epochs.entries == master.epochs.entries
    assert verdict(master, slave) is Verdict.ACCEPT


def test_an_empty_master_is_behind_and_a_new_lineage_diverges(tmp_path: Path) -> None:
    rng = random.Random(2)
    master, slave, fresh = stores(tmp_path, "m", "s", "fresh")
    master.epochs.begin(0)
    put_some(master, rng, 60)
    follow(master, slave, rng).sync()
    assert verdict(fresh, slave) is Verdict.MASTER_BEHIND  # the disk was replaced
    fresh.epochs.begin(0)
    put_some(fresh, rng, 200)  # it took writes anyway: longer than the slave's log
    assert fresh.get_max_phy_offset() > slave.get_max_phy_offset()
    assert verdict(fresh, slave) is Verdict.DIVERGED


def test_same_epochs_different_bytes_diverge_on_the_checksum(tmp_path: Path) -> None:
    """A store copied with its epoch file, then written by two masters."""
    rng = random.Random(3)
    a, b = stores(tmp_path, "a", "b")
    a.epochs.begin(0)
    b.epochs.entries = list(a.epochs.entries)  # the same history, other bytes
    put_some(a, rng, 40)
    put_some(b, random.Random(4), 60)
    if b.get_max_phy_offset() <= a.get_max_phy_offset():
        a, b = b, a
    j = judge(b.log_view(), a.log_view(), b.crc_range)
    assert j.verdict is Verdict.DIVERGED and "checksum" in j.reason


def test_restore_from_the_slave_then_the_slave_is_accepted(tmp_path: Path) -> None:
    rng = random.Random(5)
    master, slave, fresh = stores(tmp_path, "m", "s", "fresh")
    master.epochs.begin(0)
    put_some(master, rng, 80)
    follow(master, slave, rng).sync()
    # recoverFromSlave: the slave sends, the fresh master appends and takes its epochs
    back = Link(slave, fresh, 700, rng)
    epochs = list(slave.epochs.entries)
    back.client.before_append = lambda end: fresh.epochs.follow(epochs, end)
    back.sync()
    assert fresh.get_max_phy_offset() == slave.get_max_phy_offset()
    fresh.epochs.begin(fresh.get_max_phy_offset())
    assert verdict(fresh, slave) is Verdict.ACCEPT
    assert fresh.epochs.entries[:-1] == slave.epochs.entries


def test_a_discarded_slave_copies_the_master_afresh(tmp_path: Path) -> None:
    rng = random.Random(6)
    old, slave, master = stores(tmp_path, "old", "s", "m")
    old.epochs.begin(0)
    put_some(old, rng, 50)
    follow(old, slave, rng).sync()
    master.epochs.begin(0)
    put_some(master, rng, 120)
    assert verdict(master, slave) is Verdict.DIVERGED
    slave.discard_log()
    assert slave.get_max_phy_offset() == 0 and slave.epochs.entries == []
    assert verdict(master, slave) is Verdict.ACCEPT
    follow(master, slave, rng).sync()
    for topic in ("T0", "T1", "T2", "T3"):
        for qid in range(3):
            assert slave.get_max_offset_in_queue(topic, qid) == \
                master.get_max_offset_in_queue(topic, qid)
    slave.shutdown()  # what it copied survives a restart
    again = open_store(make_config(tmp_path / "s", cl_size=CL_SIZE))
    assert again.get_max_phy_offset() == master.get_max_phy_offset()
    assert again.epochs.entries == master.epochs.entries


def test_the_write_fence_refuses_puts_and_names_the_cause(tmp_path: Path) -> None:
    (store,) = stores(tmp_path, "m")
    store.write_fence = "writes refused: slave log longer than master"
    r = store.put_message(inner("T", 0, b"x"))
    assert r.put_message_status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "slave log longer" in r.detail and store.get_max_phy_offset() == 0
    store.write_fence = None
    assert store.put_message(inner("T", 0, b"x")).put_message_status is PutMessageStatus.PUT_OK


def test_a_slave_with_nothing_acknowledged_for_the_silent_time_is_silent(
        tmp_path: Path) -> None:
    rng = random.Random(7)
    master, slave = stores(tmp_path, "m", "s")
    put_some(master, rng, 20)
    conn = HAConnection(master, 512)
    conn.connected(0.0)
    conn.on_report(0, 0.0)
    end = master.get_max_phy_offset()
    assert conn.next_transfer(0.0) is not None  # bytes out at t=0, none acknowledged
    assert not conn.silent(0.9, 1.0) and conn.silent(1.0, 1.0)
    assert not conn.silent(1.0, 0.0)  # haSlaveSilentMs=0: never
    # only a silence the HA service confirmed takes the slave out of SYNC_MASTER sends
    assert is_slave_ok([conn], end)
    conn.silent_confirmed = True
    assert not is_slave_ok([conn], end)
    client = HAClient(slave)
    off, data = 0, master.get_raw(0, 512)
    assert data
    client.on_transfer(off, data, 1.0)
    assert conn.next_transfer(1.2) is not None  # more out before the report
    conn.on_report(slave.get_max_phy_offset(), 1.5)  # progress: the clock starts again
    assert not conn.silent_confirmed and is_slave_ok([conn], end)
    assert not conn.silent(2.4, 1.0) and conn.silent(2.5, 1.0)
    conn.on_report(conn.next_offset or 0, 2.6)  # everything sent acknowledged
    assert not conn.silent(100.0, 1.0)
