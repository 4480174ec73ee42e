"""Where the controller keeps its state, and who among several controllers leads.

The controller's whole state (every broker name's replicas, master, epochs and
SyncStateSet) is small: it is saved as one blob, each change a new version.

- ``StateStore``: ``load`` the latest blob and its version; ``save`` a new blob
  only if the stored version is still ``expected`` (compare-and-swap), and
  return the new version. A local file store (one controller) writes temp +
  fsync + rename before returning; etcd compares the key's mod revision in a
  transaction. A save that returns has made the change durable: the
  controller answers only then.
- ``Leadership``: among several controller processes sharing one store, at
  most one leads at a time (etcd: a lease). ``run`` campaigns until elected,
  then calls ``on_elected``; ``on_lost`` when this process stops leading
  (lease lost, store unreachable past its TTL). A single controller with a file store
  leads from the start (``AlwaysLeader``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import trio


class StateConflict(Exception):
    """``save`` found another version than ``expected``: someone else changed
    the state (or this process is no longer the leader). Reload and retry."""


class StateStoreError(Exception):
    """The store cannot be read or written (with why); nothing was changed
    that the caller may count on."""


@dataclass(frozen=True, slots=True)
class Stored:
    data: bytes
    version: int  # > 0; grows with every save


class StateStore(Protocol):
    async def load(self) -> Stored | None:
        """The latest state, or None when nothing was ever saved."""
        ...

    async def save(self, data: bytes, expected: int) -> int:
        """Store ``data`` if the current version is ``expected`` (0: nothing
        saved yet); the new version. StateConflict when it is not."""
        ...

    async def aclose(self) -> None: ...


class Leadership(Protocol):
    async def run(self, on_elected: Callable[[], Awaitable[None]],
                  on_lost: Callable[[], Awaitable[None]]) -> None:
        """Campaign, lead, and campaign again after a loss, until cancelled
        (then leadership is given up at once: a lease is revoked)."""
        ...

    @property
    def is_leader(self) -> bool: ...


class AlwaysLeader:
    """One controller and a local file: it leads from the start."""

    def __init__(self) -> None:
        self._leader = False

    @property
    def is_leader(self) -> bool:
        return self._leader

    async def run(self, on_elected: Callable[[], Awaitable[None]],
                  on_lost: Callable[[], Awaitable[None]]) -> None:
        self._leader = True
        try:
            await on_elected()
            await trio.sleep_forever()
        finally:
            self._leader = False
