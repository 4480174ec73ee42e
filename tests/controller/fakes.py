"""In-memory stand-ins for the controller's collaborators (no files, no sockets)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from controller.state_store import StateConflict, StateStoreError, Stored


class MemoryStore:
    """A StateStore in memory; ``fail`` (``fail_load``) makes saves (loads) raise
    StateStoreError."""

    def __init__(self) -> None:
        self.stored: Stored | None = None
        self.saves = 0
        self.fail: str | None = None
        self.fail_load: str | None = None

    async def load(self) -> Stored | None:
        await trio.lowlevel.checkpoint()
        if self.fail_load is not None:
            raise StateStoreError(self.fail_load)
        return self.stored

    async def save(self, data: bytes, expected: int) -> int:
        await trio.lowlevel.checkpoint()
        if self.fail is not None:
            raise StateStoreError(self.fail)
        current = self.stored.version if self.stored is not None else 0
        if current != expected:
            raise StateConflict(f"version {current}, not {expected}")
        self.stored = Stored(data, current + 1)
        self.saves += 1
        return current + 1

    async def aclose(self) -> None:
        return None


class NeverLeader:
    """A Leadership that campaigns for ever without being elected."""

    is_leader = False

    async def run(self, on_elected: Callable[[], Awaitable[None]],
                  on_lost: Callable[[], Awaitable[None]]) -> None:
        await trio.sleep_forever()


class SwitchLeader:
    """A Leadership a test turns on and off."""

    def __init__(self) -> None:
        self.is_leader = False
        self._elected: Callable[[], Awaitable[None]] | None = None
        self._lost: Callable[[], Awaitable[None]] | None = None

    async def run(self, on_elected: Callable[[], Awaitable[None]],
                  on_lost: Callable[[], Awaitable[None]]) -> None:
        self._elected, self._lost = on_elected, on_lost
        await trio.sleep_forever()

    async def elect(self) -> None:
        assert self._elected is not None
        self.is_leader = True
        await self._elected()

    async def lose(self) -> None:
        assert self._lost is not None
        self.is_leader = False
        await self._lost()
