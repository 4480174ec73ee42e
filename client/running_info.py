"""A consumer's running info (RocketMQ's ConsumerRunningInfo): what GET_CONSUMER_RUNNING_INFO
answers and ``mqadmin consumerStatus`` prints.

The body (a map, in the connection's codec) holds ``properties`` (str -> str: the
consumer's settings and RocketMQ's ``PROP_*`` keys), ``subscriptionSet`` (a list of
subscriptions), ``mqTable`` (a list of the queues the consumer holds, each a
MessageQueue's fields plus its ProcessQueueInfo's), ``statusTable`` (topic -> pull and
consume figures, client/consume_stats.py) and, when asked, ``jstack`` (the process's
threads and trio tasks). RocketMQ's ``mqTable`` is a map keyed by MessageQueue objects,
which JSON cannot key; here it is a list of entries.

Pure: ``process_queue_info`` takes the clocks; the admin side (``RunningInfo``,
``format_running_info``, the ``analyze_*`` checks) takes the body and ``now_ms``.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import trio

from client.process_queue import ProcessQueue
from protocol.message import MessageQueue

PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"
CONSUME_PASSIVELY = "CONSUME_PASSIVELY"

# RocketMQ's thresholds: a push group started this long ago must have one
# subscription; a queue holding messages not consumed for this long is reported
SUBSCRIPTION_CHECK_AFTER_MS = 2 * 60 * 1000
BLOCKED_AFTER_MS = 60 * 1000
# a jstack answer is cut here (what the broker relays stays small)
JSTACK_MAX_CHARS = 256 * 1024
MiB = 1024 * 1024

_PQ_FIELDS = ("commitOffset", "cachedMsgMinOffset", "cachedMsgMaxOffset", "cachedMsgCount",
              "cachedMsgSizeInMiB", "transactionMsgMinOffset", "transactionMsgMaxOffset",
              "transactionMsgCount", "locked", "tryUnlockTimes", "lastLockTimestamp",
              "droped", "lastPullTimestamp", "lastConsumeTimestamp")


def client_version() -> str:
    try:
        from importlib.metadata import version

        return f"trio-rocketmq {version('trio-rocketmq')}"
    except Exception:  # a checkout on sys.path, not installed
        return "trio-rocketmq 0+unknown"


def _wall_ms(t: float, now: float, now_ms: int) -> int:
    """A trio-clock time as wall-clock ms (0: never)."""
    return int(now_ms - (now - t) * 1000) if t > 0 else 0


def process_queue_info(pq: ProcessQueue, commit_offset: int, now: float,
                       now_ms: int) -> dict[str, Any]:
    """RocketMQ's ProcessQueueInfo of ``pq``; ``now`` is the trio clock its times
    are on, ``now_ms`` the wall clock they are shown in."""
    cached = list(pq.msgs) + list(pq.consuming)
    return {
        "commitOffset": commit_offset,
        "cachedMsgMinOffset": min(cached) if cached else 0,
        "cachedMsgMaxOffset": max(cached) if cached else 0,
        "cachedMsgCount": pq.msg_count,
        "cachedMsgSizeInMiB": pq.msg_size // MiB,
        "transactionMsgMinOffset": min(pq.consuming) if pq.consuming else 0,
        "transactionMsgMaxOffset": max(pq.consuming) if pq.consuming else 0,
        "transactionMsgCount": len(pq.consuming),
        "locked": pq.locked,
        "tryUnlockTimes": 0,
        "lastLockTimestamp": _wall_ms(pq.last_lock_time, now, now_ms),
        "droped": pq.dropped,
        "lastPullTimestamp": _wall_ms(pq.last_pull_time, now, now_ms),
        "lastConsumeTimestamp": _wall_ms(pq.last_consume_time, now, now_ms),
    }


def mq_entry(mq: MessageQueue, info: dict[str, Any]) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, **info}


def stacks() -> str:
    """jstack's answer here: every thread's stack, then every trio task's (what each
    awaits), cut at JSTACK_MAX_CHARS."""
    out: list[str] = []
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        out.append(f'"{names.get(ident, "?")}" (thread {ident})\n')
        out.extend(traceback.format_stack(frame))
        out.append("\n")
    try:
        root = trio.lowlevel.current_root_task()
    except RuntimeError:
        root = None
    if root is not None:
        out.append("trio tasks:\n")
        _task_lines(root, 0, out)
    text = "".join(out)
    if len(text) > JSTACK_MAX_CHARS:
        text = text[:JSTACK_MAX_CHARS] + "\n... (cut)\n"
    return text


def _task_lines(task: trio.lowlevel.Task, depth: int, out: list[str]) -> None:
    frame = getattr(task.coro, "cr_frame", None)
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "-"
    out.append(f"{'  ' * depth}{task.name} at {where}\n")
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            _task_lines(child, depth + 1, out)


# ---- the admin's side --------------------------------------------------------


class RunningInfoError(ValueError):
    """A running-info body that is not one (another client's format?)."""


@dataclass(slots=True)
class RunningInfo:
    properties: dict[str, str] = field(default_factory=dict)
    subscriptions: list[dict[str, Any]] = field(default_factory=list)
    queues: list[tuple[MessageQueue, dict[str, Any]]] = field(default_factory=list)
    status: dict[str, dict[str, Any]] = field(default_factory=dict)
    jstack: str | None = None

    @classmethod
    def from_body(cls, body: Any) -> RunningInfo:
        """RunningInfoError when ``body`` is not a running-info map."""
        if not isinstance(body, dict):
            raise RunningInfoError("the running info is not a map")
        props = body.get("properties") or {}
        subs = body.get("subscriptionSet") or []
        table = body.get("mqTable") or []
        status = body.get("statusTable") or {}
        if not (isinstance(props, dict) and isinstance(subs, list) and isinstance(table, list)
                and isinstance(status, dict)):
            raise RunningInfoError("the running info's properties, subscriptionSet, mqTable "
                                   "or statusTable has the wrong type")
        queues = []
        for e in table:
            if not isinstance(e, dict):
                raise RunningInfoError("an mqTable entry is not a map")
            try:
                mq = MessageQueue(str(e["topic"]), str(e["brokerName"]), int(e["queueId"]))
            except (KeyError, TypeError, ValueError) as exc:
                raise RunningInfoError(f"an mqTable entry lacks its queue: {exc}") from None
            queues.append((mq, {k: e.get(k) for k in _PQ_FIELDS}))
        jstack = body.get("jstack")
        return cls({str(k): str(v) for k, v in props.items()},
                   [s for s in subs if isinstance(s, dict)], sorted(queues, key=lambda q: q[0]),
                   {str(t): s for t, s in status.items() if isinstance(s, dict)},
                   jstack if isinstance(jstack, str) else None)

    def to_dict(self) -> dict[str, Any]:
        return {"properties": self.properties, "subscriptionSet": self.subscriptions,
                "mqTable": [mq_entry(mq, pq) for mq, pq in self.queues],
                "statusTable": self.status, **({"jstack": self.jstack} if self.jstack else {})}

    @property
    def push(self) -> bool:
        return self.properties.get(PROP_CONSUME_TYPE) == CONSUME_PASSIVELY

    @property
    def orderly(self) -> bool:
        return self.properties.get(PROP_CONSUME_ORDERLY, "").lower() == "true"


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _pq_text(pq: dict[str, Any]) -> str:
    inner = ", ".join(f"{k}={str(pq.get(k)).lower() if isinstance(pq.get(k), bool) else pq.get(k)}"
                      for k in _PQ_FIELDS)
    return f"ProcessQueueInfo [{inner}]"


def format_running_info(info: RunningInfo) -> str:
    """RocketMQ's ConsumerRunningInfo.formatString (its sections and columns)."""
    lines = ["#Consumer Properties#"]
    lines += [f"{k:<40}: {v}" for k, v in sorted(info.properties.items())]
    lines += ["", "", "#Consumer Subscription#"]
    for i, s in enumerate(sorted(info.subscriptions, key=lambda s: str(s.get("topic"))), 1):
        lines.append(f"{i:03d} Topic: {str(s.get('topic')):<40} ClassFilter: "
                     f"{str(bool(s.get('classFilterMode'))).lower():<8} SubExpression: "
                     f"{s.get('subString', '*')}")
    lines += ["", "", "#Consumer Offset#",
              f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Consumer Offset':<20}"]
    lines += [f"{mq.topic:<32}  {mq.broker_name:<32}  {mq.queue_id:<4}  "
              f"{pq.get('commitOffset')!s:<20}" for mq, pq in info.queues]
    lines += ["", "", "#Consumer MQ Detail#",
              f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#ProcessQueueInfo':<20}"]
    lines += [f"{mq.topic:<64}  {mq.broker_name:<32}  {mq.queue_id:<4}  {_pq_text(pq)}"
              for mq, pq in info.queues]
    lines += ["", "", "#Consumer RT&TPS#",
              f"{'#Topic':<64}  {'#Pull RT':>14} {'#Pull TPS':>14} {'#Consume RT':>14} "
              f"{'#ConsumeOK TPS':>14} {'#ConsumeFailed TPS':>18} {'#ConsumeFailedMsgsInHour':>25}"]
    for topic, s in sorted(info.status.items()):
        lines.append(f"{topic:<32}  {_num(s.get('pullRT')):14.2f} {_num(s.get('pullTPS')):14.2f} "
                     f"{_num(s.get('consumeRT')):14.2f} {_num(s.get('consumeOKTPS')):14.2f} "
                     f"{_num(s.get('consumeFailedTPS')):18.2f} "
                     f"{int(_num(s.get('consumeFailedMsgs'))):25d}")
    if info.jstack:
        lines += ["", "", "#Consumer jstack#", info.jstack.rstrip("\n")]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _sub_key(subs: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(str(s.get("topic")), str(s.get("subString", "*"))) for s in subs}


def analyze_subscription(infos: dict[str, RunningInfo], now_ms: int) -> bool:
    """RocketMQ's analyzeSubscription: False when push consumers of the group,
    started more than two minutes ago, differ in their subscriptions (or have
    none)."""
    if not infos:
        return True
    first = infos[min(infos)]
    try:
        started = int(first.properties.get(PROP_CONSUMER_START_TIMESTAMP, "0"))
    except ValueError:
        started = 0
    if not first.push or now_ms - started <= SUBSCRIPTION_CHECK_AFTER_MS:
        return True
    expected = _sub_key(first.subscriptions)
    return bool(expected) and all(_sub_key(i.subscriptions) == expected for i in infos.values())


def analyze_process_queue(client_id: str, info: RunningInfo, now_ms: int) -> list[str]:
    """RocketMQ's analyzeProcessQueue: a push consumer's queues that look stuck
    (orderly: not locked; concurrently: messages cached and nothing consumed for
    a minute)."""
    if not info.push:
        return []
    out = []
    for mq, pq in info.queues:
        if info.orderly:
            if not pq.get("locked"):
                since = now_ms - int(_num(pq.get("lastLockTimestamp")))
                out.append(f"{client_id} {mq} can't lock for a while, {since}ms")
            elif pq.get("droped") and _num(pq.get("tryUnlockTimes")) > 0:
                out.append(f"{client_id} {mq} unlock {int(_num(pq.get('tryUnlockTimes')))} "
                           "times, still failed")
        else:
            # never consumed: since its first messages came (RocketMQ starts the clock
            # when it takes the queue)
            last = int(_num(pq.get("lastConsumeTimestamp")) or _num(pq.get("lastPullTimestamp")))
            diff = now_ms - last
            if last and diff > BLOCKED_AFTER_MS and _num(pq.get("cachedMsgCount")) > 0:
                out.append(f"{client_id} {mq} can't consume for a while, maybe blocked, {diff}ms")
    return out
