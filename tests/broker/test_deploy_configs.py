"""Every broker config under deploy/ loads, and each deployment's brokers fit
together: one master (brokerId 0) per brokerName, its slaves with ids > 0,
no port used twice, a store directory each."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig, BrokerRole
from protocol.trio.daemon import load_properties

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DEPLOYMENTS = sorted(d for d in DEPLOY.iterdir() if d.is_dir() and d.name.startswith("2m-"))


def test_the_deployments_are_there() -> None:
    assert {d.name for d in DEPLOYMENTS} >= {"2m-noslave", "2m-2s-async", "2m-2s-sync"}


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: d.name)
def test_deployment_brokers_fit_together(deployment: Path) -> None:
    configs = {p.stem: BrokerConfig.from_properties(load_properties(p))
               for p in sorted(deployment.glob("*.properties"))}
    assert configs
    assert all(not c.no_effect_keys for c in configs.values())  # samples use only live keys
    by_name: dict[str, list[BrokerConfig]] = {}
    for c in configs.values():
        by_name.setdefault(c.broker_name, []).append(c)
    for name, group in by_name.items():
        masters = [c for c in group if c.broker_id == 0]
        assert len(masters) == 1, name
        roles = {c.broker_role for c in group if c.broker_id}
        assert roles <= {BrokerRole.SLAVE}, name
        assert len({c.broker_id for c in group}) == len(group), name
        if deployment.name.endswith("-sync"):
            assert masters[0].broker_role is BrokerRole.SYNC_MASTER
        if deployment.name.endswith("-async"):
            assert masters[0].broker_role is BrokerRole.ASYNC_MASTER
    ports = [c.listen_port for c in configs.values()]
    ports += [c.ha_port for c in configs.values() if not c.is_slave]
    assert len(ports) == len(set(ports))
    assert len({c.store_path_root_dir for c in configs.values()}) == len(configs)
