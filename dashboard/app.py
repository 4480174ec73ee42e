"""The dashboard's web app: Starlette routes over ``DashboardData``, rendered with
Jinja2 templates. Plain HTML forms; no JavaScript.

``create_app(namesrv, security=...)`` returns an ASGI app whose lifespan opens
one ``DashboardData`` (one MQAdmin) and closes it at shutdown. Every request
goes through ``dashboard.guard.Guard`` first (Host, Origin, login, CSRF,
read-only); ``/login`` and ``/logout`` are here.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import anyio
import anyio.to_thread
import jinja2
import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from dashboard.auth import SESSION_COOKIE, Sessions, verify_password
from dashboard.data import (
    DEFAULT_TIMEOUT,
    MAX_MESSAGES,
    DashboardData,
    DataError,
    InputError,
    body_view,
    check_group_name,
    check_topic_name,
    fmt_ts,
    is_system_topic,
    parse_time,
    parse_topic_form,
)
from dashboard.guard import Guard, Security, cookie_header, visitor
from protocol.names import RMQ_SYS_TRACE_TOPIC

log = structlog.get_logger("dashboard")

HERE = Path(__file__).parent
MAX_FORM_BYTES = 16 * 1024
MSG_ID = re.compile(r"[0-9A-Fa-f]{16,64}")
# a message id page shows the trace of at most this many of its messages
MAX_TRACED_ROWS = 8
# scrypt checks run at once (each takes 16 MiB and ~50 ms of a CPU): a flood
# of login attempts queues here instead of taking the memory and every thread
LOGIN_CHECKS_AT_ONCE = 2
# hashed when the user name is unknown, so that a wrong name costs as long as
# a wrong password
_DUMMY_HASH = ("scrypt$16384$8$1$00000000000000000000000000000000$"
               "0000000000000000000000000000000000000000000000000000000000000000")

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    undefined=jinja2.StrictUndefined,
)
_env.filters["ts"] = fmt_ts
_env.filters["q"] = lambda s: quote(str(s), safe="")
_env.globals["body_view"] = body_view


def _data(request: Request) -> DashboardData:
    return request.app.state.data  # type: ignore[no-any-return]


def _page_ctx(request: Request) -> dict[str, Any]:
    """What base.html needs of the guard: the user, the CSRF token, read-only
    (nothing for a request the guard failed on: no forms then)."""
    if "mqdash" not in request.scope:
        return {"user": None, "csrf": "", "read_only": True, "login": True}
    v = visitor(request.scope)
    return {"user": v.user, "csrf": v.csrf, "read_only": v.read_only, "login": v.login}


def render(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
    ctx.setdefault("error", None)
    ctx.setdefault("notice", None)
    html = _env.get_template(name).render(
        request=request, namesrv=_data(request).namesrv_addr, path=request.url.path,
        **_page_ctx(request), **ctx)
    return HTMLResponse(html, status_code=status)


async def form_fields(request: Request) -> dict[str, str]:
    """An urlencoded form body (bounded), one value per field."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip()
    if ctype != "application/x-www-form-urlencoded":
        raise InputError("send the form as application/x-www-form-urlencoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise InputError("form too large")
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=32)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"unreadable form: {exc}") from None
    return {k: v[-1] for k, v in parsed.items()}


# ---- login ------------------------------------------------------------------------


def _local_path(target: str | None) -> str:
    """``target`` if it is a path of this site (never another site's URL), else /."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


async def login_page(request: Request, *, status: int = 200, error: str | None = None,
                     user: str = "") -> Response:
    v = visitor(request.scope)
    nxt = _local_path(request.query_params.get("next"))
    if not v.login or v.session is not None:
        return RedirectResponse(nxt, status_code=303)
    html = _env.get_template("login.html").render(
        request=request, namesrv=_data(request).namesrv_addr, path=request.url.path,
        **_page_ctx(request), title="Log in", error=error, notice=None, next=nxt, name=user)
    return HTMLResponse(html, status_code=status)


async def login_post(request: Request) -> Response:
    v = visitor(request.scope)
    security: Security = request.app.state.security
    sessions: Sessions = request.app.state.sessions
    if security.users is None:
        return RedirectResponse("/", status_code=303)
    form = await form_fields(request)
    name = form.get("user", "").strip()
    password = form.get("password", "")
    stored = security.users.get(name)
    limiter = request.app.state.login_limiter
    if limiter is None:
        limiter = request.app.state.login_limiter = anyio.CapacityLimiter(LOGIN_CHECKS_AT_ONCE)
    ok = await anyio.to_thread.run_sync(verify_password, stored or _DUMMY_HASH, password,
                                        limiter=limiter)
    if not ok or stored is None:
        client = request.client
        log.warning("dashboard login failed", user=name[:64],
                    client=f"{client.host}:{client.port}" if client else "?")
        return await login_page(request, status=401, error="wrong user name or password",
                                user=name[:64])
    sessions.drop(v.session_id)
    sid, _session = sessions.create(name)
    log.info("dashboard login", user=name)
    response = RedirectResponse(_local_path(form.get("next")), status_code=303)
    response.raw_headers.append((b"set-cookie", cookie_header(
        SESSION_COOKIE, sid, secure=request.url.scheme == "https",
        max_age=int(security.session_hours * 3600))))
    return response


async def logout_post(request: Request) -> Response:
    v = visitor(request.scope)
    request.app.state.sessions.drop(v.session_id)
    response = RedirectResponse("/login" if v.login else "/", status_code=303)
    response.raw_headers.append((b"set-cookie", cookie_header(
        SESSION_COOKIE, "", secure=request.url.scheme == "https", max_age=0)))
    return response


# ---- pages ------------------------------------------------------------------------


async def cluster_page(request: Request) -> Response:
    rows, clusters = await _data(request).cluster()
    return render(request, "cluster.html", title="Cluster", rows=rows, clusters=clusters)


async def topics_page(request: Request, *, status: int = 200, error: str | None = None,
                      form: dict[str, str] | None = None) -> Response:
    data = _data(request)
    show_system = request.query_params.get("system") == "1"
    topics = await data.topics()
    shown = [t for t in topics if show_system or not is_system_topic(t)]
    clusters, masters = await data.broker_choices()
    return render(request, "topics.html", status=status, title="Topics", topics=shown,
                  hidden=len(topics) - len(shown), show_system=show_system, clusters=clusters,
                  masters=masters, form=form or {}, error=error)


async def topics_post(request: Request) -> Response:
    form: dict[str, str] = {}
    try:
        form = await form_fields(request)
        parsed = parse_topic_form(form)
    except InputError as exc:
        return await topics_page(request, status=400, error=str(exc), form=form)
    addrs = await _data(request).create_topic(parsed)
    note = f"topic {parsed.topic} created or updated on {', '.join(addrs)}"
    return RedirectResponse(f"/topics/{quote(parsed.topic, safe='')}?{urlencode({'notice': note})}",
                            status_code=303)


async def topic_page(request: Request) -> Response:
    topic = check_topic_name(request.path_params["topic"])
    detail = await _data(request).topic_detail(topic)
    return render(request, "topic.html", title=f"Topic {topic}", topic=topic,
                  notice=request.query_params.get("notice"), **detail)


async def groups_page(request: Request) -> Response:
    groups = await _data(request).groups()
    return render(request, "groups.html", title="Consumer groups", groups=groups)


async def group_page(request: Request, *, status: int = 200, error: str | None = None,
                     notice: str | None = None, reset: list[Any] | None = None) -> Response:
    group = check_group_name(request.path_params["group"])
    detail = await _data(request).group_detail(group)
    return render(request, "group.html", status=status, title=f"Group {group}", group=group,
                  error=error, notice=notice, reset=reset, **detail)


async def group_reset_post(request: Request) -> Response:
    group = check_group_name(request.path_params["group"])
    try:
        form = await form_fields(request)
        topic = check_topic_name(form.get("topic", ""))
        ts = parse_time(form.get("time", ""), "reset time")
    except InputError as exc:
        return await group_page(request, status=400, error=str(exc))
    rows = await _data(request).reset_offset(group, topic, ts)
    return await group_page(request, notice=f"offsets of {group} on {topic} reset to "
                            f"{fmt_ts(ts)}", reset=rows)


async def messages_page(request: Request) -> Response:
    q = request.query_params
    mode = q.get("mode", "")
    body_mode = "hex" if q.get("body") == "hex" else "text"
    now_ms = int(time.time() * 1000)
    ctx: dict[str, Any] = {
        "mode": mode, "body_mode": body_mode, "rows": None, "truncated": False,
        "q": dict(q), "max_messages": MAX_MESSAGES, "trace_topic": RMQ_SYS_TRACE_TOPIC,
        "default_begin": fmt_ts(now_ms - 3600_000)[:16].replace(" ", "T"),
        "default_end": fmt_ts(now_ms + 60_000)[:16].replace(" ", "T"),
    }
    toggle = dict(q)
    toggle["body"] = "text" if body_mode == "hex" else "hex"
    ctx["toggle_url"] = "/messages?" + urlencode(toggle)
    data = _data(request)
    try:
        if mode == "time":
            topic = check_topic_name(q.get("topic", ""))
            begin = parse_time(q.get("begin", ""), "begin")
            end = parse_time(q.get("end", ""), "end")
            if end <= begin:
                raise InputError("end must be after begin")
            ctx["rows"], ctx["truncated"] = await data.by_time(topic, begin, end)
        elif mode == "key":
            topic = check_topic_name(q.get("topic", ""))
            key = q.get("key", "").strip()
            if not key or len(key) > 512:
                raise InputError("key: give one key (at most 512 characters)")
            ctx["rows"] = await data.by_key(topic, key)
        elif mode == "id":
            msg_id = q.get("msgId", "").strip()
            if not MSG_ID.fullmatch(msg_id):
                raise InputError("message id: 16 to 64 hex digits (an offset msgId or a "
                                 "producer's unique key)")
            topic_s = q.get("topic", "").strip()
            trace_topic = check_topic_name(q.get("traceTopic", "").strip() or RMQ_SYS_TRACE_TOPIC)
            ctx["rows"] = await data.by_id(msg_id, check_topic_name(topic_s) if topic_s else None)
            ctx["trace_topic"] = trace_topic
            await data.add_traces(ctx["rows"][:MAX_TRACED_ROWS], trace_topic)
        elif mode:
            raise InputError(f"unknown query mode {mode[:20]!r}")
    except InputError as exc:
        return render(request, "messages.html", status=400, title="Messages", error=str(exc),
                      **ctx)
    return render(request, "messages.html", title="Messages", **ctx)


async def producers_page(request: Request) -> Response:
    q = request.query_params
    ctx: dict[str, Any] = {"q": dict(q), "rows": None}
    if q.get("group") or q.get("topic"):
        try:
            group = check_group_name(q.get("group", ""))
            topic = check_topic_name(q.get("topic", ""))
        except InputError as exc:
            return render(request, "producers.html", status=400, title="Producers",
                          error=str(exc), **ctx)
        ctx["rows"] = await _data(request).producers(group, topic)
    return render(request, "producers.html", title="Producers", **ctx)


# ---- errors -------------------------------------------------------------------------


async def on_input_error(request: Request, exc: Exception) -> Response:
    return render(request, "error.html", status=400, title="Bad request", error=str(exc))


async def on_data_error(request: Request, exc: Exception) -> Response:
    return render(request, "error.html", status=502, title="Request failed", error=str(exc))


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return render(request, "error.html", status=exc.status_code, title=f"{exc.status_code}",
                  error=str(exc.detail))


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.error("dashboard page failed", path=request.url.path, exc_info=exc)
    html = _env.get_template("error.html").render(
        request=request, namesrv="", path=request.url.path, title="Internal error",
        error=f"internal error ({type(exc).__name__}); see the dashboard's log", notice=None,
        **_page_ctx(request))
    return HTMLResponse(html, status_code=500)


def create_app(namesrv_addr: str, timeout: float = DEFAULT_TIMEOUT, *,
               security: Security) -> Starlette:
    """The dashboard for the name servers ``namesrv_addr`` (``host:port;host:port``),
    letting in whom ``security`` says (dashboard/guard.py)."""
    sessions = Sessions(ttl=security.session_hours * 3600)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with DashboardData(namesrv_addr, timeout) as data:
            app.state.data = data
            yield

    routes = [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login_post, methods=["POST"]),
        Route("/logout", logout_post, methods=["POST"]),
        Route("/", cluster_page),
        Route("/topics", topics_page, methods=["GET"]),
        Route("/topics", topics_post, methods=["POST"]),
        Route("/topics/{topic}", topic_page),
        Route("/groups", groups_page),
        Route("/groups/{group}", group_page, methods=["GET"]),
        Route("/groups/{group}/reset", group_reset_post, methods=["POST"]),
        Route("/messages", messages_page),
        Route("/producers", producers_page),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handlers: dict[Any, Any] = {
        InputError: on_input_error,
        DataError: on_data_error,
        HTTPException: on_http_error,
        Exception: on_unexpected,
    }
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers,
                    middleware=[Middleware(Guard, security=security, sessions=sessions)])
    app.state.security = security
    app.state.sessions = sessions
    app.state.login_limiter = None
    return app
