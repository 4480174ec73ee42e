"""RocketMQ's remoting wire format (protocol/codecs/rocketmq.py).

Golden frames: each request and response below is written here as a RocketMQ
client or broker puts it on the wire: the JSON header as literal text (Java's
fastjson: keys in alphabetical order, every extFields value a string; the C++
client's jsoncpp: keys sorted, some int fields as JSON numbers, booleans "0"/"1",
``"remark":""`` and a trailing newline), or RocketMQ's binary header packed
field by field. Each must decode to the expected command, its header class or
body must read the expected typed values, and our encoder must write the same
bytes back (C++ frames: the same command, with text values).

Then property tests (round trips, garbage), bad input, and the body codecs.
"""

from __future__ import annotations

import io
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import headers
from protocol.batch import decode_batch
from protocol.client_data import ConsumerData, HeartbeatData, LockBatchRequestBody, SubscriptionData
from protocol.codecs import MSGPACK, ROCKETMQ_BINARY, ROCKETMQ_JSON, Codec, detect
from protocol.codecs.base import UNKNOWN_LENGTH, NotAMapError
from protocol.codecs.msgpack_codec import MsgpackBodyReader
from protocol.codecs.rocketmq import LANGUAGES, JsonBodyReader
from protocol.codes import RequestCode, ResponseCode
from protocol.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.frame import FrameDecoder
from protocol.headers import (
    CheckTransactionStateRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    GetKVConfigRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from protocol.record import decode_records, encode_record, pack_host
from protocol.route import BrokerData, QueueData, TopicRouteData

README = Path(__file__).resolve().parents[2] / "protocol" / "README.md"

# ---- building frames by hand ---------------------------------------------------------


def json_payload(header: str, body: bytes = b"") -> bytes:
    """A frame payload (what FrameDecoder yields): serialization type 0 and the
    header length in one big-endian int, the JSON header, the body."""
    raw = header.encode("utf-8")
    return struct.pack(">I", (0 << 24) | len(raw)) + raw + body


def binary_payload(code: int, language: int, version: int, opaque: int, flag: int,
                   remark: str, ext: list[tuple[str, str]], body: bytes = b"") -> bytes:
    """A frame payload with RocketMQ's binary header (serialization type 1)."""
    entries = b""
    for key, value in ext:
        k, v = key.encode(), value.encode()
        entries += struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
    r = remark.encode()
    header = (struct.pack(">h", code) + struct.pack(">b", language) + struct.pack(">h", version)
              + struct.pack(">i", opaque) + struct.pack(">i", flag)
              + struct.pack(">i", len(r)) + r
              + struct.pack(">i", len(entries)) + entries)
    return struct.pack(">I", (1 << 24) | len(header)) + header + body


def framed(payload: bytes) -> bytes:
    """The whole frame: the total length (4 + header + body) first."""
    return struct.pack(">I", len(payload)) + payload


def decode(payload: bytes) -> RemotingCommand:
    return detect(payload).decode(payload)


JAVA, CPP, PYTHON = 0, 1, 3  # RocketMQ's LanguageCode bytes
# The empty credentials the C++ client writes into every request (SessionCredentials).
CPP_CREDENTIALS = {"AccessKey": "", "OnsChannel": "", "Signature": ""}

PROPS = "UNIQ_KEY\x017F000001A1B2C3D4E5F60000000A0001\x02WAIT\x01true\x02TAGS\x01TagA\x02"
CPP_PROPS = "TAGS\x01TagA\x02UNIQ_KEY\x017F000001A1B2C3D4E5F60000000A0001\x02"
MSG_ID = "C0A8000700002A9F0000000000001000"
UNIQ = "7F000001A1B2C3D4E5F60000000A0002"

# A batch of two messages in RocketMQ's batch layout (MessageDecoder.encodeMessage):
# total size, magic code, body CRC, flag, body length + body, properties length + properties.
BATCH_BODY = (
    b"\x00\x00\x00\x25" b"\x00\x00\x00\x00" b"\x00\x00\x00\x00" b"\x00\x00\x00\x00"
    b"\x00\x00\x00\x02" b"m1" b"\x00\x0d" b"KEYS\x01order-1\x02"
    b"\x00\x00\x00\x25" b"\x00\x00\x00\x00" b"\x00\x00\x00\x00" b"\x00\x00\x00\x05"
    b"\x00\x00\x00\x02" b"m2" b"\x00\x0d" b"KEYS\x01order-2\x02"
)
BATCH_ITEMS = [(0, b"m1", "KEYS\x01order-1\x02"), (5, b"m2", "KEYS\x01order-2\x02")]

JAVA_HEARTBEAT = (
    b'{"clientID":"192.168.0.7@12345","consumerDataSet":[{"consumeFromWhere":'
    b'"CONSUME_FROM_FIRST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"CG_ORDER",'
    b'"messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,'
    b'"codeSet":[2598919,2598920],"expressionType":"TAG","subString":"TagA || TagB",'
    b'"subVersion":1700000000000,"tagsSet":["TagA","TagB"],"topic":"TopicTest"}],'
    b'"unitMode":false}],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"},'
    b'{"groupName":"PG_ORDER"}]}'
)
# The C++ client: enum ordinals, subVersion as text, codeSet from atoi(tag) (zeros).
CPP_HEARTBEAT = (
    b'{"clientID":"192.168.0.7@23456","consumerDataSet":[{"consumeFromWhere":4,'
    b'"consumeType":1,"groupName":"CG_ORDER","messageModel":1,"subscriptionDataSet":'
    b'[{"codeSet":[0,0],"subString":"TagA || TagB","subVersion":"1700000000000",'
    b'"tagsSet":["TagA","TagB"],"topic":"TopicTest"}]}],"producerDataSet":'
    b'[{"groupName":"PG_ORDER"}]}\n'
)


def heartbeat(client_id: str, producers: list[str], code_set: list[int]) -> HeartbeatData:
    return HeartbeatData(client_id, producers, [ConsumerData(
        group_name="CG_ORDER", consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", unit_mode=False,
        subscriptions=[SubscriptionData(topic="TopicTest", sub_string="TagA || TagB",
                                        tags_set=["TagA", "TagB"], code_set=code_set,
                                        expression_type="TAG", sub_version=1700000000000)])])


JAVA_LOCK = (b'{"clientId":"192.168.0.7@12345","consumerGroup":"CG_ORDER","mqSet":'
             b'[{"brokerName":"broker-a","queueId":0,"topic":"TopicTest"},'
             b'{"brokerName":"broker-a","queueId":1,"topic":"TopicTest"}],"onlyThisBroker":false}')
CPP_LOCK = (b'{"clientId":"192.168.0.7@23456","consumerGroup":"CG_ORDER","mqSet":'
            b'[{"brokerName":"broker-a","queueId":0,"topic":"TopicTest"},'
            b'{"brokerName":"broker-a","queueId":1,"topic":"TopicTest"}]}\n')
LOCK_MQS = [("TopicTest", "broker-a", 0), ("TopicTest", "broker-a", 1)]


def record(queue_offset: int, body: bytes, props: str, topic: str = "TopicTest") -> bytes:
    """A commit-log record as a pull response or a transaction check carries it."""
    return encode_record(
        topic=topic.encode(), queue_id=2, flag=0, body=body, properties=props.encode(),
        sys_flag=0, born_timestamp=1700000000123, born_host=pack_host("192.168.0.7:52000"),
        store_timestamp=1700000000456, store_host=pack_host("192.168.0.7:10911"),
        reconsume_times=0, prepared_transaction_offset=0, queue_offset=queue_offset,
        physical_offset=4096 + 200 * queue_offset)


PULL_BODY = record(128, b"Hello", "TAGS\x01TagA\x02") + record(129, b"World", "TAGS\x01TagB\x02")
HALF_RECORD = record(17, b"order", "TRAN_MSG\x01true\x02PGROUP\x01PG_TX\x02", "RMQ_SYS_TRANS_HALF_TOPIC")

ROUTE = TopicRouteData(
    queue_datas=[QueueData("broker-a", 4, 4, 6)],
    broker_datas=[BrokerData("DefaultCluster", "broker-a", {0: "192.168.0.7:10911"})])


def header_of(cls: type[headers.Header]) -> Callable[[RemotingCommand], Any]:
    return lambda cmd: cls.from_fields(cmd.ext_fields)


# ---- the golden frames ---------------------------------------------------------------


@dataclass
class Golden:
    id: str
    payload: bytes
    code: int
    opaque: int
    flag: int
    ext: dict[str, Any]
    language: str = "JAVA"
    remark: str | None = None
    body: bytes | None = None
    # (how to read the command, what it must read): header classes, bodies
    reads: list[tuple[Callable[[RemotingCommand], Any], Any]] = field(default_factory=list)
    # our encoder writes these very bytes back (False: a C++ frame, which we write
    # with text values, serializeTypeCurrentRPC and no newline)
    exact: bool = True
    # the command our code builds for this frame (responses, broker -> client requests)
    ours: Callable[[], RemotingCommand] | None = None
    # the frame protocol/README.md shows for this request code
    readme: bool = False


def send_header(group: str = "PG_ORDER", props: str = PROPS, queue_id: int = 1,
                max_reconsume: int | None = None, batch: bool = False,
                queue_nums: int = 4) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group=group, topic="TopicTest", queue_id=queue_id, sys_flag=0,
        born_timestamp=1700000000123, flag=0, properties=props, reconsume_times=0,
        default_topic="TBW102", default_topic_queue_nums=queue_nums, unit_mode=False,
        batch=batch, max_reconsume_times=max_reconsume)


PULL_HEADER = PullMessageRequestHeader(
    consumer_group="CG_ORDER", topic="TopicTest", queue_id=2, queue_offset=128, max_msg_nums=32,
    sys_flag=3, commit_offset=120, suspend_timeout_millis=15000, subscription="TagA || TagB",
    sub_version=1700000000000, expression_type="TAG")
SEND_BACK_HEADER = ConsumerSendMsgBackRequestHeader(
    offset=4096, group="CG_ORDER", delay_level=0, origin_msg_id=MSG_ID, origin_topic="TopicTest",
    unit_mode=False, max_reconsume_times=16)
END_TX_HEADER = EndTransactionRequestHeader(
    producer_group="PG_TX", tran_state_table_offset=17, commit_log_offset=8192,
    commit_or_rollback=8, from_transaction_check=False, msg_id=UNIQ, transaction_id=UNIQ)
CHECK_TX_HEADER = CheckTransactionStateRequestHeader(
    tran_state_table_offset=17, commit_log_offset=8192, msg_id=UNIQ, transaction_id=UNIQ,
    offset_msg_id=MSG_ID)


def _our_send_response() -> RemotingCommand:
    request = decode(GOLDEN_BY_ID["java-send-message"].payload)
    return request.response(ResponseCode.SUCCESS, ext_fields=SendMessageResponseHeader(
        msg_id=MSG_ID, queue_id=1, queue_offset=42).to_fields())


def _our_binary_send_response() -> RemotingCommand:
    request = decode(GOLDEN_BY_ID["binary-send-message-v2"].payload)
    return request.response(ResponseCode.SUCCESS, ext_fields=SendMessageResponseHeader(
        msg_id=MSG_ID, queue_id=1, queue_offset=42).to_fields())


def _our_pull_response() -> RemotingCommand:
    request = decode(GOLDEN_BY_ID["java-pull-message"].payload)
    return request.response(ResponseCode.SUCCESS, body=PULL_BODY, ext_fields=PullMessageResponseHeader(
        suggest_which_broker_id=0, next_begin_offset=130, min_offset=0, max_offset=130).to_fields())


ROUTE_BODY = {  # TopicRouteData as RocketMQ's JSON (fastjson leaves a null orderTopicConf out),
    # the topic flag under both names clients read (Java up to 4.8 and Go; Java 4.9 on)
    "queueDatas": [{"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                    "topicSynFlag": 0, "topicSysFlag": 0}],
    "brokerDatas": [{"cluster": "DefaultCluster", "brokerName": "broker-a",
                     "brokerAddrs": {"0": "192.168.0.7:10911"}}],
    "filterServerTable": {},
}


def _our_route_response() -> RemotingCommand:
    request = decode(GOLDEN_BY_ID["java-get-routeinfo"].payload)
    return request.response(ResponseCode.SUCCESS, body=request.encode_body(ROUTE.to_dict()))


def _our_error_response() -> RemotingCommand:
    request = decode(GOLDEN_BY_ID["java-get-routeinfo"].payload)
    return request.response(ResponseCode.TOPIC_NOT_EXIST,
                            "No topic route info in name server for the topic: TopicTest")


def _our_notify() -> RemotingCommand:
    return RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, opaque=21, flag=FLAG_ONEWAY,
                           ext_fields={"consumerGroup": "CG_ORDER"}, codec=ROCKETMQ_JSON)


def _our_check_transaction() -> RemotingCommand:
    return RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, opaque=22, flag=FLAG_ONEWAY,
                           ext_fields=CHECK_TX_HEADER.to_fields(), body=HALF_RECORD,
                           codec=ROCKETMQ_JSON)


GOLDEN: list[Golden] = [
    # ---- name server requests --------------------------------------------------------
    Golden("java-get-routeinfo", json_payload(
        r'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA",'
        r'"opaque":1,"serializeTypeCurrentRPC":"JSON","version":401}'),
        105, 1, 0, {"topic": "TopicTest"},
        reads=[(header_of(GetRouteInfoRequestHeader), GetRouteInfoRequestHeader("TopicTest"))],
        readme=True),
    Golden("cpp-get-routeinfo", json_payload(
        r'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"",'
        r'"topic":"TopicTest"},"flag":0,"language":"CPP","opaque":1,"remark":"","version":333}'
        "\n"),
        105, 1, 0, {**CPP_CREDENTIALS, "topic": "TopicTest"}, language="CPP", remark="",
        reads=[(header_of(GetRouteInfoRequestHeader), GetRouteInfoRequestHeader("TopicTest"))],
        exact=False),
    Golden("binary-get-routeinfo", binary_payload(105, JAVA, 401, 1, 0, "", [("topic", "TopicTest")]),
           105, 1, 0, {"topic": "TopicTest"},
           reads=[(header_of(GetRouteInfoRequestHeader), GetRouteInfoRequestHeader("TopicTest"))]),
    Golden("java-get-broker-cluster-info", json_payload(
        r'{"code":106,"flag":0,"language":"JAVA","opaque":2,"serializeTypeCurrentRPC":"JSON",'
        r'"version":401}'),
        106, 2, 0, {}, readme=True),
    Golden("binary-get-broker-cluster-info", binary_payload(106, JAVA, 401, 2, 0, "", []),
           106, 2, 0, {}),
    Golden("java-get-kv-config", json_payload(
        r'{"code":101,"extFields":{"namespace":"ORDER_TOPIC_CONFIG","key":"TopicTest"},"flag":0,'
        r'"language":"JAVA","opaque":3,"serializeTypeCurrentRPC":"JSON","version":401}'),
        101, 3, 0, {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicTest"}, readme=True),
    # ---- producer requests -----------------------------------------------------------
    Golden("java-send-message", json_payload(
        r'{"code":10,"extFields":{"producerGroup":"PG_ORDER","topic":"TopicTest",'
        r'"defaultTopic":"TBW102","defaultTopicQueueNums":"4","queueId":"1","sysFlag":"0",'
        r'"bornTimestamp":"1700000000123","flag":"0","properties":"UNIQ_KEY\u00017F000001A1B2C3D4'
        r'E5F60000000A0001\u0002WAIT\u0001true\u0002TAGS\u0001TagA\u0002","reconsumeTimes":"0",'
        r'"unitMode":"false","batch":"false"},"flag":0,"language":"JAVA","opaque":5,'
        r'"serializeTypeCurrentRPC":"JSON","version":401}', b"Hello RocketMQ"),
        10, 5, 0, {"producerGroup": "PG_ORDER", "topic": "TopicTest", "defaultTopic": "TBW102",
                   "defaultTopicQueueNums": "4", "queueId": "1", "sysFlag": "0",
                   "bornTimestamp": "1700000000123", "flag": "0", "properties": PROPS,
                   "reconsumeTimes": "0", "unitMode": "false", "batch": "false"},
        body=b"Hello RocketMQ", reads=[(header_of(SendMessageRequestHeader), send_header())],
        readme=True),
    Golden("cpp-send-message", json_payload(
        r'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"","batch":"0",'
        r'"bornTimestamp":"1700000000123","defaultTopic":"TBW102","defaultTopicQueueNums":4,'
        r'"flag":0,"producerGroup":"PG_ORDER","properties":"TAGS\u0001TagA\u0002UNIQ_KEY\u0001'
        r'7F000001A1B2C3D4E5F60000000A0001\u0002","queueId":1,"reconsumeTimes":"0","sysFlag":0,'
        r'"topic":"TopicTest","unitMode":"0"},"flag":0,"language":"CPP","opaque":5,"remark":"",'
        r'"version":333}' "\n", b"Hello RocketMQ"),
        10, 5, 0, {**CPP_CREDENTIALS, "batch": "0", "bornTimestamp": "1700000000123",
                   "defaultTopic": "TBW102", "defaultTopicQueueNums": 4, "flag": 0,
                   "producerGroup": "PG_ORDER", "properties": CPP_PROPS, "queueId": 1,
                   "reconsumeTimes": "0", "sysFlag": 0, "topic": "TopicTest", "unitMode": "0"},
        language="CPP", remark="", body=b"Hello RocketMQ",
        reads=[(header_of(SendMessageRequestHeader), send_header(props=CPP_PROPS))], exact=False),
    Golden("java-send-message-v2", json_payload(
        r'{"code":310,"extFields":{"a":"PG_ORDER","b":"TopicTest","c":"TBW102","d":"4","e":"1",'
        r'"f":"0","g":"1700000000123","h":"0","i":"UNIQ_KEY\u00017F000001A1B2C3D4E5F60000000A0001'
        r'\u0002WAIT\u0001true\u0002TAGS\u0001TagA\u0002","j":"0","k":"false","m":"false"},'
        r'"flag":0,"language":"JAVA","opaque":6,"serializeTypeCurrentRPC":"JSON","version":401}',
        b"Hello RocketMQ"),
        310, 6, 0, {"a": "PG_ORDER", "b": "TopicTest", "c": "TBW102", "d": "4", "e": "1", "f": "0",
                    "g": "1700000000123", "h": "0", "i": PROPS, "j": "0", "k": "false",
                    "m": "false"},
        body=b"Hello RocketMQ", readme=True),
    Golden("cpp-send-message-v2", json_payload(
        r'{"code":310,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"","a":"PG_ORDER",'
        r'"b":"TopicTest","c":"TBW102","d":4,"e":1,"f":0,"g":"1700000000123","h":0,"i":"TAGS'
        r'\u0001TagA\u0002UNIQ_KEY\u00017F000001A1B2C3D4E5F60000000A0001\u0002","j":"0","k":"0",'
        r'"l":16,"m":"0"},"flag":0,"language":"CPP","opaque":6,"remark":"","version":333}' "\n",
        b"Hello RocketMQ"),
        310, 6, 0, {**CPP_CREDENTIALS, "a": "PG_ORDER", "b": "TopicTest", "c": "TBW102", "d": 4,
                    "e": 1, "f": 0, "g": "1700000000123", "h": 0, "i": CPP_PROPS, "j": "0",
                    "k": "0", "l": 16, "m": "0"},
        language="CPP", remark="", body=b"Hello RocketMQ", exact=False),
    # the C++ client sends a batch as SEND_MESSAGE_V2 with m (batch) = "1"
    Golden("cpp-send-message-v2-batch", json_payload(
        r'{"code":310,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"","a":"PG_ORDER",'
        r'"b":"TopicTest","c":"TBW102","d":4,"e":1,"f":0,"g":"1700000000123","h":0,"i":"",'
        r'"j":"0","k":"0","l":16,"m":"1"},"flag":0,"language":"CPP","opaque":7,"remark":"",'
        r'"version":333}' "\n", BATCH_BODY),
        310, 7, 0, {**CPP_CREDENTIALS, "a": "PG_ORDER", "b": "TopicTest", "c": "TBW102", "d": 4,
                    "e": 1, "f": 0, "g": "1700000000123", "h": 0, "i": "", "j": "0", "k": "0",
                    "l": 16, "m": "1"},
        language="CPP", remark="", body=BATCH_BODY,
        reads=[(lambda cmd: decode_batch(cmd.body or b""), BATCH_ITEMS)], exact=False),
    Golden("binary-send-message-v2", binary_payload(
        310, JAVA, 401, 6, 0, "",
        [("a", "PG_ORDER"), ("b", "TopicTest"), ("c", "TBW102"), ("d", "4"), ("e", "1"),
         ("f", "0"), ("g", "1700000000123"), ("h", "0"), ("i", PROPS), ("j", "0"),
         ("k", "false"), ("m", "false")], b"Hello RocketMQ"),
        310, 6, 0, {"a": "PG_ORDER", "b": "TopicTest", "c": "TBW102", "d": "4", "e": "1", "f": "0",
                    "g": "1700000000123", "h": "0", "i": PROPS, "j": "0", "k": "false",
                    "m": "false"},
        body=b"Hello RocketMQ"),
    # Java's clients send a batch with SendMessageRequestHeaderV2's one-letter names
    Golden("java-send-batch-message", json_payload(
        r'{"code":320,"extFields":{"a":"PG_ORDER","b":"TopicTest","c":"TBW102","d":"4","e":"1",'
        r'"f":"0","g":"1700000000123","h":"0","i":"WAIT\u0001true\u0002","j":"0","k":"false",'
        r'"m":"true"},"flag":0,"language":"JAVA","opaque":8,"serializeTypeCurrentRPC":"JSON",'
        r'"version":401}', BATCH_BODY),
        320, 8, 0, {"a": "PG_ORDER", "b": "TopicTest", "c": "TBW102", "d": "4", "e": "1", "f": "0",
                    "g": "1700000000123", "h": "0", "i": "WAIT\x01true\x02", "j": "0",
                    "k": "false", "m": "true"},
        body=BATCH_BODY, reads=[(lambda cmd: decode_batch(cmd.body or b""), BATCH_ITEMS)],
        readme=True),
    # this project's producer sends SendMessageRequestHeader's names
    Golden("our-send-batch-message", json_payload(
        r'{"code":320,"extFields":{"producerGroup":"PG_ORDER","topic":"TopicTest","queueId":"1",'
        r'"sysFlag":"0","bornTimestamp":"1700000000123","flag":"0","properties":"WAIT\u0001true'
        r'\u0002","reconsumeTimes":"0","defaultTopic":"TBW102","defaultTopicQueueNums":"4",'
        r'"unitMode":"false","batch":"true"},"flag":0,"language":"PYTHON","opaque":8,'
        r'"serializeTypeCurrentRPC":"JSON","version":1}', BATCH_BODY),
        320, 8, 0, {"producerGroup": "PG_ORDER", "topic": "TopicTest", "queueId": "1",
                    "sysFlag": "0", "bornTimestamp": "1700000000123", "flag": "0",
                    "properties": "WAIT\x01true\x02", "reconsumeTimes": "0",
                    "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "unitMode": "false",
                    "batch": "true"},
        language="PYTHON", body=BATCH_BODY,
        reads=[(header_of(SendMessageRequestHeader), send_header(props="WAIT\x01true\x02", batch=True)),
               (lambda cmd: decode_batch(cmd.body or b""), BATCH_ITEMS)],
        ours=lambda: RemotingCommand(
            RequestCode.SEND_BATCH_MESSAGE, opaque=8, body=BATCH_BODY, codec=ROCKETMQ_JSON,
            ext_fields=send_header(props="WAIT\x01true\x02", batch=True).to_fields())),
    Golden("java-end-transaction", json_payload(
        r'{"code":37,"extFields":{"producerGroup":"PG_TX","tranStateTableOffset":"17",'
        r'"commitLogOffset":"8192","commitOrRollback":"8","fromTransactionCheck":"false",'
        r'"msgId":"7F000001A1B2C3D4E5F60000000A0002","transactionId":'
        r'"7F000001A1B2C3D4E5F60000000A0002"},"flag":2,"language":"JAVA","opaque":9,'
        r'"serializeTypeCurrentRPC":"JSON","version":401}'),
        37, 9, 2, {"producerGroup": "PG_TX", "tranStateTableOffset": "17",
                   "commitLogOffset": "8192", "commitOrRollback": "8",
                   "fromTransactionCheck": "false", "msgId": UNIQ, "transactionId": UNIQ},
        reads=[(header_of(EndTransactionRequestHeader), END_TX_HEADER)], readme=True),
    # the C++ client marks a oneway request after encoding it: its flag says 0
    Golden("cpp-end-transaction", json_payload(
        r'{"code":37,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"",'
        r'"commitLogOffset":"8192","commitOrRollback":"8","fromTransactionCheck":"1",'
        r'"msgId":"7F000001A1B2C3D4E5F60000000A0002","producerGroup":"PG_TX",'
        r'"tranStateTableOffset":"17","transactionId":"7F000001A1B2C3D4E5F60000000A0002"},'
        r'"flag":0,"language":"CPP","opaque":9,"remark":"","version":333}' "\n"),
        37, 9, 0, {**CPP_CREDENTIALS, "commitLogOffset": "8192", "commitOrRollback": "8",
                   "fromTransactionCheck": "1", "msgId": UNIQ, "producerGroup": "PG_TX",
                   "tranStateTableOffset": "17", "transactionId": UNIQ},
        language="CPP", remark="",
        reads=[(header_of(EndTransactionRequestHeader),
                EndTransactionRequestHeader(
                    producer_group="PG_TX", tran_state_table_offset=17, commit_log_offset=8192,
                    commit_or_rollback=8, from_transaction_check=True, msg_id=UNIQ,
                    transaction_id=UNIQ))],
        exact=False),
    # ---- consumer requests -----------------------------------------------------------
    Golden("java-pull-message", json_payload(
        r'{"code":11,"extFields":{"consumerGroup":"CG_ORDER","topic":"TopicTest","queueId":"2",'
        r'"queueOffset":"128","maxMsgNums":"32","sysFlag":"3","commitOffset":"120",'
        r'"suspendTimeoutMillis":"15000","subscription":"TagA || TagB",'
        r'"subVersion":"1700000000000","expressionType":"TAG"},"flag":0,"language":"JAVA",'
        r'"opaque":10,"serializeTypeCurrentRPC":"JSON","version":401}'),
        11, 10, 0, {"consumerGroup": "CG_ORDER", "topic": "TopicTest", "queueId": "2",
                    "queueOffset": "128", "maxMsgNums": "32", "sysFlag": "3",
                    "commitOffset": "120", "suspendTimeoutMillis": "15000",
                    "subscription": "TagA || TagB", "subVersion": "1700000000000",
                    "expressionType": "TAG"},
        reads=[(header_of(PullMessageRequestHeader), PULL_HEADER)], readme=True),
    Golden("cpp-pull-message", json_payload(
        r'{"code":11,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"",'
        r'"commitOffset":"120","consumerGroup":"CG_ORDER","maxMsgNums":32,"queueId":2,'
        r'"queueOffset":"128","subVersion":"1700000000000","subscription":"TagA || TagB",'
        r'"suspendTimeoutMillis":"15000","sysFlag":3,"topic":"TopicTest"},"flag":0,'
        r'"language":"CPP","opaque":10,"remark":"","version":333}' "\n"),
        11, 10, 0, {**CPP_CREDENTIALS, "commitOffset": "120", "consumerGroup": "CG_ORDER",
                    "maxMsgNums": 32, "queueId": 2, "queueOffset": "128",
                    "subVersion": "1700000000000", "subscription": "TagA || TagB",
                    "suspendTimeoutMillis": "15000", "sysFlag": 3, "topic": "TopicTest"},
        language="CPP", remark="",
        reads=[(header_of(PullMessageRequestHeader), PULL_HEADER)], exact=False),
    Golden("binary-pull-message", binary_payload(
        11, JAVA, 401, 10, 0, "",
        [("consumerGroup", "CG_ORDER"), ("topic", "TopicTest"), ("queueId", "2"),
         ("queueOffset", "128"), ("maxMsgNums", "32"), ("sysFlag", "3"), ("commitOffset", "120"),
         ("suspendTimeoutMillis", "15000"), ("subscription", "TagA || TagB"),
         ("subVersion", "1700000000000"), ("expressionType", "TAG")]),
        11, 10, 0, {"consumerGroup": "CG_ORDER", "topic": "TopicTest", "queueId": "2",
                    "queueOffset": "128", "maxMsgNums": "32", "sysFlag": "3",
                    "commitOffset": "120", "suspendTimeoutMillis": "15000",
                    "subscription": "TagA || TagB", "subVersion": "1700000000000",
                    "expressionType": "TAG"},
        reads=[(header_of(PullMessageRequestHeader), PULL_HEADER)]),
    Golden("java-heart-beat", json_payload(
        r'{"code":34,"flag":0,"language":"JAVA","opaque":11,"serializeTypeCurrentRPC":"JSON",'
        r'"version":401}', JAVA_HEARTBEAT),
        34, 11, 0, {}, body=JAVA_HEARTBEAT,
        reads=[(lambda cmd: HeartbeatData.from_wire(cmd.decode_body()),
                heartbeat("192.168.0.7@12345", ["CLIENT_INNER_PRODUCER", "PG_ORDER"],
                          [2598919, 2598920]))],
        readme=True),
    Golden("cpp-heart-beat", json_payload(
        r'{"code":34,"extFields":{"AccessKey":"","OnsChannel":"","Signature":""},"flag":0,'
        r'"language":"CPP","opaque":11,"remark":"","version":333}' "\n", CPP_HEARTBEAT),
        34, 11, 0, dict(CPP_CREDENTIALS), language="CPP", remark="", body=CPP_HEARTBEAT,
        reads=[(lambda cmd: HeartbeatData.from_wire(cmd.decode_body()),
                heartbeat("192.168.0.7@23456", ["PG_ORDER"], [0, 0]))],
        exact=False),
    Golden("binary-heart-beat", binary_payload(34, JAVA, 401, 11, 0, "", [], JAVA_HEARTBEAT),
           34, 11, 0, {}, body=JAVA_HEARTBEAT,
           reads=[(lambda cmd: HeartbeatData.from_wire(cmd.decode_body()),
                   heartbeat("192.168.0.7@12345", ["CLIENT_INNER_PRODUCER", "PG_ORDER"],
                             [2598919, 2598920]))]),
    Golden("java-unregister-client", json_payload(
        r'{"code":35,"extFields":{"clientID":"192.168.0.7@12345","consumerGroup":"CG_ORDER"},'
        r'"flag":0,"language":"JAVA","opaque":12,"serializeTypeCurrentRPC":"JSON","version":401}'),
        35, 12, 0, {"clientID": "192.168.0.7@12345", "consumerGroup": "CG_ORDER"}, readme=True),
    Golden("cpp-unregister-client", json_payload(
        r'{"code":35,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"",'
        r'"clientID":"192.168.0.7@23456","consumerGroup":"CG_ORDER","producerGroup":""},'
        r'"flag":0,"language":"CPP","opaque":12,"remark":"","version":333}' "\n"),
        35, 12, 0, {**CPP_CREDENTIALS, "clientID": "192.168.0.7@23456",
                    "consumerGroup": "CG_ORDER", "producerGroup": ""},
        language="CPP", remark="", exact=False),
    Golden("java-query-consumer-offset", json_payload(
        r'{"code":14,"extFields":{"consumerGroup":"CG_ORDER","topic":"TopicTest","queueId":"2"},'
        r'"flag":0,"language":"JAVA","opaque":13,"serializeTypeCurrentRPC":"JSON","version":401}'),
        14, 13, 0, {"consumerGroup": "CG_ORDER", "topic": "TopicTest", "queueId": "2"},
        reads=[(header_of(QueryConsumerOffsetRequestHeader),
                QueryConsumerOffsetRequestHeader("CG_ORDER", "TopicTest", 2))],
        readme=True),
    Golden("cpp-query-consumer-offset", json_payload(
        r'{"code":14,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"",'
        r'"consumerGroup":"CG_ORDER","queueId":2,"topic":"TopicTest"},"flag":0,"language":"CPP",'
        r'"opaque":13,"remark":"","version":333}' "\n"),
        14, 13, 0, {**CPP_CREDENTIALS, "consumerGroup": "CG_ORDER", "queueId": 2,
                    "topic": "TopicTest"},
        language="CPP", remark="",
        reads=[(header_of(QueryConsumerOffsetRequestHeader),
                QueryConsumerOffsetRequestHeader("CG_ORDER", "TopicTest", 2))],
        exact=False),
    Golden("java-update-consumer-offset", json_payload(
        r'{"code":15,"extFields":{"consumerGroup":"CG_ORDER","topic":"TopicTest","queueId":"2",'
        r'"commitOffset":"130"},"flag":2,"language":"JAVA","opaque":14,'
        r'"serializeTypeCurrentRPC":"JSON","version":401}'),
        15, 14, 2, {"consumerGroup": "CG_ORDER", "topic": "TopicTest", "queueId": "2",
                    "commitOffset": "130"},
        reads=[(header_of(UpdateConsumerOffsetRequestHeader),
                UpdateConsumerOffsetRequestHeader("CG_ORDER", "TopicTest", 2, 130))],
        readme=True),
    Golden("cpp-update-consumer-offset", json_payload(
        r'{"code":15,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"",'
        r'"commitOffset":"130","consumerGroup":"CG_ORDER","queueId":2,"topic":"TopicTest"},'
        r'"flag":0,"language":"CPP","opaque":14,"remark":"","version":333}' "\n"),
        15, 14, 0, {**CPP_CREDENTIALS, "commitOffset": "130", "consumerGroup": "CG_ORDER",
                    "queueId": 2, "topic": "TopicTest"},
        language="CPP", remark="",
        reads=[(header_of(UpdateConsumerOffsetRequestHeader),
                UpdateConsumerOffsetRequestHeader("CG_ORDER", "TopicTest", 2, 130))],
        exact=False),
    Golden("java-get-max-offset", json_payload(
        r'{"code":30,"extFields":{"topic":"TopicTest","queueId":"2"},"flag":0,"language":"JAVA",'
        r'"opaque":15,"serializeTypeCurrentRPC":"JSON","version":401}'),
        30, 15, 0, {"topic": "TopicTest", "queueId": "2"},
        reads=[(header_of(GetMaxOffsetRequestHeader), GetMaxOffsetRequestHeader("TopicTest", 2))],
        readme=True),
    Golden("cpp-get-max-offset", json_payload(
        r'{"code":30,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"","queueId":2,'
        r'"topic":"TopicTest"},"flag":0,"language":"CPP","opaque":15,"remark":"","version":333}'
        "\n"),
        30, 15, 0, {**CPP_CREDENTIALS, "queueId": 2, "topic": "TopicTest"},
        language="CPP", remark="",
        reads=[(header_of(GetMaxOffsetRequestHeader), GetMaxOffsetRequestHeader("TopicTest", 2))],
        exact=False),
    Golden("java-get-min-offset", json_payload(
        r'{"code":31,"extFields":{"topic":"TopicTest","queueId":"2"},"flag":0,"language":"JAVA",'
        r'"opaque":16,"serializeTypeCurrentRPC":"JSON","version":401}'),
        31, 16, 0, {"topic": "TopicTest", "queueId": "2"},
        reads=[(header_of(GetMinOffsetRequestHeader), GetMinOffsetRequestHeader("TopicTest", 2))],
        readme=True),
    Golden("cpp-get-min-offset", json_payload(
        r'{"code":31,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"","queueId":2,'
        r'"topic":"TopicTest"},"flag":0,"language":"CPP","opaque":16,"remark":"","version":333}'
        "\n"),
        31, 16, 0, {**CPP_CREDENTIALS, "queueId": 2, "topic": "TopicTest"},
        language="CPP", remark="",
        reads=[(header_of(GetMinOffsetRequestHeader), GetMinOffsetRequestHeader("TopicTest", 2))],
        exact=False),
    Golden("java-search-offset", json_payload(
        r'{"code":29,"extFields":{"topic":"TopicTest","queueId":"2","timestamp":"1700000000000"},'
        r'"flag":0,"language":"JAVA","opaque":17,"serializeTypeCurrentRPC":"JSON","version":401}'),
        29, 17, 0, {"topic": "TopicTest", "queueId": "2", "timestamp": "1700000000000"},
        reads=[(header_of(SearchOffsetRequestHeader),
                SearchOffsetRequestHeader("TopicTest", 2, 1700000000000))],
        readme=True),
    Golden("cpp-search-offset", json_payload(
        r'{"code":29,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"","queueId":2,'
        r'"timestamp":"1700000000000","topic":"TopicTest"},"flag":0,"language":"CPP",'
        r'"opaque":17,"remark":"","version":333}' "\n"),
        29, 17, 0, {**CPP_CREDENTIALS, "queueId": 2, "timestamp": "1700000000000",
                    "topic": "TopicTest"},
        language="CPP", remark="",
        reads=[(header_of(SearchOffsetRequestHeader),
                SearchOffsetRequestHeader("TopicTest", 2, 1700000000000))],
        exact=False),
    Golden("java-get-consumer-list", json_payload(
        r'{"code":38,"extFields":{"consumerGroup":"CG_ORDER"},"flag":0,"language":"JAVA",'
        r'"opaque":18,"serializeTypeCurrentRPC":"JSON","version":401}'),
        38, 18, 0, {"consumerGroup": "CG_ORDER"}, readme=True),
    Golden("cpp-get-consumer-list", json_payload(
        r'{"code":38,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"",'
        r'"consumerGroup":"CG_ORDER"},"flag":0,"language":"CPP","opaque":18,"remark":"",'
        r'"version":333}' "\n"),
        38, 18, 0, {**CPP_CREDENTIALS, "consumerGroup": "CG_ORDER"}, language="CPP", remark="",
        exact=False),
    Golden("java-consumer-send-msg-back", json_payload(
        r'{"code":36,"extFields":{"offset":"4096","group":"CG_ORDER","delayLevel":"0",'
        r'"originMsgId":"C0A8000700002A9F0000000000001000","originTopic":"TopicTest",'
        r'"unitMode":"false","maxReconsumeTimes":"16"},"flag":0,"language":"JAVA","opaque":19,'
        r'"serializeTypeCurrentRPC":"JSON","version":401}'),
        36, 19, 0, {"offset": "4096", "group": "CG_ORDER", "delayLevel": "0",
                    "originMsgId": MSG_ID, "originTopic": "TopicTest", "unitMode": "false",
                    "maxReconsumeTimes": "16"},
        reads=[(header_of(ConsumerSendMsgBackRequestHeader), SEND_BACK_HEADER)], readme=True),
    Golden("cpp-consumer-send-msg-back", json_payload(
        r'{"code":36,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"","delayLevel":0,'
        r'"group":"CG_ORDER","maxReconsumeTimes":16,"offset":"4096","originMsgId":'
        r'"C0A8000700002A9F0000000000001000","originTopic":"TopicTest","unitMode":"0"},"flag":0,'
        r'"language":"CPP","opaque":19,"remark":"","version":333}' "\n"),
        36, 19, 0, {**CPP_CREDENTIALS, "delayLevel": 0, "group": "CG_ORDER",
                    "maxReconsumeTimes": 16, "offset": "4096", "originMsgId": MSG_ID,
                    "originTopic": "TopicTest", "unitMode": "0"},
        language="CPP", remark="",
        reads=[(header_of(ConsumerSendMsgBackRequestHeader), SEND_BACK_HEADER)], exact=False),
    Golden("java-lock-batch-mq", json_payload(
        r'{"code":41,"flag":0,"language":"JAVA","opaque":20,"serializeTypeCurrentRPC":"JSON",'
        r'"version":401}', JAVA_LOCK),
        41, 20, 0, {}, body=JAVA_LOCK,
        reads=[(lambda cmd: LockBatchRequestBody.from_wire(cmd.decode_body()),
                LockBatchRequestBody("CG_ORDER", "192.168.0.7@12345", LOCK_MQS))],
        readme=True),
    Golden("cpp-lock-batch-mq", json_payload(
        r'{"code":41,"extFields":{"AccessKey":"","OnsChannel":"","Signature":""},"flag":0,'
        r'"language":"CPP","opaque":20,"remark":"","version":333}' "\n", CPP_LOCK),
        41, 20, 0, dict(CPP_CREDENTIALS), language="CPP", remark="", body=CPP_LOCK,
        reads=[(lambda cmd: LockBatchRequestBody.from_wire(cmd.decode_body()),
                LockBatchRequestBody("CG_ORDER", "192.168.0.7@23456", LOCK_MQS))],
        exact=False),
    Golden("java-unlock-batch-mq", json_payload(
        r'{"code":42,"flag":0,"language":"JAVA","opaque":21,"serializeTypeCurrentRPC":"JSON",'
        r'"version":401}', JAVA_LOCK),
        42, 21, 0, {}, body=JAVA_LOCK,
        reads=[(lambda cmd: LockBatchRequestBody.from_wire(cmd.decode_body()),
                LockBatchRequestBody("CG_ORDER", "192.168.0.7@12345", LOCK_MQS))],
        readme=True),
    Golden("cpp-unlock-batch-mq", json_payload(
        r'{"code":42,"extFields":{"AccessKey":"","OnsChannel":"","Signature":""},"flag":0,'
        r'"language":"CPP","opaque":21,"remark":"","version":333}' "\n", CPP_LOCK),
        42, 21, 0, dict(CPP_CREDENTIALS), language="CPP", remark="", body=CPP_LOCK,
        reads=[(lambda cmd: LockBatchRequestBody.from_wire(cmd.decode_body()),
                LockBatchRequestBody("CG_ORDER", "192.168.0.7@23456", LOCK_MQS))],
        exact=False),
    # ---- queries -------------------------------------------------------------------
    Golden("java-query-message", json_payload(
        r'{"code":12,"extFields":{"topic":"TopicTest","key":"order-1","maxNum":"32",'
        r'"beginTimestamp":"0","endTimestamp":"1700000000999","_UNIQUE_KEY_QUERY":"false"},'
        r'"flag":0,"language":"JAVA","opaque":23,"serializeTypeCurrentRPC":"JSON","version":401}'),
        12, 23, 0, {"topic": "TopicTest", "key": "order-1", "maxNum": "32", "beginTimestamp": "0",
                    "endTimestamp": "1700000000999", "_UNIQUE_KEY_QUERY": "false"},
        reads=[(header_of(QueryMessageRequestHeader),
                QueryMessageRequestHeader("TopicTest", "order-1", 32, 0, 1700000000999))],
        readme=True),
    Golden("java-view-message", json_payload(
        r'{"code":33,"extFields":{"offset":"4096"},"flag":0,"language":"JAVA","opaque":24,'
        r'"serializeTypeCurrentRPC":"JSON","version":401}'),
        33, 24, 0, {"offset": "4096"},
        reads=[(header_of(ViewMessageRequestHeader), ViewMessageRequestHeader(4096))],
        readme=True),
    Golden("cpp-view-message", json_payload(
        r'{"code":33,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"","offset":"4096"},'
        r'"flag":0,"language":"CPP","opaque":24,"remark":"","version":333}' "\n"),
        33, 24, 0, {**CPP_CREDENTIALS, "offset": "4096"}, language="CPP", remark="",
        reads=[(header_of(ViewMessageRequestHeader), ViewMessageRequestHeader(4096))],
        exact=False),
    # ---- broker -> client requests ---------------------------------------------------
    Golden("java-notify-consumer-ids-changed", json_payload(
        r'{"code":40,"extFields":{"consumerGroup":"CG_ORDER"},"flag":2,"language":"JAVA",'
        r'"opaque":21,"serializeTypeCurrentRPC":"JSON","version":401}'),
        40, 21, 2, {"consumerGroup": "CG_ORDER"}),
    Golden("our-notify-consumer-ids-changed", json_payload(
        r'{"code":40,"extFields":{"consumerGroup":"CG_ORDER"},"flag":2,"language":"PYTHON",'
        r'"opaque":21,"serializeTypeCurrentRPC":"JSON","version":1}'),
        40, 21, 2, {"consumerGroup": "CG_ORDER"}, language="PYTHON", ours=_our_notify,
        readme=True),
    Golden("java-check-transaction-state", json_payload(
        r'{"code":39,"extFields":{"tranStateTableOffset":"17","commitLogOffset":"8192",'
        r'"msgId":"7F000001A1B2C3D4E5F60000000A0002","transactionId":'
        r'"7F000001A1B2C3D4E5F60000000A0002","offsetMsgId":"C0A8000700002A9F0000000000001000"},'
        r'"flag":2,"language":"JAVA","opaque":22,"serializeTypeCurrentRPC":"JSON","version":401}',
        HALF_RECORD),
        39, 22, 2, {"tranStateTableOffset": "17", "commitLogOffset": "8192", "msgId": UNIQ,
                    "transactionId": UNIQ, "offsetMsgId": MSG_ID},
        body=HALF_RECORD,
        reads=[(header_of(CheckTransactionStateRequestHeader), CHECK_TX_HEADER),
               (lambda cmd: [(m.topic, m.body) for m in decode_records(cmd.body or b"")],
                [("RMQ_SYS_TRANS_HALF_TOPIC", b"order")])]),
    Golden("our-check-transaction-state", json_payload(
        r'{"code":39,"extFields":{"tranStateTableOffset":"17","commitLogOffset":"8192",'
        r'"msgId":"7F000001A1B2C3D4E5F60000000A0002","transactionId":'
        r'"7F000001A1B2C3D4E5F60000000A0002","offsetMsgId":"C0A8000700002A9F0000000000001000"},'
        r'"flag":2,"language":"PYTHON","opaque":22,"serializeTypeCurrentRPC":"JSON","version":1}',
        HALF_RECORD),
        39, 22, 2, {"tranStateTableOffset": "17", "commitLogOffset": "8192", "msgId": UNIQ,
                    "transactionId": UNIQ, "offsetMsgId": MSG_ID},
        language="PYTHON", body=HALF_RECORD,
        reads=[(header_of(CheckTransactionStateRequestHeader), CHECK_TX_HEADER)],
        ours=_our_check_transaction, readme=True),
    # ---- responses -------------------------------------------------------------------
    Golden("java-send-response", json_payload(
        r'{"code":0,"extFields":{"queueId":"1","TRACE_ON":"true","MSG_REGION":"DefaultRegion",'
        r'"msgId":"C0A8000700002A9F0000000000001000","queueOffset":"42"},"flag":1,'
        r'"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":401}'),
        0, 5, 1, {"queueId": "1", "TRACE_ON": "true", "MSG_REGION": "DefaultRegion",
                  "msgId": MSG_ID, "queueOffset": "42"},
        reads=[(header_of(SendMessageResponseHeader), SendMessageResponseHeader(MSG_ID, 1, 42))]),
    Golden("our-send-response", json_payload(
        r'{"code":0,"extFields":{"msgId":"C0A8000700002A9F0000000000001000","queueId":"1",'
        r'"queueOffset":"42"},"flag":1,"language":"PYTHON","opaque":5,'
        r'"serializeTypeCurrentRPC":"JSON","version":1}'),
        0, 5, 1, {"msgId": MSG_ID, "queueId": "1", "queueOffset": "42"}, language="PYTHON",
        reads=[(header_of(SendMessageResponseHeader), SendMessageResponseHeader(MSG_ID, 1, 42))],
        ours=_our_send_response),
    Golden("binary-send-response", binary_payload(
        0, PYTHON, 1, 6, 1, "", [("msgId", MSG_ID), ("queueId", "1"), ("queueOffset", "42")]),
        0, 6, 1, {"msgId": MSG_ID, "queueId": "1", "queueOffset": "42"}, language="PYTHON",
        reads=[(header_of(SendMessageResponseHeader), SendMessageResponseHeader(MSG_ID, 1, 42))],
        ours=_our_binary_send_response),
    Golden("java-pull-response", json_payload(
        r'{"code":0,"extFields":{"suggestWhichBrokerId":"0","nextBeginOffset":"130",'
        r'"minOffset":"0","maxOffset":"130"},"flag":1,"language":"JAVA","opaque":10,'
        r'"serializeTypeCurrentRPC":"JSON","version":401}', PULL_BODY),
        0, 10, 1, {"suggestWhichBrokerId": "0", "nextBeginOffset": "130", "minOffset": "0",
                   "maxOffset": "130"},
        body=PULL_BODY,
        reads=[(header_of(PullMessageResponseHeader), PullMessageResponseHeader(0, 130, 0, 130)),
               (lambda cmd: [(m.queue_offset, m.body, m.tags) for m in decode_records(cmd.body or b"")],
                [(128, b"Hello", "TagA"), (129, b"World", "TagB")])]),
    Golden("our-pull-response", json_payload(
        r'{"code":0,"extFields":{"suggestWhichBrokerId":"0","nextBeginOffset":"130",'
        r'"minOffset":"0","maxOffset":"130"},"flag":1,"language":"PYTHON","opaque":10,'
        r'"serializeTypeCurrentRPC":"JSON","version":1}', PULL_BODY),
        0, 10, 1, {"suggestWhichBrokerId": "0", "nextBeginOffset": "130", "minOffset": "0",
                   "maxOffset": "130"},
        language="PYTHON", body=PULL_BODY,
        reads=[(header_of(PullMessageResponseHeader), PullMessageResponseHeader(0, 130, 0, 130))],
        ours=_our_pull_response),
    Golden("java-error-response", json_payload(
        r'{"code":17,"flag":1,"language":"JAVA","opaque":1,"remark":"No topic route info in name'
        r' server for the topic: TopicTest","serializeTypeCurrentRPC":"JSON","version":401}'),
        17, 1, 1, {}, remark="No topic route info in name server for the topic: TopicTest"),
    Golden("our-error-response", json_payload(
        r'{"code":17,"flag":1,"language":"PYTHON","opaque":1,"remark":"No topic route info in '
        r'name server for the topic: TopicTest","serializeTypeCurrentRPC":"JSON","version":1}'),
        17, 1, 1, {}, language="PYTHON",
        remark="No topic route info in name server for the topic: TopicTest",
        ours=_our_error_response),
    Golden("binary-error-response", binary_payload(
        1, JAVA, 401, 3, 1, "the broker[broker-a] is a slave: émoji ✓", []),
        1, 3, 1, {}, remark="the broker[broker-a] is a slave: émoji ✓"),
    Golden("our-route-response", json_payload(
        r'{"code":0,"flag":1,"language":"PYTHON","opaque":1,"serializeTypeCurrentRPC":"JSON",'
        r'"version":1}',
        b'{"queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6,'
        b'"topicSynFlag":0,"topicSysFlag":0}],"brokerDatas":[{"cluster":"DefaultCluster",'
        b'"brokerName":"broker-a","brokerAddrs":{"0":"192.168.0.7:10911"}}],'
        b'"filterServerTable":{}}'),
        0, 1, 1, {}, language="PYTHON",
        body=b'{"queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,'
             b'"perm":6,"topicSynFlag":0,"topicSysFlag":0}],"brokerDatas":[{"cluster":'
             b'"DefaultCluster","brokerName":"broker-a","brokerAddrs":{"0":"192.168.0.7:10911"}}],'
             b'"filterServerTable":{}}',
        reads=[(lambda cmd: TopicRouteData.from_dict(cmd.decode_body()), ROUTE),
               (lambda cmd: cmd.decode_body(), ROUTE_BODY)],
        ours=_our_route_response),
]
GOLDEN_BY_ID = {g.id: g for g in GOLDEN}
assert len(GOLDEN_BY_ID) == len(GOLDEN)


@pytest.mark.parametrize("g", GOLDEN, ids=[g.id for g in GOLDEN])
def test_golden_frame_decodes(g: Golden) -> None:
    # the frame as it arrives: the decoder yields the payload whole, split anywhere
    whole = framed(g.payload)
    decoder = FrameDecoder()
    out = decoder.feed(whole[:5]) + decoder.feed(whole[5:])
    assert out == [g.payload]
    codec = detect(g.payload)
    assert codec is (ROCKETMQ_JSON if g.payload[0] == 0 else ROCKETMQ_BINARY)
    cmd = codec.decode(g.payload)
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.remark) == (g.code, g.opaque, g.flag, g.remark)
    assert cmd.ext_fields == g.ext
    assert list(cmd.ext_fields) == list(g.ext)  # in the order they came
    assert cmd.body == g.body
    assert cmd.codec is codec
    assert cmd.language == g.language
    for read, expected in g.reads:
        assert read(cmd) == expected


@pytest.mark.parametrize("g", GOLDEN, ids=[g.id for g in GOLDEN])
def test_golden_frame_encodes_back(g: Golden) -> None:
    cmd = decode(g.payload)
    again = cmd.encode()
    if g.exact:
        assert again == g.payload
        return
    # a C++ frame comes back as Java's clients write it: every extFields value a string
    back = decode(again)
    assert (back.code, back.opaque, back.flag, back.remark, back.body, back.language) == (
        cmd.code, cmd.opaque, cmd.flag, cmd.remark, cmd.body, cmd.language)
    assert back.ext_fields == {k: str(v) for k, v in cmd.ext_fields.items()}
    header = again[4:4 + struct.unpack_from(">I", again)[0]]
    assert header.endswith(b'"serializeTypeCurrentRPC":"JSON","version":333}')
    for read, expected in g.reads:
        assert read(back) == expected


@pytest.mark.parametrize("g", [g for g in GOLDEN if g.ours is not None],
                         ids=[g.id for g in GOLDEN if g.ours is not None])
def test_golden_frame_is_what_we_write(g: Golden) -> None:
    assert g.ours is not None
    cmd = g.ours()
    assert cmd.encode() == g.payload
    assert all(isinstance(v, str) for v in decode(cmd.encode()).ext_fields.values())


@pytest.mark.parametrize("flags", [
    {"topicSynFlag": 3},  # RocketMQ's Java QueueData up to 4.8, the Go client
    {"topicSysFlag": 3},  # Java 4.9 on, 5.x
    {"topicSynFlag": 0, "topicSysFlag": 3},  # both (ours): topicSysFlag first
])
def test_queue_data_reads_either_spelling_of_the_topic_flag(flags: dict[str, int]) -> None:
    d = {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, **flags}
    qd = QueueData.from_dict(d)
    assert qd == QueueData("broker-a", 4, 4, 6, 3)
    assert qd.to_dict() == {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4,
                            "perm": 6, "topicSynFlag": 3, "topicSysFlag": 3}


def test_responses_leave_in_their_requests_codec() -> None:
    for gid in ("java-get-routeinfo", "binary-get-routeinfo", "cpp-pull-message"):
        request = decode(GOLDEN_BY_ID[gid].payload)
        response = request.response(ResponseCode.SUCCESS, ext_fields={"offset": 7, "ok": True})
        assert response.codec is request.codec
        back = decode(response.encode())
        assert back.is_response and back.opaque == request.opaque
        assert back.ext_fields == {"offset": "7", "ok": "true"}
        assert back.language == "PYTHON"


@pytest.mark.parametrize(("gid", "expected"), [
    ("java-send-message-v2", send_header()),
    ("binary-send-message-v2", send_header()),
    ("cpp-send-message-v2", send_header(props=CPP_PROPS, max_reconsume=16)),
    ("cpp-send-message-v2-batch", send_header(props="", max_reconsume=16, batch=True)),
    ("java-send-batch-message", send_header(props="WAIT\x01true\x02", batch=True)),
])
def test_send_message_v2_header_converts_to_v1(gid: str, expected: SendMessageRequestHeader) -> None:
    fields = decode(GOLDEN_BY_ID[gid].payload).ext_fields
    assert SendMessageRequestHeaderV2.from_fields(fields).to_v1() == expected


def test_get_kv_config_header() -> None:
    h = GetKVConfigRequestHeader.from_fields(
        decode(GOLDEN_BY_ID["java-get-kv-config"].payload).ext_fields)
    assert (h.namespace, h.key) == ("ORDER_TOPIC_CONFIG", "TopicTest")


@pytest.mark.parametrize("cls", [GetRouteInfoRequestHeader, PullMessageRequestHeader,
                                 SendMessageRequestHeader, EndTransactionRequestHeader])
def test_credentials_fields_are_accepted(cls: type[headers.Header]) -> None:
    # the ACL fields RocketMQ's clients may add (the C++ client always, empty) are no header field
    base = {"topic": "TopicTest", "consumerGroup": "CG_ORDER", "queueId": 2, "queueOffset": "0",
            "maxMsgNums": 32, "producerGroup": "PG_ORDER", "tranStateTableOffset": "1",
            "commitLogOffset": "2", "commitOrRollback": "8"}
    plain = cls.from_fields(base)
    for extra in ({"AccessKey": "", "Signature": "", "OnsChannelKey": ""},
                  {"AccessKey": "", "Signature": "", "OnsChannel": ""},
                  {"AccessKey": "rocketmq2", "Signature": "c2lnbg==", "OnsChannel": "ALIYUN"}):
        assert cls.from_fields({**base, **extra}) == plain


# ---- the README's golden frames are these ones ---------------------------------------

README_CODES = [105, 106, 101, 10, 310, 320, 11, 34, 35, 14, 15, 30, 31, 29, 38, 36, 41, 42, 37,
                12, 33, 40, 39]


def escape_frame(frame: bytes) -> str:
    """How protocol/README.md writes a frame: the two length words as \\xNN, then each
    byte as itself when it is printable ASCII, as \\xNN otherwise."""
    head = "".join(f"\\x{b:02x}" for b in frame[:8])
    return head + "".join(chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in frame[8:])


def unescape_frame(text: str) -> bytes:
    return re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m[1], 16)]), text.encode("ascii"))


def readme_frames() -> dict[int, bytes]:
    """{code: frame} of the "golden frames" block of protocol/README.md."""
    text = README.read_text()
    block = text.split("<!-- golden frames -->", 1)[1].split("```", 2)[1]
    frames: dict[int, bytes] = {}
    for line in block.splitlines():
        m = re.match(r"(\d+) +\w+ +(\\x.*)$", line)
        if m:
            assert int(m[1]) not in frames, f"code {m[1]} shown twice"
            frames[int(m[1])] = unescape_frame(m[2])
    return frames


def test_readme_shows_each_request_codes_golden_frame() -> None:
    shown = readme_frames()
    assert sorted(shown) == sorted(README_CODES)
    readme_goldens = {g.code: g for g in GOLDEN if g.readme}
    assert sorted(readme_goldens) == sorted(README_CODES)
    for code, frame in shown.items():
        assert frame == framed(readme_goldens[code].payload), f"code {code}"
        assert escape_frame(frame) in README.read_text()


# ---- property tests ------------------------------------------------------------------

INT32 = st.integers(-(2**31), 2**31 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
TEXT = st.text(st.characters(codec="utf-8"), max_size=24)


@st.composite
def commands(draw: st.DrawFn, codec: Codec) -> RemotingCommand:
    binary = codec is ROCKETMQ_BINARY
    short = INT16 if binary else INT32
    # the binary header writes an empty remark as none (RocketMQ's does the same)
    remark = draw(st.none() | TEXT.filter(lambda r: bool(r) or not binary))
    return RemotingCommand(
        code=draw(short), opaque=draw(INT32), flag=draw(INT32), remark=remark,
        ext_fields=draw(st.dictionaries(TEXT, TEXT, max_size=6)),
        body=draw(st.none() | st.binary(min_size=1, max_size=64)), version=draw(short),
        codec=codec, language=draw(st.sampled_from(LANGUAGES)))


@pytest.mark.parametrize("codec", [ROCKETMQ_JSON, ROCKETMQ_BINARY], ids=lambda c: c.name)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_command_round_trips(codec: Codec, data: st.DataObject) -> None:
    cmd = data.draw(commands(codec))
    payload = cmd.encode()
    assert detect(payload) is codec
    back = codec.decode(payload)
    assert back == cmd
    assert back.codec is codec and back.language == cmd.language
    assert back.encode() == payload
    assert FrameDecoder().feed(framed(payload)) == [payload]


@pytest.mark.parametrize("codec", [ROCKETMQ_JSON, ROCKETMQ_BINARY], ids=lambda c: c.name)
@settings(max_examples=100, deadline=None)
@given(ext=st.dictionaries(TEXT, st.one_of(TEXT, st.integers(-(2**63), 2**63 - 1),
                                             st.booleans(), st.none()), max_size=6))
def test_ext_values_travel_as_text(codec: Codec, ext: dict[str, Any]) -> None:
    back = codec.decode(codec.encode(RemotingCommand(1, ext_fields=ext, codec=codec)))
    expected = {k: ("true" if v is True else "false" if v is False else str(v))
                for k, v in ext.items() if v is not None}
    assert back.ext_fields == expected


def _decode_only_protocol_errors(payload: bytes) -> None:
    for codec in (ROCKETMQ_JSON, ROCKETMQ_BINARY, detect(payload)):
        try:
            cmd = codec.decode(payload)
        except RemoteProtocolError:
            pass
        else:
            assert type(cmd.code) is int and type(cmd.opaque) is int and type(cmd.flag) is int
            assert cmd.remark is None or isinstance(cmd.remark, str)
            assert all(isinstance(k, str) for k in cmd.ext_fields)
        peeked = codec.peek_request(payload)
        assert peeked is None or (type(peeked[0]) is int and type(peeked[1]) is int)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=120))
def test_arbitrary_bytes_raise_only_protocol_errors(payload: bytes) -> None:
    _decode_only_protocol_errors(payload)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([0, 1]), st.binary(max_size=120), st.integers(0, 8))
def test_framed_garbage_raises_only_protocol_errors(stype: int, header: bytes, extra: int) -> None:
    # a header length that fits, so the header's own parser sees the garbage
    payload = struct.pack(">I", (stype << 24) | len(header)) + header + b"\x00" * extra
    _decode_only_protocol_errors(payload)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8)
HEADER_KEYS = st.sampled_from(["code", "opaque", "flag", "remark", "extFields", "language",
                               "version", "serializeTypeCurrentRPC"])


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(HEADER_KEYS, JSON_VALUES | st.dictionaries(TEXT, JSON_VALUES, max_size=4)))
def test_any_json_header_raises_only_protocol_errors(header: dict[str, Any]) -> None:
    _decode_only_protocol_errors(json_payload(json.dumps(header)))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), codec=st.sampled_from([ROCKETMQ_JSON, ROCKETMQ_BINARY]))
def test_corrupted_frames_raise_only_protocol_errors(data: st.DataObject, codec: Codec) -> None:
    payload = bytearray(data.draw(commands(codec)).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(payload) - 1))
        payload[at] = data.draw(st.integers(0, 255))
    payload = payload[:data.draw(st.integers(0, len(payload)))]
    _decode_only_protocol_errors(bytes(payload))


# ---- bad input -----------------------------------------------------------------------


def word(stype: int, header_len: int) -> bytes:
    return struct.pack(">I", (stype << 24) | header_len)


def raw_json_payload(header: bytes) -> bytes:
    """A JSON-type payload whose header is these bytes (UTF-8 or not)."""
    return word(0, len(header)) + header


BAD_JSON = [
    # (id, payload, message, what peek_request reads)
    ("empty", b"", r"frame of 0 bytes has no header length", None),
    ("three-bytes", b"\x00\x00\x00", r"frame of 3 bytes has no header length", None),
    ("header-past-frame", word(0, 100) + b'{"code":105,"opaque":3}',
     r"header length 100 runs past the frame \(23 bytes after it\)", None),
    ("header-one-past", word(0, 24) + b'{"code":105,"opaque":3}',
     r"header length 24 runs past the frame \(23 bytes after it\)", None),
    ("type-2", word(2, 2) + b"{}", r"unknown serialization type 2", None),
    ("type-255", word(255, 2) + b"{}", r"unknown serialization type 255", None),
    ("empty-header", word(0, 0), r"undecodable JSON header", None),
    ("bad-json", json_payload('{"code":105,"opaque":3'), r"undecodable JSON header", None),
    ("bad-json-trailing", json_payload('{"code":105,"opaque":3}}'), r"undecodable JSON header", None),
    ("json-array", json_payload("[105,3]"), r"JSON header must be an object", None),
    ("json-string", json_payload('"code"'), r"JSON header must be an object", None),
    ("json-null", json_payload("null"), r"JSON header must be an object", None),
    ("json-number", json_payload("105"), r"JSON header must be an object", None),
    ("code-list", json_payload('{"code":[105],"opaque":3}'), r"header 'code' must be an integer",
     None),
    ("code-missing", json_payload('{"opaque":3}'), r"header 'code' must be an integer", None),
    ("code-bool", json_payload('{"code":true,"opaque":3}'), r"header 'code' must be an integer",
     None),
    ("code-float", json_payload('{"code":105.5,"opaque":3}'), r"header 'code' must be an integer",
     None),
    ("code-text", json_payload('{"code":"1_05","opaque":3}'), r"header 'code' must be an integer",
     None),
    ("code-wide", json_payload('{"code":2147483648,"opaque":3}'),
     r"header 'code' must be a 32-bit integer, got 2147483648", None),
    ("opaque-object", json_payload('{"code":105,"opaque":{"id":3}}'),
     r"header 'opaque' must be an integer", None),
    ("opaque-missing", json_payload('{"code":105}'), r"header 'opaque' must be an integer", None),
    ("flag-text", json_payload('{"code":105,"opaque":3,"flag":"x"}'),
     r"header 'flag' must be an integer", None),
    ("version-list", json_payload('{"code":105,"opaque":3,"version":[]}'),
     r"header 'version' must be an integer", (105, 3)),
    ("remark-number", json_payload('{"code":105,"opaque":3,"remark":5}'),
     r"header 'remark' must be a string", (105, 3)),
    ("ext-list", json_payload('{"code":105,"extFields":["topic","T"],"flag":0,"opaque":3}'),
     r"extFields must be an object", (105, 3)),
    ("ext-text", json_payload('{"code":105,"extFields":"topic=T","opaque":3}'),
     r"extFields must be an object", (105, 3)),
    ("ext-nested-object", json_payload('{"code":105,"extFields":{"topic":{"name":"T"}},"opaque":3}'),
     r"extFields value of 'topic' must be a string, number or boolean", (105, 3)),
    ("ext-nested-list", json_payload('{"code":105,"extFields":{"queueId":[1]},"opaque":3}'),
     r"extFields value of 'queueId' must be a string, number or boolean", (105, 3)),
    ("text-numbers", json_payload('{"code":"105","extFields":{"topic":{}},"opaque":" 3 "}'),
     r"extFields value of 'topic'", (105, 3)),
    ("ext-on-response", json_payload('{"code":0,"extFields":[],"flag":1,"opaque":3}'),
     r"extFields must be an object", None),
    ("ext-on-oneway", json_payload('{"code":37,"extFields":[],"flag":2,"opaque":3}'),
     r"extFields must be an object", None),
    ("not-utf8-remark", raw_json_payload(b'{"code":105,"opaque":3,"remark":"\xff"}'),
     r"JSON header is not UTF-8", (105, 3)),
    ("not-utf8-ext", raw_json_payload(b'{"code":105,"extFields":{"topic":"T\xc3"},"opaque":3}'),
     r"JSON header is not UTF-8", (105, 3)),
    ("lone-surrogate-ext", json_payload(r'{"code":105,"extFields":{"topic":"\ud800"},"opaque":3}'),
     r"extFields value of 'topic' holds a lone UTF-16 surrogate", (105, 3)),
    ("lone-surrogate-key", json_payload(r'{"code":105,"extFields":{"\udfff":"T"},"opaque":3}'),
     r"extFields key holds a lone UTF-16 surrogate", (105, 3)),
    ("lone-surrogate-remark", json_payload(r'{"code":105,"opaque":3,"remark":"a\uDBFFb"}'),
     r"remark holds a lone UTF-16 surrogate", (105, 3)),
    ("deep-nesting", json_payload('{"code":105,"opaque":3,"extFields":' + "[" * 50000 + "]" * 50000
                                  + "}"),
     r"undecodable JSON header", None),
]


def _assert_bad(payload: bytes, message: str, peeked: tuple[int, int] | None) -> None:
    codec = detect(payload)
    for c in {codec, ROCKETMQ_JSON, ROCKETMQ_BINARY} - {MSGPACK}:
        with pytest.raises(RemoteProtocolError, match=message):
            c.decode(payload)
        assert c.peek_request(payload) == peeked


@pytest.mark.parametrize(("payload", "message", "peeked"), [b[1:] for b in BAD_JSON],
                         ids=[b[0] for b in BAD_JSON])
def test_bad_json_frames(payload: bytes, message: str, peeked: tuple[int, int] | None) -> None:
    _assert_bad(payload, message, peeked)


def test_a_valid_pair_of_surrogates_is_text() -> None:
    cmd = decode(json_payload(r'{"code":105,"extFields":{"topic":"\ud83d\ude00"},"opaque":3}'))
    assert cmd.ext_fields == {"topic": "\U0001f600"}
    cmd = decode(json_payload(r'{"code":105,"extFields":{"topic":"\\ud800"},"opaque":3}'))
    assert cmd.ext_fields == {"topic": "\\ud800"}


def test_lenient_json_header_values() -> None:
    # what the header does not need is read leniently: flag and version default to 0,
    # a language that is no string reads OTHER, null extFields and null values are none
    cmd = decode(json_payload('{"code":"105","extFields":null,"language":7,"opaque":"+3"}'))
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.version, cmd.language, cmd.ext_fields) == (
        105, 3, 0, 0, "OTHER", {})
    cmd = decode(json_payload('{"code":1,"extFields":{"a":null,"b":1.5,"c":true},"opaque":3}'))
    assert cmd.ext_fields == {"b": 1.5, "c": True}


# A binary header with every field: code 105, language JAVA, version 401, opaque 3,
# flag 0, remark "hi", extFields {"topic": "T"}.
BIN_HEADER = (b"\x00\x69" b"\x00" b"\x01\x91" b"\x00\x00\x00\x03" b"\x00\x00\x00\x00"
              b"\x00\x00\x00\x02" b"hi"
              b"\x00\x00\x00\x0c" b"\x00\x05" b"topic" b"\x00\x00\x00\x01" b"T")
BIN_FIELDS = [  # (end offset of the field, what a header cut inside it says)
    (2, r"truncated in its code \(byte 0\)"),
    (3, r"truncated in its language \(byte 2\)"),
    (5, r"truncated in its version \(byte 3\)"),
    (9, r"truncated in its opaque \(byte 5\)"),
    (13, r"truncated in its flag \(byte 9\)"),
    (17, r"truncated in its remark length \(byte 13\)"),
    (19, r"remark length 2 runs past the header"),
    (23, r"truncated in its extFields length \(byte 19\)"),
    (len(BIN_HEADER), r"extFields length 12 does not match the \d+ bytes left in the header"),
]


def test_binary_header_golden_parts() -> None:
    payload = word(1, len(BIN_HEADER)) + BIN_HEADER
    assert payload == binary_payload(105, JAVA, 401, 3, 0, "hi", [("topic", "T")])
    cmd = decode(payload)
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark,
            cmd.ext_fields) == (105, "JAVA", 401, 3, 0, "hi", {"topic": "T"})


@pytest.mark.parametrize("cut", range(len(BIN_HEADER)))
def test_binary_header_truncated_at_each_field(cut: int) -> None:
    message = next(m for end, m in BIN_FIELDS if cut < end)
    payload = word(1, cut) + BIN_HEADER[:cut]
    # code and opaque are read once the fixed part (13 bytes) is there
    _assert_bad(payload, message, (105, 3) if cut >= 13 else None)
    # the same cut with the body that follows it: the header length still rules
    with pytest.raises(RemoteProtocolError, match=message):
        decode(payload + b"body")


def bin_with_entries(entries: bytes, remark: bytes = b"", flag: int = 0,
                     ext_len: int | None = None) -> bytes:
    """A binary request header (code 105, opaque 3) with these extFields bytes."""
    header = (b"\x00\x69\x00\x01\x91\x00\x00\x00\x03" + struct.pack(">i", flag)
              + struct.pack(">i", len(remark)) + remark
              + struct.pack(">i", len(entries) if ext_len is None else ext_len) + entries)
    return word(1, len(header)) + header


BAD_BINARY = [
    ("remark-length-negative",
     word(1, 21) + b"\x00\x69\x00\x01\x91\x00\x00\x00\x03\x00\x00\x00\x00\xff\xff\xff\xff"
     + b"\x00\x00\x00\x00", r"remark length -1 runs past the header", (105, 3)),
    ("remark-length-past",
     word(1, 21) + b"\x00\x69\x00\x01\x91\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x09"
     + b"\x00\x00\x00\x00", r"remark length 9 runs past the header \(4 bytes left\)", (105, 3)),
    ("ext-length-negative",
     word(1, 21) + b"\x00\x69\x00\x01\x91\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00"
     + b"\xff\xff\xff\xfe", r"extFields length -2 does not match the 0 bytes left", (105, 3)),
    ("ext-length-past",
     word(1, 21) + b"\x00\x69\x00\x01\x91\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00"
     + b"\x00\x00\x00\x05", r"extFields length 5 does not match the 0 bytes left", (105, 3)),
    ("ext-length-short", bin_with_entries(b"\x00\x01a\x00\x00\x00\x01b", ext_len=2),
     r"extFields length 2 does not match the 8 bytes left", (105, 3)),
    ("key-length-truncated", bin_with_entries(b"\x00"),
     r"extFields entry 0 is truncated in its key length", (105, 3)),
    ("key-length-negative", bin_with_entries(b"\xff\xff"),
     r"extFields key length -1 runs past the header", (105, 3)),
    ("key-past", bin_with_entries(b"\x00\x09topic"),
     r"extFields key length 9 runs past the header \(5 bytes left\)", (105, 3)),
    ("value-length-truncated", bin_with_entries(b"\x00\x05topic\x00\x00"),
     r"extFields entry 'topic' is truncated in its value length", (105, 3)),
    ("value-length-negative", bin_with_entries(b"\x00\x05topic\x80\x00\x00\x00"),
     r"extFields value length -2147483648 of 'topic' runs past", (105, 3)),
    ("value-past", bin_with_entries(b"\x00\x05topic\x00\x00\x00\x04T"),
     r"extFields value length 4 of 'topic' runs past the header \(1 bytes left\)", (105, 3)),
    ("second-entry-truncated",
     bin_with_entries(b"\x00\x05topic\x00\x00\x00\x01T\x00\x02qu"),
     r"extFields key length 2 runs past|extFields entry 'qu' is truncated", (105, 3)),
    ("remark-not-utf8", bin_with_entries(b"", remark=b"caf\xe9"), r"remark is not UTF-8", (105, 3)),
    ("key-not-utf8", bin_with_entries(b"\x00\x02\xc3\x28\x00\x00\x00\x01T"),
     r"extFields key is not UTF-8", (105, 3)),
    ("value-not-utf8", bin_with_entries(b"\x00\x05topic\x00\x00\x00\x02\xed\xa0"),
     r"extFields value of 'topic' is not UTF-8", (105, 3)),
    ("value-surrogate-utf8", bin_with_entries(b"\x00\x05topic\x00\x00\x00\x03\xed\xa0\x80"),
     r"extFields value of 'topic' is not UTF-8", (105, 3)),
    ("response-not-peeked", bin_with_entries(b"\x00", flag=FLAG_RESPONSE),
     r"extFields entry 0 is truncated", None),
    ("oneway-not-peeked", bin_with_entries(b"\x00", flag=FLAG_ONEWAY),
     r"extFields entry 0 is truncated", None),
]


@pytest.mark.parametrize(("payload", "message", "peeked"), [b[1:] for b in BAD_BINARY],
                         ids=[b[0] for b in BAD_BINARY])
def test_bad_binary_frames(payload: bytes, message: str, peeked: tuple[int, int] | None) -> None:
    _assert_bad(payload, message, peeked)


def test_binary_unknown_language_reads_other() -> None:
    cmd = decode(binary_payload(105, 99, 1, 3, 0, "", []))
    assert cmd.language == "OTHER"
    assert decode(binary_payload(105, -1, 1, 3, 0, "", [])).language == "OTHER"
    assert decode(binary_payload(105, 9, 1, 3, 0, "", [])).language == "GO"


def test_peek_request_reads_code_and_opaque_of_refused_requests() -> None:
    ok = json_payload('{"code":10,"extFields":{"queueId":[1]},"opaque":77}')
    assert ROCKETMQ_JSON.peek_request(ok) == (10, 77)
    assert ROCKETMQ_JSON.peek_request(json_payload('{"code":10,"opaque":77,"flag":3}')) is None
    assert ROCKETMQ_BINARY.peek_request(binary_payload(10, 0, 0, 77, 0, "", [])) == (10, 77)


# ---- encoding refusals ---------------------------------------------------------------


@pytest.mark.parametrize(("codec", "cmd", "message"), [
    (ROCKETMQ_BINARY, RemotingCommand(40000), r"rocketmq-binary header code 40000 is not an integer"
                                              r" in -32768..32767"),
    (ROCKETMQ_BINARY, RemotingCommand(1, version=-40000), r"header version -40000"),
    (ROCKETMQ_BINARY, RemotingCommand(1, opaque=2**31), r"header opaque 2147483648"),
    (ROCKETMQ_JSON, RemotingCommand(1, opaque=2**31), r"rocketmq-json header opaque 2147483648"),
    (ROCKETMQ_JSON, RemotingCommand(2**31), r"header code 2147483648"),
    (ROCKETMQ_JSON, RemotingCommand(1, flag=-(2**31) - 1), r"header flag -2147483649"),
    (ROCKETMQ_BINARY, RemotingCommand(1, ext_fields={"k" * 32768: "v"}),
     r"header field name of 32768 bytes exceeds 32767"),
    (ROCKETMQ_JSON, RemotingCommand(1, body=b"", ext_fields={"k": "v" * (1 << 24)}),
     r"header of \d+ bytes exceeds 16777215"),
])
def test_what_cannot_be_encoded_is_a_local_protocol_error(
        codec: Codec, cmd: RemotingCommand, message: str) -> None:
    with pytest.raises(LocalProtocolError, match=message):
        codec.encode(cmd)


def test_ext_values_that_are_no_scalars_cannot_be_encoded() -> None:
    for codec in (ROCKETMQ_JSON, ROCKETMQ_BINARY):
        with pytest.raises(TypeError, match="header field 'x' holds a float"):
            codec.encode(RemotingCommand(1, ext_fields={"x": 1.5}))
        with pytest.raises(TypeError, match="holds a list"):
            codec.encode(RemotingCommand(1, ext_fields={"x": [1]}))
        with pytest.raises(ValueError):  # UnicodeEncodeError: a lone surrogate is no UTF-8
            codec.encode(RemotingCommand(1, remark="\udc80"))


def test_enum_codes_are_written_as_numbers() -> None:
    payload = ROCKETMQ_JSON.encode(RemotingCommand(RequestCode.SEND_MESSAGE, opaque=1))
    assert payload[4:] == (b'{"code":10,"flag":0,"language":"PYTHON","opaque":1,'
                           b'"serializeTypeCurrentRPC":"JSON","version":1}')
    assert decode(ROCKETMQ_BINARY.encode(RemotingCommand(RequestCode.SEND_MESSAGE))).code == 10


def test_detect() -> None:
    assert detect(b"") is MSGPACK
    assert detect(b"\x00\x00\x00\x02{}") is ROCKETMQ_JSON
    assert detect(b"\x01\x00\x00\x00") is ROCKETMQ_BINARY
    msgpack_payload = MSGPACK.encode(RemotingCommand(105, opaque=1, ext_fields={"topic": "T"}))
    assert msgpack_payload[0] == 0x97 and detect(msgpack_payload) is MSGPACK
    assert detect(b"\x02\x00\x00\x00") is MSGPACK  # neither: msgpack's decoder refuses it
    with pytest.raises(RemoteProtocolError):
        detect(b"\x02\x00\x00\x00").decode(b"\x02\x00\x00\x00")


# ---- bodies --------------------------------------------------------------------------

JSON_BODIES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(JSON_BODIES)
def test_json_bodies_round_trip(obj: Any) -> None:
    for codec in (ROCKETMQ_JSON, ROCKETMQ_BINARY):
        body = codec.pack_body(obj)
        assert json.loads(body) == obj  # plain JSON, whatever the header type
        assert codec.unpack_body(body) == obj
        cmd = RemotingCommand(34, codec=codec)
        cmd.body = cmd.encode_body(obj)
        assert decode(cmd.encode()).decode_body() == obj


def test_json_bodies_are_compact_utf8() -> None:
    assert ROCKETMQ_JSON.pack_body({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'.encode()


@pytest.mark.parametrize("codec", [ROCKETMQ_JSON, ROCKETMQ_BINARY, MSGPACK], ids=lambda c: c.name)
def test_unpack_body_refusals(codec: Codec) -> None:
    with pytest.raises(RemoteProtocolError, match="missing body"):
        codec.unpack_body(None)
    for garbage in (b"{not json", b"\xff\xfe\x00", b"\xc1", b'{"a":1', b""):
        with pytest.raises(RemoteProtocolError, match="undecodable body"):
            codec.unpack_body(garbage)


REGISTRATION = {"topicConfigTable": {"A": {"perm": 6}, "B": {"perm": 4}},
                "dataVersion": {"counter": 1, "timestamp": 2}}


def _read_registration(reader: Any) -> list[Any]:
    """msgpack's maps say their counts; JSON's are UNKNOWN_LENGTH, walked with
    ``more`` (which says False once the map is closed)."""
    counted = not isinstance(reader, JsonBodyReader)

    def opened(n: int | None, count: int) -> None:
        assert n == (count if counted else UNKNOWN_LENGTH)

    def entry() -> None:
        if not counted:
            assert reader.more()

    def closed() -> None:
        if not counted:
            assert not reader.more()

    seen: list[Any] = []
    opened(reader.read_map_header(), 2)
    entry()
    assert reader.unpack() == "topicConfigTable"
    opened(reader.read_map_header(), 2)
    entry()
    seen += [reader.unpack(), reader.unpack()]  # "A", {"perm": 6}
    entry()
    assert reader.unpack() == "B"
    reader.skip()
    closed()
    entry()
    assert reader.unpack() == "dataVersion"
    seen.append(reader.unpack())
    closed()
    assert reader.at_end()
    return seen


@pytest.mark.parametrize("codec", [ROCKETMQ_JSON, ROCKETMQ_BINARY, MSGPACK], ids=lambda c: c.name)
def test_body_reader_reads_a_map_entry_by_entry(codec: Codec) -> None:
    reader = codec.body_reader(io.BytesIO(codec.pack_body(REGISTRATION)))
    assert isinstance(reader, MsgpackBodyReader if codec is MSGPACK else JsonBodyReader)
    assert _read_registration(reader) == ["A", {"perm": 6}, {"counter": 1, "timestamp": 2}]


@pytest.mark.parametrize("codec", [ROCKETMQ_JSON, MSGPACK], ids=lambda c: c.name)
def test_body_reader_refuses_what_is_no_map(codec: Codec) -> None:
    for value in ([1, 2], "text", 5, True):
        reader = codec.body_reader(io.BytesIO(codec.pack_body(value)))
        with pytest.raises(NotAMapError, match="expected a map"):
            reader.read_map_header()
    # a nested value
    one = 1 if codec is MSGPACK else UNKNOWN_LENGTH
    reader = codec.body_reader(io.BytesIO(codec.pack_body({"topicConfigTable": ["A"]})))
    assert reader.read_map_header() == one
    assert (codec is MSGPACK or reader.more()) and reader.unpack() == "topicConfigTable"
    with pytest.raises(NotAMapError):
        reader.read_map_header()
    # nil reads as no map
    reader = codec.body_reader(io.BytesIO(codec.pack_body({"t": None})))
    assert reader.read_map_header() == one
    assert (codec is MSGPACK or reader.more()) and reader.unpack() == "t"
    assert reader.read_map_header() is None
    assert codec is MSGPACK or not reader.more()
    assert reader.at_end()
    # NotAMapError is a RemoteProtocolError: a bad registration body is answered, not raised
    assert issubclass(NotAMapError, RemoteProtocolError)


def test_body_readers_refuse_truncated_and_garbage_bodies() -> None:
    reader = JsonBodyReader(io.BytesIO(b'{"a":1}'))
    assert reader.read_map_header() == UNKNOWN_LENGTH and reader.more()
    assert reader.unpack() == "a" and reader.unpack() == 1
    assert not reader.more()
    with pytest.raises(RemoteProtocolError, match="truncated"):
        reader.unpack()
    reader = JsonBodyReader(io.BytesIO(b'{"a":'))
    assert reader.read_map_header() == UNKNOWN_LENGTH and reader.more()
    assert reader.unpack() == "a"
    with pytest.raises(RemoteProtocolError, match="undecodable body: truncated"):
        reader.unpack()
    with pytest.raises(RemoteProtocolError, match="undecodable body"):
        JsonBodyReader(io.BytesIO(b'{"a":"\xff"}'))
    reader = JsonBodyReader(io.BytesIO(b'{"a" 1, 5:2}'))
    assert reader.read_map_header() == UNKNOWN_LENGTH and reader.more()
    with pytest.raises(RemoteProtocolError, match="expected ':'"):
        reader.unpack(), reader.unpack()
    reader = JsonBodyReader(io.BytesIO(b'{"a":1 "b":2}'))
    assert reader.read_map_header() == UNKNOWN_LENGTH and reader.more()
    assert reader.unpack() == "a" and reader.unpack() == 1
    with pytest.raises(RemoteProtocolError, match="expected ','"):
        reader.more()
    reader = JsonBodyReader(io.BytesIO(b'{5:1}'))
    assert reader.read_map_header() == UNKNOWN_LENGTH and reader.more()
    with pytest.raises(RemoteProtocolError, match="key must be a string"):
        reader.unpack()
    reader = JsonBodyReader(io.BytesIO(b'{"a":1} x'))
    assert reader.read_map_header() == UNKNOWN_LENGTH and reader.more()
    assert reader.unpack() == "a" and reader.unpack() == 1 and not reader.more()
    assert not reader.at_end()
    m = MsgpackBodyReader(io.BytesIO(msgpack.packb({"a": 1})[:-1]))
    assert m.read_map_header() == 1 and m.unpack() == "a"
    with pytest.raises(RemoteProtocolError, match="truncated"):
        m.unpack()
    with pytest.raises(RemoteProtocolError, match="undecodable body"):
        MsgpackBodyReader(io.BytesIO(b"\xc1")).unpack()


def test_response_flag_constants() -> None:
    # the flag bits the golden frames use
    assert (FLAG_RESPONSE, FLAG_ONEWAY) == (1, 2)
