"""The dashboard's gate, an ASGI middleware in front of every route: the Host
allow-list (DNS rebinding), Origin/Referer on changes (cross-site forms), the
login session, the CSRF token of every POST and the read-only mode.

What a request passes, in order:

1. its Host is one the dashboard answers to (``HostPolicy``), else 421;
2. a POST's Origin, or without one its Referer, when present, is the
   dashboard itself, else 403;
3. with logins on, a valid session cookie, except for ``/login`` and
   ``/static``: else a GET is sent to ``/login`` (303), anything else is 401;
4. a POST's form repeats the CSRF token of its session (without a session:
   of its ``mqdash_csrf`` cookie, the login form's and ``--no-login``'s), else
   403;
5. in read-only mode, no POST but ``/login`` and ``/logout`` (403).

What the route handlers need (the user, the CSRF token for forms, read-only)
is put in the request's scope under ``"mqdash"`` (``Visitor``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote

import structlog
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dashboard.auth import (
    PRE_COOKIE,
    SESSION_COOKIE,
    HostPolicy,
    Session,
    Sessions,
    new_token,
    same_token,
)

log = structlog.get_logger("dashboard.guard")

MAX_FORM_BYTES = 16 * 1024
SAFE_METHODS = ("GET", "HEAD")
# paths served without a login session
PUBLIC_PATHS = ("/login",)
PUBLIC_PREFIXES = ("/static/",)
# POSTs allowed in read-only mode
READ_ONLY_ALLOWED = ("/login", "/logout")
CSRF_FIELD = "csrf"


@dataclass(frozen=True)
class Security:
    """How the dashboard lets people in. ``users``: name -> scrypt hash (the
    users file); None means no login (``--no-login``, loopback only)."""

    users: dict[str, str] | None
    hosts: HostPolicy
    read_only: bool = False
    session_hours: float = 8.0

    @property
    def login(self) -> bool:
        return self.users is not None


@dataclass
class Visitor:
    """What the guard learnt about a request, for its handler."""

    session: Session | None
    session_id: str | None
    csrf: str
    read_only: bool
    login: bool

    @property
    def user(self) -> str | None:
        return self.session.user if self.session is not None else None


def cookie_header(name: str, value: str, *, secure: bool, max_age: int | None = None) -> bytes:
    """A Set-Cookie value: HttpOnly, SameSite=Strict, Secure over TLS."""
    parts = [f"{name}={value}", "Path=/", "HttpOnly", "SameSite=Strict"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts).encode("latin-1")


def visitor(scope: Scope) -> Visitor:
    """The guard's verdict on this request (set before any route runs)."""
    v = scope.get("mqdash")
    assert isinstance(v, Visitor), "the dashboard's routes run behind Guard"
    return v


def _plain(status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    body = f"{status} {text}\n".encode()
    start = {"type": "http.response.start", "status": status,
             "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                         (b"content-length", str(len(body)).encode()), *(headers or [])]}
    return start, {"type": "http.response.body", "body": body}


class Guard:
    """ASGI middleware; see the module's docstring."""

    def __init__(self, app: ASGIApp, security: Security, sessions: Sessions) -> None:
        self.app = app
        self.security = security
        self.sessions = sessions

    async def _refuse(self, send: Send, scope: Scope, status: int, text: str,
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
        client = scope.get("client")
        log.info("dashboard request refused", status=status, reason=text,
                 method=scope.get("method"), path=scope.get("path"),
                 client=f"{client[0]}:{client[1]}" if client else "?")
        start, body = _plain(status, text, headers)
        await send(start)
        await send(body)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the dashboard has none: closed unchecked
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        sec = self.security
        headers = Headers(scope=scope)
        server = scope.get("server")
        port = int(server[1]) if server and server[1] is not None else None
        scheme = str(scope.get("scheme", "http"))
        secure = scheme == "https"
        host = headers.get("host")
        if not sec.hosts.allows(host, port, scheme):
            await self._refuse(send, scope, 421, f"this dashboard does not answer to the Host "
                               f"{(host or '')[:100]!r} (add it with --allowed-host)")
            return
        method = str(scope["method"]).upper()
        safe = method in SAFE_METHODS
        path = str(scope["path"])
        if not safe:
            origin = headers.get("origin")
            referer = headers.get("referer")
            if origin is not None:
                if not sec.hosts.allows_origin(origin, port):
                    await self._refuse(send, scope, 403, f"cross-site request refused (Origin "
                                       f"{origin[:100]!r})")
                    return
            elif referer and not sec.hosts.allows_origin(referer, port):
                await self._refuse(send, scope, 403, "cross-site request refused (Referer "
                                   f"{referer[:100]!r})")
                return
        cookies = cookie_parser(headers.get("cookie", ""))
        sid = cookies.get(SESSION_COOKIE)
        session = self.sessions.get(sid)
        public = path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)
        if sec.login and session is None and not public:
            if safe:
                target = path + ("?" + scope["query_string"].decode("latin-1")
                                 if scope.get("query_string") else "")
                start, end = _plain(303, "log in first", [
                    (b"location", f"/login?next={quote(target, safe='')}".encode("latin-1"))])
                await send(start)
                await send(end)
            else:
                await self._refuse(send, scope, 401, "log in first (your session expired or "
                                   "you are not logged in)")
            return
        pre = cookies.get(PRE_COOKIE)
        set_pre: bytes | None = None
        if session is None and not (pre and 32 <= len(pre) <= 64):
            pre = new_token()
            set_pre = cookie_header(PRE_COOKIE, pre, secure=secure)
        if not safe:
            body = b""
            more = True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                more = bool(message.get("more_body"))
                if len(body) > MAX_FORM_BYTES:
                    await self._refuse(send, scope, 413, "form too large")
                    return
            ctype = headers.get("content-type", "").split(";")[0].strip().lower()
            token = None
            if ctype == "application/x-www-form-urlencoded":
                try:
                    token = parse_qs(body.decode("utf-8"), max_num_fields=32).get(
                        CSRF_FIELD, [None])[-1]
                except (UnicodeDecodeError, ValueError):
                    token = None
            want = session.csrf if session is not None else cookies.get(PRE_COOKIE)
            if not same_token(token, want):
                await self._refuse(send, scope, 403, "missing or wrong CSRF token: reload the "
                                   "page and submit the form again")
                return
            if sec.read_only and path not in READ_ONLY_ALLOWED:
                await self._refuse(send, scope, 403, "this dashboard is read-only (--read-only):"
                                   " changes are refused")
                return
            receive = _replay(body, receive)
        scope["mqdash"] = Visitor(session=session, session_id=sid if session else None,
                                  csrf=session.csrf if session is not None else str(pre),
                                  read_only=sec.read_only, login=sec.login)
        if set_pre is None:
            await self.app(scope, receive, send)
            return
        cookie = set_pre

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"set-cookie", cookie)]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def _replay(body: bytes, then: Receive) -> Receive:
    """A receive() that gives the already read ``body`` once, then waits on
    ``then`` (the server's, for the disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await then()

    return receive
