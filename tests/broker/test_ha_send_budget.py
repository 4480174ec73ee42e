"""Row 10: what peers that never read can make a master hold. The HA service's
writers against a real store, in virtual time (MockClock): every prepared send
comes out of one shared budget (one transfer at least per connection), and a
send the peer takes nothing of for haHousekeepingInterval closes the connection."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from broker.ha_service import SEND_BUDGET, HAService
from broker.store.ha.ha_connection import HAConnection
from broker.store.status import PutMessageStatus
from tests.broker.store.helpers import inner, make_config, open_store


class NeverRead(trio.abc.Stream):
    """A peer that never reads: every send blocks for ever, holding its bytes."""

    held = 0  # bytes of all sends blocked now (the class's: every connection's)
    peak = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        NeverRead.held += len(data)
        NeverRead.peak = max(NeverRead.peak, NeverRead.held)
        try:
            await trio.sleep_forever()
        finally:
            NeverRead.held -= len(data)

    async def wait_send_all_might_not_block(self) -> None:
        await trio.sleep_forever()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


async def test_never_reading_peers_hold_at_most_the_budget_and_are_closed(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    config = make_config(tmp_path, cl_size=8 << 20)
    config.max_message_size = 16_000
    store = open_store(config)
    for i in range(600):  # ~4.8 MB: more than two full sends for every connection
        assert store.put_message(inner("T", 0, bytes([i % 256]) * 8000)).put_message_status \
            is PutMessageStatus.PUT_OK
    ha = HAService(config, store)
    n = 12  # 12 x 2 MiB prepared without a shared bound: more than the budget
    batch = config.ha_transfer_batch_size
    ended: list[tuple[float, str]] = []

    async def writer() -> None:
        conn = HAConnection(store, batch, ha.heartbeat, ha.housekeeping)
        conn.connected(trio.current_time())
        conn.on_report(0, trio.current_time())
        try:
            await ha._write_transfers(conn, NeverRead())
        except TimeoutError as exc:
            ended.append((trio.current_time(), str(exc)))

    t0 = trio.current_time()
    with trio.move_on_after(10 * ha.housekeeping):
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(writer)
    assert 0 < NeverRead.peak <= SEND_BUDGET + n * (batch + 12), NeverRead.peak
    assert len(ended) == n
    for at, reason in ended:
        assert at - t0 == pytest.approx(ha.housekeeping, abs=0.1) and "does not read" in reason
    assert NeverRead.held == 0 and ha._send_budget == SEND_BUDGET  # all given back
    store.shutdown()
