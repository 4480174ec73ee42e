"""RemotingConnection: symmetric framed RPC over one trio stream.

Either side may send requests; responses are matched by opaque; many requests
are in flight at once. Outgoing frames are queued without an await and a
writer task sends everything that is ready in one ``send_all``; the reader
takes large chunks and handles every complete frame in them.

Handlers are registered per request code. A plain function runs inline in the
reader loop and returns the response (or None to answer later through
``send_response``, e.g. a held long poll or a sync-flush wait); an ``async``
function is started as a task of the connection.
"""

from __future__ import annotations

import heapq
import inspect
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
import trio

from protocol.codecs import detect
from protocol.codecs.base import MAX_HEADER_BYTES, Codec
from protocol.codes import RequestCode, ResponseCode, code_name
from protocol.command import FLAG_RESPONSE, RemotingCommand
from protocol.errors import MalformedRequestError, ProtocolError, RemoteProtocolError
from protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame, frame_parts, unsent
from protocol.trio.busy_poll import BusyPoll, active
from protocol.trio.errors import (
    RemotingConnectError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from protocol.trio.limits import ConnectionLimits, Lanes, SharedBudget, may_finish_all
from protocol.trio.preauth import Judgement, PreAuth, Verdict
from protocol.trio.tls import describe_tls_failure

SyncHandler = Callable[["RemotingConnection", RemotingCommand], RemotingCommand | None]
AsyncHandler = Callable[["RemotingConnection", RemotingCommand], Awaitable[RemotingCommand | None]]
Handler = SyncHandler | AsyncHandler

RECEIVE_CHUNK = 256 * 1024
# Above this many queued outgoing bytes, invoke() waits for the writer.
HIGH_WATER = 8 * 1024 * 1024
# the most pieces one sendmsg takes (Linux's IOV_MAX); more are joined first
_IOV_MAX = 1024
# The reader lets other tasks run after this many requests of one received
# chunk, or after this long handling them, whichever comes first.
YIELD_EVERY = 64
YIELD_AFTER_S = 0.002
# Before authentication (protocol/trio/preauth.py) a connection reads at most
# this much at a time, and this little while the pre-auth budget is spent:
# what connections read beyond that budget stays a small multiple of their number
PRE_AUTH_CHUNK = 64 * 1024
PRE_AUTH_SPENT_CHUNK = 4 * 1024
# what is read of a frame held in part to judge its header (a little past the
# longest header a codec takes)
HEADER_PEEK = MAX_HEADER_BYTES + 64
# After a refusal that closes the connection: how long, and how many bytes the
# peer still sends, the connection reads (and drops) once its answer is written
# and its end of the stream closed, so that closing it does not reset the
# connection before the peer has read the answer.
LINGER_S = 1.0
LINGER_MAX_BYTES = 1024 * 1024

log = structlog.get_logger("remoting")


class HandlerTable:
    """Request handlers keyed by request code."""

    def __init__(self) -> None:
        self._sync: dict[int, SyncHandler] = {}
        self._async: dict[int, AsyncHandler] = {}

    def register(self, code: int, handler: Handler) -> None:
        if inspect.iscoroutinefunction(handler):
            self._async[int(code)] = handler
        else:
            self._sync[int(code)] = handler  # type: ignore[assignment]

    def lookup(self, code: int) -> tuple[SyncHandler | None, AsyncHandler | None]:
        return self._sync.get(code), self._async.get(code)


def budget_room(*budgets: SharedBudget) -> trio.Event:
    """An event set when one of ``budgets`` is back under its limit, or its
    turn to finish a frame is given up."""
    event = trio.Event()
    for budget in budgets:
        budget.waiters.append(event.set)
    return event


class _Pending:
    __slots__ = ("event", "response", "done")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: RemotingCommand | None = None
        self.done = False  # invoke() returned (answered, timed out or cancelled)


class RemotingConnection:
    """One connection. Call ``run()`` in a nursery; it returns when the peer goes."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        handlers: HandlerTable | None = None,
        *,
        remote_addr: str = "?",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        limits: ConnectionLimits | None = None,
        budget: SharedBudget | None = None,
        lanes: Lanes | None = None,
        codec: Codec | None = None,
        busy_poll: BusyPoll | None = None,
        preauth: PreAuth | None = None,
    ) -> None:
        self.stream = stream
        # The connection's codec: given by who opens it, else read from the
        # peer's first frame. A command without a codec of its own (a request
        # this side starts) travels in it.
        self.codec = codec
        self.handlers = handlers or HandlerTable()
        self.remote_addr = remote_addr
        self.max_frame_size = max_frame_size
        self.limits = limits or ConnectionLimits()
        self._budget = budget
        self._lanes = lanes
        # ACL on (protocol/trio/preauth.py): until a request passed the ACL check,
        # frames are judged on their header and bounded by the pre-auth limits
        self._preauth = preauth
        self.authenticated = preauth is None
        self._pre_buffered = 0  # the part of _buffered counted in the pre-auth budget
        self._judged = False  # the header of the frame held in part was judged: read on
        self._linger = False  # a refusal was answered: close once the peer had it
        # the process's spin window (protocol/trio/busy_poll.py): touched on
        # every chunk read and frame queued; None when off
        self._busy_poll = active(busy_poll)
        self.attrs: dict[str, Any] = {}
        self.closed = False
        # why the peer's side failed, when it says more than "closed" (a TLS alert)
        self.close_reason = ""
        self._decoder = FrameDecoder(max_frame_size)
        self._out: list[bytes | memoryview] = []  # frames, or pieces of frames, in order
        self._out_bytes = 0
        # bytes queued or being written (what the peer is owed), and the part
        # of it and of the decoder's partial frame counted in the shared budget
        self._owed = 0
        self._buffered = 0
        self._write_progress: trio.Event | None = None
        now = trio.current_time()
        self.last_read = now
        self.last_write = now
        self.partial_since: float | None = None
        # requests taken and not answered yet: opaque -> how many
        self._unanswered: dict[int, int] = {}
        self.unanswered = 0
        self._wake: trio.Event | None = None
        self._drained = trio.Event()
        self._sending = False
        self._idle = trio.Event()
        # The plain socket under a trio SocketStream, for the direct-send fast path.
        self._raw: Any = getattr(getattr(stream, "socket", None), "_sock", None)
        self._batching = False  # set while the reader handles one received chunk
        # work a handler left until the chunk's answers are written (after_answers)
        self._after: list[Callable[[], None]] = []
        self._pending: dict[int, _Pending] = {}
        # invoke() deadlines, earliest first: (deadline, opaque, pending). One
        # task wakes the requests whose time is up (_expire_requests) instead
        # of a cancel scope per request, which cost 15% of a small send.
        self._deadlines: list[tuple[float, int, _Pending]] = []
        self._expiry_at = math.inf
        self._expiry_wake: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._close_callbacks: list[Callable[[RemotingConnection], None]] = []
        self._log = log.bind(peer=remote_addr)
        # requests and oneways this side started that were dropped because the
        # peer was not reading (offer), and their bytes
        self.dropped_requests = 0
        self.dropped_bytes = 0
        # requests refused as malformed (the first is logged)
        self._malformed = 0

    # ---- lifecycle -----------------------------------------------------------

    def on_close(self, callback: Callable[[RemotingConnection], None]) -> None:
        self._close_callbacks.append(callback)

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the connection until the peer goes or ``close()``.

        A firewall: whatever a peer sends and whatever a handler raises, an
        unexpected exception closes this connection with one logged traceback
        and never propagates to the server (or client) running it.
        """
        started = False
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                nursery.start_soon(self._expire_requests)
                task_status.started()
                started = True
                await self._reader()
                nursery.cancel_scope.cancel()
        except Exception:
            self._log.exception("connection failed, closing it")
            if not started:
                raise
        finally:
            self._shutdown()
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1):
                    await self.stream.aclose()

    def close(self) -> None:
        """Ask the connection to stop; ``run()`` returns soon after."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        self._shutdown()

    def _shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._owe(-self._owed)
        self._account_buffered(0)
        self._unanswered.clear()
        self.unanswered = 0
        if self._write_progress is not None:
            self._write_progress.set()
        for pending in self._pending.values():
            pending.event.set()
        self._pending.clear()
        self._drained.set()
        self._idle.set()
        for cb in self._close_callbacks:
            try:
                cb(self)
            except Exception:
                self._log.exception("close callback failed")

    def spawn(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a task for as long as the connection lives."""
        if self._nursery is None or self.closed:
            raise RemotingConnectError("connection is closed")
        self._nursery.start_soon(async_fn, *args)

    # ---- what the connection holds for its peer ---------------------------------

    def _owe(self, n: int) -> None:
        """``n`` more (or fewer) bytes queued or being written to the peer."""
        self._owed += n
        if self._budget is not None:
            self._budget.add(n)

    def _account_buffered(self, buffered: int) -> None:
        """The decoder now holds ``buffered`` bytes of a partial frame."""
        if self._budget is not None:
            self._budget.add(buffered - self._buffered)
            if not buffered:
                self._budget.finished(self)
        pre = self._pre_budget
        if pre is not None:
            pre.add(buffered - self._pre_buffered)
            self._pre_buffered = buffered
            if not buffered:
                pre.finished(self)
        self._buffered = buffered

    @property
    def _pre_budget(self) -> SharedBudget | None:
        """The pre-auth budget, while this connection is counted in it."""
        if self.authenticated or self._preauth is None:
            return None
        return self._preauth.budget

    def _budgets(self) -> list[SharedBudget]:
        """The budgets this connection's partial frame is counted in."""
        return [b for b in (self._budget, self._pre_budget) if b is not None]

    def authenticate(self) -> None:
        """A request on this connection passed the ACL check (the daemon's
        guard says so): the pre-auth limits no longer apply to it."""
        if self.authenticated:
            return
        pre = self._pre_budget
        self.authenticated = True
        if pre is not None:
            pre.add(-self._pre_buffered)
            self._pre_buffered = 0
            pre.finished(self)

    @property
    def owed(self) -> int:
        """Bytes queued for or being written to the peer."""
        return self._owed

    def expired(self, now: float) -> str | None:
        """Why the connection should be closed at ``now`` (None: it should not):
        silent too long, owing bytes to a peer that reads none, or holding a
        frame that does not complete."""
        lim = self.limits
        if self._owed > 0 and now - self.last_write > lim.idle_timeout:
            return (f"the peer read nothing for {lim.idle_timeout:g}s while "
                    f"{self._owed} bytes were owed to it")
        if self.partial_since is not None and now - self.partial_since > lim.frame_timeout:
            return (f"a frame started {now - self.partial_since:.0f}s ago did not complete "
                    f"({self._decoder.buffered} bytes of it received)")
        if self._owed == 0 and now - max(self.last_read, self.last_write) > lim.idle_timeout:
            return f"no traffic for {lim.idle_timeout:g}s"
        return None

    def _must_wait(self) -> bool:
        """Whether the reader must stop taking requests for now."""
        if self.closed:
            return False
        if self._owed > self.limits.write_high_water:
            return True
        budget = self._budget
        over = budget is not None and budget.over
        if over and self._owed > 0:
            return True
        pre = self._pre_budget
        if not (over or pre is not None and pre.over) or not self._buffered:
            return False
        # holding only part of a frame past a budget: one such connection at a
        # time (in every budget it is counted in) reads on to complete it
        # (_finishing), so that partial frames never hold a budget with none
        # able to complete
        return not may_finish_all(self, self._budgets())

    def _finishing(self) -> bool:
        """Whether this connection reads past a budget only to complete the
        frame it holds part of."""
        return any(b.finishing is self and b.over for b in self._budgets())

    def _chunk(self) -> int:
        """How much to read next."""
        missing = self._decoder.missing
        if missing and self._finishing():  # past a budget: the rest of its frame only
            return min(RECEIVE_CHUNK, missing)
        pre = self._pre_budget
        if pre is None:
            return RECEIVE_CHUNK
        return PRE_AUTH_SPENT_CHUNK if pre.over else PRE_AUTH_CHUNK

    async def _wait_for_room(self) -> None:
        """Back-pressure: while the peer is owed more than the high-water mark,
        read nothing until it is under the low-water mark; while the server's
        connections together hold more than their budget, a connection holding
        any of it reads nothing (before authentication, the same within the
        pre-auth budget)."""
        while self._must_wait():
            if self._owed > self.limits.write_high_water:
                while self._owed > self.limits.write_low_water and not self.closed:
                    progress = self._write_progress = trio.Event()
                    await progress.wait()
                continue
            # woken when a total falls back under its budget, or a turn to
            # finish a frame is given up (or this one closes)
            await budget_room(*self._budgets()).wait()

    def _answered(self, opaque: int) -> None:
        n = self._unanswered.get(opaque)
        if n is None:
            return
        self.unanswered -= 1
        if n <= 1:
            del self._unanswered[opaque]
        else:
            self._unanswered[opaque] = n - 1

    # ---- sending -------------------------------------------------------------

    def _encode(self, cmd: RemotingCommand) -> list[bytes | memoryview]:
        """The frame of ``cmd``, in pieces (a large body is one of them, not
        copied). A response that cannot be framed (too large, or holding what
        its codec cannot encode) becomes a short SYSTEM_ERROR response; a
        request that cannot be framed raises RemotingSendRequestError."""
        codec = cmd.codec
        if codec is None:
            codec = cmd.codec = self.codec
        try:
            return frame_parts(cmd.encode_parts(), self.max_frame_size)
        except (ProtocolError, TypeError, ValueError, OverflowError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if not cmd.flag & FLAG_RESPONSE:
                raise RemotingSendRequestError(
                    f"request {code_name(cmd.code, False)} cannot be framed: {reason}"
                ) from exc
            self._log.warning("response cannot be framed, answering an error instead",
                              code=cmd.code, opaque=cmd.opaque, error=reason[:200])
            error = RemotingCommand(
                code=ResponseCode.SYSTEM_ERROR, opaque=cmd.opaque, flag=FLAG_RESPONSE,
                remark=f"the response cannot be sent: {reason[:200]}", codec=codec,
            )
            return [encode_frame(error.encode(), self.max_frame_size)]

    def _enqueue(self, cmd: RemotingCommand) -> None:
        if self.closed:
            raise RemotingSendRequestError(f"connection to {self.remote_addr} is closed")
        frame = self._encode(cmd)
        size = sum(map(len, frame)) if len(frame) > 1 else len(frame[0])
        self._enqueue_frame(frame, size)

    def _enqueue_frame(self, frame: list[bytes | memoryview], size: int) -> None:
        if self._busy_poll is not None:
            self._busy_poll.touch()
        if not self._out and not self._sending and not self._batching and self._raw is not None:
            # Nothing queued and the writer is idle: try the socket right away,
            # which saves a task switch per frame; the writer takes any rest.
            sent = self._send_now(frame)
            if sent == size:
                return
            frame = unsent(frame, sent)
            size -= sent
        self._out += frame
        self._out_bytes += size
        self._owe(size)
        if not self._batching:
            self._wake_writer()

    def _send_now(self, pieces: list[bytes | memoryview]) -> int:
        """Write what the socket takes of ``pieces`` without waiting (one
        gathering write for several); the bytes written, 0 on any error (the
        writer's send_all will see it and close)."""
        try:
            if len(pieces) == 1:
                return int(self._raw.send(pieces[0]))
            if len(pieces) <= _IOV_MAX:
                return int(self._raw.sendmsg(pieces))
            return int(self._raw.send(b"".join(pieces)))
        except OSError:  # BlockingIOError and InterruptedError included
            return 0

    def _wake_writer(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    def _flush_batch(self) -> None:
        """After a received chunk: send every queued frame in one write if we
        can, then run what handlers left for after their answers."""
        self._batching = False
        if self._out:
            self._write_queued()
        if self._after:
            self._run_after()

    def _write_queued(self) -> None:
        if not self._sending and self._raw is not None and not self.closed:
            out = self._out
            sent = self._send_now(out)
            if sent:
                self._owe(-sent)
                self.last_write = trio.current_time()
            if sent == self._out_bytes:
                out.clear()
                self._out_bytes = 0
                return
            self._out = unsent(out, sent)
            self._out_bytes -= sent
        self._wake_writer()

    def after_answers(self, work: Callable[[], None]) -> None:
        """Run ``work`` once the answers queued so far are written (or handed
        to the writer): a request's work its peer need not wait for (the
        store's indexing of a send). It runs before this connection handles
        another frame and before the reader yields to any other task, so no
        request anywhere sees it undone. Outside a received chunk (an async
        handler's), it runs at once."""
        if self._batching:
            self._after.append(work)
        else:
            self._call(work)

    def _run_after(self) -> None:
        after = self._after
        self._after = []
        for work in after:
            self._call(work)

    def _call(self, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception:
            self._log.exception("work after the answers failed")

    def send_response(self, response: RemotingCommand) -> None:
        """Queue a response (or any command) without waiting. Dropped if closed;
        never raises (a request that cannot be framed is logged and dropped).
        A request or oneway goes through ``offer`` (dropped while the peer does
        not read). A response that leaves the peer owed more than the limits'
        ``owed_cap`` closes the connection: the peer asked and does not read
        the answers, and the backlog is its, not the daemon's, to hold."""
        if self.closed:
            return
        if not response.flag & FLAG_RESPONSE:
            self.offer(response)
            return
        if self.unanswered:
            self._answered(response.opaque)
        try:
            self._enqueue(response)
        except RemotingSendRequestError as exc:
            self._log.warning("command dropped", error=str(exc)[:300])
            return
        if self._owed > self.limits.owed_cap:
            self.close_reason = (f"the peer does not read its answers: {self._owed} bytes "
                                 f"owed to it, more than {self.limits.owed_cap}")
            self._log.warning("connection closed", reason=self.close_reason)
            self.close()

    @property
    def takes_requests(self) -> bool:
        """Whether to start a request toward the peer now: open, and the peer
        owed no more than the low-water mark. Between the marks ``offer``
        still queues, but a caller that must build what it sends (a
        transaction check reads a half message) waits for the peer to read
        first, as the reader does (hysteresis: no building and dropping at
        every pass while the peer reads nothing)."""
        return not self.closed and self._owed <= self.limits.write_low_water

    def offer(self, cmd: RemotingCommand) -> bool:
        """Queue a request or oneway this side starts (a transaction check, a
        rebalance notice), without waiting, if the peer is reading: True when
        queued. While the peer is owed bytes and this one would take it past
        the high-water mark, it is dropped instead, counted
        (``dropped_requests``) and logged now and then: what a broker queues
        for a peer that reads nothing stays bounded. The caller decides what
        a dropped one means (a transaction check is asked again next pass)."""
        if self.closed:
            return False
        try:
            frame = self._encode(cmd)
        except RemotingSendRequestError as exc:
            self._log.warning("command dropped", error=str(exc)[:300])
            return False
        size = sum(map(len, frame))
        if self._owed > 0 and self._owed + size > self.limits.write_high_water:
            self.dropped_requests += 1
            self.dropped_bytes += size
            n = self.dropped_requests
            if n & (n - 1) == 0:  # the 1st, 2nd, 4th, 8th, ...: rate-limited
                self._log.warning("the peer does not read: request dropped",
                                  code=code_name(cmd.code, False), owed=self._owed,
                                  high_water=self.limits.write_high_water, dropped=n)
            return False
        self._enqueue_frame(frame, size)
        return True

    async def _writer(self) -> None:
        stream = self.stream
        while True:
            if not self._out:
                self._idle.set()
                wake = self._wake = trio.Event()
                await wake.wait()
                continue
            if self._idle.is_set():
                self._idle = trio.Event()
            data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
            self._out.clear()
            self._out_bytes = 0
            self._drained.set()
            self._drained = trio.Event()
            self._sending = True
            try:
                await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                self._log.info("connection write failed", error=str(exc))
                self.close()
                return
            finally:
                self._sending = False
            self._owe(-len(data))
            self.last_write = trio.current_time()
            progress = self._write_progress
            if progress is not None:
                self._write_progress = None
                progress.set()

    async def drain(self) -> None:
        """Wait until every queued frame has been written (or the connection closed)."""
        while not self.closed and (self._out or not self._idle.is_set()):
            await self._idle.wait()
            await trio.lowlevel.checkpoint()

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response (``timeout`` <= 0: no limit).

        Raises RemotingTimeoutError, RemotingConnectError, RemotingSendRequestError.
        """
        if self._out_bytes > HIGH_WATER:
            await self._drained.wait()
        pending = _Pending()
        self._pending[cmd.opaque] = pending
        try:
            self._enqueue(cmd)
            if timeout <= 0:
                await pending.event.wait()
            elif self._nursery is None:  # run() not started: no expiry task
                with trio.move_on_after(timeout):
                    await pending.event.wait()
            else:
                deadline = trio.current_time() + timeout
                heapq.heappush(self._deadlines, (deadline, cmd.opaque, pending))
                if deadline < self._expiry_at:
                    self._expiry_at = deadline
                    wake = self._expiry_wake
                    if wake is not None:
                        wake.set()
                await pending.event.wait()
        finally:
            pending.done = True
            self._pending.pop(cmd.opaque, None)
            deadlines = self._deadlines
            while deadlines and deadlines[0][2].done:
                heapq.heappop(deadlines)
        if pending.response is not None:
            return pending.response
        if self.closed:
            reason = f": {self.close_reason}" if self.close_reason else ""
            raise RemotingConnectError(f"connection to {self.remote_addr} closed{reason}")
        raise RemotingTimeoutError(
            f"no response from {self.remote_addr} within {timeout:.3f}s "
            f"({code_name(cmd.code, False)})"
        )

    async def _expire_requests(self) -> None:
        """Wake each invoke() whose deadline passed without a response."""
        deadlines = self._deadlines
        while True:
            now = trio.current_time()
            while deadlines and (deadlines[0][2].done or deadlines[0][0] <= now):
                _, _, pending = heapq.heappop(deadlines)
                if not pending.done:
                    pending.event.set()  # no response: invoke() raises the timeout
            self._expiry_at = deadlines[0][0] if deadlines else math.inf
            wake = self._expiry_wake = trio.Event()
            with trio.move_on_at(self._expiry_at):
                await wake.wait()

    async def invoke_oneway(self, cmd: RemotingCommand) -> None:
        cmd.flag |= 0x2
        if self._out_bytes > HIGH_WATER:
            await self._drained.wait()
        self._enqueue(cmd)

    # ---- receiving -----------------------------------------------------------

    async def _reader(self) -> None:
        stream = self.stream
        decoder = self._decoder
        raw = self._raw
        while True:
            await self._wait_for_room()
            size = self._chunk()
            try:
                if raw is not None:
                    data: bytes | bytearray = await self._receive_raw(raw, size)
                else:
                    data = await stream.receive_some(size)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                self._log.debug("connection read failed", error=str(exc))
                if raw is None and isinstance(exc, trio.BrokenResourceError):
                    self.close_reason = describe_tls_failure(exc)  # e.g. a TLS alert
                return
            if not data:
                return
            now = self.last_read = trio.current_time()
            if self._busy_poll is not None:
                self._busy_poll.touch()
            try:
                frames = decoder.feed(data)
            except ProtocolError as exc:
                self._log.warning("protocol error, closing connection", error=str(exc))
                return
            buffered, held_before = decoder.buffered, self._buffered
            if buffered != held_before:
                self._account_buffered(buffered)
            if frames:  # its frame is complete: another's turn
                if self._budget is not None:
                    self._budget.finished(self)
                if not self.authenticated:
                    pre = self._pre_budget
                    if pre is not None:
                        pre.finished(self)
            if frames or not held_before:
                self._judged = False  # the frame held in part (if any) is a new one
            if not buffered:
                self.partial_since = None
            elif self.partial_since is None or frames:
                self.partial_since = now  # a new frame started
            received_at = slice_start = time.perf_counter()
            stop = False
            self._batching = True
            try:
                for i, payload in enumerate(frames, 1):
                    if self._after:  # the last frame's: done before the next is seen
                        self._run_after()
                    if self.closed:  # its close callbacks ran: take no more requests
                        return
                    if not self._handle_frame(payload, received_at):
                        stop = True
                        break
                    if (i % YIELD_EVERY == 0 or self._must_wait()
                            or time.perf_counter() - slice_start > YIELD_AFTER_S):
                        # let the writer and other connections go on before the rest
                        self._flush_batch()
                        await self._wait_for_room()
                        await trio.lowlevel.checkpoint()
                        if self.closed:
                            return
                        slice_start = time.perf_counter()
                        self._batching = True
            finally:
                self._flush_batch()
            if not stop and buffered and not self.authenticated and not self._judged:
                stop = not self._judge_partial()  # before its body is read
            if stop:
                if self._linger:
                    await self._linger_then_close()
                return

    @staticmethod
    async def _receive_raw(raw: Any, size: int = RECEIVE_CHUNK) -> bytes:
        """``receive_some`` on the plain socket: what trio's stream does, less
        its wrappers (a tenth of a small request's cost). Bytes ready at once
        are taken after a checkpoint; otherwise it waits for the socket."""
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            data: bytes = raw.recv(size)
        except BlockingIOError:
            pass
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()  # bytes taken are never lost
            return data
        while True:
            await trio.lowlevel.wait_readable(raw)
            try:
                data = raw.recv(size)
            except BlockingIOError:
                continue
            return data

    def _handle_frame(self, payload: bytes, received_at: float = 0.0) -> bool:
        """Handle one frame; False means the connection must close."""
        codec = self.codec
        if codec is None:
            codec = self.codec = detect(payload)
            if codec.name != "msgpack":
                self._log.debug("peer speaks another wire format", codec=codec.name)
        try:
            # bounded whatever the bytes (protocol/codecs/base.py MAX_HEADER_BYTES):
            # the frame is read once, and a refusal says which request to answer
            cmd = codec.decode(payload)
        except MalformedRequestError as exc:
            self._malformed += 1
            if self._malformed == 1:  # one line per connection, whatever it sends
                self._log.warning("malformed request answered SYSTEM_ERROR",
                                  error=str(exc)[:300], codec=codec.name,
                                  code=exc.code, size=len(payload))
            bad = RemotingCommand(code=exc.code, opaque=exc.opaque, codec=codec)
            self.send_response(
                bad.response(ResponseCode.SYSTEM_ERROR, f"malformed request: {exc}")
            )
            return True
        except RemoteProtocolError as exc:
            self._log.warning("undecodable frame, closing connection", error=str(exc)[:300],
                              codec=codec.name, size=len(payload))
            return False
        if not self.authenticated and self._preauth is not None and not self._judged_on(
                self._preauth.judge_frame(self, cmd, self._pending.__contains__)):
            return False
        if cmd.is_response:
            pending = self._pending.get(cmd.opaque)
            if pending is not None:
                pending.response = cmd
                pending.event.set()
            return True
        self._dispatch(cmd, received_at)
        return True

    # ---- before authentication (protocol/trio/preauth.py) ----------------------------

    def _judge_partial(self) -> bool:
        """Judge the frame held in part on its length and header, before its
        body is read; False means the connection must close."""
        preauth = self._preauth
        assert preauth is not None
        decoder = self._decoder
        declared = decoder.declared
        if declared is None:
            return True
        head = decoder.head(HEADER_PEEK)
        if self.codec is None and head:
            self.codec = detect(head)
        judgement = preauth.judge_partial(self, declared, head, self.codec,
                                          self._pending.__contains__)
        self._judged = judgement.verdict is Verdict.READ  # not again until the next frame
        return self._judged_on(judgement)

    def _judged_on(self, judgement: Judgement) -> bool:
        """Act on a pre-auth verdict; False means the connection must close
        (after the answer of a refusal, ``_linger``)."""
        verdict = judgement.verdict
        if verdict is Verdict.TRUST:
            self.authenticate()
        elif verdict is Verdict.REFUSE:
            if judgement.reason:  # the ACL's refusals are logged by the ACL
                self._log.warning("request refused before authentication, closing connection",
                                  reason=judgement.reason[:300])
            if judgement.answer is not None:
                self.send_response(judgement.answer)
                self._linger = True
            return False
        elif verdict is Verdict.CLOSE:
            self._log.warning("connection closed before authentication",
                              reason=judgement.reason[:300])
            return False
        return True

    async def _linger_then_close(self) -> None:
        """After a refusal that closes the connection: its answer written, the
        peer told that nothing more is read (end of stream, where the stream
        has one), and what it still sends read and dropped for a moment
        (LINGER_S, LINGER_MAX_BYTES), so that the close does not reset the
        connection before the peer read the answer. Holds no frame meanwhile."""
        self._flush_batch()
        self._decoder.drop()
        self._account_buffered(0)
        self.partial_since = None
        stream = self.stream
        broken = (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError,
                  OSError)
        with trio.move_on_after(LINGER_S):
            await self.drain()
            send_eof = getattr(stream, "send_eof", None)
            try:
                if send_eof is not None:
                    await send_eof()
                dropped = 0
                while dropped < LINGER_MAX_BYTES:
                    data = await stream.receive_some(RECEIVE_CHUNK)
                    if not data:
                        return
                    dropped += len(data)
            except broken:
                return

    def _refuse_busy(self, cmd: RemotingCommand, remark: str) -> None:
        if not cmd.is_oneway:
            self.send_response(cmd.response(ResponseCode.SYSTEM_BUSY, remark))

    def _dispatch(self, cmd: RemotingCommand, received_at: float = 0.0) -> None:
        sync_handler, async_handler = self.handlers.lookup(cmd.code)
        if sync_handler is None and async_handler is None:
            if not cmd.is_oneway:
                self.send_response(cmd.response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    f"request code {cmd.code} not supported"))
            return
        if self.unanswered >= self.limits.max_in_flight:
            self._refuse_busy(cmd, f"too many requests in flight on this connection "
                                   f"({self.unanswered}); read the answers first")
            return
        lanes = self._lanes
        lane = lanes.lane(cmd.code) if lanes is not None else None
        started = time.perf_counter()
        # a oneway request cannot be told it was refused: it is run (its peer
        # is held back by the connection's back-pressure instead)
        if lanes is not None and lane is not None and not cmd.is_oneway:
            reason = lanes.refusal(lane, started, received_at or started)
            if reason is not None:
                self._refuse_busy(cmd, reason)
                return
        if not cmd.is_oneway:
            self._unanswered[cmd.opaque] = self._unanswered.get(cmd.opaque, 0) + 1
            self.unanswered += 1
        if sync_handler is not None:
            try:
                response = self._checked(cmd, sync_handler(self, cmd))
            except Exception as exc:
                response = self._error_response(cmd, exc)
            if lanes is not None and lane is not None:
                lanes.ran(lane, time.perf_counter() - started)
            if response is not None and not cmd.is_oneway:
                self.send_response(response)
        elif async_handler is not None:
            assert self._nursery is not None
            self._nursery.start_soon(self._run_async, async_handler, cmd)

    async def _run_async(self, handler: AsyncHandler, cmd: RemotingCommand) -> None:
        try:
            response = self._checked(cmd, await handler(self, cmd))
        except Exception as exc:
            response = self._error_response(cmd, exc)
        if response is not None and not cmd.is_oneway:
            self.send_response(response)

    @staticmethod
    def _checked(cmd: RemotingCommand, response: object) -> RemotingCommand | None:
        if response is None or isinstance(response, RemotingCommand):
            return response
        raise TypeError(f"the handler of {_request_name(cmd.code)} returned {type(response).__name__}")

    def _error_response(self, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        if isinstance(exc, ProtocolError):
            remark = f"bad request: {exc}"
        else:
            self._log.exception(
                "request handler failed", code=_request_name(cmd.code)
            )
            remark = f"{type(exc).__name__}: {exc}"
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark)


def _request_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)
