"""Prometheus metrics over HTTP, served from the daemon's own trio loop.

``MetricsServer(registry, host, port)`` serves ``GET /metrics`` (the text
exposition of ``prometheus_client.exposition.generate_latest``) with
hypercorn's trio server; anything else is 404. It runs as a task of the
daemon's nursery (``await nursery.start(server.run)`` reports the bound port:
port 0 takes a free one) and stops gracefully on ``stop()`` or when the
nursery is cancelled.

A scrape runs the registry's collectors on the event loop: they read the
daemon's tables as they are (no lock needed) and must keep their work
bounded (broker/metrics.py caps the series it emits). The exposition
bytes are written by hypercorn while the loop goes on.

With ``snapshot`` (the broker's), a scrape instead calls it on the loop (it
copies at most its cap of each table, broker/metrics.py ``frozen_registry``)
and renders the registry it returns in a worker thread: the loop pays the
copy, not the formatting of up to 20,000 series per family (hundreds of ms of
CPU). One scrape renders at a time (others wait their turn): a flood of scrapes
costs one thread's CPU, not one thread each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
import trio
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from protocol.extras import require_metrics_http

if TYPE_CHECKING:
    from hypercorn.config import Config

log = structlog.get_logger("metrics")

# a scrape slower than this is logged (the loop waited that long)
SLOW_SCRAPE_S = 0.1


class MetricsApp:
    """A minimal ASGI app: ``/metrics`` and nothing else."""

    def __init__(self, registry: CollectorRegistry,
                 snapshot: Callable[[], CollectorRegistry] | None = None) -> None:
        self.registry = registry
        self.snapshot = snapshot
        self.scrapes = 0
        self._render_lock = trio.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        if scope.get("method") not in ("GET", "HEAD") or path not in ("/metrics", "/metrics/"):
            status, ctype, body = 404, b"text/plain; charset=utf-8", b"not found: try /metrics\n"
        else:
            body = await self.render()
            status, ctype = 200, CONTENT_TYPE_LATEST.encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", ctype),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body",
                    "body": b"" if scope.get("method") == "HEAD" else body})


    async def render(self) -> bytes:
        """The exposition text; a scrape that held the loop longer than
        SLOW_SCRAPE_S is logged."""
        if self.snapshot is None:
            started = time.perf_counter()
            body = generate_latest(self.registry)
            held = time.perf_counter() - started
        else:
            async with self._render_lock:
                started = time.perf_counter()
                frozen = self.snapshot()
                held = time.perf_counter() - started
                body = await trio.to_thread.run_sync(generate_latest, frozen)
        self.scrapes += 1
        if held > SLOW_SCRAPE_S:
            log.warning("slow metrics scrape", seconds=round(held, 3), bytes=len(body))
        return body


class MetricsServer:
    """``/metrics`` on ``host:port``. Serving needs hypercorn (the ``web`` extra):
    without it the constructor raises MissingExtraError (protocol/extras.py), so a
    daemon with ``metricsPort`` set stops before it starts anything."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int,
                 snapshot: Callable[[], CollectorRegistry] | None = None) -> None:
        require_metrics_http()
        self.app = MetricsApp(registry, snapshot)
        self.host = host
        self.port = port
        self._stop = trio.Event()

    def _config(self) -> Config:
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"{self.host}:{self.port}"]
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")
        config.graceful_timeout = 2.0
        config.keep_alive_timeout = 30.0
        return config

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``stop()`` or cancelled; reports the bound port."""

        from hypercorn.trio import serve

        async def started_at(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            await serve(self.app, self._config(),  # type: ignore[arg-type]
                        shutdown_trigger=self._stop.wait, task_status=task_status)

        async with trio.open_nursery() as nursery:
            binds = await nursery.start(started_at)
            port = self.port
            if binds:
                port = int(str(binds[0]).rsplit(":", 1)[1])
            self.port = port
            log.info("metrics served", url=f"http://{self.host}:{port}/metrics")
            task_status.started(port)

    def stop(self) -> None:
        self._stop.set()
