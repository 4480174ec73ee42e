"""Issue 51: a real ``mqcontroller`` with its port open to anyone. With aclEnable an
unsigned or under-privileged request is refused NO_PERMISSION (controller/acl.py), a
broker group whose brokers sign with brokerAccessKey elects and fails over; with
tlsMode=enforcing a TLS client is served and a plain one refused; an
UPDATE_CONTROLLER_CONFIG answered SUCCESS survives a kill -9 (the -c file, or the
overlay under controllerStorePath without one)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from client import AclCredentials
from client.admin import MQAdmin, MQAdminError
from client.admin_controller import ControllerAdmin
from client.config import ClientConfig
from controller.runtime_config import RUNTIME_FILE
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import ElectMasterRequestHeader
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster, Daemon, free_port
from tests.integration.failover import BROKER_NAME, in_sync, replica_props, replicas_info
from tests.tls_certs import Certs, tls_certs_fixture  # noqa: F401 (the tls_certs fixture)
from tests.waits import wait_until

BROKER = AclCredentials("broker01", "brokersecret")  # the brokers' own (admin) account
READER = AclCredentials("reader01", "readersecret")
TIMEOUT = 5.0


def acl_file(root: Path) -> Path:
    path = root / "controller_acl.yml"
    path.write_text(
        "accounts:\n"
        f"  - accessKey: {BROKER.access_key}\n"
        f"    secretKey: {BROKER.secret_key}\n"
        "    admin: true\n"
        f"  - accessKey: {READER.access_key}\n"
        f"    secretKey: {READER.secret_key}\n"
        "    defaultTopicPerm: PUB|SUB\n")
    return path


def elect() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(
        broker_name="b", cluster_name="c", broker_id=1, designate_elect=True).to_fields())


def update(text: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_CONTROLLER_CONFIG, body=text.encode())


async def config_text(addr: str, credentials: AclCredentials | None = None) -> str:
    async with RemotingClient(credentials=credentials) as client:
        r = await client.invoke(addr, RemotingCommand.request(
            RequestCode.GET_CONTROLLER_CONFIG), TIMEOUT)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return (r.body or b"").decode()


async def test_acl_refuses_unsigned_and_non_admin_requests(cluster: Cluster) -> None:
    ctrl = cluster.controller(aclEnable="true", aclPlainFile=acl_file(cluster.root))
    # unsigned: refused on its header, its connection closed (the pre-auth gate)
    for cmd in (elect(), update("enableElectUncleanMaster=true\n")):
        async with RemotingClient() as anonymous:
            r = await anonymous.invoke(ctrl.addr, cmd, TIMEOUT)
        assert r.code == ResponseCode.NO_PERMISSION and "No accessKey" in (r.remark or "")
    async with RemotingClient(credentials=READER) as reader:
        # a known account reads the controller's view, and elects nothing
        r = await reader.invoke(ctrl.addr, RemotingCommand.request(
            RequestCode.CONTROLLER_GET_METADATA_INFO), TIMEOUT)
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["isLeader"] in (True, "true")
        for cmd in (elect(), update("enableElectUncleanMaster=true\n"),
                    RemotingCommand.request(RequestCode.CLEAN_BROKER_DATA,
                                            {"brokerName": "b"})):
            r = await reader.invoke(ctrl.addr, cmd, TIMEOUT)
            assert r.code == ResponseCode.NO_PERMISSION, cmd.code
            assert "Need admin permission" in (r.remark or ""), r.remark
    async with RemotingClient(credentials=AclCredentials(READER.access_key, "wrongsecret")) as bad:
        r = await bad.invoke(ctrl.addr, elect(), TIMEOUT)
        assert r.code == ResponseCode.NO_PERMISSION
    # the admin's election passes the ACL and reaches the state machine
    async with RemotingClient(credentials=BROKER) as admin:
        r = await admin.invoke(ctrl.addr, elect(), TIMEOUT)
        assert r.code not in (ResponseCode.NO_PERMISSION, ResponseCode.SUCCESS), r
    assert "enableElectUncleanMaster=false" in await config_text(ctrl.addr, BROKER)
    log = ctrl.log_text()
    assert "request refused by ACL" in log


async def test_broker_group_with_acl_elects_and_fails_over(cluster: Cluster) -> None:
    heartbeat_ms = 1500
    ns = cluster.namesrv()
    ctrl = cluster.controller(aclEnable="true", aclPlainFile=acl_file(cluster.root),
                              brokerHeartbeatTimeout=heartbeat_ms,
                              scanNotActiveBrokerInterval=200)
    props = {**replica_props(ctrl.addr, heartbeat_ms), "minInSyncReplicas": 1,
             "brokerAccessKey": BROKER.access_key, "brokerSecretKey": BROKER.secret_key}
    replicas = [cluster.broker(f"replica-{i}", ns.addr, True, **props) for i in range(2)]
    everyone = {d.addr for d in replicas}
    async with ControllerAdmin(ClientConfig(credentials=READER)) as ctl:
        async def all_in_sync() -> bool:
            info = await replicas_info(ctl, ctrl.addr)
            return info is not None and info.master_address in everyone \
                and in_sync(info) == everyone

        await wait_until(all_in_sync, 60, "a master, and both in its SyncStateSet")
        info = await replicas_info(ctl, ctrl.addr)
        assert info is not None and info.master_address is not None
        old = next(d for d in replicas if d.addr == info.master_address)
        survivor = next(d for d in replicas if d is not old)
        old.kill()

        async def failed_over() -> bool:
            i = await replicas_info(ctl, ctrl.addr)
            return i is not None and i.master_address == survivor.addr \
                and i.master_epoch > info.master_epoch

        await wait_until(failed_over, 60, "the survivor elected")
    # it took the role the controller gave: brokerId 0 at the name server
    async with MQAdmin(ns.addr) as admin:
        async def registered_as_master() -> bool:
            table = (await admin.cluster_info())["brokerAddrTable"]
            return BROKER_NAME in table and table[BROKER_NAME].broker_addrs.get(0) == \
                survivor.addr

        await wait_until(registered_as_master, 30, "the survivor at brokerId 0")
    # an unsigned admin tool is refused
    async with ControllerAdmin() as anonymous:
        with pytest.raises(MQAdminError, match="NO_PERMISSION"):
            await anonymous.sync_state_data(ctrl.addr, [BROKER_NAME])
    refusals = [line for line in ctrl.log_text().splitlines()
                if "request refused by ACL" in line]
    assert refusals, "the anonymous tool's request is logged"
    assert not [line for line in refusals if BROKER.access_key in line], refusals


async def test_tls_enforcing_serves_tls_and_refuses_plain(cluster: Cluster,
                                                          tls_certs: Certs) -> None:
    ctrl = cluster.controller(**{"tlsMode": "enforcing",
                                 "tls.server.certPath": tls_certs.server_cert,
                                 "tls.server.keyPath": tls_certs.server_key})
    secure = ClientConfig(use_tls=True, tls_ca_path=tls_certs.ca)
    async with ControllerAdmin(secure) as admin:
        meta = await admin.metadata(ctrl.addr)
        assert meta["controllerLeaderAddress"] == ctrl.addr
        # a broker with tls.enable reaches it: registered, elected master
        ns = cluster.namesrv()
        broker = cluster.broker("replica-tls", ns.addr, True, **{
            **replica_props(ctrl.addr, 3000), "minInSyncReplicas": 1, "tls.enable": "true",
            "tls.client.trustCertPath": tls_certs.ca})

        async def elected() -> bool:
            info = await replicas_info(admin, ctrl.addr)
            return info is not None and info.master_address == broker.addr

        await wait_until(elected, 30, "the TLS broker elected master")
    async with ControllerAdmin() as plain:
        with pytest.raises(MQAdminError, match="requires TLS"):
            await plain.metadata(ctrl.addr)
    async with ControllerAdmin(ClientConfig(use_tls=True,
                                            tls_ca_path=tls_certs.wrong_ca)) as wrong:
        with pytest.raises(MQAdminError, match="certificate verification failed"):
            await wrong.metadata(ctrl.addr)


async def test_config_change_survives_kill_9_with_a_config_file(cluster: Cluster) -> None:
    ctrl = cluster.controller(aclEnable="true", aclPlainFile=acl_file(cluster.root),
                              brokerHeartbeatTimeout=1000)
    async with RemotingClient(credentials=BROKER) as admin:
        r = await admin.invoke(ctrl.addr, update("brokerHeartbeatTimeout=4321\n"
                                                 "enableElectUncleanMaster=true\n"), TIMEOUT)
        assert r.code == ResponseCode.SUCCESS and r.remark is None, r.remark
        # a bad value or an unknown key: a clear error, nothing changed
        for text, words in (("brokerHeartbeatTimeout=-5\n", "must be positive"),
                            ("brokerHeartbeatTimeout=1\nlistenPort=1\n", "listenPort")):
            r = await admin.invoke(ctrl.addr, update(text), TIMEOUT)
            assert r.code == ResponseCode.SYSTEM_ERROR and words in (r.remark or ""), r.remark
    ctrl.kill()
    conf = Path(ctrl.args[ctrl.args.index("-c") + 1]).read_text()
    assert "brokerHeartbeatTimeout=4321\n" in conf and "brokerHeartbeatTimeout=1000" not in conf
    ctrl.start()
    text = await config_text(ctrl.addr, BROKER)
    assert "brokerHeartbeatTimeout=4321" in text and "enableElectUncleanMaster=true" in text


async def test_config_change_survives_kill_9_in_the_overlay(cluster: Cluster) -> None:
    port = free_port(1)
    store = cluster.root / "controller-store"
    ctrl = Daemon(f"controller-{port}",
                  [sys.executable, "-m", "controller.cli", "--listen-port", str(port),
                   "--store-path", str(store), "--log-dir", str(cluster.root / "logs-ctl")],
                  port, cluster.root / f"controller-{port}.log", ready_marker="controller leads")
    ctrl.start()
    cluster.daemons.append(ctrl)
    async with RemotingClient() as client:
        r = await client.invoke(ctrl.addr, update("notifyBrokerRoleChanged=false\n"), TIMEOUT)
        assert r.code == ResponseCode.SUCCESS and r.remark is None, r.remark
    ctrl.kill()
    assert (store / RUNTIME_FILE).read_text() == "notifyBrokerRoleChanged=false\n"
    ctrl.start()
    assert "notifyBrokerRoleChanged=false" in await config_text(ctrl.addr)
