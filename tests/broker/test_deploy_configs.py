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


def test_controller_3r_is_one_broker_name_with_the_controller_in_the_name_server() -> None:
    from deploy.run_cluster import _brokers, namesrv_config_of
    from namesrv.config import NamesrvConfig

    deployment = DEPLOY / "controller-3r"
    files = _brokers(deployment)
    assert [p.name for p in files] == [f"broker-a-{i}.properties" for i in range(3)]
    configs = [BrokerConfig.from_properties(load_properties(p)) for p in files]
    assert all(not c.no_effect_keys for c in configs)
    assert {c.broker_name for c in configs} == {"broker-a"}
    assert all(c.enable_controller_mode and c.all_ack_in_sync_state_set
               and c.min_in_sync_replicas == 2 for c in configs)
    ns = NamesrvConfig.from_properties(load_properties(namesrv_config_of(deployment)))
    assert ns.enable_controller_in_namesrv
    assert {c.controller_addr for c in configs} == {f"127.0.0.1:{ns.listen_port}"}
    ports = [c.listen_port for c in configs] + [c.ha_port for c in configs]
    assert len(ports) == len(set(ports))
    assert len({c.store_path_root_dir for c in configs}) == 3
