"""Transactional messages end to end: real name server and broker, the SDK's
TransactionProducer, crashes of the producer and of the broker."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from typing import Any

import trio

from client import LocalTransactionState, Message, SendStatus, TransactionProducer
from client.admin import MQAdmin
from protocol.body import unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    EndTransactionRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
)
from protocol.message import MessageExt, properties_to_string
from protocol.names import RMQ_SYS_TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from protocol.record import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    decode_msg_id,
)
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster, Daemon
from tests.integration.ha_reads import drain_queue, max_offsets
from tests.integration.test_ha import create_topic, pair, same_max_offset
from tests.waits import routed, wait_until

TOPIC = "TxTopic"
QUEUES = 4
COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
# short check timing for tests: a half message is checked 1 s after its birth
FAST_CHECKS = {"transactionCheckInterval": 300, "transactionTimeOut": 1000,
               "transactionCheckMax": 3}


class Listener:
    """Local transactions decided by a table: body -> state on execute, and
    body -> state on check (absent: the execute state)."""

    def __init__(self, execute: dict[bytes, LocalTransactionState],
                 check: dict[bytes, LocalTransactionState] | None = None) -> None:
        self.execute = execute
        self.check = check or {}
        self.checked: Counter[bytes] = Counter()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return self.execute[msg.body]

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checked[msg.body] += 1
        return self.check.get(msg.body, self.execute.get(msg.body, UNKNOW))


async def setup(cluster: Cluster, **props: object) -> tuple[Daemon, Daemon]:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr, True, **props)
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=QUEUES,
                                 write_queue_nums=QUEUES)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")
    return ns, broker


async def delivered(addr: str, topic: str = TOPIC, queues: int = QUEUES) -> list[bytes]:
    """Every body in the topic's queues, read from the broker (duplicates kept)."""
    async with RemotingClient() as rc:
        ends = await max_offsets(rc, addr, topic, queues)
        out: list[bytes] = []
        for q, end in enumerate(ends):
            out += await drain_queue(rc, addr, topic, q, end)
    return out


async def runtime(ns: str, addr: str) -> dict[str, Any]:
    async with MQAdmin(ns) as admin:
        return await admin.broker_runtime_info(addr)


async def settled(ns: str, addr: str, passes: int = 2) -> None:
    """Wait until no transaction is pending and ``passes`` more check passes ran."""
    async def idle() -> bool:
        return (await runtime(ns, addr))["transactionPending"] == 0

    await wait_until(idle, 60, "no pending transaction")
    start = (await runtime(ns, addr))["transactionCheckPasses"]

    async def passed() -> bool:
        return (await runtime(ns, addr))["transactionCheckPasses"] >= start + passes

    await wait_until(passed, 30, f"{passes} more check passes")


async def test_commit_delivers_once_rollback_never(cluster: Cluster) -> None:
    ns, broker = await setup(cluster)
    states = {f"c{i}".encode(): COMMIT for i in range(20)}
    states.update({f"r{i}".encode(): ROLLBACK for i in range(20)})
    listener = Listener(states)
    async with TransactionProducer("tx-basic", ns.addr, listener) as p:
        results = {}
        for body in states:
            r = await p.send_message_in_transaction(Message(TOPIC, body, tags="T"))
            assert r.local_transaction_state is states[body]
            results[body] = r

        async def all_in() -> bool:
            return len(await delivered(broker.addr)) >= 20

        await wait_until(all_in, 20, "committed messages delivered")
    got = await delivered(broker.addr)
    assert Counter(got) == Counter(b for b, s in states.items() if s is COMMIT)
    # the half queue is not a topic: nothing routes or pulls it
    async with RemotingClient() as rc:
        h = PullMessageRequestHeader("peek", RMQ_SYS_TRANS_HALF_TOPIC, 0, 0, 32)
        pulled = await rc.invoke(broker.addr, RemotingCommand.request(
            RequestCode.PULL_MESSAGE, h.to_fields()), 5)
        assert pulled.code == ResponseCode.TOPIC_NOT_EXIST
    out = subprocess.run([sys.executable, "-m", "client.admin_cli", "consumeMessage", "-n", ns.addr,
                          "-t", TOPIC, "-c", "100"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "20 message(s)" in out.stdout and "BODY: r" not in out.stdout
    # the tools say the message was a committed transaction
    sample = results[b"c3"]
    out = subprocess.run([sys.executable, "-m", "client.admin_cli", "queryMsgByUniqueKey", "-n",
                          ns.addr, "-t", TOPIC, "-i", sample.msg_id],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "committed transaction" in out.stdout
    status = await runtime(ns.addr, broker.addr)
    assert status["transactionCommitted"] == 20 and status["transactionRolledBack"] == 20


async def test_unknown_resolved_by_checks_or_discarded(cluster: Cluster) -> None:
    ns, broker = await setup(cluster, **FAST_CHECKS)
    bodies = [b"to-commit", b"to-rollback", b"never-known", b"raises"]
    listener = Listener({b: UNKNOW for b in bodies},
                        {b"to-commit": COMMIT, b"to-rollback": ROLLBACK})

    def check(msg: MessageExt) -> LocalTransactionState:
        listener.checked[msg.body] += 1
        if msg.body == b"raises":
            raise RuntimeError("the local database is down")
        return listener.check.get(msg.body, UNKNOW)

    listener.check_local_transaction = check  # type: ignore[method-assign]
    async with TransactionProducer("tx-checks", ns.addr, listener) as p:
        for body in bodies:
            r = await p.send_message_in_transaction(Message(TOPIC, body))
            assert r.local_transaction_state is UNKNOW

        async def discarded() -> bool:
            return (await runtime(ns.addr, broker.addr))["transactionDiscarded"] >= 2

        await wait_until(discarded, 60, "the never-known transactions discarded")
        await settled(ns.addr, broker.addr)
    assert await delivered(broker.addr) == [b"to-commit"]
    assert listener.checked[b"to-commit"] == 1 and listener.checked[b"to-rollback"] == 1
    # UNKNOW every time: asked transactionCheckMax (3) times, then given up
    assert listener.checked[b"never-known"] == 3 and listener.checked[b"raises"] == 3
    async with MQAdmin(ns.addr) as admin:
        route = await admin.topic_route(TRANS_CHECK_MAX_TIME_TOPIC)
        assert route.queue_datas
    kept = await delivered(broker.addr, TRANS_CHECK_MAX_TIME_TOPIC, 1)
    assert sorted(kept) == [b"never-known", b"raises"]


async def test_producer_killed_between_half_and_end(cluster: Cluster) -> None:
    ns, broker = await setup(cluster, **FAST_CHECKS)
    group = "tx-crash"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.tx_producer_proc", ns.addr, TOPIC, group,
         "alpha", "beta"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        seen: set[str] = set()
        with trio.fail_after(30):
            while len(seen) < 2:
                line = await trio.to_thread.run_sync(proc.stdout.readline)
                assert line, "the producer process ended early"
                if line.startswith("HALF "):  # other lines are its logs
                    seen.add(line.split()[1])
    finally:
        proc.kill()
        proc.wait()
    assert seen == {"alpha", "beta"}
    # a second process of the group answers the checks
    listener = Listener({}, {b"alpha": COMMIT, b"beta": ROLLBACK})
    async with TransactionProducer(group, ns.addr, listener) as p:
        await p.fetch_publish_message_queues(TOPIC)  # learn the broker: it can be asked

        async def answered() -> bool:
            return (await runtime(ns.addr, broker.addr))["transactionPending"] == 0

        await wait_until(answered, 30, "both transactions ended by checks")
        await settled(ns.addr, broker.addr)
    assert await delivered(broker.addr) == [b"alpha"]
    assert listener.checked == Counter({b"alpha": 1, b"beta": 1})


async def test_broker_kill_9_with_1000_pending(cluster: Cluster) -> None:
    ns, broker = await setup(cluster, transactionCheckInterval=500, transactionTimeOut=1500)
    n = 1000
    first = {}  # what the local transaction says at once
    final = {}  # what it says when checked
    for i in range(n):
        body = b"m%04d" % i
        first[body] = (COMMIT, ROLLBACK, UNKNOW)[i % 3]
        final[body] = first[body] if i % 3 != 2 else (COMMIT if i % 2 else ROLLBACK)
    listener = Listener(first, final)
    async with TransactionProducer("tx-restart", ns.addr, listener) as p:
        sem = trio.Semaphore(50)

        async def one(body: bytes) -> None:
            async with sem:
                await p.send_message_in_transaction(Message(TOPIC, body))

        async with trio.open_nursery() as nursery:
            for body in first:
                nursery.start_soon(one, body)
        broker.kill()  # ends may still be in flight: those get checked
        broker.start()
        await settled(ns.addr, broker.addr)
        got = await delivered(broker.addr)
    want = [b for b, s in final.items() if s is COMMIT]
    # each committed one once, no rolled-back one (ends lost with the broker,
    # oneway, were asked about again and answered the same way)
    assert sorted(got) == sorted(want)


async def test_10000_concurrent_transactions_four_producers(cluster: Cluster) -> None:
    ns, broker = await setup(cluster, **FAST_CHECKS)
    rng = random.Random(13)
    per_producer = 2500
    listeners = []
    committed: set[bytes] = set()
    for k in range(4):
        first, final = {}, {}
        for i in range(per_producer):
            body = b"p%d-%05d" % (k, i)
            first[body] = rng.choice([COMMIT, ROLLBACK, UNKNOW])
            final[body] = first[body] if first[body] is not UNKNOW else rng.choice([COMMIT, ROLLBACK])
            if final[body] is COMMIT:
                committed.add(body)
        listeners.append(Listener(first, final))
    async with trio.open_nursery() as outer:
        producers = []
        for k in range(4):
            p = TransactionProducer(f"tx-load-{k}", ns.addr, listeners[k], check_workers=4)
            await p.start()
            producers.append(p)
        try:
            async def run(k: int) -> None:
                sem = trio.Semaphore(32)

                async def one(body: bytes) -> None:
                    async with sem:
                        await producers[k].send_message_in_transaction(Message(TOPIC, body))

                async with trio.open_nursery() as nursery:
                    for body in listeners[k].execute:
                        nursery.start_soon(one, body)

            async with trio.open_nursery() as nursery:
                for k in range(4):
                    nursery.start_soon(run, k)
            await settled(ns.addr, broker.addr)
        finally:
            for p in producers:
                await p.shutdown()
        outer.cancel_scope.cancel()
    got = await delivered(broker.addr)
    assert len(got) == len(set(got))
    assert set(got) == committed


async def test_bad_transaction_requests(cluster: Cluster) -> None:
    ns, broker = await setup(cluster)
    listener = Listener({b"x": COMMIT})
    async with TransactionProducer("tx-bad", ns.addr, listener) as p:
        r = await p.send_message_in_transaction(Message(TOPIC, b"x"))
    assert r.offset_msg_id is not None
    _, phys = decode_msg_id(r.offset_msg_id)

    async with RemotingClient() as rc:
        async def end(group: str, queue_offset: int, commit_log_offset: int,
                      kind: int = TRANSACTION_COMMIT_TYPE) -> RemotingCommand:
            h = EndTransactionRequestHeader(group, queue_offset, commit_log_offset, kind)
            return await rc.invoke(broker.addr, RemotingCommand.request(
                RequestCode.END_TRANSACTION, h.to_fields()), 5)

        async def expect(resp: RemotingCommand, code: int, words: str) -> None:
            assert resp.code == code, resp
            assert words in str(resp.remark), resp.remark

        await expect(await end("tx-bad", r.queue_offset, phys), ResponseCode.SUCCESS, "already")
        await expect(await end("tx-bad", r.queue_offset, phys, TRANSACTION_ROLLBACK_TYPE),
                     ResponseCode.TRANSACTION_FAILED, "already committed")
        await expect(await end("someone", r.queue_offset, phys), ResponseCode.SYSTEM_ERROR,
                     "producer group")
        await expect(await end("tx-bad", r.queue_offset + 7, phys), ResponseCode.SYSTEM_ERROR,
                     "queue offset")
        await expect(await end("tx-bad", 0, 10**12), ResponseCode.SYSTEM_ERROR, "no half message")
        await expect(await end("tx-bad", r.queue_offset, phys, 5), ResponseCode.SYSTEM_ERROR,
                     "commitOrRollback")
        bad = RemotingCommand.request(RequestCode.END_TRANSACTION, {"producerGroup": "tx-bad",
                                                                    "commitLogOffset": -1})
        await expect(await rc.invoke(broker.addr, bad, 5), ResponseCode.SYSTEM_ERROR, "bad request")

        async def send(sys_flag: int, props: dict[str, str], batch: bool = False) -> RemotingCommand:
            h = SendMessageRequestHeader("tx-bad", TOPIC, 0, sys_flag=sys_flag,
                                         properties=properties_to_string(props), batch=batch)
            code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE
            return await rc.invoke(broker.addr, RemotingCommand.request(code, h.to_fields(), b"y"), 5)

        await expect(await send(TRANSACTION_COMMIT_TYPE, {}), ResponseCode.MESSAGE_ILLEGAL,
                     "broker's to set")
        await expect(await send(TRANSACTION_PREPARED_TYPE, {"DELAY": "2", "TRAN_MSG": "true"}),
                     ResponseCode.MESSAGE_ILLEGAL, "delayed")
        await expect(await send(TRANSACTION_PREPARED_TYPE, {}, batch=True),
                     ResponseCode.MESSAGE_ILLEGAL, "batch")
    assert await delivered(broker.addr) == [b"x"]


async def test_transactions_on_a_master_slave_group(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "SYNC_MASTER", **FAST_CHECKS)
    await create_topic(ns.addr, master, TOPIC, QUEUES)
    states = {b"probe": COMMIT}
    states.update({f"c{i}".encode(): COMMIT for i in range(15)})
    states.update({f"r{i}".encode(): ROLLBACK for i in range(15)})
    states.update({f"u{i}".encode(): UNKNOW for i in range(5)})
    listener = Listener(states, {f"u{i}".encode(): COMMIT for i in range(5)})
    async with TransactionProducer("tx-ha", ns.addr, listener) as p:
        # SYNC_MASTER: a half message is SEND_OK once the slave holds it
        async def acknowledged() -> bool:
            r = await p.send_message_in_transaction(Message(TOPIC, b"probe"))
            return r.send_status == SendStatus.SEND_OK
        await wait_until(acknowledged, 20, "a slave acknowledging half messages")
        for body in states:
            if body != b"probe":
                r = await p.send_message_in_transaction(Message(TOPIC, body))
                assert r.send_status == SendStatus.SEND_OK
        await settled(ns.addr, master.addr)
    async with MQAdmin(ns.addr) as admin:
        await wait_until(same_max_offset(admin, master, slave), 20, "the slave caught up")
    want = Counter({b: 1 for b in states if not b.startswith(b"r")})
    got = Counter(await delivered(slave.addr))
    assert set(got) == set(want) and all(n == 1 for b, n in got.items() if b != b"probe")
    async with RemotingClient() as rc:
        # ends belong on the master
        h = EndTransactionRequestHeader("tx-ha", 0, 0, TRANSACTION_COMMIT_TYPE)
        r = await rc.invoke(slave.addr, RemotingCommand.request(
            RequestCode.END_TRANSACTION, h.to_fields()), 5)
        assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE
        # the check service's progress is copied like any group's offsets

        async def offsets_copied() -> bool:
            tables = []
            for addr in (master.addr, slave.addr):
                resp = await rc.invoke(addr, RemotingCommand.request(
                    RequestCode.GET_ALL_CONSUMER_OFFSET), 5)
                table = unpack_body(resp.body)["offsetTable"]
                tables.append({k: v for k, v in table.items() if k.endswith("@CID_RMQ_SYS_TRANS")})
            return bool(tables[0]) and tables[0] == tables[1]

        await wait_until(offsets_copied, 20, "CID_RMQ_SYS_TRANS offsets on the slave")
