"""The etcd backend as configured (controller/etcd_backend.py): the etcd* keys, their
checks, and two controllers made from config against a real etcd, one leading and
saving, the other refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from controller.etcd_backend import EtcdConfig, open_etcd_backend
from controller.state_store import StateConflict, Stored
from protocol.config import ConfigError
from tests.controller.etcd_server import make_cluster, needs_etcd
from tests.waits import wait_until


def test_keys_and_defaults() -> None:
    assert EtcdConfig().to_properties() == {
        "etcdEndpoints": "http://127.0.0.1:2379",
        "etcdKeyPrefix": "/rocketmq/controller/default",
        "etcdLeaseTtlSeconds": "3",
        "etcdRequestTimeoutMs": "2000",
    }


def test_controller_properties_give_their_etcd_keys() -> None:
    config = EtcdConfig.of_controller({
        "controllerType": "etcd", "listenPort": "9878",
        "etcdEndpoints": "http://10.0.0.1:2379;http://10.0.0.2:2379",
        "etcdkeyprefix": "/rocketmq/controller/prod-a", "etcdLeaseTtlSeconds": "5"})
    assert config.etcd_endpoints == "http://10.0.0.1:2379;http://10.0.0.2:2379"
    assert config.etcd_key_prefix == "/rocketmq/controller/prod-a"
    assert config.etcd_lease_ttl_seconds == 5


@pytest.mark.parametrize("props, why", [
    ({"etcdEndpoints": "https://a:2379"}, "etcdEndpoints: .*only http"),
    ({"etcdEndpoints": ""}, "etcdEndpoints: no etcd endpoint"),
    ({"etcdKeyPrefix": "rocketmq"}, "etcdKeyPrefix"),
    ({"etcdKeyPrefix": "/a b"}, "etcdKeyPrefix"),
    ({"etcdLeaseTtlSeconds": "1"}, "etcdLeaseTtlSeconds 1"),
    ({"etcdLeaseTtlSeconds": "three"}, "bad value for etcdLeaseTtlSeconds"),
    ({"etcdRequestTimeoutMs": "3000"}, "below the lease TTL"),
    ({"etcdRequestTimeoutMs": "10"}, "at least 100"),
    ({"etcdLeaseTtlMs": "3000"}, "unknown config key: etcdLeaseTtlMs"),
])
def test_bad_values_refused(props: dict[str, str], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        EtcdConfig.of_controller(props)


def test_backend_wiring() -> None:
    backend = open_etcd_backend(EtcdConfig(etcd_request_timeout_ms=1500), "10.0.0.5:9878")
    assert backend.store.fence is backend.leadership
    assert backend.store.client is backend.client is backend.leadership.client
    assert backend.client.timeout == 1.5
    assert backend.leadership.identity == b"10.0.0.5:9878"
    assert backend.store.key == b"/rocketmq/controller/default/state"
    assert backend.leadership.key == b"/rocketmq/controller/default/leader"


@needs_etcd
async def test_two_controllers_from_config(tmp_path: Path) -> None:
    cluster = make_cluster(tmp_path, 1)
    try:
        cluster.start()
        props = {"etcdEndpoints": cluster.endpoints, "etcdLeaseTtlSeconds": "2",
                 "etcdRequestTimeoutMs": "1000", "etcdKeyPrefix": "/rocketmq/controller/t"}
        one = open_etcd_backend(EtcdConfig.of_controller(props), "127.0.0.1:9001")
        two = open_etcd_backend(EtcdConfig.of_controller(props), "127.0.0.1:9002")
        async with trio.open_nursery() as nursery:
            for b in (one, two):
                nursery.start_soon(b.leadership.run, trio.lowlevel.checkpoint,
                                   trio.lowlevel.checkpoint)
            await wait_until(lambda: one.leadership.is_leader or two.leadership.is_leader, 10,
                             "one of the two leads")
            leader, other = (one, two) if one.leadership.is_leader else (two, one)
            version = await leader.store.save(b"state", 0)
            with pytest.raises(StateConflict):
                await other.store.save(b"other", version)
            assert await other.store.load() == Stored(b"state", version)
            assert await other.leadership.current_leader() == leader.leadership.identity
            nursery.cancel_scope.cancel()
        await one.aclose()
        await two.aclose()
    finally:
        cluster.stop()
