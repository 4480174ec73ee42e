"""Issue 18 (beyond RocketMQ): the HA port of a master with aclEnable accepts a
slave only after a hello signed by an admin account; a connection reporting an
offset past the master's end is dropped and releases no SYNC_MASTER send (#3015).
The slave's metadata sync is signed with its brokerAccessKey (no white address)."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from broker.store.ha.epochs import Epoch, LogView
from broker.store.ha.transfer import (
    CHALLENGE,
    GREETING,
    ChallengeDecoder,
    encode_hello,
    encode_report,
    make_hello,
)
from client import AclCredentials, Message, Producer, SendStatus
from client.admin import MQAdmin
from protocol.body import unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster, Daemon
from tests.waits import routed, wait_until

TOPIC = "HaAclTopic"
ADMIN = AclCredentials("brokeradm1", "brokersecret1")
USER = AclCredentials("plainuser1", "usersecret1")
TIMEOUT = 20.0

ACL = f"""globalWhiteRemoteAddresses:
  - 10.254.254.254
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


# a log no master of this group wrote, far longer than the master's
FORGED = LogView("forged", [Epoch(1, 0, "forged", "forged")], 0, 10**15, None)


def hello(cred: AclCredentials | None, broker: str = "broker-a", log: LogView | None = None,
          then: bytes = b"") -> Callable[[str], bytes]:
    """A hello answering the master's challenge (given later), and ``then``."""
    return lambda challenge: encode_hello(make_hello(
        broker, "DefaultCluster", int(time.time() * 1000), secrets.token_hex(8),
        cred.access_key if cred else None, cred.secret_key if cred else None, log=log,
        challenge=challenge)) + then


async def dropped(port: int, data: bytes | Callable[[str], bytes]) -> bool:
    """Whether the master closes a connection that sends ``data`` (bounded wait):
    bytes as they are, or the greeting, then ``data(challenge)``."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        if callable(data):
            await stream.send_all(GREETING)
            decoder, challenge = ChallengeDecoder(), None
            while challenge is None:
                challenge = decoder.feed(await stream.receive_some(CHALLENGE.size))
            data = data(challenge[0])
        await stream.send_all(data)
        with trio.move_on_after(TIMEOUT):
            while True:
                try:
                    got = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return True
                if not got:
                    return True
        return False


async def test_ha_hello_and_offsets_with_acl(cluster: Cluster, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = cluster.namesrv()
    common: dict[str, Any] = {"mapedFileSizeCommitLog": 256 * 1024, "mapedFileSizeConsumeQueue": 20 * 1000,
              "slaveSyncInterval": 300, "brokerAccessKey": ADMIN.access_key,
              "brokerSecretKey": ADMIN.secret_key}
    master = cluster.broker("broker-a", ns.addr, brokerRole="SYNC_MASTER", aclEnable="true",
                            aclPlainFile=acl, syncFlushTimeout=2500, **common)
    slave: Daemon = cluster.broker("broker-a-s", ns.addr, brokerName="broker-a", brokerId=1,
                                   brokerRole="SLAVE", **common)
    ha_port = master.port + 1
    async with MQAdmin(ns.addr, credentials=ADMIN) as admin:
        await admin.create_topic(TOPIC, broker_addr=master.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), TIMEOUT, "topic routed")

    async with Producer("ha-acl-producer", ns.addr, credentials=USER) as producer:
        # the real slave, signed with its brokerAccessKey, replicates: SEND_OK
        async def replicated() -> bool:
            r = await producer.send(Message(TOPIC, b"probe"))
            return r.send_status == SendStatus.SEND_OK
        await wait_until(replicated, TIMEOUT, "the signed slave acknowledging sends")
        assert re.search(rf"slave hello accepted .*access_key={ADMIN.access_key}",
                         master.log_text())
        # its metadata sync (signed, not white-listed) copied the topic
        await wait_until(lambda: _has_topic(slave), TIMEOUT, "the slave's topic copy")

        # no hello (a bare report), an unsigned hello, a non-admin account's, another
        # group's: each dropped and logged
        assert await dropped(ha_port, encode_report(0))
        assert await dropped(ha_port, hello(None, then=encode_report(0)))
        assert await dropped(ha_port, hello(USER, then=encode_report(0)))
        assert await dropped(ha_port, hello(ADMIN, broker="broker-b", then=encode_report(0)))
        assert await dropped(ha_port, hello(AclCredentials(ADMIN.access_key, "wrongsecret1"),
                                            then=encode_report(0)))
        log = master.log_text()
        for reason in ("no hello", "must be signed", "not an admin account", "broker group",
                       "signature check failed"):
            assert reason in log, reason

        # the real slave frozen, a send waits for an acknowledgement; a (validly
        # signed) connection reporting past the master's end is dropped and does
        # not release it: the frozen slave goes silent (haSlaveSilentMs), the send
        # ends SLAVE_NOT_AVAILABLE, never SEND_OK
        slave.freeze()
        try:
            outcome: list[SendStatus] = []

            async def send_waiting() -> None:
                r = await producer.send(Message(TOPIC, b"waits-for-a-slave"))
                outcome.append(r.send_status)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send_waiting)
                await trio.testing.wait_all_tasks_blocked()  # the send went out: it waits
                assert await dropped(ha_port, hello(ADMIN, log=FORGED,
                                                    then=encode_report(10**15)))
            assert outcome == [SendStatus.SLAVE_NOT_AVAILABLE], outcome
            assert "slave's log refused" in master.log_text()  # another lineage: diverged
        finally:
            slave.thaw()
        # the real slave is still accepted afterwards
        await wait_until(replicated, TIMEOUT, "the thawed slave acknowledging sends")
    # a connection stuck in its hello (the greeting, then nothing) is dropped after 10 s
    t0 = trio.current_time()
    assert await dropped(ha_port, GREETING)
    assert trio.current_time() - t0 >= 9.5
    assert "no hello within" in master.log_text()


async def _has_topic(slave: Daemon) -> bool:
    async with RemotingClient() as rc:  # the slave itself has no aclEnable
        resp = await rc.invoke(slave.addr, RemotingCommand.request(
            RequestCode.GET_ALL_TOPIC_CONFIG), TIMEOUT)
    if resp.code != ResponseCode.SUCCESS:
        return False
    return TOPIC in unpack_body(resp.body).get("topicConfigTable", {})
