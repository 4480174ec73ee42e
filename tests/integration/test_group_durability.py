"""Subscription-group changes are answered only once on disk: a broker killed
with SIGKILL the moment the last answer arrives keeps every acknowledged
creation (with its settings) and deletion after a restart on the same store."""

from __future__ import annotations

import pytest
import trio

from client.admin import MQAdmin
from tests.integration.cluster import Cluster

CREATED = 200
DELETED = 20


def settings(i: int) -> dict[str, object]:
    """Group ``i``'s config: every one differs from the defaults somewhere."""
    return {"groupName": f"durable-{i}", "retryMaxTimes": i % 17,
            "consumeBroadcastEnable": i % 2 == 0, "retryQueueNums": 1 + i % 3,
            "consumeEnable": i % 5 != 0}


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_acknowledged_group_changes_survive_kill_9(cluster: Cluster, flush: str) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, flushDiskType=flush)
    async with MQAdmin(ns.addr) as admin:
        # groups to delete later, acknowledged (so on disk) before
        for i in range(DELETED):
            await admin.update_subscription_group(broker.addr, {"groupName": f"doomed-{i}"})
        acked: list[str] = []

        async def create(i: int) -> None:
            await admin.update_subscription_group(broker.addr, settings(i))
            acked.append(f"durable-{i}")

        async def delete(i: int) -> None:
            await admin.delete_subscription_group(broker.addr, f"doomed-{i}")
            acked.append(f"doomed-{i}")

        # every change in flight at once: answered in group commits
        async with trio.open_nursery() as nursery:
            for i in range(CREATED):
                nursery.start_soon(create, i)
                if i < DELETED:
                    nursery.start_soon(delete, i)
        broker.kill()  # SIGKILL the moment the last answer arrived: no shutdown save
        assert len(acked) == CREATED + DELETED

    broker.start()
    async with MQAdmin(ns.addr) as admin:
        groups = await admin.subscription_groups(broker.addr)
    for i in range(CREATED):
        got = groups.get(f"durable-{i}")
        assert got is not None, f"acknowledged group durable-{i} lost"
        for key, value in settings(i).items():
            assert got[key] == value, (i, key, got)
    assert not {f"doomed-{i}" for i in range(DELETED)} & set(groups), "deleted groups came back"
