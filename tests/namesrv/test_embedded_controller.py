"""The controller inside the name server (enableControllerInNamesrv): its keys in the
name server's file, its requests answered on the name server's port."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from client import AclCredentials
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError
from protocol.controller import (
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    GetReplicaInfoRequestHeader,
)
from protocol.trio.client import RemotingClient


def test_controller_keys_go_to_the_controller(tmp_path: Path) -> None:
    cfg = NamesrvConfig()
    cfg.update({"enableControllerInNamesrv": "true", "controllerStorePath": str(tmp_path),
                "brokerHeartbeatTimeout": "3000", "scanNotActiveBrokerInterval": "7000",
                "listenPort": "0"})
    assert cfg.enable_controller_in_namesrv
    assert cfg.controller_config.controller_store_path == str(tmp_path)
    assert cfg.controller_config.broker_heartbeat_timeout == 3000
    assert cfg.scan_not_active_broker_interval == 7000  # both have it: the name server's
    shown = cfg.render()
    assert "brokerHeartbeatTimeout=3000" in shown and "enableControllerInNamesrv=true" in shown
    with pytest.raises(ConfigError, match="unknown config key"):
        cfg.update({"brokerHeartbeatTimeoutt": "1"})
    plain = NamesrvConfig()
    assert "brokerHeartbeatTimeout" not in plain.render()


def test_etcd_keys_reach_the_etcd_backend() -> None:
    cfg = NamesrvConfig()
    cfg.update({"enableControllerInNamesrv": "true", "controllerType": "etcd",
                "etcdEndpoints": "http://127.0.0.1:2379", "etcdLeaseTtlSeconds": "0"})
    assert cfg.controller_config.etcd_properties == {"etcdEndpoints": "http://127.0.0.1:2379",
                                                     "etcdLeaseTtlSeconds": "0"}
    with pytest.raises(ConfigError, match="etcdLeaseTtlSeconds"):  # checked by EtcdConfig
        NamesrvController(cfg)
    cfg.update({"etcdLeaseTtlSeconds": "3"})
    namesrv = NamesrvController(cfg)
    assert namesrv.controller is not None
    assert type(namesrv.controller.leadership).__name__ == "EtcdLeadership"


async def test_controller_answers_on_the_name_servers_port(tmp_path: Path) -> None:
    cfg = NamesrvConfig()
    cfg.update({"enableControllerInNamesrv": "true", "controllerStorePath": str(tmp_path),
                "listenPort": "0"})
    namesrv = NamesrvController(cfg)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(namesrv.run)
        addr = f"127.0.0.1:{port}"
        async with RemotingClient() as client:
            with trio.fail_after(10):
                meta = await client.invoke(addr, RemotingCommand.request(
                    RequestCode.CONTROLLER_GET_METADATA_INFO), 5)
                while meta.ext_fields.get("isLeader") is not True:
                    await trio.sleep(0.01)
                    meta = await client.invoke(addr, RemotingCommand.request(
                        RequestCode.CONTROLLER_GET_METADATA_INFO), 5)
            assert meta.ext_fields["controllerLeaderAddress"] == addr
            apply = ApplyBrokerIdRequestHeader(cluster_name="c", broker_name="b",
                                               applied_broker_id=1,
                                               register_check_code="127.0.0.1:10911;1")
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.CONTROLLER_APPLY_BROKER_ID, apply.to_fields()), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.CONTROLLER_GET_REPLICA_INFO,
                GetReplicaInfoRequestHeader(broker_name="b").to_fields()), 5)
            assert r.code == ResponseCode.SUCCESS and "masterBrokerId" not in r.ext_fields
            # the name server's own requests still answer
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.GET_BROKER_CLUSTER_INFO), 5)
            assert r.code == ResponseCode.SUCCESS
        assert (tmp_path / "controller.state").exists()  # saved before it answered
        namesrv.request_shutdown()


async def test_the_name_servers_acl_covers_the_controller_codes(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n"
                   "  - {accessKey: broker01, secretKey: brokersecret, admin: true}\n"
                   "  - {accessKey: reader01, secretKey: readersecret}\n")
    cfg = NamesrvConfig()
    cfg.update({"enableControllerInNamesrv": "true", "controllerStorePath": str(tmp_path),
                "listenPort": "0", "aclEnable": "true", "aclPlainFile": str(acl)})
    namesrv = NamesrvController(cfg)
    beat = BrokerHeartbeatRequestHeader(cluster_name="c", broker_addr="127.0.0.1:10911",
                                        broker_name="b", broker_id=1).to_fields()
    elect = ElectMasterRequestHeader(broker_name="b", cluster_name="c", broker_id=1,
                                     designate_elect=True).to_fields()
    async with trio.open_nursery() as nursery:
        addr = f"127.0.0.1:{await nursery.start(namesrv.run)}"
        async with RemotingClient() as anonymous:
            r = await anonymous.invoke(addr, RemotingCommand.request(
                RequestCode.CONTROLLER_ELECT_MASTER, elect), 5)
            assert r.code == ResponseCode.NO_PERMISSION and "No accessKey" in (r.remark or "")
        async with RemotingClient(credentials=AclCredentials("reader01", "readersecret")) as c:
            r = await c.invoke(addr, RemotingCommand.request(
                RequestCode.CONTROLLER_GET_METADATA_INFO), 5)
            assert r.code == ResponseCode.SUCCESS
            for code, fields in ((RequestCode.BROKER_HEARTBEAT, beat),
                                 (RequestCode.CONTROLLER_ELECT_MASTER, elect),
                                 (RequestCode.CLEAN_BROKER_DATA, {"brokerName": "b"})):
                r = await c.invoke(addr, RemotingCommand.request(code, fields), 5)
                assert r.code == ResponseCode.NO_PERMISSION, code
                assert "on the controller" in (r.remark or ""), r.remark
        async with RemotingClient(credentials=AclCredentials("broker01", "brokersecret")) as b:
            r = await b.invoke(addr, RemotingCommand.request(RequestCode.BROKER_HEARTBEAT,
                                                             beat), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
        assert namesrv.controller is not None
        assert namesrv.controller.heartbeats.get("b", 1) is not None  # the broker's beat went in
        namesrv.request_shutdown()
