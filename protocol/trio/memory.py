"""Giving freed memory back to the system.

CPython frees large objects (request and response buffers) with the C
allocator, which keeps freed heap pages for reuse; after a burst (a client
that made the broker hold hundreds of MiB) the process would stay at its
peak. ``trim_free_memory`` asks glibc to return what is free (malloc_trim);
elsewhere it does nothing. It can take a few milliseconds on a large heap:
call it from a worker thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return libc


def trim_free_memory() -> bool:
    """Return free heap memory to the system; True when glibc was asked."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def rss_bytes(pid: int | str = "self") -> int | None:
    """Resident set size of a process (Linux /proc), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
