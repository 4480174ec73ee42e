"""Three real name servers, one broker registered with all of them: name servers
die one after another while producers and push consumers keep going, ours and
the official C++ client's. Every acknowledged message is received; lookups made
after each death (a new topic, a new client, mqadmin) go to a live name server.

Figures (``-s`` prints them): messages sent, received, send errors, duplicates,
and how long the first name-server request after a death took (the rotation).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from client import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, MessageExt, Producer
from client.admin import MQAdmin, MQAdminError
from client.instance import MQClientInstance
from client.push_consumer import PushConsumer
from tests.integration.cluster import BIN, Cluster, Daemon
from tests.integration.official_client import REPO, OfficialClient, load_error
from tests.waits import wait_until

TOPIC = "NsTopic"
BROKER = "broker-a"


@dataclass
class Three:
    namesrvs: list[Daemon]
    broker: Daemon

    @property
    def addr(self) -> str:
        """The list every client is given: ``a;b;c``."""
        return ";".join(d.addr for d in self.namesrvs)

    def live(self) -> list[Daemon]:
        return [d for d in self.namesrvs if d.proc is not None and d.proc.poll() is None]

    def by_addr(self, addr: str) -> Daemon:
        return next(d for d in self.namesrvs if d.addr == addr)


async def topic_on(namesrv: str, topic: str) -> bool:
    """``namesrv`` (one address) routes ``topic`` to the broker."""
    async with MQAdmin(namesrv, timeout=1.0) as admin:
        try:
            route = await admin.topic_route(topic)
        except MQAdminError:
            return False
    return any(q.broker_name == BROKER for q in route.queue_datas)


async def create_topic(three: Three, topic: str) -> float:
    """Create ``topic`` on the broker (through the list, with dead name servers in
    it); wait until every live name server routes it. Returns the seconds that took."""
    t0 = trio.current_time()
    async with MQAdmin(three.addr, timeout=1.0) as admin:
        await admin.create_topic(topic, broker_addr=three.broker.addr, read_queue_nums=4,
                                 write_queue_nums=4)
    for d in three.live():
        await wait_until(partial(topic_on, d.addr, topic), 15, f"{topic} on {d.name}")
    return trio.current_time() - t0


@pytest.fixture
async def three(cluster: Cluster) -> Three:
    namesrvs = [cluster.namesrv() for _ in range(3)]
    t = Three(namesrvs, cluster.broker(BROKER, ";".join(d.addr for d in namesrvs)))
    await create_topic(t, TOPIC)  # so the broker is on all three
    return t


class Traffic:
    """A producer sending numbered messages as fast as it is answered (paced)
    and a push consumer of the group recording what it receives."""

    def __init__(self) -> None:
        self.acked: set[str] = set()
        self.errors: list[str] = []
        self.received: Counter[str] = Counter()
        self.stop = trio.Event()

    def listener(self, msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            self.received[m.body.decode()] += 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def send_loop(self, producer: Producer) -> None:
        i = 0
        while not self.stop.is_set():
            body = f"m-{i}"
            try:
                await producer.send(Message(TOPIC, body.encode(), keys=body))
            except Exception as exc:  # counted: the test says none may happen
                self.errors.append(f"{body}: {exc!r}")
            else:
                self.acked.add(body)
            i += 1
            await trio.sleep(0.004)

    def all_received(self) -> bool:
        return self.acked <= set(self.received)


async def first_lookup_after(instance: MQClientInstance, topic: str) -> float:
    """Seconds the instance's next route lookup takes (it starts at the current
    name server, which may just have died)."""
    t0 = trio.current_time()
    assert await instance.update_topic_route(topic) is not None
    return trio.current_time() - t0


async def test_our_clients_keep_going_while_two_of_three_name_servers_die(three: Three) -> None:
    traffic = Traffic()
    consumer = PushConsumer("ns-group", three.addr, poll_name_server_interval=1.0,
                            rebalance_interval=2.0, request_timeout=1.0,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(traffic.listener)
    rotations: list[float] = []
    async with consumer, Producer("ns-producer", three.addr) as producer:
        instance = producer._instance  # shared with the consumer (same list, same process)
        assert instance is not None and instance is consumer._instance
        async with trio.open_nursery() as nursery:
            nursery.start_soon(traffic.send_loop, producer)
            await wait_until(lambda: _at_least(traffic, 100), 30, "the first messages received")
            for round_ in (1, 2):
                victim = three.by_addr(instance.current_namesrv)
                victim.kill()  # the one the clients ask
                rotations.append(await first_lookup_after(instance, TOPIC))
                assert instance.current_namesrv != victim.addr
                assert instance.current_namesrv in {d.addr for d in three.live()}
                # a topic made now is found through a live name server
                topic = f"NsAfterKill{round_}"
                await create_topic(three, topic)
                r = await producer.send(Message(topic, b"after a name server died"))
                assert r.message_queue.topic == topic
                seen = len(traffic.acked)
                await wait_until(partial(_at_least, traffic, seen + 100), 30,
                                 f"traffic after kill {round_}")
            traffic.stop.set()
        await wait_until(lambda: _ready(traffic.all_received()), 30, "every acked message received")
        # the consumer's own lookups (route refresh, retry topic) went on too
        assert consumer.assigned_queues() and len(three.live()) == 1

    # mqadmin with the list from NAMESRV_ADDR, two of its three name servers dead
    env = {**os.environ, "NAMESRV_ADDR": three.addr}
    out = await trio.to_thread.run_sync(lambda: subprocess.run(
        [str(BIN / "mqadmin"), "topicRoute", "-t", TOPIC], capture_output=True, text=True,
        timeout=60, cwd=REPO, env=env))
    assert out.returncode == 0 and BROKER in out.stdout, out.stderr

    dup = sum(n - 1 for n in traffic.received.values() if n > 1)
    print(f"\nour SDK, 3 name servers, 2 killed: sent {len(traffic.acked)} acked, "
          f"received {len(set(traffic.received))} distinct ({dup} duplicates), "
          f"send errors {len(traffic.errors)}; first lookup after each kill "
          f"{[round(r * 1000, 1) for r in rotations]} ms")
    assert traffic.errors == []
    assert traffic.acked <= set(traffic.received)
    assert all(r < 1.0 for r in rotations), rotations  # a refused connection: at once


async def test_a_frozen_name_server_costs_one_request_timeout(three: Three) -> None:
    """A hung name server (SIGSTOP: it still accepts connections) is left after
    one request timeout; the broker's registrations reach the other two meanwhile."""
    instance = await MQClientInstance.acquire(three.addr, request_timeout=1.0)
    await instance.update_topic_route(TOPIC)
    frozen = three.by_addr(instance.current_namesrv)
    frozen.freeze()
    try:
        took = await first_lookup_after(instance, TOPIC)
        assert 1.0 <= took < 2.0, took  # one request timeout, then the next one answers
        assert instance.current_namesrv != frozen.addr
        again = await first_lookup_after(instance, TOPIC)
        assert again < 0.5  # kept: the frozen one is not asked again
        # a topic created now is on the two live name servers long before the
        # broker's registration to the frozen one times out (6 s)
        live = [d for d in three.namesrvs if d is not frozen]
        t0 = trio.current_time()
        async with MQAdmin(instance.current_namesrv, timeout=1.0) as admin:
            await admin.create_topic("NsWhileFrozen", broker_addr=three.broker.addr,
                                     read_queue_nums=2, write_queue_nums=2)
        for d in live:
            await wait_until(partial(topic_on, d.addr, "NsWhileFrozen"), 15, d.name)
        registered = trio.current_time() - t0
        assert registered < 3.0, registered
        print(f"\nfrozen name server: first lookup {took * 1000:.0f} ms (request timeout "
              f"1 s), next {again * 1000:.1f} ms; a new topic on the live ones after "
              f"{registered * 1000:.0f} ms")
    finally:
        await instance.release()
        frozen.thaw()


async def _at_least(traffic: Traffic, n: int) -> bool:
    return len(set(traffic.received)) >= n


async def _ready(value: bool) -> bool:
    return value


async def _acked_at_least(sends: CppSends, n: int) -> bool:
    return len(sends.acked()) >= n


# ---- the official C++ client -------------------------------------------------------------


def cpp_producer(addr: str, home: Path, group: str) -> OfficialClient:
    p = OfficialClient(["produce", "-n", addr, "-g", group], home, timeout=170)
    try:
        p.wait_event("started", 60)
    except BaseException:
        p.close()
        raise
    return p


_CPP_TIME = re.compile(r"^\[(\d{4}-\w{3}-\d{2} [\d:.]+)\]")


def cpp_connects(client: OfficialClient, namesrvs: list[Daemon]) -> list[tuple[float, str, bool]]:
    """The C++ client's connection attempts to the name servers, from its log:
    (seconds, address, connected), in order."""
    out = []
    for d in namesrvs:
        for line in client.cpp_log_lines(d.addr):
            ok = f"connect server with addr:{d.addr} success" in line
            if not ok and f"can not connect to server:{d.addr}" not in line:
                continue
            m = _CPP_TIME.match(line)
            assert m is not None, line
            at = datetime.strptime(m.group(1), "%Y-%b-%d %H:%M:%S.%f").timestamp()
            out.append((at, d.addr, ok))
    return sorted(out)


class CppSends:
    """Sync sends through a C++ producer child, one at a time, on a thread."""

    def __init__(self, producer: OfficialClient, prefix: str) -> None:
        self.producer = producer
        self.prefix = prefix
        self.written = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            body = f"{self.prefix}-{self.written}"
            self.producer.write({"op": "sync", "message": {"topic": TOPIC, "body": body}})
            self.written += 1
            self.producer.wait(partial(self._answered, self.written), 30, f"answer to {body}")

    def _answered(self, n: int) -> bool:
        return len(self.producer.records()) >= n

    def answers(self) -> list[dict[str, Any]]:
        return self.producer.records()

    def acked(self) -> set[str]:
        return {f"{self.prefix}-{a['i']}" for a in self.answers() if a.get("status") == "OK"}

    def errors(self) -> list[dict[str, Any]]:
        return [a for a in self.answers() if "error" in a]


async def test_the_official_cpp_client_keeps_going_while_two_die(three: Three, tmp_path: Path
                                                                 ) -> None:
    why = load_error()
    if why is not None:
        pytest.skip(f"the official RocketMQ client (PyPI rocketmq) cannot load here: {why}")
    from tests.integration.test_official_client import Env, cpp_bodies, cpp_consumer, probe_until

    env = Env(three.addr, {BROKER: three.broker.addr})
    with cpp_consumer(env, tmp_path / "consumer", "CID-ns-cpp", TOPIC) as consumer:
        await probe_until(env, TOPIC, {"cpp": cpp_bodies(consumer)},
                          lambda seen: all(c == Counter({"cpp": 1}) for c in seen.values()))
        with cpp_producer(three.addr, tmp_path / "producer", "PID-ns-cpp") as producer:
            sends = CppSends(producer, "cpp")
            sends.thread.start()
            try:
                for victim in three.namesrvs[:2]:  # which one the C++ client asks is its own
                    before = len(sends.acked())
                    victim.kill()
                    await wait_until(partial(_acked_at_least, sends, before + 50), 60,
                                     f"C++ sends after {victim.name} died")
            finally:
                sends.stop.set()
                await trio.to_thread.run_sync(sends.thread.join, 60)
            assert producer.finish() == 0
        # a C++ producer started now must find the one live name server in the list
        t0 = trio.current_time()
        with cpp_producer(three.addr, tmp_path / "late", "PID-ns-cpp-late") as late:
            late_sends = CppSends(late, "late")
            for _ in range(20):
                late.write({"op": "sync", "message": {"topic": TOPIC, "body": f"late-{_}"}})
            await trio.to_thread.run_sync(
                lambda: late.wait(lambda: len(late.records()) >= 20, 60, "the late sends"))
            first_send = trio.current_time() - t0
            assert late.finish() == 0
            live = three.live()[0].addr
            tried = cpp_connects(late, three.namesrvs)
            # its name-server connections: the live one reached (after the dead ones
            # it tried first, if any: in list order from where it starts)
            assert tried and tried[-1][1] == live and tried[-1][2], tried
        acked = sends.acked() | late_sends.acked()
        await trio.to_thread.run_sync(lambda: consumer.wait(
            lambda: acked <= set(cpp_bodies(consumer)()), 60, "every C++ send at the C++ consumer"))
        received = Counter(b for b in cpp_bodies(consumer)() if not b.startswith("probe"))
        assert consumer.finish() == 0
    errors = sends.errors() + late_sends.errors()
    dup = sum(n - 1 for n in received.values() if n > 1)
    dead_tried = [addr for _, addr, ok in tried if not ok]
    print(f"\nC++ client, 3 name servers, 2 killed: sent {len(acked)} acked, received "
          f"{len(set(received) & acked)} of them ({dup} duplicates), send errors {len(errors)}; "
          f"a producer started after the kills: launched and 20 sends answered in "
          f"{first_send * 1000:.0f} ms, its first lookup tried {len(dead_tried)} dead name "
          f"server(s) and reached the live one {(tried[-1][0] - tried[0][0]) * 1000:.1f} ms "
          f"after its first try")
    assert errors == []
    assert len(late_sends.acked()) == 20
