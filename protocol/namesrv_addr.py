"""The name-server address list (RocketMQ's ``namesrvAddr``): ``"a:9876;b:9876"``.

Name servers never talk to each other: a broker registers with every one of
the list, and a client asks one at a time (``NamesrvSelector``), so any one
of them can die without the cluster noticing. The list may also come from the
``NAMESRV_ADDR`` environment variable, as in RocketMQ (MixAll.NAMESRV_ADDR_ENV);
an address given explicitly (config file, flag, argument) wins over it.

No I/O of its own, no clock: callers pass the environment in when they want,
and ``ask_in_turn`` awaits the request the caller gives it.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

NAMESRV_ADDR_ENV = "NAMESRV_ADDR"

_SEPARATORS = re.compile(r"[;,]")
_random = random.SystemRandom()  # a start no seeded ``random`` in the process can fix


def split_namesrv_addr(text: str) -> list[str]:
    """``"a:1; b:2;"`` -> ``["a:1", "b:2"]``: split on ``;`` (RocketMQ's separator;
    ``,`` is taken too), blanks dropped. The addresses are not validated here."""
    return [a.strip() for a in _SEPARATORS.split(text) if a.strip()]


def namesrv_addr_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The ``NAMESRV_ADDR`` environment variable, or None when unset or blank."""
    value = (os.environ if environ is None else environ).get(NAMESRV_ADDR_ENV, "")
    return value.strip() or None


def resolve_namesrv_addr(explicit: str | None, default: str | None = None,
                         environ: Mapping[str, str] | None = None) -> str | None:
    """The name-server list to use: ``explicit`` when given (not None), else
    ``NAMESRV_ADDR``, else ``default``."""
    if explicit is not None:
        return explicit
    from_env = namesrv_addr_from_env(environ)
    return from_env if from_env is not None else default


class NamesrvSelector:
    """Which name server a client asks, as RocketMQ's NettyRemotingClient does:
    one chosen from a random start (so a fleet of clients spreads over the
    list), kept while it answers; when it fails (refused, lost, timed out) the
    next ones in the list are tried in turn, and the first that answers is kept.

        for addr in selector.candidates():
            try: answer = await ask(addr)
            except Unreachable: continue
            selector.answered(addr); return answer
        selector.none_answered()
    """

    __slots__ = ("addrs", "index")

    def __init__(self, addrs: Sequence[str], start: int | None = None) -> None:
        if not addrs:
            raise ValueError("no name server address")
        self.addrs = tuple(addrs)
        self.index = _random.randrange(len(self.addrs)) if start is None else start % len(addrs)

    @property
    def current(self) -> str:
        """The name server asked first."""
        return self.addrs[self.index]

    def candidates(self) -> list[str]:
        """Every address, the current one first, then the list's order from it."""
        i = self.index
        return [*self.addrs[i:], *self.addrs[:i]]

    def answered(self, addr: str) -> bool:
        """``addr`` answered: keep asking it. True when that is a change."""
        index = self.addrs.index(addr)
        changed = index != self.index
        self.index = index
        return changed

    def none_answered(self) -> None:
        """Every one failed: the next request starts one further on."""
        self.index = (self.index + 1) % len(self.addrs)


class NoNamesrvAnswered(Exception):
    """Every name server of the list failed; ``errors`` says how, one per address."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


async def ask_in_turn(selector: NamesrvSelector, ask: Callable[[str], Awaitable[T]],
                      failure: type[Exception] | tuple[type[Exception], ...],
                      log: Any = None) -> tuple[str, T]:
    """``await ask(addr)`` for the selector's current name server, then the next
    ones while it raises ``failure``; the first that answers is kept. Returns
    (address, answer). Raises NoNamesrvAnswered when none does. With a
    structlog ``log``: each failure a warning, a change of name server info."""
    errors: list[str] = []
    for addr in selector.candidates():
        try:
            answer = await ask(addr)
        except failure as exc:
            errors.append(f"{addr}: {exc}")
            if log is not None:
                log.warning("name server request failed", addr=addr, error=str(exc))
            continue
        if selector.answered(addr) and log is not None:
            log.info("name server switched", addr=addr, failed=len(errors))
        return addr, answer
    selector.none_answered()
    raise NoNamesrvAnswered(errors)
