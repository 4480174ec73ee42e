"""bench.grpc_guard_cost: each measured call runs (and the ACL one is allowed)."""

from __future__ import annotations

from bench.grpc_guard_cost import cases


def test_cases_run() -> None:
    measured = cases()
    assert set(measured) == {"acl", "wrap", "unwrap"}
    for fn in measured.values():
        fn()
