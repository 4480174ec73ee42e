"""Issue 18: the broker's plain ACL (aclEnable, plain_acl.yml) against real daemons,
with the SDK signing requests (access_key/secret_key)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from acl.plain import SIGNATURE_REFUSED
from client import AclCredentials, Message, Producer, PullConsumer
from client.admin import MQAdmin, MQAdminError
from client.errors import MQBrokerError
from protocol.codes import ResponseCode
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPIC = "AclTopic"
ADMIN = AclCredentials("rocketmq2", "12345678")
PUB = AclCredentials("pubonly1", "pubsecret1")
SUB = AclCredentials("subonly1", "subsecret1")
DENIED = AclCredentials("denied01", "deniedsecret")


def acl_yaml(white: list[str], sub_topic_perm: str = "SUB") -> str:
    lines = ["globalWhiteRemoteAddresses:"]
    lines += [f"  - {w}" for w in white] or ["  - 10.254.254.254"]
    lines += [
        "accounts:",
        "  - accessKey: rocketmq2",
        "    secretKey: '12345678'",
        "    admin: true",
        "  - accessKey: pubonly1",
        "    secretKey: pubsecret1",
        "    defaultTopicPerm: DENY",
        "    defaultGroupPerm: SUB",
        "    topicPerms:",
        f"      - {TOPIC}=PUB",
        "  - accessKey: subonly1",
        "    secretKey: subsecret1",
        "    defaultTopicPerm: DENY",
        "    defaultGroupPerm: SUB",
        "    topicPerms:",
        f"      - {TOPIC}={sub_topic_perm}",
        "  - accessKey: denied01",
        "    secretKey: deniedsecret",
        "    defaultTopicPerm: PUB",
        "    defaultGroupPerm: SUB",
        "    topicPerms:",
        f"      - {TOPIC}=DENY",
    ]
    return "\n".join(lines) + "\n"


_bump = [0.0]


def write(path: Path, text: str) -> None:
    path.write_text(text)
    # a distinct mtime each write, whatever the file system's resolution
    _bump[0] = max(_bump[0] + 2, time.time())
    os.utime(path, (_bump[0], _bump[0]))


async def send(n: str, cred: AclCredentials | None, body: bytes = b"x") -> None:
    async with Producer("acl_producer", n, credentials=cred,
                        retry_times_when_send_failed=0) as p:
        await p.send(Message(TOPIC, body))


async def refused_send(n: str, cred: AclCredentials | None) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 - the remark is checked
        await send(n, cred)
    return str(info.value)


async def test_plain_acl(cluster: Cluster, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    write(acl, acl_yaml([]))
    ns = cluster.namesrv()
    broker = cluster.broker("broker-acl", ns.addr, aclEnable="true", aclPlainFile=acl,
                            aclReloadInterval=300)
    n = ns.addr

    # an admin creates the topic; a non-admin may not
    async with MQAdmin(n, credentials=PUB) as admin:
        with pytest.raises(Exception) as info:  # noqa: PT011
            await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1,
                                     write_queue_nums=1)
        assert "admin" in str(info.value), info.value
    async with MQAdmin(n, access_key=ADMIN.access_key, secret_key=ADMIN.secret_key) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "routed")
        config_before = await admin.get_broker_config(broker.addr)
    # nor delete the topic or change the broker's config
    async with MQAdmin(n, credentials=PUB) as admin:
        with pytest.raises(MQAdminError, match="admin"):
            await admin.delete_topic(TOPIC, "DefaultCluster")
        with pytest.raises(MQAdminError, match="admin"):
            await admin.update_broker_config(broker.addr, {"brokerPermission": "4"})
    async with MQAdmin(n, access_key=ADMIN.access_key, secret_key=ADMIN.secret_key) as admin:
        assert await admin.get_broker_config(broker.addr) == config_before
        assert len(await admin.topic_status(TOPIC)) == 1  # the broker still has its queue

    # PUB-only sends, SUB-only cannot; DENY beats a default PUB
    await send(n, PUB, b"one")
    remark = await refused_send(n, SUB)
    assert TOPIC in remark and "PUB" in remark, remark
    remark = await refused_send(n, DENIED)
    assert TOPIC in remark and "DENY" in remark, remark
    # unknown key, wrong secret, unsigned
    # one remark for both (which access keys exist is not told); the log tells them apart
    assert SIGNATURE_REFUSED in await refused_send(n, AclCredentials("nobody99", "whatever1"))
    assert SIGNATURE_REFUSED in await refused_send(n, AclCredentials(PUB.access_key,
                                                                     "wrongsecret"))
    assert "No acl config for accessKey=nobody99" in broker.log_text()
    assert "accessKey" in await refused_send(n, None)

    # SUB pulls; PUB cannot (NO_PERMISSION naming the topic and SUB); the connection lives on
    async with PullConsumer("acl_group", n, credentials=PUB) as pc:
        mqs = await pc.fetch_subscribe_message_queues(TOPIC)
        with pytest.raises(MQBrokerError) as err:
            await pc.pull(mqs[0], "*", 0, 32)
        assert err.value.response_code == ResponseCode.NO_PERMISSION
        assert TOPIC in err.value.remark and "SUB" in err.value.remark, err.value.remark
        with pytest.raises(MQBrokerError):  # the same connection answers again
            await pc.pull(mqs[0], "*", 0, 32)
    async with PullConsumer("acl_group", n, credentials=SUB) as pc:
        mqs = await pc.fetch_subscribe_message_queues(TOPIC)
        result = await pc.pull(mqs[0], "*", 0, 32)
        assert [m.body for m in result.msg_found_list] == [b"one"]

    # 127.0.0.1 globally white: unsigned clients pass
    write(acl, acl_yaml(["127.0.0.1"]))

    async def unsigned_sends() -> bool:
        try:
            await send(n, None)
        except Exception:  # noqa: BLE001
            return False
        return True
    await wait_until(unsigned_sends, 15, "the reloaded white list letting unsigned sends in")

    # hot reload: SUB-only gets PUB
    write(acl, acl_yaml([], sub_topic_perm="PUB|SUB"))

    async def unsigned_refused() -> bool:
        return not await unsigned_sends()
    await wait_until(unsigned_refused, 15, "the reloaded file without the white entry")
    await send(n, SUB)  # the same reload gave subonly1 PUB

    # a broken file keeps the last good accounts and the log says why
    write(acl, "accounts: [ {accessKey: x\n")

    async def logged() -> bool:
        return "ACL file not reloaded" in broker.log_text()
    await wait_until(logged, 15, "the broken file logged")
    await send(n, SUB)
    await send(n, PUB)
    assert "No permission" in await refused_send(n, DENIED)
    assert "request refused by ACL" in broker.log_text()


async def test_missing_acl_file_fails_start(cluster: Cluster, tmp_path: Path) -> None:
    ns = cluster.namesrv()
    d = cluster.broker("broker-noacl", ns.addr, start=False, aclEnable="true",
                       aclPlainFile=tmp_path / "missing.yml")
    with pytest.raises(Exception):  # noqa: B017, PT011
        d.start(timeout=15)
    assert "cannot be read" in d.log_text()
