"""Client-side unique message ids (the ``UNIQ_KEY`` property).

Layout, 16 bytes shown as 32 upper-case hex digits, as RocketMQ's
MessageClientIDSetter: IPv4 (4) + pid (2) + random (4) | ms since the start of
the month (4) + counter (2).

The address is handed in: finding this host's is the client's (client/uniq_id.py, which
holds the process's generator).
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import random
import socket
import struct
import time


def _month_start_ms(now_ms: int) -> int:
    now = _dt.datetime.fromtimestamp(now_ms / 1000)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


class UniqIdGenerator:
    """Generator of ``UNIQ_KEY`` values; safe to share between threads
    (``next()`` on an itertools counter is atomic under the GIL)."""

    def __init__(self, ip: str) -> None:
        """``ip``: the IPv4 address (dotted) the ids start with."""
        prefix = socket.inet_aton(ip) + struct.pack(">H", os.getpid() & 0xFFFF)
        prefix += random.getrandbits(32).to_bytes(4, "big")
        self._prefix = prefix.hex().upper()
        self._counter = itertools.count(random.getrandbits(16))
        self._month_start = 0
        self._next_check = 0
        # (ms, the id's first 28 digits then): formatted once per millisecond;
        # one tuple, so a thread never pairs one ms with another's digits
        self._head: tuple[int, str] = (-1, "")

    def _time_head(self) -> str:
        """The id's first 28 digits for this millisecond."""
        now = time.time_ns() // 1_000_000
        ms, head = self._head
        if now != ms:
            if now >= self._next_check:
                self._month_start = _month_start_ms(now)
                self._next_check = now + 3_600_000  # re-check the month every hour
            head = f"{self._prefix}{(now - self._month_start) & 0x7FFFFFFF:08X}"
            self._head = (now, head)
        return head

    def next_id(self) -> str:
        c = next(self._counter)
        return f"{self._time_head()}{_HEX2[(c >> 8) & 0xFF]}{_HEX2[c & 0xFF]}"

    def next_ids(self, n: int) -> list[str]:
        """``n`` ids at once (a batch's): the time part read once."""
        head = self._time_head()
        hex2 = _HEX2
        return [f"{head}{hex2[(c >> 8) & 0xFF]}{hex2[c & 0xFF]}"
                for c in itertools.islice(self._counter, n)]


# the counter's 4 digits from two look-ups (a format spec per id costs more)
_HEX2 = tuple(f"{i:02X}" for i in range(256))
