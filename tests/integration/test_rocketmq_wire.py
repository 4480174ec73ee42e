"""RocketMQ's own wire format against a real name server and broker.

Each test acts as an official client would, through ``RemotingClient`` in
RocketMQ's JSON (or binary) format: "Java" requests carry every header value
as text (RocketMQ's Java client), "C++" requests (``CppJsonCodec``) carry the
numbers and the "0"/"1" booleans the C++ client writes, its empty credential
fields, and its batches as SEND_MESSAGE_V2. What the daemons answer is read
the way those clients read it: JSON bodies, text header values, records whose
offset msgIds name the broker's address.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from client import Message, Producer, PullConsumer, PullStatus, SendStatus
from client.admin import MQAdmin
from client.uniq_id import create_uniq_id
from protocol.batch import encode_batch
from protocol.codecs import ROCKETMQ_BINARY, ROCKETMQ_JSON
from protocol.codecs.base import Codec
from protocol.codecs.rocketmq import JSON_TYPE, RocketMQCodec
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.message import MessageExt, MessageQueue, properties_to_string
from protocol.record import decode_record, decode_records
from protocol.trio.client import RemotingClient
from protocol.trio.connection import HandlerTable, RemotingConnection
from tests.integration.cluster import Cluster, Daemon
from tests.integration.test_bad_input import raw_exchange
from tests.waits import at_least, routed, wait_until

BROKER = "broker-a"
CLUSTER = "DefaultCluster"
TIMEOUT = 10
PREPARED, COMMIT = 0x4, 0x8  # sysFlag transaction types


# ---- the daemons ---------------------------------------------------------------------------


class Daemons:
    def __init__(self, ns: Daemon, broker: Daemon) -> None:
        self.ns, self.broker = ns, broker

    @property
    def ns_addr(self) -> str:
        return self.ns.addr

    @property
    def addr(self) -> str:
        return self.broker.addr


@pytest.fixture(scope="module")
def daemons(module_cluster: Cluster) -> Daemons:
    ns = module_cluster.namesrv()
    # transactions are checked soon after their birth; retries come back after 1 s
    broker = module_cluster.broker(BROKER, ns.addr, transactionCheckInterval=300,
                                   transactionTimeOut=500)
    return Daemons(ns, broker)


async def create_topic(d: Daemons, topic: str, queues: int = 2) -> None:
    async with MQAdmin(d.ns_addr) as admin:
        await admin.create_topic(topic, broker_addr=d.addr, read_queue_nums=queues,
                                 write_queue_nums=queues)
        await wait_until(routed(admin, topic), TIMEOUT, f"{topic} routed")


# ---- clients in RocketMQ's format ----------------------------------------------------------


class CppJsonCodec(RocketMQCodec):
    """Requests as the C++ client (librocketmq 2.0) writes them: header values as
    its ``Encode`` built them (numbers stay JSON numbers), an empty remark, the
    credential fields, language CPP. Everything read is RocketMQ's JSON."""

    def __init__(self) -> None:
        super().__init__(JSON_TYPE)

    def encode(self, cmd: RemotingCommand) -> bytes:
        if cmd.is_response:
            return super().encode(cmd)
        ext = {**cmd.ext_fields, "Signature": "", "AccessKey": "", "OnsChannelKey": ""}
        header = json.dumps({"code": cmd.code, "language": "CPP", "version": 297,
                             "opaque": cmd.opaque, "flag": cmd.flag, "remark": "",
                             "extFields": ext}, separators=(",", ":")).encode()
        return struct.pack(">I", len(header)) + header + (cmd.body or b"")

    def encode_parts(self, cmd: RemotingCommand) -> list[bytes]:
        return [self.encode(cmd)]  # whatever the body's size, this header


class Inbox:
    """Requests the broker sends the client (NOTIFY_CONSUMER_IDS_CHANGED,
    CHECK_TRANSACTION_STATE), kept in arrival order."""

    def __init__(self) -> None:
        self.got: list[RemotingCommand] = []
        self._grew = trio.Event()

    def handle(self, conn: RemotingConnection, cmd: RemotingCommand) -> None:
        self.got.append(cmd)
        self._grew.set()

    def of(self, code: int) -> list[RemotingCommand]:
        return [c for c in self.got if c.code == code]

    async def wait(self, code: int, n: int = 1, timeout: float = TIMEOUT) -> list[RemotingCommand]:
        with trio.fail_after(timeout):
            while len(self.of(code)) < n:
                self._grew = trio.Event()
                await self._grew.wait()
        return self.of(code)


class Client:
    """One official-client stand-in: its connections and what the broker sent it."""

    def __init__(self, rc: RemotingClient, inbox: Inbox, client_id: str) -> None:
        self.rc, self.inbox, self.client_id = rc, inbox, client_id

    async def call(self, addr: str, code: int, fields: dict[str, Any] | None = None,
                   body: bytes | None = None, timeout: float = TIMEOUT) -> RemotingCommand:
        return await self.rc.invoke(addr, RemotingCommand.request(code, fields or {}, body),
                                    timeout)

    async def oneway(self, addr: str, code: int, fields: dict[str, Any],
                     body: bytes | None = None) -> None:
        await self.rc.invoke_oneway(addr, RemotingCommand.request(code, fields, body,
                                                                  oneway=True))


@asynccontextmanager
async def client(codec: Codec, client_id: str) -> AsyncIterator[Client]:
    inbox = Inbox()
    handlers = HandlerTable()
    for code in (RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, RequestCode.CHECK_TRANSACTION_STATE):
        handlers.register(code, inbox.handle)
    async with RemotingClient(handlers, codec=codec) as rc:
        yield Client(rc, inbox, client_id)


def java(client_id: str = "10.0.0.1@java") -> Any:
    return client(ROCKETMQ_JSON, client_id)


def cpp(client_id: str = "10.0.0.2@cpp") -> Any:
    return client(CppJsonCodec(), client_id)


def now_ms() -> int:
    return int(time.time() * 1000)


def props(tags: str | None = None, keys: str | None = None, **more: str) -> tuple[str, str]:
    """(properties text, its UNIQ_KEY), as a client builds them."""
    uniq = create_uniq_id()
    p = {"UNIQ_KEY": uniq, "WAIT": "true", **more}
    if tags:
        p["TAGS"] = tags
    if keys:
        p["KEYS"] = keys
    return properties_to_string(p), uniq


def java_v2(group: str, topic: str, queue_id: int, properties: str, *, batch: bool = False,
            sys_flag: int = 0) -> dict[str, str]:
    """SendMessageRequestHeaderV2 as the Java client sends it."""
    return {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id),
            "f": str(sys_flag), "g": str(now_ms()), "h": "0", "i": properties, "j": "0",
            "k": "false", "m": "true" if batch else "false", "n": BROKER}


def cpp_v2(group: str, topic: str, queue_id: int, properties: str, *,
           batch: bool = False) -> dict[str, Any]:
    """The same header as the C++ client's Encode writes it."""
    return {"a": group, "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0,
            "g": str(now_ms()), "h": 0, "i": properties, "j": "0", "k": "0", "l": 16,
            "m": "1" if batch else "0"}


def java_heartbeat(client_id: str, group: str | None, subs: dict[str, str],
                   producer: str | None = None, version: int = 1000) -> bytes:
    """A Java client's HeartbeatData: enum names, subVersion numbers."""
    data = [{"classFilterMode": False, "codeSet": [], "expressionType": "TAG", "subString": s,
             "subVersion": version, "tagsSet": [] if s == "*" else s.split(" || "),
             "topic": t} for t, s in subs.items()]
    consumers = [] if group is None else [{
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "consumeType": "CONSUME_PASSIVELY",
        "groupName": group, "messageModel": "CLUSTERING", "subscriptionDataSet": data,
        "unitMode": False}]
    producers = [{"groupName": "CLIENT_INNER_PRODUCER"}]
    if producer is not None:
        producers.append({"groupName": producer})
    return json.dumps({"clientID": client_id, "consumerDataSet": consumers,
                       "producerDataSet": producers}).encode()


def cpp_heartbeat(client_id: str, group: str, subs: dict[str, str]) -> bytes:
    """The C++ client's: enum ordinals, subVersion as text."""
    data = [{"topic": t, "subString": s, "subVersion": str(now_ms()),
             "tagsSet": [] if s == "*" else s.split(" || "), "codeSet": []}
            for t, s in subs.items()]
    return json.dumps({"clientID": client_id, "consumerDataSet": [{
        "groupName": group, "consumeType": 1, "messageModel": 1, "consumeFromWhere": 4,
        "subscriptionDataSet": data}], "producerDataSet": []}).encode()


def java_pull(group: str, topic: str, queue_id: int, offset: int, sys_flag: int = 0x2,
              subscription: str | None = None, sub_version: int = 1000) -> dict[str, str]:
    """A Java push consumer's pull: suspend, no subscription of its own."""
    fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id),
              "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": str(sys_flag),
              "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": str(sub_version),
              "expressionType": "TAG"}
    if subscription is not None:
        fields["subscription"] = subscription
    return fields


def offset_msg_id(addr: str, commit_log_offset: int) -> str:
    """What RocketMQ's clients compute for a record (MessageDecoder.createMessageId)."""
    host, port = addr.rsplit(":", 1)
    return (socket.inet_aton(host) + struct.pack(">iq", int(port), commit_log_offset)).hex().upper()


def pulled(r: RemotingCommand) -> list[MessageExt]:
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    return decode_records(r.body or b"", verify_crc=True)


def text_fields(r: RemotingCommand) -> None:
    """Every response header value is text in RocketMQ's format."""
    assert all(isinstance(v, str) for v in r.ext_fields.values()), r.ext_fields


# ---- routes ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [ROCKETMQ_JSON, ROCKETMQ_BINARY])
async def test_routes_cluster_info_and_tbw102(daemons: Daemons, codec: Codec) -> None:
    topic = f"AutoCreated{codec.name.split('-')[1].title()}"
    async with client(codec, "10.0.0.1@routes") as c:
        r = await c.call(daemons.ns_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        assert (r.remark or "").startswith("No topic route info in name server for the topic")
        # a client that does not know a topic sends by TBW102's route
        r = await c.call(daemons.ns_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        assert r.code == ResponseCode.SUCCESS
        route = json.loads(r.body or b"")
        assert route["brokerDatas"] == [{"cluster": CLUSTER, "brokerName": BROKER,
                                         "brokerAddrs": {"0": daemons.addr}}]
        [qd] = route["queueDatas"]
        assert qd["brokerName"] == BROKER and qd["perm"] & 0x1  # inheritable
        # the topic flag under both names (Java up to 4.8 and Go read topicSynFlag)
        assert all(type(qd[k]) is int for k in ("readQueueNums", "writeQueueNums", "perm",
                                                "topicSynFlag", "topicSysFlag"))
        assert route["filterServerTable"] == {}
        # ... and the broker creates the topic from it
        text, _ = props()
        r = await c.call(daemons.addr, RequestCode.SEND_MESSAGE_V2,
                         {**java_v2("auto-pg", topic, 0, text), "d": "3"}, b"first")
        assert r.code == ResponseCode.SUCCESS, r.remark
        text_fields(r)

        async def routed_now() -> Any:
            r = await c.call(daemons.ns_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                             {"topic": topic})
            return json.loads(r.body or b"") if r.code == ResponseCode.SUCCESS else None

        route = await wait_until(routed_now, TIMEOUT, f"{topic} registered")
        assert route["queueDatas"] == [{"brokerName": BROKER, "readQueueNums": 3,
                                        "writeQueueNums": 3, "perm": 6, "topicSynFlag": 0,
                                        "topicSysFlag": 0}]
        r = await c.call(daemons.ns_addr, RequestCode.GET_BROKER_CLUSTER_INFO)
        info = json.loads(r.body or b"")
        assert info["brokerAddrTable"] == {BROKER: {"cluster": CLUSTER, "brokerName": BROKER,
                                                    "brokerAddrs": {"0": daemons.addr}}}
        assert info["clusterAddrTable"] == {CLUSTER: [BROKER]}
        # the name server's KV config answers what RocketMQ's does
        r = await c.call(daemons.ns_addr, RequestCode.GET_KV_CONFIG,
                         {"namespace": "ORDER_TOPIC_CONFIG", "key": topic})
        assert (r.code, r.remark) == (ResponseCode.QUERY_NOT_FOUND,
                                      f"No config item, Namespace: ORDER_TOPIC_CONFIG Key: {topic}")


# ---- retry-topic sends and the batch flag ---------------------------------------------------


async def test_retry_topic_sends_and_the_batch_flag(daemons: Daemons) -> None:
    """A send to ``%RETRY%<group>`` at the group's retry limit lands in its DLQ
    (RocketMQ's handleRetryAndDLQ), from a Java client's header or our SDK's
    producer; a SEND_BATCH_MESSAGE saying batch=false is one message."""
    topic, group = "RetrySendTopic", "retry-send-cg"
    retry, dlq = f"%RETRY%{group}", f"%DLQ%{group}"
    await create_topic(daemons, topic, queues=1)
    async with java("10.0.0.1@retry-send") as c:
        addr = daemons.addr
        # the group's heart-beat creates its retry topic (1 queue)
        hb = java_heartbeat(c.client_id, group, {topic: "*", retry: "*"})
        assert (await c.call(addr, RequestCode.HEART_BEAT, body=hb)).code == ResponseCode.SUCCESS

        async def max_offset(t: str) -> int:
            r = await c.call(addr, RequestCode.GET_MAX_OFFSET, {"topic": t, "queueId": "0"})
            return int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else -1

        ids: dict[bytes, str] = {}
        for body, times, limit in ((b"j15", "15", None), (b"j16", "16", None),
                                   (b"l3-j3", "3", "3")):
            text, _ = props(DELAY="3")
            fields = {**java_v2("retry-pg", retry, 0, text), "j": times}
            if limit is not None:
                fields["l"] = limit  # maxReconsumeTimes
            r = await c.call(addr, RequestCode.SEND_MESSAGE_V2, fields, body)
            assert r.code == ResponseCode.SUCCESS, r.remark
            ids[body] = r.ext_fields["msgId"]
        assert await max_offset(dlq) == 2  # j16 (the group's 16), l3-j3 (the header's 3)
        assert await max_offset(retry) == 0  # j15 waits out its delay in the schedule topic

        # a SEND_BATCH_MESSAGE saying batch=false: its body is one message
        body = encode_batch([(0, b"b0", ""), (0, b"b1", "")])
        r = await c.call(addr, RequestCode.SEND_BATCH_MESSAGE,
                         java_v2("retry-pg", topic, 0, props()[0], batch=False), body)
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert "," not in r.ext_fields["msgId"]
        r = await c.call(addr, RequestCode.PULL_MESSAGE,
                         java_pull(group, topic, 0, 0, sys_flag=0x4, subscription="*"))
        assert [m.body for m in pulled(r)] == [body]

    # our SDK's producer: RECONSUME_TIME/MAX_RECONSUME_TIMES go in the header
    async with Producer("retry-sdk-pg", daemons.ns_addr) as producer:
        sent = await producer.send(Message(retry, b"sdk-j2", properties={
            "RECONSUME_TIME": "2", "MAX_RECONSUME_TIMES": "2"}))
        assert sent.send_status == SendStatus.SEND_OK and sent.offset_msg_id
        ids[b"sdk-j2"] = sent.offset_msg_id
    async with MQAdmin(daemons.ns_addr) as admin:
        for body, where, times in ((b"j16", dlq, 16), (b"l3-j3", dlq, 3), (b"sdk-j2", dlq, 2),
                                   (b"j15", "SCHEDULE_TOPIC_XXXX", 15)):
            m = await admin.view_message(ids[body])
            assert (m.body, m.topic, m.reconsume_times) == (body, where, times)
            assert ("DELAY" in m.properties) == (where != dlq)
            assert "RECONSUME_TIME" not in m.properties and "MAX_RECONSUME_TIMES" not in m.properties
        await wait_until(routed(admin, dlq), TIMEOUT, f"{dlq} registered")
        route = await admin.topic_route(dlq)
        assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == \
            [(1, 1, 2)]  # one queue, write only


# ---- a Java client's whole flow ----------------------------------------------------------


async def test_java_client_flow(daemons: Daemons) -> None:
    topic, group = "JavaTopic", "java-cg"
    retry = f"%RETRY%{group}"
    await create_topic(daemons, topic)
    async with java("10.0.0.1@java-flow") as c:
        addr = daemons.addr
        # SEND_MESSAGE (sendSmartMsg off), SEND_MESSAGE_V2, SEND_BATCH_MESSAGE (V2, m=true)
        sent: list[tuple[bytes, str | None, str]] = []
        p0, u0 = props("TagA", "k0")
        r = await c.call(addr, RequestCode.SEND_MESSAGE, {
            "producerGroup": "java-pg", "topic": topic, "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
            "bornTimestamp": str(now_ms()), "flag": "0", "properties": p0, "reconsumeTimes": "0",
            "unitMode": "false", "batch": "false"}, b"v1-A")
        assert r.code == ResponseCode.SUCCESS, r.remark
        text_fields(r)
        sent.append((b"v1-A", "TagA", u0))
        for body, tag in ((b"v2-B", "TagB"), (b"v2-C", "TagC"), (b"v2-A", "TagA")):
            text, uniq = props(tag, f"key-{tag}")
            r = await c.call(addr, RequestCode.SEND_MESSAGE_V2,
                             java_v2("java-pg", topic, 0, text), body)
            assert r.code == ResponseCode.SUCCESS, r.remark
            sent.append((body, tag, uniq))
        batch = []
        for i, tag in enumerate(("TagA", "TagB")):
            text, uniq = props(tag)
            batch.append((0, f"batch-{i}".encode(), text))
            sent.append((f"batch-{i}".encode(), tag, uniq))
        r = await c.call(addr, RequestCode.SEND_BATCH_MESSAGE,
                         java_v2("java-pg", topic, 0, "", batch=True), encode_batch(batch))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert r.ext_fields["queueOffset"] == "4" and len(r.ext_fields["msgId"].split(",")) == 2

        # heart-beat, then who is in the group
        hb = java_heartbeat(c.client_id, group, {topic: "TagA || TagB", retry: "*"})
        r = await c.call(addr, RequestCode.HEART_BEAT, body=hb)
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = await c.call(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        assert json.loads(r.body or b"") == {"consumerIdList": [c.client_id]}

        # a push consumer's pull (no subscription flag): the heart-beat's tags filter
        r = await c.call(addr, RequestCode.PULL_MESSAGE, java_pull(group, topic, 0, 0))
        text_fields(r)
        assert {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"} <= \
            set(r.ext_fields)
        msgs = pulled(r)
        assert [(m.body, m.tags) for m in msgs] == [(b, t) for b, t, _ in sent if t != "TagC"]
        assert r.ext_fields["nextBeginOffset"] == "6" and r.ext_fields["maxOffset"] == "6"
        # a pull consumer's (with the flag): its own expression
        r = await c.call(addr, RequestCode.PULL_MESSAGE,
                         java_pull(group, topic, 0, 0, sys_flag=0x4, subscription="TagC"))
        assert [m.body for m in pulled(r)] == [b"v2-C"]
        # the records are what the Java client computes from them
        for m, (_, _, uniq) in zip(msgs, [s for s in sent if s[1] != "TagC"], strict=True):
            assert m.store_host == daemons.addr
            assert m.msg_id == offset_msg_id(daemons.addr, m.commit_log_offset)
            assert m.properties["UNIQ_KEY"] == uniq and m.topic == topic and m.queue_id == 0
        # nothing past the end; an offset out of range is corrected
        for offset, code in (("6", ResponseCode.PULL_NOT_FOUND),
                             ("60", ResponseCode.PULL_OFFSET_MOVED)):
            r = await c.call(addr, RequestCode.PULL_MESSAGE,
                             {**java_pull(group, topic, 0, 0), "queueOffset": offset})
            assert r.code == code
            assert {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"} <= \
                set(r.ext_fields)

        # offsets: committed oneway (as the Java client persists them), then read back
        await c.oneway(addr, RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": "3"})
        r = await c.call(addr, RequestCode.QUERY_CONSUMER_OFFSET,
                         {"consumerGroup": group, "topic": topic, "queueId": "0"})
        assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"offset": "3"})
        r = await c.call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": "6"})
        assert r.code == ResponseCode.SUCCESS
        # no offset stored: 0 while the queue's first message is in memory (queue 0,
        # with history, for a group new to it; queue 1, empty), as RocketMQ 4.x
        # answers; QUERY_NOT_FOUND when RocketMQ 5's setZeroIfNotFound is false
        for g, q in ((group, "1"), ("java-new-cg", "0")):
            r = await c.call(addr, RequestCode.QUERY_CONSUMER_OFFSET,
                             {"consumerGroup": g, "topic": topic, "queueId": q})
            assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})
        r = await c.call(addr, RequestCode.QUERY_CONSUMER_OFFSET,
                         {"consumerGroup": "java-new-cg", "topic": topic, "queueId": "0",
                          "setZeroIfNotFound": "false"})
        assert r.code == ResponseCode.QUERY_NOT_FOUND
        for request, expected in ((RequestCode.GET_MAX_OFFSET, "6"),
                                  (RequestCode.GET_MIN_OFFSET, "0")):
            r = await c.call(addr, request, {"topic": topic, "queueId": "0"})
            assert r.ext_fields == {"offset": expected}
        r = await c.call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                         {"topic": topic, "queueId": "0", "timestamp": str(now_ms() + 60_000)})
        assert r.ext_fields == {"offset": "6"}

        # query by key, then view by the offset msgId
        r = await c.call(addr, RequestCode.QUERY_MESSAGE, {
            "topic": topic, "key": "key-TagB", "maxNum": "32", "beginTimestamp": "0",
            "endTimestamp": str(now_ms() + 60_000)})
        assert r.code == ResponseCode.SUCCESS
        assert set(r.ext_fields) == {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"}
        [found] = pulled(r)
        assert found.body == b"v2-B"
        phy = int(found.msg_id[16:], 16)
        r = await c.call(addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phy)})
        viewed = decode_record(r.body or b"", verify_crc=True)
        assert (viewed.body, viewed.msg_id) == (b"v2-B", found.msg_id)

        # a failed message goes back (the record's commit-log offset), and comes back in
        # the group's retry topic after its delay (level 1: 1 s)
        first = msgs[0]
        r = await c.call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, {
            "offset": str(first.commit_log_offset), "group": group, "delayLevel": "1",
            "originMsgId": first.msg_id, "originTopic": topic, "unitMode": "false",
            "maxReconsumeTimes": "16"})
        assert r.code == ResponseCode.SUCCESS, r.remark

        async def retried() -> list[MessageExt]:
            r = await c.call(addr, RequestCode.PULL_MESSAGE, java_pull(group, retry, 0, 0))
            return pulled(r) if r.code == ResponseCode.SUCCESS else []

        [back] = await wait_until(retried, 15, "the message back in the retry topic")
        assert (back.body, back.reconsume_times) == (first.body, 1)
        assert back.properties["RETRY_TOPIC"] == topic
        assert back.properties["ORIGIN_MESSAGE_ID"] == first.msg_id

        # queue locks (orderly consumption)
        mq = {"topic": topic, "brokerName": BROKER, "queueId": 0}

        def lock_body(cid: str) -> bytes:
            return json.dumps({"consumerGroup": group, "clientId": cid, "onlyThisBroker": False,
                               "mqSet": [mq]}).encode()

        r = await c.call(addr, RequestCode.LOCK_BATCH_MQ, body=lock_body(c.client_id))
        assert json.loads(r.body or b"") == {"lockOKMQSet": [mq]}
        r = await c.call(addr, RequestCode.LOCK_BATCH_MQ, body=lock_body("10.0.0.9@other"))
        assert json.loads(r.body or b"") == {"lockOKMQSet": []}
        await c.oneway(addr, RequestCode.UNLOCK_BATCH_MQ, {}, lock_body(c.client_id))
        r = await c.call(addr, RequestCode.LOCK_BATCH_MQ, body=lock_body("10.0.0.9@other"))
        assert json.loads(r.body or b"") == {"lockOKMQSet": [mq]}

        r = await c.call(addr, RequestCode.UNREGISTER_CLIENT, {
            "clientID": c.client_id, "producerGroup": "", "consumerGroup": group})
        assert r.code == ResponseCode.SUCCESS
        r = await c.call(addr, RequestCode.PULL_MESSAGE, java_pull(group, topic, 0, 0))
        assert (r.code, r.remark) == (ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                      "the consumer's group info not exist")


# ---- a C++ client's ------------------------------------------------------------------------


async def test_cpp_client_flow(daemons: Daemons) -> None:
    topic, group = "CppTopic", "cpp-cg"
    await create_topic(daemons, topic, queues=1)
    async with cpp() as c:
        addr = daemons.addr
        text, uniq = props("TagA", "cpp-key")
        r = await c.call(addr, RequestCode.SEND_MESSAGE_V2, cpp_v2("cpp-pg", topic, 0, text),
                         b"single")
        assert r.code == ResponseCode.SUCCESS, r.remark
        # the C++ client sends its batches as SEND_MESSAGE_V2 with m=1
        items = [(0, f"cpp-batch-{i}".encode(), props("TagB")[0]) for i in range(3)]
        r = await c.call(addr, RequestCode.SEND_MESSAGE_V2,
                         cpp_v2("cpp-pg", topic, 0, "", batch=True), encode_batch(items))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert (r.ext_fields["queueOffset"], len(r.ext_fields["msgId"].split(","))) == ("1", 3)

        r = await c.call(addr, RequestCode.HEART_BEAT,
                         body=cpp_heartbeat(c.client_id, group, {topic: "TagB"}))
        assert r.code == ResponseCode.SUCCESS, r.remark
        # its pulls carry their subscription and say so (numbers as JSON numbers)
        pull = {"consumerGroup": group, "topic": topic, "queueId": 0, "queueOffset": "0",
                "maxMsgNums": 32, "sysFlag": 0x4 | 0x1, "commitOffset": "0",
                "subVersion": "0", "suspendTimeoutMillis": "0", "subscription": "TagA"}
        msgs = pulled(await c.call(addr, RequestCode.PULL_MESSAGE, pull))
        assert [(m.body, m.properties["UNIQ_KEY"]) for m in msgs] == [(b"single", uniq)]
        # without the flag the heart-beat's TagB decides
        msgs = pulled(await c.call(addr, RequestCode.PULL_MESSAGE, {**pull, "sysFlag": 0}))
        assert [m.body for m in msgs] == [f"cpp-batch-{i}".encode() for i in range(3)]
        assert all(m.msg_id == offset_msg_id(daemons.addr, m.commit_log_offset) for m in msgs)

        await c.oneway(addr, RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": topic, "queueId": 0, "commitOffset": "4"})
        r = await c.call(addr, RequestCode.QUERY_CONSUMER_OFFSET,
                         {"consumerGroup": group, "topic": topic, "queueId": 0})
        assert r.ext_fields == {"offset": "4"}
        r = await c.call(addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0})
        assert r.ext_fields == {"offset": "4"}
        r = await c.call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                         {"topic": topic, "queueId": 0, "timestamp": "0"})
        assert r.ext_fields == {"offset": "0"}
        r = await c.call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, {
            "group": group, "delayLevel": -1, "offset": str(msgs[0].commit_log_offset),
            "unitMode": "0", "originMsgId": msgs[0].msg_id, "originTopic": topic,
            "maxReconsumeTimes": 16})
        assert r.code == ResponseCode.SUCCESS, r.remark  # straight to the dead letters
        r = await c.call(addr, RequestCode.GET_MAX_OFFSET, {"topic": f"%DLQ%{group}",
                                                            "queueId": 0})
        assert r.ext_fields == {"offset": "1"}
        r = await c.call(addr, RequestCode.VIEW_MESSAGE_BY_ID,
                         {"offset": str(msgs[1].commit_log_offset)})
        assert decode_record(r.body or b"").body == b"cpp-batch-1"
        r = await c.call(addr, RequestCode.UNREGISTER_CLIENT, {
            "clientID": c.client_id, "producerGroup": "", "consumerGroup": group})
        assert r.code == ResponseCode.SUCCESS


# ---- broker-to-client requests ---------------------------------------------------------------


async def test_consumer_ids_changed_reaches_both_formats(daemons: Daemons) -> None:
    topic, group = "NotifyTopic", "notify-cg"
    await create_topic(daemons, topic, queues=1)
    async with java("10.0.0.1@notify-java") as a, cpp("10.0.0.2@notify-cpp") as b:
        r = await a.call(daemons.addr, RequestCode.HEART_BEAT,
                         body=java_heartbeat(a.client_id, group, {topic: "*"}))
        assert r.code == ResponseCode.SUCCESS
        first = len(a.inbox.of(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED))
        # another member joins: the first is told, in its own format
        r = await b.call(daemons.addr, RequestCode.HEART_BEAT,
                         body=cpp_heartbeat(b.client_id, group, {topic: "*"}))
        assert r.code == ResponseCode.SUCCESS
        notes = await a.inbox.wait(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, first + 1)
        assert notes[-1].ext_fields == {"consumerGroup": group} and notes[-1].is_oneway
        assert notes[-1].codec is ROCKETMQ_JSON
        r = await a.call(daemons.addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                         {"consumerGroup": group})
        assert json.loads(r.body or b"") == {"consumerIdList": sorted([a.client_id,
                                                                       b.client_id])}
        # and the second when the first leaves
        seen = len(b.inbox.of(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED))
        await a.oneway(daemons.addr, RequestCode.UNREGISTER_CLIENT, {
            "clientID": a.client_id, "producerGroup": "", "consumerGroup": group})
        notes = await b.inbox.wait(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, seen + 1)
        assert notes[-1].ext_fields == {"consumerGroup": group}


async def test_transactions_end_and_check_on_a_rocketmq_connection(daemons: Daemons) -> None:
    topic, producer_group, group = "TxWireTopic", "tx-wire-pg", "tx-wire-cg"
    await create_topic(daemons, topic, queues=1)
    async with java("10.0.0.1@tx") as c, java("10.0.0.1@tx-reader") as reader:
        addr = daemons.addr
        # the producer's heart-beat: where the broker asks about its transactions
        r = await c.call(addr, RequestCode.HEART_BEAT,
                         body=java_heartbeat(c.client_id, None, {}, producer=producer_group))
        assert r.code == ResponseCode.SUCCESS

        async def half(body: bytes) -> tuple[RemotingCommand, str]:
            text, uniq = props("TagT", TRAN_MSG="true", PGROUP=producer_group)
            r = await c.call(addr, RequestCode.SEND_MESSAGE_V2,
                             java_v2(producer_group, topic, 0, text, sys_flag=PREPARED), body)
            assert r.code == ResponseCode.SUCCESS, r.remark
            return r, uniq

        # committed at once (END_TRANSACTION is oneway), as a local transaction that succeeded
        r, uniq = await half(b"committed")
        offset = int(r.ext_fields["msgId"][16:], 16)
        await c.oneway(addr, RequestCode.END_TRANSACTION, {
            "producerGroup": producer_group, "tranStateTableOffset": r.ext_fields["queueOffset"],
            "commitLogOffset": str(offset), "commitOrRollback": str(COMMIT),
            "fromTransactionCheck": "false", "msgId": uniq, "transactionId": uniq})
        pull = java_pull(group, topic, 0, 0, sys_flag=0x4, subscription="*")

        async def visible() -> list[MessageExt]:
            r = await reader.call(addr, RequestCode.PULL_MESSAGE, pull)
            return pulled(r) if r.code == ResponseCode.SUCCESS else []

        assert [m.body for m in await wait_until(visible, TIMEOUT, "the commit")] == [b"committed"]

        # left unknown: the broker asks this connection, in its format
        _, uniq = await half(b"checked")
        with trio.fail_after(20):  # the first check of this half message
            n = 1
            while True:
                checks = await c.inbox.wait(RequestCode.CHECK_TRANSACTION_STATE, n, timeout=20)
                mine = [k for k in checks if k.ext_fields.get("msgId") == uniq]
                if mine:
                    check = mine[0]
                    break
                n = len(checks) + 1
        assert check.is_oneway and check.codec is ROCKETMQ_JSON
        h = check.ext_fields
        assert {"msgId", "transactionId", "offsetMsgId", "commitLogOffset",
                "tranStateTableOffset"} <= set(h)
        text_fields(check)
        assert h["msgId"] == h["transactionId"] == uniq
        msg = decode_record(check.body or b"")
        assert (msg.body, msg.topic, msg.queue_id, msg.properties["UNIQ_KEY"]) == \
            (b"checked", topic, 0, uniq)
        assert msg.properties["PGROUP"] == producer_group
        assert h["offsetMsgId"] == offset_msg_id(daemons.addr, int(h["commitLogOffset"]))
        # the producer's answer, as the Java client's checkTransactionState sends it
        await c.oneway(addr, RequestCode.END_TRANSACTION, {
            "producerGroup": producer_group, "tranStateTableOffset": h["tranStateTableOffset"],
            "commitLogOffset": h["commitLogOffset"], "commitOrRollback": str(COMMIT),
            "fromTransactionCheck": "true", "msgId": uniq, "transactionId": h["transactionId"]})

        async def both() -> list[bytes]:
            bodies = [m.body for m in await visible()]
            return bodies if len(bodies) == 2 else []

        assert await wait_until(both, TIMEOUT, "the checked commit") == [b"committed", b"checked"]


# ---- the same messages through both formats --------------------------------------------------


async def test_messages_cross_between_formats(daemons: Daemons) -> None:
    topic = "CrossTopic"
    await create_topic(daemons, topic, queues=1)
    # this project's producer (msgpack) -> a RocketMQ-format pull
    async with Producer("cross-pg", daemons.ns_addr) as producer:
        result = await producer.send(Message(topic, b"from-sdk", tags="TagS", keys="sdk-key",
                                             properties={"color": "blue"}))
        assert result.send_status == SendStatus.SEND_OK
    async with java("10.0.0.1@cross") as c:
        [m] = pulled(await c.call(daemons.addr, RequestCode.PULL_MESSAGE,
                                  java_pull("cross-cg", topic, 0, 0, 0x4, "TagS")))
        assert (m.body, m.tags, m.keys, m.properties["color"]) == \
            (b"from-sdk", "TagS", "sdk-key", "blue")
        assert m.msg_id == result.offset_msg_id == offset_msg_id(daemons.addr,
                                                                 m.commit_log_offset)
        assert m.uniq_key == result.msg_id
        # RocketMQ-format sends -> this project's consumer
        born = now_ms()
        text, uniq = props("TagR", "rmq-key", color="red")
        r = await c.call(daemons.addr, RequestCode.SEND_MESSAGE_V2,
                         {**java_v2("cross-pg", topic, 0, text), "g": str(born), "h": "5"},
                         b"from-java")
        assert r.code == ResponseCode.SUCCESS, r.remark
    async with cpp() as c:
        text2, _ = props("TagR")
        r = await c.call(daemons.addr, RequestCode.SEND_MESSAGE_V2,
                         cpp_v2("cross-pg", topic, 0, "", batch=True),
                         encode_batch([(0, b"from-cpp", text2)]))
        assert r.code == ResponseCode.SUCCESS, r.remark
    async with PullConsumer("cross-sdk-cg", daemons.ns_addr) as consumer:
        r2 = await consumer.pull(MessageQueue(topic, BROKER, 0), "TagR", 0, 32)
        assert r2.pull_status == PullStatus.FOUND
        got = r2.msg_found_list
        assert [m.body for m in got] == [b"from-java", b"from-cpp"]
        assert (got[0].keys, got[0].properties["color"], got[0].uniq_key, got[0].flag,
                got[0].born_timestamp) == ("rmq-key", "red", uniq, 5, born)


# ---- bad input in RocketMQ's format ------------------------------------------------------------


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def json_payload(header: bytes, body: bytes = b"", declared: int | None = None,
                 stype: int = 0) -> bytes:
    length = len(header) if declared is None else declared
    return struct.pack(">I", (stype << 24) | length) + header + body


def first_response(data: bytes) -> RemotingCommand:
    (n,) = struct.unpack(">I", data[:4])
    return ROCKETMQ_JSON.decode(data[4:4 + n])


def header(code: int, ext: Any, opaque: int = 4242) -> bytes:
    return json.dumps({"code": code, "flag": 0, "language": "JAVA", "opaque": opaque,
                       "serializeTypeCurrentRPC": "JSON", "version": 433,
                       "extFields": ext}).encode()


async def test_bad_input_in_rocketmq_format(daemons: Daemons) -> None:
    topic = "WireGoodTopic"
    await create_topic(daemons, topic, queues=1)
    port = daemons.broker.port
    good_sent = 0
    stop = trio.Event()

    async def good_client() -> None:
        nonlocal good_sent
        async with Producer("wire-good-producer", daemons.ns_addr) as producer:
            with trio.fail_after(60):
                while not stop.is_set():
                    r = await producer.send(Message(topic, b"fine"))
                    assert r.send_status == SendStatus.SEND_OK
                    good_sent += 1
                    await trio.sleep(0.002)

    closes: list[tuple[str, bytes]] = [
        ("frame shorter than its header length word", frame(b"\x00\x00")),
        ("truncated header", frame(json_payload(b'{"code":10,"opaque":1', declared=200))),
        ("header length past the frame", frame(json_payload(header(10, {}), declared=1 << 20))),
        ("bad JSON", frame(json_payload(b'{"code":10,"opaque":1,,}'))),
        ("header not an object", frame(json_payload(b"[10, 1]"))),
        ("code of the wrong type", frame(json_payload(header(10, {}).replace(b'"code": 10',
                                                                             b'"code": [10]')))),
        ("binary header cut short", frame(json_payload(b"\x00\x0a\x00", stype=1))),
        ("unknown serialization type", frame(json_payload(header(10, {}), stype=7))),
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(good_client)
        await wait_until(at_least(lambda: good_sent, 1), TIMEOUT, "good client running")
        for what, data in closes:
            got = await raw_exchange(port, data)
            assert got == b"<closed>", what
        # readable code and opaque: an error answer, and the connection stays
        got = await raw_exchange(port, frame(json_payload(header(10, {"topic": ["x"]}))))
        resp = first_response(got)
        assert (resp.code, resp.opaque) == (ResponseCode.SYSTEM_ERROR, 4242)
        assert "extFields" in (resp.remark or "")
        got = await raw_exchange(port, frame(json_payload(header(9999, {}))))
        resp = first_response(got)
        assert (resp.code, resp.opaque) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 4242)

        async with java("10.0.0.1@bad") as c:
            checks: list[tuple[int, dict[str, Any], bytes | None, Callable[[Any], bool]]] = [
                # wrong types in the header, named
                (RequestCode.SEND_MESSAGE_V2, {**java_v2("bad-pg", topic, 0, ""), "e": "zero"},
                 b"x", lambda r: r.code == ResponseCode.SYSTEM_ERROR and "'e'" in r.remark),
                (RequestCode.SEND_MESSAGE_V2, {"b": topic}, b"x",
                 lambda r: r.code == ResponseCode.SYSTEM_ERROR and "'a'" in r.remark),
                (RequestCode.PULL_MESSAGE, {**java_pull("g", topic, 0, 0), "sysFlag": "x"},
                 None, lambda r: r.code == ResponseCode.SYSTEM_ERROR and "sysFlag" in r.remark),
                (RequestCode.GET_KV_CONFIG, {"namespace": "n"}, None,
                 lambda r: r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED),  # a broker
                # bodies: not JSON, a batch that does not hold together
                (RequestCode.HEART_BEAT, {}, b"{nope",
                 lambda r: r.code == ResponseCode.SYSTEM_ERROR),
                (RequestCode.HEART_BEAT, {}, b'{"clientID": 5}',
                 lambda r: r.code == ResponseCode.SYSTEM_ERROR and "clientID" in r.remark),
                (RequestCode.LOCK_BATCH_MQ, {}, b'{"consumerGroup": "g", "mqSet": 3}',
                 lambda r: r.code == ResponseCode.SYSTEM_ERROR),
                (RequestCode.SEND_BATCH_MESSAGE, java_v2("bad-pg", topic, 0, "", batch=True),
                 b"\x00\x00\x00\x30junk", lambda r: r.code == ResponseCode.SYSTEM_ERROR),
                (9999, {}, None, lambda r: r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED),
            ]
            for code, fields, body, ok in checks:
                r = await c.call(daemons.addr, code, fields, body)
                assert ok(r), (code, r.code, r.remark)
            # the same connection is still served
            text, _ = props()
            r = await c.call(daemons.addr, RequestCode.SEND_MESSAGE_V2,
                             java_v2("bad-pg", topic, 0, text), b"ok")
            assert r.code == ResponseCode.SUCCESS
            r = await c.call(daemons.ns_addr, RequestCode.PUT_KV_CONFIG,
                             {"namespace": "ns\x01", "key": "k", "value": "v"})
            assert r.code == ResponseCode.SYSTEM_ERROR and "'namespace'" in (r.remark or "")
        for what, data in closes[:3]:  # the name server too
            assert await raw_exchange(daemons.ns.port, data) == b"<closed>", what

        before = good_sent
        await wait_until(at_least(lambda: good_sent - before, 3), TIMEOUT,
                         "the msgpack client still served")
        stop.set()
    assert daemons.broker.proc is not None and daemons.broker.proc.poll() is None
    assert daemons.ns.proc is not None and daemons.ns.proc.poll() is None
