"""Helpers for the dashboard's tests: the app served by hypercorn in the test's
trio run, and plain HTTP requests (``http.client``, run in a thread)."""

from __future__ import annotations

import http.client
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlencode

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from dashboard.app import create_app


@dataclass
class Page:
    status: int
    location: str | None
    text: str

    @property
    def error(self) -> str | None:
        m = re.search(r'<p class="error" id="error">(.*?)</p>', self.text, re.S)
        return m.group(1) if m else None


@dataclass
class WebClient:
    port: int

    def _request(self, method: str, path: str, form: dict[str, str] | None) -> Page:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            body = urlencode(form).encode() if form is not None else None
            headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return Page(resp.status, resp.getheader("Location"), resp.read().decode())
        finally:
            conn.close()

    async def get(self, path: str) -> Page:
        return await trio.to_thread.run_sync(self._request, "GET", path, None)

    async def post(self, path: str, form: dict[str, str]) -> Page:
        return await trio.to_thread.run_sync(self._request, "POST", path, form)


@asynccontextmanager
async def dashboard(namesrv: str, timeout: float = 5.0) -> AsyncIterator[WebClient]:
    """The dashboard on a free loopback port until the block ends."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 1.0
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, create_app(namesrv, timeout),  # type: ignore[arg-type]
                                            config,
                                            shutdown_trigger=stop.wait))
        port = int(binds[0].rsplit(":", 1)[1])
        try:
            yield WebClient(port)
        finally:
            stop.set()
