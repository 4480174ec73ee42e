"""FIFO groups with the official 5.x client, shorter (bench/grpc_fifo.py runs 10,000):
its Producer sends over 20 message groups, its SimpleConsumer receives through a FIFO
group (consumeMessageOrderly) while the broker is killed (SIGKILL) midway and started
again; every message group's messages arrive in send order, none skipped, repeated only
while un-acked, with attempts never reset. Same venv mechanism and skip as
test_grpc_official_client.py."""

from __future__ import annotations

from bench.grpc_fifo import run_fifo
from tests.integration.cluster import Cluster
from tests.integration.test_grpc_official_client import RMQ5, pytestmark  # noqa: F401

MESSAGES = 2000


async def test_fifo_group_keeps_every_message_group_in_order_across_a_kill_9(
        cluster: Cluster) -> None:
    assert RMQ5 is not None
    goal = await run_fifo(cluster, RMQ5, MESSAGES, groups=20, kill=True, invisible_s=6,
                          settle_s=45)
    assert goal.sent_ok == MESSAGES and goal.send_failed == 0, goal
    assert goal.receive_errors > 0  # the broker was down for a while
    assert goal.missing == 0 and goal.received == MESSAGES, goal
    assert (goal.skipped, goal.passed, goal.bad_repeats, goal.attempt_resets) == (0, 0, 0, 0), \
        goal.problems
