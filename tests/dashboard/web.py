"""Helpers for the dashboard's tests: the app served by hypercorn in the test's
trio run, and plain HTTP requests (``http.client``, run in a thread) that keep
the dashboard's cookies and send the CSRF token of the last page seen."""

from __future__ import annotations

import http.client
import re
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import urlencode

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from dashboard.app import create_app
from dashboard.auth import HostPolicy, add_user, load_users
from dashboard.guard import Security

USER = "admin"
PASSWORD = "test-password-1"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Page:
    status: int
    location: str | None
    text: str
    cookies: dict[str, str] = field(default_factory=dict)  # set by this answer
    set_cookie: list[str] = field(default_factory=list)  # its Set-Cookie headers

    @property
    def error(self) -> str | None:
        m = re.search(r'<p class="error" id="error">(.*?)</p>', self.text, re.S)
        return m.group(1) if m else None


@dataclass
class WebClient:
    port: int
    cookies: dict[str, str] = field(default_factory=dict)
    csrf: str | None = None  # the token of the last page that had a form

    def _request(self, method: str, path: str, form: dict[str, str] | None,
                 headers: dict[str, str]) -> Page:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            body = urlencode(form).encode() if form is not None else None
            hdrs = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
            if self.cookies:
                hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
            hdrs.update(headers)
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            set_now = {}
            raw_cookies = resp.headers.get_all("Set-Cookie") or []
            for value in raw_cookies:
                name, _, rest = value.partition("=")
                set_now[name] = rest.split(";", 1)[0]
            for name, value in set_now.items():
                if value:
                    self.cookies[name] = value
                else:
                    self.cookies.pop(name, None)
            page = Page(resp.status, resp.getheader("Location"), resp.read().decode(), set_now,
                        raw_cookies)
            m = CSRF.search(page.text)
            if m:
                self.csrf = m.group(1)
            return page
        finally:
            conn.close()

    async def get(self, path: str, headers: dict[str, str] | None = None) -> Page:
        return await trio.to_thread.run_sync(self._request, "GET", path, None, headers or {})

    async def post(self, path: str, form: dict[str, str], *, csrf: bool = True,
                   headers: dict[str, str] | None = None) -> Page:
        """POST ``form``, with the CSRF token of the last page seen (``csrf``)."""
        if csrf and self.csrf is not None:
            form = {**form, "csrf": self.csrf}
        return await trio.to_thread.run_sync(self._request, "POST", path, form, headers or {})

    async def login(self, user: str = USER, password: str = PASSWORD) -> Page:
        await self.get("/login")
        page = await self.post("/login", {"user": user, "password": password})
        if page.status == 303:
            assert page.location is not None
            await self.get(page.location)  # the session's token
        return page


def users_security(users_dir: Path, *, read_only: bool = False,
                   allowed: tuple[str, ...] = ()) -> Security:
    """Security with a users file in ``users_dir`` holding USER / PASSWORD."""
    path = users_dir / "users"
    if not path.exists():
        add_user(path, USER, PASSWORD)
    return Security(users=load_users(path), hosts=HostPolicy.of("127.0.0.1", allowed),
                    read_only=read_only)


@asynccontextmanager
async def dashboard(namesrv: str, timeout: float = 5.0, *, security: Security | None = None,
                    login: bool = True) -> AsyncIterator[WebClient]:
    """The dashboard on a free loopback port until the block ends; by default
    with a users file (USER / PASSWORD) and the client logged in."""
    with tempfile.TemporaryDirectory(prefix="dash-users-") as tmp:
        if security is None:
            security = users_security(Path(tmp))
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.graceful_timeout = 1.0
        stop = trio.Event()
        app = create_app(namesrv, timeout, security=security)
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, app, config,  # type: ignore[arg-type]
                                                shutdown_trigger=stop.wait))
            port = int(binds[0].rsplit(":", 1)[1])
            try:
                web = WebClient(port)
                if login and security.users is not None:
                    page = await web.login()
                    assert page.status == 303, (page.status, page.text)
                yield web
            finally:
                stop.set()
