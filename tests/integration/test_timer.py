"""Timer messages against a real broker: our SDK's TIMER_* sends, the official 5.x
client's delivery_timestamp over gRPC, recalls, refusals, and restarts (kill -9 and
clean) with timers pending. One name server and broker for the module."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from client import Message, Producer, PullConsumer, PullStatus
from client.admin import MQAdmin
from client.errors import MQBrokerError
from protocol.codes import ResponseCode
from protocol.message import MessageExt, MessageQueue
from tests.integration.cluster import Cluster, Daemon, free_port
from tests.integration.test_grpc_official_client import RMQ5, SCRIPT
from tests.waits import routed, wait_until

PRECISION_MS = 200
SLACK_MS = 1500  # a loaded CI machine's scheduling, on top of the precision
BROKER = "timer-a"


@pytest.fixture(scope="module")
def env(module_cluster: Cluster) -> Iterator[tuple[Daemon, Daemon, int]]:
    ns = module_cluster.namesrv()
    grpc_port = free_port(1)
    broker = module_cluster.broker(BROKER, ns.addr, timerPrecisionMs=PRECISION_MS,
                                   enableGrpc="true", grpcListenPort=grpc_port)
    yield ns, broker, grpc_port


async def make_topic(ns: Daemon, broker: Daemon, topic: str) -> MessageQueue:
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(topic, broker_addr=broker.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, topic), 10, "routed")
    return MessageQueue(topic, BROKER, 0)


async def pull_all(ns: Daemon, mq: MessageQueue) -> list[MessageExt]:
    out: list[MessageExt] = []
    async with PullConsumer("timer-reader", ns.addr) as consumer:
        offset = 0
        while True:
            r = await consumer.pull(mq, "*", offset, 32)
            if r.pull_status != PullStatus.FOUND:
                return out
            out += r.msg_found_list
            offset = r.next_begin_offset


async def timer_status(broker: Daemon) -> dict[str, str]:
    async with MQAdmin(f"{broker.addr}") as admin:
        info = await admin.broker_runtime_info(broker.addr)
    return {k: str(v) for k, v in info.items() if k.startswith("timer")}


async def nothing_pending(broker: Daemon) -> bool:
    return (await timer_status(broker))["timerPendingCount"] == "0"


def assert_on_time(msgs: list[MessageExt], slack_ms: int = SLACK_MS) -> None:
    for m in msgs:
        due = int(m.properties["TIMER_OUT_MS"])
        assert m.store_timestamp >= due, f"{m.keys} delivered {due - m.store_timestamp} ms early"
        assert m.store_timestamp <= due + PRECISION_MS + slack_ms, (
            f"{m.keys} delivered {m.store_timestamp - due} ms late")
        for gone in ("REAL_TOPIC", "REAL_QID", "TIMER_DELIVER_MS", "TIMER_DELAY_MS",
                     "TIMER_DELAY_SEC"):
            assert gone not in m.properties


async def test_sdk_timers_recall_and_refusals(env: tuple[Daemon, Daemon, int]) -> None:
    ns, broker, _ = env
    mq = await make_topic(ns, broker, "TimerSdk")
    async with Producer("timer-producer", ns.addr) as producer:
        now = int(time.time() * 1000)
        absolute = Message(mq.topic, b"abs", keys="abs")
        absolute.deliver_time_ms = now + 1300
        relative = Message(mq.topic, b"rel", keys="rel")
        relative.delay_ms = 700
        seconds = Message(mq.topic, b"sec", keys="sec", properties={"TIMER_DELAY_SEC": "1"})
        past = Message(mq.topic, b"past", keys="past")
        past.deliver_time_ms = now - 60_000  # due already: delivered at once
        sent = {}
        for m in (absolute, relative, seconds, past):
            sent[m.keys] = await producer.send(m)
        assert sent["abs"].recall_handle and sent["past"].recall_handle is None
        by_handle = Message(mq.topic, b"x1", keys="by-handle")
        by_handle.delay_ms = 2000
        by_key = Message(mq.topic, b"x2", keys="by-key")
        by_key.delay_ms = 2000
        handled = await producer.send(by_handle)
        k = (await producer.send(by_key)).msg_id
        assert handled.recall_handle is not None
        assert await producer.recall_message(mq.topic, handled.recall_handle) == handled.msg_id
        assert await producer.recall_message(mq.topic, k) == k
        with pytest.raises(MQBrokerError) as err:
            await producer.recall_message(mq.topic, k)  # not pending any more
        assert err.value.response_code == ResponseCode.NO_MESSAGE
        with pytest.raises(MQBrokerError, match="no pending timer message"):
            await producer.recall_message(mq.topic, "never-sent-key")
        for props, match in (({"TIMER_DELIVER_MS": str(now + 4 * 86_400_000)}, "timerMaxDelaySec"),
                             ({"TIMER_DELAY_MS": "soon"}, "not a non-negative integer"),
                             ({"TIMER_DELAY_MS": "-1"}, "not a non-negative integer"),
                             ({"TIMER_DELAY_SEC": "5", "DELAY": "2"}, "not both")):
            with pytest.raises(MQBrokerError, match=match) as err:
                await producer.send(Message(mq.topic, b"bad", properties=props))
            assert err.value.response_code == ResponseCode.MESSAGE_ILLEGAL

    async def four() -> list[MessageExt] | None:
        got = await pull_all(ns, mq)
        return got if len(got) >= 4 else None
    got = await wait_until(four, 15, "the four timer messages delivered", interval=0.05)
    await wait_until(lambda: nothing_pending(broker), 15, "no timer pending")
    got = await pull_all(ns, mq)  # the recalled two never come: nothing is pending
    assert sorted(m.keys for m in got) == ["abs", "past", "rel", "sec"]
    assert_on_time([m for m in got if m.keys != "past"])
    assert {m.keys: m.properties["UNIQ_KEY"] for m in got} == {
        key: r.msg_id for key, r in sent.items()}
    status = await timer_status(broker)
    assert int(status["timerRecalledCount"]) == 2


@pytest.mark.skipif(RMQ5 is None, reason="RocketMQ's official Python client 5.x is not "
                    "installed: `make rmq5` makes .venv-rmq5 with it")
async def test_official_client_delivery_timestamp_and_recall(
        env: tuple[Daemon, Daemon, int]) -> None:
    ns, broker, grpc_port = env
    mq = await make_topic(ns, broker, "TimerGrpc")
    assert RMQ5 is not None
    proc = await trio.run_process(
        [RMQ5, str(SCRIPT), f"127.0.0.1:{grpc_port}", mq.topic, "4", "--deliver-in", "2",
         "--recall-every", "2"], capture_stdout=True, capture_stderr=True, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    report = json.loads(proc.stdout)
    assert not report["failed"] and len(report["sent"]) == 4
    assert all(s["recall_handle"] for s in report["sent"])
    recalled = set(report["recalled"])
    assert len(recalled) == 2
    await wait_until(lambda: nothing_pending(broker), 15, "no timer pending")
    got = await pull_all(ns, mq)
    assert {m.properties["UNIQ_KEY"] for m in got} == {s["id"] for s in report["sent"]} - recalled
    assert_on_time(got)


async def send_spread(ns: Daemon, topic: str, count: int, start_ms: int,
                      spread_ms: int) -> dict[str, int]:
    """``count`` timer messages due evenly over ``spread_ms`` from ``start_ms``:
    unique key -> due ms."""
    due: dict[str, int] = {}
    async with Producer("timer-restart", ns.addr) as producer:
        for i in range(count):
            m = Message(topic, f"m{i}".encode(), keys=f"m{i}")
            m.deliver_time_ms = start_ms + spread_ms * i // count
            r = await producer.send(m)
            due[r.msg_id] = m.deliver_time_ms
    return due


@pytest.mark.parametrize("how", ["kill -9", "clean"])
async def test_restart_with_timers_pending(env: tuple[Daemon, Daemon, int], how: str) -> None:
    """300 timers due over 4 s; the broker goes down once some are delivered.
    After a kill -9 nothing is lost (a message delivered since the last
    checkpoint may come twice); after a clean stop nothing comes twice. Every
    message is delivered at or after its time."""
    ns, broker, _ = env
    mq = await make_topic(ns, broker, "TimerRestart" + ("Kill" if how == "kill -9" else "Clean"))
    count = 300
    due = await send_spread(ns, mq.topic, count, int(time.time() * 1000) + 1500, 4000)

    async def some_delivered() -> bool:
        return len(await pull_all(ns, mq)) >= count // 10
    await wait_until(some_delivered, 15, "some timers delivered", interval=0.05)
    assert int((await timer_status(broker))["timerPendingCount"]) > count // 2
    if how == "kill -9":
        broker.kill()
    else:
        broker.stop()
    broker.start()
    async with MQAdmin(ns.addr) as admin:
        await wait_until(routed(admin, mq.topic), 10, "routed again")
    await wait_until(lambda: nothing_pending(broker), 20, "no timer pending")
    got = await pull_all(ns, mq)
    keys = Counter(m.properties["UNIQ_KEY"] for m in got)
    assert set(keys) == set(due), f"lost: {sorted(set(due) - set(keys))[:5]}"
    if how == "clean":
        assert max(keys.values()) == 1  # nothing twice
    else:
        assert max(keys.values()) <= 2  # at most once more
    for m in got:
        assert m.store_timestamp >= due[m.properties["UNIQ_KEY"]], "delivered early"
    status = await timer_status(broker)
    assert status["timerDroppedCount"] == "0"


def test_timer_files_exist(env: tuple[Daemon, Daemon, int]) -> None:
    _, broker, _ = env
    conf = Path(broker.args[broker.args.index("-c") + 1]).read_text()
    store = Path(next(line.split("=", 1)[1] for line in conf.splitlines()
                      if line.startswith("storePathRootDir=")))
    assert (store / "timer" / "checkpoint.json").exists()
    cp = json.loads((store / "timer" / "checkpoint.json").read_text())
    assert cp["cqOffset"] > 0 and cp["records"] > 0



