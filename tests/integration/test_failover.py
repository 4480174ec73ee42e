"""Automatic failover (controller mode) with real daemons: three brokers of one
broker name, a controller, a name server; kill -9 of the master (see failover.py)."""

from __future__ import annotations

from tests.integration.cluster import Cluster
from tests.integration.failover import failover


async def test_kill_9_of_the_master_fails_over_and_the_old_one_rejoins(
        cluster: Cluster) -> None:
    figures = await failover(cluster, heartbeat_ms=1500, count=50)
    assert figures.acked_before == 50 and figures.acked_after >= 50
    # write unavailability is bounded by the heart-beat timeout and a few rounds
    assert figures.unavailable_s < 60, figures
