"""Secrets never leave a live broker: GET_BROKER_CONFIG over the wire masks
brokerSecretKey and, with ACL on, answers only an admin account (NO_PERMISSION
to any other, even a signed one); UPDATE_BROKER_CONFIG refuses a secret key,
changing nothing; the broker's log never holds the secret."""

from __future__ import annotations

from pathlib import Path

from client import AclCredentials
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config import SECRET_MASK, parse_properties
from protocol.trio import RemotingClient
from tests.integration.cluster import Cluster

ADMIN = AclCredentials("rocketmq2", "adminSecret42x")
DENIED = AclCredentials("denyall1", "denyallsecret")
ACL = ("globalWhiteRemoteAddresses:\n  - 10.254.254.254\n"
       "accounts:\n"
       f"  - {{accessKey: {ADMIN.access_key}, secretKey: {ADMIN.secret_key}, admin: true}}\n"
       f"  - {{accessKey: {DENIED.access_key}, secretKey: {DENIED.secret_key},"
       " defaultTopicPerm: DENY, defaultGroupPerm: DENY}\n")


async def get_config(addr: str, cred: AclCredentials | None) -> RemotingCommand:
    async with RemotingClient(credentials=cred) as rc:
        return await rc.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG), 5)


async def test_broker_config_secret_stays_in_the_broker(cluster: Cluster, tmp_path: Path
                                                        ) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = cluster.namesrv()
    # the broker's own account is the admin one: what leaked before (issue row 2)
    broker = cluster.broker("broker-secrets", ns.addr, aclEnable="true", aclPlainFile=acl,
                            brokerAccessKey=ADMIN.access_key, brokerSecretKey=ADMIN.secret_key)

    # a signed account without admin: refused, nothing of the config answered
    for cred in (DENIED, None):
        resp = await get_config(broker.addr, cred)
        assert resp.code == ResponseCode.NO_PERMISSION, (cred, resp.remark)
        assert not resp.body and ADMIN.secret_key not in (resp.remark or "")
    assert "Need admin permission for request code=26" in (
        (await get_config(broker.addr, DENIED)).remark or "")

    # an admin reads it, the secret masked, its key visible
    resp = await get_config(broker.addr, ADMIN)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    body = (resp.body or b"").decode()
    assert ADMIN.secret_key not in body
    props = parse_properties(body)
    assert props["brokerSecretKey"] == SECRET_MASK
    assert props["brokerAccessKey"] == ADMIN.access_key

    # a secret cannot be changed over the wire, not even by an admin: nothing applied
    conf = cluster.root / "broker-secrets.properties"
    before = conf.read_text()
    async with RemotingClient(credentials=ADMIN) as rc:
        resp = await rc.invoke(broker.addr, RemotingCommand.request(
            RequestCode.UPDATE_BROKER_CONFIG,
            body=b"maxMessageSize=1024\nbrokerSecretKey=stolen123\n"), 5)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "brokerSecretKey" in (resp.remark or "") and "holds a secret" in (resp.remark or "")
    assert conf.read_text() == before
    props = parse_properties(((await get_config(broker.addr, ADMIN)).body or b"").decode())
    assert props["maxMessageSize"] == "4194304"

    assert ADMIN.secret_key not in broker.log_text()
