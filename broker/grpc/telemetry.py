"""What the broker sends a gRPC client unasked on its Telemetry stream.

A client's Telemetry call is the only way to reach it (RocketMQ 5's proxy:
GrpcClientChannel). Each stream has a ``TelemetryOutbox``: a bounded queue of
commands (``OUTBOX_CAPACITY``) that a task of the stream writes out in order.
``offer`` never waits: a full or closed outbox takes nothing and says so, so
that a client which reads nothing makes the broker skip it (a transaction
check is then asked again on a later pass) instead of queueing without bound.
The stream's end closes its outbox; the client's session forgets it
(broker/grpc/clients.py ``detach``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
from google.protobuf.message import Message

OUTBOX_CAPACITY = 64


class TelemetryOutbox:
    def __init__(self, capacity: int = OUTBOX_CAPACITY) -> None:
        self._send, self._receive = trio.open_memory_channel[bytes](capacity)
        self.capacity = capacity
        self.closed = False
        self.sent = 0  # commands written to the stream
        self.refused = 0  # offers refused: full or closed

    def has_room(self) -> bool:
        return not self.closed and \
            self._send.statistics().current_buffer_used < self.capacity

    def offer(self, command: Message) -> bool:
        """Queue ``command`` for the stream without waiting; False (nothing
        queued) when the outbox is full or closed."""
        if self.closed:
            self.refused += 1
            return False
        try:
            self._send.send_nowait(command.SerializeToString())
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self.refused += 1
            return False
        return True

    async def pump(self, write: Callable[[bytes], Awaitable[None]]) -> None:
        """Write the queued commands out, in order, until the outbox closes."""
        async with self._receive:
            async for payload in self._receive:
                await write(payload)
                self.sent += 1

    def close(self) -> None:
        """Nothing more is taken (the stream ended, or the client left)."""
        self.closed = True
        self._send.close()


__all__ = ["OUTBOX_CAPACITY", "TelemetryOutbox"]
