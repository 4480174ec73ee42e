"""Hypothesis over names at every broker and name-server entry point.

Any string (any length, NUL bytes, separators, ``..``, absolute paths) as a
topic, group, broker or cluster name gives a clean error response or a valid
result, never an unexpected exception (a traceback in a daemon), never a name
outside RocketMQ's rules accepted, and never a path outside the store.

The handlers run as the connection runs them (protocol errors become error
responses; anything else fails the test), on a real BrokerController over a
store in a temporary directory, without sockets.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.config import BrokerConfig
from broker.controller import BrokerController
from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import MAX_REMARK, RemotingCommand
from protocol.errors import ProtocolError
from protocol.names import (
    InvalidNameError,
    check_addr,
    check_broker_name,
    check_group,
    check_topic,
    dlq_topic,
    retry_topic,
)
from protocol.trio.connection import HandlerTable
from tests.broker.fakes import FakeConn

VALID = re.compile(r"[%|a-zA-Z0-9_-]+")

NAMES = st.one_of(
    st.text(max_size=300),
    st.text(alphabet="%|aZ09_-./\\\x00 :", max_size=300),
    st.sampled_from([
        "", ".", "..", "../x", "x/../RTSeed", "x/../../../escape", "/etc", "/tmp/victim",
        "nul\x00byte", "a" * 120, "a" * 121, "a" * 127, "a" * 128, "a" * 255, "a" * 256,
        "%RETRY%" + "a" * 120, "%DLQ%x", "\u00e9t\u00e9", "a\nb", "\\..\\x",
    ]),
    st.text(max_size=40).map(lambda s: "/" + s),
    st.text(max_size=40).map(lambda s: "x/../" + s),
)




def call(table: HandlerTable, cmd: RemotingCommand) -> RemotingCommand | None:
    """Run a sync handler as RemotingConnection does: protocol errors are answers."""
    handler, _ = table.lookup(cmd.code)
    assert handler is not None, cmd.code
    try:
        response = handler(FakeConn(), cmd)  # type: ignore[arg-type]
    except ProtocolError as exc:
        response = cmd.response(ResponseCode.SYSTEM_ERROR, f"bad request: {exc}")
    if response is not None:
        assert response.remark is None or len(response.remark) <= MAX_REMARK
    return response


def inside(root: Path, base: Path) -> None:
    """Nothing new beside the store; everything under the store resolves inside it."""
    assert sorted(p.name for p in base.iterdir()) == ["outside", "store"]
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name).resolve()
            assert root in p.parents, p


@pytest.fixture(scope="module")
def broker_env() -> Iterator[tuple[BrokerController, Path, Path]]:
    base = Path(tempfile.mkdtemp(prefix="names-"))
    root = base / "store"
    (base / "outside").mkdir()
    (base / "outside" / "keep.txt").write_text("keep")
    config = BrokerConfig(
        store_path_root_dir=str(root), maped_file_size_commit_log=1 << 20,
        maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64, max_index_num=256,
    )
    controller = BrokerController(config)
    controller._load()
    try:
        yield controller, root.resolve(), base
    finally:
        controller._persist_and_close()
        shutil.rmtree(base, ignore_errors=True)


def entry_requests(name: str) -> list[RemotingCommand]:
    """One request per entry point where ``name`` enters as a topic or group."""
    r = RemotingCommand.request
    return [
        r(RequestCode.SEND_MESSAGE, {"producerGroup": "pg", "topic": name, "queueId": 0}, b"x"),
        r(RequestCode.SEND_MESSAGE, {"producerGroup": name, "topic": "T1", "queueId": 0}, b"x"),
        r(RequestCode.PULL_MESSAGE, {"consumerGroup": name, "topic": "T1", "queueId": 0,
                                     "queueOffset": 0, "maxMsgNums": 1}),
        r(RequestCode.PULL_MESSAGE, {"consumerGroup": "cg", "topic": name, "queueId": 0,
                                     "queueOffset": 0, "maxMsgNums": 1}),
        r(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": 0, "group": name, "delayLevel": 1}),
        r(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": 0, "group": name, "delayLevel": -1}),
        r(RequestCode.HEART_BEAT, body=pack_body({
            "clientID": "c1", "consumerDataSet": [{"groupName": name, "subscriptionDataSet": [
                {"topic": "T1", "subString": "*"}]}]})),
        r(RequestCode.HEART_BEAT, body=pack_body({
            "clientID": "c1", "consumerDataSet": [{"groupName": "cg", "subscriptionDataSet": [
                {"topic": name, "subString": "*"}]}], "producerDataSet": [{"groupName": name}]})),
        r(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": name, "topic": "T1",
                                               "queueId": 0, "commitOffset": 1}),
        r(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "cg", "topic": name,
                                               "queueId": 0, "commitOffset": 1}),
        r(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": name, "topic": name, "queueId": 0}),
        r(RequestCode.GET_MAX_OFFSET, {"topic": name, "queueId": 0}),
        r(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": name, "readQueueNums": 1,
                                                "writeQueueNums": 1}),
        r(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": name}),
        r(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=pack_body({"groupName": name})),
        r(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": name}),
        r(RequestCode.GET_CONSUME_STATS, {"consumerGroup": name}),
        r(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": name}),
        r(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": name}),
        r(RequestCode.QUERY_MESSAGE, {"topic": name, "key": name, "maxNum": 1,
                                      "beginTimestamp": 0, "endTimestamp": 2**62}),
        r(RequestCode.LOCK_BATCH_MQ, body=pack_body({
            "consumerGroup": name, "clientId": "c1",
            "mqSet": [{"topic": name, "brokerName": name, "queueId": 0}]})),
        r(RequestCode.GET_TOPIC_STATS_INFO, {"topic": name}),
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAMES)
async def test_broker_entry_points(broker_env: tuple[BrokerController, Path, Path],
                                   name: str) -> None:
    controller, root, base = broker_env
    table = controller._handler_table()
    for cmd in entry_requests(name):
        call(table, cmd)
    inside(root, base)
    assert (base / "outside" / "keep.txt").read_text() == "keep"
    assert sorted(p.name for p in (base / "outside").iterdir()) == ["keep.txt"]
    # whatever was accepted is a valid name
    for topic in controller.topic_config_manager.table:
        assert VALID.fullmatch(topic) and len(topic) <= 127, topic
    for group in controller.subscription_group_manager.table:
        assert VALID.fullmatch(group) and len(group) <= 255, group
    for key in controller.consumer_offset_manager.offset_table:
        topic, _, group = key.partition("@")
        assert VALID.fullmatch(topic) and VALID.fullmatch(group), key
    for topic_dir in (root / "consumequeue").iterdir() if (root / "consumequeue").exists() else []:
        assert VALID.fullmatch(topic_dir.name), topic_dir


@settings(max_examples=150, deadline=None)
@given(name=NAMES, cluster=NAMES, addr=st.one_of(NAMES, st.just("127.0.0.1:10911")))
def test_name_server_entry_points(name: str, cluster: str, addr: str) -> None:
    routes = RouteInfoManager()
    table = NamesrvProcessor(routes, lambda: 0.0).handler_table()
    r = RemotingCommand.request
    header = {"brokerName": name, "brokerAddr": addr, "clusterName": cluster,
              "haServerAddr": "127.0.0.1:10912", "brokerId": 0}
    body = pack_body({"topicConfigTable": {name: {"topicName": name}}})
    call(table, r(RequestCode.REGISTER_BROKER, header, body))
    for code, fields in [
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": name}),
        (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": name}),
        (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": name}),
        (RequestCode.UNREGISTER_BROKER, {k: header[k] for k in
                                         ("brokerName", "brokerAddr", "clusterName", "brokerId")}),
    ]:
        call(table, r(code, fields))
    for topic in routes.topic_queue_table:
        assert VALID.fullmatch(topic) and len(topic) <= 127
    for broker in routes.broker_addr_table:
        assert VALID.fullmatch(broker) and len(broker) <= 127


@given(name=NAMES)
def test_name_checks_accept_only_valid_names(name: str) -> None:
    checks: list[tuple[Callable[[Any], str], int]] = [
        (check_topic, 127), (check_group, 255), (check_broker_name, 127),
    ]
    for check, limit in checks:
        try:
            check(name)
        except InvalidNameError as exc:
            assert len(str(exc)) < 200
        else:
            assert VALID.fullmatch(name) and len(name) <= limit
    for derive in (retry_topic, dlq_topic):
        try:
            topic = derive(name)
        except InvalidNameError:
            continue
        check_topic(topic)
    try:
        check_addr(name)
    except InvalidNameError:
        pass
    else:
        assert "/" not in name and "\x00" not in name

