"""A consumer's running info without sockets: the pure pieces behind mqadmin
consumerStatus (client/running_info.py, client/consume_stats.py) and what a
consumer answers (ConsumerCore.running_info)."""

from __future__ import annotations

from typing import Any

import pytest

from client.consume_stats import ConsumeStats, Window
from client.process_queue import ProcessQueue
from client.push_consumer import PushConsumer
from client.running_info import (
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    RunningInfo,
    RunningInfoError,
    analyze_process_queue,
    analyze_subscription,
    format_running_info,
    mq_entry,
    process_queue_info,
)
from protocol.message import MessageQueue
from tests.client.test_process_queue import msg

MQ = MessageQueue("T", "broker-a", 1)
NOW_MS = 1_700_000_000_000




def test_process_queue_info_shows_trio_times_on_the_wall_clock() -> None:
    pq = ProcessQueue()
    pq.put_messages([msg(5), msg(6), msg(9)])
    pq.take_messages(1)  # offset 5 is being consumed (orderly)
    pq.last_pull_time, pq.last_consume_time, pq.locked = 98.0, 90.5, True
    info = process_queue_info(pq, commit_offset=5, now=100.0, now_ms=NOW_MS)
    assert info["commitOffset"] == 5
    assert (info["cachedMsgMinOffset"], info["cachedMsgMaxOffset"], info["cachedMsgCount"]) == (5, 9, 3)
    assert (info["transactionMsgMinOffset"], info["transactionMsgCount"]) == (5, 1)
    assert info["lastPullTimestamp"] == NOW_MS - 2000
    assert info["lastConsumeTimestamp"] == NOW_MS - 9500
    assert info["lastLockTimestamp"] == 0  # never: stays 0, not "100 s ago"
    assert info["locked"] is True and info["droped"] is False


def body(**props: str) -> dict[str, Any]:
    pq = {"commitOffset": 7, "cachedMsgCount": 0, "locked": True, "droped": False,
          "lastConsumeTimestamp": NOW_MS, "lastPullTimestamp": NOW_MS}
    return {
        "properties": {PROP_CONSUME_TYPE: "CONSUME_PASSIVELY", PROP_CONSUME_ORDERLY: "false",
                       PROP_CONSUMER_START_TIMESTAMP: str(NOW_MS - 10 * 60_000), **props},
        "subscriptionSet": [{"topic": "T", "subString": "a || b"}],
        "mqTable": [mq_entry(MQ, pq)],
        "statusTable": {"T": {"pullRT": 1.5, "pullTPS": 2.0, "consumeRT": 0.25,
                              "consumeOKTPS": 3.0, "consumeFailedTPS": 0.0,
                              "consumeFailedMsgs": 4}},
    }


def test_format_is_rocketmqs_format_string() -> None:
    text = format_running_info(RunningInfo.from_body({**body(), "jstack": "thread-1\n"}))
    lines = text.splitlines()
    assert lines[0] == "#Consumer Properties#"
    assert f"{'PROP_CONSUME_TYPE':<40}: CONSUME_PASSIVELY" in lines
    assert f"001 Topic: {'T':<40} ClassFilter: false    SubExpression: a || b" in lines
    i = lines.index("#Consumer Offset#")
    assert lines[i + 1] == f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  #Consumer Offset"
    assert lines[i + 2] == f"{'T':<32}  {'broker-a':<32}  1     7"
    i = lines.index("#Consumer MQ Detail#")
    assert lines[i + 2].startswith(f"{'T':<64}  {'broker-a':<32}  1     ProcessQueueInfo "
                                   "[commitOffset=7, ")
    assert "locked=true" in lines[i + 2] and "droped=false" in lines[i + 2]
    i = lines.index("#Consumer RT&TPS#")
    assert lines[i + 2] == (f"{'T':<32}  {1.5:14.2f} {2.0:14.2f} {0.25:14.2f} {3.0:14.2f} "
                            f"{0.0:18.2f} {4:25d}")
    assert lines[-2:] == ["#Consumer jstack#", "thread-1"]
    assert all(line == line.rstrip() for line in lines)


def test_from_body_refuses_what_is_not_running_info() -> None:
    bad: Any
    for bad in ([], {"mqTable": {"T": 1}}, {"mqTable": [{"topic": "T"}]}, {"properties": ["x"]}):
        with pytest.raises(RunningInfoError):
            RunningInfo.from_body(bad)
    info = RunningInfo.from_body(body())
    assert RunningInfo.from_body(info.to_dict()) == info  # what --json prints reads back


def test_analyze_subscription() -> None:
    a, b = RunningInfo.from_body(body()), RunningInfo.from_body(body())
    assert analyze_subscription({"a": a, "b": b}, NOW_MS)
    b.subscriptions = [{"topic": "T", "subString": "*"}]
    assert not analyze_subscription({"a": a, "b": b}, NOW_MS)
    # consumers started under two minutes ago are not judged yet
    young = {PROP_CONSUMER_START_TIMESTAMP: str(NOW_MS - 60_000)}
    a, b = RunningInfo.from_body(body(**young)), RunningInfo.from_body(body(**young))
    b.subscriptions = []
    assert analyze_subscription({"a": a, "b": b}, NOW_MS)
    # a pull consumer neither
    pull = {PROP_CONSUME_TYPE: "CONSUME_ACTIVELY"}
    a, b = RunningInfo.from_body(body(**pull)), RunningInfo.from_body(body(**pull))
    b.subscriptions = []
    assert analyze_subscription({"a": a, "b": b}, NOW_MS)


def test_analyze_process_queue() -> None:
    info = RunningInfo.from_body(body())
    assert analyze_process_queue("c1", info, NOW_MS) == []
    pq = info.queues[0][1]
    pq.update(cachedMsgCount=3, lastConsumeTimestamp=NOW_MS - 61_000)
    assert analyze_process_queue("c1", info, NOW_MS) == [
        f"c1 {MQ} can't consume for a while, maybe blocked, 61000ms"]
    pq.update(cachedMsgCount=0)
    assert analyze_process_queue("c1", info, NOW_MS) == []
    orderly = RunningInfo.from_body(body(**{PROP_CONSUME_ORDERLY: "true"}))
    orderly.queues[0][1].update(locked=False, lastLockTimestamp=NOW_MS - 5000)
    assert analyze_process_queue("c2", orderly, NOW_MS) == [
        f"c2 {MQ} can't lock for a while, 5000ms"]


def test_window_sums_the_last_buckets_only() -> None:
    w = Window(60, 1.0)
    w.add(10.2, 1, 0.5)
    w.add(10.9, 2, 0.5)
    w.add(40.0, 4)
    assert w.sums(40.0) == (7, 1.0)
    assert w.sums(69.5) == (7, 1.0)  # bucket 10 is 60 buckets back from 69: still in
    assert w.sums(70.0) == (4, 0.0)  # now it left the window
    assert w.sums(100.0) == (0, 0.0)
    assert len(w._q) == 0  # nothing kept beyond the window


def test_consume_stats_status() -> None:
    s = ConsumeStats()
    s.pulled("T", 1.0, 0.010, 32)
    s.pulled("T", 2.0, 0.030, 28)
    s.consumed("T", 2.0, 0.002, 59, 1)
    s.consumed("T", 3.0, 0.004, 0, 2)
    row = s.status(3.0)["T"]
    assert row == {"pullRT": 20.0, "pullTPS": 1.0, "consumeRT": 3.0, "consumeOKTPS": 0.98,
                   "consumeFailedTPS": 0.05, "consumeFailedMsgs": 3}
    later = s.status(3.0 + 120)["T"]  # the minute passed, the hour did not
    assert (later["pullTPS"], later["consumeOKTPS"], later["consumeFailedMsgs"]) == (0.0, 0.0, 3)
    assert s.status(3.0 + 3700)["T"]["consumeFailedMsgs"] == 0
    s.forget({"Other"})
    assert s.status(4.0) == {}


async def test_a_consumer_answers_its_running_info() -> None:
    """What a (not started) push consumer answers: its settings and subscriptions,
    the queues it holds with their offsets, its stacks when asked."""
    c = PushConsumer("g", "127.0.0.1:1", consume_thread_max=3)
    c.subscribe("T", "a || b")
    pq = ProcessQueue()
    pq.put_messages([msg(4)])
    c.process_queue_table[MQ] = pq
    c.stats.consumed("T", 1.0, 0.001, 1, 0)
    doc = c.running_info(jstack=True)
    info = RunningInfo.from_body(doc)
    assert info.push and not info.orderly
    assert info.properties["consumerGroup"] == "g"
    assert info.properties["PROP_THREADPOOL_CORE_SIZE"] == "3"
    assert info.subscriptions[0]["subString"] == "a || b"
    [(mq, got)] = info.queues
    assert mq == MQ and got["cachedMsgCount"] == 1 and got["commitOffset"] == -1
    assert "T" in info.status
    assert info.jstack is not None and "trio tasks:" in info.jstack
    assert "jstack" not in c.running_info()
