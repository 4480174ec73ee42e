"""The chaos checker's run: a replica group, producers and push consumers,
the faults of a schedule one at a time, a drain, then the accounting.

Producers (of our SDK, and with ``official_producers`` of the official C++
client in child processes, bench/chaos/official.py) record every SEND_OK to
``acked.jsonl``, consumers every delivery to ``delivered.jsonl``, the schedule
every fault to ``faults.jsonl`` (all in the run's directory); the report is computed from those files
(bench/chaos/accounting.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import structlog
import trio

from bench.chaos.accounting import (
    OURS,
    FaultRecord,
    Record,
    Report,
    Step,
    account,
    body,
    parse_body,
    read_faults,
    read_records,
    schedule_seconds,
)
from bench.chaos.controller_group import ControllerGroup
from bench.chaos.group import CONTROLLER, Group, GroupConfig, ReplicaGroup, make_fault
from bench.chaos.official import OfficialProducer, OfficialSend
from bench.chaos.proxy import Mode
from client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendStatus,
)
from client.admin import MQAdmin
from client.instance import DEFAULT_POLL_NAME_SERVER_INTERVAL
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPIC = "ChaosTopic"
GROUP = "chaos-consumers"
SETUP_TIMEOUT = 120.0  # the group up, the topic routed


@dataclass
class RunConfig:
    steps: list[Step]
    calm: float = 5.0  # seconds of no fault before each fault and after the last
    producers: int = 4  # of our SDK
    # of the official RocketMQ 4.x client (C++), each in a child process, at the same
    # per-producer rate as ours
    official_producers: int = 0
    rate: float = 200.0  # messages per second, all producers (both kinds) together
    max_messages: int = 1_000_000  # most sends in the whole run
    send_timeout: float = 3.0
    consumers: int = 2
    queues: int = 4
    drain: float = 60.0  # most seconds to wait, after the load, for every SEND_OK to be delivered
    partition_mode: Mode = Mode.BLACKHOLE
    group: GroupConfig = field(default_factory=GroupConfig)
    # clients' route refresh (pollNameServerInterval), seconds; None: the SDK's default.
    # In controller mode the master moves: producers find it on the next refresh
    poll_interval: float | None = None


class Recorder:
    """Appends records to a file, one JSON line each, flushed at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f: IO[str] = path.open("a")

    def write(self, line: str) -> None:
        self._f.write(line + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class Checker:
    """One run: ``report = await Checker(root, config).run()``; the record files
    and the daemons' stores and logs are left in ``root``."""

    def __init__(self, root: Path, config: RunConfig, cluster: Cluster | None = None) -> None:
        self.root, self.config = root, config
        self.group: Group = (ControllerGroup(root, config.group, cluster)
                             if config.group.mode == CONTROLLER
                             else ReplicaGroup(root, config.group, cluster))
        self.t0 = time.monotonic()
        self.acked = Recorder(root / "acked.jsonl")
        self.delivered = Recorder(root / "delivered.jsonl")
        self.faults = Recorder(root / "faults.jsonl")
        self.acked_ids: set[str] = set()
        self.delivered_ids: set[str] = set()
        self.send_errors: dict[str, int] = {}
        self.sent = 0  # sends of our producers
        total = config.producers + config.official_producers
        # max_messages split: each official producer its share, ours the rest together
        self.official_max = max(1, config.max_messages // total)
        self.ours_max = max(0, config.max_messages - config.official_producers
                            * self.official_max)
        self.official: list[OfficialProducer] = []
        self.load_end = 0.0
        self.bound = SETUP_TIMEOUT + schedule_seconds(config.steps, config.calm) \
            + 60 * len(config.steps) + config.drain + 60
        self.log = structlog.get_logger("chaos")

    def now(self) -> float:
        return time.monotonic() - self.t0

    # ---- load -------------------------------------------------------------------------

    async def _produce(self, k: int, stop: trio.Event) -> None:
        cfg = self.config
        step = self._interval()
        p = Producer(f"chaos-producer-{k}", self.group.namesrv_addr,
                     send_msg_timeout=cfg.send_timeout, poll_name_server_interval=self._poll())
        await p.start()
        try:
            nxt = trio.current_time()
            seq = 0
            while not stop.is_set() and self.sent < self.ours_max:
                self.sent += 1
                mid = f"p{k}-{seq}"
                seq += 1
                begun = self.now()
                try:
                    r = await p.send(Message(TOPIC, body(mid, begun), keys=mid))
                except Exception as exc:  # every failure is counted, none ends the load
                    name = type(exc).__name__
                    self.send_errors[name] = self.send_errors.get(name, 0) + 1
                else:
                    if r.send_status is SendStatus.SEND_OK:
                        mq = r.message_queue
                        self.acked.write(Record(self.now(), mid, f"{mq.broker_name}:{mq.queue_id}",
                                                r.queue_offset, begun, OURS).to_json())
                        self.acked_ids.add(mid)
                    else:
                        name = r.send_status.value
                        self.send_errors[name] = self.send_errors.get(name, 0) + 1
                nxt += step
                now = trio.current_time()
                if nxt > now:
                    with trio.move_on_at(nxt):
                        await stop.wait()
                else:
                    nxt = now  # behind (a fault): no burst to catch up
        finally:
            await p.shutdown()

    def _interval(self) -> float:
        """Seconds between one producer's sends: its share of the rate."""
        cfg = self.config
        return (cfg.producers + cfg.official_producers) / cfg.rate

    def _official_send(self, send: OfficialSend) -> None:
        if send.acknowledged:
            self.acked.write(send.record().to_json())
            self.acked_ids.add(send.id)
        else:
            name = f"official {send.outcome()}"
            self.send_errors[name] = self.send_errors.get(name, 0) + 1

    def _official_producer(self, k: int) -> OfficialProducer:
        cfg = self.config
        return OfficialProducer(k, self.group.namesrv_addr, TOPIC, self.root,
                                interval=self._interval(), t0=self.t0,
                                max_messages=self.official_max, send_timeout=cfg.send_timeout,
                                timeout=self.bound + 60, on_send=self._official_send)

    @property
    def official_failures(self) -> list[str]:
        """Official producers that ended badly: ``"o0: exited with status 1 ..."``."""
        return [f"{p.name}: {p.failure}" for p in self.official if p.failure]

    def _poll(self) -> float:
        p = self.config.poll_interval
        return DEFAULT_POLL_NAME_SERVER_INTERVAL if p is None else p

    def _consumer(self, k: int) -> PushConsumer:
        c = PushConsumer(GROUP, self.group.namesrv_addr, instance_name=f"chaos-c{k}",
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                         poll_name_server_interval=self._poll())
        c.subscribe(TOPIC, "*")

        def listener(msgs: list[MessageExt],
                     ctx: ConsumeConcurrentlyContext | ConsumeOrderlyContext
                     ) -> ConsumeConcurrentlyStatus:
            mq = ctx.message_queue
            for m in msgs:
                mid, begun = parse_body(m.body)
                self.delivered.write(Record(self.now(), mid, f"{mq.broker_name}:{mq.queue_id}",
                                            m.queue_offset, begun).to_json())
                self.delivered_ids.add(mid)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c.register_message_listener(listener)
        return c

    # ---- schedule ---------------------------------------------------------------------

    async def _schedule(self) -> None:
        cfg = self.config
        await trio.sleep(cfg.calm)
        for step in cfg.steps:
            fault = make_fault(step.fault, self.group, cfg.partition_mode)
            rec = FaultRecord(step.fault, self.now())
            self.log.info("fault inject", fault=step.fault, seconds=step.seconds)
            try:
                await fault.inject()
                rec.injected = True
                await trio.sleep(step.seconds)
                await fault.heal()
                rec.healed = True
            except Exception as exc:
                rec.error = f"{type(exc).__name__}: {exc}"
                self.log.error("fault failed", fault=step.fault, error=rec.error)
            rec.healed_at = self.now()
            self.faults.write(rec.to_json())
            if rec.error is not None:
                return  # the group is in an unknown state: no more faults
            self.log.info("fault healed", fault=step.fault)
            await trio.sleep(cfg.calm)

    async def run(self) -> Report:
        try:
            with trio.fail_after(self.bound):
                async with trio.open_nursery() as nursery:
                    try:
                        await self._run(nursery)
                    finally:
                        # stopped while the proxies run: the master unregisters through them
                        with trio.CancelScope(shield=True):
                            await trio.to_thread.run_sync(self.group.close)
                    nursery.cancel_scope.cancel()  # the proxies
        finally:
            for r in (self.acked, self.delivered, self.faults):
                r.close()
        return account(read_records(self.root / "acked.jsonl"),
                       read_records(self.root / "delivered.jsonl"),
                       read_faults(self.root / "faults.jsonl"), self.load_end)

    async def _run(self, nursery: trio.Nursery) -> None:
        cfg = self.config
        with trio.fail_after(SETUP_TIMEOUT):
            await nursery.start(self.group.run)
            async with MQAdmin(self.group.namesrv_addr) as admin:
                await admin.create_topic(TOPIC, broker_addr=self.group.master_addr,
                                         read_queue_nums=cfg.queues, write_queue_nums=cfg.queues)
                await wait_until(routed(admin, TOPIC), SETUP_TIMEOUT, "the topic routed")
            await self.group.topic_ready(TOPIC)
        consumers = [self._consumer(k) for k in range(cfg.consumers)]
        for c in consumers:
            await c.start()
        stop = trio.Event()
        try:
            async with trio.open_nursery() as load:
                self.official = [self._official_producer(k)
                                 for k in range(cfg.official_producers)]
                for op in self.official:  # each returns once its child's producer started
                    await load.start(op.run, stop)
                for k in range(cfg.producers):
                    load.start_soon(self._produce, k, stop)
                await self._schedule()
                stop.set()
            self.load_end = self.now()
            self.log.info("load stopped", sent=self.sent + sum(p.sends for p in self.official),
                          acked=len(self.acked_ids), errors=self.send_errors)
            try:
                await wait_until(lambda: self.acked_ids <= self.delivered_ids, cfg.drain,
                                 "every acknowledged message delivered")
            except AssertionError:  # the report says what is missing
                self.log.warning("drain ended with acknowledged messages undelivered",
                                 missing=len(self.acked_ids - self.delivered_ids))
        finally:
            for c in consumers:
                with trio.move_on_after(15) as cs:
                    cs.shield = True
                    await c.shutdown()
