"""A consumer's pull and consume figures by topic (RocketMQ's ConsumerStatsManager).

Pure: every call takes ``now`` (seconds, any monotonic clock). Each topic keeps a
minute of per-second buckets (pull and consume times and counts) and an hour of
per-minute buckets (failed messages), so memory is bounded per topic whatever the
traffic. ``status`` gives GET_CONSUMER_RUNNING_INFO's ``statusTable`` rows: pullRT
and consumeRT in ms (average per pull, per listener call), TPS over the last
minute, failed messages over the last hour.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


class Window:
    """Sums of two figures over the last ``buckets`` buckets of ``width`` s."""

    __slots__ = ("buckets", "width", "_q")

    def __init__(self, buckets: int, width: float) -> None:
        self.buckets = buckets
        self.width = width
        self._q: deque[list[float]] = deque()  # [bucket index, a, b], oldest first

    def add(self, now: float, a: float, b: float = 0.0) -> None:
        index = int(now // self.width)
        q = self._q
        if q and q[-1][0] == index:
            q[-1][1] += a
            q[-1][2] += b
            return
        q.append([index, a, b])
        self._trim(index)

    def _trim(self, index: int) -> None:
        q = self._q
        while q and q[0][0] <= index - self.buckets:
            q.popleft()

    def sums(self, now: float) -> tuple[float, float]:
        self._trim(int(now // self.width))
        return sum(e[1] for e in self._q), sum(e[2] for e in self._q)


MINUTE = 60.0


@dataclass(slots=True)
class TopicStats:
    pulls: Window = field(default_factory=lambda: Window(60, 1.0))  # (pulls, seconds)
    pulled: Window = field(default_factory=lambda: Window(60, 1.0))  # (messages, 0)
    calls: Window = field(default_factory=lambda: Window(60, 1.0))  # (calls, seconds)
    done: Window = field(default_factory=lambda: Window(60, 1.0))  # (ok msgs, failed msgs)
    failed_hour: Window = field(default_factory=lambda: Window(60, 60.0))  # (failed, 0)


class ConsumeStats:
    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}

    def _of(self, topic: str) -> TopicStats:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        return stats

    def pulled(self, topic: str, now: float, seconds: float, messages: int) -> None:
        """One pull of ``topic`` took ``seconds`` and brought ``messages``."""
        s = self._of(topic)
        s.pulls.add(now, 1, seconds)
        if messages:
            s.pulled.add(now, messages)

    def consumed(self, topic: str, now: float, seconds: float, ok: int, failed: int) -> None:
        """One listener call of ``topic``'s messages took ``seconds``: ``ok`` of
        them consumed, ``failed`` to be consumed again."""
        s = self._of(topic)
        s.calls.add(now, 1, seconds)
        s.done.add(now, ok, failed)
        if failed:
            s.failed_hour.add(now, failed)

    def forget(self, keep: set[str]) -> None:
        """Drop the topics not in ``keep`` (no longer subscribed)."""
        for topic in [t for t in self.topics if t not in keep]:
            del self.topics[topic]

    def status(self, now: float) -> dict[str, dict[str, Any]]:
        """topic -> RocketMQ's ConsumeStatus fields."""
        out: dict[str, dict[str, Any]] = {}
        for topic, s in sorted(self.topics.items()):
            pulls, pull_s = s.pulls.sums(now)
            pulled, _ = s.pulled.sums(now)
            calls, call_s = s.calls.sums(now)
            ok, failed = s.done.sums(now)
            failed_hour, _ = s.failed_hour.sums(now)
            out[topic] = {
                "pullRT": round(pull_s * 1000 / pulls, 2) if pulls else 0.0,
                "pullTPS": round(pulled / MINUTE, 2),
                "consumeRT": round(call_s * 1000 / calls, 2) if calls else 0.0,
                "consumeOKTPS": round(ok / MINUTE, 2),
                "consumeFailedTPS": round(failed / MINUTE, 2),
                "consumeFailedMsgs": int(failed_hour),
            }
        return out
