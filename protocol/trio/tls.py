"""TLS for the remoting layer: Python's ``ssl`` under ``trio.SSLStream``.

A server's ``tlsMode`` (RocketMQ's ``tls.server.mode``):

- ``disabled``: plain connections only, exactly as without TLS;
- ``permissive`` (default): TLS and plain on one port, told apart by the first
  byte a client sends. A TLS ClientHello starts with a handshake record (0x16);
  our frames and RocketMQ's start with a 4-byte big-endian length whose first
  byte is 0 for any frame under 16 MiB. Without certificate paths a permissive
  server serves plain connections only (and says so in its log), as a RocketMQ
  broker without certificates does for its plain clients;
- ``enforcing``: TLS only. A plain client's first request is answered
  SYSTEM_ERROR "server requires TLS", then the connection is closed.

The first byte is peeked (MSG_PEEK), never taken from the stream, so a plain
connection goes on reading its raw socket as before (the fast path); a TLS
connection reads through the SSLStream.

Pure pieces (mode parsing, first-byte classification, settings checks) have no
I/O; the async helpers bound every wait (first byte, handshake, refusal).
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog
import trio

from protocol.codecs import detect
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import ProtocolError, RemoteProtocolError
from protocol.frame import FrameDecoder, encode_frame
from protocol.trio.errors import RemotingConnectError

log = structlog.get_logger("remoting.tls")

DISABLED = "disabled"
PERMISSIVE = "permissive"
ENFORCING = "enforcing"
TLS_MODES = (DISABLED, PERMISSIVE, ENFORCING)

# the first byte of a TLS record carrying a handshake message (a ClientHello)
TLS_HANDSHAKE_RECORD = 0x16

REQUIRES_TLS = "server requires TLS (tlsMode=enforcing): connect with use_tls / --tls"
# most bytes read from a plain client of an enforcing server to answer it
REFUSAL_READ_LIMIT = 64 * 1024
REFUSAL_TIMEOUT_S = 5.0


# 0 where the ssl module does not name the option (nothing to clear then)
IGNORE_UNEXPECTED_EOF: ssl.Options = getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", ssl.Options(0))


def new_context(purpose: ssl.Purpose) -> ssl.SSLContext:
    """``ssl.create_default_context(purpose)`` where a peer that drops the TCP
    connection without TLS's close_notify is an error (``SSLEOFError``) on every
    Python build. Some builds (Debian's 3.11.2) set ``OP_IGNORE_UNEXPECTED_EOF``
    by default, which makes that drop a clean end of stream: a client refused
    for want of a certificate then saw only "connection closed", without the
    reason (``describe_tls_failure``)."""
    ctx = ssl.create_default_context(purpose)
    ctx.options &= ~IGNORE_UNEXPECTED_EOF
    return ctx


class TlsConfigError(ValueError):
    """TLS settings that cannot work (a mode unknown, a file missing or unreadable)."""


def parse_mode(value: str) -> str:
    """``value`` as one of TLS_MODES (case-insensitive). Raises TlsConfigError."""
    mode = str(value).strip().lower()
    if mode not in TLS_MODES:
        raise TlsConfigError(f"tlsMode must be one of {', '.join(TLS_MODES)}, not {value!r}")
    return mode


# tls.server.need.client.auth, as RocketMQ's: none | optional | require (true/false too)
CLIENT_AUTH = ("none", "optional", "require")


def parse_client_auth(value: str | bool) -> str:
    """``value`` as one of CLIENT_AUTH (true: require, false: none). Raises TlsConfigError."""
    text = str(value).strip().lower()
    text = {"true": "require", "false": "none"}.get(text, text)
    if text not in CLIENT_AUTH:
        raise TlsConfigError("tls.server.need.client.auth must be none, optional or require "
                             f"(or true/false), not {value!r}")
    return text


def is_tls_first_byte(first: int) -> bool:
    """Whether a connection whose first byte is ``first`` starts a TLS handshake."""
    return first == TLS_HANDSHAKE_RECORD


def _check_file(key: str, path: str) -> None:
    if not os.path.isfile(path):
        raise TlsConfigError(f"{key}: no such file: {path}")
    if not os.access(path, os.R_OK):
        raise TlsConfigError(f"{key}: file not readable: {path}")


@dataclass(frozen=True, slots=True)
class ServerTls:
    """A daemon's server-side TLS settings (RocketMQ's tls.server.* keys)."""

    mode: str = PERMISSIVE
    cert_path: str = ""
    key_path: str = ""
    trust_cert_path: str = ""  # CA of client certificates (need.client.auth)
    need_client_auth: str = "none"  # none | optional | require (CLIENT_AUTH)

    @property
    def serves_tls(self) -> bool:
        """Whether TLS connections are accepted at all."""
        return self.mode != DISABLED and bool(self.cert_path and self.key_path)

    def problem(self) -> str | None:
        """What keeps these settings from working (None: they work). Pure."""
        if self.mode not in TLS_MODES:
            return f"tlsMode must be one of {', '.join(TLS_MODES)}, not {self.mode!r}"
        if self.mode == DISABLED:
            return None
        if bool(self.cert_path) != bool(self.key_path):
            return "tls.server.certPath and tls.server.keyPath must be given together"
        if self.mode == ENFORCING and not self.cert_path:
            return ("tlsMode=enforcing needs tls.server.certPath and tls.server.keyPath "
                    "(or set tlsMode=disabled/permissive)")
        if self.need_client_auth not in CLIENT_AUTH:
            return (f"tls.server.need.client.auth must be one of {', '.join(CLIENT_AUTH)}, "
                    f"not {self.need_client_auth!r}")
        if self.need_client_auth != "none" and self.cert_path and not self.trust_cert_path:
            return (f"tls.server.need.client.auth={self.need_client_auth} needs "
                    "tls.server.trustCertPath (the clients' CA)")
        return None

    def context(self) -> ssl.SSLContext | None:
        """The server's SSLContext, or None when it serves no TLS. Raises
        TlsConfigError (one line naming the key) for settings that cannot work."""
        problem = self.problem()
        if problem is not None:
            raise TlsConfigError(problem)
        if not self.serves_tls:
            return None
        _check_file("tls.server.certPath", self.cert_path)
        _check_file("tls.server.keyPath", self.key_path)
        ctx = new_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ctx.load_cert_chain(self.cert_path, self.key_path)
        except (ssl.SSLError, OSError) as exc:
            raise TlsConfigError(f"tls.server.certPath/keyPath cannot be loaded: {exc}") from exc
        if self.need_client_auth != "none":
            _check_file("tls.server.trustCertPath", self.trust_cert_path)
            try:
                ctx.load_verify_locations(self.trust_cert_path)
            except (ssl.SSLError, OSError) as exc:
                raise TlsConfigError(f"tls.server.trustCertPath cannot be loaded: {exc}") from exc
            ctx.verify_mode = (ssl.CERT_REQUIRED if self.need_client_auth == "require"
                               else ssl.CERT_OPTIONAL)
        return ctx


class ServerTlsKeys(Protocol):
    """The TLS keys of a daemon's config (broker and name server alike)."""

    tls_mode: str
    tls_server_cert_path: str
    tls_server_key_path: str
    tls_server_trust_cert_path: str
    tls_server_need_client_auth: str


def normalize_server_tls(config: ServerTlsKeys) -> ServerTls:
    """Check a daemon's TLS keys, writing back the normalized mode and client-auth
    value; returns its ServerTls. Raises TlsConfigError saying what cannot work."""
    config.tls_mode = parse_mode(config.tls_mode)
    config.tls_server_need_client_auth = parse_client_auth(config.tls_server_need_client_auth)
    settings = server_tls_of(config)
    problem = settings.problem()
    if problem is not None:
        raise TlsConfigError(problem)
    return settings


def server_tls_of(config: ServerTlsKeys) -> ServerTls:
    return ServerTls(mode=config.tls_mode, cert_path=config.tls_server_cert_path,
                     key_path=config.tls_server_key_path,
                     trust_cert_path=config.tls_server_trust_cert_path,
                     need_client_auth=config.tls_server_need_client_auth)


@dataclass(frozen=True, slots=True)
class ClientTls:
    """A client's TLS settings: the CA its servers' certificates must chain to
    (empty: the system's CAs) and, for servers with need.client.auth, its own
    certificate and key. Host names are not checked (addresses come from the
    name server as IPs, as RocketMQ's clients do); the chain is."""

    ca_path: str = ""
    cert_path: str = ""
    key_path: str = ""
    check_hostname: bool = False

    def context(self) -> ssl.SSLContext:
        """The client's SSLContext. Raises TlsConfigError."""
        if bool(self.cert_path) != bool(self.key_path):
            raise TlsConfigError("a client certificate and its key must be given together")
        ctx = new_context(ssl.Purpose.SERVER_AUTH)
        ctx.check_hostname = self.check_hostname
        try:
            if self.ca_path:
                _check_file("TLS CA (tls_ca_path, --tls-ca, tls.client.trustCertPath)",
                            self.ca_path)
                ctx.load_verify_locations(self.ca_path)
            if self.cert_path:
                _check_file("TLS client certificate", self.cert_path)
                _check_file("TLS client key", self.key_path)
                ctx.load_cert_chain(self.cert_path, self.key_path)
        except (ssl.SSLError, OSError) as exc:
            raise TlsConfigError(f"TLS files cannot be loaded: {exc}") from exc
        return ctx


def client_tls(use_tls: bool = False, ca_path: str | None = None, cert_path: str | None = None,
               key_path: str | None = None) -> ClientTls | None:
    """The SDK's keywords as ClientTls (None: plain). A CA or a certificate
    without ``use_tls`` is an error rather than silently plain."""
    if not use_tls:
        if ca_path or cert_path or key_path:
            raise TlsConfigError("TLS files given without use_tls=True")
        return None
    return ClientTls(ca_path=ca_path or "", cert_path=cert_path or "", key_path=key_path or "")


# ---- server side -------------------------------------------------------------------


async def peek_first_byte(stream: trio.SocketStream) -> int | None:
    """The first byte the peer sent, left in the socket; None if it closed first."""
    try:
        data = await stream.socket.recv(1, socket.MSG_PEEK)
    except OSError:
        return None
    return data[0] if data else None


async def refuse_plain(stream: trio.SocketStream, max_frame_size: int) -> None:
    """Answer a plain client's first request on an enforcing server with
    SYSTEM_ERROR REQUIRES_TLS (in the client's wire format); bounded in time
    and bytes. The caller closes the stream."""
    decoder = FrameDecoder(max_frame_size)
    taken = 0
    with trio.move_on_after(REFUSAL_TIMEOUT_S):
        while taken < REFUSAL_READ_LIMIT:
            try:
                data = await stream.receive_some(REFUSAL_READ_LIMIT - taken)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return
            if not data:
                return
            taken += len(data)
            try:
                frames = decoder.feed(data)
            except ProtocolError:
                return
            if not frames:
                continue
            payload = frames[0]
            codec = detect(payload)
            try:
                ident = codec.peek_request(payload)
            except (RemoteProtocolError, ProtocolError, ValueError):
                ident = None
            if ident is None:
                return
            request = RemotingCommand(code=ident[0], opaque=ident[1], codec=codec)
            answer = request.response(ResponseCode.SYSTEM_ERROR, REQUIRES_TLS)
            try:
                await stream.send_all(encode_frame(answer.encode(), max_frame_size))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            return


async def _close(stream: trio.abc.Stream) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(1):
        await stream.aclose()


async def accept(stream: trio.SocketStream, tls: ServerTls, ctx: ssl.SSLContext | None, *,
                 peer: str, first_byte_timeout: float, handshake_timeout: float,
                 max_frame_size: int, answer_plain: bool = True,
                 note: Callable[..., None] | None = None) -> trio.abc.Stream | None:
    """The stream to serve an accepted connection on: ``stream`` itself (plain),
    an SSLStream after its handshake, or None when the connection was refused
    or failed (it is then closed and logged). ``answer_plain``: a plain client
    of an enforcing server gets REQUIRES_TLS as the answer to its first request
    (remoting ports; not the HA port, which has no requests). ``note``: a
    rate-limited logger (Guard.note) for refusals, which any peer can repeat."""
    if note is None:
        def note(event: str, key: object, *, log_level: str = "info", **context: object) -> None:
            getattr(log, log_level)(event, **context)
    if ctx is None or tls.mode == DISABLED:
        return stream
    first = None
    with trio.move_on_after(first_byte_timeout):
        first = await peek_first_byte(stream)
    if first is None:
        await _close(stream)
        return None
    if not is_tls_first_byte(first):
        if tls.mode == PERMISSIVE:
            return stream
        note("plain connection refused: tlsMode=enforcing", ("tls-plain", peer.rpartition(":")[0]),
             log_level="info", peer=peer)
        if answer_plain:
            await refuse_plain(stream, max_frame_size)
        await _close(stream)
        return None
    ssl_stream = trio.SSLStream(stream, ctx, server_side=True)
    reason = f"no handshake within {handshake_timeout:g}s"
    with trio.move_on_after(handshake_timeout):
        try:
            await ssl_stream.do_handshake()
            return ssl_stream
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            reason = describe_tls_failure(exc)
    note("TLS handshake failed, connection closed", ("tls-handshake", peer.rpartition(":")[0]),
         log_level="info", peer=peer, reason=reason)
    await _close(stream)
    return None


# ---- client side -------------------------------------------------------------------


def describe_tls_failure(exc: BaseException) -> str:
    """A short reason for a failed handshake (the SSL error under trio's wrapper)."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"certificate verification failed: {cause.verify_message or cause}"
    if isinstance(cause, ssl.SSLEOFError | ConnectionResetError) or "EOF" in str(
            getattr(cause, "reason", "")):
        how = "reset" if isinstance(cause, ConnectionResetError) else "closed"
        return (f"the peer {how} the TLS connection (TLS off there, or it requires a "
                "client certificate: tls.server.need.client.auth)")
    if isinstance(cause, ssl.SSLError):
        return f"{cause.reason or cause}"
    if cause is not None:
        return f"{type(cause).__name__}: {cause}"
    return str(exc) or type(exc).__name__


async def connect(stream: trio.SocketStream, ctx: ssl.SSLContext, addr: str,
                  timeout: float) -> trio.SSLStream[trio.SocketStream]:
    """``stream`` after a TLS handshake with ``addr``. Raises RemotingConnectError
    whose text says what failed (certificate verification, a server without TLS,
    a timeout); the stream is closed then."""
    host = addr.rpartition(":")[0]
    ssl_stream = trio.SSLStream(stream, ctx, server_hostname=host if ctx.check_hostname else None)
    try:
        with trio.fail_after(timeout):
            await ssl_stream.do_handshake()
    except trio.TooSlowError:
        await _close(stream)
        raise RemotingConnectError(
            f"TLS handshake with {addr} timed out after {timeout:g}s") from None
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        await _close(stream)
        reason = describe_tls_failure(exc)
        cause = exc.__cause__ or exc.__context__
        if not isinstance(cause, ssl.SSLError):
            reason += " (does the server have TLS enabled? its tlsMode must not be disabled)"
        raise RemotingConnectError(f"TLS handshake with {addr} failed: {reason}") from exc
    return ssl_stream


__all__ = [
    "DISABLED", "ENFORCING", "PERMISSIVE", "REQUIRES_TLS", "TLS_MODES", "ClientTls", "ServerTls",
    "CLIENT_AUTH", "TlsConfigError", "accept", "client_tls", "connect", "describe_tls_failure",
    "client_tls_from_env", "is_tls_first_byte", "parse_client_auth", "parse_mode", "peek_first_byte", "refuse_plain", "server_tls_of",
]


# RocketMQ's clients turn TLS on with the system property tls.enable; ours (and
# every producer, consumer and admin client of a process that is not given TLS
# settings) with these environment variables.
ENV_ENABLE = "ROCKETMQ_TLS_ENABLE"
ENV_CA = "ROCKETMQ_TLS_CA"
ENV_CERT = "ROCKETMQ_TLS_CERT"
ENV_KEY = "ROCKETMQ_TLS_KEY"


def client_tls_from_env(env: dict[str, str] | None = None) -> ClientTls | None:
    """ClientTls from ROCKETMQ_TLS_* (None: TLS not enabled there). Pure given ``env``."""
    env = dict(os.environ) if env is None else env
    if env.get(ENV_ENABLE, "").strip().lower() not in ("1", "true", "yes", "on"):
        return None
    return ClientTls(ca_path=env.get(ENV_CA, ""), cert_path=env.get(ENV_CERT, ""),
                     key_path=env.get(ENV_KEY, ""))
