"""The rocketmq sink against a broker with aclEnable=true: the options accessKey and
secretKey sign the executors' producers; without them the write fails with the
broker's reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from client import AclCredentials
from client.admin import MQAdmin
from client.blocking import PullConsumer
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPIC = "SparkSinkAclTopic"
ADMIN = AclCredentials("rocketmq2", "12345678")
WRITER = AclCredentials("sparkwriter1", "sparkwriter-secret")
ACL = f"""\
globalWhiteRemoteAddresses:
  - 10.254.254.254
accounts:
  - accessKey: rocketmq2
    secretKey: '12345678'
    admin: true
  - accessKey: sparkwriter1
    secretKey: sparkwriter-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {TOPIC}=PUB
"""


def test_sink_signs_with_access_key(spark: Any, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    cluster = Cluster(tmp_path)
    try:
        ns = cluster.namesrv()
        broker = cluster.broker("broker-sinkacl", ns.addr, aclEnable="true", aclPlainFile=acl)

        async def setup() -> None:
            async with MQAdmin(ns.addr, credentials=ADMIN) as admin:
                await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2,
                                         write_queue_nums=2)
                await wait_until(routed(admin, TOPIC), 10, "routed")
        trio.run(setup)
        df = spark.createDataFrame([(f"w{i}",) for i in range(30)], "body string")

        def write(**opts: str) -> None:
            w = df.write.format("rocketmq").mode("append").option("namesrv", ns.addr) \
                .option("topic", TOPIC).option("sendTimeoutMs", "2000")
            for k, v in opts.items():
                w = w.option(k, v)
            w.save()

        write(accessKey=WRITER.access_key, secretKey=WRITER.secret_key)
        with pytest.raises(Exception, match="No accessKey is configured"):
            write()
        with PullConsumer("sink-acl-check", ns.addr, credentials=ADMIN) as c:
            bodies = []
            for mq in c.fetch_subscribe_message_queues(TOPIC):
                r = c.pull(mq, "*", 0, 64)
                bodies += [m.body for m in r.msg_found_list]
        assert sorted(bodies) == sorted(b"w%d" % i for i in range(30))
    finally:
        cluster.close()
