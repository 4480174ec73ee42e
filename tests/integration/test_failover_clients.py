"""Our SDK's clients across an automatic failover (controller mode, issue 51): a
producer, a clustering push consumer and an orderly push consumer keep going
across a kill -9 of the master, without a restart (see failover_clients.py)."""

from __future__ import annotations

from tests.integration.cluster import Cluster
from tests.integration.failover_clients import CONCURRENT, ORDERLY, sdk_clients_follow


async def test_sdk_producer_and_push_consumers_follow_the_new_master(cluster: Cluster
                                                                     ) -> None:
    figures = await sdk_clients_follow(cluster, poll_s=0.5)
    assert figures.acked >= 200
    assert set(figures.resumed_s) == {CONCURRENT, ORDERLY}
    # bounded by the heart-beat timeout, an election and the clients' route refresh
    assert figures.first_send_s < 60, figures
