"""Timer-message figures: lateness, a burst due in one second, recovery after kill -9.
Run from the repository root:

    .venv/bin/python -m bench.timer [--spread-count 100000] [--spread-s 60]
        [--burst-count 1000000] [--recovery-count 1000000] [--senders 64]

A name server and a broker (default config: timerPrecisionMs 1000) run as separate
processes on loopback (tests/integration/cluster.py) with a temporary store. Timer
messages are sent one by one (a batch carries no timer) by ``--senders`` tasks of one
producer, to a topic of 4 queues. Three phases:

- ``spread``: ``--spread-count`` messages due evenly over ``--spread-s`` seconds,
  starting once they are all sent (``--lead-s`` after sending began, or later:
  a message sent after its due time counts as "sent late" and is left out of the
  figures). Lateness = the delivered copy's store time minus its due time
  (``TIMER_OUT_MS``), p50 / p99 / max.
- ``burst``: first ``--probe-s`` seconds of plain sync sends (``--senders``
  tasks) with no timer due: the baseline; then ``--burst-count`` messages due
  in the same second; as that second comes the same plain sends run again for
  ``--probe-s`` seconds. Figures: the burst's lateness and how long its delivery
  took, plain sends per second during it against the baseline.
- ``recovery``: ``--recovery-count`` messages due in an hour; once all are in
  the wheel, kill -9 and start the broker again. Figures: seconds to "broker
  started" (store recovery + timer log replay), the broker's own replay time
  (its "timer wheel loaded" log line) and the seconds until every pending
  message is back in the wheel; the pending count before and after.

The last line is the figures as JSON.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import trio

from client import Message, Producer, PullConsumer
from client.admin import MQAdmin
from client.pull_result import PullStatus
from protocol.message import MessageQueue
from tests.integration.cluster import Cluster, Daemon
from tests.waits import routed, wait_until

QUEUES = 4
BODY = b"t" * 100


def percentile(values: list[int], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Lateness:
    delivered: int
    p50_ms: int
    p99_ms: int
    max_ms: int
    early: int  # delivered before their time (must be 0)

    @classmethod
    def of(cls, late_ms: list[int]) -> Lateness:
        return cls(len(late_ms), percentile(late_ms, 0.5), percentile(late_ms, 0.99),
                   max(late_ms, default=0), sum(1 for x in late_ms if x < 0))


@dataclass
class Figures:
    spread: dict[str, Any] = field(default_factory=dict)
    burst: dict[str, Any] = field(default_factory=dict)
    recovery: dict[str, Any] = field(default_factory=dict)


async def make_topic(ns: Daemon, broker: Daemon, topic: str) -> list[MessageQueue]:
    async with MQAdmin(ns.addr) as admin:
        await admin.create_topic(topic, broker_addr=broker.addr, read_queue_nums=QUEUES,
                                 write_queue_nums=QUEUES)
        await wait_until(routed(admin, topic), 10, "topic routed")
    return [MessageQueue(topic, "broker-a", q) for q in range(QUEUES)]


async def send_timers(producer: Producer, topic: str, dues: list[int], senders: int
                      ) -> tuple[float, set[str]]:
    """Send one timer message per due time (its key: its index); (seconds taken,
    the keys of those sent after their due time)."""
    late: set[str] = set()
    next_i = 0
    t0 = time.perf_counter()

    async def one() -> None:
        nonlocal next_i
        while next_i < len(dues):
            i = next_i
            next_i += 1
            m = Message(topic, BODY, keys=str(i))
            m.deliver_time_ms = dues[i]
            await producer.send(m)
            if int(time.time() * 1000) >= dues[i]:
                late.add(str(i))

    async with trio.open_nursery() as nursery:
        for _ in range(senders):
            nursery.start_soon(one)
    return time.perf_counter() - t0, late


async def plain_sends(producer: Producer, topic: str, seconds: float, senders: int) -> int:
    done = 0
    stop = trio.current_time() + seconds

    async def one() -> None:
        nonlocal done
        while trio.current_time() < stop:
            await producer.send(Message(topic, BODY))
            done += 1

    async with trio.open_nursery() as nursery:
        for _ in range(senders):
            nursery.start_soon(one)
    return done


async def lateness_of(ns: Daemon, queues: list[MessageQueue], sent_late: set[str]
                      ) -> tuple[list[int], int, int]:
    """(lateness ms of each delivered timer message not sent late, first store
    time, last store time)."""
    late: list[int] = []
    first, last = 2**63, 0
    async with PullConsumer("bench-timer-reader", ns.addr) as consumer:
        async def one(mq: MessageQueue) -> None:
            nonlocal first, last
            offset = 0
            while True:
                r = await consumer.pull(mq, "*", offset, 256)
                if r.pull_status is not PullStatus.FOUND:
                    return
                for m in r.msg_found_list:
                    due = m.properties.get("TIMER_OUT_MS")
                    if due is None or m.keys in sent_late:
                        continue
                    late.append(m.store_timestamp - int(due))
                    first = min(first, m.store_timestamp)
                    last = max(last, m.store_timestamp)
                offset = r.next_begin_offset

        async with trio.open_nursery() as nursery:
            for mq in queues:
                nursery.start_soon(one, mq)
    return late, first, last


async def status(broker: Daemon) -> dict[str, int]:
    async with MQAdmin(broker.addr) as admin:
        info = await admin.broker_runtime_info(broker.addr)
    return {k: int(v) for k, v in info.items()
            if k.startswith("timer") and str(v).lstrip("-").isdigit()}


async def wait_delivered(broker: Daemon, limit_s: float) -> None:
    async def quiet() -> bool:
        return (await status(broker)).get("timerPendingCount", 1) == 0
    await wait_until(quiet, limit_s, "every timer delivered", interval=0.5)


async def phase_spread(ns: Daemon, broker: Daemon, producer: Producer, count: int,
                       spread_s: float, lead_s: float, senders: int) -> dict[str, Any]:
    queues = await make_topic(ns, broker, "BenchTimerSpread")
    start = int(time.time() * 1000 + lead_s * 1000)
    dues = [start + int(spread_s * 1000 * i / count) for i in range(count)]
    send_s, sent_late = await send_timers(producer, queues[0].topic, dues, senders)
    await wait_delivered(broker, spread_s + lead_s + 120)
    late, _, _ = await lateness_of(ns, queues, sent_late)
    out = {"count": count, "spread_s": spread_s, "send_s": round(send_s, 1),
           "send_per_s": round(count / send_s), "sent_late": len(sent_late),
           **Lateness.of(late).__dict__}
    click.echo(f"spread: {out}")
    return out


async def phase_burst(ns: Daemon, broker: Daemon, producer: Producer, count: int,
                      lead_s: float, probe_s: float, senders: int) -> dict[str, Any]:
    queues = await make_topic(ns, broker, "BenchTimerBurst")
    plain_topic = (await make_topic(ns, broker, "BenchTimerPlain"))[0].topic
    baseline = await plain_sends(producer, plain_topic, probe_s, senders)
    due_s = int(time.time() + lead_s) + 1
    dues = [due_s * 1000] * count
    send_s, sent_late = await send_timers(producer, queues[0].topic, dues, senders)
    wait = due_s - time.time()
    if wait > 0:
        await trio.sleep(wait)
    during = await plain_sends(producer, plain_topic, probe_s, senders)
    await wait_delivered(broker, 600)
    late, first, last = await lateness_of(ns, queues, sent_late)
    out = {"count": count, "send_s": round(send_s, 1), "send_per_s": round(count / send_s),
           "sent_late": len(sent_late), **Lateness.of(late).__dict__,
           "delivery_s": round((last - first) / 1000, 2) if late else 0,
           "plain_sends_per_s_before": round(baseline / probe_s),
           "plain_sends_per_s_during": round(during / probe_s)}
    click.echo(f"burst: {out}")
    return out


async def phase_recovery(ns: Daemon, broker: Daemon, count: int, senders: int
                         ) -> dict[str, Any]:
    queues = await make_topic(ns, broker, "BenchTimerRecovery")
    async with Producer("bench-timer-recovery", ns.addr) as producer:
        due = int(time.time() * 1000) + 3_600_000
        send_s, _ = await send_timers(producer, queues[0].topic, [due] * count, senders)

    async def in_wheel() -> bool:
        return (await status(broker)).get("timerEnqueueBacklog", 1) == 0
    await wait_until(in_wheel, 600, "all in the wheel", interval=0.5)
    before = (await status(broker))["timerPendingCount"]
    broker.kill()
    t0 = time.perf_counter()
    broker.start(timeout=600)
    ready_s = time.perf_counter() - t0
    await wait_until(in_wheel, 600, "all in the wheel again", interval=0.1)
    caught_up_s = time.perf_counter() - t0
    after = (await status(broker))["timerPendingCount"]
    loaded = re.findall(r"timer wheel loaded.*?seconds=([0-9.]+)", broker.log_text())
    out = {"count": count, "send_s": round(send_s, 1), "pending_before": before,
           "pending_after": after, "ready_s": round(ready_s, 2),
           "replay_s": float(loaded[-1]) if loaded else None,
           "caught_up_s": round(caught_up_s, 2)}
    click.echo(f"recovery: {out}")
    return out


async def bench(spread_count: int, spread_s: float, burst_count: int, recovery_count: int,
                senders: int, lead_s: float | None, probe_s: float) -> Figures:
    figures = Figures()
    with tempfile.TemporaryDirectory(prefix="bench-timer-") as tmp:
        cluster = Cluster(Path(tmp))
        try:
            ns = cluster.namesrv()
            broker = cluster.broker("broker-a", ns.addr,
                                    mapedFileSizeCommitLog=256 * 1024 * 1024,
                                    mapedFileSizeConsumeQueue=300_000 * 20)
            async with Producer("bench-timer", ns.addr) as producer:
                # the send rate, to give each phase the lead it needs to send all first
                probe_topic = (await make_topic(ns, broker, "BenchTimerProbe"))[0].topic
                t0 = time.perf_counter()
                n = await plain_sends(producer, probe_topic, 2.0, senders)
                rate = n / (time.perf_counter() - t0)
                click.echo(f"plain send rate ~{rate:.0f}/s with {senders} senders")

                def lead(count: int) -> float:
                    return lead_s if lead_s is not None else count / rate * 1.5 + 5

                if spread_count:
                    figures.spread = await phase_spread(ns, broker, producer, spread_count,
                                                        spread_s, lead(spread_count), senders)
                if burst_count:
                    figures.burst = await phase_burst(ns, broker, producer, burst_count,
                                                      lead(burst_count), probe_s, senders)
            if recovery_count:
                figures.recovery = await phase_recovery(ns, broker, recovery_count, senders)
        finally:
            cluster.close()
    return figures


@click.command()
@click.option("--spread-count", default=100_000, show_default=True)
@click.option("--spread-s", default=60.0, show_default=True)
@click.option("--burst-count", default=1_000_000, show_default=True)
@click.option("--recovery-count", default=1_000_000, show_default=True)
@click.option("--senders", default=64, show_default=True, help="concurrent send tasks")
@click.option("--lead-s", type=float, default=None,
              help="seconds from the first send to the first due time (default: from the "
                   "measured send rate)")
@click.option("--probe-s", default=5.0, show_default=True,
              help="seconds of plain sends before and during the burst")
def main(spread_count: int, spread_s: float, burst_count: int, recovery_count: int,
         senders: int, lead_s: float | None, probe_s: float) -> None:
    figures = trio.run(bench, spread_count, spread_s, burst_count, recovery_count, senders,
                       lead_s, probe_s)
    click.echo(json.dumps({"timer": figures.__dict__}))


if __name__ == "__main__":
    main()
