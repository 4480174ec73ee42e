"""Accepted connections whose peer has sent nothing yet, watched together.

A remoting server builds a connection's RemotingConnection (tasks, buffers,
TLS detection) only once its peer sends a first byte. Until then the socket
sits here: registered in one epoll set of the room's own, which is a single
file descriptor in trio's loop, so a silent connection costs one registration
and one dict entry, not a task of its own. ``run()`` hands each socket on when
it turns readable (data, EOF or an error) and closes those silent for longer
than ``timeout``.

Every entry has the same timeout, so accept order is deadline order: the
dict's insertion order gives the next to expire without a heap.

Linux only (``select.epoll``); ``AVAILABLE`` says whether it can be used.
"""

from __future__ import annotations

import math
import select
import socket
from collections.abc import Callable
from dataclasses import dataclass

import trio

AVAILABLE = hasattr(select, "epoll")
# most sockets handed on or expired per round of run(); the rest wait for the
# next round, so one round's work stays bounded
ROUND_LIMIT = 256


@dataclass(slots=True)
class Silent:
    sock: socket.socket
    peer: str
    host: str
    deadline: float


class WaitingRoom:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._epoll = select.epoll()
        self._by_fd: dict[int, Silent] = {}

    def __len__(self) -> int:
        return len(self._by_fd)

    def add(self, sock: socket.socket, peer: str, host: str, now: float) -> None:
        if self._epoll.closed:  # run() has ended: the server is stopping
            sock.close()
            return
        fd = sock.fileno()
        self._epoll.register(fd, select.EPOLLIN)  # EPOLLHUP and EPOLLERR come anyway
        self._by_fd[fd] = Silent(sock, peer, host, now + self.timeout)

    def _take(self, fd: int) -> Silent | None:
        entry = self._by_fd.pop(fd, None)
        if entry is not None:
            self._epoll.unregister(fd)
        return entry

    def ready(self) -> list[Silent]:
        """The sockets that turned readable (at most ROUND_LIMIT), taken out."""
        taken = []
        for fd, _events in self._epoll.poll(0, ROUND_LIMIT):
            entry = self._take(fd)
            if entry is not None:
                taken.append(entry)
        return taken

    def expired(self, now: float) -> list[Silent]:
        """The sockets silent past their deadline (at most ROUND_LIMIT), taken out."""
        due: list[int] = []
        for fd, entry in self._by_fd.items():
            if entry.deadline > now or len(due) >= ROUND_LIMIT:
                break
            due.append(fd)
        return [e for e in map(self._take, due) if e is not None]

    def next_deadline(self, now: float) -> float:
        """When run() must look again even if nothing turns readable: the
        oldest entry's deadline, or one timeout from now (an entry added
        later expires after that)."""
        for entry in self._by_fd.values():
            return entry.deadline
        return now + self.timeout if math.isfinite(self.timeout) else math.inf

    async def run(self, on_ready: Callable[[Silent], None],
                  on_expired: Callable[[Silent], None]) -> None:
        """Hand on readable sockets and expire silent ones until cancelled;
        then every socket still here is closed, and the epoll set."""
        try:
            while True:
                with trio.move_on_at(self.next_deadline(trio.current_time())):
                    await trio.lowlevel.wait_readable(self._epoll)
                for entry in self.ready():
                    on_ready(entry)
                for entry in self.expired(trio.current_time()):
                    on_expired(entry)
        finally:
            for entry in self._by_fd.values():
                entry.sock.close()
            self._by_fd.clear()
            self._epoll.close()
