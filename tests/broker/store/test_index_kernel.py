"""broker/store/index_kernel.py, the index's per-key loop written for Cython: run as
plain Python and compiled (deploy/speedups.py), each compared with the reference
loop in index_file.py; the broker's choice of the compiled one."""

from __future__ import annotations

import hashlib
import importlib
import random
import struct
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.store import index_file, index_kernel
from broker.store.index_file import IndexFile, compiled_kernel, put_hashes_loop
from protocol.speedups import NO_SPEEDUPS_ENV

Loop = Callable[..., tuple[bytearray, int, int]]

COMPILED = compiled_kernel()
KERNELS: list[Any] = [pytest.param(index_kernel.put_hashes, id="plain-python")]
if COMPILED is not None:
    KERNELS.append(pytest.param(COMPILED, id="compiled"))
BEGIN = 1_795_780_000_000


def run(loop: Loop, keys: list[tuple[int, int, int]], table: bytearray, count: int,
        slots: int) -> tuple[bytes, int, int, bytes, bytes]:
    """``loop`` on copies of ``table`` and a fresh dirty map: everything it gives and leaves."""
    t = bytearray(table)
    dirty = bytearray((slots * 4 >> 12) + 1)
    entries, nxt, new_slots = loop(keys, t, dirty, slots, count, BEGIN)
    return bytes(entries), nxt, new_slots, bytes(t), bytes(dirty)


def batches(rnd: random.Random, slots: int) -> list[list[tuple[int, int, int]]]:
    out = []
    for n in (1, 2, 32, 200):
        ms = BEGIN + rnd.randrange(0, 10_000_000)
        out.append([(rnd.getrandbits(31), rnd.getrandbits(40), ms + rnd.choice((0, 0, 1500)))
                    for _ in range(n)])
    # the edges: hash 0 and the largest, collisions in one batch (few slots), time
    # before the file began and past what 4 bytes of seconds hold, a negative offset
    out.append([(0, 1, BEGIN), (2**31 - 1, 2, BEGIN - 5_000), (7 * slots, 3, BEGIN),
                (7 * slots, 4, BEGIN + 2**40), (5, -(2**40), BEGIN + 999)])
    return out


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("slots", [7, 1024, 5000])
def test_same_as_the_reference_loop(kernel: Loop, slots: int) -> None:
    rnd = random.Random(slots)
    table = bytearray(slots * 4)
    # slots already holding entries: live ones, stale ones (>= count) and
    # negative ones (top bit set), which the reference reads as empty
    for s in range(0, slots, 3):
        struct.pack_into(">i", table, s * 4, rnd.choice((1, 5, 40, 10**6, -7)))
    count = 50
    for keys in batches(rnd, slots):
        want = run(put_hashes_loop, keys, table, count, slots)
        got = run(kernel, keys, table, count, slots)
        assert got == want
        table = bytearray(want[3])
        count = want[1]


@pytest.mark.parametrize("kernel", KERNELS)
def test_out_of_range_values_raise(kernel: Loop) -> None:
    table = bytearray(64)
    with pytest.raises((OverflowError, struct.error)):
        run(kernel, [(2**31, 1, BEGIN)], table, 1, 16)  # a hash over 4 bytes
    with pytest.raises((OverflowError, struct.error)):
        run(kernel, [(1, 1, BEGIN)], table, 2**31, 16)  # an entry number over 4 bytes
    with pytest.raises((OverflowError, struct.error)):
        run(kernel, [(1, 2**63, BEGIN)], table, 1, 16)  # an offset over 8 bytes
    with pytest.raises((ValueError, IndexError, struct.error)):
        run(kernel, [(15, 1, BEGIN)], bytearray(8), 1, 16)  # a table too short


@pytest.mark.parametrize("use_kernel", [True, False])
def test_index_files_written_the_same_either_way(tmp_path: Path, use_kernel: bool) -> None:
    """The same keys into two index files, one with the loop the broker uses
    here and one with the reference: the same bytes on disk and the same answers."""
    rnd = random.Random(7)
    keys = [(f"key-{rnd.randrange(500)}", 1000 + 97 * i, BEGIN + 40 * i) for i in range(3000)]
    files = []
    for name, kernel_on in (("a", use_kernel), ("b", False)):
        f = IndexFile(tmp_path / name, 1000, 4000)
        f.use_kernel = kernel_on
        for i in range(0, len(keys), 32):
            assert f.put_keys(keys[i:i + 32]) == len(keys[i:i + 32])
        f.flush()
        files.append(f)
    a, b = files
    assert a.select_phy_offsets("key-3", 100, 0, 2**62) == b.select_phy_offsets(
        "key-3", 100, 0, 2**62)
    assert a.select_phy_offsets("key-3", 100, 0, 2**62)  # the key is there
    a.close()
    b.close()
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_the_broker_takes_the_compiled_loop_only_when_current(
        monkeypatch: pytest.MonkeyPatch) -> None:
    source = Path(index_file.__file__).with_name("index_kernel.py").read_bytes()
    current = hashlib.sha256(source).hexdigest()

    def fake(sha: str) -> Callable[[str], types.ModuleType]:
        mod = types.ModuleType("fake")
        mod.SOURCE_SHA = sha  # type: ignore[attr-defined]
        mod.put_hashes = put_hashes_loop  # type: ignore[attr-defined]
        return lambda name: mod

    monkeypatch.delenv(NO_SPEEDUPS_ENV, raising=False)
    monkeypatch.setattr(importlib, "import_module", fake(current))
    assert compiled_kernel() is put_hashes_loop
    monkeypatch.setattr(importlib, "import_module", fake("0" * 64))  # a stale build
    assert compiled_kernel() is None
    monkeypatch.setattr(importlib, "import_module", fake(current))
    monkeypatch.setenv(NO_SPEEDUPS_ENV, "1")  # turned off
    assert compiled_kernel() is None

    def missing(name: str) -> types.ModuleType:
        raise ImportError(name)

    monkeypatch.delenv(NO_SPEEDUPS_ENV)
    monkeypatch.setattr(importlib, "import_module", missing)  # never built
    assert compiled_kernel() is None
