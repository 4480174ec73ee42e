"""UNIQ_KEY ids (protocol.message_id): RocketMQ's layout, the time part formatted
once per millisecond, and unique under threads."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest

from protocol import message_id
from protocol.message_id import UniqIdGenerator, _month_start_ms


def fields(uid: str) -> tuple[str, int, int]:
    """(prefix, ms since the month's start, counter) of an id."""
    assert len(uid) == 32 and uid == uid.upper() and int(uid, 16) >= 0
    return uid[:20], int(uid[20:28], 16), int(uid[28:], 16)


def test_layout_time_and_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    now_ms = 1_764_000_000_123  # late November 2025
    clock = [now_ms * 1_000_000]
    monkeypatch.setattr(message_id.time, "time_ns", lambda: clock[0])
    gen = UniqIdGenerator("10.0.0.7")
    a, b = gen.next_id(), gen.next_id()
    (pa, ta, ca), (pb, tb, cb) = fields(a), fields(b)
    assert pa == pb and ta == tb == now_ms - _month_start_ms(now_ms)
    # the address handed in, then the pid's low 16 bits
    assert pa[:12] == f"0A000007{os.getpid() & 0xFFFF:04X}"
    assert cb == (ca + 1) & 0xFFFF
    clock[0] += 5_000_000  # 5 ms later: the time part follows
    pc, tc, cc = fields(gen.next_id())
    assert pc == pa and tc == ta + 5 and cc == (cb + 1) & 0xFFFF
    clock[0] += 40 * 24 * 3_600_000 * 1_000_000  # into another month (past the hourly check)
    later = (clock[0] // 1_000_000)
    assert fields(gen.next_id())[1] == later - _month_start_ms(later)


def ids_from_threads(make: list[Callable[[], list[str]]], rounds: int) -> list[str]:
    """Every id made by ``rounds`` calls of each ``make`` function, one thread each."""
    out: list[list[str]] = [[] for _ in make]

    def run(mine: list[str], fn: Callable[[], list[str]]) -> None:
        for _ in range(rounds):
            mine.extend(fn())

    threads = [threading.Thread(target=run, args=(o, fn)) for o, fn in zip(out, make, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [i for o in out for i in o]


def test_ids_are_unique_across_threads() -> None:
    gen = UniqIdGenerator("10.0.0.7")
    ids = ids_from_threads([lambda: [gen.next_id()]] * 4, 5000)
    # 20,000 ids: the 16-bit counter cannot wrap, so none repeats
    assert len(set(ids)) == len(ids) == 20_000


def test_next_ids_is_next_id_n_times(monkeypatch: pytest.MonkeyPatch) -> None:
    now_ms = 1_764_000_000_123
    monkeypatch.setattr(message_id.time, "time_ns", lambda: now_ms * 1_000_000)
    gen = UniqIdGenerator("10.0.0.7")
    first = gen.next_id()
    batch = gen.next_ids(300)  # the counter passes a multiple of 256 on the way
    last = gen.next_id()
    ids = [first, *batch, last]
    assert len(batch) == 300 and gen.next_ids(0) == []
    parts = [fields(i) for i in ids]
    assert {p[:2] for p in parts} == {parts[0][:2]}
    counters = [p[2] for p in parts]
    assert counters == [(counters[0] + k) & 0xFFFF for k in range(302)]


def test_ids_and_batches_are_unique_across_threads() -> None:
    gen = UniqIdGenerator("10.0.0.7")

    def batch() -> list[str]:
        return gen.next_ids(10)

    def singles() -> list[str]:
        return [gen.next_id() for _ in range(10)]

    ids = ids_from_threads([batch, singles, batch, singles], 250)
    assert len(set(ids)) == len(ids) == 10_000
