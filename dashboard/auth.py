"""Who may use the dashboard: the users file (salted scrypt hashes), login
sessions, CSRF tokens and the Host allow-list. Pure logic, no I/O except
reading and writing the users file; ``dashboard.guard`` applies it to requests.

The users file has one ``name:scrypt$n$r$p$salt$hash`` line per user (salt and
hash in hex); ``mqdashboard --add-user NAME --users-file PATH`` writes it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

# scrypt's cost: 16 MiB and some 50 ms of one CPU per check, the usual
# interactive-login setting (RFC 7914 suggests n=2**14, r=8 as a minimum)
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
SCHEME = "scrypt"
USER_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
MAX_PASSWORD = 1024  # characters: scrypt takes any length; a bound on what a form may make it hash

SESSION_COOKIE = "mqdash_session"
# the CSRF token of a visitor without a login session (the login form, or
# every form with --no-login): the form must repeat this cookie's value
PRE_COOKIE = "mqdash_csrf"
DEFAULT_SESSION_HOURS = 8.0
# login sessions held at once; only a right password makes one, so the bound
# is against a user logging in in a loop, not against strangers
MAX_SESSIONS = 256
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


class UsersFileError(ValueError):
    """A users file that cannot be read or has a bad line."""


def check_user_name(name: str) -> str:
    if not USER_NAME.fullmatch(name):
        raise UsersFileError(f"user name {name[:80]!r}: 1 to 64 of letters, digits and _ . @ -")
    return name


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """``scrypt$n$r$p$salt$hash`` of ``password`` with a new random salt."""
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                            dklen=HASH_BYTES)
    return f"{SCHEME}${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def verify_password(stored: str, password: str) -> bool:
    """Whether ``password`` matches ``stored`` (hash_password's form); a
    malformed ``stored`` or an over-long password never matches."""
    if len(password) > MAX_PASSWORD:
        return False
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != SCHEME:
            return False
        want = bytes.fromhex(digest)
        got = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r),
                             p=int(p), dklen=len(want), maxmem=64 * 1024 * 1024)
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(got, want)


def parse_users(text: str, source: str = "users file") -> dict[str, str]:
    """``name -> stored hash`` from a users file's text (``#`` comments and
    blank lines skipped). Raises UsersFileError naming the bad line."""
    users: dict[str, str] = {}
    for no, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, stored = line.partition(":")
        if not sep or not USER_NAME.fullmatch(name) or not stored.startswith(SCHEME + "$") \
                or stored.count("$") != 5:
            raise UsersFileError(f"{source} line {no}: expected name:scrypt$n$r$p$salt$hash "
                                 "(write it with mqdashboard --add-user)")
        users[name] = stored
    return users


def load_users(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsersFileError(f"users file {path}: {exc.strerror or exc}") from None
    return parse_users(text, str(path))


def add_user(path: Path, name: str, password: str) -> bool:
    """Add ``name`` to the users file (or change its password); the file is
    created readable by its owner only. Returns whether the user was new."""
    check_user_name(name)
    if not password:
        raise UsersFileError("the password must not be empty")
    if len(password) > MAX_PASSWORD:
        raise UsersFileError(f"the password must be at most {MAX_PASSWORD} characters")
    users = load_users(path) if path.exists() else {}
    new = name not in users
    users[name] = hash_password(password)
    text = "".join(f"{n}:{h}\n" for n, h in users.items())
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(tmp, path)
    return new


# ---- sessions ------------------------------------------------------------------------


def new_token() -> str:
    return secrets.token_urlsafe(32)


def same_token(given: str | None, want: str | None) -> bool:
    return bool(given) and bool(want) and hmac.compare_digest(str(given), str(want))


@dataclass(slots=True)
class Session:
    user: str
    csrf: str
    expires_at: float


@dataclass
class Sessions:
    """Login sessions by random id; each expires ``ttl`` seconds after login."""

    ttl: float = DEFAULT_SESSION_HOURS * 3600
    limit: int = MAX_SESSIONS
    clock: Callable[[], float] = time.monotonic
    by_id: dict[str, Session] = field(default_factory=dict)

    def create(self, user: str) -> tuple[str, Session]:
        now = self.clock()
        self.by_id = {k: s for k, s in self.by_id.items() if s.expires_at > now}
        while len(self.by_id) >= self.limit:
            del self.by_id[min(self.by_id, key=lambda k: self.by_id[k].expires_at)]
        sid = new_token()
        session = Session(user, new_token(), now + self.ttl)
        self.by_id[sid] = session
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        session = self.by_id.get(sid)
        if session is not None and session.expires_at <= self.clock():
            del self.by_id[sid]
            return None
        return session

    def drop(self, sid: str | None) -> None:
        if sid:
            self.by_id.pop(sid, None)


# ---- Host and Origin -----------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_host(value: str) -> tuple[str, int | None]:
    """``name[:port]`` (``[v6][:port]``) as (lowercased name, port or None).
    Raises ValueError for a malformed value."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError(value)
        name, rest = value[:end + 1], value[end + 1:]
    else:
        name, _, port_s = value.partition(":")
        rest = ":" + port_s if _ else ""
    if not name or any(c in name for c in "/@?#\\ "):
        raise ValueError(value)
    if not rest:
        return name, None
    if not rest.startswith(":") or not rest[1:].isdigit() or not 0 < int(rest[1:]) < 65536:
        raise ValueError(value)
    return name, int(rest[1:])


@dataclass(frozen=True)
class HostPolicy:
    """The Host names the dashboard answers to (DNS rebinding gets a foreign
    name through to a loopback server; it is refused here). A name without a
    port allows it on the port the request came to; ``name:port`` allows that
    port only (a reverse proxy's public port; a Host without a port matches
    ``name:80`` and ``name:443``)."""

    names: frozenset[str]
    with_port: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def of(cls, bind_host: str, extra: Iterable[str] = ()) -> HostPolicy:
        names = set(LOOPBACK_NAMES)
        bound = bind_host.strip().lower()
        if bound and bound not in ("0.0.0.0", "::", "[::]"):
            names.add(f"[{bound}]" if ":" in bound and not bound.startswith("[") else bound)
        with_port: set[tuple[str, int]] = set()
        for entry in extra:
            name, port = split_host(entry)
            if port is None:
                names.add(name)
            else:
                with_port.add((name, port))
        return cls(frozenset(names), frozenset(with_port))

    def allows(self, host_header: str | None, server_port: int | None, scheme: str) -> bool:
        """Whether a request with this Host (arriving on ``server_port``) is ours."""
        if not host_header:
            return False
        try:
            name, port = split_host(host_header)
        except ValueError:
            return False
        if port is None:
            # no port: the scheme's default; behind a proxy that ends TLS the
            # request came over http but the browser's port was 443
            if (name, 80) in self.with_port or (name, 443) in self.with_port:
                return True
            port = 443 if scheme in ("https", "wss") else 80
        if (name, port) in self.with_port:
            return True
        return name in self.names and (server_port is None or port == server_port)

    def allows_origin(self, origin: str, server_port: int | None) -> bool:
        """Whether an Origin (or a Referer's scheme://host[:port]) is ours."""
        scheme, sep, rest = origin.partition("://")
        if not sep or scheme not in ("http", "https"):
            return False
        netloc = rest.split("/", 1)[0]
        if "@" in netloc:
            return False
        return self.allows(netloc, server_port, scheme)
