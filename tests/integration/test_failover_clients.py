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
    figures = await sdk_clients_follow(cluster, poll_s=0.5)
    assert figures.acked >= 200
    assert set(figures.resumed_s) == {CONCURRENT, ORDERLY}
    # bounded by the heart-beat timeout, an election and the clients' route refresh
    assert figures.first_send_s < 60, figures


@pytest.mark.skipif(_why is not None,
                    reason=f"the official RocketMQ client (PyPI rocketmq) cannot load here: {_why}")
async def test_cpp_producer_and_push_consumer_follow_the_new_master(cluster: Cluster,
                                                                    tmp_path: Path) -> None:
    figures = await cpp_clients_follow(cluster, tmp_path)
    assert figures.acked >= 80
    # the C++ client refreshes its routes every 30 s: the first send after the kill
    # waits for that at most, beyond the election
    assert figures.first_send_s < 30 + 30, figures
