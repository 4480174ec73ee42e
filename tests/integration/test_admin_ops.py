"""Issue 17's mqadmin commands against live daemons: brokerStatus, statsAll,
producerConnection, getBrokerConfig, updateBrokerConfig (surviving a restart),
wipeWritePerm / addWritePerm, --json."""

from __future__ import annotations

import json
import subprocess

from client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from client.admin import MQAdmin
from protocol.route import PERM_WRITE
from tests.integration.cluster import BIN, Cluster
from tests.integration.test_cli import mqadmin_process as mqadmin
from tests.waits import routed, wait_until

TOPIC = "OpsTopic"


def mqadmin_fails(*args: str) -> str:
    out = subprocess.run([str(BIN / "mqadmin"), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0, out.stdout
    return out.stderr


async def test_operator_commands(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr)
    n = ns.addr
    async with MQAdmin(n) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2,
                                 write_queue_nums=2)
        await wait_until(routed(admin, TOPIC), 10, "routed")
    got: list[bytes] = []

    def listener(msgs: list, ctx: object) -> ConsumeConcurrentlyStatus:
        got.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("ops_group", n)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listener)
    async with Producer("ops_producer", n) as producer, consumer:
        for i in range(10):
            await producer.send(Message(TOPIC, b"m%d" % i))

        async def all_consumed() -> bool:
            return len(got) >= 10
        await wait_until(all_consumed, 30, "the group consuming every message")

        # producerConnection while the producer is connected
        out = mqadmin("producerConnection", "-n", n, "-g", "ops_producer", "-t", TOPIC)
        assert len(out.splitlines()) == 2, out  # the header and the one producer
        conns = json.loads(mqadmin("producerConnection", "-n", n, "-g", "ops_producer", "-t", TOPIC,
                                   "--json"))
        assert len(conns) == 1 and conns[0]["clientId"]
        assert "not exist" in mqadmin_fails("producerConnection", "-n", n, "-g", "nobody", "-t", TOPIC)

        # statsAll: 10 in, 10 out, nothing accumulated
        async def stats_row() -> dict | None:
            rows = json.loads(mqadmin("statsAll", "-n", n, "-t", TOPIC, "--json"))
            row = next((r for r in rows if r["group"] == "ops_group"), None)
            return row if row and row["out_msg_24h"] == 10 and row["accumulation"] == 0 else None
        row = await wait_until(stats_row, 30, "statsAll counting the consumed messages")
        assert row["in_msg_24h"] == 10 and row["in_tps"] >= 0 and row["out_tps"] >= 0
        out = mqadmin("statsAll", "-n", n)
        line = next(ln for ln in out.splitlines() if ln.startswith(TOPIC))
        assert line.split()[1:3] == ["ops_group", "0"] and line.split()[-2:] == ["10", "10"], out
        assert "TBW102" not in out

    # brokerStatus: the new figures, as a table and as JSON
    out = mqadmin("brokerStatus", "-n", n, "-b", broker.addr)
    for key in ("putTps", "getTps", "commitLogMaxOffset", "commitLogDiskRatio",
                "pageCacheLockTimeMills", "heldPulls", "bootTimestamp", "version"):
        assert key in out, out
    table = json.loads(mqadmin("brokerStatus", "-n", n, "-b", broker.addr, "--json"))
    assert table["msgPutTotal"] >= 10 and 0 <= table["commitLogDiskRatio"] <= 1

    # getBrokerConfig / updateBrokerConfig, persisted over a restart
    config = json.loads(mqadmin("getBrokerConfig", "-n", n, "-b", broker.addr, "--json"))
    assert config["brokerName"] == "broker-a"
    assert f"{'brokerName':<50}=  broker-a" in mqadmin("getBrokerConfig", "-n", n, "-b", broker.addr)
    out = mqadmin("updateBrokerConfig", "-n", n, "-b", broker.addr, "-k", "maxMessageSize",
                  "-v", "65536")
    assert "update broker config success" in out
    err = mqadmin_fails("updateBrokerConfig", "-n", n, "-b", broker.addr, "-k", "brokerName",
                        "-v", "x")
    assert "brokerName" in err
    broker.stop()
    broker.start()
    config = json.loads(mqadmin("getBrokerConfig", "-n", n, "-b", broker.addr, "--json"))
    assert config["maxMessageSize"] == "65536"

    # wipeWritePerm / addWritePerm on the name server
    async with MQAdmin(n) as admin:
        await wait_until(routed(admin, TOPIC), 10, "routed again")
        out = mqadmin("wipeWritePerm", "-n", n, "-b", "broker-a")
        assert f"wipe write perm of broker[broker-a] in name server[{n}] OK" in out
        route = await admin.topic_route(TOPIC)
        assert all(not qd.perm & PERM_WRITE for qd in route.queue_datas)
        out = mqadmin("addWritePerm", "-n", n, "-b", "broker-a")
        assert f"add write perm of broker[broker-a] in name server[{n}] OK" in out
        route = await admin.topic_route(TOPIC)
        assert all(qd.perm & PERM_WRITE for qd in route.queue_datas)
