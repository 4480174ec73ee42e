"""Dirty pages pushed to the disk a few at a time, ahead of an fsync.

A flush of the index writes its changed slot pages (4 KiB each, spread over
20 MB: a second of single sends dirties a page or two per message) and then
fdatasyncs the file: thousands of small writes queued on the device at once. A
SYNC_FLUSH send's commit-log fdatasync that comes meanwhile waits behind all
of them; with the index flush once a second, that was the 20-30 ms at the
p99.9 of single SYNC_FLUSH sends (3-5 ms with ``messageIndexEnable=false``).

``push`` hands the written ranges to the kernel in windows of at most
``step`` written bytes (``sync_file_range``: write them and wait for them),
so no more than a window's writes are ever queued ahead of a commit-log
fsync. The fdatasync after it then has the file's metadata and the disk's
cache left to do. Where ``sync_file_range`` is missing or refused, ``push``
stops and the fdatasync writes the rest as before.

``start`` only starts the writes of a range (``sync_file_range`` without
waiting): with ASYNC_FLUSH the broker starts the commit log's new bytes every
few ms (``writeBehindIntervalCommitLog``), so the kernel's work of handing a
flush interval's bytes to the disk (tens of ms of CPU for 60 MB) comes in small
pieces instead of all in the fsync, where it held a CPU away from the event
loop and the clients (see ``write_behind_range``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Iterable

import structlog

from broker.store.allocation import LogThrottle

log = structlog.get_logger("broker.store")
_refused = LogThrottle(60.0)
_start_refused = LogThrottle(60.0)

SYNC_FILE_RANGE_WAIT_BEFORE = 1
SYNC_FILE_RANGE_WRITE = 2
SYNC_FILE_RANGE_WAIT_AFTER = 4
_WRITE_AND_WAIT = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER

SyncRange = Callable[[int, int, int], None]  # (fd, offset, nbytes); raises OSError


def write_behind_range(wrote: int, flushed: int, started: int, least: int
                       ) -> tuple[int, int] | None:
    """The bytes of a file whose writes to start now, (start, end): those
    written (up to ``wrote``) past both the last fsync (``flushed``) and the
    last range started (``started``), once they are at least ``least``;
    else None."""
    start = max(flushed, started)
    if wrote - start < max(least, 1):
        return None
    return start, wrote


def windows(ranges: Iterable[tuple[int, int]], step: int) -> list[tuple[int, int]]:
    """Spans (start, end) that together cover ``ranges`` (ascending,
    non-overlapping ``(start, end)`` byte ranges), each holding at most
    ``step`` bytes of them; a range longer than ``step`` is cut. The gaps
    between ranges of one span cost nothing (their pages are clean)."""
    if step <= 0:
        raise ValueError("step must be positive")
    out: list[tuple[int, int]] = []
    span_start = span_end = -1
    held = 0
    for start, end in ranges:
        while start < end:
            if span_start >= 0 and held == step:
                out.append((span_start, span_end))
                span_start = -1
            if span_start < 0:
                span_start, held = start, 0
            take = min(end - start, step - held)
            held += take
            start += take
            span_end = start
    if span_start >= 0:
        out.append((span_start, span_end))
    return out


def _libc_sync_file_range(flags: int) -> SyncRange | None:
    """libc's ``sync_file_range`` with ``flags``, raising OSError; None where
    there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int

    def sync_range(fd: int, offset: int, nbytes: int) -> None:
        if fn(fd, offset, nbytes, flags) != 0:  # the GIL is released meanwhile
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return sync_range


SYNC_RANGE: SyncRange | None = _libc_sync_file_range(_WRITE_AND_WAIT)
START_RANGE: SyncRange | None = _libc_sync_file_range(SYNC_FILE_RANGE_WRITE)


def start(fd: int, offset: int, nbytes: int, start_range: SyncRange | None = None) -> bool:
    """Start the writes of ``nbytes`` of ``fd`` from ``offset`` without waiting
    for them; False where that is missing or refused (logged, rate-limited):
    the next fsync writes them as it would have."""
    fn = start_range or START_RANGE
    if fn is None:
        return False
    try:
        fn(fd, offset, nbytes)
    except OSError as exc:
        _start_refused(log, "starting writes ahead of the fsync refused; the fsync writes them",
                 level="warning", error=str(exc))
        return False
    return True


def push(fd: int, ranges: Iterable[tuple[int, int]], step: int,
         sync_range: SyncRange | None = None) -> int:
    """Write the pages of ``ranges`` of ``fd`` to the disk, a window of at
    most ``step`` bytes at a time, each waited for; returns how many windows.
    Stops at the first refusal (the fsync that follows writes the rest)."""
    sync = sync_range or SYNC_RANGE
    if sync is None:
        return 0
    done = 0
    for start, end in windows(ranges, step):
        try:
            sync(fd, start, end - start)
        except OSError as exc:
            _refused(log, "writeback in steps refused; the fsync writes the rest",
                     level="warning", error=str(exc))
            break
        done += 1
    return done
