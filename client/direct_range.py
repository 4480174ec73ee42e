"""Read a queue range over a blocking socket in the calling thread.

``PullConsumer.read_range`` (``client.blocking``) pulls in the client's loop
thread and hands the chunks to the caller's thread; a reader that also works
on every record it is handed (the Spark source builds Arrow batches) then runs
two Python threads that take turns with one interpreter, and each costs about
twice what it costs alone. ``DirectRangeReader`` does the same read with no
second thread: it keeps ``in_flight`` pulls out on a connection of its own
(plain or TLS, requests signed when the consumer has credentials) and reads
their answers only when the caller asks for the next chunks, so the broker
answers while the caller works. Which pulls to send and what their answers
mean is ``client.range_reader.RangePlan``, the same rules as ``read_range``.

The consumer it comes from (``client.blocking.PullConsumer.read_range_here``)
gives it the broker's address from the routes (the master, else a slave),
its group, credentials and TLS settings. It follows no redirect to a slave
(the broker's ``suggestWhichBrokerId``): the range is read where it started.
Every pull has ``timeout`` seconds of the reader's waiting: the time the
caller spends between asking for chunks does not count (the answers may have
been waiting in the socket all along). A pull that takes longer, a connection
that fails and an answer that is not a pull's fail the pulls out, and
iteration raises MQClientError (MQBrokerError for a broker's refusal) after
the chunks finished before.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

from client.consumer_api import pull_request
from client.credentials import AclCredentials
from client.errors import MQBrokerError, MQClientError
from client.pull_result import PULL_STATUS_BY_CODE
from client.range_reader import (
    DEFAULT_IN_FLIGHT,
    OffsetMoved,
    PlannedPull,
    RangeChunk,
    RangePlan,
    skip_to_min,
)
from client.subscription import SubscriptionData
from protocol.acl import sign_request
from protocol.command import RemotingCommand
from protocol.errors import ProtocolError
from protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame
from protocol.headers import PullMessageResponseHeader
from protocol.message import MessageQueue
from protocol.trio.client import split_addr
from protocol.trio.tls import ClientTls, TlsConfigError

RECV_SIZE = 1 << 20


class PullLink:
    """One blocking connection to a broker for pipelined PULL_MESSAGEs.

    ``send`` writes a request; ``receive(deadline)`` reads what has come and
    returns the responses in it (waiting until one does or ``deadline``, a
    value of ``clock``, ``time.monotonic`` by default, passes: then MQClientError). Connection
    errors raise MQClientError; the link is unusable then."""

    def __init__(self, addr: str, *, connect_timeout: float = 3.0,
                 tls: ClientTls | None = None, credentials: AclCredentials | None = None,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.addr = addr
        self.clock = clock
        self.send_timeout = connect_timeout
        self.credentials = credentials
        self._decoder = FrameDecoder(max_frame_size)
        self._max_frame_size = max_frame_size
        try:
            host, port = split_addr(addr)
        except ValueError as exc:
            raise MQClientError(f"bad broker address: {exc}") from exc
        sock: socket.socket | None = None
        try:
            context = tls.context() if tls is not None else None
            sock = socket.create_connection((host, port), timeout=connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                sock = context.wrap_socket(
                    sock, server_hostname=host if context.check_hostname else None)
        except TlsConfigError as exc:
            raise MQClientError(str(exc)) from exc
        except ssl.SSLError as exc:
            if sock is not None:
                sock.close()
            raise MQClientError(f"TLS handshake with {addr} failed: {exc} (does the "
                                "server have TLS enabled?)") from exc
        except OSError as exc:
            if sock is not None:
                sock.close()
            raise MQClientError(f"connect to {addr} failed: {exc}") from exc
        self.sock: socket.socket | None = sock

    def _open(self) -> socket.socket:
        if self.sock is None:
            raise MQClientError(f"the connection to {self.addr} is closed")
        return self.sock

    def send(self, cmd: RemotingCommand) -> None:
        cred = self.credentials
        if cred is not None and cred.access_key:
            cmd.ext_fields = sign_request(cmd.ext_fields or {}, cmd.body, cmd.code,
                                          cred.access_key, cred.secret_key,
                                          cred.security_token)
        sock = self._open()
        try:
            frame = encode_frame(cmd.encode(), self._max_frame_size)
            sock.settimeout(self.send_timeout)  # a peer that stops reading fails the send
            sock.sendall(frame)
        except (OSError, ProtocolError) as exc:
            self.close()
            raise MQClientError(f"pull from {self.addr} failed: {exc}") from exc

    def receive(self, deadline: float) -> list[RemotingCommand]:
        sock = self._open()
        while True:
            left = deadline - self.clock()
            if left <= 0:
                self.close()
                raise MQClientError(f"pull from {self.addr} timed out")
            try:
                sock.settimeout(left)
                data = sock.recv(RECV_SIZE)
            except TimeoutError:
                continue  # the deadline check above raises
            except OSError as exc:
                self.close()
                raise MQClientError(f"pull from {self.addr} failed: {exc}") from exc
            if not data:
                self.close()
                raise MQClientError(f"pull from {self.addr} failed: the broker closed "
                                    "the connection")
            try:
                payloads = self._decoder.feed(data)
                commands = [RemotingCommand.decode(p) for p in payloads]
            except ProtocolError as exc:
                self.close()
                raise MQClientError(f"bad response from {self.addr}: {exc}") from exc
            if commands:
                return commands

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()


class DirectRangeReader:
    """Offsets ``[start, end)`` of ``mq`` read over ``link`` in the calling
    thread: iterate for lists of undecoded RangeChunks in offset order (as
    ``client.blocking.RangeReader``); close it (or use ``with``) to stop
    early. ``reached`` is where reading stopped once iteration has ended.
    ``on_offset_moved`` runs in the calling thread."""

    def __init__(self, link: PullLink, group: str, mq: MessageQueue, sub: SubscriptionData,
                 start: int, end: int, *, batch_size: int = 32,
                 in_flight: int = DEFAULT_IN_FLIGHT, timeout: float = 3.0,
                 on_offset_moved: OffsetMoved = skip_to_min) -> None:
        if timeout <= 0:
            raise MQClientError(f"timeout must be positive, got {timeout}")
        try:
            self.plan = RangePlan(start, end, batch_size=batch_size, in_flight=in_flight,
                                  on_offset_moved=on_offset_moved)
        except ValueError as exc:
            raise MQClientError(str(exc)) from exc
        self.link = link
        self.group = group
        self.mq = mq
        self.sub = sub
        self.timeout = timeout
        self.reached: int | None = None
        self._closed = False
        # when chunks were last handed to the caller: the time until it asks
        # again is not counted against the pulls out (their answers may have
        # been waiting in the socket all along)
        self._handed_at: float | None = None
        # opaque of each request out -> (its pull, when it times out)
        self._out: dict[int, tuple[PlannedPull, float]] = {}

    def _send(self, pulls: list[PlannedPull]) -> None:
        for pull in pulls:
            cmd = pull_request(self.group, self.mq, self.sub, pull.offset, pull.max_nums)
            self._out[cmd.opaque] = (pull, self.link.clock() + self.timeout)
            try:
                self.link.send(cmd)
            except MQClientError as exc:
                self._lost(exc)
                return

    def _lost(self, exc: Exception) -> None:
        """The connection failed: every pull out fails with ``exc``."""
        self._out.clear()
        self.plan.fail_all(exc)

    def _receive(self) -> None:
        if not self._out:  # cannot happen while the plan waits on a pull
            self._lost(MQClientError("no pull out and the range not read"))
            return
        deadline = min(d for _, d in self._out.values())
        try:
            responses = self.link.receive(deadline)
        except MQClientError as exc:
            self._lost(exc)
            return
        for response in responses:
            if not response.is_response:
                continue  # a request from the broker: none is expected here
            entry = self._out.pop(response.opaque, None)
            if entry is None:
                continue  # a pull forgotten after the read ended
            pull = entry[0]
            status = PULL_STATUS_BY_CODE.get(response.code)
            if status is None:
                self.plan.fail(pull.pull_id, MQBrokerError(
                    response.code, response.remark, self.link.addr,
                    context=f"pull from {self.mq}"))
                continue
            try:
                rh = PullMessageResponseHeader.from_fields(response.ext_fields)
            except ProtocolError as exc:
                self.plan.fail(pull.pull_id, MQClientError(
                    f"bad pull response from {self.link.addr}: {exc}"))
                continue
            self.plan.answer(pull.pull_id, status, rh.next_begin_offset, rh.min_offset,
                             rh.max_offset, response.body if response.body else b"")

    def __iter__(self) -> Iterator[list[RangeChunk]]:
        return self

    def __next__(self) -> list[RangeChunk]:
        plan = self.plan
        if self._handed_at is not None:
            away = self.link.clock() - self._handed_at
            self._handed_at = None
            if away > 0:
                self._out = {op: (pull, due + away) for op, (pull, due) in self._out.items()}
        while True:
            if self._closed:
                raise StopIteration
            try:
                ready = plan.chunks()
            except BaseException:
                self.reached = plan.reached
                self.close()
                raise
            # the next pulls go out before the caller works on these chunks
            self._send(plan.pulls())
            if ready:
                self._handed_at = self.link.clock()
                return ready
            if plan.done:
                self.reached = plan.reached
                self.close()
                raise StopIteration
            self._receive()

    def close(self) -> None:
        """Stop the read and close its connection (answers still to come are
        not read). Idempotent; iteration ends."""
        self._closed = True
        self._out.clear()
        self.link.close()

    def __enter__(self) -> DirectRangeReader:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
