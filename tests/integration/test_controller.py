"""A real mqcontroller process and two fake brokers speaking its wire protocol:
registration, heart-beats, a failover when the master's heart-beats stop, the
notification of the new master, mqadmin's controller commands, and the state kept
across a restart of the controller (file store)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import trio
from click.testing import CliRunner

from client.admin_cli import cli
from protocol.codes import RequestCode, ResponseCode
from protocol.controller import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    ElectMasterRequestHeader,
)
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster
from tests.integration.controller_brokers import FakeBroker, ask, join
from tests.waits import wait_until

HEARTBEAT_TIMEOUT_MS = 1000


def mqadmin(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


async def sync_state(controller: str) -> dict[str, Any]:
    out = await trio.to_thread.run_sync(
        mqadmin, "getSyncStateSet", "-a", controller, "-b", "b", "--json")
    doc: dict[str, Any] = json.loads(out)["b"]
    return doc


async def test_failover_with_a_real_controller(cluster: Cluster, tmp_path: Path) -> None:
    store = tmp_path / "controller-state"
    ctrl = cluster.controller(store, brokerHeartbeatTimeout=HEARTBEAT_TIMEOUT_MS,
                              scanNotActiveBrokerInterval=200)
    b1, b2 = FakeBroker(1), FakeBroker(2)
    async with trio.open_nursery() as nursery, RemotingClient() as client:
        for b in (b1, b2):
            await b.serve(nursery)
            await join(client, ctrl.addr, b)
            nursery.start_soon(b.heartbeat_loop, client, [ctrl.addr])
        await wait_until(lambda: b1.beats and b2.beats, 10, "both heart-beating")
        # broker 1 asks first: the first election makes it master
        r = await ask(client, ctrl.addr, RequestCode.CONTROLLER_ELECT_MASTER,
                      ElectMasterRequestHeader(broker_name="b", cluster_name="c",
                                               broker_id=1).to_fields())
        assert r.code == ResponseCode.SUCCESS and int(r.ext_fields["masterBrokerId"]) == 1
        await wait_until(lambda: b2.notes, 10, "broker 2 told of master 1")
        assert b2.notes[-1][0].master_broker_id == 1 and b2.notes[-1][0].master_epoch == 1
        # the master takes 2 into its SyncStateSet
        r = await ask(client, ctrl.addr, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                      AlterSyncStateSetRequestHeader(broker_name="b", master_broker_id=1,
                                                     master_epoch=1).to_fields(),
                      {"syncStateSet": [1, 2], "syncStateSetEpoch": 1})
        assert r.code == ResponseCode.SUCCESS, r.remark
        before = await sync_state(ctrl.addr)
        assert (before["masterBrokerId"], before["masterEpoch"]) == (1, 1)
        assert [x["brokerId"] for x in before["inSyncReplicas"]] == [1, 2]

        # the master's heart-beats stop: 2 is elected and every replica told
        b1.beating = False
        stopped = time.monotonic()
        await wait_until(lambda: any(n.master_broker_id == 2 for n, _ in b2.notes), 15,
                         "broker 2 told it is master")
        took = time.monotonic() - stopped
        print(f"failover: new master announced {took:.2f}s after the master's last "
              f"heart-beat window began (brokerHeartbeatTimeout {HEARTBEAT_TIMEOUT_MS} ms)")
        assert took >= HEARTBEAT_TIMEOUT_MS / 1000 * 0.9, f"elected after {took:.2f}s"
        header, members = b2.notes[-1]
        assert (header.master_epoch, header.master_address) == (2, b2.addr)
        assert members.sync_state_set == {2}
        await wait_until(lambda: any(n.master_broker_id == 2 for n, _ in b1.notes), 10,
                         "the old master told too")
        after = await sync_state(ctrl.addr)
        assert (after["masterBrokerId"], after["masterEpoch"], after["syncStateSetEpoch"]) == (
            2, 2, 3)
        assert [x["alive"] for x in after["notInSyncReplicas"]] == [False]

        # 1 comes back and rejoins the set; an admin makes it master again
        b1.beating = True
        await wait_until(lambda: _alive(ctrl.addr, 1), 10, "broker 1 alive again")
        r = await ask(client, ctrl.addr, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                      AlterSyncStateSetRequestHeader(broker_name="b", master_broker_id=2,
                                                     master_epoch=2).to_fields(),
                      {"syncStateSet": [1, 2], "syncStateSetEpoch": 3})
        assert r.code == ResponseCode.SUCCESS, r.remark
        # a stale master (epoch 1) is fenced
        r = await ask(client, ctrl.addr, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                      AlterSyncStateSetRequestHeader(broker_name="b", master_broker_id=2,
                                                     master_epoch=1).to_fields(),
                      {"syncStateSet": [2], "syncStateSetEpoch": 4})
        assert r.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
        out = await trio.to_thread.run_sync(
            mqadmin, "electMaster", "-a", ctrl.addr, "-b", b1.addr, "-n", "b", "-c", "c")
        assert f"#brokerMasterAddr        {b1.addr}" in out and "#masterEpoch             3" in out
        # hostile or broken requests: a clear error, the controller serves on
        r = await ask(client, ctrl.addr, RequestCode.CONTROLLER_ELECT_MASTER,
                      {"brokerName": "b", "brokerId": "-1"})
        assert r.code == ResponseCode.SYSTEM_ERROR and "brokerId" in (r.remark or "")
        r = await ask(client, ctrl.addr, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                      body=["x"] * 5000)
        assert r.code == ResponseCode.SYSTEM_ERROR
        r = await ask(client, ctrl.addr, RequestCode.CONTROLLER_APPLY_BROKER_ID,
                      ApplyBrokerIdRequestHeader(cluster_name="c", broker_name="b",
                                                 applied_broker_id=1,
                                                 register_check_code="127.0.0.1:1;1").to_fields())
        assert r.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID  # id 1 is taken
        meta = json.loads(await trio.to_thread.run_sync(
            mqadmin, "getControllerMetaData", "-a", ctrl.addr, "--json"))
        assert meta["isLeader"] is True and meta["controllerLeaderAddress"] == ctrl.addr

        # a restart keeps the state (the file store)
        assert ctrl.stop() == 0
        ctrl.start()
        b1.beating = b2.beating = True
        kept = await sync_state(ctrl.addr)
        assert (kept["masterBrokerId"], kept["masterEpoch"], kept["syncStateSetEpoch"]) == (
            1, 3, 5)
        assert kept["masterAddress"] == b1.addr
        nursery.cancel_scope.cancel()


async def _alive(controller: str, broker_id: int) -> bool:
    doc = await sync_state(controller)
    return any(x["brokerId"] == broker_id and x["alive"]
               for x in (*doc["inSyncReplicas"], *doc["notInSyncReplicas"]))
