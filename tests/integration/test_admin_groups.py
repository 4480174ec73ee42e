"""mqadmin's group, offset, KV and name-server config commands against live daemons
(client/admin_groups.py): updateSubGroup, deleteSubGroup, consumerStatus,
cloneGroupOffset, skipAccumulatedMessage, allocateMQ, updateOrderConf,
updateKvConfig, deleteKvConfig, getNamesrvConfig, updateNamesrvConfig; each with
an error case, --json parsed; with ACL, the admin-only ones refused to a reader."""

from __future__ import annotations

import json
from pathlib import Path

import trio
from click.testing import CliRunner

from client import (
    AclCredentials,
    ConsumeConcurrentlyStatus,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
)
from client.admin import MQAdmin
from client.admin_cli import cli
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import QueryConsumerOffsetRequestHeader
from protocol.message import MessageQueue
from protocol.trio import RemotingClient
from tests.integration.cluster import Cluster, Daemon
from tests.integration.test_acl_admin import mqadmin as run_mqadmin
from tests.waits import routed, wait_until

TOPIC = "GroupsTopic"


async def mqadmin(*args: str, ok: bool = True, cred: AclCredentials | None = None) -> str:
    """mqadmin run in a worker thread (click's runner: no process to start); its
    stdout, or its stderr when ``ok`` is False (then it must fail). Only while no
    client of the test runs: the runner captures the process's stdout, where their
    logs would go (``mqadmin_process`` then)."""
    opts = ["--access-key", cred.access_key, "--secret-key", cred.secret_key] if cred else []
    result = await trio.to_thread.run_sync(lambda: CliRunner().invoke(cli, [*opts, *args]))
    if ok:
        assert result.exit_code == 0, result.output
        return result.stdout
    assert result.exit_code != 0, result.stdout
    return result.stderr


async def mqadmin_process(*args: str, ok: bool = True) -> str:
    """The mqadmin process, in a worker thread (in-process consumers keep running)."""
    return await run_mqadmin(*args, cred=None, ok=ok)


def start(cluster: Cluster, namesrvs: int = 1) -> tuple[list[Daemon], Daemon]:
    nss = [cluster.namesrv() for _ in range(namesrvs)]
    b = cluster.broker("broker-a", ";".join(ns.addr for ns in nss))
    return nss, b


async def make_topic(n: str, broker: Daemon, topic: str, queues: int = 2) -> None:
    async with MQAdmin(n) as admin:
        await admin.create_topic(topic, broker_addr=broker.addr, read_queue_nums=queues,
                                 write_queue_nums=queues)
        await wait_until(routed(admin, topic), 10, f"a route for {topic}")


# ---- subscription groups ------------------------------------------------------------

async def test_update_and_delete_sub_group(cluster: Cluster) -> None:
    (ns,), b = start(cluster)
    n = ns.addr
    out = await mqadmin("updateSubGroup", "-n", n, "-b", b.addr, "-g", "G1", "-r", "5")
    assert out.splitlines()[0] == f"create subscription group to {b.addr} success."
    # a new group: RocketMQ's tool defaults (no broadcast, not from min), -r applied
    assert ("SubscriptionGroupConfig [groupName=G1, consumeEnable=true, consumeFromMinEnable=false, "
            "consumeBroadcastEnable=false, retryQueueNums=1, retryMaxTimes=5") in out
    # an update changes only what is given (RocketMQ would reset retryMaxTimes to 16)
    doc = json.loads(await mqadmin("updateSubGroup", "-n", n, "-c", "DefaultCluster", "-g", "G1",
                                   "-s", "false", "-d", "true", "--json"))
    assert doc["brokers"] == [b.addr]
    assert (doc["config"]["consumeEnable"], doc["config"]["consumeBroadcastEnable"],
            doc["config"]["retryMaxTimes"]) == (False, True, 5)
    async with MQAdmin(n) as admin:
        assert (await admin.subscription_groups(b.addr))["G1"] == doc["config"]
        # -q: the retry topic's write queues follow; its read queues never shrink
        retry = "%RETRY%G1"
        await admin.create_topic(retry, broker_addr=b.addr, read_queue_nums=1, write_queue_nums=1)
        await wait_until(routed(admin, retry), 10, "the retry topic routed")
        out = await mqadmin("updateSubGroup", "-n", n, "-b", b.addr, "-g", "G1", "-q", "3")
        assert f"update subscription retry topic {retry} queue nums to {b.addr} success." in out

        async def queues(read: int, write: int) -> bool:
            qd = (await admin.topic_route(retry)).queue_datas[0]
            return (qd.read_queue_nums, qd.write_queue_nums) == (read, write)
        await wait_until(lambda: queues(3, 3), 10, "the retry topic with 3 queues")
        await mqadmin("updateSubGroup", "-n", n, "-b", b.addr, "-g", "G1", "-q", "2")
        await wait_until(lambda: queues(3, 2), 10, "2 write queues, still 3 read queues")
    # errors: the broker's bound on retryQueueNums, no target, a bad flag value
    err = await mqadmin("updateSubGroup", "-n", n, "-b", b.addr, "-g", "G1", "-q", "100000",
                        ok=False)
    assert "retryQueueNums must be within 0..1024 (maxQueueNums)" in err
    assert "give a broker address (-b) or a cluster (-c)" in await mqadmin(
        "updateSubGroup", "-n", n, "-g", "G1", ok=False)
    assert "-s" in await mqadmin("updateSubGroup", "-n", n, "-b", b.addr, "-g", "G1", "-s", "maybe",
                                 ok=False)

    out = await mqadmin("deleteSubGroup", "-n", n, "-c", "DefaultCluster", "-g", "G1")
    assert (f"delete subscription group [G1] from broker [{b.addr}] in cluster [DefaultCluster] "
            "success.") in out
    assert "kept the topics %RETRY%G1 and %DLQ%G1" in out
    async with MQAdmin(n) as admin:
        assert "G1" not in await admin.subscription_groups(b.addr)
        await admin.topic_route("%RETRY%G1")  # kept, with its messages
    err = await mqadmin("deleteSubGroup", "-n", n, "-b", b.addr, "-g", "G1", ok=False)
    assert "SUBSCRIPTION_GROUP_NOT_EXIST" in err


# ---- the name servers' KV config and order conf -----------------------------------

async def kv_on(addr: str, namespace: str, key: str) -> str | None:
    async with MQAdmin(addr) as admin:
        return await admin.get_kv_config(namespace, key)


async def test_kv_config_and_order_conf_on_every_namesrv(cluster: Cluster) -> None:
    nss, b = start(cluster, namesrvs=2)
    n = ";".join(ns.addr for ns in nss)
    out = await mqadmin("updateKvConfig", "-n", n, "-s", "PROJECT_CONFIG", "-k", "k1", "-v", "v1")
    assert out == "create or update kv config to namespace success.\n"
    assert [await kv_on(ns.addr, "PROJECT_CONFIG", "k1") for ns in nss] == ["v1", "v1"]
    out = await mqadmin("deleteKvConfig", "-n", n, "-s", "PROJECT_CONFIG", "-k", "k1")
    assert out == "delete kv config from namespace success.\n"
    assert [await kv_on(ns.addr, "PROJECT_CONFIG", "k1") for ns in nss] == [None, None]
    err = await mqadmin("updateKvConfig", "-n", n, "-s", "PROJECT_CONFIG", "-k", "k" * 300,
                        "-v", "v", ok=False)
    assert "longer than 255 characters" in err

    out = await mqadmin("updateOrderConf", "-n", n, "-t", TOPIC, "-m", "put",
                        "-v", "broker-a:4;broker-b:2")
    assert out.strip() == f"update orderConf success. topic=[{TOPIC}], orderConf=[broker-a:4;broker-b:2]"
    assert [await kv_on(ns.addr, "ORDER_TOPIC_CONFIG", TOPIC) for ns in nss] == \
        ["broker-a:4;broker-b:2"] * 2
    out = await mqadmin("updateOrderConf", "-n", n, "-t", TOPIC, "-m", "get")
    assert out.strip() == f"get orderConf success. topic=[{TOPIC}], orderConf=[broker-a:4;broker-b:2]"
    doc = json.loads(await mqadmin("updateOrderConf", "-n", n, "-t", TOPIC, "-m", "get", "--json"))
    assert doc == {"topic": TOPIC, "orderConf": "broker-a:4;broker-b:2"}
    out = await mqadmin("updateOrderConf", "-n", n, "-t", TOPIC, "-m", "delete")
    assert out.strip() == f"delete orderConf success. topic=[{TOPIC}]"
    out = await mqadmin("updateOrderConf", "-n", n, "-t", TOPIC, "-m", "get")
    assert out.strip() == f"get orderConf success. topic=[{TOPIC}], orderConf=[null]"
    assert "please set orderConf with option -v." in await mqadmin(
        "updateOrderConf", "-n", n, "-t", TOPIC, "-m", "put", ok=False)
    assert "is not brokerName:queueNums" in await mqadmin(
        "updateOrderConf", "-n", n, "-t", TOPIC, "-m", "put", "-v", "broker-a:x", ok=False)


# ---- the name servers' own config --------------------------------------------------

async def test_get_and_update_namesrv_config(cluster: Cluster, tmp_path: Path) -> None:
    nss, b = start(cluster, namesrvs=2)
    n = ";".join(ns.addr for ns in nss)
    configs = json.loads(await mqadmin("getNamesrvConfig", "-n", n, "--json"))
    assert sorted(configs) == sorted(ns.addr for ns in nss)
    for ns in nss:
        assert configs[ns.addr]["listenPort"] == str(ns.port)
        assert configs[ns.addr]["orderMessageEnable"] == "false"
    out = await mqadmin("getNamesrvConfig", "-n", n)
    assert f"============{nss[0].addr}============" in out
    assert any(line.startswith("orderMessageEnable") and line.endswith("=  false")
               for line in out.splitlines())

    out = await mqadmin("updateNamesrvConfig", "-n", n, "-k", "orderMessageEnable", "-v", "true")
    assert out.splitlines() == [f"update name server config success![{nss[0].addr}, {nss[1].addr}]",
                                "orderMessageEnable : true"]
    # in force at once: routes carry the ORDER_TOPIC_CONFIG value
    await make_topic(n, b, TOPIC)
    await mqadmin("updateOrderConf", "-n", n, "-t", TOPIC, "-m", "put", "-v", "broker-a:2")
    for ns in nss:
        async with MQAdmin(ns.addr) as admin:
            assert (await admin.topic_route(TOPIC)).order_topic_conf == "broker-a:2"
    # persisted in the config file each was started from, and kept over a restart
    conf = cluster.root / f"namesrv-{nss[0].port}.properties"
    assert "orderMessageEnable=true" in conf.read_text()
    nss[0].stop()
    nss[0].start()
    doc = json.loads(await mqadmin("getNamesrvConfig", "-n", nss[0].addr, "--json"))
    assert doc[nss[0].addr]["orderMessageEnable"] == "true"

    # refused, nothing applied: a key that cannot change at run time, a bad value, a secret
    err = await mqadmin("updateNamesrvConfig", "-n", n, "-k", "listenPort", "-v", "1", ok=False)
    assert "'listenPort' cannot change at run time" in err
    err = await mqadmin("updateNamesrvConfig", "-n", n, "-k", "scanNotActiveBrokerInterval",
                        "-v", "0", ok=False)
    assert "scanNotActiveBrokerInterval must be positive" in err
    err = await mqadmin("updateNamesrvConfig", "-n", n, "-k", "brokerSecretKey", "-v", "x", ok=False)
    assert "a secret cannot be changed over the wire" in err
    async with RemotingClient() as rc:  # the name server refuses a secret too (not only the tool)
        cmd = RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG,
                                      body=b"tlsKeyPassword=stolen\n")
        resp = await rc.invoke(nss[1].addr, cmd, 10)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "holds a secret" in (resp.remark or "")
    assert "tlsKeyPassword" not in conf.read_text()


# ---- a group's consumers: consumerStatus, skipAccumulatedMessage ---------------------

async def test_consumer_status_and_skip_accumulated(cluster: Cluster) -> None:
    (ns,), b = start(cluster)
    n = ns.addr
    await make_topic(n, b, TOPIC)
    gate = trio.Event()
    got: list[bytes] = []

    async def listener(msgs: list, ctx: object) -> ConsumeConcurrentlyStatus:
        got.extend(m.body for m in msgs)
        if msgs[0].body.startswith(b"stuck"):
            await gate.wait()  # accumulate behind these
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("status_group", n, persist_consumer_offset_interval=0.2)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listener)
    async with Producer("status_producer", n) as producer, consumer:
        async def send(prefix: str, count: int) -> None:
            for i in range(count):
                await producer.send(Message(TOPIC, f"{prefix}{i}".encode()),
                                    MessageQueue(TOPIC, "broker-a", i % 2))

        await send("ok", 4)
        await wait_until(lambda: _has(got, b"ok", 4), 20, "the first messages consumed")
        cid = consumer.client_id

        out = await mqadmin_process("consumerStatus", "-n", n, "-g", "status_group")
        assert out.splitlines()[0].startswith(f"001  {cid}")
        assert "Same subscription in the same group of consumer" in out and "Rebalance OK" in out
        info = json.loads(await mqadmin_process("consumerStatus", "-n", n, "-g", "status_group",
                                        "-i", cid, "--json"))
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        assert info["properties"]["consumerGroup"] == "status_group"
        assert {s["topic"] for s in info["subscriptionSet"]} == {TOPIC, "%RETRY%status_group"}
        queues = {(q["topic"], q["queueId"]): q for q in info["mqTable"]}
        assert {(TOPIC, 0), (TOPIC, 1)} <= set(queues)
        assert queues[(TOPIC, 0)]["commitOffset"] >= 0
        assert info["statusTable"][TOPIC]["consumeOKTPS"] > 0
        full = await mqadmin_process("consumerStatus", "-n", n, "-g", "status_group", "-i", cid, "-s")
        for section in ("#Consumer Properties#", "#Consumer Subscription#", "#Consumer Offset#",
                        "#Consumer MQ Detail#", "#Consumer RT&TPS#", "#Consumer jstack#",
                        "trio tasks:"):
            assert section in full, section
        assert "not online" in await mqadmin_process("consumerStatus", "-n", n, "-g", "status_group",
                                                     "-i", "10.0.0.1@nobody", ok=False)

        # messages pile up behind stuck listener calls; skip them while the consumer runs
        await send("stuck", 6)
        await wait_until(lambda: _has(got, b"stuck", 2), 20, "stuck listener calls")
        async with MQAdmin(n) as admin:
            maxes = {r["queueId"]: r["brokerOffset"]
                     for r in await admin.consume_stats("status_group", TOPIC)}
            assert sum(r["lag"] for r in await admin.consume_stats("status_group", TOPIC)) > 0
            rows = json.loads(await mqadmin_process("skipAccumulatedMessage", "-n", n, "-g", "status_group",
                                            "-t", TOPIC, "--json"))
            assert {r["queueId"]: r["offset"] for r in rows} == maxes

            async def consumer_took_it() -> bool:  # the consumer's own offsets moved too
                held = consumer.offset_table()
                return all(held.get(MessageQueue(TOPIC, "broker-a", q)) == o
                           for q, o in maxes.items())
            await wait_until(consumer_took_it, 20, "the consumer taking the new offsets")
            gate.set()  # the stuck calls finish: their old offsets are not committed
            await send("after", 2)
            await wait_until(lambda: _has(got, b"after", 2), 20, "new messages consumed")

            async def nothing_left() -> bool:
                rows = await admin.consume_stats("status_group", TOPIC)
                return all(r["lag"] == 0 for r in rows) and \
                    all(consumer.offset_table().get(MessageQueue(TOPIC, "broker-a", r["queueId"]))
                        == r["brokerOffset"] for r in rows)
            await wait_until(nothing_left, 20, "offsets committed past the new messages")
        # the skipped messages were never delivered again
        assert sum(1 for body in got if body.startswith(b"stuck")) <= 6

    # the clients closed: the tool in process. An offline group is reset too (as a
    # table); an unknown topic and a group not online are errors
    out = await mqadmin("skipAccumulatedMessage", "-n", n, "-g", "offline_group", "-t", TOPIC)
    assert out.splitlines()[0].split() == ["#brokerName", "#queueId", "#offset"]
    assert len(out.splitlines()) == 3
    async with MQAdmin(n) as admin:
        assert all(r["lag"] == 0 for r in await admin.consume_stats("offline_group", TOPIC))
    err = await mqadmin("skipAccumulatedMessage", "-n", n, "-g", "g", "-t", "NoSuchTopic", ok=False)
    assert "NoSuchTopic" in err
    assert "not online" in await mqadmin("consumerStatus", "-n", n, "-g", "status_group", ok=False)


async def _has(got: list[bytes], prefix: bytes, count: int) -> bool:
    return sum(1 for body in got if body.startswith(prefix)) >= count


# ---- cloneGroupOffset, allocateMQ ---------------------------------------------------

async def stored_offsets(addr: str, group: str, topic: str, queues: int) -> list[int | None]:
    """The group's stored offset of each queue (None: none, not a new group's 0)."""
    out: list[int | None] = []
    async with RemotingClient() as rc:
        for q in range(queues):
            fields = QueryConsumerOffsetRequestHeader(group, topic, q,
                                                      set_zero_if_not_found=False).to_fields()
            resp = await rc.invoke(addr, RemotingCommand.request(
                RequestCode.QUERY_CONSUMER_OFFSET, fields), 10)
            out.append(None if resp.code == ResponseCode.QUERY_NOT_FOUND
                       else int(resp.ext_fields["offset"]))
    return out


async def test_clone_group_offset_and_allocate_mq(cluster: Cluster) -> None:
    (ns,), b = start(cluster)
    n = ns.addr
    await make_topic(n, b, TOPIC, queues=4)
    async with PullConsumer("src_group", n) as c:
        await c.update_consume_offset(MessageQueue(TOPIC, "broker-a", 0), 3)
        await c.update_consume_offset(MessageQueue(TOPIC, "broker-a", 2), 7)
    rows = json.loads(await mqadmin("cloneGroupOffset", "-n", n, "-s", "src_group",
                                    "-d", "dest_group", "-t", TOPIC, "--json"))
    assert rows == [{"brokerName": "broker-a", "queueId": 0, "offset": 3},
                    {"brokerName": "broker-a", "queueId": 2, "offset": 7}]
    assert await stored_offsets(b.addr, "dest_group", TOPIC, 4) == [3, None, 7, None]
    out = await mqadmin("cloneGroupOffset", "-n", n, "-s", "src_group", "-d", "dest2", "-t", TOPIC)
    assert out.strip() == f"clone group offset success. srcGroup[src_group], destGroup=[dest2], topic[{TOPIC}]"
    err = await mqadmin("cloneGroupOffset", "-n", n, "-s", "nobody", "-d", "dest_group",
                        "-t", TOPIC, ok=False)
    assert "the consumer group nobody has no offset of topic" in err

    out = await mqadmin("allocateMQ", "-n", n, "-t", TOPIC, "-i", "c2,c1")
    doc = json.loads(out)
    assert {cid: [q["queueId"] for q in mqs] for cid, mqs in doc["result"].items()} == \
        {"c1": [0, 1], "c2": [2, 3]}
    assert json.loads(await mqadmin("allocateMQ", "-n", n, "-t", TOPIC, "-i", "c1,c2,c3",
                                    "--json"))["result"]["c3"] == [
        {"brokerName": "broker-a", "queueId": 3, "topic": TOPIC}]
    assert "NoSuchTopic" in await mqadmin("allocateMQ", "-n", n, "-t", "NoSuchTopic", "-i", "a",
                                          ok=False)


# ---- with ACL: signed by the tool, admin-only requests refused to a reader ---------------

ADMIN = AclCredentials("rocketmq2", "12345678")
READER = AclCredentials("reader01", "readersecret")


async def test_admin_only_commands_with_acl(cluster: Cluster, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("globalWhiteRemoteAddresses:\n  - 10.254.254.254\naccounts:\n"
                   f"  - accessKey: {ADMIN.access_key}\n    secretKey: '{ADMIN.secret_key}'\n"
                   "    admin: true\n"
                   f"  - accessKey: {READER.access_key}\n    secretKey: {READER.secret_key}\n"
                   "    defaultTopicPerm: PUB|SUB\n    defaultGroupPerm: SUB\n")
    ns = cluster.namesrv(aclEnable="true", aclPlainFile=acl)
    b = cluster.broker("broker-a", ns.addr, aclEnable="true", aclPlainFile=acl,
                       brokerAccessKey=ADMIN.access_key, brokerSecretKey=ADMIN.secret_key)
    n = ns.addr
    async with MQAdmin(n, credentials=ADMIN) as admin:
        await admin.create_topic(TOPIC, broker_addr=b.addr, read_queue_nums=2, write_queue_nums=2)
        await wait_until(routed(admin, TOPIC), 10, "routed")
    for args in (("updateKvConfig", "-n", n, "-s", "NS", "-k", "k", "-v", "v"),
                 ("getNamesrvConfig", "-n", n),
                 ("updateSubGroup", "-n", n, "-b", b.addr, "-g", "AclGroup"),
                 ("skipAccumulatedMessage", "-n", n, "-g", "AclGroup", "-t", TOPIC)):
        err = await mqadmin(*args, cred=READER, ok=False)
        assert "Need admin permission" in err, (args, err)
        await mqadmin(*args, cred=ADMIN)
    assert "No accessKey" in await mqadmin("deleteKvConfig", "-n", n, "-s", "NS", "-k", "k",
                                           ok=False)
