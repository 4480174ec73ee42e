"""Issue 52's goal, shorter (bench/grpc_pop_goal.py runs 10,000): the official 5.x client
sends and consumes over gRPC through a SYNC_FLUSH broker that is killed (SIGKILL) midway
and started again; every message whose send was acknowledged is received, none stays
invisible for good. Same venv mechanism and skip as test_grpc_official_client.py."""

from __future__ import annotations

from bench.grpc_pop_goal import run_goal
from tests.integration.cluster import Cluster
from tests.integration.test_grpc_official_client import RMQ5, pytestmark  # noqa: F401

MESSAGES = 1500


async def test_official_client_loses_nothing_acknowledged_across_a_kill_9(
        cluster: Cluster) -> None:
    assert RMQ5 is not None
    goal = await run_goal(cluster, RMQ5, MESSAGES, kill=True, settle_s=45, invisible_s=3)
    assert goal.killed and goal.receive_errors > 0  # the broker was down for a while
    assert goal.sent_ok == MESSAGES and goal.send_failed == 0, goal
    assert goal.lost == 0, goal.lost_ids
    assert goal.received >= goal.sent_ok
