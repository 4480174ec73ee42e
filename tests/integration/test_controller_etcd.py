"""Two real mqcontroller processes sharing a real etcd (controllerType=etcd): one leads,
the other answers CONTROLLER_NOT_LEADER; the leader and the master die together, and the
other controller takes over, finds the state in etcd and elects the in-sync replica."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.controller import (
    AlterSyncStateSetRequestHeader,
    ElectMasterRequestHeader,
    GetReplicaInfoRequestHeader,
)
from protocol.trio.client import RemotingClient
from tests.controller.etcd_server import EtcdCluster, make_cluster, needs_etcd
from tests.integration.cluster import Cluster, Daemon
from tests.integration.controller_brokers import FakeBroker, ask, join
from tests.waits import wait_until

pytestmark = needs_etcd

_prefixes = itertools.count()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = make_cluster(tmp_path / "etcd", 1)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


async def leads(client: RemotingClient, ctrl: Daemon) -> bool:
    if ctrl.proc is None or ctrl.proc.poll() is not None:
        return False
    try:
        r = await ask(client, ctrl.addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
    except OSError:
        return False
    return r.ext_fields.get("isLeader") is True


async def test_controllers_on_etcd_fail_over(cluster: Cluster, etcd: EtcdCluster) -> None:
    props = {"controllerType": "etcd", "etcdEndpoints": etcd.endpoints,
             "etcdKeyPrefix": f"/test/controller/{next(_prefixes)}",
             "etcdLeaseTtlSeconds": 2, "etcdRequestTimeoutMs": 1000,
             "brokerHeartbeatTimeout": 1000, "scanNotActiveBrokerInterval": 200}
    a = cluster.controller(ready_marker="controller started", **props)
    b = cluster.controller(ready_marker="controller started", **props)
    b1, b2 = FakeBroker(1), FakeBroker(2)
    async with trio.open_nursery() as nursery, RemotingClient() as client:
        await wait_until(lambda: _one_leads(client, a, b), 20, "one controller leads")
        leader, follower = (a, b) if await leads(client, a) else (b, a)
        r = await ask(client, follower.addr, RequestCode.CONTROLLER_GET_REPLICA_INFO,
                      GetReplicaInfoRequestHeader(broker_name="b").to_fields())
        assert r.code == ResponseCode.CONTROLLER_NOT_LEADER
        for fb in (b1, b2):
            await fb.serve(nursery)
            await join(client, leader.addr, fb)
            nursery.start_soon(fb.heartbeat_loop, client, [a.addr, b.addr])
        r = await ask(client, leader.addr, RequestCode.CONTROLLER_ELECT_MASTER,
                      ElectMasterRequestHeader(broker_name="b", cluster_name="c",
                                               broker_id=1).to_fields())
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = await ask(client, leader.addr, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                      AlterSyncStateSetRequestHeader(broker_name="b", master_broker_id=1,
                                                     master_epoch=1).to_fields(),
                      {"syncStateSet": [1, 2], "syncStateSetEpoch": 1})
        assert r.code == ResponseCode.SUCCESS, r.remark

        # the leading controller and the master die together
        leader.kill()
        b1.beating = False
        await wait_until(lambda: leads(client, follower), 20, "the other controller leads")
        await wait_until(lambda: any(n.master_broker_id == 2 for n, _ in b2.notes), 20,
                         "broker 2 told it is master by the new leader")
        header, members = b2.notes[-1]
        assert (header.master_epoch, members.sync_state_set) == (2, {2})
        r = await ask(client, follower.addr, RequestCode.CONTROLLER_GET_REPLICA_INFO,
                      GetReplicaInfoRequestHeader(broker_name="b").to_fields())
        assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"]) == (2, 2)
        nursery.cancel_scope.cancel()


async def _one_leads(client: RemotingClient, a: Daemon, b: Daemon) -> bool:
    return [await leads(client, a), await leads(client, b)].count(True) == 1
