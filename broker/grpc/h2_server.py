"""HTTP/2 for the gRPC endpoint: h2's sans-IO connection on a trio socket, each call
handed to an ASGI app (``GrpcApp``) as hypercorn would hand it.

Why not hypercorn: with the call's own work cut to one task, a trivial unary call from
grpcio still cost about 1.2 ms of server CPU in hypercorn's HTTP/2 path (a task and a
queue per request, an idle-timer task restarted per request, a sender task woken
through an event and a priority tree, a lock and a write each for the headers, the
message and the trailers: 15 turns of trio's scheduler a call) against about 0.7 ms
here (3 turns, one write); a SendMessage of the official client went from 2.3-3.3 ms
of broker CPU to 1.0-1.7 ms (docs/grpc.md). This edge keeps what hypercorn enforced
and does less:

- one task per connection reads and feeds h2; each request runs the app in a task of
  its own; the app's ``send`` only queues frames in h2, and one writer task per
  connection sends whatever is queued in one write when it next runs: a unary
  answer (headers, message, trailers) leaves as one write;
- limits: at most ``max_streams`` calls at once on a connection (h2 refuses one more
  as a connection error, GOAWAY), a header list of at most ``max_header_list_size``
  bytes (h2's HPACK decoder), frames of at most 16 KiB, h2's own checks of inbound
  headers (pseudo-headers, connection-specific fields, upper case);
- a request's body is acknowledged to the client (WINDOW_UPDATE) only as the app
  receives it: a call whose handler does not read holds at most its stream window
  (``stream_window`` bytes) in memory, a connection at most ``connection_window``;
- a response's DATA waits for the client's flow-control window;
- a call whose stream the client resets, or whose connection ends, gets
  ``http.disconnect``; a call the app ends without ending its stream is reset
  (CANCEL);
- a connection with no call for ``idle_timeout_s`` is closed (GOAWAY); a client's
  GOAWAY or a broken connection ends every call of it (``http.disconnect``).

The app sees ``http.response.start`` (headers frame), ``http.response.body``,
``http.response.trailers`` (headers frame ending the stream), as from hypercorn; a
``http.response.body`` without ``more_body`` after a start that announced no
trailers ends the stream.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import structlog
import trio

log = structlog.get_logger("broker.grpc")

App = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]],
                Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]

READ_BYTES = 65536
LAST_WRITE_S = 1.0  # a closing connection's last frames (GOAWAY) get this long to leave
MAX_FRAME_SIZE = 16384


class _Stream:
    """One call: the request events the app has yet to receive, and what it has sent."""

    __slots__ = ("ended", "events", "gone", "id", "more", "trailers")

    def __init__(self, stream_id: int) -> None:
        self.id = stream_id
        # (event, flow-controlled bytes to acknowledge once the app takes it)
        self.events: deque[tuple[dict[str, Any], int]] = deque()
        self.more = trio.Event()  # set when events has something
        self.gone = False  # reset by the client or the connection ended
        self.ended = False  # our side of the stream ended
        self.trailers = False


class H2GrpcConnection:
    """One client connection: h2's state, its calls, its writer."""

    def __init__(self, app: App, stream: trio.abc.Stream, *, max_streams: int,
                 max_header_list_size: int, stream_window: int, connection_window: int,
                 idle_timeout_s: float, client: tuple[str, int] | None,
                 server: tuple[str, int] | None) -> None:
        self.app = app
        self.socket = stream
        self.client = client
        self.server = server
        self.idle_timeout_s = idle_timeout_s
        config = h2.config.H2Configuration(
            client_side=False, header_encoding=None,
            # our own response headers are well formed: checking them costs a third of
            # sending them; inbound headers are checked as h2 does by default
            validate_outbound_headers=False, normalize_outbound_headers=False)
        self.conn = h2.connection.H2Connection(config)
        self.conn.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: max_streams,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: max_header_list_size,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: stream_window,
            h2.settings.SettingCodes.MAX_FRAME_SIZE: MAX_FRAME_SIZE,
        })
        self.conn.decoder.max_header_list_size = max_header_list_size
        self.connection_window = connection_window
        self.streams: dict[int, _Stream] = {}
        self._dirty = trio.Event()
        self._window = trio.Event()  # set (and replaced) when the client opens windows
        self._closed = False
        self._read_scope = trio.CancelScope()

    # ---- the connection's tasks ----------------------------------------------------

    async def run(self) -> None:
        self.conn.initiate_connection()
        grow = self.connection_window - self.conn.inbound_flow_control_window
        if grow > 0:
            self.conn.increment_flow_control_window(grow)
        written = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop, written)
                self._dirty.set()
                self._idle()
                try:
                    await self._read_loop(nursery)
                finally:
                    self._closed = True
                    for st in list(self.streams.values()):
                        self._gone(st)
                    self._dirty.set()  # the writer sends what is left (a GOAWAY) and ends
                    with trio.move_on_after(LAST_WRITE_S):
                        await written.wait()
                    nursery.cancel_scope.cancel()
        finally:
            await self.socket.aclose()

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        with self._read_scope:
            while True:
                try:
                    data = await self.socket.receive_some(READ_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                if not data:
                    return
                try:
                    events = self.conn.receive_data(data)
                except h2.exceptions.ProtocolError as exc:
                    # h2 has queued a GOAWAY: the writer sends it, then the connection closes
                    log.info("gRPC connection refused", peer=_addr(self.client),
                             reason=str(exc)[:200])
                    return
                for event in events:
                    if isinstance(event, h2.events.ConnectionTerminated):
                        return  # the client's GOAWAY
                    self._on_event(event, nursery)
                self._dirty.set()
        if self._read_scope.cancelled_caught:  # no call for idle_timeout_s, or the writer failed
            try:
                self.conn.close_connection()
            except h2.exceptions.ProtocolError:
                pass

    async def _write_loop(self, written: trio.Event) -> None:
        """The only task writing to the socket: whatever h2 has queued, in one write each
        time it runs; ends once the connection is closed and all is sent."""
        try:
            while True:
                await self._dirty.wait()
                self._dirty = trio.Event()
                data = self.conn.data_to_send()
                if data:
                    await self.socket.send_all(data)
                if self._closed and not self._dirty.is_set():
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._read_scope.cancel()
        finally:
            written.set()

    def _idle(self) -> None:
        """The read loop ends idle_timeout_s after the last call ended (none running)."""
        self._read_scope.deadline = (trio.current_time() + self.idle_timeout_s
                                     if not self.streams else math.inf)

    # ---- events from the client ------------------------------------------------------

    def _on_event(self, event: h2.events.Event, nursery: trio.Nursery) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self._request(event, nursery)
        elif isinstance(event, h2.events.DataReceived):
            if not event.stream_id:  # h2 gives DATA on stream 0 as a connection error
                return
            st = self.streams.get(event.stream_id)
            if st is None or st.gone:  # nobody reads it: its room goes back at once
                self._acknowledge(event.flow_controlled_length or 0, event.stream_id)
                return
            st.events.append(({"type": "http.request", "body": event.data or b"",
                               "more_body": True}, event.flow_controlled_length))
            st.more.set()
        elif isinstance(event, h2.events.StreamEnded):
            st = self.streams.get(event.stream_id or 0)
            if st is not None:
                st.events.append(({"type": "http.request", "body": b"", "more_body": False}, 0))
                st.more.set()
        elif isinstance(event, h2.events.StreamReset):
            st = self.streams.get(event.stream_id or 0)
            if st is not None:
                self._gone(st)
            self._window_opened()
        elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            self._window_opened()

    def _request(self, event: h2.events.RequestReceived, nursery: trio.Nursery) -> None:
        sid = event.stream_id or 0
        method = path = b""
        headers: list[tuple[bytes, bytes]] = []
        for name, value in event.headers or ():
            name, value = bytes(name), bytes(value)
            if name.startswith(b":"):
                if name == b":method":
                    method = value
                elif name == b":path":
                    path = value
            else:
                headers.append((name, value))
        raw_path, _, query = path.partition(b"?")
        scope: dict[str, Any] = {
            "type": "http", "http_version": "2", "method": method.decode("latin-1"),
            "scheme": "http", "path": raw_path.decode("latin-1"), "raw_path": raw_path,
            "query_string": query, "root_path": "", "headers": headers,
            "client": self.client, "server": self.server,
            "extensions": {"http.response.trailers": {}},
        }
        st = _Stream(sid)
        self.streams[sid] = st
        self._idle()
        nursery.start_soon(self._call, st, scope)

    def _gone(self, st: _Stream) -> None:
        st.gone = True
        self._drop(st)
        st.events.append(({"type": "http.disconnect"}, 0))
        st.more.set()
        self._window_opened()

    def _drop(self, st: _Stream) -> None:
        """Forget the request data the app has not read, giving its room in the
        connection's window back (else resets would shrink it for good)."""
        unread = sum(size for _event, size in st.events)
        st.events.clear()
        if unread and not self._closed:
            self._acknowledge(unread, st.id)

    def _acknowledge(self, size: int, stream_id: int) -> None:
        """``size`` bytes of ``stream_id`` read: their room goes back to the client."""
        try:
            self.conn.acknowledge_received_data(size, stream_id)
        except h2.exceptions.ProtocolError:
            return  # the connection is closing
        self._dirty.set()

    def _window_opened(self) -> None:
        self._window.set()
        self._window = trio.Event()

    # ---- one call ----------------------------------------------------------------------

    async def _call(self, st: _Stream, scope: dict[str, Any]) -> None:
        async def receive() -> dict[str, Any]:
            while not st.events:
                await st.more.wait()
                st.more = trio.Event()
            event, size = st.events.popleft()
            if size and not st.gone and not self._closed:
                self._acknowledge(size, st.id)
            return event

        async def send(message: dict[str, Any]) -> None:
            await self._send(st, message)

        try:
            await self.app(scope, receive, send)
        except Exception:
            log.exception("gRPC call failed in the app", peer=_addr(self.client))
        finally:
            if not st.ended and not st.gone and not self._closed:
                try:
                    self.conn.reset_stream(st.id, h2.errors.ErrorCodes.CANCEL)
                except h2.exceptions.ProtocolError:
                    pass
                self._dirty.set()
            self._drop(st)
            del self.streams[st.id]
            self._idle()

    async def _send(self, st: _Stream, message: dict[str, Any]) -> None:
        if st.gone or st.ended or self._closed:
            return  # nobody to tell: as hypercorn, drop it
        kind = message["type"]
        try:
            if kind == "http.response.start":
                st.trailers = bool(message.get("trailers", False))
                self.conn.send_headers(st.id, [(b":status", b"%d" % int(message["status"])),
                                               *message.get("headers", ())])
            elif kind == "http.response.body":
                await self._send_data(st, bytes(message.get("body", b"")))
                if not message.get("more_body", False) and not st.trailers \
                        and not st.gone and not self._closed:
                    self.conn.end_stream(st.id)
                    st.ended = True
            elif kind == "http.response.trailers":
                self.conn.send_headers(st.id, list(message.get("headers", ())),
                                       end_stream=True)
                st.ended = True
            else:
                raise ValueError(f"unexpected ASGI message {kind!r}")
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            st.gone = True  # the stream closed meanwhile
            return
        self._dirty.set()

    async def _send_data(self, st: _Stream, data: bytes) -> None:
        view = memoryview(data)
        while view and not st.gone and not self._closed:
            size = min(self.conn.local_flow_control_window(st.id),
                       self.conn.max_outbound_frame_size, len(view))
            if size <= 0:
                self._dirty.set()
                await self._window.wait()
                continue
            self.conn.send_data(st.id, view[:size].tobytes())
            view = view[size:]
            if view:
                self._dirty.set()


def _addr(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else ""


__all__ = ["App", "H2GrpcConnection"]
