"""mqadmin, mqbroker -p, mqnamesrv -p and the blocking client against real daemons."""

from __future__ import annotations

import json
import subprocess
import time

from click.testing import CliRunner

from client.admin_cli import cli
from client.blocking import Message, Producer, PullConsumer
from client.pull_result import PullStatus
from protocol.message import MessageQueue
from tests.integration.cluster import BIN, Cluster


def mqadmin_process(*args: str) -> str:
    """The installed mqadmin script, in its own process."""
    out = subprocess.run([str(BIN / "mqadmin"), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def mqadmin(*args: str) -> str:
    """mqadmin's commands in this process (click's runner: no interpreter to start for
    each of the thirty calls); the script itself is run by ``mqadmin_process``. Only
    while no client of the test runs: the runner takes over the process's stdout."""
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_print_config() -> None:
    out = subprocess.run([str(BIN / "mqbroker"), "-p", "-n", "a:1;b:2", "-o", "brokerName=bx"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert "namesrvAddr=a:1;b:2" in out.stdout and "brokerName=bx" in out.stdout
    assert "mapedFileSizeCommitLog=1073741824" in out.stdout
    bad = subprocess.run([str(BIN / "mqbroker"), "-p", "-o", "nope=1"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode != 0 and "unknown config key" in bad.stderr
    out = subprocess.run([str(BIN / "mqnamesrv"), "-p"], capture_output=True, text=True, timeout=30)
    assert "listenPort=9876" in out.stdout


def test_mqadmin_commands_and_blocking_client(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    cluster.broker("broker-a", ns.addr)
    n = ns.addr
    out = mqadmin_process("updateTopic", "-n", n, "-c", "DefaultCluster", "-t", "CliTopic",
                          "-r", "2", "-w", "2")
    assert "success" in out
    assert "CliTopic" in mqadmin("topicList", "-n", n).split()
    assert '"writeQueueNums": 2' in mqadmin("topicRoute", "-n", n, "-t", "CliTopic")
    assert "broker-a" in mqadmin("clusterList", "-n", n)
    out = mqadmin("sendMessage", "-n", n, "-t", "CliTopic", "-p", "hello-cli", "-k", "key1", "-c", "TagA")
    assert "SEND_OK" in out
    mqadmin("sendMessage", "-n", n, "-t", "CliTopic", "-p", "other", "-c", "TagB", "-b", "broker-a", "-i", "1")
    status = mqadmin("topicStatus", "-n", n, "-t", "CliTopic")
    assert sum(int(line.split()[3]) for line in status.splitlines()[1:]) == 2
    out = mqadmin("consumeMessage", "-n", n, "-t", "CliTopic")
    assert "hello-cli" in out and "other" in out and "2 message(s)" in out
    out = mqadmin("consumeMessage", "-n", n, "-t", "CliTopic", "-s", "TagB")
    assert "other" in out and "hello-cli" not in out

    with Producer("blocking-producer", namesrv_addr=n) as producer:
        r = producer.send(Message("CliTopic", b"blocking", tags="TagC"))
        fut = producer.send_async(Message("CliTopic", b"blocking-async"))
        assert fut.result(timeout=10).queue_offset >= 0
        producer.send_batch([Message("CliTopic", b"b%d" % i) for i in range(10)])
    with PullConsumer("blocking-consumer", namesrv_addr=n) as consumer:
        queues = consumer.fetch_subscribe_message_queues("CliTopic")
        bodies = []
        for mq in queues:
            offset = 0
            while True:
                res = consumer.pull(mq, "*", offset, 32)
                if res.pull_status != PullStatus.FOUND:
                    break
                bodies += [m.body for m in res.msg_found_list]
                offset = res.next_begin_offset
        assert sorted(bodies) == sorted([b"hello-cli", b"other", b"blocking", b"blocking-async"]
                                        + [b"b%d" % i for i in range(10)])
        mq = r.message_queue
        consumer.update_consume_offset(mq, 1)
        assert consumer.fetch_consume_offset(mq) == 1

    # queries: by offset msgId, by queue offset, offset by time
    sent = mqadmin("sendMessage", "-n", n, "-t", "CliTopic", "-p", "findme", "-b", "broker-a", "-i", "0")
    offset_id = sent.split()[-1]
    with PullConsumer("q", namesrv_addr=n) as consumer:
        res = consumer.pull(MessageQueue("CliTopic", "broker-a", 0), "*", 0, 32)
        found = [m for m in res.msg_found_list if m.body == b"findme"][0]
    assert found.properties["UNIQ_KEY"] == offset_id  # sendMessage prints the producer msgId
    out = mqadmin("queryMsgById", "-n", n, "-i", found.msg_id)
    assert "findme" in out and "CliTopic" in out
    out = mqadmin("queryMsgByOffset", "-n", n, "-t", "CliTopic", "-b", "broker-a", "-i", "0",
                  "-o", str(found.queue_offset))
    assert "findme" in out
    ts = found.store_timestamp
    out = mqadmin("queryMsgByKey", "-n", n, "-t", "CliTopic", "-k", "key1")
    assert len(out.strip().splitlines()) == 2  # header + the one message sent with -k key1
    out = mqadmin("queryMsgByUniqueKey", "-n", n, "-t", "CliTopic", "-i", offset_id)
    assert "findme" in out
    search = ["searchOffsetByTime", "-n", n, "-t", "CliTopic", "-b", "broker-a", "-i", "0", "-s"]
    assert int(mqadmin(*search, str(ts))) <= found.queue_offset
    assert int(mqadmin(*search, str(int(time.time() * 1000) + 60_000))) == found.queue_offset + 1

    out = mqadmin("deleteTopic", "-n", n, "-c", "DefaultCluster", "-t", "CliTopic")
    assert "success" in out
    assert "CliTopic" not in mqadmin("topicList", "-n", n).split()
    failed = subprocess.run([str(BIN / "mqadmin"), "topicRoute", "-n", n, "-t", "CliTopic"],
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode != 0 and "TOPIC_NOT_EXIST" in failed.stderr


def test_mqbench_latency_on_a_topic_that_does_not_exist_yet(cluster: Cluster) -> None:
    """The consumer subscribes after the topic exists and the timed sends start
    once a warm-up message reached it: every timed message is measured."""
    ns = cluster.namesrv()
    cluster.broker("broker-a", ns.addr)
    out = subprocess.run(
        [str(BIN / "mqbench"), "latency", "-n", ns.addr, "-t", "LatencyNewTopic", "-r", "100",
         "-d", "1", "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["mode"] == "latency" and result["sent"] == 100
    assert result["count"] == 100
