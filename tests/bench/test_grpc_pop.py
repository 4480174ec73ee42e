"""bench.grpc_pop: a small run against real daemons with the official 5.x consumer
(needs .venv-rmq5: make rmq5)."""

from __future__ import annotations

import pytest

from bench import grpc_pop
from tests.integration.test_grpc_official_client import RMQ5


@pytest.mark.skipif(RMQ5 is None, reason="RocketMQ's official Python client 5.x is not "
                    "installed: `make rmq5`, or set RMQ5_PYTHON")
def test_small_run_receives_and_acks_every_message() -> None:
    seconds, cpu = grpc_pop.measure(100, 64)
    assert 0 < seconds < 120
    assert cpu > 0
