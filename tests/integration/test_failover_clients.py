"""Our SDK's clients across an automatic failover (controller mode, issue 51): a
producer, a clustering push consumer and an orderly push consumer keep going
across a kill -9 of the master, without a restart; so do the official C++ client's producer and push consumer
(skipped where its wheel cannot load). See failover_clients.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.cluster import Cluster
from tests.integration.failover_clients import (
    CONCURRENT,
    ORDERLY,
    cpp_clients_follow,
    sdk_clients_follow,
)
from tests.integration.official_client import load_error

_why = load_error()


async def test_sdk_producer_and_push_consumers_follow_the_new_master(cluster: Cluster
                                                                     ) -> None:
    # the clients' periodic route refresh at its default (30 s): what finds the new
    # master is the refresh a failed send or pull makes at once
    figures = await sdk_clients_follow(cluster, poll_s=30.0)
    assert figures.acked >= 200
    assert set(figures.resumed_s) == {CONCURRENT, ORDERLY}
    # the heart-beat timeout (1.5 s), an election, a registration (measured 2.4-3.3 s)
    assert figures.first_send_s < 20, figures
    assert max(figures.resumed_s.values()) < 25, figures


@pytest.mark.skipif(_why is not None,
                    reason=f"the official RocketMQ client (PyPI rocketmq) cannot load here: {_why}")
async def test_cpp_producer_and_push_consumer_follow_the_new_master(cluster: Cluster,
                                                                    tmp_path: Path) -> None:
    # the kill falls after the C++ client's first route refresh (3 s after its start):
    # it finds the new master at its next one, 30 s later
    figures = await cpp_clients_follow(cluster, tmp_path, settle=5.0)
    assert figures.acked >= 80
    # the C++ client refreshes its routes every 30 s: the first send after the kill
    # waits for that at most, beyond the election
    assert figures.first_send_s < 30 + 30, figures
