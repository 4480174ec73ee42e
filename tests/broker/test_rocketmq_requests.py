"""Requests as RocketMQ's Java and C++ clients send them, against an in-process
broker: pulls with and without their own subscription (PullSysFlag), the
heart-beat subscriptions they fall back on, and QUERY_MESSAGE's header."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.client_manager import ClientGroups
from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.pull_processor import FLAG_CLASS_FILTER, FLAG_LITE_PULL, FLAG_SUBSCRIPTION, FLAG_SUSPEND
from protocol.codecs import ROCKETMQ_JSON
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.hashing import java_string_hash
from protocol.headers import PullMessageResponseHeader, QueryMessageResponseHeader
from protocol.record import decode_records
from protocol.route import TopicConfig
from tests.broker.fakes import FakeConn
from tests.broker.store.helpers import inner

GROUP = "cg"
TOPIC = "T"
TAGS = ["TagA", "TagB", "TagA", "TagC", "TagA"]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerController]:
    c = BrokerController(BrokerConfig(
        store_path_root_dir=str(tmp_path), listen_port=0, maped_file_size_commit_log=1 << 20,
        maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64, max_index_num=256))
    c._load()
    c.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
    c.topic_config_manager.update(TopicConfig("Other", 1, 1))
    for i, tag in enumerate(TAGS):
        c.message_store.put_message(inner(TOPIC, 0, f"m{i}".encode(), tags=tag, keys=f"key{i}"))
    try:
        yield c
    finally:
        c._persist_and_close()


def call(c: BrokerController, code: int, fields: dict[str, Any], body: bytes | None = None,
         conn: FakeConn | None = None) -> RemotingCommand:
    """``code`` in RocketMQ's JSON format (header values as text), its answer as the
    client reads it; a refused header becomes the SYSTEM_ERROR a connection sends."""
    cmd = ROCKETMQ_JSON.decode(ROCKETMQ_JSON.encode(RemotingCommand.request(
        code, {k: str(v) for k, v in fields.items()}, body)))
    handler, _ = c._handler_table().lookup(code)
    assert handler is not None
    try:
        response = handler(conn or FakeConn(), cmd)  # type: ignore[arg-type]
    except RemoteProtocolError as exc:
        response = cmd.response(ResponseCode.SYSTEM_ERROR, f"bad request: {exc}")
    assert response is not None
    return ROCKETMQ_JSON.decode(ROCKETMQ_JSON.encode(response))


def java_heartbeat(client_id: str, subs: dict[str, tuple[str, int]],
                   model: str = "CLUSTERING") -> bytes:
    """A Java push consumer's heart-beat body: topic -> (expression, subVersion)."""
    data = []
    for topic, (expression, version) in subs.items():
        tags = [] if expression == "*" else [t.strip() for t in expression.split("||")]
        data.append({"classFilterMode": False, "codeSet": [java_string_hash(t) for t in tags],
                     "expressionType": "TAG", "subString": expression, "subVersion": version,
                     "tagsSet": tags, "topic": topic})
    return json.dumps({
        "clientID": client_id,
        "consumerDataSet": [{"consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                             "consumeType": "CONSUME_PASSIVELY", "groupName": GROUP,
                             "messageModel": model, "subscriptionDataSet": data,
                             "unitMode": False}],
        "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
    }).encode()


def pull(c: BrokerController, sys_flag: int, offset: int = 0, **extra: Any) -> RemotingCommand:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "queueOffset": offset,
              "maxMsgNums": 32, "sysFlag": sys_flag, "commitOffset": 0,
              "suspendTimeoutMillis": 0, "subVersion": 100, **extra}
    return call(c, RequestCode.PULL_MESSAGE, fields)


def bodies(r: RemotingCommand) -> list[bytes]:
    assert r.code == ResponseCode.SUCCESS, r.remark
    return [m.body for m in decode_records(r.body or b"")]


async def test_pull_without_its_subscription_takes_the_heartbeats(broker: BrokerController
                                                                 ) -> None:
    # nobody of the group online: RocketMQ's answer
    r = pull(broker, FLAG_SUSPEND)
    assert (r.code, r.remark) == (ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                  "the consumer's group info not exist")
    hb = call(broker, RequestCode.HEART_BEAT, {},
              java_heartbeat("10.0.0.1@1", {TOPIC: ("TagA", 100), "Other": ("*", 100)}))
    assert hb.code == ResponseCode.SUCCESS, hb.remark
    # the heart-beat's TagA, whatever the request names without the flag
    assert bodies(pull(broker, 0, subscription="TagB")) == [b"m0", b"m2", b"m4"]
    # with the flag, the request's own
    assert bodies(pull(broker, FLAG_SUBSCRIPTION, subscription="TagB || TagC")) == [b"m1", b"m3"]
    assert bodies(pull(broker, FLAG_SUBSCRIPTION)) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    # bits the broker does not act on change nothing; unknown bits are ignored
    assert bodies(pull(broker, FLAG_CLASS_FILTER | FLAG_LITE_PULL | 0x400)) == \
        [b"m0", b"m2", b"m4"]
    # a request newer than what the broker holds
    r = pull(broker, 0, subVersion=101)
    assert (r.code, r.remark) == (ResponseCode.SUBSCRIPTION_NOT_LATEST,
                                  "the consumer's subscription not latest")
    # a topic the group's heart-beats do not subscribe
    hb = call(broker, RequestCode.HEART_BEAT, {},
              java_heartbeat("10.0.0.1@1", {"Other": ("*", 200)}))
    r = pull(broker, 0)
    assert (r.code, r.remark) == (ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                  "the consumer's subscription not exist")
    # the newer heart-beat subscribes again, with another expression
    call(broker, RequestCode.HEART_BEAT, {},
         java_heartbeat("10.0.0.1@1", {TOPIC: ("TagC", 300)}))
    assert bodies(pull(broker, 0, subVersion=300)) == [b"m3"]
    # once the group's last member is gone, nothing to fall back on
    r = call(broker, RequestCode.UNREGISTER_CLIENT,
             {"clientID": "10.0.0.1@1", "consumerGroup": GROUP, "producerGroup": ""})
    assert r.code == ResponseCode.SUCCESS
    assert pull(broker, 0).code == ResponseCode.SUBSCRIPTION_NOT_EXIST


async def test_subscriptions_the_broker_cannot_serve(broker: BrokerController) -> None:
    call(broker, RequestCode.HEART_BEAT, {}, java_heartbeat("c1", {TOPIC: ("TagB", 1)}))
    r = pull(broker, FLAG_SUBSCRIPTION, subscription="a > 5", expressionType="SQL92")
    assert r.code == ResponseCode.SYSTEM_ERROR and "SQL92" in (r.remark or "")
    r = pull(broker, FLAG_SUBSCRIPTION, subscription="||")
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


async def test_broadcasting_heartbeat_on_a_group_that_forbids_it(broker: BrokerController
                                                                ) -> None:
    cfg = broker.subscription_group_manager.find(GROUP)
    assert cfg is not None
    call(broker, RequestCode.HEART_BEAT, {}, java_heartbeat("c1", {TOPIC: ("*", 1)}))
    assert pull(broker, 0, subVersion=1).code == ResponseCode.SUCCESS
    broker.consumer_manager.groups[GROUP].message_model = "BROADCASTING"
    broker.subscription_group_manager.update(
        dataclasses.replace(cfg, consume_broadcast_enable=False))
    r = pull(broker, 0, subVersion=1)
    assert r.code == ResponseCode.NO_PERMISSION and "broadcast" in (r.remark or "")


async def test_every_pull_answer_carries_the_offsets_header(broker: BrokerController) -> None:
    cases = [
        (0, "*", ResponseCode.SUCCESS),
        (5, "*", ResponseCode.PULL_NOT_FOUND),  # at the end
        (9, "*", ResponseCode.PULL_OFFSET_MOVED),  # past it
        (0, "NoSuchTag", ResponseCode.PULL_RETRY_IMMEDIATELY),  # nothing matched
    ]
    for offset, expression, code in cases:
        r = pull(broker, FLAG_SUBSCRIPTION, offset, subscription=expression)
        assert r.code == code, (offset, r.remark)
        assert {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"} <= \
            set(r.ext_fields), code
        h = PullMessageResponseHeader.from_fields(r.ext_fields)
        assert (h.suggest_which_broker_id, h.min_offset, h.max_offset) == (0, 0, 5)


def test_heartbeat_subscriptions_follow_rocketmq_rules() -> None:
    groups = ClientGroups("consumer")

    def beat(*subs: tuple[str, str, int]) -> dict[str, Any]:
        groups.register("g", "c1", object(), 0.0, {"subscriptionDataSet": [
            {"topic": t, "subString": s, "subVersion": v} for t, s, v in subs]})
        return {t: (d["subString"], d["subVersion"])
                for t, d in groups.groups["g"].subscriptions.items()}

    assert beat(("A", "x", 5), ("B", "*", 5)) == {"A": ("x", 5), "B": ("*", 5)}
    # an older subVersion does not replace; a topic left out goes
    assert beat(("A", "old", 4)) == {"A": ("x", 5)}
    assert beat(("A", "new", 6), ("C", "*", 0)) == {"A": ("new", 6), "C": ("*", 0)}


async def test_query_message_answers_rocketmqs_header(broker: BrokerController) -> None:
    fields = {"topic": TOPIC, "key": "key3", "maxNum": 32, "beginTimestamp": 0,
              "endTimestamp": 2**62}
    r = call(broker, RequestCode.QUERY_MESSAGE, fields)
    assert r.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(r.body or b"")] == [b"m3"]
    h = QueryMessageResponseHeader.from_fields(r.ext_fields)
    # the newest indexed record: the last one stored
    last = decode_records(broker.message_store.query_message(TOPIC, "key4", 1, 0, 2**62)[0])[0]
    assert (h.index_last_update_timestamp, h.index_last_update_phyoffset) == \
        (last.store_timestamp, last.commit_log_offset)
    r = call(broker, RequestCode.QUERY_MESSAGE, {**fields, "key": "nope"})
    assert r.code == ResponseCode.QUERY_NOT_FOUND
    assert set(r.ext_fields) == {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"}
    # a query by message id (the uniq key) as MQAdminImpl sends it
    r = call(broker, RequestCode.QUERY_MESSAGE, {**fields, "key": "key1", "maxNum": 0,
                                                 "_UNIQUE_KEY_QUERY": "true"})
    assert r.code == ResponseCode.SUCCESS
