"""SYNC_MASTER sends and a silent slave, in virtual time (MockClock): the HA
service's silence check against a real store and a pure HAConnection."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from broker.ha_service import HAService
from broker.store import DefaultMessageStore
from broker.store.ha.ha_connection import HAConnection
from broker.store.status import PutMessageStatus
from tests.broker.store.helpers import inner, make_config, open_store


def connected(tmp_path: Path, batch: int, cl_size: int, sync_flush_timeout: int
              ) -> tuple[DefaultMessageStore, HAService, HAConnection]:
    """A master's store and HA service with one slave connected at offset 0
    (haSlaveSilentMs 1000, the default)."""
    config = make_config(tmp_path, cl_size=cl_size)
    config.sync_flush_timeout = sync_flush_timeout
    store = open_store(config)
    ha = HAService(config, store)
    conn = HAConnection(store, batch)
    conn.connected(trio.current_time())
    conn.on_report(0, trio.current_time())
    ha.connections.add(conn)
    return store, ha, conn


async def test_waiting_sends_end_slave_not_available_once_the_slave_is_silent(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    store, ha, conn = connected(tmp_path, 512, 4096, 5000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ha.sends.run_expiry)
        nursery.start_soon(ha.run_silence_check)
        store.put_message(inner("T", 0, b"x" * 100))
        t0 = trio.current_time()
        assert conn.next_transfer(t0) is not None  # sent, never acknowledged
        w = ha.wait_slave(store.get_max_phy_offset())
        assert w.status is None
        while w.status is None:
            await trio.sleep(0.05)
        took = trio.current_time() - t0
        assert w.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert 1.0 <= took < 1.5, took  # haSlaveSilentMs, not syncFlushTimeout (5 s)
        assert conn.silent_confirmed
        # the next send is answered at once
        w2 = ha.wait_slave(store.get_max_phy_offset())
        assert w2.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        # an acknowledgement brings it back: the next send waits for the slave again
        conn.on_report(conn.next_offset or 0, trio.current_time())
        w3 = ha.wait_slave(store.get_max_phy_offset())
        assert w3.status is None
        ha.waiters.advance(store.get_max_phy_offset())
        assert w3.status is PutMessageStatus.PUT_OK
        nursery.cancel_scope.cancel()
    store.shutdown()


async def test_a_slave_that_keeps_acknowledging_is_never_silent(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """Progress every 0.8 s (under haSlaveSilentMs) for 10 s: the send waiting
    for the far end is never ended SLAVE_NOT_AVAILABLE (it times out instead)."""
    store, ha, conn = connected(tmp_path, 64, 1 << 20, 10_000)
    for i in range(30):
        store.put_message(inner("T", 0, b"y" * 50 + bytes([i])))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ha.sends.run_expiry)
        nursery.start_soon(ha.run_silence_check)
        w = ha.wait_slave(store.get_max_phy_offset())
        acked = 0
        for _ in range(12):
            t = conn.next_transfer(trio.current_time())
            assert t is not None and t[1]
            await trio.sleep(0.8)
            acked = t[0] + len(t[1])
            conn.on_report(acked, trio.current_time())
            assert w.status is None and not conn.silent_confirmed
        nursery.cancel_scope.cancel()
    store.shutdown()
