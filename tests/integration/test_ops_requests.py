"""Operators' requests against live daemons, in both codecs: VIEW_BROKER_STATS_DATA,
QUERY_TOPIC_CONSUME_BY_WHO, GET_PRODUCER_CONNECTION_LIST, GET/UPDATE_BROKER_CONFIG
(surviving a restart), GET_BROKER_RUNTIME_INFO's figures, ADD/WIPE_WRITE_PERM_OF_BROKER."""

from __future__ import annotations

from typing import Any

import pytest

from client import Message, Producer, PullConsumer
from client.admin import MQAdmin
from protocol.body import pack_body
from protocol.codecs import ROCKETMQ_JSON
from protocol.codecs.base import Codec
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.message import MessageQueue
from protocol.route import PERM_WRITE
from protocol.trio import RemotingClient
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPIC = "OpsTopic"
GROUP = "ops-group"
PRODUCER = "ops-producer"
CODECS = {"msgpack": None, "rocketmq-json": ROCKETMQ_JSON}


async def call(rc: RemotingClient, addr: str, code: int, fields: dict[str, Any] | None = None,
               body: bytes | None = None) -> RemotingCommand:
    return await rc.invoke(addr, RemotingCommand.request(code, fields or {}, body), 5)


@pytest.mark.parametrize("codec_name", list(CODECS))
async def test_ops_requests(cluster: Cluster, codec_name: str) -> None:
    codec: Codec | None = CODECS[codec_name]
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2,
                                 write_queue_nums=2)
        await wait_until(routed(admin, TOPIC), 10, "routed")
    async with RemotingClient(codec=codec) as rc:
        async with Producer(PRODUCER, ns.addr) as producer:
            for i in range(10):
                await producer.send(Message(TOPIC, b"m%d" % i),
                                    MessageQueue(TOPIC, "broker-a", i % 2))
        # GET_PRODUCER_CONNECTION_LIST (a producer's heart-beat comes every 30 s: send one)
        hb = {"clientID": "10.0.0.9@ops", "producerDataSet": [{"groupName": PRODUCER}],
              "consumerDataSet": []}
        resp = await call(rc, broker.addr, RequestCode.HEART_BEAT,
                          body=codec.pack_body(hb) if codec else pack_body(hb))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        resp = await call(rc, broker.addr, RequestCode.GET_PRODUCER_CONNECTION_LIST,
                          {"producerGroup": PRODUCER})
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        conns = resp.decode_body()["connectionSet"]
        assert [c["clientId"] for c in conns] == ["10.0.0.9@ops"]
        assert set(conns[0]) == {"clientId", "clientAddr", "language", "version"}
        assert conns[0]["clientAddr"].startswith("127.0.0.1:")
        assert conns[0]["language"] == "PYTHON"
        resp = await call(rc, broker.addr, RequestCode.GET_PRODUCER_CONNECTION_LIST,
                          {"producerGroup": "nobody"})
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == "the producer group[nobody] not exist"
        async with PullConsumer(GROUP, ns.addr) as consumer:
            mq = MessageQueue(TOPIC, "broker-a", 0)
            result = await consumer.pull(mq, "*", 0, 32)
            assert len(result.msg_found_list) == 5
            await consumer.update_consume_offset(mq, 5)

        # VIEW_BROKER_STATS_DATA
        for name, key in (("TOPIC_PUT_NUMS", TOPIC), ("TOPIC_PUT_SIZE", TOPIC),
                          ("GROUP_GET_NUMS", f"{TOPIC}@{GROUP}"),
                          ("GROUP_GET_SIZE", f"{TOPIC}@{GROUP}"),
                          ("BROKER_PUT_NUMS", "broker-a"), ("BROKER_GET_NUMS", "broker-a")):
            resp = await call(rc, broker.addr, RequestCode.VIEW_BROKER_STATS_DATA,
                              {"statsName": name, "statsKey": key})
            assert resp.code == ResponseCode.SUCCESS, (name, resp.remark)
            body = resp.decode_body()
            assert set(body) == {"statsMinute", "statsHour", "statsDay"}
            assert set(body["statsDay"]) == {"sum", "tps", "avgpt"}
        resp = await call(rc, broker.addr, RequestCode.VIEW_BROKER_STATS_DATA,
                          {"statsName": "TOPIC_PUT_NUMS", "statsKey": "NoSuchTopic"})
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == "The stats <TOPIC_PUT_NUMS> <NoSuchTopic> not exist"
        resp = await call(rc, broker.addr, RequestCode.VIEW_BROKER_STATS_DATA, {"statsKey": "x"})
        assert resp.code != ResponseCode.SUCCESS and "statsName" in (resp.remark or "")

        # QUERY_TOPIC_CONSUME_BY_WHO
        resp = await call(rc, broker.addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
                          {"topic": TOPIC})
        assert resp.code == ResponseCode.SUCCESS
        assert resp.decode_body() == {"groupList": [GROUP]}

        # GET_BROKER_RUNTIME_INFO's figures
        resp = await call(rc, broker.addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        table = resp.decode_body()["table"]
        assert table["msgPutTotal"] == 10 and table["msgGetTotal"] == 5
        assert len(table["putTps"].split()) == 3
        assert 0 <= table["commitLogDiskRatio"] <= 1
        for key in ("bootTimestamp", "runtime", "version", "heldPulls", "putTps1m",
                    "getTps1m", "pageCacheLockTimeMills", "startAcceptSendRequestTimeStamp"):
            assert key in table

        # GET/UPDATE_BROKER_CONFIG
        resp = await call(rc, broker.addr, RequestCode.GET_BROKER_CONFIG)
        assert resp.code == ResponseCode.SUCCESS
        text = (resp.body or b"").decode()
        assert "brokerName=broker-a\n" in text and "maxMessageSize=4194304\n" in text
        for bad, named in ((b"listenPort=1\n", "listenPort"),
                           (b"maxMessageSize=1000\nflushDiskType=SYNC_FLUSH\n", "flushDiskType"),
                           (b"maxMessageSize=lots\n", "maxMessageSize"),
                           (b"brokerPermission=16\n", "brokerPermission"),
                           (b"", "no key")):
            resp = await call(rc, broker.addr, RequestCode.UPDATE_BROKER_CONFIG, body=bad)
            assert resp.code == ResponseCode.SYSTEM_ERROR and named in (resp.remark or ""), (
                bad, resp.remark)
        resp = await call(rc, broker.addr, RequestCode.GET_BROKER_CONFIG)
        assert "maxMessageSize=4194304\n" in (resp.body or b"").decode()  # nothing applied
        resp = await call(rc, broker.addr, RequestCode.UPDATE_BROKER_CONFIG,
                          body=b"# smaller\nmaxMessageSize=1000\nlongPollingMaxSuspendMillis=3000\n")
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        async with Producer(PRODUCER, ns.addr) as producer:
            with pytest.raises(Exception, match="maxMessageSize"):
                await producer.send(Message(TOPIC, b"z" * 2000),
                                    MessageQueue(TOPIC, "broker-a", 0))

    # written into the config file the broker was started from (mqbroker -c), in place
    conf = cluster.root / "broker-a.properties"
    written = conf.read_text().splitlines()
    assert "maxMessageSize=1000" in written and "longPollingMaxSuspendMillis=3000" in written
    assert written[0].startswith("brokerName=")  # the rest of the file is kept
    assert not (cluster.root / "store-broker-a" / "broker.conf.runtime").exists()
    broker.stop()
    broker.start()
    async with RemotingClient(codec=codec) as rc:
        resp = await call(rc, broker.addr, RequestCode.GET_BROKER_CONFIG)
        text = (resp.body or b"").decode()
        assert "maxMessageSize=1000\n" in text and "longPollingMaxSuspendMillis=3000\n" in text

        # ADD/WIPE_WRITE_PERM_OF_BROKER on the name server
        def perm(resp: RemotingCommand) -> int:
            route = resp.decode_body()
            qds = route.get("queueDatas") or route.get("queue_datas")
            return int(qds[0]["perm"])

        resp = await call(rc, ns.addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                          {"brokerName": "broker-a"})
        assert resp.code == ResponseCode.SUCCESS and int(resp.ext_fields["wipeTopicCount"]) >= 1
        route = await call(rc, ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
        assert not perm(route) & PERM_WRITE
        resp = await call(rc, ns.addr, RequestCode.ADD_WRITE_PERM_OF_BROKER,
                          {"brokerName": "broker-a"})
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert int(resp.ext_fields["addTopicCount"]) == int(
            (await call(rc, ns.addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                        {"brokerName": "broker-a"})).ext_fields["wipeTopicCount"])
        await call(rc, ns.addr, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
        route = await call(rc, ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
        assert perm(route) & PERM_WRITE
        resp = await call(rc, ns.addr, RequestCode.ADD_WRITE_PERM_OF_BROKER,
                          {"brokerName": "no such broker!"})
        assert resp.code != ResponseCode.SUCCESS and "brokerName" in (resp.remark or "")

        # brokerPermission at run time: the broker registers its topics with it
        async def route_perm_is(expected: int) -> bool:
            route = await call(rc, ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
            return perm(route) == expected

        for value in (4, 6):
            resp = await call(rc, broker.addr, RequestCode.UPDATE_BROKER_CONFIG,
                              body=f"brokerPermission={value}\n".encode())
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            await wait_until(lambda v=value: route_perm_is(v), 10, f"route perm {value}")
