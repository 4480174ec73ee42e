"""The pure parts of mqadmin's topic, message, queue and cluster commands
(client/admin_topics.py): time and charset options, RocketMQ's toString texts,
RT averages, tag counts, the streamed JSON document; and their option checks
(no daemon needed). The commands against live daemons:
tests/integration/test_admin_topics.py."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from click.testing import CliRunner

from client.admin_cli import cli
from client.admin_topics import (
    JsonStream,
    average_rt,
    check_charset,
    cq_entry_text,
    hello_body,
    java_queue,
    message_line,
    parse_timestamp,
    send_result_text,
    tag_counts,
)
from client.send_result import SendResult, SendStatus
from protocol.message import MessageExt, MessageQueue


def test_parse_timestamp() -> None:
    assert parse_timestamp("1700000000123") == 1700000000123
    assert parse_timestamp(" 42 ") == 42
    second = int(dt.datetime(2024, 1, 2, 3, 4, 5).timestamp()) * 1000  # local time
    assert parse_timestamp("2024-01-02#03:04:05:006") == second + 6
    assert parse_timestamp("2024-01-02#03:04:05:6") == second + 6  # as Java's SSS reads it
    for bad in ("2024-01-02 03:04:05", "yesterday", "", "2024-13-02#03:04:05:006",
                "2024-01-02#03:04:05", "2024-01-02#03:04:05:1234"):
        with pytest.raises(ValueError, match="yyyy-MM-dd#HH:mm:ss:SSS"):
            parse_timestamp(bad)


def test_check_charset() -> None:
    assert check_charset("UTF-8") == "utf-8"
    assert check_charset("GBK") == "gbk"
    with pytest.raises(ValueError, match="unknown charset"):
        check_charset("NOPE-1")


def test_hello_body_and_average_rt() -> None:
    assert hello_body(11) == b"hello jodie"
    assert len(hello_body(12)) == 22 and len(hello_body(1)) == 11
    assert average_rt([9.0, 1.0, 3.0]) == 2.0  # the first send is left out
    assert average_rt([4.0]) == 4.0
    assert average_rt([]) == 0.0


def test_tag_counts_most_first() -> None:
    assert tag_counts({"b": 2, "a": 2, "c": 5}) == [("c", 5), ("a", 2), ("b", 2)]


def message() -> MessageExt:
    return MessageExt("T", "你好".encode("gbk"), {"TAGS": "A", "KEYS": "k"}, queue_id=1,
                      queue_offset=7, commit_log_offset=99, store_size=120,
                      born_host="10.0.0.1:1", store_host="10.0.0.2:2", msg_id="ABC")


def test_message_line() -> None:
    line = message_line(message(), "broker-a", "gbk", True)
    assert line.startswith("MSGID: ABC MessageExt [brokerName=broker-a, queueId=1, storeSize=120, "
                           "queueOffset=7, ")
    assert "toString()=Message{topic='T', flag=0, properties={TAGS=A, KEYS=k}, body=[4 bytes]}]" \
        in line
    assert line.endswith(" BODY: 你好")
    assert message_line(message(), "broker-a", "gbk", False).endswith(" BODY: NOT PRINT BODY")


def test_java_texts() -> None:
    mq = MessageQueue("T", "b", 3)
    assert java_queue(mq) == "MessageQueue [topic=T, brokerName=b, queueId=3]"
    r = SendResult(SendStatus.SEND_OK, "U1", mq, 5, "O1")
    assert send_result_text(r) == ("SendResult [sendStatus=SEND_OK, msgId=U1, offsetMsgId=O1, "
                                   "messageQueue=MessageQueue [topic=T, brokerName=b, queueId=3], "
                                   "queueOffset=5]")
    assert cq_entry_text({"physicOffset": 1, "physicSize": 2, "tagsCode": 3, "eval": True}) == (
        "ConsumeQueueData{physicOffset=1, physicSize=2, tagsCode=3, extendDataJson='null', "
        "bitMap='null', eval=true, msg='null'}")


@pytest.mark.parametrize("items", [0, 1, 3])
def test_json_stream_is_one_document(items: int, capsys: pytest.CaptureFixture[str]) -> None:
    stream = JsonStream({"topic": "T"}, "messages")
    for i in range(items):
        stream.add({"i": i})
    stream.close({"tagCounts": []})
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"topic": "T", "messages": [{"i": i} for i in range(items)], "tagCounts": []}
    JsonStream({}, "x").close()
    assert json.loads(capsys.readouterr().out) == {"x": []}


@pytest.mark.parametrize("args, message", [
    (["printMsg", "-n", "127.0.0.1:1", "-t", "T", "-c", "NOPE-1"], "unknown charset"),
    (["printMsg", "-n", "127.0.0.1:1", "-t", "T", "-b", "soon"], "yyyy-MM-dd#HH:mm:ss:SSS"),
    (["printMsgByQueue", "-n", "127.0.0.1:1", "-t", "T", "-a", "b", "-i", "-1"], "-i"),
    (["updateTopicPerm", "-n", "127.0.0.1:1", "-t", "T", "-p", "6"], "-b"),
    (["updateTopicPerm", "-n", "127.0.0.1:1", "-t", "T", "-b", "x:1", "-p", "16"], "0<=x<=15"),
    (["queryCq", "-n", "127.0.0.1:1", "-t", "T", "-q", "0", "-i", "0", "-c", "0"], "-c"),
    (["clusterRT", "-n", "127.0.0.1:1", "-a", "0"], "-a"),
    (["checkMsgSendRT", "-n", "127.0.0.1:1", "-t", "T", "-s", "0"], "-s"),
])
def test_bad_options_are_refused_before_any_request(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and message in result.output, result.output
