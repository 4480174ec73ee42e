"""Message trace against live daemons: a broker with traceTopicEnable, a producer
and a push consumer with trace on, ``mqadmin queryMsgTraceById`` and the
dashboard reading what they recorded; a broker that refuses trace sends; a
customized trace topic holding records in the C++ client's format."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from typing import Any

import trio

from client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendStatus,
)
from client.admin import MQAdmin, MQAdminError
from protocol.names import RMQ_SYS_TRACE_TOPIC
from protocol.trace_data import TraceView
from tests.dashboard.web import dashboard
from tests.integration.cluster import BIN, Cluster, Daemon
from tests.integration.test_cli import mqadmin_process as mqadmin
from tests.waits import routed, wait_until

TOPIC = "TraceTopic"
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
LEVELS = " ".join(["1s"] * 18)
C, F = "\x01", "\x02"


async def start(cluster: Cluster, **props: Any) -> tuple[Daemon, Daemon]:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, **props)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2,
                                 write_queue_nums=2)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
    return ns, broker


def consumer(ns: Daemon, group: str, listener: Any, **kw: Any) -> PushConsumer:
    c = PushConsumer(group, ns.addr, consume_from_where=FIRST, rebalance_interval=1.0, **kw)
    c.subscribe(TOPIC, "*")
    c.register_message_listener(listener)
    return c


async def views_of(admin: MQAdmin, msg_id: str, kinds: Counter[str],
                   trace_topic: str = RMQ_SYS_TRACE_TOPIC) -> list[TraceView]:
    """The trace of ``msg_id`` once it holds at least ``kinds`` (type -> count):
    a trace message is indexed just after it is stored."""
    async def enough() -> list[TraceView] | None:
        views = await admin.query_msg_trace(msg_id, trace_topic)
        return views if not kinds - Counter(v.trace_type for v in views) else None
    result: list[TraceView] = await wait_until(enough, 15, f"the trace of {msg_id}")
    return result


async def test_send_and_consume_traced_then_queried(cluster: Cluster) -> None:
    ns, broker = await start(cluster, traceTopicEnable="true", messageDelayLevel=LEVELS)
    async with MQAdmin(ns.addr) as admin:
        await wait_until(routed(admin, RMQ_SYS_TRACE_TOPIC), 10, "the trace topic routed")
        route = await admin.topic_route(RMQ_SYS_TRACE_TOPIC)
        assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [("broker-a", 1)]

    deliveries: Counter[str] = Counter()

    async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        (m,) = msgs
        key = m.keys or ""
        deliveries[key] += 1
        if key == "fail-once" and deliveries[key] == 1:
            return LATER
        if key == "slow":
            await trio.sleep(0.3)
        return SUCCESS

    c = consumer(ns, "trace-cg", listener, enable_msg_trace=True)
    async with c:
        async with Producer("trace-pg", ns.addr, enable_msg_trace=True) as producer:
            m1 = await producer.send(Message(TOPIC, b"hello", tags="TagA", keys="order-1"))
            m2 = await producer.send(Message(TOPIC, b"again", keys="fail-once"))
            m3 = await producer.send(Message(TOPIC, b"slow", keys="slow"))
            batch = await producer.send_batch([Message(TOPIC, b"b%d" % i, keys="batch")
                                               for i in range(3)])
            pub_stats = producer.trace_dispatcher
        expected = {"order-1": 1, "fail-once": 2, "slow": 1, "batch": 3}
        await wait_until(lambda: _now(deliveries == expected), 30, "every delivery")
        sub_stats = c.trace_dispatcher
    # both flushed at shutdown, nothing lost
    assert pub_stats is not None and sub_stats is not None
    assert (pub_stats.sent, pub_stats.failed, pub_stats.dropped) == (6, 0, 0)
    assert (sub_stats.sent, sub_stats.failed, sub_stats.dropped) == (14, 0, 0)

    async with MQAdmin(ns.addr) as admin:
        views = await views_of(admin, m1.msg_id, Counter(Pub=1, SubBefore=1, SubAfter=1))
        assert [v.trace_type for v in views] == ["Pub", "SubBefore", "SubAfter"]
        pub, before, after = views
        assert (pub.group_name, pub.topic, pub.msg_id, pub.success, pub.tags, pub.keys) == (
            "trace-pg", TOPIC, m1.msg_id, True, "TagA", "order-1")
        assert (pub.store_host, pub.offset_msg_id, pub.body_length, pub.client_host) == (
            broker.addr, m1.offset_msg_id, 5, "127.0.0.1")
        assert 0 <= pub.cost_time < 3000 and pub.msg_type == "Normal_Msg"
        assert (before.group_name, before.retry_times, before.topic) == ("trace-cg", 0, TOPIC)
        assert (after.group_name, after.success, after.request_id) == (
            "trace-cg", True, before.request_id)
        assert before.timestamp >= pub.timestamp and after.timestamp >= before.timestamp

        views = await views_of(admin, m2.msg_id, Counter(Pub=1, SubBefore=2, SubAfter=2))
        afters = [v for v in views if v.trace_type == "SubAfter"]
        assert [(v.success, v.context_code) for v in afters] == [(False, 4), (True, 0)]
        assert [v.retry_times for v in views if v.trace_type == "SubBefore"] == [0, 1]

        views = await views_of(admin, m3.msg_id, Counter(Pub=1, SubAfter=1))
        (slow,) = [v for v in views if v.trace_type == "SubAfter"]
        assert slow.cost_time >= 300 and slow.success

        for i, msg_id in enumerate(batch.msg_id.split(",")):
            views = await views_of(admin, msg_id, Counter(Pub=1, SubAfter=1))
            assert views[0].offset_msg_id == (batch.offset_msg_id or "").split(",")[i]
        # the trace messages are indexed under the messages' keys too
        assert await admin.query_by_key(RMQ_SYS_TRACE_TOPIC, "order-1")

    # RocketMQ's layout, every record of the message; and --json
    out = await trio.to_thread.run_sync(mqadmin, "queryMsgTraceById", "-n", ns.addr,
                                        "-i", m1.msg_id)
    lines = out.splitlines()
    assert lines[0].split() == ["#Type", "#ProducerGroup", "#ClientHost", "#SendTime",
                                "#CostTimes", "#Status"]
    assert lines[1].split()[:3] == ["Pub", "trace-pg", "127.0.0.1"]
    assert lines[1].split()[-1] == "success"
    assert lines[3].split()[1] == "#ConsumerGroup"
    assert [ln.split()[:2] for ln in lines[4:6]] == [["SubBefore", "trace-cg"],
                                                     ["SubAfter", "trace-cg"]]
    assert lines[5].split()[-1] == "success"
    out = await trio.to_thread.run_sync(mqadmin, "queryMsgTraceById", "-n", ns.addr,
                                        "-i", m2.msg_id, "--json")
    doc = json.loads(out)
    assert [d["type"] for d in doc] == ["Pub", "SubBefore", "SubAfter", "SubBefore", "SubAfter"]
    assert [d["status"] for d in doc if d["type"] == "SubAfter"] == ["failed", "success"]
    assert all(d["msgId"] == m2.msg_id for d in doc) and doc[0]["topic"] == TOPIC

    # the dashboard's message page shows the trace
    async with dashboard(ns.addr) as web:
        page = await web.get(f"/messages?mode=id&msgId={m1.msg_id}&topic={TOPIC}")
        assert page.status == 200 and "hello" in page.text
        assert page.text.count('class="trace-Pub"') == 1
        assert page.text.count('class="trace-SubAfter"') == 1
        assert "trace-pg" in page.text and "trace-cg" in page.text
        page = await web.get(f"/messages?mode=key&topic={TOPIC}&key=order-1")
        assert f"msgId={m1.msg_id}" in page.text  # a link to that page


async def _now(value: bool) -> bool:
    return value


async def test_broker_refusing_trace_sends_never_fails_user_sends(cluster: Cluster) -> None:
    """No trace topic and no auto-creation: every trace send fails; the user's
    sends and consumption go on, the failures are counted."""
    ns, _ = await start(cluster, autoCreateTopicEnable="false")
    async with MQAdmin(ns.addr) as admin:
        try:
            await admin.topic_route(RMQ_SYS_TRACE_TOPIC)
            raise AssertionError("the trace topic should not exist")
        except MQAdminError:
            pass
    got: list[bytes] = []

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        got.extend(m.body for m in msgs)
        return SUCCESS

    c = consumer(ns, "refused-cg", listener, enable_msg_trace=True)
    async with c, Producer("refused-pg", ns.addr, enable_msg_trace=True) as producer:
        results = [await producer.send(Message(TOPIC, b"m%d" % i)) for i in range(10)]
        futures = [await producer.send_async(Message(TOPIC, b"a%d" % i)) for i in range(10)]
        results += [await f.wait() for f in futures]
        await wait_until(lambda: _now(len(got) >= 20), 30, "every message consumed")
        pub, sub = producer.trace_dispatcher, c.trace_dispatcher
    assert all(r.send_status is SendStatus.SEND_OK for r in results)
    assert sorted(got) == sorted([b"m%d" % i for i in range(10)] + [b"a%d" % i for i in range(10)])
    assert pub is not None and sub is not None
    assert (pub.sent, pub.failed + pub.dropped) == (0, 20)
    assert (sub.sent, sub.failed + sub.dropped) == (0, 40) and sub.batches_failed >= 1


async def test_customized_trace_topic_and_cpp_client_records(cluster: Cluster) -> None:
    ns, _ = await start(cluster, traceTopicEnable="true", msgTraceTopicName="MyTrace",
                        regionId="RegionX")
    async with MQAdmin(ns.addr) as admin:
        await wait_until(routed(admin, "MyTrace"), 10, "the customized trace topic routed")
    async with Producer("custom-pg", ns.addr, enable_msg_trace=True,
                        customized_trace_topic="MyTrace") as producer:
        sent = await producer.send(Message(TOPIC, b"x", keys="k"))
    # what the official C++ client writes (its TraceUtil): a 6-field SubAfter, "dKey"
    cpp_id = "0A0000070000316C0000B8A3C2D1E4F5"
    body = (f"Pub{C}1700000000000{C}DefaultRegion{C}cpp-pg{C}{TOPIC}{C}{cpp_id}{C}TagA{C}dKey"
            f"{C}127.0.0.1:10911{C}11{C}4{C}0{C}OFFSET{C}true{F}"
            f"SubBefore{C}1700000000100{C}DefaultRegion{C}cpp-cg{C}REQ1{C}{cpp_id}{C}0{C}dKey{F}"
            f"SubAfter{C}REQ1{C}{cpp_id}{C}6{C}true{C}dKey{F}")
    async with Producer("cpp-writer", ns.addr) as plain:
        await plain.send(Message("MyTrace", body.encode(), keys=cpp_id))

    async with MQAdmin(ns.addr) as admin:
        views = await views_of(admin, sent.msg_id, Counter(Pub=1), "MyTrace")
        assert (views[0].group_name, views[0].region_id) == ("custom-pg", "RegionX")
        views = await views_of(admin, cpp_id, Counter(Pub=1, SubBefore=1, SubAfter=1), "MyTrace")
    out = await trio.to_thread.run_sync(mqadmin, "queryMsgTraceById", "-n", ns.addr,
                                        "-i", cpp_id, "-t", "MyTrace", "--json")
    doc = json.loads(out)
    assert [(d["type"], d["groupName"], d["costTime"], d["keys"]) for d in doc] == [
        ("Pub", "cpp-pg", 4, ""), ("SubBefore", "cpp-cg", 0, ""), ("SubAfter", "cpp-cg", 6, "")]
    assert doc[2]["timestamp"] == 1700000000106  # the SubBefore's time plus the cost
    # the default trace topic does not exist here: a clear error, not an empty trace
    failed = await trio.to_thread.run_sync(lambda: subprocess.run(
        [str(BIN / "mqadmin"), "queryMsgTraceById", "-n", ns.addr, "-i", cpp_id],
        capture_output=True, text=True, timeout=60))
    assert failed.returncode != 0 and RMQ_SYS_TRACE_TOPIC in failed.stderr
