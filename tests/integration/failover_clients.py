"""Clients across an automatic failover (controller mode, issue 51): the group of
failover.py (three real replicas, an ``mqcontroller``), our SDK's producer, a
clustering push consumer and an orderly push consumer running while the master is
killed with kill -9. Used by test_failover_clients.py and by
``python -m tests.integration.failover_clients --poll 30 --runs 3`` (figures: kill -9
to the first SEND_OK, and to the first message each consumer gets from the new
master; ``--poll`` is the clients' pollNameServerInterval in seconds; ``--cpp``: the
official C++ client's producer and push consumer instead, ``--settle S`` killing the
master S seconds after the first traffic)."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageExt,
    MQClientError,
    Producer,
    PushConsumer,
    SendStatus,
)
from client.admin_controller import ControllerAdmin
from tests.integration.cluster import Cluster
from tests.integration.failover import Group, new_master, start_group
from tests.waits import wait_lag_zero, wait_until

TOPIC = "FollowTopic"
QUEUES = 4
CONCURRENT = "follow-concurrent"
ORDERLY = "follow-orderly"


@dataclass
class ClientFigures:
    poll_s: float
    first_send_s: float = 0.0  # kill -9 -> the first SEND_OK after it
    elected_s: float = 0.0  # kill -9 -> the controller names a new master
    resumed_s: dict[str, float] = field(default_factory=dict)  # group -> first message after
    failed_sends: int = 0
    acked: int = 0
    duplicates: dict[str, int] = field(default_factory=dict)  # group -> deliveries beyond one


@dataclass
class Received:
    """What one consumer group got: bodies (with counts) and, per queue, the queue
    offsets of first deliveries in the order they came."""
    bodies: Counter[bytes] = field(default_factory=Counter)
    first_offsets: dict[int, list[int]] = field(default_factory=dict)
    at: list[tuple[float, bytes]] = field(default_factory=list)  # (monotonic, body)

    def take(self, m: MessageExt) -> None:
        if m.body not in self.bodies:
            self.first_offsets.setdefault(m.queue_id, []).append(m.queue_offset)
        self.bodies[m.body] += 1
        self.at.append((time.monotonic(), m.body))


def out_of_order(received: Received) -> list[tuple[int, list[int]]]:
    """Queues whose first deliveries did not come in queue-offset order."""
    return [(q, offs) for q, offs in received.first_offsets.items() if offs != sorted(offs)]


def consumers(ns: str, poll_s: float, got: dict[str, Received]) -> list[PushConsumer]:
    fast: dict[str, Any] = {"poll_name_server_interval": poll_s,
                            "heartbeat_broker_interval": 1.0, "rebalance_interval": 2.0,
                            "persist_consumer_offset_interval": 1.0,
                            "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET}
    concurrent = PushConsumer(CONCURRENT, ns, instance_name="follow-c", **fast)
    concurrent.subscribe(TOPIC, "*")

    async def on_concurrent(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            got[CONCURRENT].take(m)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    concurrent.register_message_listener(on_concurrent)
    orderly = PushConsumer(ORDERLY, ns, instance_name="follow-o",
                           consume_message_batch_max_size=4, **fast)
    orderly.subscribe(TOPIC, "*")

    async def on_orderly(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
        for m in msgs:
            got[ORDERLY].take(m)
        return ConsumeOrderlyStatus.SUCCESS

    orderly.register_message_listener(on_orderly, orderly=True)
    return [concurrent, orderly]


async def sdk_clients_follow(cluster: Cluster, poll_s: float, heartbeat_ms: int = 1500,
                             before: int = 100, after: int = 100) -> ClientFigures:
    """Producer and consumers of our SDK across a kill -9 of the master. Asserts
    that every acknowledged message reaches both groups, the orderly group's first
    deliveries in queue order, and the groups' offsets end on the new master."""
    figures = ClientFigures(poll_s)
    got = {CONCURRENT: Received(), ORDERLY: Received()}
    acked: set[bytes] = set()
    async with ControllerAdmin() as ctl:
        group = await start_group(cluster, ctl, heartbeat_ms, TOPIC, QUEUES)
        ns = group.ns.addr
        subs = consumers(ns, poll_s, got)
        async with Producer("follow-producer", ns, retry_times_when_send_failed=2,
                            send_msg_timeout=3.0, poll_name_server_interval=poll_s) as producer:
            for c in subs:
                await c.start()
            try:
                await _traffic(ctl, group, producer, got, acked, figures, before, after)
                for name in (CONCURRENT, ORDERLY):
                    async def all_in(name: str = name) -> bool:
                        return acked <= set(got[name].bodies)
                    try:
                        await wait_until(all_in, 120, f"every acknowledged message at {name}")
                    except AssertionError as e:
                        missing = acked - set(got[name].bodies)
                        raise AssertionError(f"{e}: {len(missing)} missing, e.g. "
                                             f"{sorted(missing)[:5]}") from None
                # the offsets the consumers commit are on the new master (lag 0 there:
                # it is the only master routed)
                for name in (CONCURRENT, ORDERLY):
                    await wait_lag_zero(ns, name, TOPIC, timeout=60)
            finally:
                for c in subs:
                    await c.shutdown()
    assert not out_of_order(got[ORDERLY]), out_of_order(got[ORDERLY])[:2]
    figures.acked = len(acked)
    figures.duplicates = {n: sum(got[n].bodies.values()) - len(got[n].bodies) for n in got}
    return figures


async def _traffic(ctl: ControllerAdmin, group: Group, producer: Producer,
                   got: dict[str, Received], acked: set[bytes], figures: ClientFigures,
                   before: int, after: int) -> None:
    i = 0

    async def send_one() -> bool:
        nonlocal i
        body = b"m-%d" % i
        i += 1
        try:
            r = await producer.send(Message(TOPIC, body))
        except MQClientError:  # MQBrokerError included
            return False
        assert r.send_status == SendStatus.SEND_OK, r
        acked.add(body)
        return True

    for _ in range(before):
        assert await send_one()
    for name in got:
        async def consumed(name: str = name) -> bool:
            return acked <= set(got[name].bodies)
        await wait_until(consumed, 60, f"{name} consumed what was sent before the kill")

    group.master.kill()  # no shutdown, no unregistration
    killed_at = time.monotonic()

    async def watch_election() -> None:
        await wait_until(lambda: new_master(ctl, group), 120, "a new master elected",
                         interval=0.05)
        figures.elected_s = time.monotonic() - killed_at

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_election)
        with trio.fail_after(180):
            while not await send_one():
                figures.failed_sends += 1
                await trio.sleep(0.05)
        figures.first_send_s = time.monotonic() - killed_at
    for _ in range(after):
        assert await send_one()

    first_after = b"m-%d" % (before + figures.failed_sends)  # the first one sent after
    for name, rec in got.items():
        async def resumed(rec: Received = rec) -> float | None:
            for t, body in rec.at:
                if t > killed_at and body in acked and int(body[2:]) >= before:
                    return t - killed_at
            return None
        figures.resumed_s[name] = await wait_until(
            resumed, 120, f"{name} gets a message sent after the kill ({first_after!r})")


# ---- the official C++ client (PyPI rocketmq 0.4.4) --------------------------------------

CPP_GROUP = "follow-cpp"


@dataclass
class CppFigures:
    first_send_s: float = 0.0  # kill -9 -> the first send answered OK after it
    elected_s: float = 0.0
    resumed_s: float = 0.0  # kill -9 -> the consumer gets a message sent after it
    failed_sends: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # failed sends by C++ message
    acked: int = 0
    duplicates: int = 0


def _error_kind(error: str) -> str:
    """A C++ error message without its addresses and numbers."""
    return " ".join(w for w in error.split()[:8] if not any(ch.isdigit() for ch in w))


async def cpp_clients_follow(cluster: Cluster, home: Path, heartbeat_ms: int = 1500,
                             before: int = 40, after: int = 40, settle: float = 0.0
                             ) -> CppFigures:
    """The C++ client's producer and push consumer (child processes, default
    settings: routes refreshed 3 s after the start, then every 30 s) across a kill -9
    of the master, ``settle`` s after the messages sent before it were consumed (where
    the kill falls in the C++ client's 30 s refresh period). Asserts that every message
    the C++ producer had answered OK reaches the C++ consumer and that its group's
    offsets end on the new master."""
    from tests.integration.official_client import OfficialClient, message

    figures = CppFigures()
    acked: set[str] = set()
    async with ControllerAdmin() as ctl:
        group = await start_group(cluster, ctl, heartbeat_ms, TOPIC, QUEUES)
        ns = group.ns.addr
        with OfficialClient(["consume", "-n", ns, "-g", CPP_GROUP, "-t", TOPIC],
                            home / "consumer", timeout=400) as consumer, \
                OfficialClient(["produce", "-n", ns, "-g", "follow-cpp-producer"],
                               home / "producer", timeout=400) as producer:
            await trio.to_thread.run_sync(lambda: consumer.wait_event("started", 60))
            await trio.to_thread.run_sync(lambda: producer.wait_event("started", 60))
            i = 0

            async def send_one() -> bool:
                nonlocal i
                body = f"cpp-{i}"
                want = len(producer.records()) + 1
                producer.write({"op": "sync", "message": message(TOPIC, body)})
                i += 1
                await trio.to_thread.run_sync(lambda: producer.wait(
                    lambda: len(producer.records()) >= want, 60, f"an answer to {body}"))
                answer = producer.records()[-1]
                if "error" in answer:
                    figures.errors[_error_kind(answer["error"])] += 1
                    return False
                assert answer["status"] == "OK", answer
                acked.add(body)
                return True

            def bodies() -> Counter[str]:
                return Counter(r["body"] for r in consumer.records())

            async def consumed_all() -> bool:
                return acked <= set(bodies())

            for _ in range(before):
                assert await send_one(), producer.diagnostics()
            await wait_until(consumed_all, 60, "the C++ consumer got what was sent before")
            if settle > 0:
                await trio.sleep(settle)  # places the kill in the C++ client's refresh period

            group.master.kill()
            killed_at = time.monotonic()

            async def watch_election() -> None:
                await wait_until(lambda: new_master(ctl, group), 120, "a new master elected",
                                 interval=0.05)
                figures.elected_s = time.monotonic() - killed_at

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch_election)
                with trio.fail_after(240):
                    while not await send_one():
                        figures.failed_sends += 1
                        await trio.sleep(0.05)
                figures.first_send_s = time.monotonic() - killed_at
            first_after = f"cpp-{i - 1}"
            for _ in range(after):
                assert await send_one(), producer.diagnostics()

            async def got_first_after() -> bool:
                return first_after in bodies()
            try:
                await wait_until(got_first_after, 120, "the C++ consumer resumes")
                figures.resumed_s = time.monotonic() - killed_at
                await wait_until(consumed_all, 60, "every acknowledged message at the C++ "
                                 "consumer")
                await wait_lag_zero(ns, CPP_GROUP, TOPIC, timeout=60)
            except AssertionError as e:
                raise AssertionError(f"{e}: {len(acked - set(bodies()))} missing\n"
                                     f"{consumer.diagnostics()}") from None
            consumer.write("stop")
            assert producer.finish() == 0 and consumer.finish() == 0
            figures.acked = len(acked)
            figures.duplicates = sum(bodies().values()) - len(bodies())
    return figures


async def _measure(poll_s: float, heartbeat_ms: int, runs: int) -> None:
    for run in range(runs):
        with tempfile.TemporaryDirectory() as root:
            cluster = Cluster(Path(root))
            try:
                f = await sdk_clients_follow(cluster, poll_s, heartbeat_ms, before=40,
                                             after=40)
            finally:
                cluster.close()
        print(f"poll {poll_s} s, heartbeat timeout {heartbeat_ms} ms, run {run + 1}: "
              f"first SEND_OK {f.first_send_s:.2f} s after the kill (new master named after "
              f"{f.elected_s:.2f} s, {f.failed_sends} failed sends); consumers resumed "
              + ", ".join(f"{n} {s:.2f} s" for n, s in f.resumed_s.items())
              + f"; duplicates {f.duplicates}", flush=True)


async def _measure_cpp(heartbeat_ms: int, runs: int, settle: float) -> None:
    for run in range(runs):
        with tempfile.TemporaryDirectory() as root:
            (Path(root) / "cluster").mkdir()
            cluster = Cluster(Path(root) / "cluster")
            try:
                f = await cpp_clients_follow(cluster, Path(root) / "cpp", heartbeat_ms,
                                             settle=settle)
            finally:
                cluster.close()
        print(f"C++ client, heartbeat timeout {heartbeat_ms} ms, kill {settle} s after the "
              f"traffic settled, run {run + 1}: first send OK "
              f"{f.first_send_s:.2f} s after the kill (new master named after "
              f"{f.elected_s:.2f} s, {f.failed_sends} failed sends: {dict(f.errors)}); "
              f"consumer resumed {f.resumed_s:.2f} s; duplicates {f.duplicates}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--poll", type=float, default=30.0)
    parser.add_argument("--heartbeat-ms", type=int, default=1500)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--cpp", action="store_true",
                        help="the official C++ client's producer and consumer instead")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="--cpp: seconds between the first traffic and the kill (0-60)")
    args = parser.parse_args()
    if args.cpp:
        if not 0 <= args.settle <= 60:
            parser.error("--settle takes 0 to 60 seconds")
        trio.run(_measure_cpp, args.heartbeat_ms, args.runs, args.settle)
    else:
        trio.run(_measure, args.poll, args.heartbeat_ms, args.runs)


if __name__ == "__main__":
    main()
