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


def test_controller_3r_etcd_is_three_controllers_on_one_etcd() -> None:
    from controller.config import ControllerConfig
    from controller.etcd_backend import EtcdConfig
    from deploy.run_cluster import _brokers, controllers_of, etcd_client_addr, namesrv_config_of
    from namesrv.config import NamesrvConfig

    deployment = DEPLOY / "controller-3r-etcd"
    files = _brokers(deployment)
    assert [p.name for p in files] == [f"broker-a-{i}.properties" for i in range(3)]
    brokers = [BrokerConfig.from_properties(load_properties(p)) for p in files]
    assert all(not c.no_effect_keys for c in brokers)
    assert {c.broker_name for c in brokers} == {"broker-a"}
    assert all(c.enable_controller_mode and c.all_ack_in_sync_state_set
               and c.min_in_sync_replicas == 2 for c in brokers)
    props = [load_properties(p) for p in controllers_of(deployment)]
    controllers = [ControllerConfig.from_properties(p) for p in props]
    assert len(controllers) == 3 and {c.controller_type for c in controllers} == {"etcd"}
    etcd = [EtcdConfig.from_properties({k: v for k, v in p.items() if k.startswith("etcd")})
            for p in props]
    host, port = etcd_client_addr(deployment / "etcd.conf.yml")
    assert {(e.etcd_endpoints, e.etcd_key_prefix) for e in etcd} == {
        (f"http://{host}:{port}", "/rocketmq/controller/controller-3r-etcd")}
    # every broker lists every controller; the name server holds no controller
    assert {tuple(c.controller_addr_list) for c in brokers} == {
        tuple(f"127.0.0.1:{c.listen_port}" for c in controllers)}
    ns = NamesrvConfig.from_properties(load_properties(namesrv_config_of(deployment)))
    assert not ns.enable_controller_in_namesrv
    assert {c.namesrv_addr for c in brokers} == {f"127.0.0.1:{ns.listen_port}"}
    ports = [ns.listen_port, port] + [c.listen_port for c in controllers] \
        + [c.listen_port for c in brokers] + [c.ha_port for c in brokers]
    assert len(ports) == len(set(ports))
    assert len({c.store_path_root_dir for c in brokers}) == 3
