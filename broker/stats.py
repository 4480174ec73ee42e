"""BrokerStats: RocketMQ's BrokerStatsManager in small (pure: times passed in).

What is counted, per request, never per message (the hot path pays one dict
look-up and a few integer adds):

- per topic: messages put, bytes put (``wroteBytes``), put requests
  (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE), on every successful put;
- per (topic, group): messages and bytes a pull returned, pulls that returned
  messages (GROUP_GET_NUMS, GROUP_GET_SIZE; a retry topic counts under its
  group, key ``%RETRY%g@g``, as RocketMQ's);
- broker-wide: the same totals (BROKER_PUT_NUMS, BROKER_GET_NUMS).

Each counter is a running sum. Windows (the last minute, hour and day) come
from snapshots ``tick(now)`` takes (the broker: every 10 s): a key's sample is
appended only when it changed since the last tick, and samples are kept only
where a window can start, so an idle key holds one sample and a busy one at
most a few hundred. A window's figures follow RocketMQ's StatsItem: between
the oldest and newest tick of the window, ``sum`` is the value's increase,
``tps`` the increase per second and ``avgpt`` the increase per request
(messages per put for *_NUMS, bytes per put for *_SIZE).

Memory follows the broker's tables: a put is counted only for a topic that
exists, a get only for a topic and group that exist; ``drop_topic`` and
``drop_group`` forget the keys of deleted ones.

``LatencyHistogram`` is a fixed-bucket histogram for put and flush latency:
``observe`` is a bisect and two adds; the metrics collector reads it.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Any

TICK_INTERVAL_S = 10.0

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
STATS_NAMES = (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, GROUP_GET_NUMS, GROUP_GET_SIZE,
               BROKER_PUT_NUMS, BROKER_GET_NUMS)

# window name -> (length in seconds, spacing of the ticks it starts on)
WINDOWS: dict[str, tuple[float, float]] = {
    "statsMinute": (60.0, 0.0),  # every tick
    "statsHour": (3600.0, 60.0),  # one tick a minute
    "statsDay": (86400.0, 3600.0),  # one tick an hour
}

# counter layout: [messages, bytes, requests, requests at the last tick]
MSGS, BYTES, REQS, SAMPLED = 0, 1, 2, 3

Sample = tuple[float, int, int, int]  # time, messages, bytes, requests


def _new_counter() -> list[int]:
    return [0, 0, 0, 0]


@dataclass(slots=True)
class StatsSnapshot:
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0

    def to_wire(self) -> dict[str, Any]:
        return {"sum": self.sum, "tps": self.tps, "avgpt": self.avgpt}


class _Ring:
    """The tick times one window can start and end on: the newest ticks
    spanning the window, plus the one before (RocketMQ's csList)."""

    def __init__(self, length: float, spacing: float) -> None:
        self.length = length
        self.spacing = spacing
        self.times: deque[float] = deque()

    def add(self, now: float) -> None:
        if self.times and now - self.times[-1] < self.spacing:
            return
        self.times.append(now)
        while len(self.times) > 2 and self.times[1] <= now - self.length:
            self.times.popleft()


class BrokerStats:
    def __init__(self, broker_name: str, now: float) -> None:
        self.broker_name = broker_name
        self.put: dict[str, list[int]] = {}
        self.get: dict[tuple[str, str], list[int]] = {}
        self.put_total = _new_counter()
        self.get_total = _new_counter()
        # ACL refusals per (request code, reason): plain ACL's guard counts them
        self.acl_refusals: dict[tuple[int, str], int] = {}
        # key -> samples, oldest first; keys: topic, (topic, group), BROKER_PUT/GET_NUMS
        self._samples: dict[Any, list[Sample]] = {}
        self._rings = {name: _Ring(length, spacing) for name, (length, spacing) in WINDOWS.items()}
        self.last_tick = now
        self._tick_keep_all(now)

    # ---- the hot path ------------------------------------------------------------

    def record_put(self, topic: str, messages: int, size: int) -> None:
        c = self.put.get(topic)
        if c is None:
            c = self.put[topic] = _new_counter()
        c[MSGS] += messages
        c[BYTES] += size
        c[REQS] += 1
        t = self.put_total
        t[MSGS] += messages
        t[BYTES] += size
        t[REQS] += 1

    def record_acl_refusal(self, code: int, reason: str) -> None:
        """A request the ACL refused; codes are the served ones, reasons a few
        (acl/plain.py REFUSAL_REASONS), so the keys stay few."""
        key = (code, reason)
        self.acl_refusals[key] = self.acl_refusals.get(key, 0) + 1

    def record_get(self, topic: str, group: str, messages: int, size: int) -> None:
        key = (topic, group)
        c = self.get.get(key)
        if c is None:
            c = self.get[key] = _new_counter()
        c[MSGS] += messages
        c[BYTES] += size
        c[REQS] += 1
        t = self.get_total
        t[MSGS] += messages
        t[BYTES] += size
        t[REQS] += 1

    # ---- bounds ------------------------------------------------------------------

    def drop_topic(self, topic: str) -> None:
        """A deleted topic: forget its put stats and its groups' get stats."""
        self.put.pop(topic, None)
        self._samples.pop(("put", topic), None)
        for key in [k for k in self.get if k[0] == topic]:
            del self.get[key]
            self._samples.pop(("get", key), None)

    def drop_group(self, group: str) -> None:
        for key in [k for k in self.get if k[1] == group]:
            del self.get[key]
            self._samples.pop(("get", key), None)

    # ---- snapshots ---------------------------------------------------------------

    def _tick_keep_all(self, now: float) -> None:
        for ring in self._rings.values():
            ring.add(now)

    def tick(self, now: float) -> None:
        """Take a snapshot: a sample of each counter changed since the last tick."""
        prev = self.last_tick
        self.last_tick = now
        self._tick_keep_all(now)
        keep = self._keep_times()
        items: list[tuple[Any, list[int]]] = [(("total", "put"), self.put_total),
                                              (("total", "get"), self.get_total)]
        items += [(("put", t), c) for t, c in self.put.items()]
        items += [(("get", k), c) for k, c in self.get.items()]
        for skey, c in items:
            if c[REQS] == c[SAMPLED]:
                continue
            samples = self._samples.get(skey)
            if samples is None:
                # born since the last tick: it was all zero then
                samples = self._samples[skey] = [(prev, 0, 0, 0)]
            c[SAMPLED] = c[REQS]
            samples.append((now, c[MSGS], c[BYTES], c[REQS]))
            if len(samples) > 2 * len(keep) + 8:
                self._samples[skey] = _prune(samples, keep)

    def _keep_times(self) -> list[float]:
        times: set[float] = set()
        for ring in self._rings.values():
            times.update(ring.times)
        return sorted(times)

    # ---- reading -----------------------------------------------------------------

    @staticmethod
    def _value_at(samples: list[Sample] | None, t: float) -> Sample:
        """The counter as it was at tick ``t`` (the latest sample at or before it)."""
        if not samples:
            return (t, 0, 0, 0)
        i = bisect.bisect_right(samples, (t, float("inf"), 0, 0)) - 1
        if i < 0:
            return (t, 0, 0, 0)
        return samples[i]

    def _windows(self, skey: Any, field: int) -> dict[str, StatsSnapshot]:
        samples = self._samples.get(skey)
        out = {}
        for name, ring in self._rings.items():
            snap = StatsSnapshot()
            if len(ring.times) >= 2:
                first_t, last_t = ring.times[0], ring.times[-1]
                first = self._value_at(samples, first_t)
                last = self._value_at(samples, last_t)
                snap.sum = int(last[field] - first[field])
                snap.tps = snap.sum / (last_t - first_t) if last_t > first_t else 0.0
                times = last[REQS + 1] - first[REQS + 1]
                snap.avgpt = snap.sum / times if times > 0 else 0.0
            out[name] = snap
        return out

    def stats(self, name: str, key: str) -> dict[str, StatsSnapshot] | None:
        """VIEW_BROKER_STATS_DATA: the windows of ``name`` for ``key`` (a topic,
        "topic@group" or the broker's name); None when there is no such item."""
        field = BYTES + 1 if name.endswith("_SIZE") else MSGS + 1
        skey: Any
        if name in (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE):
            if key not in self.put:
                return None
            skey = ("put", key)
        elif name in (GROUP_GET_NUMS, GROUP_GET_SIZE):
            topic, sep, group = key.rpartition("@")
            if not sep or (topic, group) not in self.get:
                return None
            skey = ("get", (topic, group))
        elif name in (BROKER_PUT_NUMS, BROKER_GET_NUMS):
            if key != self.broker_name:
                return None
            skey = ("total", "put" if name == BROKER_PUT_NUMS else "get")
        else:
            return None
        return self._windows(skey, field)

    def tps(self, which: str, window: str = "statsMinute") -> float:
        """Broker-wide messages per second over a window ("put" or "get")."""
        return self._windows(("total", which), MSGS + 1)[window].tps


def _prune(samples: list[Sample], keep: list[float]) -> list[Sample]:
    """The samples some kept tick time reads (the latest at or before it), and the newest."""
    out: list[Sample] = []
    j = 0
    n = len(samples)
    for t in keep:
        while j + 1 < n and samples[j + 1][0] <= t:
            j += 1
        if samples[j][0] <= t and (not out or out[-1] is not samples[j]):
            out.append(samples[j])
    if not out or out[-1] is not samples[-1]:
        out.append(samples[-1])
    return out


# ---- latency -------------------------------------------------------------------------

# seconds; +Inf is implied
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0)


class LatencyHistogram:
    """Fixed buckets; ``counts[i]`` observations in (bucket i-1, bucket i], the
    last one past every bound."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus buckets: (upper bound text, observations at or below it)."""
        out = []
        total = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            total += count
            out.append((repr(float(bound)), total))
        total += self.counts[-1]
        out.append(("+Inf", total))
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)
