"""Issue 48 against real daemons (aclEnable=true): requests whose resource is not in
their header. An account reading and writing only its own topic and group cannot
read another's message by offset, copy it into its own retry topic, or lock the
other group's ordered queues; the owner can."""

from __future__ import annotations

from pathlib import Path

import pytest

from client import AclCredentials, Message, Producer
from client.admin import MQAdmin, MQAdminError
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.record import decode_msg_id
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

ADMIN = AclCredentials("rocketmq2", "12345678")
VICTIM = AclCredentials("victim01", "victimsecret")
ATTACKER = AclCredentials("attack01", "attacksecret")
V_TOPIC, V_GROUP = "VictimTopic", "VictimGroup"
A_TOPIC, A_GROUP = "AttackTopic", "AttackGroup"
TIMEOUT = 10.0
ACL = f"""globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: '{ADMIN.secret_key}'
    admin: true
  - accessKey: {VICTIM.access_key}
    secretKey: {VICTIM.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{V_TOPIC}=PUB|SUB]
    groupPerms: [{V_GROUP}=SUB]
  - accessKey: {ATTACKER.access_key}
    secretKey: {ATTACKER.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{A_TOPIC}=PUB|SUB]
    groupPerms: [{A_GROUP}=SUB]
"""


async def test_resources_beyond_the_header(cluster: Cluster, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = cluster.namesrv()
    broker = cluster.broker("broker-aclres", ns.addr, aclEnable="true", aclPlainFile=acl)
    n = ns.addr
    async with MQAdmin(n, credentials=ADMIN) as admin:
        for topic in (V_TOPIC, A_TOPIC):
            await admin.create_topic(topic, broker_addr=broker.addr, read_queue_nums=1,
                                     write_queue_nums=1)
            await wait_until(routed(admin, topic), 10, "routed")
    async with Producer("victim_producer", n, credentials=VICTIM,
                        retry_times_when_send_failed=0) as p:
        sent = await p.send(Message(V_TOPIC, b"victim's secret"))
    assert sent.offset_msg_id is not None
    _, offset = decode_msg_id(sent.offset_msg_id)

    # row 3: a message by its offset id
    async with MQAdmin(n, credentials=ATTACKER) as admin:
        with pytest.raises(MQAdminError) as info:
            await admin.view_message(sent.offset_msg_id)
        assert "No permission" in str(info.value) and V_TOPIC not in str(info.value)
    async with MQAdmin(n, credentials=VICTIM) as admin:
        assert (await admin.view_message(sent.offset_msg_id)).body == b"victim's secret"

    async with RemotingClient(credentials=ATTACKER) as rc:
        # row 4: the victim's message given back through the attacker's own group
        resp = await rc.invoke(broker.addr, RemotingCommand.request(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {"offset": offset, "group": A_GROUP, "delayLevel": 0}), TIMEOUT)
        assert resp.code == ResponseCode.NO_PERMISSION, resp.remark
        # row 5: the victim group's ordered queue, locked and freed
        lock = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ)
        lock.body = lock.encode_body({
            "consumerGroup": V_GROUP, "clientId": "attacker-cid",
            "mqSet": [{"topic": V_TOPIC, "brokerName": "broker-aclres", "queueId": 0}]})
        resp = await rc.invoke(broker.addr, lock, TIMEOUT)
        assert resp.code == ResponseCode.NO_PERMISSION, resp.remark
        assert f"group={V_GROUP}" in (resp.remark or "")
    async with RemotingClient(credentials=VICTIM) as rc:
        lock = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ)
        lock.body = lock.encode_body({
            "consumerGroup": V_GROUP, "clientId": "victim-cid",
            "mqSet": [{"topic": V_TOPIC, "brokerName": "broker-aclres", "queueId": 0}]})
        resp = await rc.invoke(broker.addr, lock, TIMEOUT)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert "request refused by ACL" in broker.log_text()
