"""The official RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4, librocketmq 2.0)
against a real name server and brokers: its producer (sync, oneway, batch,
orderly sends) read back by our SDK, its push consumer (clustering, tag
filter, committed offsets) fed by both producers, a consumer group shared by
our push consumer and the C++ one, RocketMQ's quickstart (a new C++ group
reads what was sent before it started), and ``bench.official`` end to end.

The C++ client runs in child processes (``official_client_proc``), each
bounded in time and killed at the end of its test; the module is skipped only
where the wheel's library cannot load.

When a C++ push consumer holds its queues is known only from what it receives,
so before the real traffic every test sends probe rounds (one message to
every queue, body ``probe <round> <broker> <queue>``) until the consumers are
seen to hold their queues; probes are left out of every count. (A new group
starts at offset 0 of queues whose first message is still in memory, as the
broker answers 0 for them as RocketMQ's does, so nothing sent meanwhile is
missed either way.)
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
)
from client.admin import MQAdmin
from tests.integration.cluster import BIN, Cluster
from tests.integration.official_client import (
    REPO,
    OfficialClient,
    cpp_send,
    load_error,
    message,
)
from tests.waits import wait_lag_zero, wait_until

_why = load_error()
if _why is not None:
    pytest.skip(f"the official RocketMQ client (PyPI rocketmq) cannot load here: {_why}",
                allow_module_level=True)

TAGS = ("TagA", "TagB", "TagC")
NOTE = "ü-€ ok"
PROPS = ["idx", "src", "note", "probe"]


@dataclass
class Env:
    ns: str
    brokers: dict[str, str]  # name -> addr


@pytest.fixture(scope="module")
def env(module_cluster: Cluster) -> Env:
    ns = module_cluster.namesrv()
    brokers = {name: module_cluster.broker(name, ns.addr).addr for name in ("broker-a", "broker-b")}
    return Env(ns.addr, brokers)


# ---- helpers ---------------------------------------------------------------------------


async def create_topic(env: Env, topic: str, queues: int = 4, brokers: tuple[str, ...] = ()
                       ) -> None:
    names = brokers or tuple(env.brokers)
    async with MQAdmin(env.ns) as admin:
        for name in names:
            await admin.create_topic(topic, broker_addr=env.brokers[name], read_queue_nums=queues,
                                     write_queue_nums=queues)

        async def routed() -> bool:
            try:
                route = await admin.topic_route(topic)
            except Exception:
                return False
            return {qd.broker_name for qd in route.queue_datas} == set(names)
        await wait_until(routed, 15, f"{topic} routed on {names}")


def sample(topic: str, i: int, src: str) -> dict[str, Any]:
    """Message ``i`` of a test as the C++ child reads it: every field set."""
    return message(topic, f"body-{src}-{i}-" + "é" * (i % 5) + "x" * (i % 200),
                   tags=TAGS[i % 3], keys=f"k-{src}-{i} order-{i % 7}",
                   props={"idx": str(i), "src": src, "note": NOTE})


def ours(m: dict[str, Any]) -> Message:
    """The same message for our SDK's producer."""
    return Message(m["topic"], m["body"].encode(), tags=m.get("tags"), keys=m.get("keys"),
                   properties=dict(m.get("props") or {}))


async def pull_all(ns: str, topic: str) -> list[tuple[MessageQueue, MessageExt]]:
    """Every message of ``topic``, pulled queue by queue with our SDK."""
    out: list[tuple[MessageQueue, MessageExt]] = []
    async with PullConsumer("official-check-pull", ns) as consumer:
        for mq in await consumer.fetch_subscribe_message_queues(topic):
            offset = 0
            for _ in range(10_000):
                r = await consumer.pull(mq, "*", offset, 32)
                if r.pull_status == PullStatus.NO_NEW_MSG:
                    break
                assert r.pull_status == PullStatus.FOUND, r
                out += [(mq, m) for m in r.msg_found_list]
                offset = r.next_begin_offset
    return out


async def stored(env: Env, topic: str) -> int:
    async with MQAdmin(env.ns) as admin:
        return sum(q.max_offset for q in await admin.topic_status(topic))


async def wait_stored(env: Env, topic: str, n: int) -> None:
    async def check() -> bool:
        return await stored(env, topic) >= n
    await wait_until(check, 20, f"{n} messages stored in {topic}")
    assert await stored(env, topic) == n


def cpp_consumer(env: Env, home: Path, group: str, topic: str, expression: str = "*",
                 instance: str | None = None) -> OfficialClient:
    args = ["consume", "-n", env.ns, "-g", group, "-t", topic, "-e", expression]
    if instance:
        args += ["-i", instance]
    for p in PROPS:
        args += ["-p", p]
    c = OfficialClient(args, home, timeout=180)
    try:
        c.wait_event("started", 60)
    except BaseException:
        c.close()
        raise
    return c


def probe_key(body: str) -> tuple[int, str, int] | None:
    """(round, broker, queue) of a probe's body, None for any other message."""
    parts = body.split(" ")
    if len(parts) != 4 or parts[0] != "probe":
        return None
    return int(parts[1]), parts[2], int(parts[3])


async def probe_until(env: Env, topic: str, receivers: dict[str, Callable[[], list[str]]],
                      ready: Callable[[dict[tuple[str, int], Counter[str]]], bool],
                      tags: str = "TagA", timeout: float = 60.0, clean_rounds: int = 1) -> int:
    """Send probe rounds (one probe to every queue of ``topic``) until ``ready``
    holds for ``clean_rounds`` rounds in a row; ``ready`` gets, for one round,
    queue -> Counter(receiver name -> probes received). ``receivers`` give the
    bodies each consumer received so far. A round counts once the next one is
    in too and it still holds then: a duplicate (a queue two consumers pull)
    has the next round's time to show. Returns the number of probes sent."""
    sent = 0

    def complete(rnd: int) -> bool:
        return len(probes_of(receivers, rnd)) >= len(mqs)

    def clean(rnd: int) -> bool:
        seen = probes_of(receivers, rnd)
        return len(seen) == len(mqs) and ready(seen)

    async with Producer("official-probe-producer", env.ns) as producer:
        mqs = await producer.fetch_publish_message_queues(topic)
        good = 0
        rnd = 0
        with trio.move_on_after(timeout):
            while good < clean_rounds:
                rnd += 1
                for mq in mqs:
                    body = f"probe {rnd} {mq.broker_name} {mq.queue_id}".encode()
                    r = await producer.send(Message(topic, body, tags=tags,
                                                    properties={"probe": "1"}), mq)
                    assert r.send_status == SendStatus.SEND_OK
                    sent += 1
                with trio.move_on_after(2.0):  # a round whose probes do not all come is not clean
                    await wait_until(functools.partial(complete, rnd), timeout,
                                     f"probe round {rnd} received")
                good = good + 1 if rnd > 1 and clean(rnd - 1) and clean(rnd) else 0
            return sent
    raise AssertionError(f"timed out after {timeout}s probing {topic}: the consumers never held "
                         f"their queues (last round {rnd})")


def probes_of(receivers: dict[str, Callable[[], list[str]]], rnd: int
              ) -> dict[tuple[str, int], Counter[str]]:
    """Round ``rnd``'s probes received: queue -> Counter(receiver name -> count)."""
    seen: dict[tuple[str, int], Counter[str]] = {}
    for name, bodies in receivers.items():
        for b in bodies():
            k = probe_key(b)
            if k is not None and k[0] == rnd:
                seen.setdefault((k[1], k[2]), Counter())[name] += 1
    return seen


def cpp_bodies(c: OfficialClient) -> Callable[[], list[str]]:
    return lambda: [r["body"] for r in c.records()]


def real(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The C++ consumer's records without the probes."""
    return [r for r in records if probe_key(r["body"]) is None]


def assert_fields(got: dict[str, Any], want: dict[str, Any]) -> None:
    """A C++ consumer's record matches the message sent."""
    assert got["topic"] == want["topic"]
    assert got["body"] == want["body"]
    assert got["tags"] == want["tags"]
    assert got["keys"] == want["keys"]
    for k, v in want["props"].items():
        assert got["props"][k] == v, (k, got["props"])


# ---- a. the C++ producer: sync and oneway sends ----------------------------------------


async def test_cpp_producer_sync_and_oneway_sends_read_by_our_sdk(env: Env, tmp_path: Path
                                                                  ) -> None:
    topic = "CppSendTopic"
    await create_topic(env, topic)
    n_sync, n_oneway = 80, 80
    sent = {str(i): sample(topic, i, "cpp") for i in range(n_sync + n_oneway)}
    requests = [{"op": "sync" if i < n_sync else "oneway", "message": sent[str(i)]}
                for i in range(n_sync + n_oneway)]
    answers = await trio.to_thread.run_sync(cpp_send, env.ns, requests, tmp_path / "cpp")
    sync_answers = {str(i): a for i, a in enumerate(answers[:n_sync])}
    assert all(a["status"] == "OK" and a["msg_id"] for a in sync_answers.values()), answers
    assert len({a["msg_id"] for a in sync_answers.values()}) == n_sync
    assert all(a["status"] == "SENT" for a in answers[n_sync:])

    await wait_stored(env, topic, n_sync + n_oneway)  # the oneway ones too
    got: dict[str, tuple[MessageQueue, MessageExt]] = {}
    for mq, m in await pull_all(env.ns, topic):
        idx = m.properties["idx"]
        assert idx not in got, f"message {idx} stored twice"
        got[idx] = (mq, m)
    assert set(got) == set(sent)
    for idx, (mq, m) in got.items():
        want = sent[idx]
        assert m.topic == topic and m.queue_id == mq.queue_id
        assert m.body == want["body"].encode()
        assert m.tags == want["tags"] and m.keys == want["keys"]
        assert {k: m.properties.get(k) for k in want["props"]} == want["props"]
        assert m.uniq_key, f"message {idx} has no UNIQ_KEY: {m.properties}"
        if idx in sync_answers:  # the id and queue offset the C++ client reported
            assert m.uniq_key == sync_answers[idx]["msg_id"]
            assert m.queue_offset == sync_answers[idx]["offset"]
    assert len({m.uniq_key for _, m in got.values()}) == len(sent)
    assert {mq.broker_name for mq, _ in got.values()} == set(env.brokers)

    # a topic nobody created: auto-created through TBW102 by the first send
    auto = "CppAutoTopic"
    [answer] = await trio.to_thread.run_sync(
        cpp_send, env.ns, [{"op": "sync", "message": sample(auto, 7, "auto")}], tmp_path / "auto")
    assert answer["status"] == "OK"
    [(_, m)] = await pull_all(env.ns, auto)
    assert m.uniq_key == answer["msg_id"] and m.body == sample(auto, 7, "auto")["body"].encode()


# ---- b, c. the C++ push consumer: exactly once, tag filter, committed offsets ----------


async def test_cpp_push_consumer_exactly_once_tag_filter_and_offsets(env: Env, tmp_path: Path
                                                                     ) -> None:
    topic = "CppPushTopic"
    await create_topic(env, topic)
    g_all, g_tag = "CID-cpp-all", "CID-cpp-taga"
    with cpp_consumer(env, tmp_path / "c-all", g_all, topic) as c_all, \
            cpp_consumer(env, tmp_path / "c-tag", g_tag, topic, "TagA") as c_tag:
        probes = await probe_until(
            env, topic, {"all": cpp_bodies(c_all), "tag": cpp_bodies(c_tag)},
            lambda seen: all(c == Counter({"all": 1, "tag": 1}) for c in seen.values()))

        n = 90
        ours_sent = {f"sdk:{i}": sample(topic, i, "sdk") for i in range(n)}
        cpp_sent = {f"cpp:{i}": sample(topic, i, "cpp") for i in range(n)}
        ids: dict[str, str] = {}
        async with Producer("official-sdk-producer", env.ns) as producer:
            for key, m in ours_sent.items():
                r = await producer.send(ours(m))
                assert r.send_status == SendStatus.SEND_OK
                ids[key] = r.msg_id
        answers = await trio.to_thread.run_sync(
            cpp_send, env.ns, [{"op": "sync", "message": m} for m in cpp_sent.values()],
            tmp_path / "p")
        for key, a in zip(cpp_sent, answers, strict=True):
            assert a["status"] == "OK"
            ids[key] = a["msg_id"]
        sent = {**ours_sent, **cpp_sent}
        tag_a = {k for k, m in sent.items() if m["tags"] == "TagA"}

        await trio.to_thread.run_sync(
            lambda: c_all.wait(lambda: len(real(c_all.records())) >= 2 * n, 60,
                               "every message at the '*' consumer"))
        await trio.to_thread.run_sync(
            lambda: c_tag.wait(lambda: len(real(c_tag.records())) >= len(tag_a), 60,
                               "every TagA message at the 'TagA' consumer"))
        # (c) the offsets the C++ consumers commit reach the broker: lag 0 everywhere
        total = 2 * n + probes
        for group in (g_all, g_tag):
            rows = await wait_lag_zero(env.ns, group, topic)
            assert len(rows) == 8 and sum(r["brokerOffset"] for r in rows) == total, rows
            assert sum(r["consumerOffset"] for r in rows) == total, rows
        assert c_all.finish() == 0 and c_tag.finish() == 0

    for c, want_keys in ((c_all, set(sent)), (c_tag, tag_a)):
        recs = real(c.records())
        keys = Counter(f"{r['props']['src']}:{r['props']['idx']}" for r in recs)
        dup = {k: v for k, v in keys.items() if v > 1}
        assert not dup, f"delivered more than once: {dup}"
        assert set(keys) == want_keys
        for rec in recs:
            key = f"{rec['props']['src']}:{rec['props']['idx']}"
            assert_fields(rec, sent[key])
            assert rec["id"] == ids[key], "the C++ consumer's msg id is the sender's UNIQ_KEY"
            assert rec["reconsume_times"] == 0
    assert {rec["tags"] for rec in real(c_tag.records())} == {"TagA"}
    assert {rec["tags"] for rec in c_tag.records()} == {"TagA"}  # probes are TagA too

    # the figure `mqadmin consumerProgress` prints
    out = await trio.to_thread.run_sync(lambda: subprocess.run(
        [str(BIN / "mqadmin"), "consumerProgress", "-n", env.ns, "-g", g_all, "-t", topic],
        capture_output=True, text=True, timeout=60, cwd=REPO))
    assert out.returncode == 0, out.stderr
    assert "Diff Total: 0" in out.stdout, out.stdout
    assert sum(1 for line in out.stdout.splitlines() if line.startswith(topic)) == 8, out.stdout

    # a new C++ consumer of the group resumes at the committed offsets: it gets what
    # was sent while the group was away and nothing it had consumed before (without
    # them it would start again at 0, the broker answering 0 for queues whose first
    # message is in memory, and get everything again)
    gap = {f"gap:{i}": sample(topic, i, "gap") for i in range(16)}
    async with Producer("official-sdk-producer", env.ns) as producer:
        for m in gap.values():
            assert (await producer.send(ours(m))).send_status == SendStatus.SEND_OK
    with cpp_consumer(env, tmp_path / "c-again", g_all, topic) as again:
        await probe_until(env, topic, {"again": cpp_bodies(again)},
                          lambda seen: all(c == Counter({"again": 1}) for c in seen.values()))
        assert again.finish() == 0
    resumed = Counter(f"{rec['props']['src']}:{rec['props']['idx']}"
                      for rec in real(again.records()))
    assert resumed == Counter(set(gap)), resumed


# ---- e. one consumer group: our push consumer and the C++ one --------------------------


async def test_mixed_group_our_push_consumer_and_cpp_share_the_queues(env: Env, tmp_path: Path
                                                                      ) -> None:
    topic, group = "CppMixedTopic", "CID-mixed"
    queues = 8
    await create_topic(env, topic, queues=queues, brokers=("broker-a",))
    got_ours: list[tuple[int, str, dict[str, str], str | None, str | None, str | None, str]] = []

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            got_ours.append((m.queue_id, m.body.decode(), dict(m.properties), m.tags, m.keys,
                             m.topic, m.uniq_key or ""))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    sdk = PushConsumer(group, env.ns, instance_name="mixed-sdk", rebalance_interval=2.0,
                       consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    sdk.subscribe(topic, "*")
    sdk.register_message_listener(listener)
    with cpp_consumer(env, tmp_path / "c", group, topic, instance="mixed-cpp") as cpp:
        async with sdk:
            async with MQAdmin(env.ns) as admin:
                async def two_members() -> bool:
                    try:
                        conns = await admin.consumer_connection(group)
                    except Exception:
                        return False
                    return sum(len(b["connectionSet"]) for b in conns) == 2
                await wait_until(two_members, 30, "both clients in the group")

            def mine() -> set[int]:
                return {mq.queue_id for mq in sdk.assigned_queues() if mq.topic == topic}

            def split(seen: dict[tuple[str, int], Counter[str]]) -> bool:
                by = {q: next(iter(c)) for (_, q), c in seen.items() if sum(c.values()) == 1}
                if len(by) != queues:
                    return False  # a probe went to both, or to neither
                to_sdk = {q for q, who in by.items() if who == "sdk"}
                return 0 < len(to_sdk) < queues and to_sdk == mine()

            await probe_until(env, topic, {"sdk": lambda: [b for _, b, *_ in got_ours],
                                           "cpp": cpp_bodies(cpp)},
                              split, tags="TagA", clean_rounds=2)
            sdk_queues = mine()
            assert len(sdk_queues) == queues // 2, sdk_queues

            n = 100
            sent = {**{f"sdk:{i}": sample(topic, i, "sdk") for i in range(n)},
                    **{f"cpp:{i}": sample(topic, i, "cpp") for i in range(n)}}
            async with Producer("official-mixed-producer", env.ns) as producer:
                for i in range(n):
                    r = await producer.send(ours(sent[f"sdk:{i}"]))
                    assert r.send_status == SendStatus.SEND_OK
            await trio.to_thread.run_sync(
                cpp_send, env.ns, [{"op": "sync", "message": sent[f"cpp:{i}"]} for i in range(n)],
                tmp_path / "p")

            def real_ours() -> list[Any]:
                return [g for g in got_ours if probe_key(g[1]) is None]

            async def all_consumed() -> bool:
                return len(real_ours()) + len(real(cpp.records())) >= 2 * n
            try:
                await wait_until(all_consumed, 60, "every message consumed by the group")
            except AssertionError as e:
                raise AssertionError(f"{e}: ours {len(real_ours())}, C++ "
                                     f"{len(real(cpp.records()))}\n{cpp.diagnostics()}") from None
            await wait_lag_zero(env.ns, group, topic)
            assert mine() == sdk_queues, "a rebalance happened during the test"
        assert cpp.finish() == 0

    keys: Counter[str] = Counter()
    sdk_q: set[int] = set()
    cpp_q: set[int] = set()
    for qid, body, props, tags, mkeys, mtopic, _ in real_ours():
        key = f"{props['src']}:{props['idx']}"
        keys[key] += 1
        sdk_q.add(qid)
        want = sent[key]
        assert (mtopic, body, tags, mkeys) == (topic, want["body"], want["tags"], want["keys"])
        assert {k: props.get(k) for k in want["props"]} == want["props"]
    for rec in real(cpp.records()):
        key = f"{rec['props']['src']}:{rec['props']['idx']}"
        keys[key] += 1
        cpp_q.add(rec["queue_id"])
        assert_fields(rec, sent[key])
    dup = {k: v for k, v in keys.items() if v > 1}
    assert not dup, f"consumed more than once across the group: {dup}"
    assert set(keys) == set(sent)
    assert sdk_q and cpp_q, (sdk_q, cpp_q)
    assert not sdk_q & cpp_q, f"both consumed queues {sdk_q & cpp_q}"
    assert sdk_q <= sdk_queues and not cpp_q & sdk_queues


# ---- f. batch and orderly sends ---------------------------------------------------------


async def test_cpp_send_batch(env: Env, tmp_path: Path) -> None:
    topic = "CppBatchTopic"
    await create_topic(env, topic)
    batches = [[sample(topic, b * 10 + j, "batch") for j in range(10)] for b in range(4)]
    answers = await trio.to_thread.run_sync(
        cpp_send, env.ns, [{"op": "batch", "messages": b} for b in batches], tmp_path / "cpp")
    assert all(a["status"] == "OK" for a in answers), answers
    sent = {m["props"]["idx"]: m for b in batches for m in b}
    pulled = await pull_all(env.ns, topic)
    got: dict[str, tuple[MessageQueue, MessageExt]] = {}
    for mq, m in pulled:
        idx = m.properties.get("idx")
        assert idx is not None, (
            f"a stored message is not one of the batch's messages (the batch was stored whole?): "
            f"properties {m.properties}, body {m.body[:120]!r}")
        assert idx not in got
        got[idx] = (mq, m)
    assert set(got) == set(sent)
    for idx, (_, m) in got.items():
        want = sent[idx]
        assert m.body == want["body"].encode()
        assert m.tags == want["tags"] and m.keys == want["keys"]
        assert {k: m.properties.get(k) for k in want["props"]} == want["props"]
        assert m.uniq_key
    for batch, a in zip(batches, answers, strict=True):
        # a batch goes to one queue, its messages at consecutive offsets from the answer's
        places = [got[spec["props"]["idx"]] for spec in batch]
        assert len({mq for mq, _ in places}) == 1
        assert [ext.queue_offset for _, ext in places] == list(range(a["offset"], a["offset"] + 10))
    assert len({m.uniq_key for _, m in got.values()}) == len(sent)


# rounds of eight warm sends at most before the orderly sends (see below)
WARM_ROUNDS = 5


async def test_cpp_send_orderly_keeps_order_per_key(env: Env, tmp_path: Path) -> None:
    topic, warm_topic = "CppOrderTopic", "CppOrderWarmTopic"
    await create_topic(env, topic)
    await create_topic(env, warm_topic)
    keys, per_key = 5, 40
    # The C++ client opens its connections to the brokers while it starts. A send
    # that finds the connection table locked meanwhile fails at once ("GetTransport
    # ... get timed_mutex timeout", see official_client_proc), and the C++ client's
    # own retry has then put an orderly message on another broker's queue (its log:
    # "send failed of times:1" on broker-b's queue 0, the message found on
    # broker-a's). Sends of a topic on both brokers first, eight at a time (its
    # sends go round its eight queues), until both brokers hold one of them, leave
    # both connections open before the orderly sends. (A broker-b send that met
    # the lock is retried by the C++ client on broker-a: eight were once not enough.)
    env_brokers = set(env.brokers)

    async def warm_brokers() -> set[str]:
        return {mq.broker_name for mq, _ in await pull_all(env.ns, warm_topic)}

    def warm_up(p: OfficialClient) -> int:
        n = 0
        for _ in range(WARM_ROUNDS):
            for _ in range(8):
                p.write({"op": "sync", "message": message(warm_topic, f"warm-{n}")})
                n += 1
            p.wait(lambda n=n: len(p.records()) >= n, 60, "the warm sends' answers")
            if trio.from_thread.run(warm_brokers) == env_brokers:
                break
        return n

    requests: list[dict[str, Any]] = []
    for seq in range(per_key):
        for key in range(keys):
            spec = message(topic, f"order-{key}-{seq}", tags="TagA", keys=f"order-{key}",
                           props={"key": str(key), "seq": str(seq)})
            requests.append({"op": "orderly", "arg": key, "message": spec})
    answers = await trio.to_thread.run_sync(
        functools.partial(cpp_send, env.ns, requests, tmp_path / "cpp", warm_up=warm_up))
    assert all(a["status"] == "OK" for a in answers)
    warm = await pull_all(env.ns, warm_topic)
    assert {mq.broker_name for mq, _ in warm} == set(env.brokers)  # both connections opened
    pulled = await pull_all(env.ns, topic)
    assert len(pulled) == keys * per_key
    queues: dict[str, set[MessageQueue]] = {}
    order: dict[str, list[tuple[int, int]]] = {}
    for mq, m in pulled:
        k = m.properties["key"]
        queues.setdefault(k, set()).add(mq)
        order.setdefault(k, []).append((m.queue_offset, int(m.properties["seq"])))
    assert set(queues) == {str(k) for k in range(keys)}
    for k, mqs in queues.items():
        assert len(mqs) == 1, f"key {k} went to {mqs}"
        seqs = [s for _, s in sorted(order[k])]
        assert seqs == list(range(per_key)), f"key {k} out of order: {seqs}"
    assert len({next(iter(v)) for v in queues.values()}) == keys  # 5 keys, 8 queues: 5 queues


# ---- g. RocketMQ's quickstart: a new group reads what was sent before it started --------


async def test_cpp_new_group_reads_what_was_sent_before_it_started(env: Env, tmp_path: Path
                                                                   ) -> None:
    """Send 200, then start a C++ push consumer of a new group (its default
    CONSUME_FROM_LAST_OFFSET): the broker answers offset 0 for queues whose
    first message is in memory, as RocketMQ's does, so it receives all 200."""
    topic, group = "CppQuickstartTopic", "CID-cpp-quickstart"
    await create_topic(env, topic)
    sent = {str(i): sample(topic, i, "early") for i in range(200)}
    async with Producer("official-sdk-producer", env.ns) as producer:
        for m in sent.values():
            assert (await producer.send(ours(m))).send_status == SendStatus.SEND_OK
    await wait_stored(env, topic, len(sent))
    with cpp_consumer(env, tmp_path / "c", group, topic) as c:
        await trio.to_thread.run_sync(
            lambda: c.wait(lambda: len(c.records()) >= len(sent), 60,
                           "the 200 messages sent before the group started"))
        rows = await wait_lag_zero(env.ns, group, topic)
        assert sum(r["consumerOffset"] for r in rows) == len(sent), rows
        assert c.finish() == 0
    got = Counter(rec["props"]["idx"] for rec in c.records())
    assert got == Counter(set(sent)), "each message exactly once"
    for rec in c.records():
        assert_fields(rec, sent[rec["props"]["idx"]])


# ---- the benchmark, end to end ----------------------------------------------------------


def test_bench_official_runs_end_to_end(tmp_path: Path) -> None:
    out_json = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.official", "--count", "40", "--json", str(out_json),
         "--tmp-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    results = json.loads(out_json.read_text())
    figures = {r["name"]: r for r in results["results"]}
    assert set(figures) == {"produce_cpp", "produce_sdk", "consume_cpp", "consume_sdk"}
    for name, r in figures.items():
        assert r["count"] == 40 and r["msgs_per_s"] > 0, (name, r)
    assert "msg/s" in proc.stdout and "official C++" in proc.stdout
