"""protocol/trio/metrics_http.py's MetricsApp: with a ``snapshot`` (the broker's), a
scrape copies on the event loop and renders in a worker thread, one at a time;
without one (the name server's), it renders on the loop as before."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import trio
import trio.testing
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from protocol.trio.metrics_http import MetricsApp


class Recording(Collector):
    """One gauge; records the thread each collect runs on, and may wait on ``gate``."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.threads: list[threading.Thread] = []
        self.gate = gate

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        self.threads.append(threading.current_thread())
        if self.gate is not None:
            assert self.gate.wait(10)
        fam = GaugeMetricFamily("probe", "a probe")
        fam.add_metric([], 1)
        yield fam


def registry_of(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def snapshotting(collector: Collector, loop_threads: list[threading.Thread]
                 ) -> Callable[[], CollectorRegistry]:
    def snapshot() -> CollectorRegistry:
        loop_threads.append(threading.current_thread())
        return registry_of(collector)
    return snapshot


def test_snapshot_on_the_loop_render_in_a_thread() -> None:
    frozen = Recording()
    loop_threads: list[threading.Thread] = []
    live = Recording()
    app = MetricsApp(registry_of(live), snapshotting(frozen, loop_threads))

    async def main() -> bytes:
        return await app.render()

    body = trio.run(main)
    assert b"probe 1.0" in body
    assert loop_threads == [threading.current_thread()]  # the copy: on the loop
    assert len(frozen.threads) == 1 and frozen.threads[0] is not threading.current_thread()
    assert live.threads == []  # the live registry is not read


def test_without_snapshot_renders_on_the_loop() -> None:
    live = Recording()
    app = MetricsApp(registry_of(live))
    assert b"probe 1.0" in trio.run(app.render)
    assert live.threads == [threading.current_thread()]


def test_one_render_at_a_time() -> None:
    gate = threading.Event()
    frozen = Recording(gate)
    loop_threads: list[threading.Thread] = []
    app = MetricsApp(registry_of(Recording()), snapshotting(frozen, loop_threads))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(app.render)
            nursery.start_soon(app.render)
            # the first render waits in its thread, the second for its turn
            await trio.testing.wait_all_tasks_blocked()
            assert len(loop_threads) == 1, "a second snapshot while the first renders"
            gate.set()
        assert len(loop_threads) == 2 and app.scrapes == 2

    trio.run(main)
