"""The HA listener's connection slots (pure; the HA service owns the sockets).

A master has few slaves, so its HA port needs few connections: at most
``limit`` (haMaxConnections) are open at once, and at most ``max_pending`` of
them are still in their handshake (greeting, challenge, hello: not yet known
to be a slave). A connection past either bound takes the slot of the oldest
one still in its handshake, which is dropped: a flood of connections that
never complete a hello cannot keep a real slave out, since a slave's
handshake takes one round trip and it is then the newest. When every open
connection has passed its hello, a new one is refused (``refused`` counts
them): those are slaves the master accepted (with aclEnable, signed by an
admin account), and a stuck one is closed by the service once its sends make
no progress.
"""

from __future__ import annotations

from collections.abc import Callable


class Slot:
    """One open HA connection."""

    __slots__ = ("_slots", "_drop", "pending", "closed")

    def __init__(self, slots: Slots, drop: Callable[[], object]) -> None:
        self._slots = slots
        self._drop = drop
        self.pending = True  # still in its handshake: may be dropped for a newer one
        self.closed = False

    def established(self) -> None:
        """Its hello was accepted: it is no longer dropped for newer connections."""
        if self.pending and not self.closed:
            self.pending = False
            self._slots._pending.pop(self, None)

    def close(self) -> None:
        """The connection ended (or was dropped); idempotent."""
        if not self.closed:
            self.closed = True
            self._slots._pending.pop(self, None)
            self._slots.open -= 1


class Slots:
    def __init__(self, limit: int, max_pending: int) -> None:
        if limit <= 0 or max_pending <= 0:
            raise ValueError("HA connection bounds must be positive")
        self.limit = limit
        self.max_pending = max_pending
        self.open = 0
        self._pending: dict[Slot, None] = {}  # oldest first
        self.refused = 0  # connections refused at the bound
        self.dropped = 0  # connections in their handshake dropped for newer ones

    @property
    def pending(self) -> int:
        return len(self._pending)

    def take(self, drop: Callable[[], object]) -> Slot | None:
        """A slot for a new connection, or None (refused: close it at once).
        ``drop()`` is called should this connection be dropped later, while
        still in its handshake, to make room for a newer one."""
        if self.open >= self.limit or len(self._pending) >= self.max_pending:
            if not self._pending:
                self.refused += 1
                return None
            oldest = next(iter(self._pending))
            oldest.close()
            self.dropped += 1
            oldest._drop()
        slot = Slot(self, drop)
        self.open += 1
        self._pending[slot] = None
        return slot
