"""Signatures bound to their request code and time, against live daemons with
aclEnable=true: a captured signed read replayed as a delete (GET_TOPIC_STATS_INFO as
DELETE_TOPIC_IN_BROKER on the broker, GET_ROUTEINFO_BY_TOPIC as DELETE_TOPIC_IN_NAMESRV
on the name server) is refused and the topic survives; mqadmin's deleteTopic, signed
and bound, deletes it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import trio

from client import AclCredentials, Message, Producer, SendStatus
from client.admin import MQAdmin, MQAdminError
from protocol.acl import sign_fields
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.client import RemotingClient
from tests.integration.cluster import BIN, Cluster
from tests.waits import routed, wait_until

TOPIC = "BindTopic"
ADMIN = AclCredentials("rocketmq2", "12345678")
TIMEOUT = 10.0
ACL = f"""\
globalWhiteRemoteAddresses:
  - 10.254.254.254
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: '{ADMIN.secret_key}'
    admin: true
"""


async def capture(rc: RemotingClient, addr: str, code: int) -> dict[str, str]:
    """The admin's signed ``code`` request on ``TOPIC``, sent and served; its ext fields
    as someone watching the wire (or a log of requests) would keep them."""
    cmd = RemotingCommand.request(code, {"topic": TOPIC})
    rc.sign(cmd)
    conn = await rc.get_connection(addr)
    resp = await conn.invoke(cmd, TIMEOUT)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return dict(cmd.ext_fields or {})


async def replay(addr: str, code: int, fields: dict[str, str]) -> RemotingCommand:
    """``fields`` sent as a ``code`` request by a client without credentials."""
    async with RemotingClient() as rc:
        return await rc.invoke(addr, RemotingCommand.request(code, dict(fields)), TIMEOUT)


def refused(resp: RemotingCommand, remark: str) -> None:
    assert resp.code == ResponseCode.NO_PERMISSION, (resp.code, resp.remark)
    assert remark in (resp.remark or ""), resp.remark


async def topic_on_broker(addr: str) -> bool:
    """The broker at ``addr`` has ``TOPIC`` (its stats are served)."""
    async with RemotingClient(credentials=ADMIN) as rc:
        resp = await rc.invoke(addr, RemotingCommand.request(
            RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC}), TIMEOUT)
    assert resp.code in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST), resp.remark
    return resp.code == ResponseCode.SUCCESS


def mqadmin(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")}
    return subprocess.run([str(BIN / "mqadmin"), "--access-key", ADMIN.access_key,
                           "--secret-key", ADMIN.secret_key, *args], capture_output=True,
                          text=True, timeout=60, env=env)


async def test_captured_reads_replayed_as_deletes_are_refused(cluster: Cluster,
                                                              tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = cluster.namesrv(aclEnable="true", aclPlainFile=acl)
    # the broker's registrations (REGISTER_BROKER, an admin request) are signed and bound
    broker = cluster.broker("broker-bind", ns.addr, aclEnable="true", aclPlainFile=acl,
                            brokerAccessKey=ADMIN.access_key,
                            brokerSecretKey=ADMIN.secret_key)
    n, b = ns.addr, broker.addr
    async with MQAdmin(n, credentials=ADMIN) as admin:
        await wait_until(lambda: _registered(admin), TIMEOUT, "the signed broker registered")
        await admin.create_topic(TOPIC, broker_addr=b, read_queue_nums=4, write_queue_nums=4)
        await wait_until(routed(admin, TOPIC), TIMEOUT, f"a route for {TOPIC}")

        async with RemotingClient(credentials=ADMIN) as rc:
            stats = await capture(rc, b, RequestCode.GET_TOPIC_STATS_INFO)
            route = await capture(rc, n, RequestCode.GET_ROUTEINFO_BY_TOPIC)
        # the broker: the read's signature does not delete, nor serves the read twice
        refused(await replay(b, RequestCode.DELETE_TOPIC_IN_BROKER, stats),
                "Signature bound to request code=202 (GET_TOPIC_STATS_INFO) refused for "
                "request code=215 (DELETE_TOPIC_IN_BROKER)")
        refused(await replay(b, RequestCode.GET_TOPIC_STATS_INFO, stats),
                "Replayed signature refused")
        # the name server: the same with a route look-up
        refused(await replay(n, RequestCode.DELETE_TOPIC_IN_NAMESRV, route),
                "Signature bound to request code=105 (GET_ROUTEINFO_BY_TOPIC) refused for "
                "request code=216 (DELETE_TOPIC_IN_NAMESRV)")
        refused(await replay(n, RequestCode.GET_ROUTEINFO_BY_TOPIC, route), "Replayed")
        # RocketMQ's plain signature (an official client's): the read is served, the same
        # fields as a delete are not
        official = sign_fields({"topic": TOPIC}, None, ADMIN.access_key, ADMIN.secret_key)
        for addr, read, delete in ((b, RequestCode.GET_TOPIC_STATS_INFO,
                                    RequestCode.DELETE_TOPIC_IN_BROKER),
                                   (n, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                    RequestCode.DELETE_TOPIC_IN_NAMESRV)):
            assert (await replay(addr, read, official)).code == ResponseCode.SUCCESS
            refused(await replay(addr, delete, official), "Unbound signature refused")

        # the topic survived on the broker and on the name server
        assert await topic_on_broker(b)
        assert (await admin.topic_route(TOPIC)).broker_datas
        assert len(await admin.topic_status(TOPIC)) == 4

        # mqadmin's own deleteTopic is bound to its codes: it deletes
        out = await trio.to_thread.run_sync(
            lambda: mqadmin("deleteTopic", "-n", n, "-c", "DefaultCluster", "-t", TOPIC))
        assert out.returncode == 0, out.stderr
        assert not await topic_on_broker(b)
        try:
            await admin.topic_route(TOPIC)
            raise AssertionError(f"{TOPIC} still routed after deleteTopic")
        except MQAdminError:
            pass
    assert "request refused by ACL" in broker.log_text()


async def _registered(admin: MQAdmin) -> bool:
    try:
        return "broker-bind" in str(await admin.cluster_info())
    except MQAdminError:
        return False


async def test_strict_signature_refuses_plain_signed_reads(cluster: Cluster,
                                                           tmp_path: Path) -> None:
    """aclStrictSignature=true: this project's SDK still sends and reads; a request signed
    the RocketMQ way (no binding) is refused, even a read."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = cluster.namesrv()
    broker = cluster.broker("broker-strict", ns.addr, aclEnable="true", aclPlainFile=acl,
                            aclStrictSignature="true")
    async with MQAdmin(ns.addr, credentials=ADMIN) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), TIMEOUT, f"a route for {TOPIC}")
    async with Producer("bind_producer", ns.addr, credentials=ADMIN) as p:
        sent = await p.send(Message(TOPIC, b"bound"))
    assert sent.send_status == SendStatus.SEND_OK
    official = sign_fields({"topic": TOPIC}, None, ADMIN.access_key, ADMIN.secret_key)
    refused(await replay(broker.addr, RequestCode.GET_TOPIC_STATS_INFO, official),
            "aclStrictSignature=true: every request needs it")
    assert await topic_on_broker(broker.addr)  # the same read, bound: served
