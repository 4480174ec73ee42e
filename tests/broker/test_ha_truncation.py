"""Controller mode, a replica rejoining a new master over 127.0.0.1: a log
that diverged is cut to the point both share and then follows; with no such
point it refuses, log untouched; outside controller mode the refusal of
issue 47 stays."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

import trio

from broker.config import BrokerConfig, BrokerRole
from broker.ha_service import HAService
from broker.store import DefaultMessageStore
from broker.store.ha.truncation import MARKER_FILE
from tests.broker.store.helpers import inner, make_config, open_store
from tests.waits import wait_until


def cfg(root: Path, slave: bool, controller: bool) -> BrokerConfig:
    c = make_config(root, cl_size=1 << 16, cq_entries=100)
    c.enable_controller_mode = controller
    if slave:
        c.broker_role, c.broker_id = BrokerRole.SLAVE, 1
    return c


def put_n(store: DefaultMessageStore, n: int, tag: str, size: int = 100) -> None:
    for i in range(n):
        assert store.put_message(inner("T", 0, f"{tag}{i}".encode().ljust(size, b"."))).ok


def diverged(tmp_path: Path, controller: bool
             ) -> tuple[DefaultMessageStore, DefaultMessageStore, int]:
    """An old master's store (now to be a replica) and the new master's: both
    hold 5 records of epoch 1; the new master then wrote 3 in its epoch 2, the
    old one 4 more in epoch 1 that no one received. Returns them and the
    offset where they part."""
    old_root, new_root = tmp_path / "old", tmp_path / "new"
    old = open_store(cfg(old_root, True, controller))
    old.epochs.begin(0)
    put_n(old, 5, "common")
    shared = old.get_max_phy_offset()
    old.shutdown()
    shutil.copytree(old_root, new_root)
    new = open_store(cfg(new_root, False, controller))
    new.epochs.store_id = secrets.token_hex(16)  # another disk
    new.epochs.begin(new.get_max_phy_offset())
    put_n(new, 3, "new-master")
    old = open_store(cfg(old_root, True, controller))
    put_n(old, 4, "lost", 300)
    return old, new, shared


def broker_config(store: DefaultMessageStore, slave: bool) -> BrokerConfig:
    """The broker config a test store was opened with (its StoreConfig's root)."""
    return cfg(store.root, slave, store.config.enable_controller_mode)


async def follow(master: DefaultMessageStore, replica: DefaultMessageStore,
                 until: object, what: str) -> HAService:
    """Run the master's HA service and the replica's until ``until(replica_ha)``."""
    mha = HAService(broker_config(master, False), master)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(mha.run_master, 0)
        rcfg = broker_config(replica, True)
        rcfg.ha_master_address = f"127.0.0.1:{port}"
        rha = HAService(rcfg, replica)
        nursery.start_soon(rha.run_slave)
        await wait_until(lambda: until(rha), 20, what)  # type: ignore[operator]
        nursery.cancel_scope.cancel()
    return rha


async def test_a_diverged_replica_truncates_to_the_common_point_and_follows(
        tmp_path: Path) -> None:
    old, new, shared = diverged(tmp_path, controller=True)
    assert old.get_max_phy_offset() > new.get_max_phy_offset()  # longer, yet it must go
    end = new.get_max_phy_offset()
    await follow(new, old, lambda r: r.link == "accepted"
                 and old.get_max_phy_offset() == end, "the replica follows")
    assert old.get_raw(0, end) == new.get_raw(0, end)  # byte for byte the new master's
    assert old.epochs.entries == new.epochs.entries
    assert not (old.root / MARKER_FILE).exists()
    assert shared < end
    old.shutdown()
    new.shutdown()


async def test_a_replica_sharing_no_point_refuses_and_keeps_its_log(tmp_path: Path) -> None:
    old = open_store(cfg(tmp_path / "old", True, True))
    old.epochs.begin(0)
    put_n(old, 5, "mine")
    new = open_store(cfg(tmp_path / "new", False, True))
    new.epochs.begin(0)
    put_n(new, 3, "theirs")
    before = old.get_raw(0, old.get_max_phy_offset())
    rha = await follow(new, old, lambda r: r.link == "refused", "the replica refuses")
    assert "cannot follow the master" in rha.link_reason
    assert "share no epoch" in rha.link_reason
    assert old.get_raw(0, old.get_max_phy_offset()) == before
    assert not (old.root / MARKER_FILE).exists()
    old.shutdown()
    new.shutdown()


async def test_outside_controller_mode_a_diverged_log_is_refused_as_before(
        tmp_path: Path) -> None:
    old, new, _ = diverged(tmp_path, controller=False)
    end = old.get_max_phy_offset()
    rha = await follow(new, old, lambda r: r.link == "refused", "the slave is refused")
    assert "not a prefix" in rha.link_reason or "differ" in rha.link_reason
    assert old.get_max_phy_offset() == end
    old.shutdown()
    new.shutdown()
