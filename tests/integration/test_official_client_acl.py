"""The official RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4) against a broker with
``aclEnable=true`` (issue 18): with set_session_credentials its producer's sends and
its push consumer's heartbeats, pulls and offset commits are signed the way RocketMQ's
clients sign them, and they verify; a wrong secret is refused (NO_PERMISSION,
"Check signature failed", counted as a signature refusal).

Skipped, as tests/integration/test_official_client.py, only where the wheel's
library cannot load.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from client import AclCredentials, Message, MessageQueue, Producer, PullConsumer
from client.admin import MQAdmin
from tests.integration.cluster import Cluster
from tests.integration.official_client import OfficialClient, load_error, message
from tests.waits import routed, wait_until

_why = load_error()
if _why is not None:
    pytest.skip(f"the official RocketMQ client (PyPI rocketmq) cannot load here: {_why}",
                allow_module_level=True)

TOPIC = "CppAclTopic"
GROUP = "GID_cpp_acl"
ADMIN = AclCredentials("rocketmq2", "12345678")
CPP = AclCredentials("cppuser1", "cppsecret1")
N = 5

ACL = f"""\
globalWhiteRemoteAddresses:
  - 10.254.254.254
accounts:
  - accessKey: rocketmq2
    secretKey: '12345678'
    admin: true
  - accessKey: cppuser1
    secretKey: cppsecret1
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {TOPIC}=PUB|SUB
"""


def creds(c: AclCredentials) -> list[str]:
    return ["--access-key", c.access_key, "--secret-key", c.secret_key]


def cpp_produce(ns: str, cred: AclCredentials, bodies: list[str], home: Path
                ) -> list[dict[str, object]]:
    with OfficialClient(["produce", "-n", ns, "-g", "PID_cpp_acl", *creds(cred)], home,
                        60) as p:
        for body in bodies:
            p.write({"op": "sync", "message": message(TOPIC, body, tags="TagA")})
        assert p.finish(60) == 0, p.diagnostics()
        return sorted(p.records(), key=lambda a: int(str(a["i"])))


async def read_all(ns: str) -> list[bytes]:
    async with PullConsumer("acl_reader", ns, credentials=ADMIN) as pc:
        result = await pc.pull(MessageQueue(TOPIC, "broker-cppacl", 0), "*", 0, 64)
        return [m.body for m in result.msg_found_list]


async def test_official_client_signs_and_a_wrong_secret_is_refused(
        cluster: Cluster, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = cluster.namesrv()
    broker = cluster.broker("broker-cppacl", ns.addr, aclEnable="true", aclPlainFile=acl)
    n = ns.addr
    async with MQAdmin(n, credentials=ADMIN) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "routed")

    # signed sends verify: the messages are stored
    bodies = [f"cpp-acl-{i}" for i in range(N)]
    answers = await trio.to_thread.run_sync(cpp_produce, n, CPP, bodies, tmp_path / "p1")
    assert [a.get("status") for a in answers] == ["OK"] * N, answers
    assert await read_all(n) == [b.encode() for b in bodies]

    # a wrong secret: every send refused, the broker says why
    wrong = AclCredentials(CPP.access_key, "not-the-secret")
    answers = await trio.to_thread.run_sync(cpp_produce, n, wrong, ["refused"],
                                            tmp_path / "p2")
    assert len(answers) == 1 and "error" in answers[0], answers
    refusals = broker.log_text().count("Check signature failed for accessKey=cppuser1")
    assert refusals >= 1
    assert await read_all(n) == [b.encode() for b in bodies]

    # the push consumer: heartbeat, pulls and offsets signed; it receives what is sent
    with OfficialClient(["consume", "-n", n, "-g", GROUP, "-t", TOPIC, *creds(CPP)],
                        tmp_path / "c1", 90) as c:
        c.wait_event("started")

        async def probe_received() -> bool:
            if any(r.get("body") == "probe" for r in c.records()):
                return True
            async with Producer("acl_probe", n, credentials=ADMIN) as p:
                await p.send(Message(TOPIC, b"probe"))
            return False

        # a new C++ group starts at the queue's end: a probe every 0.5 s until one
        # arrives (each gives the consumer time for a pull)
        await wait_until(probe_received, 60, "the C++ consumer holding the queue", interval=0.5)
        async with Producer("acl_after", n, credentials=ADMIN) as p:
            for i in range(N):
                await p.send(Message(TOPIC, f"after-{i}".encode()))

        def got_all() -> bool:
            return {f"after-{i}" for i in range(N)} <= {r.get("body") for r in c.records()}

        await trio.to_thread.run_sync(lambda: c.wait(got_all, 60, "the messages sent after"))
        c.write("stop")
        assert c.finish(30) == 0, c.diagnostics()
    # nothing the signed producer or consumer sent was refused
    assert broker.log_text().count("request refused by ACL") == refusals, \
        broker.log_text()[-3000:]
