"""Who may use mqdashboard (issue row 15): logins, CSRF tokens, the Host
allow-list (DNS rebinding), Origin/Referer checks, read-only mode, the users
file. The app is served for real (hypercorn on 127.0.0.1); its data layer is a
fake that records the changes asked of the cluster, so that "nothing changed"
is checked directly. test_pages.py checks a refused form against a live
cluster too."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import click
import pytest

from dashboard import app as dashboard_app
from dashboard.auth import (
    PRE_COOKIE,
    SESSION_COOKIE,
    HostPolicy,
    Sessions,
    add_user,
    load_users,
    verify_password,
)
from dashboard.cli import security_of
from dashboard.data import TopicForm
from dashboard.guard import Guard, Security, cookie_header
from tests.dashboard.web import PASSWORD, USER, dashboard, users_security

TOPIC_FORM = {"topic": "Evil", "target": "broker:127.0.0.1:10911", "readQueueNums": "8",
              "writeQueueNums": "8", "perm": "2"}


class FakeData:
    """DashboardData's methods the forms use; ``changes`` lists what was asked."""

    changes: list[tuple[Any, ...]] = []

    def __init__(self, namesrv_addr: str, timeout: float = 5.0) -> None:
        self.namesrv_addr = namesrv_addr

    async def __aenter__(self) -> FakeData:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def cluster(self) -> tuple[list[Any], dict[str, list[str]]]:
        return [], {}

    async def topics(self) -> list[str]:
        return ["Existing"]

    async def broker_choices(self) -> tuple[list[str], list[str]]:
        return ["DefaultCluster"], ["127.0.0.1:10911"]

    async def create_topic(self, form: TopicForm) -> list[str]:
        self.changes.append(("create_topic", form.topic, form.perm))
        return ["127.0.0.1:10911"]

    async def group_detail(self, group: str) -> dict[str, Any]:
        return {"stats": [], "total_lag": 0, "topics": ["T"], "members": [],
                "subscriptions": [], "model": "", "offline": None}

    async def reset_offset(self, group: str, topic: str, ts: int) -> list[tuple[str, int, int]]:
        self.changes.append(("reset_offset", group, topic, ts))
        return []


@pytest.fixture(autouse=True)
def fake_data(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, ...]]]:
    changes: list[tuple[Any, ...]] = []
    monkeypatch.setattr(FakeData, "changes", changes)
    monkeypatch.setattr(dashboard_app, "DashboardData", FakeData)
    yield changes


async def test_cross_site_posts_without_the_csrf_token_are_refused(
        fake_data: list[Any]) -> None:
    async with dashboard("ns:9876") as web:
        # a page on another site posting to the dashboard: the browser sends
        # no SameSite=Strict cookie and the page cannot read the token
        for path, form in (("/topics", TOPIC_FORM),
                           ("/groups/g1/reset", {"topic": "T", "time": "0"})):
            page = await web.post(path, form, csrf=False)
            assert page.status == 403 and "CSRF" in page.text, path
            page = await web.post(path, {**form, "csrf": "x" * 43}, csrf=False)
            assert page.status == 403 and "CSRF" in page.text, path
        assert fake_data == []
        # the same forms from the dashboard's own pages work
        await web.get("/topics")
        assert (await web.post("/topics", TOPIC_FORM)).status == 303
        page = await web.post("/groups/g1/reset", {"topic": "T", "time": "0"})
        assert page.status == 200
        assert [c[0] for c in fake_data] == ["create_topic", "reset_offset"]


async def test_a_foreign_origin_or_referer_is_refused(fake_data: list[Any]) -> None:
    async with dashboard("ns:9876") as web:
        await web.get("/topics")
        for headers in ({"Origin": "http://evil.example"},
                        {"Origin": f"http://evil.example:{web.port}"},
                        {"Origin": "null"},
                        {"Referer": "http://evil.example/attack.html"}):
            page = await web.post("/topics", TOPIC_FORM, headers=headers)
            assert page.status == 403 and "cross-site" in page.text, headers
        assert fake_data == []
        own = {"Origin": f"http://127.0.0.1:{web.port}",
               "Referer": f"http://127.0.0.1:{web.port}/topics"}
        assert (await web.post("/topics", TOPIC_FORM, headers=own)).status == 303
        assert len(fake_data) == 1


async def test_a_foreign_host_header_is_refused(fake_data: list[Any]) -> None:
    """DNS rebinding: the attacker's name resolves to 127.0.0.1, so the
    browser sends the attacker's Host to the dashboard. Refused, every page."""
    async with dashboard("ns:9876") as web:
        for path in ("/", "/topics", "/login", "/static/style.css"):
            page = await web.get(path, headers={"Host": f"rebind.evil.example:{web.port}"})
            assert page.status == 421 and "Host" in page.text, path
        page = await web.post("/topics", TOPIC_FORM,
                              headers={"Host": f"rebind.evil.example:{web.port}"})
        assert page.status == 421
        page = await web.get("/", headers={"Host": f"127.0.0.1:{web.port + 1}"})
        assert page.status == 421  # another port: another origin
        for host in (f"localhost:{web.port}", f"127.0.0.1:{web.port}"):
            assert (await web.get("/topics", headers={"Host": host})).status == 200
        assert fake_data == []


async def test_extra_allowed_hosts(tmp_path: Path) -> None:
    security = users_security(tmp_path, allowed=("dash.example.org", "proxy.example:443"))
    async with dashboard("ns:9876", security=security) as web:
        assert (await web.get("/topics", headers={
            "Host": f"dash.example.org:{web.port}"})).status == 200
        assert (await web.get("/topics", headers={"Host": "proxy.example:8443"})).status == 421
        assert (await web.get("/topics", headers={"Host": f"proxy.example:{web.port}"})
                ).status == 421  # only the proxy's port
        assert (await web.get("/topics", headers={"Host": "proxy.example:443"})).status == 200
        assert (await web.get("/topics", headers={"Host": "proxy.example"})).status == 200


async def test_without_a_session_pages_send_to_the_login_and_posts_are_401(
        fake_data: list[Any]) -> None:
    async with dashboard("ns:9876", login=False) as web:
        for path in ("/", "/topics", "/groups/g1", "/messages?mode=key&topic=T&key=k"):
            page = await web.get(path)
            assert page.status == 303 and page.location is not None, path
            assert page.location.startswith("/login?next="), page.location
        page = await web.get("/login")
        assert page.status == 200 and 'id="login-form"' in page.text
        assert (await web.post("/topics", TOPIC_FORM)).status == 401
        assert (await web.post("/groups/g1/reset", {"topic": "T", "time": "0"})).status == 401
        web.cookies[SESSION_COOKIE] = "made-up-session-id"
        assert (await web.get("/topics")).status == 303
        assert fake_data == []
        assert (await web.get("/static/style.css")).status == 200


async def test_login_with_the_right_password_only_and_logout() -> None:
    async with dashboard("ns:9876", login=False) as web:
        for user, password in ((USER, "wrong"), ("nobody", PASSWORD), (USER, ""),
                               (USER, PASSWORD + "x")):
            page = await web.login(user, password)
            assert page.status == 401 and "wrong user name or password" in page.text
            assert SESSION_COOKIE not in web.cookies
        await web.get("/login?next=/groups")
        page = await web.post("/login", {"user": USER, "password": PASSWORD,
                                         "next": "/groups"})
        assert page.status == 303 and page.location == "/groups"
        set_cookie = page.cookies.get(SESSION_COOKIE)
        assert set_cookie and len(set_cookie) >= 40  # a random id
        page = await web.get("/topics")
        assert page.status == 200 and f'id="user">{USER}<' in page.text
        # a login's next= never leads to another site
        await web.get("/login")
        page = await web.post("/login", {"user": USER, "password": PASSWORD,
                                         "next": "//evil.example/"})
        assert page.location == "/"
        await web.get("/topics")
        assert (await web.post("/logout", {})).status == 303
        assert SESSION_COOKIE not in web.cookies
        web.cookies[SESSION_COOKIE] = set_cookie  # the old id: gone with the logout
        assert (await web.get("/topics")).status == 303


async def test_cookie_attributes() -> None:
    async with dashboard("ns:9876", login=False) as web:
        first = await web.get("/login")
        page = await web.post("/login", {"user": USER, "password": PASSWORD})
        cookies = [*first.set_cookie, *page.set_cookie]
        assert len(cookies) == 2
        assert cookies[0].startswith(PRE_COOKIE + "=") and cookies[1].startswith(SESSION_COOKIE)
        for c in cookies:
            attrs = [a.strip() for a in c.split(";")]
            assert "HttpOnly" in attrs and "SameSite=Strict" in attrs and "Path=/" in attrs
            assert "Secure" not in attrs  # served over plain HTTP here
        assert "Max-Age=28800" in cookies[1]  # the session ends 8 hours after the login


async def test_read_only_mode_refuses_every_change(tmp_path: Path,
                                                   fake_data: list[Any]) -> None:
    security = users_security(tmp_path, read_only=True)
    async with dashboard("ns:9876", security=security) as web:
        page = await web.get("/topics")
        assert page.status == 200 and 'id="topic-form"' not in page.text
        assert 'id="read-only"' in page.text
        assert 'id="reset-form"' not in (await web.get("/groups/g1")).text
        for path, form in (("/topics", TOPIC_FORM),
                           ("/groups/g1/reset", {"topic": "T", "time": "0"})):
            page = await web.post(path, form)  # with the right token
            assert page.status == 403 and "read-only" in page.text, path
        assert fake_data == []
        assert (await web.post("/logout", {})).status == 303  # logging out is not a change


async def test_no_login_mode_still_checks_csrf(fake_data: list[Any]) -> None:
    security = Security(users=None, hosts=HostPolicy.of("127.0.0.1"))
    async with dashboard("ns:9876", security=security) as web:
        page = await web.get("/topics")
        assert page.status == 200 and 'id="topic-form"' in page.text
        assert (await web.post("/topics", TOPIC_FORM, csrf=False)).status == 403
        assert fake_data == []
        assert (await web.post("/topics", TOPIC_FORM)).status == 303
        assert len(fake_data) == 1


def test_the_users_file_holds_salted_scrypt_hashes(tmp_path: Path) -> None:
    path = tmp_path / "users"
    assert add_user(path, "alice", "s3cret-pass")
    assert add_user(path, "bob", "s3cret-pass")
    assert not add_user(path, "alice", "another-pass")  # a new password
    text = path.read_text()
    assert "s3cret" not in text and "another" not in text
    assert path.stat().st_mode & 0o077 == 0
    users = load_users(path)
    assert set(users) == {"alice", "bob"}
    assert all(h.startswith("scrypt$16384$8$1$") for h in users.values())
    assert users["alice"].split("$")[4] != users["bob"].split("$")[4]  # salted
    assert verify_password(users["alice"], "another-pass")
    assert not verify_password(users["alice"], "s3cret-pass")
    assert verify_password(users["bob"], "s3cret-pass")
    assert not verify_password("garbage", "x")


def test_add_user_from_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "users"
    proc = subprocess.run([sys.executable, "-m", "dashboard.cli", "--add-user", "carol",
                           "--users-file", str(path), "--password-stdin"],
                          input=b"pass-from-stdin\n", capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert verify_password(load_users(path)["carol"], "pass-from-stdin")


def test_unsafe_start_options_are_refused(tmp_path: Path) -> None:
    users = tmp_path / "users"
    add_user(users, "alice", "pw-1234")
    with pytest.raises(click.UsageError, match="--users-file"):
        security_of("127.0.0.1", None, False, False, (), 8)
    with pytest.raises(click.UsageError, match="non-loopback"):
        security_of("0.0.0.0", None, True, False, (), 8)
    with pytest.raises(click.UsageError, match="contradict"):
        security_of("127.0.0.1", users, True, False, (), 8)
    assert security_of("127.0.0.1", None, True, False, (), 8).users is None
    sec = security_of("0.0.0.0", users, False, True, ("dash.example",), 8)
    assert sec.login and sec.read_only and "dash.example" in sec.hosts.names


def test_sessions_expire_and_are_bounded() -> None:
    now = [0.0]
    sessions = Sessions(ttl=10, limit=3, clock=lambda: now[0])
    sid, s = sessions.create("alice")
    assert sessions.get(sid) is s and len(s.csrf) >= 40 and sid != s.csrf
    now[0] = 9.9
    assert sessions.get(sid) is s
    now[0] = 10.0
    assert sessions.get(sid) is None
    ids = [sessions.create("bob")[0] for _ in range(5)]
    assert len(sessions.by_id) == 3 and all(sessions.get(i) for i in ids[-3:])


def test_host_policy() -> None:
    p = HostPolicy.of("127.0.0.1", ("dash.example", "proxy.example:443"))
    assert p.allows("127.0.0.1:8080", 8080, "http")
    assert p.allows("LOCALHOST:8080", 8080, "http")
    assert p.allows("[::1]:8080", 8080, "http")
    assert not p.allows("127.0.0.1:8081", 8080, "http")
    assert not p.allows("evil.example:8080", 8080, "http")
    assert not p.allows(None, 8080, "http") and not p.allows("", 8080, "http")
    assert not p.allows("127.0.0.1:8080@evil", 8080, "http")
    assert p.allows("dash.example", 80, "http") and not p.allows("dash.example", 8080, "http")
    assert p.allows("proxy.example", 8080, "https")
    assert p.allows("proxy.example", 8080, "http")  # a proxy that ends TLS, Host kept
    assert p.allows_origin("https://proxy.example", 8080)
    assert not p.allows("proxy.example:8443", 8080, "http")
    assert p.allows_origin("http://127.0.0.1:8080", 8080)
    assert not p.allows_origin("http://evil.example:8080", 8080)
    assert not p.allows_origin("null", 8080)
    assert not p.allows_origin("http://user@127.0.0.1:8080/", 8080)
    assert "10.0.0.5" in HostPolicy.of("10.0.0.5").names
    assert "0.0.0.0" not in HostPolicy.of("0.0.0.0").names


async def test_cookies_are_secure_over_https() -> None:
    """The guard alone, as an ASGI app, for a request that came over TLS."""
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    guard = Guard(app, Security(users=None, hosts=HostPolicy.of("127.0.0.1")), Sessions())
    scope = {"type": "http", "method": "GET", "path": "/login", "query_string": b"",
             "scheme": "https", "server": ("127.0.0.1", 8443),
             "headers": [(b"host", b"127.0.0.1:8443")]}
    await guard(scope, receive, send)
    (cookie,) = [v.decode() for k, v in sent[0]["headers"] if k == b"set-cookie"]
    assert cookie.startswith(PRE_COOKIE) and "; Secure" in cookie and "HttpOnly" in cookie
    assert "Secure" in cookie_header(SESSION_COOKIE, "x", secure=True).decode()
