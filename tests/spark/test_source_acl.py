"""The rocketmq source against a broker with aclEnable=true (issue 18): the options
accessKey/secretKey sign the driver's and the executors' requests; without them the
read fails with the broker's reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from client import AclCredentials, Message, Producer
from client.admin import MQAdmin
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPIC = "SparkAclTopic"
ADMIN = AclCredentials("rocketmq2", "12345678")
READER = AclCredentials("sparkuser1", "sparksecret1")
ACL = f"""\
globalWhiteRemoteAddresses:
  - 10.254.254.254
accounts:
  - accessKey: rocketmq2
    secretKey: '12345678'
    admin: true
  - accessKey: sparkuser1
    secretKey: sparksecret1
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {TOPIC}=SUB
"""


def test_source_signs_with_access_key(spark: Any, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    cluster = Cluster(tmp_path)
    try:
        ns = cluster.namesrv()
        broker = cluster.broker("broker-sparkacl", ns.addr, aclEnable="true",
                                aclPlainFile=acl)

        async def setup() -> None:
            async with MQAdmin(ns.addr, credentials=ADMIN) as admin:
                await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2,
                                         write_queue_nums=2)
                await wait_until(routed(admin, TOPIC), 10, "routed")
            async with Producer("spark-acl-producer", ns.addr, credentials=ADMIN) as p:
                for i in range(20):
                    await p.send(Message(TOPIC, b"m%d" % i))
        trio.run(setup)

        def read(**opts: str) -> list[Any]:
            r = spark.read.format("rocketmq").option("namesrv", ns.addr).option("topic", TOPIC)
            for k, v in opts.items():
                r = r.option(k, v)
            return r.load().collect()  # type: ignore[no-any-return]

        rows = read(accessKey=READER.access_key, secretKey=READER.secret_key)
        assert sorted(r.body for r in rows) == sorted(b"m%d" % i for i in range(20))
        with pytest.raises(Exception, match="No accessKey is configured"):
            read()
        with pytest.raises(Exception, match="Check signature failed"):
            read(accessKey=READER.access_key, secretKey="wrongsecret")
    finally:
        cluster.close()
