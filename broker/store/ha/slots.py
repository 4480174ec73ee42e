"""The HA listener's connection slots (pure; the HA service owns the sockets).

A master has few slaves, so its HA port needs few connections: at most
``limit`` (haMaxConnections) are open at once, and at most ``max_pending`` of
them are still in their handshake (greeting, challenge, hello: not yet known
to be a slave). A connection past either bound takes the slot of one still in
its handshake, which is dropped: the oldest of the host holding the most such
connections (the new one counted). A host that floods the port with
connections that never complete a hello only ever drops its own, so it cannot
keep a real slave out; a slave's handshake takes one round trip. When every
open connection has passed its hello, a new one is refused (``refused`` counts
them): those are slaves the master accepted (with aclEnable, signed by an
admin account), and a stuck one is closed by the service once its sends make
no progress.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable


class Slot:
    """One open HA connection."""

    __slots__ = ("_slots", "_drop", "host", "seq", "pending", "closed")

    def __init__(self, slots: Slots, host: str, seq: int, drop: Callable[[], object]) -> None:
        self._slots = slots
        self._drop = drop
        self.host = host
        self.seq = seq  # the order connections came in
        self.pending = True  # still in its handshake: may be dropped for a newer one
        self.closed = False

    def established(self) -> None:
        """Its hello was accepted: it is no longer dropped for newer connections."""
        if self.pending and not self.closed:
            self.pending = False
            self._slots._forget(self)

    def close(self) -> None:
        """The connection ended (or was dropped); idempotent."""
        if not self.closed:
            self.closed = True
            if self.pending:
                self._slots._forget(self)
            self._slots.open -= 1


class Slots:
    def __init__(self, limit: int, max_pending: int) -> None:
        if limit <= 0 or max_pending <= 0:
            raise ValueError("HA connection bounds must be positive")
        self.limit = limit
        self.max_pending = max_pending
        self.open = 0
        self.pending = 0  # open connections still in their handshake
        # by host, the connections in their handshake, oldest first
        self._pending: dict[str, dict[Slot, None]] = {}
        self._seq = itertools.count()
        self.refused = 0  # connections refused at the bound
        self.dropped = 0  # connections in their handshake dropped for newer ones

    def take(self, host: str, drop: Callable[[], object]) -> Slot | None:
        """A slot for a new connection from ``host``, or None (refused: close
        it at once). ``drop()`` is called should this connection be dropped
        later, while still in its handshake, to make room for a newer one."""
        if self.open >= self.limit or self.pending >= self.max_pending:
            victim = self._victim(host)
            if victim is None:
                self.refused += 1
                return None
            victim.close()
            self.dropped += 1
            victim._drop()
        slot = Slot(self, host, next(self._seq), drop)
        self.open += 1
        self.pending += 1
        self._pending.setdefault(host, {})[slot] = None
        return slot

    def _victim(self, host: str) -> Slot | None:
        """The oldest connection in its handshake of the host holding the most
        (``host`` counted one more, for the new connection); of hosts holding
        as many, the one whose oldest came first."""
        best: Slot | None = None
        best_key = (0, 0)
        for h, slots in self._pending.items():
            oldest = next(iter(slots))
            key = (len(slots) + (h == host), -oldest.seq)
            if best is None or key > best_key:
                best, best_key = oldest, key
        return best

    def _forget(self, slot: Slot) -> None:
        slots = self._pending[slot.host]
        del slots[slot]
        if not slots:
            del self._pending[slot.host]
        self.pending -= 1
