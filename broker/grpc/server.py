"""gRPC's server side on trio: an ASGI app behind our HTTP/2 edge.

``GrpcApp`` routes ``POST /<service>/<Method>`` to a handler from its table
(``Method``: the handler and whether it streams). A call always answers with
the response headers, then its messages (none is fine), then the trailers
holding ``grpc-status`` and ``grpc-message`` (never the trailers-only form,
which some clients misread). Around every handler:

- the request body is decoded as it arrives (broker/grpc/framing.py): a bad
  flag or an oversized message ends the call with that status;
- a unary call (``Method.streaming`` False: the client sends one message) is
  read whole and handled in the call's one task: no second task, nursery or
  channel per call; a streaming call has a task reading its requests into a
  small queue while its handler runs;
- ``grpc-timeout`` is enforced: past it the handler is cancelled and the call
  ends DEADLINE_EXCEEDED;
- a client that goes away (``http.disconnect``) cancels a streaming call's
  handler or a waiting one's (``Method.waits``: ReceiveMessage's long poll) at
  once; a quick unary handler runs to its end, its answer then dropped;
- a handler's ``GrpcError`` becomes its status; any other exception is logged
  and the call ends INTERNAL with no detail leaked.

``GrpcServer`` takes TLS as the remoting ports do (protocol/trio/tls.py ``accept``:
``tlsMode`` disabled/permissive/enforcing, one port for TLS and plaintext told apart
by the first byte, 0x16 for TLS's handshake record), offering ALPN ``h2``; a connection
whose first byte does not come within ``first_byte_timeout_s``, or whose handshake
does not end within HANDSHAKE_TIMEOUT_S, is closed before any HTTP/2 is spoken; a
plaintext connection to an enforcing port is closed unanswered.

``GrpcServer`` is the edge: HTTP/2 with h2 on trio sockets
(broker/grpc/h2_server.py: why not hypercorn, the limits, the one write per
answer), a task of the broker's nursery (``await nursery.start(server.run)``
reports the bound port; port 0 takes a free one). A connection carries any
number of calls over its life, at most MAX_CONCURRENT_CALLS at once, and is
closed after ``idle_timeout_s`` with none (a stream in progress, Telemetry's,
is never idle).
"""

from __future__ import annotations

import dataclasses
import math
import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import structlog
import trio

from broker.grpc.framing import (
    MAX_MESSAGE_BYTES,
    GrpcError,
    MessageDecoder,
    StatusCode,
    encode_message,
    parse_timeout,
    status_trailers,
)
from broker.grpc.h2_server import H2GrpcConnection
from protocol.trio.tls import DISABLED, ServerTls, accept

log = structlog.get_logger("broker.grpc")

# requests a call may have queued before its handler reads them
REQUEST_QUEUE = 2
# HTTP/2 streams (calls) open at once on one connection
MAX_CONCURRENT_CALLS = 100
# a request's header block, decoded (h2's default bound, hypercorn's too)
MAX_HEADER_LIST_BYTES = 65536
# request bytes a call (stream) or a connection may have sent that the app has not read
STREAM_WINDOW = 1024 * 1024
CONNECTION_WINDOW = 4 * 1024 * 1024
# a new connection's first byte (TLS's or HTTP/2's preface) and TLS handshake must come
# within these (the remoting port's handshake bound); a silent peer is dropped
FIRST_BYTE_TIMEOUT_S = 10.0
HANDSHAKE_TIMEOUT_S = 10.0


class Requests(Protocol):
    """Where a call's request messages come from."""

    async def next(self) -> bytes | None:
        """The next request message; None once the client has sent its last."""


class _Preread:
    """A unary call's request, read whole before its handler runs."""

    def __init__(self, messages: list[bytes]) -> None:
        self._messages = messages
        self._at = 0

    async def next(self) -> bytes | None:
        if self._at == len(self._messages):
            return None
        self._at += 1
        return self._messages[self._at - 1]


class _Streamed:
    """A streaming call's requests, from the task reading them as they arrive."""

    def __init__(self, channel: trio.MemoryReceiveChannel[bytes]) -> None:
        self._channel = channel

    async def next(self) -> bytes | None:
        try:
            return await self._channel.receive()
        except trio.EndOfChannel:
            return None


class Call:
    """One call as its handler sees it: ``recv`` the next request message (None
    when the client has sent its last), ``send`` a response message. ``peer``
    is the client's "host:port", ``metadata`` the request headers (lower-case
    names; the ``x-mq-*`` ones carry the client's id and language); ``deadline``
    the trio time its ``grpc-timeout`` ends the call at (inf: none given)."""

    def __init__(self, method: str, peer: str, metadata: dict[str, str],
                 requests: Requests, send: Callable[[bytes], Awaitable[None]]) -> None:
        self.method = method
        self.peer = peer
        self.metadata = metadata
        self._requests = requests
        self._send = send
        self.sent = 0
        self.deadline = math.inf

    async def recv(self) -> bytes | None:
        return await self._requests.next()

    async def send(self, payload: bytes) -> None:
        self.sent += 1
        await self._send(encode_message(payload))

    async def recv_one(self) -> bytes:
        """The single request of a unary call (INTERNAL when there is none or more)."""
        first = await self.recv()
        if first is None:
            raise GrpcError(StatusCode.INTERNAL, "a unary call sent no request message")
        if await self.recv() is not None:
            raise GrpcError(StatusCode.INTERNAL, "a unary call sent more than one request message")
        return first

    @property
    def client_id(self) -> str:
        return self.metadata.get("x-mq-client-id", "")


Handler = Callable[[Call], Awaitable[None]]


@dataclasses.dataclass(frozen=True, slots=True)
class Method:
    handler: Handler
    streaming: bool = False  # the client streams requests (Telemetry)
    # the handler may wait long (a long poll): a second task watches for the client going
    # away and cancels it; a quick unary handler just runs to its end
    waits: bool = False


def _peer(scope: dict[str, Any]) -> str:
    client = scope.get("client")
    if not client:
        return ""
    host, port = client[0], client[1]
    return f"{host}:{port}"


class GrpcApp:
    """The ASGI app: ``methods`` by path ("/apache.rocketmq.v2.MessagingService/SendMessage")."""

    def __init__(self, methods: dict[str, Method], *,
                 max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.methods = methods
        self.max_message_bytes = max_message_bytes
        self.calls = 0
        self.active = 0
        self._idle = trio.Event()
        self._idle.set()

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
        if scope.get("http_version") != "2" or scope.get("method") != "POST":
            body = b"gRPC only: HTTP/2 POST with content-type application/grpc\n"
            await send({"type": "http.response.start", "status": 415,
                        "headers": [(b"content-type", b"text/plain"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        self.calls += 1
        self.active += 1
        if self.active == 1:
            self._idle = trio.Event()
        try:
            await self._call(scope, receive, send)
        finally:
            self.active -= 1
            if self.active == 0:
                self._idle.set()

    async def idle(self) -> None:
        """Until no call is in progress."""
        await self._idle.wait()

    async def _call(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        metadata: dict[str, str] = {}
        for name, value in scope.get("headers", ()):
            metadata[name.decode("latin-1").lower()] = value.decode("latin-1")
        path = scope.get("path", "")
        peer = _peer(scope)
        await send({"type": "http.response.start", "status": 200, "trailers": True,
                    "headers": [(b"content-type", b"application/grpc")]})
        code, message = StatusCode.OK, ""
        disconnected = False
        try:
            if not metadata.get("content-type", "").startswith("application/grpc"):
                raise GrpcError(StatusCode.INTERNAL,
                                f"content-type {metadata.get('content-type', '')[:40]!r} is not "
                                "application/grpc")
            method = self.methods.get(path)
            if method is None:
                raise GrpcError(StatusCode.UNIMPLEMENTED, f"unknown method {path[:200]!r}")
            timeout = math.inf
            if "grpc-timeout" in metadata:
                timeout = parse_timeout(metadata["grpc-timeout"])
            decoder = MessageDecoder(self.max_message_bytes, metadata.get("grpc-encoding"))
            disconnected = await self._run(method, path, peer, metadata, decoder, timeout,
                                           receive, send)
        except GrpcError as exc:
            code, message = exc.code, exc.message
            if code is StatusCode.INTERNAL and method_known(self, path):
                log.bind(method=path, peer=peer).info("call refused", code=code.name,
                                                      reason=message)
        except Exception:
            # bound here, not once per call: binding takes about 20 us
            log.bind(method=path, peer=peer).exception("gRPC handler failed")
            code, message = StatusCode.INTERNAL, "internal error: see the broker's log"
        if disconnected:
            return
        try:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            await send({"type": "http.response.trailers",
                        "headers": status_trailers(code, message), "more_trailers": False})
        except Exception:  # the stream closed meanwhile: nobody to tell
            log.bind(method=path, peer=peer).debug("call ended after its stream closed",
                                                   code=code.name)

    async def _run(self, method: Method, path: str, peer: str, metadata: dict[str, str],
                   decoder: MessageDecoder, timeout: float, receive: Any, send: Any) -> bool:
        """Run the handler; True when the client went away first (nothing more to send)."""
        if method.streaming:
            return await self._run_streaming(method, path, peer, metadata, decoder, timeout,
                                             receive, send)
        return await self._run_unary(method, path, peer, metadata, decoder, timeout,
                                     receive, send)

    async def _run_unary(self, method: Method, path: str, peer: str, metadata: dict[str, str],
                         decoder: MessageDecoder, timeout: float, receive: Any,
                         send: Any) -> bool:
        """A call whose client sends one message: its request is read whole in this task,
        then the handler runs here too; only a handler that waits (``Method.waits``)
        has a second task watching for the client going away."""
        started = trio.current_time()
        messages: list[bytes] = []
        with trio.move_on_after(timeout) as reading:
            while True:
                event = await receive()
                if event["type"] == "http.disconnect":
                    return True
                messages += decoder.feed(event.get("body", b""))
                if len(messages) > 1:  # refused before a hostile client sends a million
                    raise GrpcError(StatusCode.INTERNAL,
                                    "a unary call sent more than one request message")
                if not event.get("more_body", False):
                    decoder.finish()
                    break
        if reading.cancelled_caught:
            raise GrpcError(StatusCode.DEADLINE_EXCEEDED, f"deadline of {timeout:.3f}s exceeded")
        call = Call(path, peer, metadata, _Preread(messages), send_body(send))
        call.deadline = started + timeout
        if not method.waits:
            with trio.move_on_at(call.deadline) as deadline:
                await method.handler(call)
            if deadline.cancelled_caught:
                raise GrpcError(StatusCode.DEADLINE_EXCEEDED,
                                f"deadline of {timeout:.3f}s exceeded")
            return False
        gone = False

        async def watch(cancel: trio.CancelScope) -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass  # nothing else may follow a whole request
            gone = True
            cancel.cancel()

        raised: Exception | None = None
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, scope)
                with trio.move_on_at(call.deadline) as deadline:
                    try:
                        await method.handler(call)
                    except Exception as exc:  # raised below, outside the nursery's group
                        raised = exc
                nursery.cancel_scope.cancel()
        if gone:
            return True
        if raised is not None:
            raise raised
        if deadline.cancelled_caught:
            raise GrpcError(StatusCode.DEADLINE_EXCEEDED, f"deadline of {timeout:.3f}s exceeded")
        return False

    async def _run_streaming(self, method: Method, path: str, peer: str,
                             metadata: dict[str, str], decoder: MessageDecoder, timeout: float,
                             receive: Any, send: Any) -> bool:
        """A call whose client streams: a task reads the request messages into a small
        queue as they come and watches for the client going away."""
        to_handler, requests = trio.open_memory_channel[bytes](REQUEST_QUEUE)
        gone = False
        failure: list[GrpcError] = []

        async def read(cancel: trio.CancelScope) -> None:
            nonlocal gone
            async with to_handler:
                while True:
                    event = await receive()
                    if event["type"] == "http.disconnect":
                        gone = True
                        cancel.cancel()
                        return
                    try:
                        for message in decoder.feed(event.get("body", b"")):
                            await to_handler.send(message)
                        if not event.get("more_body", False):
                            decoder.finish()
                            break
                    except GrpcError as exc:
                        failure.append(exc)
                        cancel.cancel()
                        return
            while True:  # the request is whole: only a disconnect may follow
                event = await receive()
                if event["type"] == "http.disconnect":
                    gone = True
                    cancel.cancel()
                    return

        call = Call(path, peer, metadata, _Streamed(requests), send_body(send))
        call.deadline = trio.current_time() + timeout
        raised: Exception | None = None
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read, scope)
                with trio.move_on_after(timeout) as deadline:
                    try:
                        await method.handler(call)
                    except Exception as exc:  # raised below, outside the nursery's group
                        raised = exc
                nursery.cancel_scope.cancel()
        if gone:
            return True
        if failure:
            raise failure[0]
        if raised is not None:
            raise raised
        if deadline.cancelled_caught:
            raise GrpcError(StatusCode.DEADLINE_EXCEEDED,
                            f"deadline of {timeout:.3f}s exceeded")
        return False


def send_body(send: Any) -> Callable[[bytes], Awaitable[None]]:
    """A call's ``send``: one framed message as a piece of the response body."""
    async def send_message(data: bytes) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": True})
    return send_message


def tls_context(tls: ServerTls) -> ssl.SSLContext | None:
    """The gRPC port's SSLContext (None: no TLS offered): the remoting ports' certificate
    settings, with ALPN offering HTTP/2 (gRPC clients refuse a TLS server that does not
    select ``h2``). Raises TlsConfigError for settings that cannot work."""
    ctx = tls.context()
    if ctx is not None:
        ctx.set_alpn_protocols(["h2"])
    return ctx


def method_known(app: GrpcApp, path: str) -> bool:
    return path in app.methods


class GrpcServer:
    """``app`` on ``host:port`` over HTTP/2 (broker/grpc/h2_server.py), in the caller's
    nursery. ``stop()`` closes the listener; calls in progress then have ``grace_s`` to
    end before their connections are closed."""

    def __init__(self, app: GrpcApp, host: str, port: int, *,
                 idle_timeout_s: float = 120.0, grace_s: float = 2.0,
                 tls: ServerTls | None = None,
                 first_byte_timeout_s: float = FIRST_BYTE_TIMEOUT_S) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.idle_timeout_s = idle_timeout_s
        self.grace_s = grace_s
        self.connections = 0
        self.refused = 0  # connections closed before HTTP/2: plain on enforcing, bad TLS, silent
        self.tls = tls if tls is not None else ServerTls(mode=DISABLED)
        self.first_byte_timeout_s = first_byte_timeout_s
        self._ssl_context = tls_context(self.tls)
        self._stop = trio.Event()

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``stop()`` or cancelled; reports the bound port."""
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as connections:
            async with trio.open_nursery() as accepting:
                accepting.start_soon(partial(trio.serve_listeners, self._serve, listeners,
                                             handler_nursery=connections))
                log.info("gRPC served", address=f"{self.host}:{self.port}")
                task_status.started(self.port)
                await self._stop.wait()
                accepting.cancel_scope.cancel()
            with trio.move_on_after(self.grace_s):
                await self.app.idle()
            connections.cancel_scope.cancel()

    async def _serve(self, stream: trio.SocketStream) -> None:
        try:
            client = stream.socket.getpeername()[:2]
            server = stream.socket.getsockname()[:2]
        except OSError:
            return
        peer = f"{client[0]}:{client[1]}"
        served: trio.abc.Stream = stream
        if self._ssl_context is not None:
            accepted = await accept(stream, self.tls, self._ssl_context, peer=peer,
                                  first_byte_timeout=self.first_byte_timeout_s,
                                  handshake_timeout=HANDSHAKE_TIMEOUT_S, max_frame_size=0,
                                  answer_plain=False)
            if accepted is None:
                self.refused += 1
                return
            served = accepted
        else:  # no TLS to sniff for: the HTTP/2 preface must still come in time
            with trio.move_on_after(self.first_byte_timeout_s) as waiting:
                await trio.lowlevel.wait_readable(stream.socket)
            if waiting.cancelled_caught:
                self.refused += 1
                log.info("gRPC connection closed: nothing received",
                         peer=peer, within_s=self.first_byte_timeout_s)
                await stream.aclose()
                return
        conn = H2GrpcConnection(
            self.app, served, max_streams=MAX_CONCURRENT_CALLS,
            max_header_list_size=MAX_HEADER_LIST_BYTES, stream_window=STREAM_WINDOW,
            connection_window=CONNECTION_WINDOW, idle_timeout_s=self.idle_timeout_s,
            client=(client[0], client[1]), server=(server[0], server[1]))
        self.connections += 1
        try:
            await conn.run()
        except Exception:  # one connection's failure is not the server's
            log.exception("gRPC connection failed", peer=f"{client[0]}:{client[1]}")
        finally:
            self.connections -= 1

    def stop(self) -> None:
        self._stop.set()


__all__ = ["Call", "GrpcApp", "GrpcServer", "Handler", "Method"]
