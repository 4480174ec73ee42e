"""Issue 11: no request may kill, brick or corrupt a broker or name server.

Each test is one request (or burst) that once killed or corrupted a live daemon.
After it: the daemons keep serving, the request got an error answer (or its
background effect was refused), nothing outside the store changed, the
messages seeded into ``RTSeed`` before the attack read back exactly once, and
the broker restarts cleanly with the same messages (``hostile.Guard.verify``).

Rows whose failure could only be a refused request share one module's daemons
(``shared``); rows that could corrupt a store or brick a restart get their own
(``fresh``), and check the damage before asserting the refusal, so a failure
shows what the request did.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import struct
import sys
from collections import Counter
from pathlib import Path

import pytest
import trio

from client import Producer
from client.admin import MQAdmin
from protocol.batch import encode_batch
from protocol.body import pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    DeleteTopicRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    RegisterBrokerRequestHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from protocol.record import decode_records
from protocol.trio.client import RemotingClient
from protocol.trio.errors import RemotingError
from tests.integration.cluster import Cluster, free_port
from tests.integration.hostile import (
    BROKER_PROPS,
    SEED_BODIES,
    SEED_KEYS,
    SEED_TOPIC,
    TIMEOUT,
    Guard,
    assert_refused,
    heartbeat_body,
    invoke,
    pull_all,
    register_body,
)
from tests.integration.log_scan import LogWatch, report
from tests.waits import routed, wait_until

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
BIG_NAME = 8_500_000  # characters: over half the 16 MiB frame limit
BAD_FIELDS_TOPIC = "RTBadFields"
CLIENT_ID = "127.0.0.1@rt-attacker"


async def make_guard(cluster: Cluster, **props: object) -> Guard:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, True, **{**BROKER_PROPS, **props})  # started
    guard = Guard(cluster, ns, broker)
    await guard.seed()
    guard.begin()
    return guard


@pytest.fixture(scope="module")
def shared_daemons(module_cluster: Cluster) -> Guard:
    async def setup() -> Guard:
        guard = await make_guard(module_cluster)
        async with MQAdmin(guard.ns.addr) as admin:
            await admin.create_topic(BAD_FIELDS_TOPIC, broker_addr=guard.broker.addr,
                                     read_queue_nums=1, write_queue_nums=1)
        return guard

    return trio.run(setup)


@pytest.fixture
def shared(shared_daemons: Guard) -> Guard:
    """The module's daemons, revived if a previous test killed one, with a fresh
    snapshot of the tree outside the store."""
    shared_daemons.begin()
    return shared_daemons


@pytest.fixture
async def fresh(cluster: Cluster) -> Guard:
    """A name server and a broker for this test alone, RTSeed seeded."""
    return await make_guard(cluster)


async def seed_message(guard: Guard) -> tuple[int, str]:
    """(commit-log offset, msg id) of the first seeded message: what a send-back names."""
    m = (await pull_all(guard.broker.addr, SEED_TOPIC))[0]
    return m.commit_log_offset, m.msg_id


async def send_back(guard: Guard, group: str, delay_level: int) -> RemotingCommand:
    offset, msg_id = await seed_message(guard)
    fields = ConsumerSendMsgBackRequestHeader(offset=offset, group="g", delay_level=delay_level,
                                              origin_msg_id=msg_id,
                                              origin_topic=SEED_TOPIC).to_fields()
    fields["group"] = group
    return await invoke(guard.broker.addr, RequestCode.CONSUMER_SEND_MSG_BACK, fields)


async def no_route(guard: Guard, *topics: str) -> None:
    """The name server has no route for any of ``topics``."""
    for topic in topics:
        r = await invoke(guard.ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        assert r.code != ResponseCode.SUCCESS, f"the name server routes {topic!r}"


def fake_register(name: str, topics: dict[str, dict[str, object]]) -> RemotingCommand:
    """A REGISTER_BROKER from a broker that does not exist (nothing listens on its port)."""
    port = free_port(2)
    fields = RegisterBrokerRequestHeader(
        broker_name="fake-broker", broker_addr=f"127.0.0.1:{port}", cluster_name="RTFakeCluster",
        ha_server_addr=f"127.0.0.1:{port + 1}", broker_id=0,
    ).to_fields()
    fields["brokerName"] = name
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, register_body(topics))


# ---- requests that must simply be refused (shared daemons) -----------------------------


async def test_query_message_with_5_mb_key(shared: Guard) -> None:
    """Once: QUERY_NOT_FOUND's remark held the key's repr, the frame passed 16 MiB,
    the broker exited."""
    fields = QueryMessageRequestHeader(topic=SEED_TOPIC, key="\x01" * 5_000_000, max_num=32,
                                       begin_timestamp=0, end_timestamp=2**62).to_fields()
    resp = await invoke(shared.broker.addr, RequestCode.QUERY_MESSAGE, fields, timeout=30)
    assert_refused(resp)
    # a legitimate query by key still finds its message
    fields = QueryMessageRequestHeader(topic=SEED_TOPIC, key=SEED_KEYS[1], max_num=32,
                                       begin_timestamp=0, end_timestamp=2**62).to_fields()
    resp = await invoke(shared.broker.addr, RequestCode.QUERY_MESSAGE, fields)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.body and [m.body for m in decode_records(resp.body)] == [SEED_BODIES[1]]
    await shared.verify()


async def test_route_query_with_16_mib_topic(shared: Guard) -> None:
    """Once: a GET_ROUTEINFO_BY_TOPIC with a 16,777,195-character topic killed the name server."""
    cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t" * 16_777_195})
    cmd.opaque = 77  # a one-byte opaque: the request itself just fits in a frame
    assert len(cmd.encode()) <= 16 * MiB
    async with RemotingClient() as rc:
        resp = await rc.invoke(shared.ns.addr, cmd, 30)
    assert_refused(resp, "topic")
    async with MQAdmin(shared.ns.addr) as admin:
        route = await admin.topic_route(SEED_TOPIC)
    assert [b.broker_name for b in route.broker_datas] == ["broker-a"]
    await shared.verify()


@pytest.mark.parametrize(("field", "value"), [
    ("sysFlag", 2**31),
    ("flag", 2**40),
    ("bornTimestamp", 2**63),
    ("reconsumeTimes", -1),
])
async def test_send_message_field_out_of_range(shared: Guard, field: str, value: int) -> None:
    """Once: SYSTEM_ERROR with a traceback in the log. Now: a clean error naming the field."""
    watch = LogWatch()
    watch.mark([shared.broker.log_path])
    fields = SendMessageRequestHeader(producer_group="RTBadProducer", topic=BAD_FIELDS_TOPIC,
                                      queue_id=0).to_fields()
    fields[field] = value
    resp = await invoke(shared.broker.addr, RequestCode.SEND_MESSAGE, fields, b"body")
    assert_refused(resp, field)
    assert await pull_all(shared.broker.addr, BAD_FIELDS_TOPIC) == [], "the message was stored"
    found = watch.new_tracebacks([shared.broker.log_path])
    assert not found, report(found, {shared.broker.log_path: shared.broker.name})
    await shared.verify()


def _entry(size: int, flag: int, body_len: int, body: bytes, props_len: int,
           props: bytes) -> bytes:
    """One SEND_BATCH entry with every length field as given."""
    return struct.pack(">iiiii", size, 0, 0, flag, body_len) + body + \
        struct.pack(">h", props_len) + props


_GOOD_ENTRY = encode_batch([(0, b"good", "UNIQ_KEY\x01RTGOOD\x02")])
BAD_BATCHES = {
    "cut-short": _GOOD_ENTRY + _GOOD_ENTRY[:-3],
    "size-past-the-end": _entry(2**31 - 1, 0, 4, b"body", 0, b""),
    "negative-size": _GOOD_ENTRY + _entry(-5, 0, 4, b"body", 0, b""),
    "negative-body-length": _entry(26, 0, -4, b"body", 0, b""),
    "body-length-past-the-entry": _entry(26, 0, 400, b"body", 0, b""),
    "properties-length-mismatch": _entry(26, 0, 4, b"body", 7, b""),
    "properties-not-utf8": _entry(29, 0, 4, b"body", 3, b"a\xff\x01"),
    "empty-body": _GOOD_ENTRY + _entry(22, 0, 0, b"", 0, b""),
    "transactional-entry": _GOOD_ENTRY + encode_batch([(0, b"half", "TRAN_MSG\x01true\x02")]),
    "trailing-byte": _GOOD_ENTRY + b"\x00",
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
async def test_send_batch_with_a_bad_body(shared: Guard, case: str) -> None:
    """A batch body whose layout or content does not hold is refused whole, by
    whichever loop walks it (the compiled one gives up, the Python one says
    why): nothing of it is stored, no traceback, the daemons serve on."""
    watch = LogWatch()
    watch.mark([shared.broker.log_path])
    fields = SendMessageRequestHeader(producer_group="RTBadProducer", topic=BAD_FIELDS_TOPIC,
                                      queue_id=0, batch=True).to_fields()
    resp = await invoke(shared.broker.addr, RequestCode.SEND_BATCH_MESSAGE, fields,
                        BAD_BATCHES[case])
    assert resp.code != ResponseCode.SUCCESS, f"accepted: remark {resp.remark!r}"
    assert resp.remark, f"error {resp.code} without a remark"
    assert await pull_all(shared.broker.addr, BAD_FIELDS_TOPIC) == [], "the batch was stored"
    found = watch.new_tracebacks([shared.broker.log_path])
    assert not found, report(found, {shared.broker.log_path: shared.broker.name})
    await shared.verify()


HEARTBEATS = {
    "consumerDataSet-string": (
        pack_body({"clientID": CLIENT_ID, "consumerDataSet": "RTGroup"}), "consumerDataSet"),
    "consumerDataSet-int": (
        pack_body({"clientID": CLIENT_ID, "consumerDataSet": 5}), "consumerDataSet"),
    "producerDataSet-string": (
        pack_body({"clientID": CLIENT_ID, "producerDataSet": "RTGroup"}), "producerDataSet"),
    "subscriptionDataSet-dict": (
        heartbeat_body("RTGroup", subscriptionDataSet={"topic": SEED_TOPIC}), "subscriptionDataSet"),
    "subscriptionDataSet-entry-int": (
        heartbeat_body("RTGroup", subscriptionDataSet=[5]), "subscriptionDataSet"),
    "consumer-groupName-int": (heartbeat_body(5), "groupName"),
    "producer-groupName-int": (
        pack_body({"clientID": CLIENT_ID, "producerDataSet": [{"groupName": 5}]}), "groupName"),
    "clientID-int": (pack_body({"clientID": 5, "producerDataSet": []}), "clientID"),
}


@pytest.mark.parametrize("case", sorted(HEARTBEATS))
async def test_heart_beat_with_wrongly_typed_data(shared: Guard, case: str) -> None:
    """Once: SYSTEM_ERROR with a traceback in the log. Now: a clean error naming the field."""
    body, field = HEARTBEATS[case]
    watch = LogWatch()
    watch.mark([shared.broker.log_path])
    resp = await invoke(shared.broker.addr, RequestCode.HEART_BEAT, {}, body)
    assert_refused(resp, field)
    found = watch.new_tracebacks([shared.broker.log_path])
    assert not found, report(found, {shared.broker.log_path: shared.broker.name})
    await shared.verify()


async def test_delete_topic_with_300_byte_name(shared: Guard) -> None:
    """Once: SYSTEM_ERROR with a traceback in the log. Now: a clean error naming the field."""
    watch = LogWatch()
    watch.mark([shared.broker.log_path])
    resp = await invoke(shared.broker.addr, RequestCode.DELETE_TOPIC_IN_BROKER,
                        DeleteTopicRequestHeader("d" * 300).to_fields())
    assert_refused(resp, "topic")
    found = watch.new_tracebacks([shared.broker.log_path])
    assert not found, report(found, {shared.broker.log_path: shared.broker.name})
    await shared.verify()


# ---- requests with lasting effects (daemons of their own) ------------------------------


async def test_heart_beat_with_8_5_mb_group(fresh: Guard) -> None:
    """Once: the broker created %RETRY%<group>, its next REGISTER_BROKER passed 16 MiB,
    it exited, and so did every restart."""
    resp = await invoke(fresh.broker.addr, RequestCode.HEART_BEAT, {},
                        heartbeat_body("g" * BIG_NAME), timeout=30)
    await fresh.verify()  # served() makes the broker register again after the attack
    assert_refused(resp)


async def test_pull_with_8_5_mb_group_then_subscription_groups(fresh: Guard) -> None:
    """Once: the pull auto-created the group; GET_ALL_SUBSCRIPTIONGROUP_CONFIG then
    killed the broker."""
    fields = PullMessageRequestHeader(consumer_group="g", topic=SEED_TOPIC, queue_id=0,
                                      queue_offset=0, max_msg_nums=32).to_fields()
    fields["consumerGroup"] = "g" * BIG_NAME
    pulled = await invoke(fresh.broker.addr, RequestCode.PULL_MESSAGE, fields, timeout=30)
    resp = await invoke(fresh.broker.addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    groups = unpack_body(resp.body)["subscriptionGroupTable"]
    assert all(len(g) <= 255 for g in groups)
    await fresh.verify()
    assert_refused(pulled)


async def test_fake_broker_with_8_5_mb_name_claims_a_topic(fresh: Guard) -> None:
    """Once: the next legitimate producer asking RTSeed's route killed the name server."""
    async with RemotingClient() as fake:
        cmd = fake_register("b" * BIG_NAME, {SEED_TOPIC: {"readQueueNums": 1, "writeQueueNums": 1}})
        resp = await fake.invoke(fresh.ns.addr, cmd, 30)
        # the fake's connection is still open (closing it would drop its registration)
        with trio.fail_after(30):
            async with Producer("RTRouteAsker", fresh.ns.addr) as p:
                queues = await p.fetch_publish_message_queues(SEED_TOPIC)
        fresh.alive()
        assert {q.broker_name for q in queues} == {"broker-a"}
    await fresh.verify()
    assert_refused(resp)


async def test_update_consumer_offset_flood(cluster: Cluster) -> None:
    """Once: 'dictionary changed size during iteration' (offset persist thread vs the
    event loop) and the broker exited. 30,000 offsets of fresh groups, pipelined over
    4 connections, while offsets persist every 50 ms."""
    guard = await make_guard(cluster, flushConsumerOffsetInterval=50)
    addr = guard.broker.addr
    total, connections, in_flight = 30_000, 4, 32
    numbers = itertools.count()
    codes: Counter[int] = Counter()
    done: list[int] = []
    lost: list[str] = []

    def offset_of(i: int) -> int:
        return i % len(SEED_BODIES) + 1

    async def worker(rc: RemotingClient) -> None:
        while not lost and (i := next(numbers)) < total:
            h = UpdateConsumerOffsetRequestHeader(consumer_group=f"RTFlood{i}", topic=SEED_TOPIC,
                                                  queue_id=0, commit_offset=offset_of(i))
            try:
                r = await rc.invoke(addr, RemotingCommand.request(
                    RequestCode.UPDATE_CONSUMER_OFFSET, h.to_fields()), TIMEOUT)
            except RemotingError as exc:
                lost.append(f"request {i}: {exc}")
                return
            codes[r.code] += 1
            if r.code == ResponseCode.SUCCESS:
                done.append(i)

    with trio.move_on_after(20):
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(RemotingClient())
                       for _ in range(connections)]
            async with trio.open_nursery() as nursery:
                for rc in clients:
                    for _ in range(in_flight):
                        nursery.start_soon(worker, rc)
    guard.alive()
    assert not lost, f"requests lost: {lost[:3]}"
    assert done, "no offset committed"
    assert codes == Counter({ResponseCode.SUCCESS: len(done)}), dict(codes)
    step = max(1, len(done) // 200)
    sample = sorted(done)[::step] + sorted(done)[-20:]

    async def check_offsets() -> None:
        async with RemotingClient() as rc:
            for i in sample:
                h = QueryConsumerOffsetRequestHeader(consumer_group=f"RTFlood{i}",
                                                     topic=SEED_TOPIC, queue_id=0)
                r = await rc.invoke(addr, RemotingCommand.request(
                    RequestCode.QUERY_CONSUMER_OFFSET, h.to_fields()), TIMEOUT)
                assert r.code == ResponseCode.SUCCESS, f"RTFlood{i}: {r.remark}"
                assert r.ext_fields["offset"] == offset_of(i)

    await check_offsets()
    await guard.verify()  # restarts: the offsets persisted at shutdown load again
    await check_offsets()


@pytest.mark.parametrize("delay_level", [1, -1])
async def test_send_back_group_with_nul_byte(fresh: Guard, delay_level: int) -> None:
    """Once: the broker exited about 1 s later; with delay level -1 every restart failed."""
    resp = await send_back(fresh, "nul\x00byte", delay_level)
    await fresh.verify(delayed=True)
    assert_refused(resp)


@pytest.mark.parametrize("length", [300, 200])
async def test_send_back_group_too_long_for_a_retry_topic(fresh: Guard, length: int) -> None:
    """Once (300 characters, level 1): no later level-1 delayed message was ever
    delivered, also after a restart. 200 characters is a legal group name, but
    %RETRY% + it is too long for a topic."""
    resp = await send_back(fresh, "g" * length, 1)
    await fresh.verify(delayed=True)  # a normal delayed message still arrives, before and after
    assert_refused(resp)


@pytest.mark.parametrize("delay_level", [1, -1])
async def test_send_back_group_traversing_into_the_seed_topic(fresh: Guard,
                                                              delay_level: int) -> None:
    """Once: the %RETRY%/%DLQ% consume queue of ``x/../RTSeed`` was RTSeed's own, so
    its entry 0 was overwritten: a stored message lost, another served twice."""
    resp = await send_back(fresh, f"x/../{SEED_TOPIC}", delay_level)
    await fresh.verify(delayed=True)
    await no_route(fresh, f"%RETRY%x/../{SEED_TOPIC}", f"%DLQ%x/../{SEED_TOPIC}")
    assert_refused(resp)


ESCAPES = ["send-back-dlq", "send-back-retry", "heart-beat", "delete-relative",
           "delete-absolute"]


@pytest.mark.parametrize("how", ESCAPES)
async def test_names_escaping_the_store(fresh: Guard, how: str) -> None:
    """Once: files created outside the store, empty directories outside it removed,
    and the escaping topic saved and routed by the name server."""
    if how.startswith("send-back"):
        group = "x/../../../escape-dlq"
        resp = await send_back(fresh, group, -1 if how == "send-back-dlq" else 1)
        names = [f"%DLQ%{group}", f"%RETRY%{group}"]
    elif how == "heart-beat":
        group = "x/../../../escape-hb"
        resp = await invoke(fresh.broker.addr, RequestCode.HEART_BEAT, {},
                            heartbeat_body(group))
        names = [f"%RETRY%{group}"]
    else:
        topic = ("../../victim" if how == "delete-relative"
                 else str(fresh.root / "outside" / "abs-victim"))
        resp = await invoke(fresh.broker.addr, RequestCode.DELETE_TOPIC_IN_BROKER,
                            {"topic": topic})
        names = [topic]
    await fresh.verify(delayed=how.startswith("send-back"))
    await no_route(fresh, *names)
    assert_refused(resp)


@pytest.mark.parametrize("mode", ["produce", "subscribe"])
async def test_fake_broker_with_2_31_queues(fresh: Guard, mode: str) -> None:
    """Once: a producer built range(writeQueueNums) of a fake broker's 2**31 - 1 queues
    and died of memory after 73 s. Now the registration is refused or the client
    ignores the route: it sends through the real broker or fails cleanly, in
    bounded time and memory (a child process with 1.5 GiB of address space)."""
    topic = "RTHuge"
    async with MQAdmin(fresh.ns.addr) as admin:
        await admin.create_topic(topic, broker_addr=fresh.broker.addr, read_queue_nums=2,
                                 write_queue_nums=2)
        await wait_until(routed(admin, topic), TIMEOUT, f"{topic} routed")
    huge = 2**31 - 1
    cfg: dict[str, object] = (
        {"writeQueueNums": huge, "readQueueNums": 4} if mode == "produce"
        else {"readQueueNums": huge, "writeQueueNums": 4})
    async with RemotingClient() as fake:
        resp = await fake.invoke(fresh.ns.addr, fake_register("fake-broker", {topic: cfg}), TIMEOUT)
        # refused or not, the fake's connection stays open while a real client looks
        with trio.fail_after(60):
            proc = await trio.run_process(
                [sys.executable, "-m", "tests.integration.hostile_client", mode,
                 fresh.ns.addr, topic],
                cwd=REPO, capture_stdout=True, capture_stderr=True, check=False)
        lines = proc.stdout.decode().strip().splitlines()
        result = json.loads(lines[-1]) if lines else {}
        assert proc.returncode == 0, (
            f"client exited with {proc.returncode} ({result}); registration answered "
            f"{resp.code}:\n{proc.stderr.decode()[-2000:]}")
        if mode == "produce":
            assert result["result"] == "error" or (
                result["result"] == "sent" and result["broker"] == "broker-a"), result
        else:
            assert result["result"] == "error" or (
                result["result"] == "queues" and result["brokers"] == ["broker-a"]), result
        fresh.alive()
    await fresh.verify()
