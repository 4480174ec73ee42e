"""Issue 18 (beyond RocketMQ): the name server's ACL (aclEnable, plain_acl.yml)
against real daemons; a broker signs its registrations with brokerAccessKey."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from acl.plain import SIGNATURE_REFUSED
from client import AclCredentials
from client.admin import MQAdmin
from protocol.body import unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import RegisterBrokerRequestHeader
from protocol.trio.client import RemotingClient
from protocol.trio.connection import RemotingConnection
from tests.integration.cluster import Cluster, free_port
from tests.integration.hostile import register_body
from tests.waits import routed, wait_until

TOPIC = "NsAclTopic"
ADMIN = AclCredentials("nsadmin1", "nsadmin-secret")
READER = AclCredentials("reader01", "readersecret")
UNKNOWN = AclCredentials("nobody99", "whatever1")
TIMEOUT = 10.0


def acl_yaml(reader_admin: bool = False) -> str:
    return (
        "globalWhiteRemoteAddresses:\n"
        "  - 10.254.254.254\n"
        "accounts:\n"
        f"  - accessKey: {ADMIN.access_key}\n"
        f"    secretKey: {ADMIN.secret_key}\n"
        "    admin: true\n"
        f"  - accessKey: {READER.access_key}\n"
        f"    secretKey: {READER.secret_key}\n"
        f"    admin: {'true' if reader_admin else 'false'}\n"
        "    defaultTopicPerm: PUB|SUB\n"
        "    defaultGroupPerm: SUB\n"
    )


_bump = [0.0]


def write(path: Path, text: str) -> None:
    path.write_text(text)
    _bump[0] = max(_bump[0] + 2, time.time())  # a distinct mtime each write
    os.utime(path, (_bump[0], _bump[0]))


def fake_register() -> RemotingCommand:
    port = free_port(2)
    fields = RegisterBrokerRequestHeader(
        broker_name="fake-broker", broker_addr=f"127.0.0.1:{port}", cluster_name="DefaultCluster",
        ha_server_addr=f"127.0.0.1:{port + 1}", broker_id=0).to_fields()
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, fields,
                                   register_body({TOPIC: {}}))


def writes() -> list[tuple[str, RemotingCommand]]:
    """Requests that need an admin account on the name server."""
    return [
        ("register", fake_register()),
        ("unregister", RemotingCommand.request(RequestCode.UNREGISTER_BROKER, {
            "brokerName": "broker-nsacl", "brokerAddr": "127.0.0.1:1",
            "clusterName": "DefaultCluster", "brokerId": 0})),
        ("delete topic", RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                                 {"topic": TOPIC})),
        ("wipe", RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                                         {"brokerName": "broker-nsacl"})),
        ("put kv", RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {
            "namespace": "ORDER_TOPIC_CONFIG", "key": TOPIC, "value": "x:1"})),
        ("delete kv", RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, {
            "namespace": "ORDER_TOPIC_CONFIG", "key": TOPIC})),
    ]


def route_request() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})


async def test_namesrv_acl(cluster: Cluster, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    write(acl, acl_yaml())
    ns = cluster.namesrv(aclEnable="true", aclPlainFile=acl, aclReloadInterval=300)
    cluster.broker("broker-nsacl", ns.addr, brokerAccessKey=ADMIN.access_key,
                   brokerSecretKey=ADMIN.secret_key)
    async with MQAdmin(ns.addr, credentials=READER) as admin:
        # the broker's signed registration took effect: the cluster is known
        await wait_until(lambda: _registered(admin), TIMEOUT, "the signed broker registered")
        await admin.create_topic(TOPIC, cluster="DefaultCluster")
        await wait_until(routed(admin, TOPIC), TIMEOUT, f"a route for {TOPIC}")
    n = ns.addr

    # a broker without brokerAccessKey cannot register (its routes never appear)
    cluster.broker("broker-unsigned", n)
    await wait_until(lambda: _logged(ns.log_text, "code=103"), TIMEOUT,
                     "the unsigned registration refused")
    async with MQAdmin(n, credentials=READER) as admin:
        assert "broker-unsigned" not in str(await admin.cluster_info())

    # unsigned: every write and the look-up refused; before any request was let in on
    # it, the connection is closed after the refusal (docs/security/decoding-limits.md)
    for what, cmd in [*writes(), ("route", route_request())]:
        async with RemotingClient() as rc:
            conn = await rc.get_connection(n)
            resp = await rc.invoke(n, cmd, TIMEOUT)
            assert resp.code == ResponseCode.NO_PERMISSION, (what, resp.code, resp.remark)
            assert "No accessKey" in (resp.remark or ""), (what, resp.remark)
            await wait_until(partial(_closed, conn), TIMEOUT, "the name server closing it")

    # an unknown access key cannot look up routes
    async with RemotingClient(credentials=UNKNOWN) as rc:
        resp = await rc.invoke(n, route_request(), TIMEOUT)
        assert resp.code == ResponseCode.NO_PERMISSION
        assert resp.remark == SIGNATURE_REFUSED  # as for a wrong secret: keys stay secret
        assert "nobody99" not in (resp.remark or "")

    # a known non-admin account looks routes up but changes nothing
    async with RemotingClient(credentials=READER) as rc:
        resp = await rc.invoke(n, route_request(), TIMEOUT)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        for what, cmd in writes():
            resp = await rc.invoke(n, cmd, TIMEOUT)
            assert resp.code == ResponseCode.NO_PERMISSION, (what, resp.code, resp.remark)
            assert "Need admin permission" in (resp.remark or ""), (what, resp.remark)
        # nothing was deleted or wiped: the route is intact and writable
        resp = await rc.invoke(n, route_request(), TIMEOUT)
        assert resp.code == ResponseCode.SUCCESS
        route = unpack_body(resp.body)
        assert [(q["brokerName"], q["perm"]) for q in route["queueDatas"]] == \
            [("broker-nsacl", 6)], route

    # a wrong secret for a known key is refused
    async with RemotingClient(credentials=AclCredentials(READER.access_key, "wrong-secret")) as rc:
        resp = await rc.invoke(n, route_request(), TIMEOUT)
        assert resp.code == ResponseCode.NO_PERMISSION
        assert resp.remark == SIGNATURE_REFUSED
    assert "request refused by ACL" in ns.log_text()
    assert "No acl config for accessKey=nobody99" in ns.log_text()  # the log tells them apart

    # hot reload: the reader becomes admin, its KV write goes through
    write(acl, acl_yaml(reader_admin=True))
    async with RemotingClient(credentials=READER) as rc:
        async def put_ok() -> bool:
            put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {
                "namespace": "NS_ACL_TEST", "key": "k", "value": "v"})
            return (await rc.invoke(n, put, TIMEOUT)).code == ResponseCode.SUCCESS
        await wait_until(put_ok, TIMEOUT, "the reloaded file made the reader admin")
        # a broken file keeps the accounts in force
        write(acl, "accounts: [ {accessKey: x\n")
        await wait_until(lambda: _logged(ns.log_text, "ACL file not reloaded"), TIMEOUT,
                         "the broken file's reload refused")
        resp = await rc.invoke(n, route_request(), TIMEOUT)
        assert resp.code == ResponseCode.SUCCESS, resp.remark


async def _registered(admin: MQAdmin) -> bool:
    try:
        info = await admin.cluster_info()
    except Exception:  # noqa: BLE001 - not yet
        return False
    return "broker-nsacl" in str(info)


async def _closed(conn: RemotingConnection) -> bool:
    return conn.closed


async def _logged(text: Callable[[], str], needle: str) -> bool:
    return needle in text()
