"""mqadmin's topic, message, queue and cluster commands against live daemons:
topicClusterList, updateTopicPerm, printMsg, printMsgByQueue, queryCq,
checkMsgSendRT, sendMsgStatus, clusterRT, haStatus, cleanExpiredCQ and
cleanUnusedTopic; each with --json parsed and an error case; the listing of
the ``mqadmin`` console script.

The commands run in process (click's runner; the SDK's log lines are captured,
as mqadmin sends them to stderr), against daemons on loopback."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import CliRunner, Result
from structlog.testing import capture_logs

from client.admin import MQAdmin
from client.admin_cli import cli
from client.admin_help import HEADER
from client.blocking import Producer
from protocol.hashing import java_string_hash
from protocol.message import Message, MessageQueue
from protocol.names import RMQ_SYS_SCHEDULE_TOPIC
from tests.integration.cluster import BIN, Cluster, Daemon
from tests.waits import wait_until_sync

TOPIC = "AdmTopic"
GBK_BODY = "你好"


def mq(*args: str) -> Result:
    with capture_logs():
        return CliRunner().invoke(cli, list(args))


def ok(*args: str) -> str:
    result = mq(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


def fails(*args: str) -> str:
    result = mq(*args)
    assert result.exit_code != 0, result.stdout
    return result.output


def routed(n: str, topic: str) -> None:
    wait_until_sync(lambda: mq("topicRoute", "-n", n, "-t", topic).exit_code == 0, 20,
                    f"a route for {topic}")


def create(n: str, broker: Daemon, topic: str, *extra: str) -> None:
    ok("updateTopic", "-n", n, "-b", broker.addr, "-t", topic, *extra)
    routed(n, topic)


@dataclass
class Env:
    n: str
    broker: Daemon


@pytest.fixture(scope="module")
def env(module_cluster: Cluster) -> Iterator[Env]:
    ns = module_cluster.namesrv()
    broker = module_cluster.broker("broker-a", ns.addr)
    create(ns.addr, broker, TOPIC, "-r", "2", "-w", "2")
    with Producer("adm-producer", namesrv_addr=ns.addr) as producer:
        q0, q1 = (MessageQueue(TOPIC, "broker-a", i) for i in (0, 1))
        producer.send(Message(TOPIC, b"hello", tags="A"), q0)
        producer.send(Message(TOPIC, b"world", tags="B"), q0)
        producer.send(Message(TOPIC, GBK_BODY.encode("gbk"), tags="A"), q0)
        producer.send(Message(TOPIC, b"again", tags="A"), q1)
    yield Env(ns.addr, broker)


def test_the_console_script_lists_every_group() -> None:
    out = subprocess.run([str(BIN / "mqadmin")], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    assert out.splitlines()[0] == HEADER
    for row in ("Queue:", "   queryCq ", "   cleanUnusedTopic ", "   clusterRT "):
        assert row in out, out


def test_topic_cluster_list(env: Env) -> None:
    assert ok("topicClusterList", "-n", env.n, "-t", TOPIC).split() == ["DefaultCluster"]
    assert json.loads(ok("topicClusterList", "-n", env.n, "-t", TOPIC, "--json")) == [
        "DefaultCluster"]
    assert "TOPIC_NOT_EXIST" in fails("topicClusterList", "-n", env.n, "-t", "NoClusterTopic")


def test_update_topic_perm(env: Env) -> None:
    create(env.n, env.broker, "PermTopic", "-r", "3", "-w", "2", "-o", "true")
    addr = env.broker.addr
    out = ok("updateTopicPerm", "-n", env.n, "-t", "PermTopic", "-b", addr, "-p", "4")
    assert out.splitlines() == [
        f"update topic perm from 6 to 4 in {addr} success.",
        "TopicConfig [topicName=PermTopic, readQueueNums=3, writeQueueNums=2, perm=R--, "
        "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=true]."]

    async def config_and_route_perm() -> tuple[Any, int]:
        async with MQAdmin(env.n) as admin:
            cfg = await admin.topic_config(addr, "PermTopic")
            route = await admin.topic_route("PermTopic")
            return cfg, route.queue_datas[0].perm

    cfg, _ = trio.run(config_and_route_perm)
    assert (cfg.perm, cfg.read_queue_nums, cfg.write_queue_nums, cfg.order) == (4, 3, 2, True)
    wait_until_sync(lambda: trio.run(config_and_route_perm)[1] == 4, 20,
                    "the name server routing the new perm")
    doc = json.loads(ok("updateTopicPerm", "-n", env.n, "-t", "PermTopic", "-c", "DefaultCluster",
                        "-p", "6", "--json"))
    assert [(d["brokerAddr"], d["oldPerm"], d["newPerm"], d["changed"]) for d in doc] == [
        (addr, 4, 6, True)]
    assert doc[0]["topicConfig"]["readQueueNums"] == 3 and doc[0]["topicConfig"]["order"] is True
    out = ok("updateTopicPerm", "-n", env.n, "-t", "PermTopic", "-b", addr, "-p", "6")
    assert out.strip() == f"new perm equals to the old one! ({addr})"
    err = fails("updateTopicPerm", "-n", env.n, "-t", "PermTopic", "-b", "127.0.0.1:1", "-p", "2")
    assert "is not the master of a broker in the route of PermTopic" in err
    assert "no broker registered" in fails("updateTopicPerm", "-n", env.n, "-t", "PermTopic",
                                           "-c", "NoCluster", "-p", "2")


def test_print_msg(env: Env) -> None:
    out = ok("printMsg", "-n", env.n, "-t", TOPIC, "-c", "GBK")
    lines = out.splitlines()
    assert lines[0] == ("minOffset=0, maxOffset=3, MessageQueue [topic=AdmTopic, "
                        "brokerName=broker-a, queueId=0]")
    assert "minOffset=0, maxOffset=1, MessageQueue [topic=AdmTopic, brokerName=broker-a, " \
           "queueId=1]" in lines
    bodies = [line.rsplit(" BODY: ", 1)[1] for line in lines if line.startswith("MSGID: ")]
    assert bodies == ["hello", "world", GBK_BODY, "again"]
    assert lines.count("-" * 56) == 2
    out = ok("printMsg", "-n", env.n, "-t", TOPIC, "-d", "false", "-s", "A")
    assert [line.rsplit(" BODY: ", 1)[1] for line in out.splitlines()
            if line.startswith("MSGID: ")] == ["NOT PRINT BODY"] * 3
    doc = json.loads(ok("printMsg", "-n", env.n, "-t", TOPIC, "--json", "-s", "B"))
    assert [(m["queueId"], m["queueOffset"], m["body"], m["tags"]) for m in doc["messages"]] == [
        (0, 1, "world", "B")]
    assert [(q["queueId"], q["minOffset"], q["maxOffset"]) for q in doc["queues"]] == [
        (0, 0, 3), (1, 0, 1)]
    # a time range: from a minute ahead, nothing; from a date long past, everything
    later = str(int(time.time() * 1000) + 60_000)
    assert json.loads(ok("printMsg", "-n", env.n, "-t", TOPIC, "-b", later, "--json")
                      )["messages"] == []
    doc = json.loads(ok("printMsg", "-n", env.n, "-t", TOPIC, "-b", "2020-01-01#00:00:00:000",
                        "--json"))
    assert len(doc["messages"]) == 4
    assert "unknown charset" in fails("printMsg", "-n", env.n, "-t", TOPIC, "-c", "NOPE-1")
    assert "topic NoPrintTopic does not exist" in fails("printMsg", "-n", env.n, "-t", "NoPrintTopic")


def test_print_msg_by_queue(env: Env) -> None:
    base = ("printMsgByQueue", "-n", env.n, "-t", TOPIC, "-a", "broker-a", "-i", "0")
    assert ok(*base) == ""  # neither messages (-p) nor counts (-f) asked for
    out = ok(*base, "-p", "true", "-d", "true", "-f", "true", "-c", "GBK")
    lines = out.splitlines()
    assert [line.rsplit(" BODY: ", 1)[1] for line in lines if line.startswith("MSGID: ")] == [
        "hello", "world", GBK_BODY]
    assert lines[-2:] == [f"Tag: {'A':<30} Count: 2", f"Tag: {'B':<30} Count: 1"]
    doc = json.loads(ok(*base, "-f", "true", "--json"))
    assert doc["messages"] == [] and (doc["minOffset"], doc["maxOffset"]) == (0, 3)
    assert doc["tagCounts"] == [{"tag": "A", "count": 2}, {"tag": "B", "count": 1}]
    doc = json.loads(ok(*base, "-p", "true", "--json", "-s", "A"))
    assert [(m["queueOffset"], m["body"]) for m in doc["messages"]] == [(0, None), (2, None)]
    err = fails("printMsgByQueue", "-n", env.n, "-t", TOPIC, "-a", "no-such-broker", "-i", "0")
    assert "no-such-broker" in err


def test_query_cq(env: Env) -> None:
    base = ("queryCq", "-n", env.n, "-t", TOPIC, "-q", "0")
    out = ok(*base, "-i", "1", "-c", "5", "-g", "offline_group")
    assert out.startswith("Filter data: \noffline_group@AdmTopic is not online!\n")
    assert "Queue data: \nmax: 3, min: 0\n" in out
    assert [line for line in out.splitlines() if line.startswith("idx: ")] == ["idx: 1", "idx: 2"]
    assert f"tagsCode={java_string_hash('B')}, extendDataJson='null'" in out
    doc = json.loads(ok(*base, "-i", "0", "-b", env.broker.addr, "--json"))
    assert doc["brokerAddr"] == env.broker.addr
    assert [r["index"] for r in doc["queueData"]] == [0, 1, 2]
    assert [r["tagsCode"] for r in doc["queueData"]] == [java_string_hash(t) for t in "ABA"]
    offsets = [r["physicOffset"] for r in doc["queueData"]]
    assert offsets == sorted(offsets) and all(r["physicSize"] > 0 for r in doc["queueData"])
    assert "Index 9 of 0@AdmTopic is not exist!" in ok(*base, "-i", "9")
    assert "5@AdmTopic is not exist!" in fails("queryCq", "-n", env.n, "-t", TOPIC, "-q", "5",
                                               "-i", "0")


def test_check_msg_send_rt(env: Env) -> None:
    create(env.n, env.broker, "RtTopic", "-r", "2", "-w", "2")
    out = ok("checkMsgSendRT", "-n", env.n, "-t", "RtTopic", "-a", "4", "-s", "16")
    lines = out.splitlines()
    assert lines[0].split() == ["#Broker", "Name", "#QID", "#Send", "Result", "#RT"]
    rows = [line.split() for line in lines[1:-1]]
    assert [(r[0], r[1], r[2]) for r in rows] == [("broker-a", str(i % 2), "true")
                                                  for i in range(4)]
    assert lines[-1].startswith("Avg RT: ") and float(lines[-1].split()[-1]) >= 0
    doc = json.loads(ok("checkMsgSendRT", "-n", env.n, "-t", "RtTopic", "-a", "3", "--json"))
    assert [s["sendResult"] for s in doc["sends"]] == [True] * 3 and doc["avgRT"] >= 0
    # (an unknown topic is created, autoCreateTopicEnable, as RocketMQ's producer does)
    assert "bad/topic" in fails("checkMsgSendRT", "-n", env.n, "-t", "bad/topic", "-a", "1")


def test_send_msg_status(env: Env) -> None:
    out = ok("sendMsgStatus", "-n", env.n, "-b", "broker-a", "-c", "3", "-s", "20")
    lines = out.splitlines()
    assert len(lines) == 3
    for line in lines:
        assert line.startswith("rt=") and "ms, SendResult=SendResult [sendStatus=SEND_OK, " in line
        assert "messageQueue=MessageQueue [topic=broker-a, brokerName=broker-a, queueId=0]" in line
    doc = json.loads(ok("sendMsgStatus", "-n", env.n, "-b", "broker-a", "-c", "2", "--json"))
    sends = doc["sends"]
    assert [s["sendStatus"] for s in sends] == ["SEND_OK"] * 2
    assert sends[1]["queueOffset"] == sends[0]["queueOffset"] + 1
    assert "no broker named broker-zz" in fails("sendMsgStatus", "-n", env.n, "-b", "broker-zz")


def test_cluster_rt(env: Env) -> None:
    out = ok("clusterRT", "-n", env.n, "-a", "3", "-s", "16", "-r", "1")
    header, row = out.splitlines()
    assert header.split() == ["#Cluster", "Name", "#Broker", "Name", "#RT", "#successCount",
                              "#failCount"]
    cells = row.split()
    assert cells[:2] == ["DefaultCluster", "broker-a"] and cells[3:] == ["3", "0"]
    assert float(cells[2]) >= 0
    rounds = ok("clusterRT", "-n", env.n, "-a", "2", "-r", "2", "-i", "0", "--json").splitlines()
    assert len(rounds) == 2
    for line in rounds:
        (doc,) = json.loads(line)
        assert (doc["clusterName"], doc["brokerName"], doc["successCount"], doc["failCount"]) == (
            "DefaultCluster", "broker-a", 2, 0)
    tlog = ok("clusterRT", "-n", env.n, "-a", "2", "-r", "1", "-p", "true", "-m", "room1")
    stamp, room, cluster, broker, rt = tlog.strip().split("|")
    assert (room, cluster, broker) == ("room1", "DefaultCluster", "broker-a") and rt.isdigit()
    assert time.strptime(stamp, "%Y-%m-%d %H:%M:%S")
    assert "cluster [NoCluster] not exist" in fails("clusterRT", "-n", env.n, "-c", "NoCluster",
                                                    "-r", "1")


def test_ha_status_json_and_aligned_columns(env: Env) -> None:
    (row,) = json.loads(ok("haStatus", "-n", env.n, "--json"))
    assert (row["brokerName"], row["brokerId"], row["role"], row["state"]) == (
        "broker-a", 0, "ASYNC_MASTER", "writable")
    header, line = ok("haStatus", "-n", env.n).splitlines()
    # numbers right-aligned under their headers
    end = header.index("#Max Offset") + len("#Max Offset")
    assert line[:end].endswith(str(row["maxOffset"])) and line[end] == " "
    end = header.index("#BID") + len("#BID")
    assert line[:end].endswith("0") and line[end] == " "
    assert "no name server answered" in fails("haStatus", "-n", "127.0.0.1:1")


# ---- cleanExpiredCQ / cleanUnusedTopic: their own daemons, whose files expire at once ----

EXPIRING: dict[str, Any] = {
    "mapedFileSizeCommitLog": 64 * 1024,
    "mapedFileSizeConsumeQueue": 100 * 20,
    "fileReservedTime": 0,  # every file but the one being written is expired ...
    "deleteWhen": ";".join(f"{h:02d}" for h in range(24)),  # ... and deleted at any hour
    "cleanResourceInterval": 100,
}


def delayed(topic: str, body: bytes) -> Message:
    msg = Message(topic, body)
    msg.delay_time_level = 1  # 1 s: re-put after the topic is deleted
    return msg


def repointed(n: str, addr: str, topic: str) -> int:
    """Wait for the queue of a deleted topic to be made again by a delayed
    message's re-put; its entry's commit-log offset."""
    def entry() -> Any:
        r = mq("queryCq", "-n", n, "-b", addr, "-t", topic, "-q", "0", "-i", "0", "--json")
        return json.loads(r.stdout)["queueData"] if r.exit_code == 0 else None
    rows = wait_until_sync(entry, 20, f"the delayed message re-put into {topic}")
    return int(rows[0]["physicOffset"])


def min_phy_offset(n: str, addr: str) -> int:
    return int(json.loads(ok("brokerStatus", "-n", n, "-b", addr, "--json"))["commitLogMinOffset"])


def test_clean_expired_cq_and_unused_topic(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, **EXPIRING)
    n, addr = ns.addr, broker.addr
    for topic in ("Gone", "Orphan", "Idle", "Busy"):
        create(n, broker, topic, "-r", "1", "-w", "1")
    with Producer("clean-producer", namesrv_addr=n) as producer:
        assert producer.send(Message("Idle", b"i" * 100)).queue_offset == 0
        # Gone: deleted while its delayed message waits; the re-put makes its queue again
        producer.send(delayed("Gone", b"g" * 100))
        ok("deleteTopic", "-n", n, "-c", "DefaultCluster", "-t", "Gone")
        gone_at = repointed(n, addr, "Gone")
        # its file (and Idle's) expires once the log has moved on to the next one
        for _ in range(20):  # 80 kB: past the first 64 KiB file
            producer.send(Message("Busy", b"b" * 4000))
        wait_until_sync(lambda: min_phy_offset(n, addr) > gone_at, 20,
                        "the commit-log file of Gone's message deleted")
        # Orphan: the same, but its message is still in the log
        producer.send(delayed("Orphan", b"o" * 100))
        ok("deleteTopic", "-n", n, "-c", "DefaultCluster", "-t", "Orphan")
        repointed(n, addr, "Orphan")

        (report,) = json.loads(ok("cleanExpiredCQ", "-n", n, "-b", addr, "--json"))
        assert report["brokerAddr"] == addr
        assert report["removed"] == [{"topic": "Gone", "queueId": 0}]
        assert report["kept"] == []  # (the delay queue still holds Orphan's message)
        assert "0@Gone is not exist!" in fails("queryCq", "-n", n, "-b", addr, "-t", "Gone",
                                                "-q", "0", "-i", "0")
        repointed(n, addr, "Orphan")  # still there: its message is stored
        # Idle's queue expired too, but the topic exists: its offsets go on
        assert producer.send(Message("Idle", b"i" * 100)).queue_offset == 1

        out = ok("cleanUnusedTopic", "-n", n)
        assert f"{addr}: removed 1 consume queue(s): Orphan/0" in out.splitlines()
        assert out.splitlines()[-1] == "success"
        assert "0@Orphan is not exist!" in fails("queryCq", "-n", n, "-b", addr, "-t", "Orphan",
                                                  "-q", "0", "-i", "0")
        assert ok("cleanExpiredCQ", "-n", n, "-c", "DefaultCluster").splitlines() == [
            f"{addr}: removed 0 consume queue(s)", "success"]
        # the delay queue (a system topic: never removed) keeps both delayed messages
        assert json.loads(ok("queryCq", "-n", n, "-b", addr, "-t", RMQ_SYS_SCHEDULE_TOPIC,
                             "-q", "0", "-i", "0", "--json"))["maxQueueIndex"] == 2
        for topic in ("Idle", "Busy"):  # the existing topics keep their queues
            assert json.loads(ok("queryCq", "-n", n, "-t", topic, "-q", "0", "-i", "0",
                                 "--json"))["maxQueueIndex"] > 0
    assert "no broker registered" in fails("cleanExpiredCQ", "-n", n, "-c", "NoCluster")
    assert "no broker registered" in fails("cleanUnusedTopic", "-n", n, "-c", "NoCluster")


# ---- ACL: the commands sign with the tool's credentials -----------------------------------

ACL = """accounts:
  - accessKey: rocketmq2
    secretKey: '12345678'
    admin: true
  - accessKey: reader01
    secretKey: readersecret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [AclTopic=SUB]
"""
ADMIN_KEYS = ("--access-key", "rocketmq2", "--secret-key", "12345678")
READER_KEYS = ("--access-key", "reader01", "--secret-key", "readersecret")


def test_acl_signs_the_new_commands(cluster: Cluster, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = cluster.namesrv()
    broker = cluster.broker("broker-acl", ns.addr, aclEnable="true", aclPlainFile=acl)
    n, addr = ns.addr, broker.addr
    for topic in ("AclTopic", "OtherTopic"):
        ok(*ADMIN_KEYS, "updateTopic", "-n", n, "-b", addr, "-t", topic, "-r", "1", "-w", "1")
        routed(n, topic)
    cq = ("queryCq", "-n", n, "-b", addr, "-q", "0", "-i", "0", "-t")
    # a queue no message made yet: the broker answers that it does not have it
    assert "0@AclTopic is not exist!" in fails(*READER_KEYS, *cq, "AclTopic")
    assert "No permission for topic=OtherTopic" in fails(*READER_KEYS, *cq, "OtherTopic")
    assert "NO_PERMISSION" in fails(*cq, "AclTopic")  # unsigned
    # removing queues and changing a topic: admin accounts only
    assert "admin" in fails(*READER_KEYS, "cleanUnusedTopic", "-n", n, "-b", addr)
    assert ok(*ADMIN_KEYS, "cleanUnusedTopic", "-n", n, "-b", addr).splitlines()[-1] == "success"
    assert "admin" in fails(*READER_KEYS, "updateTopicPerm", "-n", n, "-t", "AclTopic", "-b", addr,
                            "-p", "4")
    assert "success" in ok(*ADMIN_KEYS, "updateTopicPerm", "-n", n, "-t", "AclTopic", "-b", addr,
                           "-p", "4")
