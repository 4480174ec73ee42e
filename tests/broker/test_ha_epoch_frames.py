"""A restarted master begins its epoch after its slave said hello (over
127.0.0.1, in process): the epoch reaches the slave in the stream before its
bytes, so the slave's next hello is accepted; an older slave (no epoch frames)
is closed when the epoch begins and learns it from its next hello."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import trio

import broker.ha_service
from broker.config import BrokerConfig, BrokerRole
from broker.ha_service import HAService
from broker.store import DefaultMessageStore
from broker.store.ha.epochs import EpochHistory, Verdict, judge
from broker.store.ha.transfer import make_hello
from tests.broker.store.helpers import inner, make_config, open_store
from tests.waits import wait_until


def cfg(root: Path, slave: bool) -> BrokerConfig:
    c = make_config(root, cl_size=1 << 16, cq_entries=100)
    c.ha_send_heartbeat_interval = 200  # ms: heartbeats and reports come quickly
    if slave:
        c.broker_role, c.broker_id = BrokerRole.SLAVE, 1
    return c


def put_n(store: DefaultMessageStore, n: int, tag: str) -> None:
    for i in range(n):
        assert store.put_message(inner("T", 0, f"{tag}{i}".encode().ljust(300, b"."))).ok


def caught_up(master: DefaultMessageStore, slave_ha: HAService) -> bool:
    return slave_ha.link == "accepted" and \
        slave_ha.store.get_max_phy_offset() == master.get_max_phy_offset()


async def restart_then_epoch(tmp_path: Path) -> tuple[DefaultMessageStore,
                                                      DefaultMessageStore, HAService]:
    """The master's store holds epoch 1, its slave all of it. A restarted
    master's HA service answers the slave's hello, then begins epoch 2 (as
    ``start_writes`` once the slave was heard) and takes writes, which the
    slave receives on the same connection. Returns the stores and the
    master's HA service (stopped)."""
    master = open_store(cfg(tmp_path / "m", False))
    slave = open_store(cfg(tmp_path / "s", True))
    master.epochs.begin(0)
    put_n(master, 20, "one")
    mha = HAService(cfg(tmp_path / "m", False), master)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(mha.run_master, 0)
        scfg = cfg(tmp_path / "s", True)
        scfg.ha_master_address = f"127.0.0.1:{port}"
        sha = HAService(scfg, slave)
        nursery.start_soon(sha.run_slave)
        await wait_until(lambda: caught_up(master, sha), 20, "the slave caught up")
        assert slave.epochs.entries == master.epochs.entries  # epoch 1
        assert mha.connections  # the slave is connected before the epoch begins
        await mha._maybe_open()  # the master takes writes: epoch 2 begins
        assert mha.opened and master.epochs.last_epoch == 2
        put_n(master, 30, "two")
        mha.notify_new_data()
        await wait_until(lambda: caught_up(master, sha)
                         and slave.epochs.entries == master.epochs.entries,
                         20, "the slave holds epoch 2's bytes and its entry")
        nursery.cancel_scope.cancel()
    return master, slave, mha


async def reconnect(master: DefaultMessageStore, slave: DefaultMessageStore,
                    tmp_path: Path) -> HAService:
    """The slave says hello again (after a kill, or a timeout); more writes."""
    mha = HAService(cfg(tmp_path / "m", False), master)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(mha.run_master, 0)
        scfg = cfg(tmp_path / "s", True)
        scfg.ha_master_address = f"127.0.0.1:{port}"
        sha = HAService(scfg, slave)
        nursery.start_soon(sha.run_slave)
        await wait_until(lambda: caught_up(master, sha) or sha.link == "refused", 20,
                         "the slave's hello answered")
        assert sha.link == "accepted", sha.link_reason
        put_n(master, 10, "three")
        mha.notify_new_data()
        await wait_until(lambda: caught_up(master, sha), 20, "the slave caught up again")
        nursery.cancel_scope.cancel()
    assert not mha.refused, mha.refusals
    return mha


async def test_a_slave_connected_before_the_masters_epoch_is_accepted_again(
        tmp_path: Path) -> None:
    master, slave, _ = await restart_then_epoch(tmp_path)
    on_disk = EpochHistory(tmp_path / "s")
    on_disk.load()
    assert on_disk.entries == master.epochs.entries  # written before its bytes were
    assert judge(master.log_view(), slave.log_view(), master.crc_range).verdict \
        is Verdict.ACCEPT
    await reconnect(master, slave, tmp_path)
    end = master.get_max_phy_offset()
    assert slave.get_raw(0, end) == master.get_raw(0, end)  # one 64 KiB file
    master.shutdown()
    slave.shutdown()


async def test_an_older_slave_is_closed_when_the_epoch_begins_and_learns_it_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slave without epoch frames (an older version) is closed by the
    master as the epoch begins; its next hello's answer holds the epoch."""
    monkeypatch.setattr(broker.ha_service, "make_hello",
                        functools.partial(make_hello, epoch_frames=False))
    master, slave, _ = await restart_then_epoch(tmp_path)
    assert slave.epochs.entries == master.epochs.entries
    await reconnect(master, slave, tmp_path)
    master.shutdown()
    slave.shutdown()
